"""Remote embedding requests for memory search, over the same two routes as chat.

`openai/…` models (and bare names) go to an OpenAI-compatible `/embeddings` endpoint through the
direct route's JSON client: the configured base URL, else `OPENAI_BASE_URL`, else OpenAI's; the
key likewise falls back to `OPENAI_API_KEY`. Every other prefix (`gemini/…`, `ollama/…`, `cohere/…`) goes through
litellm, imported (in a thread: it takes seconds) on the first such request only.
"""

from __future__ import annotations

import asyncio

from nanobot.config.schema import ProviderConfig
from nanobot.providers.registry import SPECS, credentials

DIRECT_PREFIX = "openai/"


async def embed_texts(
    model: str, texts: list[str], *, api_base: str = "", api_key: str = "", timeout_s: float = 60.0
) -> list[list[float]]:
    """One vector per text, in order. Raises whatever the client library raised."""
    if model.startswith(DIRECT_PREFIX) or "/" not in model:
        from nanobot.providers.openai_compat import embed

        key, base = credentials("openai", ProviderConfig(api_key=api_key, api_base=api_base))
        return await embed(
            model.removeprefix(DIRECT_PREFIX),
            texts,
            api_base=base or SPECS["openai"].base_url,
            api_key=key,
            timeout_s=timeout_s,
        )
    from nanobot.providers import litellm as route

    await asyncio.to_thread(route.import_litellm)
    return await route.embed(
        model, texts, api_base=api_base or None, api_key=api_key or None, timeout_s=timeout_s
    )
