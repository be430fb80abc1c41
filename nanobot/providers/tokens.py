"""Offline token counting with tiktoken, using the BPE files bundled inside litellm (never a download)."""

from __future__ import annotations

import importlib.util
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from loguru import logger

ENCODING_NAME = "cl100k_base"
CHARS_PER_TOKEN_FALLBACK = 3.5
MESSAGE_OVERHEAD_TOKENS = 4  # role, separators
_TEXT_CACHE_MAX_CHARS = 2_000  # short strings share a big memo; long ones a small one
_LONG_CACHE_ENTRIES = 64  # system prompts (private/group) and tool lists, with room for edits


def _bundled_tokenizer_dir() -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.origin:
        return None
    folder = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
    return folder if folder.is_dir() else None


def configure_offline_tokenizer() -> None:
    """Point tiktoken (and litellm) at the bundled BPE files; keep litellm's price map local."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    folder = _bundled_tokenizer_dir()
    if folder is not None:
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(folder))
        os.environ.setdefault("CUSTOM_TIKTOKEN_CACHE_DIR", str(folder))


@lru_cache(maxsize=1)
def _encoding() -> Any | None:
    configure_offline_tokenizer()
    try:
        import tiktoken

        return tiktoken.get_encoding(ENCODING_NAME)
    except Exception as exc:  # noqa: BLE001 - fall back to an estimate rather than fail a turn
        logger.warning("tiktoken unavailable ({}); estimating tokens from characters", exc)
        return None


@lru_cache(maxsize=8192)
def _count_short(text: str) -> int:
    enc = _encoding()
    if enc is None:
        return int(len(text) / CHARS_PER_TOKEN_FALLBACK) + 1
    return len(enc.encode(text, disallowed_special=()))


@lru_cache(maxsize=_LONG_CACHE_ENTRIES)
def _count_long(text: str) -> int:
    """Long texts that recur every turn (the system prompt, the tool schemas) are counted once."""
    return _count_short.__wrapped__(text)


def count_text(text: str) -> int:
    if not text:
        return 0
    if len(text) <= _TEXT_CACHE_MAX_CHARS:
        return _count_short(text)
    return _count_long(text)


def count_message(message: dict[str, Any]) -> int:
    """Tokens of one chat message as the LLM will see it (content, tool calls, name)."""
    total = MESSAGE_OVERHEAD_TOKENS
    content = message.get("content")
    if isinstance(content, str):
        total += count_text(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                total += count_text(str(part.get("text", "")))
            else:
                total += 85  # an image part at low detail
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        total += count_text(str(fn.get("name", ""))) + count_text(str(fn.get("arguments", ""))) + 3
    if message.get("name"):
        total += count_text(str(message["name"]))
    return total


def count_messages(messages: list[dict[str, Any]]) -> int:
    return sum(count_message(m) for m in messages) + 3


def count_tools(schemas: list[dict[str, Any]]) -> int:
    """Tokens of the tool schemas; the same list (byte-stable across turns) is encoded only once."""
    if not schemas:
        return 0
    return count_text(json.dumps(schemas, ensure_ascii=False, separators=(",", ":")))
