"""MemoryAdapterRegistry: config → the one active adapter.

`memory.backend` (file | mem0 | graphiti | honcho | memos) picks the long-term memory; each backend
library is imported only here, and only when its backend is selected. `memory.condition`, when set,
replaces it with a control condition for evaluation (no_memory | rolling_summary | full_history |
static_profile); those live in `evaluation/conditions.py`, imported only then - as is the adapter
over the file memory, which only the check and benchmarks build (the agent uses FileMemory).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.config.schema import Config
from nanobot.config.sections.memory import MEMORY_BACKENDS
from nanobot.memory.backends.config import BLOCKS, NativeBlock, config_hash, native_block
from nanobot.memory.backends.contract import BackendConfigError, MemoryAdapter
from nanobot.memory.seam import FileMemory, LongTermMemory
from nanobot.util.extras import install_hint

BACKENDS = MEMORY_BACKENDS
EXTRAS = {"mem0": "memory-mem0", "graphiti": "memory-graphiti", "honcho": "memory-honcho"}


@dataclass(frozen=True)
class Selection:
    name: str  # the backend or condition name
    kind: str  # "backend" | "condition"
    block: NativeBlock

    @property
    def config_hash(self) -> str:
        return config_hash(self.name, self.block)


def select(config: Config) -> Selection:
    """Which adapter the config selects, with its validated native block."""
    condition = config.memory.condition.strip().lower()
    backend = config.memory.backend.strip().lower() or "file"
    if condition:
        from nanobot.memory.backends.evaluation import conditions

        if condition not in conditions.CONDITIONS:
            raise BackendConfigError(
                f"memory.condition: unknown condition {condition!r}; choose one of {', '.join(conditions.CONDITIONS)}"
            )
        if backend != "file":
            logger.info("memory.condition {} replaces memory.backend {}", condition, backend)
        return Selection(condition, "condition", native_block(config, condition, conditions.BLOCKS[condition]))
    if backend not in BACKENDS:
        raise BackendConfigError(
            f"memory.backend: unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}"
        )
    return Selection(backend, "backend", native_block(config, backend, BLOCKS[backend]))


def _missing_extra(name: str, exc: ImportError) -> BackendConfigError:
    extra = EXTRAS.get(name, "")
    hint = f"install it {install_hint(extra)}" if extra else "install its client library"
    return BackendConfigError(f"memory.backend {name}: its library is not installed ({exc.name}); {hint}")


def build_adapter(
    config: Config,
    workspace: Path | None = None,
    *,
    provider: Any = None,
    selection: Selection | None = None,
) -> MemoryAdapter:
    """The adapter for the config. `provider` serves the rolling-summary adapter of `file` (resolved if None)."""
    sel = selection or select(config)
    workspace = workspace or config.workspace_path
    factory = _FACTORIES.get(sel.name)
    if factory is None:  # a control condition, or the file memory as an adapter
        from nanobot.memory.backends.evaluation.conditions import FACTORIES

        factory = FACTORIES[sel.name]
    try:
        return factory(config, workspace, sel.block, provider)
    except ImportError as exc:
        raise _missing_extra(sel.name, exc) from exc


def build_long_term_memory(
    config: Config, workspace: Path, memory_store: Any, memory_prompt_chars: int = 0
) -> LongTermMemory:
    """The agent's long-term memory. `file` and `rolling_summary` keep the Markdown file memory
    (MEMORY.md in the system prompt, written by consolidation); anything else goes through an adapter."""
    sel = select(config)
    if sel.name in ("file", "rolling_summary"):
        return FileMemory(memory_store, memory_prompt_chars, share_in_groups=config.memory.share_in_groups)
    from nanobot.memory.backends.bridge import AdapterMemory

    adapter = build_adapter(config, workspace, selection=sel)
    logger.info("long-term memory: {} ({}, config {})", sel.name, sel.kind, sel.config_hash)
    return AdapterMemory(
        adapter,
        run_id=sel.block.run_id,
        agent_id=sel.block.agent_id,
        budget=sel.block.budget(),
        share_in_groups=config.memory.share_in_groups,
    )


# ---------------------------------------------------------------------- factories
def _mem0(config: Config, workspace: Path, block: NativeBlock, provider: Any) -> MemoryAdapter:
    from nanobot.memory.backends.mem0 import build_mem0

    return build_mem0(config, workspace, block)


def _graphiti(config: Config, workspace: Path, block: NativeBlock, provider: Any) -> MemoryAdapter:
    from nanobot.memory.backends.graphiti import build_graphiti

    return build_graphiti(config, workspace, block)


def _honcho(config: Config, workspace: Path, block: NativeBlock, provider: Any) -> MemoryAdapter:
    from nanobot.memory.backends.honcho import HonchoAdapter

    return HonchoAdapter(block)  # type: ignore[arg-type]


def _memos(config: Config, workspace: Path, block: NativeBlock, provider: Any) -> MemoryAdapter:
    from nanobot.memory.backends.memos import MemosAdapter

    return MemosAdapter(block)  # type: ignore[arg-type]


Factory = Callable[[Config, Path, NativeBlock, Any], MemoryAdapter]
_FACTORIES: dict[str, Factory] = {
    "mem0": _mem0,
    "graphiti": _graphiti,
    "honcho": _honcho,
    "memos": _memos,
}
