"""A raw stdio MCP server (JSON lines, no SDK: it starts at once).

Usage: python mcp_raw_server.py LOG_FILE ERROR_CODE [TOOLS_FILE]

Every tool call is recorded in LOG_FILE. The tool `charge` answers with a JSON-RPC error of
ERROR_CODE; the tool `pause` stops reading (and answering) for its `seconds` (a busy or hung
server: what the client writes meanwhile fills the pipe); `legacy` answers with a Latin-1 byte on
stdout (a file in another encoding); `echo_args` answers with its arguments as JSON; any other tool
answers "<name> ok". Descriptions (of the tool and of its arguments) end with
$RAW_DESCRIPTION_NOTE when set (a description built from
the server's config); `nullprops` lists `"properties": null`.
The tools listed are `charge`, or the names in TOOLS_FILE (comma-separated), read when the server
starts: a server upgraded while the gateway runs.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(log_file: str, code: int, tools_file: str | None) -> None:
    names = ["charge"]
    if tools_file:
        with open(tools_file, encoding="utf-8") as listed:
            names = [n.strip() for n in listed.read().split(",") if n.strip()]
    note = os.environ.get("RAW_DESCRIPTION_NOTE", "")
    tools = [
        {"name": n, "description": f"The {n} tool.{note}", "inputSchema": {"type": "object", "description": note}}
        for n in names
    ]
    for tool in tools:
        if tool["name"] == "nullprops":
            tool["inputSchema"]["properties"] = None
    for line in sys.stdin:
        message = json.loads(line)
        ident, method = message.get("id"), message.get("method")
        if ident is None:  # a notification
            continue
        if method == "tools/call":
            with open(log_file, "a", encoding="utf-8") as log:
                log.write(json.dumps(message["params"]) + "\n")
            name = message["params"]["name"]
            if name == "pause":
                time.sleep(float(message["params"].get("arguments", {}).get("seconds", 1)))
            if name == "charge":
                error = {"code": code, "message": "receipt printer offline"}
                print(json.dumps({"jsonrpc": "2.0", "id": ident, "error": error}), flush=True)
                continue
            if name == "legacy":  # "café" in Latin-1: not UTF-8
                reply = {"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": "caf@"}]}}
                sys.stdout.buffer.write(json.dumps(reply).encode().replace(b"caf@", b"caf\xe9") + b"\n")
                sys.stdout.flush()
                continue
            text = json.dumps(message["params"].get("arguments", {})) if name == "echo_args" else f"{name} ok"
            result: dict = {"content": [{"type": "text", "text": text}]}
        elif method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": tools}
        else:
            result = {}
        print(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
