"""The `exec` tool: run a shell command in the workspace, inside the OS sandbox (nanobot.sandbox).

The sandbox is what safety rests on: the workspace writable, nanobot's own files read-only, the
system read-only, nothing else of $HOME or NANOBOT_HOME visible, an allow-listed environment,
resource limits, a deadline and an output cap. In a shared (group) context the command runs
without memory/ and sessions/ (the trust policy decides whether exec runs there at all).

Before that, a path-pattern guard refuses obviously destructive commands and, with
restrictToWorkspace, commands naming paths outside the workspace. It is a first filter that gives
the model a clear message; commands compute paths at run time, so it is never the defence.
"""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.agent.tools.base import Tool, ToolContext, ToolError
from nanobot.agent.tools.shell_guard import HOME_TILDE, outside_candidates
from nanobot.config.paths import media_prefix
from nanobot.config.schema import ExecToolConfig
from nanobot.sandbox import ROOT_WARNING, Limits, Sandbox, SandboxUnavailable, detect, runs_as_root

BUILTIN_DENY_PATTERNS = (
    r"\brm\s+-[a-z]*r[a-z]*f?\s+(/|~|\$HOME)(\s|$)",  # rm -rf / or ~
    r"\bmkfs(\.\w+)?\b",
    r"\bdd\s+[^|]*\bof=/dev/",
    r":\(\)\s*\{\s*:\|:&\s*\};:",  # fork bomb
    r"\b(shutdown|reboot|halt|poweroff)\b",
    r">\s*/dev/sd[a-z]",
    r"\bchmod\s+-R\s+[0-7]{3,4}\s+/(\s|$)",
)
# Linux's limit on one argument (MAX_ARG_STRLEN): a longer command failed with "Argument list too long".
MAX_COMMAND_BYTES = 128 * 1024
LANDLOCK_TOP_FOLDER = (
    "Under this sandbox (Landlock) commands cannot create files or folders directly in the workspace's "
    "top folder or in memory/: work inside a sub-folder (write_file makes one: write a file into it), and "
    "note that HOME is that top folder"
)
# A failed command's words when it tried to create something (Landlock's read-only top folder).
_NOT_CREATED = re.compile(
    r"cannot (create|touch|make|mkdir|lock|open .* for writing)|could not (create|lock)|Read-only file system"
    r"|Permission denied: '[^/']+'|^(/bin/)?bash: line \d+: [^/:\s]+: Permission denied",
    re.IGNORECASE | re.MULTILINE,
)
_OLD_TILDE = re.compile(r"(^|[\s=:'\"])~")  # any ~ after a space or a quote: without a sandbox, all count
# Programs and devices a command may name although they are outside the workspace.
_ALLOWED_SYSTEM_PREFIXES = ("/usr/", "/bin/", "/sbin/", "/lib", "/dev/null", "/dev/stdout", "/dev/stderr")


class ExecTool(Tool):
    name = "exec"
    description = (
        "Run a bash command in the workspace folder and return its output (stdout and stderr). "
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

    def __init__(
        self,
        workspace: Path,
        cfg: ExecToolConfig,
        restrict: bool,
        *,
        private_dirs: tuple[Path, ...] = (),
        private_files: tuple[Path, ...] = (),
    ) -> None:
        self.workspace = workspace.resolve()
        self.cfg = cfg
        self.restrict = restrict
        self._deny = [re.compile(p, re.IGNORECASE) for p in (*BUILTIN_DENY_PATTERNS, *cfg.deny_patterns)]
        self.status = detect(cfg.sandbox)
        limits = Limits(cfg.max_processes, cfg.max_cpu_s, cfg.max_file_mb, cfg.max_memory_mb)
        self.sandbox = Sandbox(
            self.status,
            self.workspace,
            network=cfg.network,
            extra_env=cfg.env,
            limits=limits,
            private_dirs=(Path.home(), *private_dirs),
            private_files=private_files,
        )
        if self.status.active == "landlock":
            self.description = f"{ExecTool.description} {LANDLOCK_TOP_FOLDER}"
        if self.status.active == "off":
            logger.warning("exec sandbox is off (tools.exec.sandbox): commands run with the daemon's rights")
        elif self.status.active == "unavailable":
            logger.warning("exec is disabled: no OS sandbox is available ({})", self.status.detail)
        elif runs_as_root():
            logger.warning(ROOT_WARNING)

    def check(self, command: str) -> None:
        for pattern in self._deny:
            if pattern.search(command):
                raise ToolError("command refused by the safety guard (matches a destructive pattern)")
        if self.restrict:
            if re.search(r"(^|[\s/'\"])\.\.(/|\s|$)", command):
                raise ToolError("command refused: '..' path segments are not allowed (restrictToWorkspace)")
            sandboxed = self.status.active in ("bwrap", "landlock")
            if HOME_TILDE.search(command) or _OLD_TILDE.search(command) and not sandboxed or re.search(
                r"\$\{?HOME\b", command
            ):
                # HOME is the workspace inside the sandbox, so the old "outside the workspace" was
                # false; the model means the user's home, which a command never reaches
                raise ToolError(
                    "command refused: ~ and $HOME are not the user's home folder here (commands get the "
                    "workspace as HOME); use paths relative to the workspace, the current folder "
                    "(restrictToWorkspace)"
                )
            for raw in outside_candidates(command, sandboxed):
                if raw.startswith(_ALLOWED_SYSTEM_PREFIXES):
                    continue
                if not Path(raw).resolve().is_relative_to(self.workspace):
                    raise ToolError(f"command refused: '{raw}' lies outside the workspace")

    async def execute(self, ctx: ToolContext, command: str, timeout_s: float | None = None, **_: Any) -> str:
        if not command.strip():
            raise ToolError("command is empty")
        if "\0" in command:
            raise ToolError("command holds a NUL byte, which no shell command can")
        if len(command.encode("utf-8", "surrogatepass")) >= MAX_COMMAND_BYTES:
            raise ToolError(
                f"the command is {len(command.encode('utf-8', 'surrogatepass')):,} bytes: one command line "
                f"holds less than {MAX_COMMAND_BYTES // 1024} KiB. Write the script into a file with "
                "write_file, then run that file"
            )
        self.check(command)
        usable = isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0
        limit = min(timeout_s if usable else self.cfg.timeout_s, self.cfg.timeout_s)  # shorter if asked, never longer
        try:
            result = await self.sandbox.run(
                command,
                shared=ctx.shared,
                own_media=media_prefix(ctx.channel, ctx.chat_id) if ctx.shared else "",
                timeout_s=limit,
                cap_bytes=self.cfg.max_output_bytes,
                keep_bytes=self.cfg.max_output_chars * 2,
            )
        except SandboxUnavailable as exc:
            raise ToolError(str(exc)) from None
        except OSError as exc:
            raise ToolError(f"command could not start: {exc.strerror or exc}") from None
        text = result.text(self.cfg.max_output_chars)  # the omitted count covers all it printed
        killed = None
        if result.timed_out:
            killed = f"command timed out after {limit:g} s and was killed: {shlex.quote(command)[:200]}"
        elif result.capped:
            killed = f"command printed more than {self.cfg.max_output_bytes} bytes and was killed"
        if killed:
            raise ToolError(killed + (f"\nOutput so far:\n{text}" if text else ""))
        text = text or "(no output)"
        if not result.returncode:
            return text
        at_top = re.escape(str(self.workspace)) + r"/[^/\s:]+: Permission denied"  # git init: <ws>/.git
        if self.status.active == "landlock" and (_NOT_CREATED.search(text) or re.search(at_top, text)):
            text += f"\n[{LANDLOCK_TOP_FOLDER}]"  # the model's first file at the top failed with no reason
        return f"{text}\n[exit code {result.returncode}]"

