"""Generate config.example.json and the README's configuration table from the config schema.

    python scripts/config_docs.py          # rewrite both
    python scripts/config_docs.py --check  # exit 1 when either is out of date (used by the tests)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nanobot.config.schema import Config  # noqa: E402

BEGIN = "<!-- config-table:begin -->"
END = "<!-- config-table:end -->"
DYNAMIC = {"tools.mcpServers": "map of server name → MCP server (see below)",
           "memory.backends": "map of backend name → its native config block"}


def _rows(model: type[BaseModel], prefix: str, env_prefix: str) -> list[tuple[str, str, str, str]]:
    rows = []
    for name, field in model.model_fields.items():
        alias = field.alias or name
        path = f"{prefix}{alias}"
        env = f"{env_prefix}{name.upper()}"
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows.extend(_rows(ann, f"{path}.", f"{env}__"))
            continue
        default = field.default
        shown = json.dumps(default, ensure_ascii=False) if path not in DYNAMIC else "{}"
        rows.append((path, shown, env, DYNAMIC.get(path, field.description or "")))
    return rows


def example_json() -> str:
    data: dict[str, Any] = Config.model_construct().model_dump(by_alias=True, mode="json")
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def table() -> str:
    lines = ["| key | default | environment variable |", "|---|---|---|"]
    for path, default, env, note in _rows(Config, "", "NANOBOT_"):
        extra = f" ({note})" if note else ""
        lines.append(f"| `{path}`{extra} | `{default}` | `{env}` |")
    return "\n".join(lines)


def main() -> int:
    check = "--check" in sys.argv
    readme_path = ROOT / "README.md"
    example_path = ROOT / "config.example.json"
    readme = readme_path.read_text(encoding="utf-8")
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    new_readme = readme[:start] + "\n" + table() + "\n" + readme[end:]
    new_example = example_json()
    if check:
        stale = [p.name for p, new in ((readme_path, new_readme), (example_path, new_example))
                 if not p.exists() or p.read_text(encoding="utf-8") != new]
        if stale:
            print(f"out of date: {', '.join(stale)} (run python scripts/config_docs.py)")
            return 1
        return 0
    readme_path.write_text(new_readme, encoding="utf-8")
    example_path.write_text(new_example, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
