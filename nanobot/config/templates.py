"""The workspace's bootstrap files (AGENTS.md, SOUL.md, USER.md, TOOLS.md, HEARTBEAT.md, …), shipped in
`nanobot/templates/`: copied by `nanobot onboard` and restored by `nanobot doctor --fix`, never over
a file that exists (the user's edits are theirs)."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from nanobot.config.paths import ensure_workspace
from nanobot.util.fs import atomic_write, ensure_private_dir


def templates_dir() -> Path:
    return Path(str(files("nanobot") / "templates"))


def template_files() -> list[Path]:
    """The bundled template files, relative to the templates folder."""
    source = templates_dir()
    return [
        path.relative_to(source)
        for path in sorted(source.rglob("*"))
        if path.is_file() and path.suffix == ".md"
    ]


def missing_templates(workspace: Path) -> list[Path]:
    """The templates with nothing at their place: a link counts, even one whose target is missing
    (a sync folder not mounted yet), or onboard replaced the user's link with a template for good."""
    return [rel for rel in template_files() if not os.path.lexists(workspace / rel)]


def copy_templates(workspace: Path) -> list[Path]:
    """Copy template files that do not exist yet; never overwrite. Returns the files created."""
    created: list[Path] = []
    ensure_private_dir(workspace)  # 0700 before anything lands in it
    source = templates_dir()
    for rel in missing_templates(workspace):
        target = workspace / rel
        atomic_write(target, (source / rel).read_bytes())
        created.append(target)
    ensure_workspace(workspace)
    return created
