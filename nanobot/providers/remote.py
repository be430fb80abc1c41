"""The behaviour every remote model route shares, whichever client library carries the request.

A route (our own JSON client for OpenAI-compatible endpoints, litellm for the providers that need
translation) only sends one request and returns the completion, or the stream of chunks, in the
OpenAI shape (dicts of the JSON, or litellm's objects). Everything a user can observe is decided here, once:

- retries: retryable failures (429, 5xx, timeouts, connection errors, malformed answers) are tried
  again up to `max_retries` times, waiting the server's Retry-After when it gives one (a wait longer
  than `MAX_RETRY_AFTER_S` is not worth holding a turn for: the call fails at once), else an
  exponential backoff with jitter;
- a forced `tool_choice` that the endpoint refuses (HTTP 400/422) is sent once more as "auto";
- streaming: text deltas go to `on_delta` as they arrive; tool calls are assembled from their pieces;
  a stream that ends before any chunk carried a finish_reason was cut off, and is tried again;
- usage and finish reason are read the same way; failures become `LLMError` with one of the kinds
  of `nanobot.providers.errors`.
"""

from __future__ import annotations

import asyncio
import json
from abc import abstractmethod
from collections.abc import AsyncIterator
from typing import Any

from loguru import logger

from nanobot.providers.base import (
    ChatRequest,
    LLMProvider,
    LLMResponse,
    StreamCallback,
    ToolCall,
    Usage,
    has_images,
    without_images,
)
from nanobot.providers.errors import (
    MalformedResponseError,
    StreamCutError,
    classify,
    refuses_images,
    refuses_tools,
    rejects_tool_choice,
    to_llm_error,
)
from nanobot.secrets import mask_then_cut
from nanobot.util.retry import retry_delay_s
from nanobot.util.tool_args import from_provider

RETRY_BASE_DELAY_S = 1.0
RETRY_MAX_DELAY_S = 30.0
MAX_RETRY_AFTER_S = 60.0
RETRY_JITTER = 0.2  # up to +20%: callers that failed together do not come back together


class RemoteProvider(LLMProvider):
    """A model behind an HTTP API. Subclasses implement `_complete` and `_open_stream`."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str = "",
        api_base: str = "",
        extra_headers: dict[str, str] | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        provider_name: str = "remote",
    ) -> None:
        self._model = model
        self.api_key = api_key
        self.api_base = api_base
        self.extra_headers = dict(extra_headers or {})
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.retry_base_delay_s = RETRY_BASE_DELAY_S
        self.name = provider_name
        self.tools_refused = False  # the model said it takes no tools: requests go without them
        self.images_refused = False  # the model refused images: attachments go as words

    @property
    def default_model(self) -> str:
        return self._model

    @abstractmethod
    async def _complete(self, request: dict[str, Any]) -> Any:
        """Send `request` (OpenAI chat parameters) and return the completion object."""

    @abstractmethod
    async def _open_stream(self, request: dict[str, Any]) -> AsyncIterator[Any]:
        """Send `request` as a stream (usage included) and return the async iterator of chunks."""

    async def _prepare(self) -> None:
        """Work before the first request that is not the request (a library's import): done here,
        outside the request's timeout, which it used up (the first attempt failed unsent)."""

    async def _chat(self, call: ChatRequest) -> LLMResponse:
        try:
            await self._prepare()
        except Exception as exc:  # noqa: BLE001 - a library that will not import: a model failure
            logger.warning("LLM call not made: {}: {}", type(exc).__name__, mask_then_cut(str(exc), 300))
            raise to_llm_error(exc, classify(exc)) from exc
        messages = without_images(call.messages) if self.images_refused else call.messages
        request: dict[str, Any] = {"model": self._model, "messages": messages}
        if call.max_tokens:
            request["max_tokens"] = call.max_tokens
        if call.temperature is not None:
            request["temperature"] = call.temperature
        if call.tools and not self.tools_refused:
            request["tools"] = call.tools
            if call.tool_choice is not None:
                request["tool_choice"] = call.tool_choice
        attempt = 0
        streamed = False  # an attempt has put text in the chat's live preview

        async def on_delta(delta: str) -> None:
            nonlocal streamed
            streamed = True
            assert call.on_delta is not None
            await call.on_delta(delta)

        async def dropped(_delta: str) -> None:
            """A retry after text was shown streams its answer again from the start: the preview
            would read "good good good ..."; the final message replaces the preview instead."""

        while True:
            try:
                if call.on_delta is not None:
                    stream = await self._open_stream(request)
                    sink = dropped if streamed else on_delta
                    return await collect_stream(stream, sink, idle_s=self.timeout_s)
                # the whole request: a server that keeps the connection alive with a byte now and
                # then never trips the transport's per-read timeout
                async with asyncio.timeout(self.timeout_s):
                    completion = await self._complete(request)
                return parse_completion(completion)
            except Exception as exc:  # noqa: BLE001 - classified below
                if request.get("tool_choice", "auto") != "auto" and rejects_tool_choice(exc):
                    logger.info("model rejected forced tool_choice; retrying with auto")
                    request["tool_choice"] = "auto"
                    continue
                if request.get("tools") and refuses_tools(exc):
                    # a model switched to one without tool support (Ollama: "does not support tools"):
                    # every turn failed with HTTP 400; it answers without tools instead
                    logger.warning(
                        "model {} refuses tools ({}): it is asked without them from now on",
                        self._model,
                        mask_then_cut(str(exc), 200),
                    )
                    self.tools_refused = True
                    request.pop("tools", None)
                    request.pop("tool_choice", None)
                    continue
                if not self.images_refused and has_images(request["messages"]) and refuses_images(exc):
                    # a model taken for a vision model by its name (gemma3:1b) failed every turn
                    # with a photo; it gets the words in place of the images instead
                    logger.warning(
                        "model {} refuses images ({}): attachments are described in words from now on",
                        self._model,
                        mask_then_cut(str(exc), 200),
                    )
                    self.images_refused = True
                    request["messages"] = without_images(request["messages"])
                    continue
                failure = classify(exc)
                after = failure.retry_after_s
                give_up = (
                    attempt >= self.max_retries
                    or not failure.retryable
                    or (after is not None and after > MAX_RETRY_AFTER_S)
                )
                if give_up:
                    logger.warning(
                        "LLM call failed after {} attempt(s): {}: {}",
                        attempt + 1,
                        type(exc).__name__,
                        mask_then_cut(str(exc), 300),
                    )
                    raise to_llm_error(exc, failure) from exc
                delay = retry_delay_s(
                    attempt,
                    self.retry_base_delay_s,
                    RETRY_MAX_DELAY_S,
                    retry_after_s=after,
                    jitter=RETRY_JITTER,
                )
                attempt += 1
                logger.info(
                    "LLM call failed ({}); retry {}/{} in {:.1f}s",
                    failure.status or failure.kind,
                    attempt,
                    self.max_retries,
                    delay,
                )
                await asyncio.sleep(delay)


async def _with_idle_limit(stream: AsyncIterator[Any], idle_s: float | None) -> AsyncIterator[Any]:
    iterator = aiter(stream)
    try:
        while True:
            try:
                async with asyncio.timeout(idle_s):
                    chunk = await anext(iterator)
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()


def _field(obj: Any, name: str) -> Any:
    """`obj.name` or `obj[name]`: the direct route parses JSON into dicts, litellm returns objects."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def content_text(content: Any) -> str | None:
    """A message's content as text: some OpenAI-compatible APIs send a list of parts
    (`[{"type": "thinking", ...}, {"type": "text", "text": "..."}]`); their text parts joined, the
    reasoning ones left out. None when there is no text. A single part sent without its list counts
    as a list of one; content of another type is a malformed answer (asked again), not shown as a
    Python repr."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif _field(part, "type") in (None, "text", "output_text"):
                texts.append(str(_field(part, "text") or ""))
        return "".join(texts) or None
    raise MalformedResponseError(f"the message content is a {type(content).__name__}")


def _usage(raw: Any) -> Usage:
    """Token counts as reported; a count that is no whole number ≥ 0 (a string, a negative) counts
    0: it once threw away the answer it came with."""
    if not raw:
        return Usage()
    return Usage(_count(_field(raw, "prompt_tokens")), _count(_field(raw, "completion_tokens")))


def _count(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(number, 0)


def _text_field(value: Any, what: str) -> str:
    """A tool call's name or id piece: text, or nothing; another type is a malformed answer (asked
    again) rather than a TypeError that failed the turn."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedResponseError(f"a tool call's {what} is a {type(value).__name__}, not text")
    return value


def parse_completion(response: Any) -> LLMResponse:
    """An OpenAI-shaped completion (a dict of the JSON, or an SDK/litellm object) as an LLMResponse."""
    choices = _field(response, "choices")
    if not choices or not isinstance(choices, list):
        raise MalformedResponseError("the completion has no choices")
    choice = choices[0]
    message = _field(choice, "message")
    if message is None:
        raise MalformedResponseError("the completion's choice has no message")
    calls = []
    for i, tc in enumerate(_field(message, "tool_calls") or []):
        fn = _field(tc, "function") or {}
        calls.append(
            ToolCall(
                id=_text_field(_field(tc, "id"), "id") or f"call_{i}",
                name=_text_field(_field(fn, "name"), "name"),
                arguments=from_provider(_field(fn, "arguments")),
            )
        )
    return LLMResponse(
        content=content_text(_field(message, "content")),
        tool_calls=calls,
        finish_reason=_field(choice, "finish_reason") or "stop",
        usage=_usage(_field(response, "usage")),
        reasoning=_field(message, "reasoning_content"),
    )


async def collect_stream(
    stream: AsyncIterator[Any], on_delta: StreamCallback, idle_s: float | None = None
) -> LLMResponse:
    """Read a stream of OpenAI-shaped chunks: deltas to `on_delta`, tool calls assembled by index.

    With `idle_s`, a stream that brings no chunk for that long fails with TimeoutError (keep-alive
    comments, which some servers send while the model is stuck, are no chunks); a reply that keeps
    coming is never cut off however long it takes.
    """
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    moved: dict[int, int] = {}  # a server's index whose pieces now go to a new call (_call_index)
    finish: str | None = None
    usage = Usage()
    answered = False  # some chunk carried a message part (litellm invents chunks for a bad stream)
    async for chunk in _with_idle_limit(stream, idle_s):
        if _field(chunk, "usage"):
            usage = _usage(_field(chunk, "usage"))
        choices = _field(chunk, "choices")
        if not choices:
            continue
        choice = choices[0]
        delta = _field(choice, "delta")
        if delta is not None:
            content = content_text(_field(delta, "content"))
            pieces = _field(delta, "tool_calls") or []
            if content or pieces or _field(delta, "role"):
                answered = True
            if content:
                text.append(content)
                await on_delta(content)
            for tc in pieces:
                slot = calls.setdefault(_call_index(tc, calls, moved), {"id": None, "name": "", "arguments": ""})
                slot["id"] = _text_field(_field(tc, "id"), "id") or slot["id"]
                fn = _field(tc, "function")
                if fn is not None:
                    name = _text_field(_field(fn, "name"), "name")
                    if name != slot["name"]:  # a server repeating the name in every piece
                        slot["name"] += name
                    slot["arguments"] = _with_arguments(slot["arguments"], _field(fn, "arguments"))
        if _field(choice, "finish_reason"):
            finish = _field(choice, "finish_reason")
    if not answered and not usage.completion_tokens:
        raise MalformedResponseError("the stream carried no message")
    if finish is None:
        raise StreamCutError(f"the stream ended before the model finished ({len(text)} text pieces in)")
    tool_calls = [
        ToolCall(id=c["id"] or f"call_{i}", name=c["name"], arguments=from_provider(c["arguments"]))
        for i, c in sorted(calls.items())
    ]
    return LLMResponse(
        content="".join(text) or None, tool_calls=tool_calls, finish_reason=finish, usage=usage
    )


def _with_arguments(sofar: str | dict[str, Any], piece: Any) -> str | dict[str, Any]:
    """A call's arguments with a streamed piece added: text is appended; some servers send the
    whole arguments as an object, which is kept as it is (appending it failed the turn)."""
    if piece is None or piece == "":
        return sofar
    if isinstance(piece, str) and isinstance(sofar, str):
        return sofar + piece
    if isinstance(piece, dict) and sofar == "":
        return piece
    raise MalformedResponseError(f"a tool call's arguments came as {type(piece).__name__} after {type(sofar).__name__}")


def _complete(arguments: str | dict[str, Any]) -> bool:
    """Whether a call already has whole arguments (an object, or text that parses); none yet is not
    whole: a name may still be arriving in pieces ("read", "_file")."""
    if not isinstance(arguments, str):
        return True
    if not arguments:
        return False
    try:
        json.loads(arguments)
    except (json.JSONDecodeError, RecursionError):
        return False
    return True


def _call_index(piece: Any, calls: dict[int, dict[str, Any]], moved: dict[int, int]) -> int:
    """Which tool call a streamed piece belongs to. Some servers leave `index` out (or the client
    fills in 0 for each), some send each call whole without an id or with the same one: a piece
    that brings another call's id, or a new name after a call already named and with whole
    arguments, then starts a new call, and the pieces after it continue that one - two calls were
    glued into one unknown tool."""
    given = _field(piece, "index")
    index = given if isinstance(given, int) else (max(calls) if calls else 0)
    index = moved.get(index, index)
    new_id = _field(piece, "id")
    fn = _field(piece, "function")
    name = _field(fn, "name") if fn is not None else None
    slot = calls.get(index)
    another_id = slot is not None and new_id and slot["id"] and new_id != slot["id"]
    more = _field(fn, "arguments") if fn is not None else None
    # a name repeated with nothing more (some servers close a call so) is no new call
    another_name = (
        slot is not None
        and isinstance(name, str)
        and name
        and slot["name"]
        and _complete(slot["arguments"])
        and (name != slot["name"] or bool(more))
    )
    if another_id or another_name:
        fresh = max(calls) + 1
        moved[given if isinstance(given, int) else index] = fresh
        return fresh
    return index
