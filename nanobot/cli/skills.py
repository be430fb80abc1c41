"""`nanobot skills list`: built-in and workspace skills with their availability."""

from __future__ import annotations

import json

import typer

from nanobot.cli.common import ConfigOption, command_group, err, load_cli_config, out
from nanobot.skills.loader import SkillsLoader

app = command_group(help="Skills and their availability.")


@app.callback()
def _group() -> None:
    """Skills: built-in ones and workspace/skills/<name>/SKILL.md."""


@app.command("list")
def list_skills(
    config: ConfigOption = None,
    as_json: bool = typer.Option(False, "--json", help="Print JSON: {skills: [{name, source, ...}]}."),
) -> None:
    """Show every skill: where it comes from, whether it is always on, and what it is missing."""
    cfg = load_cli_config(config)
    loader = SkillsLoader(cfg.workspace_path)
    skills = loader.list_skills()
    if as_json:
        rows = [
            {
                "name": s.name,
                "description": s.description,
                "source": s.source,
                "path": loader.display_path(s),
                "always": s.always,
                "available": s.available,
                "missing": s.missing,
            }
            for s in skills
        ]
        print(json.dumps({"skills": rows}, indent=2, ensure_ascii=False))
        return
    if not skills:
        err("No skills found.")
        return
    width = max(len(s.name) for s in skills)
    for s in skills:
        mode = "always" if s.always else "on-demand"
        state = "available" if s.available else "missing " + ", ".join(s.missing)
        out(f"{s.name:<{width}}  {s.source:<9}  {mode:<9}  {state}  {s.description}")
