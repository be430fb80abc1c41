"""The direct route: OpenAI-compatible endpoints through the openai SDK's `AsyncOpenAI`.

Serves openai, custom, openrouter, deepseek, groq, mistral, ollama and any vLLM / llama.cpp / LM Studio
server. One client, hence one HTTP connection pool, per (event loop, base URL, key, headers): every
provider object and every embedding call aimed at the same endpoint shares it. The SDK's own retries
are off (`max_retries=0`): the retry policy is `RemoteProvider`'s, the same as on the litellm route.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator
from typing import Any

from nanobot.providers.remote import RemoteProvider
from nanobot.providers.vision import model_supports_vision

#: OpenAI's reasoning models refuse `temperature` and `max_tokens`
_REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], Any]] = (
    weakref.WeakKeyDictionary()
)


def shared_client(base_url: str, api_key: str, headers: dict[str, str] | None = None) -> Any:
    """The `AsyncOpenAI` client for this endpoint in the running event loop (created on first use).

    Connections belong to the loop that opened them, so each loop gets its own clients; they go
    away with their loop.
    """
    loop = asyncio.get_running_loop()
    key = (base_url, api_key, tuple(sorted((headers or {}).items())))
    per_loop = _clients.setdefault(loop, {})
    client = per_loop.get(key)
    if client is None:
        from openai import AsyncOpenAI  # ~0.5 s: paid by the first call, not by `import nanobot`

        client = AsyncOpenAI(
            api_key=api_key or "no-key",  # local servers take any key; the SDK insists on one
            base_url=base_url,
            max_retries=0,
            default_headers=headers or None,
        )
        per_loop[key] = client
    return client


class OpenAICompatProvider(RemoteProvider):
    name = "openai-compatible"

    def __init__(self, model: str, *, api_base: str, **kwargs: Any) -> None:
        kwargs.setdefault("provider_name", "openai-compatible")
        super().__init__(model, api_base=api_base, **kwargs)

    def _client(self) -> Any:
        return shared_client(self.api_base, self.api_key, self.extra_headers)

    def _adapt(self, request: dict[str, Any]) -> dict[str, Any]:
        """OpenAI itself wants `max_completion_tokens` (its reasoning models refuse `max_tokens` and
        any temperature but the default); other servers know `max_tokens` only."""
        kw = dict(request)
        if self.name == "openai":
            if "max_tokens" in kw:
                kw["max_completion_tokens"] = kw.pop("max_tokens")
            if str(kw["model"]).startswith(_REASONING_PREFIXES):
                kw.pop("temperature", None)
        kw["timeout"] = self.timeout_s
        return kw

    async def _complete(self, request: dict[str, Any]) -> Any:
        # The SDK's generic `post` with raw bytes back: `chat.completions.create` would first walk
        # every message through its type-driven transform and then build pydantic models of the
        # answer, most of the client's CPU per call; the request is already plain JSON here.
        kw = self._adapt(request)
        timeout = kw.pop("timeout")
        raw = await self._client().post(
            "/chat/completions", body=kw, cast_to=bytes, options={"timeout": timeout}
        )
        return json.loads(raw)

    async def _open_stream(self, request: dict[str, Any]) -> AsyncIterator[Any]:
        kw = self._adapt(request)
        return await self._client().chat.completions.create(
            **kw, stream=True, stream_options={"include_usage": True}
        )

    def supports_vision(self, model: str | None = None) -> bool:
        return model_supports_vision(model or self._model, self.name)


async def embed(
    model: str, texts: list[str], *, api_base: str, api_key: str, timeout_s: float
) -> list[list[float]]:
    """Embedding vectors for `texts`, in order, from an OpenAI-compatible `/embeddings` endpoint."""
    client = shared_client(api_base, api_key)
    response = await client.embeddings.create(model=model, input=texts, timeout=timeout_s)
    return [item.embedding for item in sorted(response.data, key=lambda d: d.index)]
