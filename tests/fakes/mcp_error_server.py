"""A raw stdio MCP server (JSON lines, no SDK: it starts at once) whose one tool, `charge`, records
every call in a log file and then answers with a JSON-RPC error of the code given on its command
line. Usage: python mcp_error_server.py LOG_FILE CODE
"""

from __future__ import annotations

import json
import sys


def main(log_file: str, code: int) -> None:
    tool = {"name": "charge", "description": "Charge the card.", "inputSchema": {"type": "object"}}
    for line in sys.stdin:
        message = json.loads(line)
        ident, method = message.get("id"), message.get("method")
        if ident is None:  # a notification
            continue
        if method == "tools/call":
            with open(log_file, "a", encoding="utf-8") as log:
                log.write(json.dumps(message["params"]) + "\n")
            error = {"code": code, "message": "receipt printer offline"}
            print(json.dumps({"jsonrpc": "2.0", "id": ident, "error": error}), flush=True)
            continue
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "pay", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [tool]}
        else:
            result = {}
        print(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
