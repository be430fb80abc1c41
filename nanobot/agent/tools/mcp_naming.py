"""How an MCP server's tools are named, switched on and shown to the model.

- `tool_name`: ``mcp_<server>_<tool>`` within ^[A-Za-z0-9_-]{1,64}$; `listing_names` names a whole
  listing in its order, so a tool's name depends on neither enabledTools nor which servers are up.
- `tool_enabled`: enabledTools entries are globs over the server's own tool name or the wrapped one.
- `render_result`: a CallToolResult as text; `masked_schema`: an input schema with every string of
  it masked (a server's text goes to the model with every request).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections import Counter
from collections.abc import Collection
from typing import Any

from loguru import logger

from nanobot.secrets import mask
from nanobot.util.text import truncate_head

MAX_TOOL_NAME_CHARS = 64
MAX_RESULT_CHARS = 100_000
MAX_SCHEMA_CHARS = 8_000  # a tool's input schema, sent with every request: its text is prompt too
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def _plain(server: str, tool: str) -> str:
    return _UNSAFE.sub("_", f"mcp_{server}_{tool}")

def tool_name(server: str, tool: str, taken: set[str] | None = None, servers: Collection[str] = ()) -> str:
    """``mcp_<server>_<tool>`` sanitised to ^[A-Za-z0-9_-]{1,64}$. A long name, one already `taken`
    (two tools of one server alike once sanitised) and every name of a server whose prefix overlaps
    another configured server's (`a` and `a_b`: both could give `mcp_a_b_c`) get a hash of the
    (server, tool) pair: a name never depends on which servers happen to be up."""
    raw = f"mcp_{server}_{tool}"
    name = _UNSAFE.sub("_", raw)
    prefix = _UNSAFE.sub("_", f"mcp_{server}_")
    overlapping = any(
        other != server and (p.startswith(prefix) or prefix.startswith(p))
        for other in servers
        for p in (_UNSAFE.sub("_", f"mcp_{other}_"),)
    )
    if len(name) > MAX_TOOL_NAME_CHARS or (taken is not None and name in taken) or overlapping:
        # the pair, where two servers could spell the same raw name; the raw name otherwise (the
        # names of long tools stay what earlier versions called them)
        digest = hashlib.sha1((f"{server}\0{tool}" if overlapping else raw).encode()).hexdigest()[:8]
        name = f"{name[: MAX_TOOL_NAME_CHARS - 9]}_{digest}"
    return name


def listing_names(server: str, tools: list[str], servers: Collection[str] = ()) -> list[str]:
    """The wrapped names of a server's whole listing, in its order (the first of two tools alike
    once sanitised keeps the plain name)."""
    taken: set[str] = set()
    names: list[str] = []
    for tool in tools:
        names.append(tool_name(server, tool, taken, servers))
        taken.add(names[-1])
    return names


def enabled_in_listing(server: str, tools: list[str], patterns: list[str], servers: Collection[str] = ()) -> list[bool]:
    """`tool_enabled` for each tool of a listing, by the names the listing gives them: an exact
    entry `mcp_h_read_file` switched on `read.file` too, whose name is hashed beside `read_file`."""
    plain = Counter(_plain(server, tool) for tool in tools)
    return [
        tool_enabled(server, tool, patterns, servers, wrapped=name, plain_is_its=plain[_plain(server, tool)] == 1)
        for tool, name in zip(tools, listing_names(server, tools, servers), strict=True)
    ]


def tool_enabled(
    server: str,
    tool: str,
    patterns: list[str],
    servers: Collection[str] = (),
    *,
    wrapped: str | None = None,
    plain_is_its: bool = True,
) -> bool:
    """enabledTools entries are globs over the server's tool name or the wrapped mcp_ name: as `mcp
    list` shows it (`wrapped`; hashed when server names overlap), or as earlier versions showed it,
    unhashed (configs written then switched the tools off silently) when no other tool of the
    listing has that unhashed name (`plain_is_its`)."""
    names = {tool, wrapped or tool_name(server, tool, servers=servers)}
    if plain_is_its:
        names.add(_plain(server, tool))
    return any(fnmatch.fnmatchcase(name, p) for p in patterns for name in names)


def render_result(result: Any) -> str:
    """A CallToolResult as text for the LLM; an isError result becomes ``Error: ...``."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {block.mime_type}, {len(block.data)} base64 chars]")
        elif kind == "resource":
            text = getattr(block.resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[binary resource {block.resource.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource link {block.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts) or "(no output)"
    text = truncate_head(text, MAX_RESULT_CHARS, marker="\n[... truncated at {limit} chars]")
    return f"Error: {text}" if result.is_error else text




def schema_fits(server: str, tool: Any) -> bool:
    size = len(json.dumps(tool.input_schema or {}, ensure_ascii=False, default=str))
    if size > MAX_SCHEMA_CHARS:
        logger.warning(
            "MCP server {}: tool {!r} skipped, its input schema has {} characters (at most {})",
            server, tool.name, size, MAX_SCHEMA_CHARS,
        )
        return False
    return True


def masked_schema(value: Any) -> Any:
    """`value` (an input schema) with each string in it, keys too, masked: masking its JSON text
    missed a secret holding a quote, a backslash or a non-ASCII letter (escaped there), and one
    ending in a backslash split an escape and broke the schema."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {masked_schema(k) if isinstance(k, str) else k: masked_schema(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked_schema(v) for v in value]
    return value
