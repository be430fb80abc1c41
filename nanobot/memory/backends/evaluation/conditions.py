"""The control conditions `memory.condition` selects, and the adapter the check builds for `file`.

Conditions are baselines for comparing memory backends (docs/memory-backends.md, Control
conditions): no memory, full history, a static profile, a rolling summary. The registry imports
this module only when `memory.condition` is set or an adapter for the `file` backend is asked for
(`nanobot memory backend check`, benchmarks); the agent's own file memory never needs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from nanobot.config.schema import Config
from nanobot.config.sections.memory import MEMORY_CONDITIONS
from nanobot.memory.backends.config import FileBlock, NativeBlock
from nanobot.memory.backends.contract import MemoryAdapter
from nanobot.memory.backends.evaluation.controls import (
    ControlCondition,
    FullHistoryControl,
    NoMemoryControl,
    RollingSummaryControl,
    StaticProfileControl,
)
from nanobot.memory.backends.registry import Factory
from nanobot.memory.store import backend_dir

CONDITIONS = MEMORY_CONDITIONS


class NoMemoryBlock(NativeBlock):
    pass


class FullHistoryBlock(NativeBlock):
    context_tokens: int = Field(8_000, ge=50)


class StaticProfileBlock(NativeBlock):
    path: str = "PROFILE.md"  # relative to the workspace; may contain {run_id} and {persona_id}


BLOCKS: dict[str, type[NativeBlock]] = {
    "rolling_summary": FileBlock,
    "no_memory": NoMemoryBlock,
    "full_history": FullHistoryBlock,
    "static_profile": StaticProfileBlock,
}


def condition_kind(adapter: MemoryAdapter) -> Literal["architecture", "control"]:
    """How the check's manifest labels an adapter: a control condition or a memory architecture."""
    return "control" if isinstance(adapter, ControlCondition) else "architecture"


def _rolling_summary(config: Config, workspace: Path, block: NativeBlock, provider: Any) -> MemoryAdapter:
    if provider is None:
        from nanobot.providers.registry import resolve_provider

        provider = resolve_provider(config)
    name = "rolling_summary" if config.memory.condition.strip() else "file"
    d = config.agents.defaults
    small = bool(getattr(provider, "is_small_local", False))  # as agent/factory.py decides it
    return RollingSummaryControl(
        backend_dir(workspace, "rolling_summary"),
        provider,
        name=name,
        timezone=d.timezone,
        max_tokens=min(d.max_tokens, config.providers.local.max_tokens) if small else d.max_tokens,
        small_model=small or d.small_model,
    )


def _no_memory(config: Config, workspace: Path, block: NativeBlock, provider: Any) -> MemoryAdapter:
    return NoMemoryControl(backend_dir(workspace, "no_memory"))


def _full_history(config: Config, workspace: Path, block: NativeBlock, provider: Any) -> MemoryAdapter:
    return FullHistoryControl(backend_dir(workspace, "full_history"))


def _static_profile(config: Config, workspace: Path, block: NativeBlock, provider: Any) -> MemoryAdapter:
    assert isinstance(block, StaticProfileBlock)
    return StaticProfileControl(workspace, block.path)


FACTORIES: dict[str, Factory] = {
    "file": _rolling_summary,
    "rolling_summary": _rolling_summary,
    "no_memory": _no_memory,
    "full_history": _full_history,
    "static_profile": _static_profile,
}
