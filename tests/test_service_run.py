"""The systemd unit `nanobot service install` writes starts a working gateway: its ExecStart= is run
exactly as written (with the unit's Environment=, under a stand-in NOTIFY_SOCKET), `nanobot health`
turns 0, READY=1 arrives, and SIGTERM stops it with exit 0 (Restart=on-failure would not fire)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import can_mount_privately
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.telegram_server import FakeTelegramServer
from tests.gateway_harness import gateway_config
from tests.run_as_written import (
    HEALTH_TIMEOUT_S,
    base_env,
    nanobot_on_path,
    notifications,
    notify_socket,
    stop,
    systemd_words,
    unit_settings,
    wait_healthy,
)


@pytest.fixture
def fake_telegram() -> FakeTelegramServer:
    server = FakeTelegramServer().start()
    yield server
    server.stop()


def _install(
    exe: Path, units: Path, config: Path, env: dict[str, str], user_unit: bool
) -> subprocess.CompletedProcess:
    """`nanobot service install` as a user runs it, the unit written to `units`, no systemctl."""
    argv = [str(exe), "service", "install", *(["--user"] if user_unit else [])]
    argv += ["--unit-dir", str(units), "--no-systemctl", "-c", str(config)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=config.parent)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("user_unit", [True, False], ids=["user-unit", "system-unit"])
def test_installed_unit_execstart_runs_a_healthy_gateway(
    tmp_path: Path, fake_llm: FakeLLMServer, fake_telegram: FakeTelegramServer, user_unit: bool
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    config = tmp_path / "etc" / "my config.json"  # a space: the quoting must survive
    config.parent.mkdir()
    data = gateway_config(fake_llm.url, fake_telegram, None, dc_allowed="")
    del data["gateway"]["watchdogIntervalS"]  # the default, as a user has it (a loaded host is slow)
    # relative, like the workspace: in NANOBOT_HOME (from the service's folder, /, it was /logs/...)
    data["logging"] = {"file": "logs/nanobot.log", "level": "INFO"}
    config.write_text(json.dumps(data))
    bin_dir = tmp_path / "bin"
    exe = nanobot_on_path(bin_dir)
    env = {**base_env(bin_dir), "NANOBOT_HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    units = tmp_path / "units"
    install = _install(exe, units, config, env, user_unit)
    assert install.returncode == 0, install.stderr
    settings = unit_settings((units / "nanobot.service").read_text())
    exec_start = [v for k, v in settings if k == "ExecStart"]
    assert len(exec_start) == 1
    argv = systemd_words(exec_start[0])
    assert Path(argv[0]).is_absolute() and argv[-1] == "gateway"
    unit_env = dict(w.split("=", 1) for k, v in settings if k == "Environment" for w in systemd_words(v))
    assert unit_env["NANOBOT_HOME"] == str(home)
    restart_prevent = {v for k, v in settings if k == "RestartPreventExitStatus"}

    log = tmp_path / "gateway.log"
    with notify_socket(tmp_path) as (address, sock), open(log, "wb") as fh:
        run_env = {**base_env(bin_dir), **unit_env, "NOTIFY_SOCKET": address}
        proc = subprocess.Popen(
            argv, env=run_env, cwd="/", stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT
        )
        try:
            health = wait_healthy([argv[0], "-c", str(config), "health"], run_env, tmp_path, proc, log)
            assert "healthy" in health.stderr
            seen = notifications(sock)
            deadline = time.monotonic() + HEALTH_TIMEOUT_S  # health can pass while the model warms up
            while "READY=1" not in seen and time.monotonic() < deadline and proc.poll() is None:
                seen += notifications(sock)
            assert "READY=1" in seen and "WATCHDOG=1" in seen
            code = stop(proc, log)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert code == 0, log.read_text(errors="replace")
        assert "STOPPING=1" in notifications(sock)
    assert str(code) not in restart_prevent
    assert fake_telegram.calls_to("getMe"), "the gateway never reached Telegram"
    assert "telegram" in (home / "logs" / "nanobot.log").read_text(encoding="utf-8").lower()


def _environment_file(path: Path) -> dict[str, str]:
    """KEY='value' lines, read as systemd reads single-quoted values (literally); systemd skips
    comment lines (# or ;)."""
    values = {}
    for line in path.read_text().splitlines():
        if line.startswith(("#", ";")):
            continue
        name, _, quoted = line.partition("=")
        assert quoted.startswith("'") and quoted.endswith("'"), line
        values[name] = quoted[1:-1]
    return values


@pytest.mark.timeout(300)
def test_settings_exported_in_the_installing_shell_reach_the_service(
    tmp_path: Path, fake_llm: FakeLLMServer, fake_telegram: FakeTelegramServer
) -> None:
    """The README exports the provider key in the shell; the unit did not carry it, so the service
    silently answered Telegram users with the embedded demo model."""
    home = tmp_path / "home"
    home.mkdir()
    config = home / "config.json"
    data = gateway_config(fake_llm.url, fake_telegram, None, dc_allowed="")
    del data["providers"]["custom"]["apiBase"]  # only in the shell, as the README's export
    del data["gateway"]["watchdogIntervalS"]
    config.write_text(json.dumps(data))
    bin_dir = tmp_path / "bin"
    exe = nanobot_on_path(bin_dir)
    shell = {
        **base_env(bin_dir),
        "NANOBOT_HOME": str(home),
        "NANOBOT_PROVIDERS__CUSTOM__API_BASE": fake_llm.url,
    }
    units = tmp_path / "units"
    install = _install(exe, units, config, shell, user_unit=True)
    assert install.returncode == 0, install.stderr
    assert "NANOBOT_PROVIDERS__CUSTOM__API_BASE" in install.stderr  # the user is told what was kept
    settings = unit_settings((units / "nanobot.service").read_text())
    env_files = [Path(v) for k, v in settings if k == "EnvironmentFile"]
    assert env_files == [home / "service.env"] and (env_files[0].stat().st_mode & 0o777) == 0o600
    argv = systemd_words(next(v for k, v in settings if k == "ExecStart"))
    unit_env = dict(w.split("=", 1) for k, v in settings if k == "Environment" for w in systemd_words(v))
    log = tmp_path / "gateway.log"
    with notify_socket(tmp_path) as (address, _sock), open(log, "wb") as fh:
        # what systemd gives the service: its Environment= and EnvironmentFile=, not the shell
        run_env = {
            **base_env(bin_dir),
            **unit_env,
            **_environment_file(env_files[0]),
            "NOTIFY_SOCKET": address,
        }
        proc = subprocess.Popen(
            argv, env=run_env, cwd="/", stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT
        )
        try:
            wait_healthy([argv[0], "-c", str(config), "health"], run_env, tmp_path, proc, log)
            fake_telegram.push_message("hello service", chat_id=555, user_id=555)
            deadline = time.monotonic() + HEALTH_TIMEOUT_S
            while not fake_telegram.calls_to("sendMessage") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert stop(proc, log) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert any("hello service" in json.dumps(r["messages"]) for r in fake_llm.requests), log.read_text()
    assert "demo model" not in log.read_text()
    # uninstalled, the copy of the shell's settings (API keys among them) goes with the unit
    uninstall = subprocess.run(
        [str(exe), "service", "uninstall", "--user", "--unit-dir", str(units), "--no-systemctl", "-c", str(config)],
        env=shell, capture_output=True, text=True, timeout=120, cwd=config.parent,
    )
    assert uninstall.returncode == 0, uninstall.stderr
    assert not (units / "nanobot.service").exists() and not (home / "service.env").exists()
    assert "service.env" in uninstall.stderr


def _keyed_home(tmp_path: Path) -> tuple[Path, Path, Path, dict[str, str]]:
    """(home, config, nanobot executable, a shell exporting an API key) for service-install tests."""
    home = tmp_path / "home"
    home.mkdir()
    config = home / "config.json"
    config.write_text("{}")
    bin_dir = tmp_path / "bin"
    exe = nanobot_on_path(bin_dir)
    return home, config, exe, {**base_env(bin_dir), "NANOBOT_HOME": str(home), "OPENAI_API_KEY": "sk-test-123456"}


def _uninstall(exe: Path, units: Path, config: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    argv = [str(exe), "service", "uninstall", "--unit-dir", str(units), "--no-systemctl", "-c", str(config)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=config.parent)


def test_uninstall_removes_only_the_settings_file_of_the_unit_it_removed(tmp_path: Path) -> None:
    """A review catch: an uninstall aimed at a folder with no unit (the user forgot --user) deleted
    service.env, which the installed unit still reads (systemd then refuses to start it)."""
    home, config, exe, shell = _keyed_home(tmp_path)
    installed, elsewhere = tmp_path / "user-units", tmp_path / "system-units"
    assert _install(exe, installed, config, shell, user_unit=True).returncode == 0
    assert (home / "service.env").exists()
    assert _uninstall(exe, elsewhere, config, shell).returncode == 0
    assert (home / "service.env").exists()  # no unit there: nothing of the installed one touched
    done = _uninstall(exe, installed, config, shell)
    assert done.returncode == 0 and not (home / "service.env").exists(), done.stderr


def test_a_reinstall_for_another_home_removes_the_settings_file_of_the_first(tmp_path: Path) -> None:
    """A review catch: the unit reinstalled for another NANOBOT_HOME left the first home's
    service.env, with its API key, behind for good."""
    bin_dir = tmp_path / "bin"
    exe = nanobot_on_path(bin_dir)
    units = tmp_path / "units"
    homes = [tmp_path / "old-home", tmp_path / "new-home"]
    for home in homes:
        home.mkdir()
        (home / "config.json").write_text("{}")
        shell = {**base_env(bin_dir), "NANOBOT_HOME": str(home), "OPENAI_API_KEY": "sk-test-123456"}
        done = _install(exe, units, home / "config.json", shell, user_unit=True)
        assert done.returncode == 0, done.stderr
    assert not (homes[0] / "service.env").exists() and (homes[1] / "service.env").exists()


def test_service_env_stays_while_a_unit_in_any_folder_reads_it(tmp_path: Path) -> None:
    """A review catch: uninstalling the user unit deleted the service.env a system unit installed
    with --unit-dir still read (only the default places were looked at)."""
    home, config, exe, shell = _keyed_home(tmp_path)
    first, second = tmp_path / "units-a", tmp_path / "units-b"
    for units in (first, second):
        assert _install(exe, units, config, shell, user_unit=True).returncode == 0
    assert _uninstall(exe, first, config, shell).returncode == 0
    assert (home / "service.env").exists()  # the second unit still reads it
    assert _uninstall(exe, second, config, shell).returncode == 0
    assert not (home / "service.env").exists()  # the last one gone: the keys go too


# A stdio MCP server of the smallest kind (newline-delimited JSON-RPC), as an npm package started
# with `npx -y <folder>`: npx unpacks it into its cache as it would a package from the registry.
_MCP_SERVER_JS = r"""#!/usr/bin/env node
const rl = require("readline").createInterface({ input: process.stdin });
const send = (id, result) => process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id, result }) + "\n");
rl.on("line", (line) => {
  const msg = JSON.parse(line);
  if (msg.id === undefined) return;
  if (msg.method === "initialize")
    send(msg.id, { protocolVersion: msg.params.protocolVersion, capabilities: { tools: {} },
                   serverInfo: { name: "hello", version: "1.0.0" } });
  else if (msg.method === "tools/list")
    send(msg.id, { tools: [{ name: "say_hello", description: "Greets.",
                             inputSchema: { type: "object", properties: {} } }] });
  else send(msg.id, {});
});
"""


@pytest.mark.skipif(shutil.which("npx") is None, reason="needs node's npx")
@pytest.mark.skipif(not can_mount_privately(), reason="needs user and mount namespaces (unshare -rmn)")
def test_an_npx_mcp_server_starts_under_the_units_read_only_home(tmp_path: Path) -> None:
    """ProtectSystem=strict leaves the home folder read-only: npx could not create ~/.npm and every
    MCP server started with `npx -y` failed under the service. The unit's Environment= points the
    download caches into NANOBOT_HOME, and nanobot passes them on to the server."""
    package = tmp_path / "hello-mcp"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "hello-mcp", "version": "1.0.0", "bin": "bin/hello.js"}))
    (package / "bin" / "hello.js").write_text(_MCP_SERVER_JS)
    (package / "bin" / "hello.js").chmod(0o755)
    user_home, home = tmp_path / "user", tmp_path / "nanobot-home"
    user_home.mkdir()
    home.mkdir()
    config = home / "config.json"
    server = {"command": "npx", "args": ["-y", str(package)], "connectTimeoutS": 60}
    config.write_text(json.dumps({"tools": {"mcpServers": {"hello": server}}}))
    bin_dir = tmp_path / "bin"
    exe = nanobot_on_path(bin_dir)
    shell = {**base_env(bin_dir), "NANOBOT_HOME": str(home), "HOME": str(user_home)}
    units = tmp_path / "units"
    assert _install(exe, units, config, shell, user_unit=True).returncode == 0
    settings = unit_settings((units / "nanobot.service").read_text())
    unit_env = dict(w.split("=", 1) for k, v in settings if k == "Environment" for w in systemd_words(v))

    def mcp_list(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        read_only_home = f"mount --bind {shlex.quote(str(user_home))} {shlex.quote(str(user_home))}"
        read_only_home += f" && mount -o remount,bind,ro {shlex.quote(str(user_home))}"
        command = shlex.join([str(exe), "-c", str(config), "mcp", "list", "--json"])
        return subprocess.run(
            ["unshare", "-rmn", "sh", "-c", f"{read_only_home} && exec {command}"],
            env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path,
        )

    def state(result: subprocess.CompletedProcess[str]) -> str:
        return json.loads(result.stdout)["servers"][0]["state"]

    without = mcp_list(shell)  # the defect: the shell's settings only, the home folder read-only
    assert state(without) != "ready" and "ENOENT" in without.stdout, without.stdout
    assert not (user_home / ".npm").exists()
    result = mcp_list({**shell, **unit_env})
    assert state(result) == "ready", result.stdout + result.stderr
    assert "say_hello" in result.stdout
    assert (home / "cache" / "npm").is_dir()
