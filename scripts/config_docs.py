"""Generate the configuration reference from the config schema's field descriptions.

Writes config.example.json (every key with its default, plus a `$schema` hint), docs/config.schema.json
(the JSON Schema `nanobot config schema` prints), docs/configuration.md (every key grouped by section,
with type, allowed values and description) and the README's configuration table.

    python scripts/config_docs.py          # rewrite them all
    python scripts/config_docs.py --check  # exit 1 when one is out of date or a field has no description
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nanobot.config.schema import SCHEMA_KEY, Config, json_schema  # noqa: E402

BEGIN = "<!-- config-table:begin -->"
END = "<!-- config-table:end -->"
SCHEMA_FILE = "docs/config.schema.json"
# dict-of-model fields: one row for the map, then the entry's keys under `<name>`
ENTRY = "<name>"


class Row:
    def __init__(self, path: str, env: str, field: FieldInfo, section: str) -> None:
        self.path, self.env, self.field, self.section = path, env, field, section

    @property
    def default(self) -> str:
        return json.dumps(self.field.default, ensure_ascii=False)

    @property
    def description(self) -> str:
        return (self.field.description or "").replace("|", "\\|")


def _model(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _entry_model(annotation: Any) -> type[BaseModel] | None:
    if get_origin(annotation) is dict:
        args = get_args(annotation)
        return _model(args[1]) if len(args) == 2 else None
    return None


def rows(model: type[BaseModel] = Config, prefix: str = "", env_prefix: str = "NANOBOT_",
         section: str = "") -> list[Row]:
    """Every leaf key of the config, depth first, in declaration order."""
    out: list[Row] = []
    for name, field in model.model_fields.items():
        alias = field.alias or name
        path, env = f"{prefix}{alias}", f"{env_prefix}{name.upper()}"
        sub, entry = _model(field.annotation), _entry_model(field.annotation)
        if sub is not None:
            out.extend(rows(sub, f"{path}.", f"{env}__", section or alias))
            continue
        out.append(Row(path, env, field, section or alias))
        if entry is not None:  # env variables cannot address user-named entries
            out.extend(Row(r.path, "", r.field, r.section) for r in rows(entry, f"{path}.{ENTRY}.", "", section))
    return out


def missing_descriptions(model: type[BaseModel] = Config, prefix: str = "") -> list[str]:
    """Key paths (sections included) whose field has no description."""
    out: list[str] = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{field.alias or name}"
        if not (field.description or "").strip():
            out.append(path)
        sub = _model(field.annotation) or _entry_model(field.annotation)
        if sub is not None:
            out.extend(missing_descriptions(sub, f"{path}." if _model(field.annotation) else f"{path}.{ENTRY}."))
    return out


def type_text(field: FieldInfo) -> str:
    """A short human type: `int ≥ 16`, one of `a`, `b`, `list of text`…"""
    ann = field.annotation
    origin = get_origin(ann)
    if origin is Literal or (origin is None and get_args(ann) and get_origin(get_args(ann)[0]) is Literal):
        values = get_args(ann) if origin is Literal else get_args(get_args(ann)[0])
        return "one of " + ", ".join(f"`{v}`" if v else '`""`' for v in values)
    if origin in (Union, types.UnionType):
        return " or ".join(type_text(FieldInfo(annotation=a)) for a in get_args(ann))
    names = {bool: "true/false", int: "integer", float: "number", str: "text"}
    if origin is list:
        text = "list of " + names.get(get_args(ann)[0], "values")
    elif origin is dict:
        text = "map of text → " + names.get(get_args(ann)[1], "object")
    else:
        text = names.get(ann, getattr(ann, "__name__", str(ann)))
    bounds = []
    for meta in field.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if getattr(meta, attr, None) is not None:
                bounds.append(f"{sign} {getattr(meta, attr)}")
    return f"{text} {', '.join(bounds)}".strip()


def example_json() -> str:
    data: dict[str, Any] = {SCHEMA_KEY: f"./{SCHEMA_FILE}"}
    data.update(Config.model_construct().model_dump(by_alias=True, mode="json"))
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def schema_json() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def readme_table() -> str:
    lines = ["| key | default | environment variable | description |", "|---|---|---|---|"]
    for r in rows():
        env = f"`{r.env}`" if r.env else ""
        lines.append(f"| `{r.path}` | `{r.default}` | {env} | {r.description} |")
    return "\n".join(lines)


def reference_md() -> str:
    out = [
        "# Configuration reference",
        "",
        "<!-- generated by scripts/config_docs.py from nanobot/config/sections/: do not edit by hand -->",
        "",
        "nanobot reads `$NANOBOT_HOME/config.json` (default `~/.nanobot/config.json`, or the file given",
        "with `-c/--config`). Keys are camelCase (snake_case is accepted). Every key can be overridden by an",
        "environment variable: `NANOBOT_`, then the snake_case key path upper-cased with `__` between",
        "levels, e.g. `agents.defaults.maxTokens` → `NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS`. A bad value or",
        "an unknown key stops every command that reads the config with exit code 2 and names the key;",
        "`nanobot doctor` and `nanobot health` report it as a failure (exit 1); `pairing` and `config schema`",
        "do not read the config.",
        "",
        "Editors complete and explain keys from the JSON Schema: `nanobot config schema >",
        "~/.nanobot/config.schema.json` and add `\"$schema\": \"./config.schema.json\"` to config.json",
        f"(nanobot ignores that key). The schema is also kept in `{SCHEMA_FILE}`.",
    ]
    section = None
    for r in rows():
        if r.section != section:
            section = r.section
            desc = Config.model_fields[section].description or ""
            out += ["", f"## `{section}`", "", desc, "", "| key | type | default | description |",
                    "|---|---|---|---|"]
        out.append(f"| `{r.path}` | {type_text(r.field)} | `{r.default}` | {r.description} |")
    return "\n".join(out) + "\n"


def main() -> int:
    check = "--check" in sys.argv
    missing = missing_descriptions()
    if missing:
        print("config fields without a description (add Field(description=...)): " + ", ".join(missing))
        if check:
            return 1
    readme_path = ROOT / "README.md"
    readme = readme_path.read_text(encoding="utf-8")
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    outputs = {
        readme_path: readme[:start] + "\n" + readme_table() + "\n" + readme[end:],
        ROOT / "config.example.json": example_json(),
        ROOT / SCHEMA_FILE: schema_json(),
        ROOT / "docs" / "configuration.md": reference_md(),
    }
    if check:
        stale = [str(p.relative_to(ROOT)) for p, new in outputs.items()
                 if not p.exists() or p.read_text(encoding="utf-8") != new]
        if stale:
            print(f"out of date: {', '.join(stale)} (run python scripts/config_docs.py)")
            return 1
        return 0
    for path, text in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
