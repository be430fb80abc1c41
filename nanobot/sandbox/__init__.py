"""The OS sandbox behind the `exec` tool.

`tools.exec.sandbox` picks it: `auto` (bubblewrap, else Landlock, else exec is disabled), `bwrap`,
`landlock`, or `off`. `detect` says which one is active and why (shown by `nanobot status` and
warned at start); `Sandbox.run` runs one shell command inside it with the allow-listed environment,
the resource limits, a deadline and an output cap (see spec.py, bwrap.py, landlock.py, process.py).
The path-pattern guard in the exec tool is only a first filter; this is what safety rests on.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loguru import logger

from nanobot.config.paths import PRIVATE_DIRS
from nanobot.sandbox.process import ProcessResult, run_process
from nanobot.sandbox.spec import (
    PROTECTED_DIRS,
    SHELL,
    Limits,
    SandboxSpec,
    limits_hook,
    prlimit_argv,
    sandbox_env,
    shared_home,
    user_tasks,
)
from nanobot.util.fs import ensure_private_dir, repair_private

__all__ = ["Limits", "ProcessResult", "Sandbox", "SandboxStatus", "SandboxUnavailable", "detect"]


class SandboxUnavailable(Exception):
    """exec is disabled: the configured sandbox cannot run on this machine."""


@dataclass(frozen=True)
class SandboxStatus:
    requested: str  # auto | bwrap | landlock | off
    active: str  # bwrap | landlock | off | unavailable
    detail: str  # the Landlock ABI, or why the sandbox is missing

    def describe(self) -> str:
        if self.active == "off":
            return "off (tools.exec.sandbox is off: exec runs without an OS sandbox)"
        if self.active == "unavailable":
            return f"unavailable, exec is disabled ({self.detail})"
        suffix = f", {self.detail}" if self.detail else ""
        return f"{self.active} (requested {self.requested}{suffix})"


ROOT_WARNING = (
    "the gateway runs as root: its commands run as root inside the sandbox too, where the system's "
    "root-only files (/etc/shadow, SSH host keys) stay readable; run it as an ordinary user "
    "(the Docker image and `nanobot service install` do)"
)


def runs_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@functools.cache
def detect(requested: str) -> SandboxStatus:
    """Which sandbox `requested` amounts to on this machine (probed once per process)."""
    from nanobot.sandbox.bwrap import bwrap_problem
    from nanobot.sandbox.landlock import abi_version
    from nanobot.sandbox.seccomp import filter_problem

    if requested in ("off", "none"):
        return SandboxStatus(requested, "off", "")
    if not sys.platform.startswith("linux"):
        return SandboxStatus(
            requested, "unavailable", "the exec sandbox needs Linux; set tools.exec.sandbox to off"
        )
    problem = filter_problem()  # both sandboxes install it; without it neither is whole
    if problem is not None:
        return SandboxStatus(requested, "unavailable", f"{problem}; set tools.exec.sandbox to off to run commands")
    problems = []
    if requested in ("auto", "bwrap"):
        problem = bwrap_problem()
        if problem is None:
            return SandboxStatus(requested, "bwrap", "")
        problems.append(problem)
    if requested in ("auto", "landlock"):
        abi = abi_version()
        if abi > 0:
            return SandboxStatus(requested, "landlock", f"Landlock ABI {abi}")
        problems.append("Landlock is not available (needs Linux 5.13+ with landlock among the LSMs)")
    return SandboxStatus(requested, "unavailable", "; ".join(problems))


class Sandbox:
    """Runs shell commands for one workspace inside the active sandbox."""

    def __init__(
        self,
        status: SandboxStatus,
        workspace: Path,
        *,
        network: bool = True,
        extra_env: dict[str, str] | None = None,
        limits: Limits = Limits(),
        private_dirs: tuple[Path, ...] = (),
        private_files: tuple[Path, ...] = (),
    ) -> None:
        self.status = status
        self.workspace = workspace.resolve()
        self.network = network
        self.extra_env = dict(extra_env or {})
        self.limits = limits
        # Outside the workspace and never visible inside: $HOME, NANOBOT_HOME, config and log files.
        self.private_dirs = tuple(p.expanduser().resolve() for p in private_dirs)
        self.private_files = tuple(p.expanduser().resolve() for p in private_files)
        # taken once, before any command ran: a snapshot per command took what another command,
        # still running, had just opened (config.json 0644) and "restored" it when it ended
        self._modes = self._private_modes()
        self._read_grants: list[str] | None = None  # Landlock's read-only folders, computed once

    def spec(self, shared: bool, own_media: str = "") -> SandboxSpec:
        return SandboxSpec(self.workspace, shared, self.network, self.extra_env, self.limits, own_media)

    async def run(
        self,
        command: str,
        *,
        shared: bool,
        timeout_s: float,
        cap_bytes: int,
        keep_bytes: int,
        own_media: str = "",
    ) -> ProcessResult:
        """Run `SHELL -c command` (bash, else sh) in the workspace; raises SandboxUnavailable when exec
        is disabled.
        `own_media`: in a shared context, how this chat's downloads begin (the only media/ shown)."""
        active = self.status.active
        if active == "unavailable":
            raise SandboxUnavailable(
                f"exec is disabled: no OS sandbox is available ({self.status.detail}). "
                "Install bubblewrap or allow unprivileged user namespaces; tools.exec.sandbox = off "
                "runs commands unsandboxed (not recommended)."
            )
        spec = self.spec(shared, own_media)
        for sub in PROTECTED_DIRS:  # exist before the command runs, so they are mounted read-only
            ensure_private_dir(self.workspace / sub)
        run = {
            "cwd": str(self.workspace),
            "timeout_s": timeout_s,
            "cap_bytes": cap_bytes,
            "keep_bytes": keep_bytes,
        }
        if active == "bwrap":
            from nanobot.sandbox.bwrap import bwrap_argv, find_bwrap

            exe = find_bwrap() or "bwrap"
            wrapper = prlimit_argv(self.limits)
            argv = bwrap_argv(exe, spec, command, list(self.private_dirs), list(self.private_files), wrapper)
            hook = None if wrapper is not None else limits_hook(self.limits)
            return await self._run_bwrap(argv, sandbox_env(spec), hook, run)
        if active == "landlock":
            return await self._run_landlock(spec, command, run)
        wrapper = prlimit_argv(self.limits, user_tasks())
        hook = None if wrapper is not None else limits_hook(self.limits)
        argv = [*(wrapper or []), SHELL, "-c", command]
        return await run_process(argv, env=sandbox_env(spec), preexec=hook, **run)

    async def _run_bwrap(
        self, argv: list[str], env: dict[str, str], hook: Callable[[], None] | None, run: dict
    ) -> ProcessResult:
        """bubblewrap, inside Landlock's abstract-socket scope where the kernel has it: with the
        network on, the command shares the host's network namespace and with it every abstract
        UNIX socket a host service listens on (they ignore the hidden /run and /tmp)."""
        from nanobot.sandbox.landlock import abstract_socket_scope
        from nanobot.sandbox.seccomp import command_filter, filter_hook

        scope = abstract_socket_scope() if self.network else None
        if scope is None:  # the seccomp filter alone (the scope's hook installs it too)
            preexec = filter_hook(command_filter(landlock=False, network=self.network), hook)
            return await run_process(argv, env=env, preexec=preexec, **run)
        try:
            # Applied in the child, not by spawning from a restricted thread as Landlock mode does:
            # bwrap's --die-with-parent follows the thread that forked it, which ends right after.
            return await run_process(argv, env=env, preexec=scope.restrict_hook(hook), **run)
        finally:
            scope.close()

    async def _run_landlock(self, spec: SandboxSpec, command: str, run: dict) -> ProcessResult:
        from nanobot.sandbox.landlock import build_ruleset, read_grants

        if self._read_grants is None:
            private = [*self.private_dirs, *self.private_files]
            self._read_grants = read_grants(self._path_roots(), private, self.workspace)
        tmpdir = tempfile.mkdtemp(prefix="nanobot-exec-")
        if spec.shared:
            os.mkdir(shared_home(tmpdir), 0o700)  # its HOME (sandbox_env)
        rules = build_ruleset(spec, tmpdir, self._read_grants)
        try:
            env = sandbox_env(spec, tmpdir)
            wrapper = prlimit_argv(self.limits, user_tasks())
            if wrapper is not None:
                argv = [*wrapper, SHELL, "-c", command]
                return await run_process(argv, env=env, spawner=rules.spawn_restricted, **run)
            hook = rules.restrict_hook(limits_hook(self.limits))
            return await run_process([SHELL, "-c", command], env=env, preexec=hook, **run)
        finally:
            rules.close()
            shutil.rmtree(tmpdir, ignore_errors=True)
            self._restore_private()

    def _private_modes(self) -> dict[Path, int]:
        """The permission bits of the folders and files kept from commands (the user's home, nanobot's
        home and config, the workspace) as they are when the sandbox is made: nanobot's own are
        private then (made so at every start)."""
        modes = {}
        user_home = Path.home().resolve()
        for path in (*self.private_dirs, *self.private_files, self.workspace):
            with contextlib.suppress(OSError):
                mode = stat.S_IMODE(os.stat(path).st_mode)
                # the user's home keeps the user's mode; nanobot's own are owner-only whatever they were
                modes[path] = mode if path == user_home else mode & ~0o077
        return modes

    def _restore_private(self) -> int:
        """Landlock has no right for permissions: a command could open nanobot's home, its config
        (the API keys) or the transcripts to every user of the machine, though it cannot read them
        itself. After every command what it changed is put back as it was before any command ran,
        and nanobot's own folders in the workspace are private again; the number changed."""
        changed = 0
        for path, mode in self._modes.items():
            with contextlib.suppress(OSError):
                if stat.S_IMODE(os.stat(path).st_mode) != mode:
                    os.chmod(path, mode)
                    changed += 1
        changed += sum(repair_private(self.workspace / name) for name in PRIVATE_DIRS)
        if changed:
            logger.warning("a command changed the permissions of {} of nanobot's private file(s); put back", changed)
        return changed

    def _path_roots(self) -> list[Path]:
        """Folders of PATH entries outside the private ones (e.g. a virtualenv), readable under Landlock."""
        env = sandbox_env(self.spec(False))
        roots: list[Path] = []
        for entry in env.get("PATH", "").split(":"):
            if not entry.startswith("/"):
                continue
            folder = Path(entry).resolve().parent
            if folder == Path("/") or any(folder.is_relative_to(p) for p in self.private_dirs):
                continue
            roots.append(folder)
        return roots
