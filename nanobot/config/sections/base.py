"""The base every config section derives from."""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

HTTP_SCHEMES = ("http", "https")


class Section(BaseModel):
    """Base of every config section: camelCase aliases, snake_case accepted, typos rejected."""

    # infinity and NaN: `1e999` seconds crashed `service install` and made a hung gateway healthy
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", allow_inf_nan=False)


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
    except ValueError as exc:  # its text may quote a piece of a password ("… as 'Pa'")
        why = "" if "@" in value else f" ({exc})"
        raise ValueError(f"{_shown(value)!r} is not a URL{why}") from None
    if parts.scheme.lower() not in schemes or not host:
        example = f"{schemes[0]}://127.0.0.1:8000/v1" if schemes[0] == "http" else f"{schemes[0]}://host"
        raise ValueError(f"{_shown(value)!r} is not a {' or '.join(s + '://' for s in schemes)} URL with a host "
                         f"(e.g. {example})")
    return value


def _shown(url: str) -> str:
    """A URL as an error may quote it: without a user and password before its host or a query
    (a proxy's password, a token parameter), which the config error printed to the log."""
    if "@" in url:  # everything up to the last "@" after the scheme: a password may hold / ? #
        scheme, sep, _ = url.partition("//")
        return f"{scheme}{sep}…@{url.rpartition('@')[2]}" if sep else f"…@{url.rpartition('@')[2]}"
    return re.sub(r"[?#].*", "?…", url, flags=re.S)


def credential(value: str) -> str:
    """An API key or bot token: spaces around it dropped (pasted ones carry them), none inside. A
    key pasted over two lines was saved with its line break, every request failed with "illegal
    header value", and the error text showed the key with the break escaped, which the log's
    masking (it looks for the key as stored) let through. The message never repeats the value."""
    value = value.strip()
    if any(ch.isspace() or unicodedata.category(ch).startswith("C") for ch in value):
        raise ValueError("has a space, a line break or a control character inside (pasted over two lines?): "
                         "paste it again on one line")
    return value


#: an API key or bot token field: checked by `credential`
Credential = Annotated[str, AfterValidator(credential)]
