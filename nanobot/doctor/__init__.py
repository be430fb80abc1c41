"""`nanobot doctor`: check an installation part by part and repair what is safe to repair.

Each check returns `Check(part, status, detail, fixed)`: status `ok`, `warn` (works, but look at it),
`fail` (broken: doctor exits 1) or `skip` (could not be checked because an earlier part failed).
Local checks (config, files, disk, gateway, service, index, sandbox) never touch the network;
remote checks (provider, channel tokens, MCP servers) make one small request each, with a timeout,
concurrently. `fix=True` repairs permissions, creates missing folders and rebuilds a broken or
missing memory index — nothing that could lose data or change behaviour.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

Status = Literal["ok", "warn", "fail", "skip"]
DEFAULT_TIMEOUT_S = 15.0


@dataclass
class Check:
    part: str
    status: Status
    detail: str
    fixed: str = ""  # what --fix changed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def healthy(checks: list[Check]) -> bool:
    return not any(c.status == "fail" for c in checks)


def run_doctor(config_path: Path, *, fix: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Check]:
    """Every check, in a stable order: the local ones (which may repair), then the remote ones."""
    from nanobot.doctor import local, remote

    config_check, cfg = local.check_config(config_path)
    checks = [config_check]
    if cfg is None:
        skipped = ("sandbox", "files", "disk", "gateway", "service", "memory index", "provider", "channels")
        return checks + [Check(p, "skip", "the config does not load") for p in skipped]
    checks += local.local_checks(cfg, config_path, fix=fix)
    checks += asyncio.run(remote.remote_checks(cfg, config_path, timeout_s=timeout_s))
    return checks
