"""The base every config section derives from."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Section(BaseModel):
    """Base of every config section: camelCase aliases, snake_case accepted, typos rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
