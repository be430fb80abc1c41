"""`nanobot doctor` as a user runs it (subprocesses) against the local fakes: healthy set-up, a dead
provider, rejected channel tokens, a broken config, and the safe repairs of --fix."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import can_mount_privately, config_dict, run_cli
from tests.fakes.discord_server import FakeDiscordServer
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.telegram_server import FakeTelegramServer
from tests.gateway_harness import DC_TOKEN, TG_TOKEN, TG_USER


@pytest.fixture
def fake_telegram() -> Iterator[FakeTelegramServer]:
    server = FakeTelegramServer().start()
    yield server
    server.stop()


@pytest.fixture
def fake_discord() -> Iterator[FakeDiscordServer]:
    server = FakeDiscordServer().start()
    yield server
    server.stop()


def _setup(
    home: Path, llm_url: str, tg: FakeTelegramServer | None = None, dc: FakeDiscordServer | None = None
) -> Path:
    home.chmod(0o700)  # as onboard creates it (pytest made this one world-readable)
    assert run_cli("onboard", home=home).returncode == 0
    data = config_dict(llm_url)
    if tg is not None:
        data["channels"] = {
            "telegram": {
                "enabled": True,
                "token": TG_TOKEN,
                "allowFrom": [str(TG_USER)],
                "baseUrl": tg.base_url,
                "baseFileUrl": tg.base_file_url,
            }
        }
    if dc is not None:
        data.setdefault("channels", {})["discord"] = {
            "enabled": True,
            "token": DC_TOKEN,
            "allowFrom": [],
            "apiBase": dc.api_base,
            "gatewayUrl": dc.gateway_url,
        }
    path = home / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    path.chmod(0o600)
    return path


def _doctor(home: Path, *args: str) -> tuple[int, dict]:
    result = run_cli(
        "doctor", "--json", "--timeout", "10", *args, home=home, env={"XDG_CONFIG_HOME": str(home)}
    )
    assert "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert report["healthy"] is (result.returncode == 0)
    return result.returncode, {c["part"]: c for c in report["checks"]}


def test_healthy_setup_passes(
    home: Path, fake_llm: FakeLLMServer, fake_telegram: FakeTelegramServer, fake_discord: FakeDiscordServer
) -> None:
    _setup(home, fake_llm.url, fake_telegram, fake_discord)
    code, checks = _doctor(home)
    assert code == 0, [c for c in checks.values() if c["status"] == "fail"]
    assert checks["provider"]["status"] == "ok" and fake_llm.requests[-1]["max_tokens"] == 1
    assert checks["telegram"]["status"] == "ok" and "1 allowed sender" in checks["telegram"]["detail"]
    assert fake_telegram.calls_to("getMe")
    assert checks["discord"]["status"] == "ok" and "pairing approve" in checks["discord"]["detail"]
    assert TG_TOKEN not in json.dumps(checks) and DC_TOKEN not in json.dumps(checks)
    assert {"config", "sandbox", "files", "disk", "gateway", "service", "memory index"} <= checks.keys()
    text = run_cli("doctor", "--timeout", "10", home=home, env={"XDG_CONFIG_HOME": str(home)})
    assert text.returncode == 0 and text.stdout.rstrip().endswith("healthy"), text.stdout


def test_dead_provider_fails_naming_it(home: Path, fake_llm: FakeLLMServer) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    _setup(home, dead)
    code, checks = _doctor(home)
    assert code == 1
    assert checks["provider"]["status"] == "fail", checks["provider"]
    assert [p for p, c in checks.items() if c["status"] == "fail"] == ["provider"]
    text = run_cli("doctor", "--timeout", "10", home=home, env={"XDG_CONFIG_HOME": str(home)})
    assert text.returncode == 1 and "unhealthy: provider" in text.stdout


def test_rejected_channel_tokens_fail_naming_the_channel(
    home: Path, fake_llm: FakeLLMServer, fake_telegram: FakeTelegramServer, fake_discord: FakeDiscordServer
) -> None:
    _setup(home, fake_llm.url, fake_telegram, fake_discord)
    fake_telegram.rejected_tokens.add(TG_TOKEN)
    code, checks = _doctor(home)
    assert code == 1
    assert checks["telegram"]["status"] == "fail" and "rejected" in checks["telegram"]["detail"]
    assert checks["discord"]["status"] == "ok" and checks["provider"]["status"] == "ok"
    fake_discord.rejected_tokens.add(DC_TOKEN)
    code, checks = _doctor(home)
    assert code == 1 and checks["discord"]["status"] == "fail" and "rejected" in checks["discord"]["detail"]


def test_broken_config_fails_and_skips_the_rest(home: Path) -> None:
    (home / "config.json").write_text('{"agents": {"defaults": {"maxTokenz": 1}}}', encoding="utf-8")
    code, checks = _doctor(home)
    assert code == 1
    assert checks["config"]["status"] == "fail"
    assert "agents.defaults.maxTokenz: unknown key" in checks["config"]["detail"]
    assert all(c["status"] == "skip" for p, c in checks.items() if p != "config")



@pytest.mark.parametrize(
    ("keys", "typo", "fine"),
    [
        (("logging", "rotation"), "ten megs", ["1 day", "00:00", "50 MB"]),
        (("memory", "backend"), "mem0o", ["File", ""]),
        (("memory", "condition"), "no-memory", ["no_memory", ""]),
        (("memory", "search", "embeddingProvider"), "litelm", ["Local", "auto"]),
        (("gateway", "heartbeat", "target"), "555", ["telegram:-100123", "discord:42", ""]),
        (("gateway", "heartbeat", "target"), "telegram: ", ["telegram:555"]),
    ],
)
def test_a_value_only_a_later_step_would_refuse_fails_the_config_check(
    home: Path, fake_llm: FakeLLMServer, keys: tuple[str, ...], typo: str, fine: list[str]
) -> None:
    """Each was checked only where it was used: a bad log rotation when a gateway with a log file
    started, a backend at the first turn (every turn then exited 2), an embedding provider by falling
    back to keyword search, a malformed heartbeat target in a log line at every beat. Doctor called
    each config valid; now every command refuses it, naming the key."""
    path = _setup(home, fake_llm.url)
    data = json.loads(path.read_text(encoding="utf-8"))

    def set_value(value: str) -> None:
        node = data
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
        path.write_text(json.dumps(data), encoding="utf-8")

    set_value(typo)
    code, checks = _doctor(home)
    detail = checks["config"]["detail"]
    assert code == 1 and checks["config"]["status"] == "fail"
    assert ".".join(keys) in detail and typo in detail, detail
    status = run_cli("status", home=home)
    assert status.returncode == 2 and ".".join(keys) in status.stderr and "Traceback" not in status.stderr
    for value in fine:
        set_value(value)
        assert _doctor(home)[1]["config"]["status"] == "ok", value


def test_fix_repairs_permissions_folders_and_the_index(home: Path, fake_llm: FakeLLMServer) -> None:
    _setup(home, fake_llm.url)
    ws = home / "workspace"
    (ws / "memory" / "MEMORY.md").write_text("# Memory\n\nThe owner's cat is called Mila.\n")
    ws.chmod(0o755)
    (ws / "memory" / "MEMORY.md").chmod(0o644)  # a transcript or note readable by others: reported too
    (ws / "sessions").chmod(0o755)
    (ws / "cron").rmdir()
    (ws / "SOUL.md").unlink()  # the agent's identity: doctor called such a workspace "complete"
    (ws / "AGENTS.md").write_text("my own rules\n")
    index = ws / "memory" / ".index.sqlite"
    index.write_bytes(b"this is not a database" * 100)
    code, checks = _doctor(home)
    assert code == 1
    assert checks["files"]["status"] == "fail" and "cron" in checks["files"]["detail"]
    assert "missing bootstrap files" in checks["files"]["detail"] and "SOUL.md" in checks["files"]["detail"]
    assert checks["memory index"]["status"] == "fail"
    code, checks = _doctor(home, "--fix")
    assert code == 0, checks
    assert checks["files"]["fixed"] and checks["memory index"]["fixed"].startswith("rebuilt")
    assert stat.S_IMODE(ws.stat().st_mode) == 0o700 and (ws / "cron").is_dir()
    assert stat.S_IMODE((ws / "memory" / "MEMORY.md").stat().st_mode) == 0o600
    assert stat.S_IMODE((ws / "sessions").stat().st_mode) == 0o700
    assert (ws / "SOUL.md").is_file() and (ws / "AGENTS.md").read_text() == "my own rules\n"
    code, checks = _doctor(home)
    assert code == 0 and checks["memory index"]["status"] == "ok" and checks["files"]["status"] == "ok"
    found = run_cli("memory", "search", "Mila", "--json", home=home)
    assert "Mila" in found.stdout, found.stderr


def test_a_missing_workspace_is_reported_with_its_bootstrap_files(
    home: Path, fake_llm: FakeLLMServer
) -> None:
    _setup(home, fake_llm.url)
    import shutil

    shutil.rmtree(home / "workspace")
    code, checks = _doctor(home)
    assert checks["files"]["status"] == "warn" and "SOUL.md" in checks["files"]["detail"], checks["files"]
    code, checks = _doctor(home, "--fix")
    assert code == 0 and "restored 6 bootstrap file(s)" in checks["files"]["fixed"], checks["files"]
    assert (home / "workspace" / "SOUL.md").is_file()


def test_defaults_an_earlier_onboard_wrote_are_named(home: Path, fake_llm: FakeLLMServer) -> None:
    """An older onboard wrote every key; its defaults (keyword-only search, transcripts not indexed)
    stayed after an upgrade with nothing to say so."""
    path = _setup(home, fake_llm.url)
    data = json.loads(path.read_text())
    data["memory"] = {"search": {"embeddingProvider": "none", "includeSessions": False, "rrfK": 20}}
    path.write_text(json.dumps(data))
    code, checks = _doctor(home)
    detail = checks["config"]["detail"]
    assert checks["config"]["status"] == "warn", checks["config"]
    assert 'memory.search.embeddingProvider = "none" (now "auto")' in detail
    assert "memory.search.includeSessions = false (now true)" in detail and "rrfK" not in detail  # 20: chosen


def test_loose_files_nanobot_owns_are_not_called_private(home: Path, fake_llm: FakeLLMServer) -> None:
    """Transcripts and MEMORY.md readable by others, with the workspace folder itself 0700: doctor
    said "private permissions" and --fix left them so."""
    _setup(home, fake_llm.url)
    memory_md = home / "workspace" / "memory" / "MEMORY.md"
    memory_md.write_text("# Memory\n")
    memory_md.chmod(0o644)
    code, checks = _doctor(home)
    assert checks["files"]["status"] == "fail" and str(memory_md) in checks["files"]["detail"]
    _doctor(home, "--fix")
    assert stat.S_IMODE(memory_md.stat().st_mode) == 0o600


@pytest.mark.skipif(not can_mount_privately(), reason="needs user and mount namespaces (unshare -rmn)")
def test_a_read_only_home_fails_the_files_check(home: Path, fake_llm: FakeLLMServer) -> None:
    """Mounted read-only (an SD card after errors, a wrong Docker volume flag): doctor said healthy,
    and the next message failed with "cannot save the conversation"."""
    import os
    import shlex
    import subprocess
    import sys

    _setup(home, fake_llm.url)
    check = (
        "from pathlib import Path; from nanobot.doctor.local import check_files; "
        f"c = check_files(Path({str(home / 'workspace')!r}), Path({str(home / 'config.json')!r}), fix=False); "
        "print(c.status, c.detail)"
    )
    mount = f"mount --bind {shlex.quote(str(home))} {shlex.quote(str(home))} && " + (
        f"mount -o remount,ro,bind {shlex.quote(str(home))}"
    )
    env = {**os.environ, "NANOBOT_HOME": str(home)}
    result = subprocess.run(
        ["unshare", "-rmn", "sh", "-c", f"{mount} && {shlex.join([sys.executable, '-c', check])}"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert result.stdout.startswith("fail not writable: " + str(home)), result.stdout + result.stderr
    code, checks = _doctor(home)  # the same home, writable again
    assert checks["files"]["status"] == "ok", checks["files"]


def _in_namespace(home: Path, shell: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m nanobot ARGS` in a user namespace (uid 0 there owns only our own files), after the
    `shell` set-up (mounts) made there; no network: the provider check fails, as it may."""
    import os
    import shlex
    import sys

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}, "NANOBOT_HOME": str(home)}
    command = shlex.join([sys.executable, "-m", "nanobot", *args])
    return subprocess.run(
        ["unshare", "-rmn", "sh", "-c", f"{shell} {command}"],
        capture_output=True, text=True, timeout=120, env=env, cwd=str(home),
    )


@pytest.mark.skipif(not can_mount_privately(), reason="needs user and mount namespaces")
def test_fix_reports_a_config_it_cannot_make_private(home: Path, fake_llm: FakeLLMServer) -> None:
    """A world-readable config.json on a read-only mount (a container's `config.json:ro`): --fix
    stopped at its chmod with a bare "[Errno 30]" and showed no check at all."""
    import shlex

    config = _setup(home, fake_llm.url)
    config.chmod(0o644)
    quoted = shlex.quote(str(config))
    mount = f"mount --bind {quoted} {quoted} && mount -o remount,ro,bind {quoted} && "
    result = _in_namespace(home, mount, "doctor", "--fix", "--json", "--timeout", "2")
    assert "Traceback" not in result.stderr and result.returncode == 1, result.stderr
    files = {c["part"]: c for c in json.loads(result.stdout)["checks"]}["files"]
    assert files["status"] == "fail" and "cannot be made private" in files["detail"], files


@pytest.mark.skipif(
    not can_mount_privately() or os.geteuid() != 0, reason="needs user namespaces and chown (root)"
)
def test_a_home_restored_as_another_users_is_diagnosed_not_crashed(home: Path, fake_llm: FakeLLMServer) -> None:
    """Restored from a backup with its owner kept (files of another uid): doctor and status ended in
    a bare "[Errno 13]" (exit 1, a service restarted in a loop) instead of naming the problem."""
    config = _setup(home, fake_llm.url)
    assert run_cli("memory", "status", home=home).returncode == 0  # the workspace's folders exist
    nobody = 65534
    try:
        for path in [home, *home.rglob("*")]:
            os.lchown(path, nobody, nobody)
        home.chmod(0o755)
        config.chmod(0o644)  # readable: the workspace (0700, another uid's) is not
        doctor = _in_namespace(home, "", "doctor", "--json", "--timeout", "2")
        status = _in_namespace(home, "", "status")
    finally:
        for path in [home, *home.rglob("*")]:
            os.lchown(path, 0, 0)
    assert "Traceback" not in doctor.stderr + status.stderr
    files = {c["part"]: c for c in json.loads(doctor.stdout)["checks"]}["files"]
    assert files["status"] == "fail" and "owned by another user" in files["detail"], files
    assert status.returncode == 2 and "owned by another user" in status.stderr, status.stderr


def test_a_heartbeat_target_on_a_channel_that_is_off_is_warned_about(home: Path, fake_llm: FakeLLMServer) -> None:
    """`target: "telgram:555"` passed doctor; the gateway then did none of the heartbeat's tasks."""
    path = _setup(home, fake_llm.url)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["gateway"] = {"heartbeat": {"enabled": True, "target": "telgram:555"}}
    path.write_text(json.dumps(data), encoding="utf-8")
    _, checks = _doctor(home)
    assert checks["heartbeat"]["status"] == "warn" and "'telgram'" in checks["heartbeat"]["detail"]
    data["gateway"] = {"heartbeat": {"enabled": True, "target": ""}}
    path.write_text(json.dumps(data), encoding="utf-8")
    assert "heartbeat" not in _doctor(home)[1]


def test_a_workspace_left_behind_by_a_moved_home_is_named(home: Path, fake_llm: FakeLLMServer) -> None:
    """Home moved, workspace configured by its old absolute path: nanobot started silently on a new
    empty workspace (an assistant that forgot everything) and doctor advised --fix (more empty
    folders), never naming the workspace beside the config."""
    path = _setup(home, fake_llm.url)
    assert run_cli("memory", "status", home=home).returncode == 0  # the workspace in the home exists
    data = json.loads(path.read_text(encoding="utf-8"))
    old = home.parent / "old-home" / "workspace"
    data["agents"]["defaults"]["workspace"] = str(old)
    path.write_text(json.dumps(data), encoding="utf-8")
    for fix in ((), ("--fix",), ("--fix",)):  # --fix made the folder, and the next run said ok
        _, checks = _doctor(home, *fix)
        assert checks["files"]["status"] == "fail" and str(home / "workspace") in checks["files"]["detail"]
        assert not old.exists()  # doctor created nothing
    fake_llm.push("hello")
    result = run_cli("agent", "-m", "hi", home=home)
    assert result.returncode == 0 and str(home / "workspace") in result.stderr, result.stderr


@pytest.mark.skipif(not can_mount_privately(), reason="needs user and mount namespaces")
def test_a_full_disk_keeps_the_memory_index_and_says_so_in_one_line(tmp_path: Path) -> None:
    """On a full disk opening the index failed in its shared-memory file (an I/O error, not "disk
    full"): the index was deleted to be rebuilt, the rebuild failed with a traceback, and every
    later command said "it is kept as it is" of an empty file. doctor --fix showed no checklist."""
    import shlex
    import sys

    source, home = tmp_path / "source", tmp_path / "home"
    source.mkdir(mode=0o700)
    home.mkdir(mode=0o700)
    assert run_cli("onboard", home=source).returncode == 0
    (source / "config.json").write_text(json.dumps({"memory": {"search": {"embeddingProvider": "none"}}}))
    notes = source / "workspace" / "memory"
    (notes / "2026-01-02.md").write_text("- The cat is called Tom.\n" * 20)
    nanobot = shlex.join([sys.executable, "-m", "nanobot"])
    index = shlex.quote(str(home / "workspace" / "memory" / ".index.sqlite"))
    script = (
        f"mount -t tmpfs -o size=2m tmpfs {shlex.quote(str(home))} && cp -a {shlex.quote(str(source))}/. "
        f"{shlex.quote(str(home))}/ && {nanobot} memory reindex >/dev/null 2>&1 && stat -c 'before %i %s' {index} && "
        f"(dd if=/dev/zero of={shlex.quote(str(home))}/filler bs=4k 2>/dev/null; true) && "
        f"for cmd in 'memory reindex' 'memory status' 'doctor --fix --json --timeout 1'; do "
        f"{nanobot} $cmd > out 2> err; echo \"rc $cmd: $?\"; grep -c Traceback err; tail -n 3 err; "
        f"done; stat -c 'after %i %s' {index}"
    )
    import os
    import subprocess

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}, "NANOBOT_HOME": str(home),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    result = subprocess.run(["unshare", "-rmn", "sh", "-c", script], capture_output=True, text=True,
                            timeout=300, env=env, cwd=str(tmp_path))
    out = result.stdout
    before = next(line for line in out.splitlines() if line.startswith("before"))
    after = next(line for line in out.splitlines() if line.startswith("after"))
    assert before.replace("before", "") == after.replace("after", ""), out  # the same file, the same size
    assert "rc memory reindex: 1" in out and "rc memory status: 1" in out, out
    assert "Traceback" not in out and "\n0\n" in out, out
    assert "the disk is full" in out, out
    checks = {c["part"]: c for c in json.loads((tmp_path / "out").read_text())["checks"]}  # doctor's, the last
    assert checks["memory index"]["status"] in ("fail", "warn"), checks["memory index"]


def test_an_emptied_jobs_file_fails_the_check(home: Path, fake_llm: FakeLLMServer) -> None:
    """A zero-byte cron/jobs.json (a full disk, `> jobs.json`) was read as "no jobs": every reminder
    silently gone, `cron list` said "No scheduled jobs." and doctor said healthy."""
    _setup(home, fake_llm.url)
    assert run_cli("cron", "add", "--name", "pills", "--message", "take the pills", "--every", "3600",
                   "--channel", "telegram", "--to", "555", home=home).returncode == 0
    code, checks = _doctor(home)
    assert checks["cron jobs"]["status"] == "ok" and checks["cron jobs"]["detail"].startswith("1 job(s)")
    jobs = home / "workspace" / "cron" / "jobs.json"
    jobs.write_bytes(b"")
    code, checks = _doctor(home)
    assert code == 1 and checks["cron jobs"]["status"] == "fail", checks["cron jobs"]
    assert "empty" in checks["cron jobs"]["detail"]
    listing = run_cli("cron", "list", home=home)
    assert listing.returncode == 1 and "the jobs file is empty" in listing.stderr, listing.stderr
    assert jobs.read_bytes() == b""  # left as it is for the user to restore


def test_a_hand_written_schedule_with_a_misspelled_key_is_kept_and_named(home: Path, fake_llm: FakeLLMServer) -> None:
    """A job written into jobs.json by hand with "cron" for "expr": `cron list` showed `cron 'None'`,
    doctor said ok, and the next `cron add` rewrote the file without the user's expression."""
    _setup(home, fake_llm.url)
    jobs = home / "workspace" / "cron" / "jobs.json"
    jobs.parent.mkdir(parents=True, exist_ok=True)
    jobs.write_text(json.dumps({"version": 1, "jobs": [{
        "id": "standup", "message": "remind me of the standup",
        "schedule": {"kind": "cron", "cron": "0 9 * * 1-5", "tz": "Europe/Berlin"}}]}))
    code, checks = _doctor(home)
    assert code == 1 and checks["cron jobs"]["status"] == "fail", checks["cron jobs"]
    assert "standup" in checks["cron jobs"]["detail"] and "schedule.expr" in checks["cron jobs"]["detail"]
    listing = run_cli("cron", "list", home=home)
    assert "unusable" in listing.stdout and "unknown there: cron" in listing.stdout, listing.stdout
    assert run_cli("cron", "add", "-m", "water the plants", "--every", "3600", home=home).returncode == 0
    kept = json.loads(jobs.read_text())["jobs"][0]["schedule"]
    assert kept["cron"] == "0 9 * * 1-5" and kept["tz"] == "Europe/Berlin", kept


@pytest.mark.parametrize("root", [True, False])
def test_a_gateway_run_as_root_is_warned_that_its_commands_are_root_too(
    root: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dropping capabilities does not make uid 0 an ordinary user: root-owned files readable by
    their owner alone (/etc/shadow, SSH host keys) stay readable inside either sandbox."""
    import nanobot.sandbox as sandbox_mod
    from nanobot.config.schema import Config
    from nanobot.doctor.local import check_sandbox

    monkeypatch.setattr(os, "geteuid", lambda: 0 if root else 1000)
    check = check_sandbox(Config())
    assert sandbox_mod.detect("auto").active in ("bwrap", "landlock")
    assert (check.status, "runs as root" in check.detail) == (("warn", True) if root else ("ok", False)), check


@pytest.mark.skipif(not can_mount_privately(), reason="needs user and mount namespaces")
def test_fix_on_a_read_only_home_still_shows_the_report(home: Path, fake_llm: FakeLLMServer) -> None:
    """A home mounted read-only (a `:ro` volume) with a memory index: plain doctor said what was
    wrong, --fix printed one `Error: [Errno 30] Read-only file system` line and no report at all."""
    import shlex

    _setup(home, fake_llm.url)
    assert run_cli("memory", "reindex", home=home).returncode == 0
    (home / "workspace" / "memory" / ".index.sqlite").write_bytes(b"damaged")  # --fix would rebuild it
    quoted = shlex.quote(str(home))
    mount = f"mount --bind {quoted} {quoted} && mount -o remount,ro,bind {quoted} && "
    result = _in_namespace(home, mount, "doctor", "--fix", "--json", "--timeout", "2")
    assert "Traceback" not in result.stderr and result.returncode == 1, result.stderr
    checks = {c["part"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["files"]["status"] == "fail" and "not writable" in checks["files"]["detail"]
    assert checks["memory index"]["status"] == "fail", checks["memory index"]
    assert "Read-only file system" in checks["memory index"]["detail"], checks["memory index"]


def test_a_file_where_a_workspace_folder_belongs_fails_and_is_kept(home: Path, fake_llm: FakeLLMServer) -> None:
    """A file named memory in the workspace: every search failed, yet doctor said "missing folders
    (--fix repairs)" and healthy, and --fix stopped with one `[Errno 20]` line."""
    import shutil

    _setup(home, fake_llm.url)
    memory = home / "workspace" / "memory"
    shutil.rmtree(memory)
    memory.write_text("my notes\n")
    for args in ((), ("--fix",)):
        code, checks = _doctor(home, *args)
        assert code == 1 and checks["files"]["status"] == "fail", checks["files"]
        assert "not folders" in checks["files"]["detail"] and "memory" in checks["files"]["detail"]
    assert memory.read_text() == "my notes\n"  # the user's file, never deleted
