"""The litellm route: providers whose APIs need translation (Anthropic, Gemini, Bedrock, Vertex,
Azure, …) and any provider configured with `via: "litellm"`.

litellm is imported on first use only (it takes seconds and ~150 MiB), and nowhere else in nanobot:
the rest of the code asks this module through `import_litellm()` or the provider's methods.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

from nanobot.providers.remote import RemoteProvider
from nanobot.providers.tokens import configure_offline_tokenizer

_litellm: Any = None
_import_lock = threading.Lock()


def import_litellm() -> Any:
    """Import litellm on first use, configured to stay offline and quiet."""
    global _litellm
    if _litellm is not None:
        return _litellm
    with _import_lock:  # a warm-up thread may already be importing it
        if _litellm is None:
            configure_offline_tokenizer()
            from nanobot.logs import library_import_guard

            # litellm installs stream handlers at import (debug lines to stdout): route them to our sink
            with library_import_guard("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
                import litellm

            litellm.suppress_debug_info = True
            litellm.drop_params = True
            litellm.telemetry = False
            litellm.set_verbose = False  # its print()-based debug output would reach stdout
            _litellm = litellm
    return _litellm


class UnprocessableRequestError(Exception):
    """The endpoint answered 422 and litellm gave up without raising (see `_check_response`)."""

    status_code = 422
    rejected_tool_choice = True  # litellm swallowed the body; a forced tool_choice is the likely cause


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


class LiteLLMProvider(RemoteProvider):
    name = "litellm"

    def __init__(self, model: str, **kwargs: Any) -> None:
        kwargs.setdefault("provider_name", "litellm")
        super().__init__(model, **kwargs)

    def _kwargs(self, request: dict[str, Any]) -> dict[str, Any]:
        kw: dict[str, Any] = {**request, "timeout": self.timeout_s, "num_retries": 0}
        if self.api_key:
            kw["api_key"] = self.api_key
        if self.api_base:
            kw["api_base"] = self.api_base
        if self.extra_headers:
            kw["extra_headers"] = self.extra_headers
        return kw

    async def _prepare(self) -> None:
        if _litellm is None:  # ~5 s: in a thread, so the event loop (other chats) goes on meanwhile
            await asyncio.to_thread(import_litellm)

    async def _complete(self, request: dict[str, Any]) -> Any:
        return _check_response(await import_litellm().acompletion(**self._kwargs(request)))

    async def _open_stream(self, request: dict[str, Any]) -> AsyncIterator[Any]:
        kw = self._kwargs(request)
        stream = await import_litellm().acompletion(**kw, stream=True, stream_options={"include_usage": True})
        return _check_response(stream)

    def supports_vision(self) -> bool:
        try:
            return bool(import_litellm().supports_vision(model=self._model))
        except Exception:  # noqa: BLE001 - unknown models: no images
            return False

    def warm_up(self) -> None:
        import_litellm()


async def embed(
    model: str, texts: list[str], *, api_base: str | None, api_key: str | None, timeout_s: float
) -> list[list[float]]:
    """Embedding vectors for `texts`, in order, through litellm (any provider it supports)."""
    lib = import_litellm()
    response = await lib.aembedding(
        model=model, input=texts, api_base=api_base, api_key=api_key, timeout=timeout_s
    )
    data = sorted(response.data, key=lambda d: d["index"] if isinstance(d, dict) else d.index)
    return [item["embedding"] if isinstance(item, dict) else item.embedding for item in data]
