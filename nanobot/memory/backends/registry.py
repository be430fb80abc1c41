"""MemoryAdapterRegistry: config → the one active adapter (backend or control condition).

`memory.condition` (no_memory | rolling_summary | full_history | static_profile), when set,
replaces `memory.backend` (file | mem0 | graphiti | honcho | memos): exactly one is active. Each
backend library is imported only here, and only when its backend is selected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.config.schema import Config
from nanobot.memory.backends.config import BLOCKS, NativeBlock, config_hash, native_block
from nanobot.memory.backends.contract import BackendConfigError, MemoryAdapter
from nanobot.memory.seam import FileMemory, LongTermMemory
from nanobot.memory.store import backend_dir

BACKENDS = ("file", "mem0", "graphiti", "honcho", "memos")
CONDITIONS = ("no_memory", "rolling_summary", "full_history", "static_profile")
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
        if condition not in CONDITIONS:
            raise BackendConfigError(
                f"memory.condition: unknown condition {condition!r}; choose one of {', '.join(CONDITIONS)}"
            )
        if backend != "file":
            logger.info("memory.condition {} replaces memory.backend {}", condition, backend)
        return Selection(condition, "condition", native_block(config, condition, BLOCKS[condition]))
    if backend not in BACKENDS:
        raise BackendConfigError(
            f"memory.backend: unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}"
        )
    return Selection(backend, "backend", native_block(config, backend, BLOCKS[backend]))


def _missing_extra(name: str, exc: ImportError) -> BackendConfigError:
    extra = EXTRAS.get(name, "")
    hint = f"pip install 'nanobot[{extra}]'" if extra else "install its client library"
    return BackendConfigError(f"memory.backend {name}: its library is not installed ({exc.name}); {hint}")


def build_adapter(
    config: Config,
    workspace: Path | None = None,
    *,
    provider: Any = None,
    selection: Selection | None = None,
) -> MemoryAdapter:
    """The adapter for the config. `provider` serves the rolling-summary control (resolved if None)."""
    sel = selection or select(config)
    workspace = workspace or config.workspace_path
    factory = _FACTORIES[sel.name]
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
        return FileMemory(memory_store, memory_prompt_chars)
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
def _rolling_summary(config: Config, workspace: Path, block: NativeBlock, provider: Any) -> MemoryAdapter:
    from nanobot.memory.backends.evaluation.controls import RollingSummaryControl

    if provider is None:
        from nanobot.providers.registry import resolve_provider

        provider = resolve_provider(config)
    name = (
        "file"
        if config.memory.backend.strip().lower() in ("", "file") and not config.memory.condition
        else ("rolling_summary")
    )
    return RollingSummaryControl(
        backend_dir(workspace, "rolling_summary"),
        provider,
        name=name,
        timezone=config.agents.defaults.timezone,
    )


def _no_memory(config: Config, workspace: Path, block: NativeBlock, provider: Any) -> MemoryAdapter:
    from nanobot.memory.backends.evaluation.controls import NoMemoryControl

    return NoMemoryControl(backend_dir(workspace, "no_memory"))


def _full_history(config: Config, workspace: Path, block: NativeBlock, provider: Any) -> MemoryAdapter:
    from nanobot.memory.backends.evaluation.controls import FullHistoryControl

    return FullHistoryControl(backend_dir(workspace, "full_history"))


def _static_profile(config: Config, workspace: Path, block: NativeBlock, provider: Any) -> MemoryAdapter:
    from nanobot.memory.backends.config import StaticProfileBlock
    from nanobot.memory.backends.evaluation.controls import StaticProfileControl

    assert isinstance(block, StaticProfileBlock)
    return StaticProfileControl(workspace, block.path)


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
    "file": _rolling_summary,
    "rolling_summary": _rolling_summary,
    "no_memory": _no_memory,
    "full_history": _full_history,
    "static_profile": _static_profile,
    "mem0": _mem0,
    "graphiti": _graphiti,
    "honcho": _honcho,
    "memos": _memos,
}
