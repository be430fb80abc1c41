"""Sandbox selection: `auto` falls back from bubblewrap to Landlock to a disabled exec (never to an
unsandboxed one), `off` is warned about at every start, and `nanobot status` shows the active mode."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import nanobot.sandbox.bwrap as bwrap_mod
import nanobot.sandbox.landlock as landlock_mod
from nanobot.agent.tools.base import ToolContext, ToolError
from nanobot.agent.tools.shell import ExecTool
from nanobot.config.schema import ExecToolConfig
from nanobot.sandbox import detect
from tests.conftest import run_cli
from tests.security.conftest import OWNER, SANDBOXES, make_exec, require_sandbox


@pytest.fixture
def fresh_detect() -> Iterator[None]:
    detect.cache_clear()
    yield
    detect.cache_clear()


def _no_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bwrap_mod, "bwrap_problem", lambda: "bubblewrap cannot create namespaces here (test)")


def test_auto_falls_back_to_landlock_without_user_namespaces(fresh_detect, monkeypatch) -> None:  # noqa: ANN001
    _no_bwrap(monkeypatch)
    assert detect("auto").active == "landlock"


async def test_auto_without_any_sandbox_disables_exec_loudly(
    fresh_detect, monkeypatch, tmp_path: Path, logs
) -> None:  # noqa: ANN001
    _no_bwrap(monkeypatch)
    monkeypatch.setattr(landlock_mod, "abi_version", lambda: 0)
    tool = ExecTool(tmp_path, ExecToolConfig(sandbox="auto"), restrict=True)
    assert any("exec is disabled" in line and "WARNING" in line for line in logs)
    with pytest.raises(ToolError, match="exec is disabled: no OS sandbox is available"):
        await tool.execute(ToolContext(), command="echo should-not-run > ran.txt")
    assert not (tmp_path / "ran.txt").exists()


async def test_a_kernel_refusing_the_seccomp_filter_disables_exec_instead_of_every_command(
    fresh_detect, monkeypatch, tmp_path: Path  # noqa: ANN001
) -> None:
    """Without its seccomp filter Landlock leaves UNIX sockets and IPC open: a kernel (or a
    container's own filter) refusing it must not give a half sandbox, nor a command that fails to
    start with an opaque error each time; `auto` says why exec is off."""
    import nanobot.sandbox.seccomp as seccomp_mod

    real_prctl = seccomp_mod._prctl
    monkeypatch.setattr(seccomp_mod, "_prctl", lambda option, *rest: -1 if option == 22 else real_prctl(option, *rest))
    seccomp_mod.filter_problem.cache_clear()
    try:
        for mode in ("auto", "bwrap", "landlock"):
            status = detect(mode)
            assert status.active == "unavailable" and "seccomp filter cannot be installed" in status.detail
        tool = ExecTool(tmp_path, ExecToolConfig(sandbox="auto"), restrict=True)
        with pytest.raises(ToolError, match="seccomp filter cannot be installed"):
            await tool.execute(ToolContext(), command="echo should-not-run > ran.txt")
        assert not (tmp_path / "ran.txt").exists()
    finally:
        seccomp_mod.filter_problem.cache_clear()


def test_bubblewrap_is_probed_as_commands_run_it(fresh_detect, monkeypatch, tmp_path: Path) -> None:  # noqa: ANN001
    """Commands start bubblewrap under no_new_privs (the seccomp filter needs it), which ignores a
    setuid bit: a bwrap that works only by it passed a bare probe, so `auto` chose it and then every
    command failed ("No permissions to create a new namespace") instead of falling back to Landlock."""
    setuid_only = tmp_path / "bwrap"  # stands in for a setuid-root bwrap on a host refusing user namespaces
    setuid_only.write_text(
        "#!/bin/sh\ngrep -q 'NoNewPrivs:.1' /proc/self/status || exit 0\n"
        "echo 'bwrap: No permissions to create a new namespace' >&2; exit 1\n"
    )
    setuid_only.chmod(0o755)
    monkeypatch.setattr(bwrap_mod, "find_bwrap", lambda: str(setuid_only))
    bwrap_mod.bwrap_problem.cache_clear()
    try:
        assert detect("auto").active == "landlock"
        assert "No permissions" in detect("bwrap").detail
    finally:
        bwrap_mod.bwrap_problem.cache_clear()


def test_explicit_bwrap_never_falls_back(fresh_detect, monkeypatch) -> None:  # noqa: ANN001
    _no_bwrap(monkeypatch)
    status = detect("bwrap")
    assert status.active == "unavailable" and "namespaces" in status.detail


def test_off_is_warned_at_every_start(tmp_path: Path, logs) -> None:  # noqa: ANN001
    for _ in range(2):
        ExecTool(tmp_path, ExecToolConfig(sandbox="off"), restrict=True)
    assert sum("exec sandbox is off" in line for line in logs) == 2


@pytest.mark.parametrize(
    ("mode", "shown"), [("auto", "bwrap (requested auto)"), ("landlock", "landlock"), ("off", "off")]
)
def test_status_shows_the_active_sandbox(home: Path, mode: str, shown: str) -> None:
    (home / "config.json").write_text(json.dumps({"tools": {"exec": {"sandbox": mode}}}))
    result = run_cli("status", home=home)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("Exec sandbox:"))
    assert line.startswith(f"Exec sandbox: {shown}")


async def test_landlock_keeps_nanobot_home_out_of_a_readable_system_folder(
    tmp_path: Path, monkeypatch
) -> None:  # noqa: ANN001
    """A system service keeps NANOBOT_HOME under /var/lib, which Landlock otherwise grants whole."""
    system = tmp_path / "var" / "lib"
    (system / "other").mkdir(parents=True)
    (system / "other" / "readme").write_text("public system file\n")
    home = system / "nanobot"
    (home / "workspace" / "media").mkdir(parents=True)
    (home / "config.json").write_text('{"providers": {"openai": {"apiKey": "sk-under-var-lib-secret"}}}')
    monkeypatch.setattr(
        landlock_mod, "SYSTEM_READ_ROOTS", (*landlock_mod.SYSTEM_READ_ROOTS, str(tmp_path / "var"))
    )
    tool = ExecTool(
        home / "workspace", ExecToolConfig(sandbox="landlock"), restrict=True, private_dirs=(home,)
    )
    up = 'H=$(dirname "$PWD"); S=$(dirname "$H")'
    out = await tool.execute(
        ToolContext(), command=f'{up}; cat "$S/other/readme"; cat "$H/config.json"; true'
    )
    assert "public system file" in out  # the rest of the folder stays readable
    assert "sk-under-var-lib-secret" not in out


def test_the_file_hidden_files_are_bound_to_is_removed_at_exit() -> None:
    """One empty file per process was left in /tmp by every start, for ever."""
    import subprocess
    import sys
    from pathlib import Path

    made = "from nanobot.sandbox.bwrap import empty_file; p = empty_file(); print(p, p.stat().st_size, flush=True)"
    for exit_by in ("", "; from nanobot.gateway.process import exit_now; exit_now(0)"):  # the gateway's way
        out = subprocess.run([sys.executable, "-c", made + exit_by], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        name, size = out.stdout.split()
        assert size == "0" and Path(name).name.startswith("nanobot-empty-")
        assert not Path(name).exists(), exit_by


async def test_landlock_refuses_io_uring_which_would_make_sockets_past_the_filter(nano_home: Path) -> None:
    """Under Landlock a seccomp filter refuses socket(AF_UNIX); io_uring creates and connects
    sockets without that system call, so its setup is refused too."""
    from tests.security.conftest import make_exec, require_sandbox

    require_sandbox("landlock")
    (nano_home / "workspace" / "ring.py").write_text(
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nparams = ctypes.create_string_buffer(120)\n"
        "print(libc.syscall(425, 8, params), ctypes.get_errno())\n"  # io_uring_setup(8 entries)
    )
    out = await make_exec(nano_home, "landlock").execute(ToolContext(), command="python3 ring.py")
    assert out.split() == ["-1", "13"], out  # EACCES


def test_the_socket_filter_is_built_for_the_known_architectures_only() -> None:
    from nanobot.sandbox.seccomp import command_filter

    assert command_filter(landlock=True, network=True, machine="x86_64") is not None
    assert command_filter(landlock=False, network=False, machine="aarch64") is not None
    # other system call numbers: no filter rather than a wrong one
    assert command_filter(landlock=True, network=True, machine="riscv64") is None


I386_UNIX_SOCKET = """\
import ctypes, mmap
# push rbx; mov eax, 359 (i386 socket); mov ebx, 1 (AF_UNIX); mov ecx, 1 (SOCK_STREAM); xor edx, edx;
# int 0x80; pop rbx; ret — the 32-bit system call table, which a filter checking numbers must refuse
code = bytes([0x53, 0xB8, 0x67, 1, 0, 0, 0xBB, 1, 0, 0, 0, 0xB9, 1, 0, 0, 0, 0x31, 0xD2, 0xCD, 0x80, 0x5B, 0xC3])
page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
print(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))())
"""


async def test_landlock_refuses_a_unix_socket_made_through_the_32_bit_system_calls(nano_home: Path) -> None:
    """The filter checks x86_64's number of socket(); a 64-bit program may still enter the kernel
    through `int 0x80` with i386 numbers, which the filter must refuse as a whole."""
    import platform
    import subprocess

    from tests.security.conftest import make_exec, require_sandbox

    require_sandbox("landlock")
    if platform.machine() != "x86_64":
        pytest.skip("the i386 system calls exist on x86_64 only")
    probe = nano_home / "workspace" / "i386.py"
    probe.write_text(I386_UNIX_SOCKET)
    unsandboxed = subprocess.run(["python3", str(probe)], capture_output=True, text=True, timeout=30)
    if not unsandboxed.stdout.strip().isdigit():
        pytest.skip(f"no 32-bit system calls on this kernel ({unsandboxed.stdout.strip()})")
    out = await make_exec(nano_home, "landlock").execute(ToolContext(), command="python3 i386.py")
    assert out.strip() == "-13", out  # -EACCES


async def test_landlock_grant_never_lands_on_a_symlink_swapped_in_after_the_listing(
    nano_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workspace's entries are listed, then granted write one by one: a process outside the
    sandbox that swaps `projects/` for a link to a folder of its choice between the two must not
    get the command write access to that folder (each grant opens its entry with O_NOFOLLOW)."""
    import os

    from tests.security.conftest import make_exec, require_sandbox

    require_sandbox("landlock")
    ws = nano_home / "workspace"
    (ws / "projects").mkdir()
    target = nano_home.parent / "elsewhere"
    target.mkdir()
    real_open = os.open

    def swap_then_open(path, flags, *args, **kw):  # noqa: ANN001, ANN002, ANN003
        if Path(path) == ws / "projects" and flags & os.O_PATH and not (ws / "projects").is_symlink():
            (ws / "projects").rename(ws / "projects.old")  # the swap lands just after the listing
            (ws / "projects").symlink_to(target)
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", swap_then_open)
    tool = make_exec(nano_home, "landlock")
    out = await tool.execute(ToolContext(), command="echo planted > projects/x 2>&1; echo rc=$?")
    monkeypatch.undo()
    assert (ws / "projects").is_symlink()  # the swap did happen while the rules were built
    assert not (target / "x").exists(), out


@pytest.mark.parametrize("mode", ["off", *SANDBOXES])
async def test_commands_run_in_bash_as_models_write_them(nano_home: Path, mode: str) -> None:
    """Commands ran under dash: `source`, `[[ ]]`, `{1..3}` and `set -o pipefail` each failed."""
    if mode != "off":
        require_sandbox(mode)
    tool = make_exec(nano_home, mode)
    command = "set -o pipefail; [[ -d media ]] && echo {1..3}; source /dev/null && echo sourced"
    out = await tool.execute(OWNER, command=command)
    assert out.split() == ["1", "2", "3", "sourced"], out


@pytest.mark.parametrize("mode", ["off", *SANDBOXES])
async def test_a_command_longer_than_a_command_line_holds_says_what_to_do(nano_home: Path, mode: str) -> None:
    """A 140,000-character heredoc failed with a bare "Argument list too long"."""
    if mode != "off":
        require_sandbox(mode)
    tool = make_exec(nano_home, mode)
    with pytest.raises(ToolError, match="write_file"):
        await tool.execute(OWNER, command="cat > media/big.txt <<'EOF'\n" + "x" * 140_000 + "\nEOF")


async def test_under_landlock_the_model_learns_why_the_top_folder_refuses_new_files(nano_home: Path) -> None:
    """Landlock cannot let a command create entries in the workspace's top folder (only grant per
    folder): the model's first `echo > notes.txt` or `git init` failed with a bare "Permission denied"."""
    require_sandbox("landlock")
    tool = make_exec(nano_home, "landlock")
    assert "top folder" in tool.description
    out = await tool.execute(OWNER, command="echo hi > notes.txt")
    assert "Permission denied" in out and "write_file" in out and "[exit code" in out, out
    assert (await tool.execute(OWNER, command="echo hi > media/notes.txt && cat media/notes.txt")) == "hi\n"


async def test_under_landlock_a_refused_read_gets_no_top_folder_hint(nano_home: Path) -> None:
    """Every "Permission denied" got the top-folder hint, also a refused read outside: it sent the
    model the wrong way."""
    require_sandbox("landlock")
    tool = ExecTool(nano_home / "workspace", ExecToolConfig(sandbox="landlock"), restrict=False,
                    private_dirs=(nano_home,), private_files=(nano_home / "config.json",))
    out = await tool.execute(OWNER, command=f"cat {nano_home / 'config.json'}")
    assert "[exit code" in out and "top folder" not in out, out
    for command in ("mkdir proj", "touch notes.txt", "git init -q"):
        assert "top folder" in await tool.execute(OWNER, command=command), command
