"""What a failed model call means, the same for every remote route (our JSON client or litellm).

`classify(exc)` turns whatever a client library raised into a `Failure`: an error kind (see
`nanobot.providers.base.ERROR_KINDS`), the HTTP status when there was one, whether another attempt
may succeed, and the server's Retry-After. litellm raises the openai SDK's exception classes (or
its own subclasses of them) and `nanobot.providers.http` its own; both carry `status_code` and
`response.headers`, so the classification reads attributes and class names, never library types.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

from nanobot.providers.base import LLMError
from nanobot.secrets import mask_then_cut
from nanobot.util.retry import parse_retry_after, retry_after_from_headers
from nanobot.util.text import one_line

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
_TIMEOUT_NAMES = frozenset(
    {"Timeout", "APITimeoutError", "ReadTimeout", "ConnectTimeout", "TimeoutException"}
)
_CONNECTION_NAMES = frozenset({"APIConnectionError", "ConnectError", "RemoteProtocolError", "ReadError"})
#: a stream cut before its finish_reason, in our words (StreamCutError) and litellm's, which rebuilds
#: the error as an APIConnectionError with only the text left
_STREAM_CUT_MARKER = "stream ended before"
#: litellm reports a completion without choices, and a body that is no completion at all (a proxy's
#: HTML login page with status 200), through generic errors (its "500") carrying these texts
_NO_CHOICES_MARKER = "no 'choices'"
_INVALID_BODY_MARKER = "empty or invalid response from llm endpoint"


class MalformedResponseError(Exception):
    """The endpoint answered, but not with a completion (not JSON, no choices, an empty stream)."""


class StreamCutError(ConnectionError):
    """A stream ended before the model finished: no chunk carried a finish_reason. A server-sent body
    often ends with its connection, so a connection closed mid-answer (a proxy's idle limit, a
    restarting server) otherwise reads as a complete, shorter reply."""


@dataclass(frozen=True)
class Failure:
    kind: str
    status: int | None
    retryable: bool
    retry_after_s: float | None = None


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes, outermost first (bounded: chains can be cyclic). litellm wraps
    a failure in the middle of a stream without chaining it: it keeps it as `original_exception`."""
    seen: list[BaseException] = []
    node: BaseException | None = exc
    while node is not None and node not in seen and len(seen) < 8:
        seen.append(node)
        wrapped = getattr(node, "original_exception", None)
        node = wrapped if isinstance(wrapped, BaseException) else node.__cause__ or node.__context__
    return seen


def _is_malformed(chain: list[BaseException]) -> bool:
    for node in chain:
        if isinstance(node, (MalformedResponseError, json.JSONDecodeError, UnicodeDecodeError)):
            return True
        text = str(node)
        if type(node).__name__ == "APIResponseValidationError" or _NO_CHOICES_MARKER in text:
            return True
        if _INVALID_BODY_MARKER in text.lower():
            return True
    return False


#: how providers say a prompt is over the model's window (OpenAI, vLLM, llama.cpp, Anthropic, Ollama...)
_TOO_LONG_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "too many tokens",
    "prompt is too long",
    "input is too long",
    "exceeds the available context",
    "exceed_context_size",
)


def _says_too_long(chain: list[BaseException]) -> bool:
    """Whether the refusal says the prompt is too long (read here, never shown: it may echo secrets)."""
    for node in chain:
        if type(node).__name__ == "ContextWindowExceededError":  # litellm's own class for it
            return True
        text = f"{node} {getattr(node, 'body', '') or ''}".lower()
        if any(marker in text for marker in _TOO_LONG_MARKERS):
            return True
    return False


def retry_after_s(exc: BaseException) -> float | None:
    """The Retry-After (or retry-after-ms) header of the failed response, in seconds."""
    headers: Any = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None or not hasattr(headers, "get"):
        return None
    millis = parse_retry_after(headers.get("retry-after-ms"))
    return millis / 1000 if millis is not None else retry_after_from_headers(headers)


def classify(exc: BaseException) -> Failure:
    chain = _chain(exc)
    if _is_malformed(chain):
        return Failure("malformed", None, retryable=True)
    status = _status_of(exc)
    # class names, not types: litellm's classes subclass the SDK's, and both may be absent
    names = {cls.__name__ for cls in type(exc).__mro__}
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or names & _TIMEOUT_NAMES or status == 408:
        return Failure("timeout", status, retryable=True)
    chain_names = {cls.__name__ for node in chain for cls in type(node).__mro__}
    if any(isinstance(node, StreamCutError) or _STREAM_CUT_MARKER in str(node).lower() for node in chain):
        return Failure("cut_off", None, retryable=True)  # reached, but the answer stopped mid-way
    if isinstance(exc, ConnectionError) or chain_names & _CONNECTION_NAMES:
        return Failure("connection", None, retryable=True)
    if status is not None:
        retryable = status in RETRYABLE_STATUS
        after = retry_after_s(exc) if retryable else None
        if status == 429:
            return Failure("rate_limit", status, True, after)
        if status in (401, 403):
            return Failure("auth", status, False)
        if status in (400, 413, 422) and _says_too_long(chain):
            return Failure("context_overflow", status, False)
        if status >= 500:
            return Failure("server", status, retryable, after)
        return Failure("bad_request", status, retryable, after)
    return Failure("other", None, retryable=False)


def rejects_tool_choice(exc: BaseException) -> bool:
    """Whether a call with a forced `tool_choice` is worth repeating with "auto": the endpoint
    refused the request itself (HTTP 400/422). Many servers do not name the parameter they refuse,
    so any such refusal counts; a request that was bad for another reason fails again right after."""
    if getattr(exc, "rejected_tool_choice", False):
        return True
    return _status_of(exc) in (400, 422) or "BadRequest" in type(exc).__name__


_NO_TOOLS = re.compile(
    r"(does not|doesn't|not) support (tools|tool|function)|tools? (are |is )?not supported|"
    r"tools param requires|tool choice requires|--enable-auto-tool-choice|function calling is not",
    re.I,
)


def refuses_tools(exc: BaseException) -> bool:
    """Whether the server refused the request because the model takes no tools (HTTP 400/422 naming
    them: Ollama, vLLM without a tool parser, llama.cpp without --jinja)."""
    return (_status_of(exc) in (400, 422) or "BadRequest" in type(exc).__name__) and bool(
        _NO_TOOLS.search(str(exc))
    )


_NO_IMAGES = re.compile(r"image|vision|multi-?modal|mmproj", re.I)


def refuses_images(exc: BaseException) -> bool:
    """Whether the server refused a request that carried images because of them: an error status
    naming images (OpenAI's "image_url is only supported by certain models", llama.cpp's "image
    input is not supported", vLLM's "not a multimodal model", DeepSeek's "unknown variant
    `image_url`"). Checked only for requests that carried images."""
    status = _status_of(exc)
    refused = (status is not None and 400 <= status < 600) or "BadRequest" in type(exc).__name__
    return refused and bool(_NO_IMAGES.search(str(exc)))


_MESSAGES = {
    "rate_limit": "The model provider is rate-limiting requests; please try again in a moment.",
    "auth": "The model provider rejected the credentials (check the API key in the config).",
    "timeout": "The model provider did not answer in time; please try again.",
    "connection": "The model provider could not be reached; please check its address and try again.",
    "cut_off": "The model's answer was cut off before it finished; please try again.",
    "malformed": "The model provider sent a malformed response; please try again.",
    "context_overflow": (
        "The conversation is too long for the model's context window. Send /new to start afresh "
        "(what was said stays in memory), and set agents.defaults.contextWindowTokens to the model's window "
        "(and maxTokens, the answer's share of it, well below it)."
    ),
}


def _duration(seconds: float) -> str:
    """120 s, 3 h, 2 days: a Retry-After given as a date far ahead read "2300464315 s"."""
    for unit, size, least in (("days", 86_400, 2), ("h", 3_600, 2), ("min", 60, 10)):
        if seconds >= least * size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def to_llm_error(exc: BaseException, failure: Failure) -> LLMError:
    """The user-facing error for a failure: the provider's own text only for a refused request (HTTP
    400: "does not support tools", "max_tokens too large"), masked and on one line."""
    message = _MESSAGES.get(failure.kind)
    if failure.kind == "rate_limit" and failure.retry_after_s:  # the wait it asked for was too long to hold
        message = (
            f"The model provider is rate-limiting requests; it asks to wait {_duration(failure.retry_after_s)} "
            "before trying again."
        )
    elif message is None and failure.status == 422:
        message = "The model provider rejected the request as unprocessable (HTTP 422)."
    elif message is None and failure.kind == "server":
        message = f"The model provider is failing (HTTP {failure.status}); please try again later."
    elif message is None and failure.kind == "bad_request":  # its reason is what the user can act on
        reason = mask_then_cut(one_line(str(exc)).removeprefix(f"HTTP {failure.status}: "), 200)
        message = f"The model provider rejected the request (HTTP {failure.status}): {reason}"
    elif message is None:
        message = f"The model call failed: {type(exc).__name__}."
    return LLMError(message, kind=failure.kind, status=failure.status)
