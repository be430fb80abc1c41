"""Configuration: schema, loading, paths."""

from nanobot.config.loader import ConfigError, load_config
from nanobot.config.schema import Config

__all__ = ["Config", "ConfigError", "load_config"]
