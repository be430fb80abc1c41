"""Whether a model accepts images, without importing litellm.

Known models are looked up in the model table litellm ships as a JSON file (read on the first image,
answers cached per model); models the table does not know are judged by their name, since
self-hosted servers (Ollama, vLLM, llama.cpp) serve models under names of their own choosing.
"""

from __future__ import annotations

import importlib.util
import json
import re
from functools import lru_cache
from pathlib import Path

from loguru import logger

MODEL_TABLE_FILE = "model_prices_and_context_window_backup.json"
#: name fragments of open-weight and hosted vision model families (Gemma 3's 1B and 270M take text only)
_VISION_NAME = re.compile(
    r"vision|[-_.]vl\b|[-_]vl[-_]|llava|pixtral|gemma-?3(?![-_:.]?(?:1b|270m)\b)|gpt-4o|gpt-4\.1|gpt-5|claude-3|claude-(sonnet|opus|haiku)"
    r"|gemini|minicpm-v|moondream|qwen2(\.5)?-?vl|internvl|llama-?4|llama3\.2-vision|mistral-small-3",
    re.IGNORECASE,
)


def _table_path() -> Path | None:
    spec = importlib.util.find_spec("litellm")  # locates the package without importing it
    if spec is None or not spec.origin:
        return None
    path = Path(spec.origin).parent / MODEL_TABLE_FILE
    return path if path.is_file() else None


def _table_answer(names: list[str]) -> bool | None:
    path = _table_path()
    if path is None:
        return None
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.debug("model table unreadable ({}); judging vision support by name", exc)
        return None
    for name in names:
        entry = table.get(name)
        if isinstance(entry, dict) and "supports_vision" in entry:
            return bool(entry["supports_vision"])
    return None


@lru_cache(maxsize=64)
def model_supports_vision(model: str, provider: str = "") -> bool:
    """`model` as configured (with or without a `provider/` prefix)."""
    bare = model.split("/", 1)[1] if "/" in model and model.split("/", 1)[0] == provider else model
    names = [model, bare, f"{provider}/{bare}" if provider else bare, bare.rsplit("/", 1)[-1]]
    answer = _table_answer(list(dict.fromkeys(names)))
    return answer if answer is not None else bool(_VISION_NAME.search(model))
