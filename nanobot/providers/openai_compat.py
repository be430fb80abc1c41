"""The direct route: OpenAI-compatible endpoints spoken to in plain JSON over `nanobot.providers.http`.

Serves openai, custom, openrouter, deepseek, groq, mistral, ollama and any vLLM / llama.cpp / LM Studio
server. Requests and answers are the chat-completions JSON as dicts (no SDK, no models to build);
connections are pooled per endpoint by the HTTP layer, so every provider object and every embedding
call aimed at the same server shares them. The retry policy is `RemoteProvider`'s, the same as on
the litellm route; this module only sends one request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from nanobot.providers.errors import MalformedResponseError
from nanobot.providers.http import post_events, post_json
from nanobot.providers.remote import RemoteProvider
from nanobot.providers.vision import model_supports_vision

#: OpenAI's reasoning models refuse `temperature` and `max_tokens`
_REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")


def request_headers(api_key: str, extra: dict[str, str] | None, *, stream: bool = False) -> dict[str, str]:
    headers = {"accept": "text/event-stream" if stream else "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    headers.update(extra or {})
    return headers


class OpenAICompatProvider(RemoteProvider):
    name = "openai-compatible"

    def __init__(self, model: str, *, api_base: str, **kwargs: Any) -> None:
        kwargs.setdefault("provider_name", "openai-compatible")
        super().__init__(model, api_base=api_base, **kwargs)
        self._url = f"{api_base.rstrip('/')}/chat/completions"
        self._headers = request_headers(self.api_key, self.extra_headers)
        self._stream_headers = request_headers(self.api_key, self.extra_headers, stream=True)

    def _adapt(self, request: dict[str, Any]) -> dict[str, Any]:
        """OpenAI itself wants `max_completion_tokens` (its reasoning models refuse `max_tokens` and
        any temperature but the default); other servers know `max_tokens` only."""
        if self.name != "openai":
            return request
        kw = dict(request)
        if "max_tokens" in kw:
            kw["max_completion_tokens"] = kw.pop("max_tokens")
        if str(kw["model"]).startswith(_REASONING_PREFIXES):
            kw.pop("temperature", None)
        return kw

    async def _complete(self, request: dict[str, Any]) -> Any:
        return await post_json(
            self._url, self._adapt(request), headers=self._headers, timeout_s=self.timeout_s
        )

    async def _open_stream(self, request: dict[str, Any]) -> AsyncIterator[Any]:
        body = {**self._adapt(request), "stream": True, "stream_options": {"include_usage": True}}
        return post_events(self._url, body, headers=self._stream_headers, timeout_s=self.timeout_s)

    def supports_vision(self) -> bool:
        return model_supports_vision(self._model, self.name)


async def embed(
    model: str, texts: list[str], *, api_base: str, api_key: str, timeout_s: float
) -> list[list[float]]:
    """Embedding vectors for `texts`, in order, from an OpenAI-compatible `/embeddings` endpoint."""
    url = f"{api_base.rstrip('/')}/embeddings"
    answer = await post_json(
        url, {"model": model, "input": texts}, headers=request_headers(api_key, None), timeout_s=timeout_s
    )
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list) or len(data) != len(texts):
        raise MalformedResponseError("the embeddings answer does not hold one vector per text")
    return [item["embedding"] for item in sorted(data, key=lambda d: d.get("index", 0))]
