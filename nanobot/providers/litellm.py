"""LLMProvider over litellm: any hosted model, or any OpenAI-compatible endpoint (`custom`)."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from typing import Any

from loguru import logger

from nanobot.providers.base import LLMError, LLMProvider, LLMResponse, StreamCallback, ToolCall, Usage
from nanobot.providers.tokens import configure_offline_tokenizer

RETRY_BASE_DELAY_S = 1.0
RETRY_MAX_DELAY_S = 30.0
_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}

_litellm: Any = None
_import_lock = threading.Lock()


def import_litellm() -> Any:
    """Import litellm on first use (~2 s), configured to stay offline and quiet."""
    global _litellm
    if _litellm is not None:
        return _litellm
    with _import_lock:  # the CLI may already be importing it in a background thread
        if _litellm is None:
            configure_offline_tokenizer()
            import litellm

            litellm.suppress_debug_info = True
            litellm.drop_params = True
            litellm.telemetry = False
            _litellm = litellm
    return _litellm


def _status_of(exc: Exception) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _is_retryable(exc: Exception) -> bool:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    status = _status_of(exc)
    if status is not None:
        return status in _RETRYABLE_STATUS
    name = type(exc).__name__
    return name in {
        "APIConnectionError",
        "Timeout",
        "APITimeoutError",
        "ServiceUnavailableError",
        "InternalServerError",
        "RateLimitError",
    }


class UnprocessableRequestError(Exception):
    """The endpoint answered 422 and litellm gave up without raising (see `_check_response`)."""

    status_code = 422


def _rejects_tool_choice(exc: Exception) -> bool:
    if isinstance(exc, UnprocessableRequestError):
        return True  # litellm swallowed the body; with a forced tool_choice that is the likely cause
    return (
        _status_of(exc) in (400, 422)
        or "BadRequest" in type(exc).__name__
        or "UnsupportedParams" in type(exc).__name__
    ) and "tool_choice" in str(exc)


def _retry_after_s(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get("retry-after") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _check_response(response: Any) -> Any:
    """Turn litellm's silent give-up on HTTP 422 into an error.

    With `drop_params` on, litellm's OpenAI path retries a 422 without the params the body names and,
    when none are named, ends its loop returning None (or a stream wrapper around None).
    """
    if response is None:
        raise UnprocessableRequestError("the endpoint rejected the request (HTTP 422)")
    if (
        type(response).__name__ == "CustomStreamWrapper"
        and getattr(response, "completion_stream", None) is None
        and getattr(response, "make_call", None) is None  # lazy streams open on first read
    ):
        raise UnprocessableRequestError("the endpoint rejected the streaming request (HTTP 422)")
    return response


def _parse_args(raw: Any) -> dict[str, Any] | str:
    if isinstance(raw, dict):
        return raw
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        return str(raw)
    return parsed if isinstance(parsed, dict) else str(raw)


def _user_message(exc: Exception) -> str:
    status = _status_of(exc)
    if status == 429:
        return "The model provider is rate-limiting requests; please try again in a moment."
    if status in (401, 403):
        return "The model provider rejected the credentials (check the API key in the config)."
    if status == 422:
        return "The model provider rejected the request as unprocessable (HTTP 422)."
    if status is not None and status >= 500:
        return f"The model provider is failing (HTTP {status}); please try again later."
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or "Timeout" in type(exc).__name__:
        return "The model provider did not answer in time; please try again."
    return f"The model call failed: {type(exc).__name__}."


class LiteLLMProvider(LLMProvider):
    name = "litellm"

    def __init__(
        self,
        model: str,
        *,
        api_key: str = "",
        api_base: str = "",
        extra_headers: dict[str, str] | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        provider_name: str = "litellm",
    ) -> None:
        self._model = model
        self.api_key = api_key
        self.api_base = api_base
        self.extra_headers = extra_headers or {}
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.retry_base_delay_s = RETRY_BASE_DELAY_S
        self.name = provider_name

    @property
    def default_model(self) -> str:
        return self._model

    def _kwargs(self, model: str | None) -> dict[str, Any]:
        kw: dict[str, Any] = {"model": model or self._model, "timeout": self.timeout_s, "num_retries": 0}
        if self.api_key:
            kw["api_key"] = self.api_key
        if self.api_base:
            kw["api_base"] = self.api_base
        if self.extra_headers:
            kw["extra_headers"] = self.extra_headers
        return kw

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        on_delta: StreamCallback | None = None,
    ) -> LLMResponse:
        litellm = import_litellm()
        kw = self._kwargs(model)
        kw["messages"] = messages
        if max_tokens:
            kw["max_tokens"] = max_tokens
        if temperature is not None:
            kw["temperature"] = temperature
        if tools:
            kw["tools"] = tools
            if tool_choice is not None:
                kw["tool_choice"] = tool_choice
        attempt = 0
        while True:
            try:
                if on_delta is not None:
                    return await self._stream(litellm, kw, on_delta)
                response = await litellm.acompletion(**kw)
                return self._parse(_check_response(response))
            except Exception as exc:  # noqa: BLE001 - classified below
                if "tool_choice" in kw and kw["tool_choice"] != "auto" and _rejects_tool_choice(exc):
                    logger.info("model rejected forced tool_choice; retrying with auto")
                    kw["tool_choice"] = "auto"
                    continue
                if attempt >= self.max_retries or not _is_retryable(exc):
                    logger.warning(
                        "LLM call failed after {} attempt(s): {}: {}",
                        attempt + 1,
                        type(exc).__name__,
                        str(exc)[:300],
                    )
                    raise LLMError(_user_message(exc)) from exc
                delay = _retry_after_s(exc) or min(RETRY_MAX_DELAY_S, self.retry_base_delay_s * 2**attempt)
                delay *= 1 + random.random() * 0.2
                attempt += 1
                logger.info(
                    "LLM call failed ({}); retry {}/{} in {:.1f}s",
                    _status_of(exc) or type(exc).__name__,
                    attempt,
                    self.max_retries,
                    delay,
                )
                await asyncio.sleep(delay)

    def _parse(self, response: Any) -> LLMResponse:
        choice = response.choices[0]
        message = choice.message
        calls = [
            ToolCall(
                id=tc.id or f"call_{i}", name=tc.function.name, arguments=_parse_args(tc.function.arguments)
            )
            for i, tc in enumerate(getattr(message, "tool_calls", None) or [])
        ]
        usage = getattr(response, "usage", None)
        return LLMResponse(
            content=message.content,
            tool_calls=calls,
            finish_reason=choice.finish_reason or "stop",
            usage=Usage(getattr(usage, "prompt_tokens", 0) or 0, getattr(usage, "completion_tokens", 0) or 0),
            reasoning=getattr(message, "reasoning_content", None),
        )

    async def _stream(self, litellm: Any, kw: dict[str, Any], on_delta: StreamCallback) -> LLMResponse:
        stream = _check_response(
            await litellm.acompletion(**kw, stream=True, stream_options={"include_usage": True})
        )
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish = "stop"
        usage = Usage()
        async for chunk in stream:
            chunk_usage = getattr(chunk, "usage", None)
            if chunk_usage:
                usage = Usage(chunk_usage.prompt_tokens or 0, chunk_usage.completion_tokens or 0)
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            delta = choice.delta
            if getattr(delta, "content", None):
                text.append(delta.content)
                await on_delta(delta.content)
            for tc in getattr(delta, "tool_calls", None) or []:
                slot = calls.setdefault(tc.index or 0, {"id": None, "name": "", "arguments": ""})
                slot["id"] = tc.id or slot["id"]
                if tc.function is not None:
                    slot["name"] += tc.function.name or ""
                    slot["arguments"] += tc.function.arguments or ""
            if choice.finish_reason:
                finish = choice.finish_reason
        tool_calls = [
            ToolCall(id=c["id"] or f"call_{i}", name=c["name"], arguments=_parse_args(c["arguments"]))
            for i, c in sorted(calls.items())
        ]
        return LLMResponse(
            content="".join(text) or None, tool_calls=tool_calls, finish_reason=finish, usage=usage
        )
