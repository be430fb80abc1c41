"""The `exec` tool: run a shell command in the workspace.

Guards (best effort, documented as such): a deny list of destructive patterns, refusal of commands
naming absolute paths outside the workspace when restrictToWorkspace is on, an environment without
provider keys and channel tokens, a timeout, and a head+tail output cap. Where bubblewrap works, the
command also runs in an OS sandbox that can only write inside the workspace.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from nanobot.agent.tools.base import Tool, ToolContext, ToolError
from nanobot.config.schema import ExecToolConfig
from nanobot.util.text import truncate_middle

BUILTIN_DENY_PATTERNS = (
    r"\brm\s+-[a-z]*r[a-z]*f?\s+(/|~|\$HOME)(\s|$)",  # rm -rf / or ~
    r"\bmkfs(\.\w+)?\b",
    r"\bdd\s+[^|]*\bof=/dev/",
    r":\(\)\s*\{\s*:\|:&\s*\};:",  # fork bomb
    r"\b(shutdown|reboot|halt|poweroff)\b",
    r">\s*/dev/sd[a-z]",
    r"\bchmod\s+-R\s+[0-7]{3,4}\s+/(\s|$)",
)
_SECRET_ENV_RE = re.compile(r"(API_KEY|TOKEN|SECRET|PASSWORD|_KEY)$|^NANOBOT_", re.IGNORECASE)
_ABS_PATH_RE = re.compile(r"(?<![\w.~:/-])(/[^\s'\";|&<>()]*)")
# Programs and devices a command may name although they are outside the workspace.
_ALLOWED_SYSTEM_PREFIXES = ("/usr/", "/bin/", "/sbin/", "/lib", "/dev/null", "/dev/stdout", "/dev/stderr")


def scrubbed_env() -> dict[str, str]:
    """The process environment minus anything that looks like a credential or nanobot config."""
    return {k: v for k, v in os.environ.items() if not _SECRET_ENV_RE.search(k)}


def cap_output(text: str, max_chars: int) -> str:
    return truncate_middle(
        text,
        max_chars,
        head_share=2 / 3,
        marker="\n\n[... {omitted} characters omitted ...]\n\n",
        marker_budget=0,
    )


def _bwrap_works() -> bool:
    exe = shutil.which("bwrap")
    if not exe:
        return False
    try:
        probe = subprocess.run(
            [exe, "--ro-bind", "/", "/", "--dev", "/dev", "true"], capture_output=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


class ExecTool(Tool):
    name = "exec"
    description = (
        "Run a shell command in the workspace folder and return its output (stdout and stderr). "
        "Long output is shortened; commands time out."
    )
    parameters = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The shell command"},
            "timeout_s": {"type": "number", "minimum": 1, "description": "Timeout in seconds"},
        },
        "required": ["command"],
    }

    def __init__(self, workspace: Path, cfg: ExecToolConfig, restrict: bool) -> None:
        self.workspace = workspace.resolve()
        self.cfg = cfg
        self.restrict = restrict
        self._deny = [re.compile(p, re.IGNORECASE) for p in (*BUILTIN_DENY_PATTERNS, *cfg.deny_patterns)]
        self._sandbox: bool | None = None

    def check(self, command: str) -> None:
        for pattern in self._deny:
            if pattern.search(command):
                raise ToolError("command refused by the safety guard (matches a destructive pattern)")
        if self.restrict:
            if re.search(r"(^|[\s/'\"])\.\.(/|\s|$)", command):
                raise ToolError("command refused: '..' path segments are not allowed (restrictToWorkspace)")
            if re.search(r"(^|[\s=:'\"])~|\$\{?HOME\b", command):
                raise ToolError(
                    "command refused: the home folder is outside the workspace (restrictToWorkspace)"
                )
            for raw in _ABS_PATH_RE.findall(command):
                if raw.startswith(_ALLOWED_SYSTEM_PREFIXES):
                    continue
                if not Path(raw).resolve().is_relative_to(self.workspace):
                    raise ToolError(f"command refused: '{raw}' lies outside the workspace")

    def _argv(self, command: str) -> list[str]:
        if self._sandbox is None:
            self._sandbox = self.cfg.sandbox == "bwrap" or (self.cfg.sandbox == "auto" and _bwrap_works())
        if not self._sandbox:
            return ["/bin/sh", "-c", command]
        ws = str(self.workspace)
        return [
            "bwrap",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            "--bind",
            ws,
            ws,
            "--chdir",
            ws,
            "--die-with-parent",
            "/bin/sh",
            "-c",
            command,
        ]

    async def execute(self, ctx: ToolContext, command: str, timeout_s: float | None = None, **_: Any) -> str:
        if not command.strip():
            raise ToolError("command is empty")
        self.check(command)
        self.workspace.mkdir(parents=True, exist_ok=True)
        limit = min(timeout_s or self.cfg.timeout_s, self.cfg.timeout_s * 5)
        proc = await asyncio.create_subprocess_exec(
            *self._argv(command),
            cwd=self.workspace,
            env=scrubbed_env(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout=limit)
        except (TimeoutError, asyncio.CancelledError) as exc:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise ToolError(f"command timed out after {limit:g} s: {shlex.quote(command)[:200]}") from None
        text = out.decode("utf-8", errors="replace")
        result = cap_output(text, self.cfg.max_output_chars) or "(no output)"
        return f"{result}\n[exit code {proc.returncode}]" if proc.returncode else result
