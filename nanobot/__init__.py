"""nanobot: a small, fast, dependable personal AI assistant daemon."""

__version__ = "0.1.0"
