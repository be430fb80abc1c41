"""`nanobot config schema`: the JSON Schema of config.json on stdout (for editor completion)."""

from __future__ import annotations

import json

from nanobot.cli.common import ConfigOption, command_group

app = command_group()


@app.command("schema")
def schema(config: ConfigOption = None) -> None:  # noqa: ARG001 - every command takes -c
    """Print the config's JSON Schema (save it beside config.json and name it in "$schema")."""
    from nanobot.config.schema import json_schema

    print(json.dumps(json_schema(), indent=2, ensure_ascii=False))
