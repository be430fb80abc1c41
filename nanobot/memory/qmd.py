"""Optional QMD backend: `qmd search|vsearch|query QUERY --json -n N` run as a subprocess.

Any failure (not installed, non-zero exit, timeout, unparsable output) returns None and the
caller falls back to the built-in index. QMD reports files as `qmd://<collection>/<path>`; they
are mapped back to workspace-relative memory paths.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.memory.search import SNIPPET_MAX_CHARS, SearchResponse, SearchResult, citation

QMD_MODES = ("search", "vsearch", "query")
MAX_QMD_OUTPUT_BYTES = 4_000_000
_HUNK = re.compile(r"@@\s*-(\d+)(?:,(\d+))?")
_HUNK_LINE = re.compile(r"^\s*@@[^\n]*\n?")  # the diff-style position header qmd puts on a snippet


class QmdBackend:
    def __init__(self, workspace: Path, *, timeout_s: float = 5.0, mode: str = "query", command: str = "qmd"):
        if mode not in QMD_MODES:
            raise ValueError(f"qmd mode must be one of {QMD_MODES}")
        self.workspace = workspace
        self.timeout_s = timeout_s
        self.mode = mode
        self.command = command

    def executable(self) -> str | None:
        return shutil.which(self.command)

    async def search(self, query: str, max_results: int, min_score: float) -> SearchResponse | None:
        exe = self.executable()
        if exe is None:
            return None
        args = [exe, self.mode, query, "--json", "-n", str(max_results), "--min-score", str(min_score)]
        try:
            proc = await asyncio.create_subprocess_exec(
                *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(self.workspace)
            )
        except OSError as exc:
            logger.warning("qmd could not start ({}); using the built-in memory index", exc)
            return None
        try:
            out, errout = await asyncio.wait_for(proc.communicate(), timeout=self.timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            logger.warning(
                "qmd {} timed out after {}s; using the built-in memory index", self.mode, self.timeout_s
            )
            return None
        if proc.returncode != 0:
            logger.warning(
                "qmd exited {}: {}; using the built-in memory index", proc.returncode, errout[:300]
            )
            return None
        try:
            data = json.loads(out[:MAX_QMD_OUTPUT_BYTES] or b"[]")
        except ValueError:
            logger.warning("qmd printed no valid JSON; using the built-in memory index")
            return None
        items = data.get("results", []) if isinstance(data, dict) else data
        if not isinstance(items, list):
            return None
        results = [r for r in (self._result(item) for item in items[:max_results]) if r is not None]
        return SearchResponse("qmd", results)

    def _path(self, item: dict[str, Any]) -> str | None:
        for key in ("fullPath", "file", "path"):
            value = item.get(key)
            if not isinstance(value, str) or not value:
                continue
            if value.startswith("qmd://"):
                # qmd://<collection>/<relative path>: try the memory folder, then the workspace.
                rel = value[len("qmd://") :].split("/", 1)[-1]
                for base in (self.workspace / "memory", self.workspace):
                    if (base / rel).is_file():
                        return (base / rel).relative_to(self.workspace).as_posix()
                continue
            path = Path(value)
            if path.is_absolute():
                try:
                    return path.resolve().relative_to(self.workspace.resolve()).as_posix()
                except ValueError:
                    continue
            return path.as_posix()
        return None

    def _result(self, item: Any) -> SearchResult | None:
        if not isinstance(item, dict):
            return None
        path = self._path(item)
        if path is None:
            return None
        snippet = str(item.get("snippet") or "")
        start = item.get("line")
        length = None
        hunk = _HUNK.search(snippet)
        if not isinstance(start, int) and hunk:
            start = int(hunk.group(1))
            length = int(hunk.group(2)) if hunk.group(2) else None
        if not isinstance(start, int) or start < 1:
            start = 1
        body = _HUNK_LINE.sub("", snippet, count=1).strip("\n")
        end = start + max(0, (length or len(body.splitlines()) or 1) - 1)
        try:
            score = float(item.get("score", 0.0))
        except (TypeError, ValueError):
            score = 0.0
        return SearchResult(path, start, end, score, body[:SNIPPET_MAX_CHARS], citation(path, start, end))
