"""The base every config section derives from."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

HTTP_SCHEMES = ("http", "https")


class Section(BaseModel):
    """Base of every config section: camelCase aliases, snake_case accepted, typos rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


def endpoint_url(value: str, schemes: tuple[str, ...] = HTTP_SCHEMES) -> str:
    """An endpoint URL with one of `schemes` and a host, or "" (unset). `my-box:8000/v1` was taken
    for a path on port 80 of no host: requests, API key included, went to whatever listened on
    127.0.0.1:80."""
    value = value.strip()
    if not value:
        return ""
    try:
        parts = urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a URL ({exc})") from None
    if parts.scheme.lower() not in schemes or not host:
        example = f"{schemes[0]}://127.0.0.1:8000/v1" if schemes[0] == "http" else f"{schemes[0]}://host"
        raise ValueError(f"{value!r} is not a {' or '.join(s + '://' for s in schemes)} URL with a host "
                         f"(e.g. {example})")
    return value
