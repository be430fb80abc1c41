"""A registry of secret values (API keys, bot tokens) and a masker for anything that is logged.

The same masker redacts tool results (the ToolRegistry applies it), so a secret a command or a
file read stumbles on never reaches the LLM, a session file or a chat.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import threading
from urllib.parse import parse_qsl, urlsplit

MIN_SECRET_CHARS = 6  # shorter values would mask ordinary words
_MASK = "***"
# Environment variable names that hold credentials (provider keys, tokens, passwords, URLs with them).
_SECRET_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|_PWD|PAT|CREDENTIALS?|AUTH|AUTHORIZATION|COOKIE|_DSN|DATABASE_URL"
    r"|CONNECTION_STRING)$",
    re.IGNORECASE,
)
# Query parameters that carry a credential without saying so (signed URLs, OAuth codes).
_SECRET_QUERY = re.compile(r"(sig|signature|code|.*[-_]signature|.*[-_]credential)", re.IGNORECASE)
# a value that is `Bearer <token>` / `Basic <base64>` / `token <token>` and nothing else
_SCHEME_CREDENTIAL = re.compile(r"\s*(?i:bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{6,}\s*")
_HEADERS_NAME = re.compile(r"HEADERS?$", re.IGNORECASE)  # a setting holding headers, maybe as JSON
MAX_JSON_SETTING_CHARS = 65_536  # a setting holding JSON (headers) is read for credentials up to this
MAX_JSON_DEPTH = 2  # JSON in a string in JSON: no further
# A user name alone in a URL (`https://<token>@host`) is a token when it is this long.
_TOKEN_AS_USER_CHARS = 16
_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None
_pattern_stale = False  # secrets were added since _pattern was compiled

# Token shapes that must never be logged even if nobody registered them.
_SHAPES = re.compile(
    r"(?P<tg>/bot\d{5,}:[A-Za-z0-9_-]{20,})"  # Telegram bot URLs
    r"|(?P<sk>\bsk-[A-Za-z0-9_-]{16,})"  # OpenAI-style keys
    r"|(?P<bearer>(?i:bearer)\s+[A-Za-z0-9._~+/-]{16,}=*)"
)


# A key a local server takes as anything ("ollama", "lm-studio", "not-needed"): ordinary words,
# which masking every prompt would hide wherever the user writes them. Real keys and tokens mix
# case or carry digits.
_PLACEHOLDER = re.compile(r"[a-z]+(?:[-_][a-z]+)*")


def register_secret(value: str | None) -> None:
    """Remember a secret so `mask` hides it wherever it appears."""
    global _pattern_stale
    if not value or len(value) < MIN_SECRET_CHARS or _PLACEHOLDER.fullmatch(value):
        return
    with _lock:
        if value in _secrets:
            return
        _secrets.add(value)
        _pattern_stale = True  # compiled at the next use: once per start, not once per secret


def _registered_pattern() -> re.Pattern[str] | None:
    global _pattern, _pattern_stale
    if _pattern_stale:
        with _lock:
            if _pattern_stale:
                ordered = sorted(_secrets, key=len, reverse=True)
                _pattern = re.compile("|".join(re.escape(s) for s in ordered)) if ordered else None
                _pattern_stale = False
    return _pattern


def _mask_shape(match: re.Match[str]) -> str:
    if match.group("tg"):
        return "/bot" + _MASK
    if match.group("bearer"):
        return "Bearer " + _MASK
    return _MASK


def mask(text: str) -> str:
    """`text` with every registered secret and every known token shape replaced by ***."""
    pattern = _registered_pattern()
    if pattern is not None:
        text = pattern.sub(_MASK, text)
    return _SHAPES.sub(_mask_shape, text)


def masked_pieces(text: str) -> dict[str, str]:
    """What `mask(text)` replaces, each with its replacement: registered secrets and token shapes."""
    pieces: dict[str, str] = {}
    pattern = _registered_pattern()
    if pattern is not None:
        pieces.update((found, _MASK) for found in pattern.findall(text))
        text = pattern.sub(_MASK, text)
    pieces.update((match.group(), _mask_shape(match)) for match in _SHAPES.finditer(text))
    return pieces


def mask_registered_bytes(data: bytes) -> bytes:
    """`data` with each registered secret's UTF-8 bytes replaced by ***, whatever the text around."""
    with _lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        data = data.replace(secret.encode("utf-8"), _MASK.encode())
    return data


def registered_in(data: bytes) -> bool:
    """Whether `data` holds a registered secret's UTF-8 bytes (a binary file: nothing to mask in it)."""
    with _lock:
        known = list(_secrets)
    return any(secret.encode("utf-8") in data for secret in known)


def mask_then_cut(text: str, max_chars: int) -> str:
    """The start of `text` for a log line or an error: masked first, then cut (cut first, a secret
    across the cut kept its first characters unmasked: a provider's error page echoing a key)."""
    return mask(text[: max_chars * 4 + 512])[:max_chars]


PIECE_CHARS = 8  # the shortest piece of a secret hidden where text was cut (shorter: common words)


def mask_cut(text: str, *, start: bool = False, end: bool = False) -> str:
    """`mask(text)` for text that was cut: with `end`, a piece at its end that begins a secret (a
    page cut at 50,000 characters returned 53 of a 54-character key); with `start`, a piece at its
    start that ends one. Mask before cutting where you can; this is for cuts made before (bytes)."""
    text = mask(text)
    with _lock:
        # tokens only: a URL's or an "Authorization: Bearer x" value's pieces are ordinary text
        # ("postgres://", "Bearer "), and their credential parts are registered on their own
        known = [s for s in _secrets if "://" not in s and " " not in s]
    if end:  # the longest piece of any secret: a shorter one of another would hide only part of it
        size = max((n for sec in known for n in _piece_sizes(sec, text) if text.endswith(sec[:n])), default=0)
        text = text[:-size] + _MASK if size else text
    if start:
        size = max((n for sec in known for n in _piece_sizes(sec, text) if text.startswith(sec[-n:])), default=0)
        text = _MASK + text[size:] if size else text
    return text


def _piece_sizes(secret: str, text: str) -> range:
    """The lengths a piece of `secret` at a cut of `text` may have (short of the whole)."""
    return range(PIECE_CHARS, min(len(secret) - 1, len(text)) + 1)


def register_config_secrets(config: object) -> None:
    """Register every provider key and channel token found in a Config."""
    providers = getattr(config, "providers", None)
    if providers is not None:
        for name in type(providers).model_fields:
            register_secret(getattr(getattr(providers, name), "api_key", ""))
            _register_named(getattr(getattr(providers, name), "extra_headers", None) or {})
    channels = getattr(config, "channels", None)
    if channels is not None:
        for name in ("telegram", "discord"):
            register_secret(getattr(getattr(channels, name, None), "token", ""))
        _register_url(getattr(getattr(channels, "telegram", None), "proxy", ""))
    if providers is not None:
        for name in type(providers).model_fields:
            _register_url(getattr(getattr(providers, name), "api_base", ""))
    tools = getattr(config, "tools", None)
    if tools is not None:
        register_secret(tools.web.search.api_key)
        _register_url(tools.web.search.base_url)
        for server in tools.mcp_servers.values():
            _register_named(server.env)
            _register_named(server.headers)
            _register_url(server.url)
            _register_args(server.args)
        _register_named(tools.exec.env)
    memory = getattr(config, "memory", None)
    if memory is not None:
        register_secret(memory.search.embedding_api_key)
        _register_url(memory.search.embedding_api_base)
        _register_tree(memory.backends)  # apiKey, password, uri... of mem0, graphiti, honcho, memos


def register_env_secrets(environ: dict[str, str] | None = None) -> None:
    """Register the values of environment variables whose names say they hold a credential
    (OPENAI_API_KEY, NANOBOT_CHANNELS__TELEGRAM__TOKEN, DATABASE_URL, GITHUB_PAT...)."""
    _register_named(os.environ if environ is None else environ)


def _register_named(values: object) -> None:
    """Credential-named values (and the credential alone of `Bearer <token>` / `Basic <b64>`), and
    the credentials inside any URL value (`REDIS_URL=redis://:pw@host`)."""
    _register_tree(dict(values))  # type: ignore[call-overload]


def _register_scheme_credential(value: str) -> None:
    """`Bearer <token>` / `Basic <base64 user:password>`: the token, and the decoded password, on their own."""
    scheme, _, credential = value.strip().partition(" ")
    credential = credential.strip()
    if not credential or " " in credential:
        return
    register_secret(credential)
    if scheme.lower() == "basic":
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            register_secret(base64.b64decode(credential, validate=True).decode().partition(":")[2])


def _token_like(credential: str, basic: str) -> bool:
    """A `Basic` credential that decodes to `user:password`, or a token: long, or holding digits
    ("Basic English" is a phrase, not a header)."""
    if basic.lower() == "basic":
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            return ":" in base64.b64decode(credential, validate=True).decode()
        return False
    return len(credential) >= 16 or (len(credential) >= 8 and any(c.isdigit() for c in credential))


def _register_args(args: object) -> None:
    """Credentials in a command line: URLs with them, `--api-key X` / `--password=X`, `API_KEY=X`."""
    if not isinstance(args, list):
        return
    flag_wants_value = False
    for arg in (a for a in args if isinstance(a, str)):
        if flag_wants_value and not arg.startswith("-"):
            register_secret(arg)
        name, eq, value = arg.partition("=")
        bare = name.lstrip("-").replace("-", "_")
        flag_wants_value = arg.startswith("-") and not eq and bool(_SECRET_NAME.search(bare))
        if eq and bare and _SECRET_NAME.search(bare):
            register_secret(value)
        elif "://" in arg:
            _register_url(value if eq and "://" in value else arg)


def _register_url(url: object) -> None:
    """The password of a URL's user info (or a token given as its user name), and its credential
    query values (`?token=`, `?sig=`)."""
    if not isinstance(url, str) or not url:
        return
    try:
        parts = urlsplit(url.strip())
        register_secret(parts.password)
        if parts.password is None and len(parts.username or "") >= _TOKEN_AS_USER_CHARS:
            register_secret(parts.username)
        for name, value in parse_qsl(parts.query):
            if _SECRET_NAME.search(name) or _SECRET_QUERY.fullmatch(name):
                register_secret(value)
    except ValueError:
        return


def _register_tree(value: object, key: str = "", depth: int = 0) -> None:
    """Every credential-named string in a nested config block, the credentials of its URLs, of its
    `Bearer`/`Basic` values, and of the strings in it that hold JSON."""
    if isinstance(value, dict):
        for k, v in value.items():
            _register_tree(v, str(k), depth)
    elif isinstance(value, list):
        for v in value:
            _register_tree(v, key, depth)
    elif isinstance(value, str):
        if _SECRET_NAME.search(key):
            register_secret(value)
            _register_scheme_credential(value)
        elif "://" in value:
            _register_url(value)
        # whatever the name, a value that is a credential header (`AUTH_HEADER="Bearer x"`, as a
        # bridge documents it); a header-named one holding JSON, its headers
        # (`OPENAPI_MCP_HEADERS='{"Authorization": "Bearer x"}'`). Not a scan of every text: a
        # commit message saying "token Refresh" made a word a secret in every tool result.
        if _SCHEME_CREDENTIAL.fullmatch(value) and _token_like(value.split()[-1], basic=value.split()[0]):
            _register_scheme_credential(value)
        elif _HEADERS_NAME.search(key) and value.lstrip()[:1] == "{" and depth < MAX_JSON_DEPTH:
            with contextlib.suppress(ValueError, RecursionError):
                _register_tree(json.loads(value[:MAX_JSON_SETTING_CHARS]), key, depth + 1)
