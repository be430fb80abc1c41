"""systemd unit rendering/installing (never the real /etc or systemctl), sd_notify, and the
`service` and `health` commands."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from nanobot.cli import service as service_cmd
from nanobot.cli.health import health
from nanobot.service.state import GatewayLock, GatewayState
from nanobot.service.systemd import (
    ServiceError,
    Systemctl,
    UnitSpec,
    install_unit,
    quote_arg,
    render_unit,
    sd_notify,
    systemd_watchdog_interval_s,
    uninstall_unit,
    unit_status,
    write_environment_file,
)
from tests.conftest import can_mount_privately

ROOT = Path(__file__).resolve().parents[1]

# A stand-in systemctl: logs its arguments, answers is-active/is-enabled, fails on demand.
FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "{log}"
if [ -n "$FAKE_SYSTEMCTL_OFFLINE" ]; then
  echo "System has not been booted with systemd as init system (PID 1). Can't operate." >&2
  exit 1
fi
case "$*" in
  *is-active*) echo active ;;
  *is-enabled*) echo enabled ;;
esac
if [ -n "$FAKE_SYSTEMCTL_FAIL" ] && echo "$*" | grep -q "$FAKE_SYSTEMCTL_FAIL"; then
  echo "Failed to $FAKE_SYSTEMCTL_FAIL: Access denied" >&2
  exit 1
fi
exit 0
"""


def spec(tmp_path: Path, **kw: object) -> UnitSpec:
    base: dict[str, object] = {
        "executable": "/opt/nanobot/bin/nanobot",
        "config_path": tmp_path / "home" / "config.json",
        "home": tmp_path / "home",
    }
    base.update(kw)
    return UnitSpec(**base)  # type: ignore[arg-type]


@pytest.fixture
def fake_systemctl(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    log = tmp_path / "systemctl.log"
    exe = bindir / "systemctl"
    exe.write_text(FAKE_SYSTEMCTL.format(log=log))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    yield str(exe), log


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


# ------------------------------------------------------------------------------------ render


def test_system_unit_contract(tmp_path: Path) -> None:
    text = render_unit(spec(tmp_path, run_as="alice", extra_rw_paths=(tmp_path / "ws",)))
    home = tmp_path / "home"
    assert f'ExecStart="/opt/nanobot/bin/nanobot" -c "{home}/config.json" gateway' in text
    assert f'Environment="NANOBOT_HOME={home}"' in text
    for line in (
        "Type=notify",
        "User=alice",
        "Restart=on-failure",
        "RestartPreventExitStatus=2",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        f'ReadWritePaths="{home}" "{tmp_path / "ws"}"',
        "PrivateTmp=yes",
        "KillMode=mixed",
        "After=network-online.target time-sync.target",
        "WantedBy=multi-user.target",
    ):
        assert line in text.splitlines(), line
    stop_s = int(next(v for v in text.splitlines() if v.startswith("TimeoutStopSec=")).split("=")[1])
    assert stop_s > 10  # longer than the gateway's own shutdown budget
    assert "WatchdogSec" not in text


def test_user_unit_and_options(tmp_path: Path) -> None:
    text = render_unit(spec(tmp_path, user_unit=True, run_as="alice", watchdog_sec=30))
    assert "User=" not in text
    assert "network-online" not in text
    assert "WantedBy=default.target" in text
    assert "WatchdogSec=30" in text.splitlines()
    assert "user namespaces" in text  # the sandboxing note for user units
    bare = render_unit(spec(tmp_path, user_unit=True, sandbox=False))
    assert "ProtectSystem" not in bare and "ReadWritePaths" not in bare
    assert "NoNewPrivileges=yes" in bare  # needs no namespaces, so it always stays


def test_quoting_escapes_specifiers_and_variables() -> None:
    assert quote_arg('/a b/100%/$HOME/"x"') == '"/a b/100%%/$$HOME/\\"x\\""'
    with pytest.raises(ServiceError):
        quote_arg("/bad\npath")


def test_template_in_scripts_matches_rendered_unit() -> None:
    text = (ROOT / "scripts" / "nanobot.service").read_text()
    _, body = text.split("\n\n", 1)  # the leading comment block explains the placeholders
    expected = render_unit(
        UnitSpec(
            executable="@NANOBOT@", config_path=Path("@CONFIG@"), home=Path("@NANOBOT_HOME@"), run_as="@USER@"
        )
    )
    assert body == expected


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
@pytest.mark.parametrize("user_unit", [False, True])
def test_systemd_analyze_verify_is_clean(tmp_path: Path, user_unit: bool) -> None:
    home = tmp_path / "home dir"
    home.mkdir()
    unit = tmp_path / "unit" / "nanobot.service"
    unit.parent.mkdir()
    unit.write_text(
        render_unit(
            UnitSpec(
                executable=sys.executable,
                config_path=home / "config.json",
                home=home,
                user_unit=user_unit,
                run_as=None if user_unit else "root",
                watchdog_sec=30,
                environment_file=home / "service.env",
            )
        )
    )
    (home / "service.env").write_text("OPENAI_API_KEY='sk-x'\n")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    cmd = ["systemd-analyze", *(["--user"] if user_unit else []), "verify", str(unit)]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout + done.stderr == ""


# ------------------------------------------------------------------------- install/uninstall


def test_install_writes_unit_and_enables(tmp_path: Path, fake_systemctl: tuple[str, Path]) -> None:
    exe, log = fake_systemctl
    path = tmp_path / "units" / "nanobot.service"
    notes = install_unit(spec(tmp_path, user_unit=True), path, Systemctl(True, exe))
    assert path.read_text() == render_unit(spec(tmp_path, user_unit=True))
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert lines(log) == ["--user daemon-reload", "--user enable --now nanobot.service"]
    assert notes[-1] == "enabled and started nanobot.service"

    status = unit_status(path, Systemctl(True, exe))
    assert status == {"installed": True, "path": str(path), "active": "active", "enabled": "enabled"}

    notes = uninstall_unit(path, Systemctl(True, exe))
    assert not path.exists()
    assert lines(log)[-2:] == ["--user disable --now nanobot.service", "--user daemon-reload"]
    assert f"removed {path}" in notes
    # Uninstalling again is harmless.
    assert f"no unit at {path}" in uninstall_unit(path, Systemctl(True, exe))


def test_install_without_systemctl_only_writes(tmp_path: Path) -> None:
    path = tmp_path / "nanobot.service"
    notes = install_unit(spec(tmp_path), path, None)
    assert path.exists()
    assert "systemctl daemon-reload && systemctl enable --now nanobot.service" in notes[-1]
    assert Systemctl(False, "").available is False
    assert unit_status(path, None) == {"installed": True, "path": str(path)}


def test_failing_systemctl_is_reported(
    tmp_path: Path, fake_systemctl: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    exe, _ = fake_systemctl
    monkeypatch.setenv("FAKE_SYSTEMCTL_FAIL", "enable")
    with pytest.raises(
        ServiceError, match="systemctl enable --now nanobot.service exited 1: .*Access denied"
    ) as failed:
        install_unit(spec(tmp_path), tmp_path / "nanobot.service", Systemctl(False, exe))
    # the unit stays (`service status` says installed): the error says where, and where to look
    assert (tmp_path / "nanobot.service").exists()
    assert f"The unit was written to {tmp_path / 'nanobot.service'} but did not start" in str(failed.value)
    assert "see systemctl status nanobot.service and journalctl -u nanobot.service" in str(failed.value)
    # no service manager answers at all (a container, WSL): how to start it once one does
    monkeypatch.setenv("FAKE_SYSTEMCTL_FAIL", "daemon-reload")
    with pytest.raises(ServiceError, match="daemon-reload exited 1") as failed:
        install_unit(spec(tmp_path, user_unit=True), tmp_path / "user.service", Systemctl(True, exe))
    assert f"The unit was written to {tmp_path / 'user.service'}; start it once systemd answers" in str(failed.value)
    assert "systemctl --user daemon-reload && systemctl --user enable --now nanobot.service" in str(failed.value)


def test_status_says_when_systemctl_is_not_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It printed the unit's path and the gateway line only: "no systemd here" read as "systemd
    says nothing"."""
    cfg, _ = write_config(tmp_path)
    (tmp_path / "nobin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "nobin"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    result = CliRunner().invoke(cli_app(), ["service", "status", "--user", "-c", str(cfg)])
    assert result.exit_code == 0, result.output
    assert "systemd: systemctl not found here; whether the unit runs is not known" in result.stdout.splitlines()
    assert unit_status(tmp_path / "nanobot.service", Systemctl(True, "")) == {
        "installed": False, "path": str(tmp_path / "nanobot.service"), "systemctl": "not found"
    }


def test_status_when_systemd_is_not_running(
    tmp_path: Path, fake_systemctl: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    exe, _ = fake_systemctl
    monkeypatch.setenv("FAKE_SYSTEMCTL_OFFLINE", "1")
    status = unit_status(tmp_path / "nanobot.service", Systemctl(False, exe))
    assert status["installed"] is False
    assert (
        status["active"]
        == "unknown (System has not been booted with systemd as init system (PID 1). Can't operate.)"
    )


# -------------------------------------------------------------------------------- sd_notify


def test_sd_notify_over_a_real_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(path))
        server.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        for message in ("READY=1", "WATCHDOG=1", "STOPPING=1"):
            assert sd_notify(message) is True
            assert server.recv(256) == message.encode()


def test_sd_notify_abstract_socket_and_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"nanobot-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind("\0" + name)
        server.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert sd_notify("READY=1")
        assert server.recv(64) == b"READY=1"
    assert sd_notify("READY=1") is False  # nobody listens any more
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert sd_notify("READY=1") is False


def test_systemd_watchdog_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    assert systemd_watchdog_interval_s() is None
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert systemd_watchdog_interval_s() == 15.0
    monkeypatch.setenv("WATCHDOG_PID", "1")  # meant for another process
    assert systemd_watchdog_interval_s() is None


def test_the_gateway_pings_within_systemds_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    """systemd's WatchdogSec was read only by `service install`: a unit edited later (or the interval
    raised in config.json) had a healthy gateway killed for pinging too late, again and again."""
    from nanobot.service.systemd import beat_interval_s

    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    monkeypatch.setenv("WATCHDOG_USEC", "3000000")  # WatchdogSec=3: ping at least every 1.5 s
    assert beat_interval_s(5.0) == 1.5
    assert beat_interval_s(1.0) == 1.0
    monkeypatch.delenv("WATCHDOG_USEC")
    assert beat_interval_s(5.0) == 5.0


# ------------------------------------------------------------------------------------ CLI


def cli_app() -> typer.Typer:
    """The commands wired as nanobot.cli.app wires them."""
    app = typer.Typer()
    app.command("health")(health)
    app.add_typer(service_cmd.app, name="service")
    return app


def write_config(tmp_path: Path, watchdog_s: float = 10.0) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    cfg = tmp_path / "home" / "config.json"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(
        json.dumps(
            {"agents": {"defaults": {"workspace": str(ws)}}, "gateway": {"watchdogIntervalS": watchdog_s}}
        )
    )
    return cfg, ws


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_systemctl: tuple[str, Path]) -> Path:
    exe, log = fake_systemctl
    monkeypatch.setenv("NANOBOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PATH", f"{Path(exe).parent}{os.pathsep}{os.environ['PATH']}")
    return log


def test_cli_install_user_unit(tmp_path: Path, cli_env: Path) -> None:
    cfg, _ = write_config(tmp_path)
    result = CliRunner().invoke(cli_app(), ["service", "install", "--user", "-c", str(cfg)])
    assert result.exit_code == 0, result.output
    unit = tmp_path / "xdg" / "systemd" / "user" / "nanobot.service"
    text = unit.read_text()
    exe = service_cmd.nanobot_executable()
    assert Path(exe).is_absolute()
    assert f'ExecStart="{exe}" -c "{cfg}" gateway' in text
    assert f'Environment="NANOBOT_HOME={tmp_path / "home"}"' in text
    # The workspace lies outside NANOBOT_HOME, so it must be writable too.
    assert f'ReadWritePaths="{tmp_path / "home"}" "{tmp_path / "ws"}"' in text
    assert "loginctl enable-linger" in result.stderr
    assert lines(cli_env) == ["--user daemon-reload", "--user enable --now nanobot.service"]
    # NANOBOT_HOME (made by hand here, 0755) holds config.json and service.env: made private
    assert (tmp_path / "home").stat().st_mode & 0o777 == 0o700

    result = CliRunner().invoke(cli_app(), ["service", "status", "--user", "-c", str(cfg)])
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        f"unit: {unit} (installed)",
        "active: active",
        "enabled: enabled",
        f"gateway: not running on {tmp_path / 'ws'}",
    ]

    result = CliRunner().invoke(cli_app(), ["service", "uninstall", "--user"])
    assert result.exit_code == 0
    assert not unit.exists()


def test_unit_lets_the_gateway_write_its_log_and_pairing_state_outside_home(
    tmp_path: Path, cli_env: Path
) -> None:
    """ProtectSystem=strict makes everything else read-only: a logging.file outside NANOBOT_HOME
    crashed the gateway at start (exit 1, restarted until the start limit), and pairing.json, kept
    beside a config file outside NANOBOT_HOME, could not be written."""
    cfg = tmp_path / "etc" / "config.json"
    cfg.parent.mkdir()
    log = tmp_path / "logs" / "nanobot.log"
    cfg.write_text(
        json.dumps(
            {"agents": {"defaults": {"workspace": str(tmp_path / "ws")}}, "logging": {"file": str(log)}}
        )
    )
    result = CliRunner().invoke(cli_app(), ["service", "install", "--user", "-c", str(cfg)])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "xdg" / "systemd" / "user" / "nanobot.service").read_text()
    home = tmp_path / "home"
    assert f'ReadWritePaths="{home}" "{tmp_path / "ws"}" "{cfg.parent}" "{log.parent}"' in text
    assert log.parent.is_dir()  # it must exist when the service starts


def _run_gateway(home: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    """`command` (a gateway start) with NANOBOT_HOME=home and no other NANOBOT_ variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")} | {"NANOBOT_HOME": str(home)}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, cwd=home.parent)


def test_a_log_file_that_cannot_be_written_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"logging": {"file": str(tmp_path / "afile" / "x.log")}}))
    result = _run_gateway(home, [sys.executable, "-m", "nanobot", "gateway"])
    assert result.returncode == 2, result.stderr
    assert "logging.file: cannot write" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(not can_mount_privately(), reason="needs user and mount namespaces (unshare -rmn)")
@pytest.mark.parametrize("log_file", [False, True])
def test_a_read_only_workspace_at_start_is_exit_1_so_systemd_retries(tmp_path: Path, log_file: bool) -> None:
    """An SD card remounted read-only: the gateway died with a traceback (the lock file), or exit 2
    (logging.file, a 'config error'), which RestartPreventExitStatus keeps systemd from ever retrying."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    config: dict[str, object] = {"agents": {"defaults": {"workspace": str(ws)}}}
    if log_file:
        config["logging"] = {"file": str(ws / "logs" / "nanobot.log")}
    (home / "config.json").write_text(json.dumps(config))
    gateway = shlex.join([sys.executable, "-m", "nanobot", "gateway"])
    # no network in the namespace; the workspace a read-only mount
    mount = f"mount -t tmpfs -o ro tmpfs {shlex.quote(str(ws))}"
    result = _run_gateway(home, ["unshare", "-rmn", "sh", "-c", f"{mount} && {gateway}"])
    assert result.returncode == 1, result.stderr
    assert "Read-only file system" in result.stderr and "Traceback" not in result.stderr


def test_cli_system_unit_into_unit_dir(tmp_path: Path, cli_env: Path) -> None:
    cfg, ws = write_config(tmp_path)
    units = tmp_path / "etc"
    args = ["--unit-dir", str(units), "--no-systemctl", "-c", str(cfg)]
    result = CliRunner().invoke(cli_app(), ["service", "install", "--watchdog-sec", "30", *args])
    assert result.exit_code == 0, result.output
    text = (units / "nanobot.service").read_text()
    assert "User=" in text and "WatchdogSec=30" in text
    assert lines(cli_env) == []  # --no-systemctl: systemctl untouched
    with GatewayLock(ws):
        GatewayState(ws).beat()
        result = CliRunner().invoke(cli_app(), ["service", "status", *args])
    assert f"gateway: running (pid {os.getpid()}, up 0s) on {ws}" in result.stdout


def test_cli_install_rejects_too_short_watchdog(tmp_path: Path, cli_env: Path) -> None:
    cfg, _ = write_config(tmp_path, watchdog_s=10)
    result = CliRunner().invoke(
        cli_app(), ["service", "install", "--unit-dir", str(tmp_path), "--watchdog-sec", "15", "-c", str(cfg)]
    )
    assert result.exit_code == 2
    assert "at least twice gateway.watchdogIntervalS" in result.stderr
    assert not (tmp_path / "nanobot.service").exists()


def test_the_stop_timeout_outlasts_a_longer_configured_shutdown(tmp_path: Path, cli_env: Path) -> None:
    """The unit always said TimeoutStopSec=20: a gateway given 30 s of grace was SIGKILLed halfway
    through the turns it was told to let finish, and its memory work never drained."""
    cfg, _ = write_config(tmp_path)
    data = json.loads(cfg.read_text())
    data["gateway"].update(shutdownGraceS=30, drainTimeoutS=5)
    cfg.write_text(json.dumps(data))
    result = CliRunner().invoke(cli_app(), ["service", "install", "--unit-dir", str(tmp_path), "-c", str(cfg)])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "nanobot.service").read_text()
    stop_s = int(next(v for v in text.splitlines() if v.startswith("TimeoutStopSec=")).split("=")[1])
    assert stop_s >= 30 + 5 + 2 + 5  # the gateway's own budget (grace + drain + 2 s) and room for exec children


HEALTH_MAIN = "import typer; from nanobot.cli.health import health; typer.run(health)"


def run_health(cfg: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HEALTH_MAIN, "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_health_command_in_a_real_process(tmp_path: Path) -> None:
    cfg, ws = write_config(tmp_path, watchdog_s=5)
    env = {**os.environ, "NANOBOT_HOME": str(tmp_path / "home")}
    with GatewayLock(ws):
        state = GatewayState(ws)
        state.beat()
        done = run_health(cfg, env)
        assert done.returncode == 0, done.stderr
        assert done.stdout == ""
        assert done.stderr.startswith(f"gateway pid {os.getpid()} healthy")
        # Three missed beats (3 x 5 s) make the watchdog stale.
        state.watchdog_at -= 16
        state.write()
        done = run_health(cfg, env)
        assert done.returncode == 1
        assert "watchdog stale" in done.stderr


def test_health_command_without_gateway_or_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, ws = write_config(tmp_path)
    monkeypatch.setenv("NANOBOT_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(cli_app(), ["health", "-c", str(cfg)])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.strip() == f"no gateway is running on workspace {ws}"

    cfg.write_text("{broken")
    result = CliRunner().invoke(cli_app(), ["health", "-c", str(cfg)])
    assert result.exit_code == 1  # not 2: Docker reserves exit 2 in health checks
    assert result.stderr.startswith("unhealthy:") and len(result.stderr.strip().splitlines()) == 1


def test_the_environment_file_is_private_and_takes_no_smuggled_line(tmp_path: Path) -> None:
    """A value with a line break would add a setting of its own to the service (a second line), and
    a quote would end the value early: both are refused, and nothing is written."""
    path = tmp_path / "service.env"
    unit = tmp_path / "nanobot.service"
    write_environment_file(path, {"OPENAI_API_KEY": "sk-a b$c", "NANOBOT_AGENTS__DEFAULTS__MODEL": "m"}, [unit])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().splitlines() == [
        f"# read by: {unit}", "NANOBOT_AGENTS__DEFAULTS__MODEL='m'", "OPENAI_API_KEY='sk-a b$c'"
    ]
    for bad in ("sk\nNANOBOT_TOOLS__EXEC__IN_GROUPS=true", "it's"):
        with pytest.raises(ServiceError):
            write_environment_file(tmp_path / "other.env", {"OPENAI_API_KEY": bad}, [unit])
        assert not (tmp_path / "other.env").exists()
    with pytest.raises(ServiceError):  # a unit path smuggling a setting of its own
        write_environment_file(tmp_path / "other.env", {"A": "b"}, [Path("/x\nNANOBOT_TOOLS__EXEC__IN_GROUPS=true")])


@pytest.mark.skipif(os.geteuid() != 0, reason="sudo runs the install as root")
def test_sudo_install_uses_the_invoking_users_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_systemctl: tuple[str, Path]
) -> None:
    """`sudo nanobot service install` (HOME is root's) wrote a unit for root's missing config, run as
    the invoking user, and handed a folder in root's home to that user."""
    import pwd

    root_home, user_home = tmp_path / "root", tmp_path / "alice"
    root_home.mkdir(mode=0o700)
    (user_home / ".nanobot").mkdir(parents=True)
    (user_home / ".nanobot" / "config.json").write_text("{}\n")
    nobody = pwd.getpwnam("nobody")
    entry = pwd.struct_passwd(("nobody", "x", nobody.pw_uid, nobody.pw_gid, "", str(user_home), "/bin/sh"))
    monkeypatch.setattr(pwd, "getpwnam", lambda name: entry)
    monkeypatch.setenv("NANOBOT_HOME", "")  # not given (and put back after the command set it)
    monkeypatch.setenv("HOME", str(root_home))
    monkeypatch.setenv("SUDO_USER", "nobody")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    units = tmp_path / "etc"
    result = CliRunner().invoke(cli_app(), ["service", "install", "--unit-dir", str(units), "--no-systemctl"])
    assert result.exit_code == 0, result.output
    text = (units / "nanobot.service").read_text()
    assert f'-c "{user_home / ".nanobot" / "config.json"}" gateway' in text and "User=nobody" in text, text
    assert f'Environment="NANOBOT_HOME={user_home / ".nanobot"}"' in text
    assert not (root_home / ".nanobot").exists()  # nothing made in root's home
    assert "does not exist yet" not in result.stderr
    # naming the config (as the notice suggests for another one) keeps the user's home too
    config = user_home / ".nanobot" / "config.json"
    monkeypatch.setenv("NANOBOT_HOME", "")  # as at the start: the first install set it in this process
    result = CliRunner().invoke(cli_app(), ["service", "install", "--unit-dir", str(units), "--no-systemctl",
                                            "-c", str(config)])
    assert result.exit_code == 0, result.output
    text = (units / "nanobot.service").read_text()
    assert f'Environment="NANOBOT_HOME={user_home / ".nanobot"}"' in text and str(root_home) not in text, text
    assert not (root_home / ".nanobot").exists()


def test_install_arguments_that_cannot_work_are_usage_errors(tmp_path: Path, cli_env: Path) -> None:
    """`--watchdog-sec 99999999999999999999` wrote a WatchdogSec= systemd ignores (the watchdog silently
    off), and a file given as --unit-dir gave "[Errno 17] File exists" with exit 1."""
    cfg, _ = write_config(tmp_path)
    units = tmp_path / "etc"
    huge = CliRunner().invoke(cli_app(), ["service", "install", "--watchdog-sec", "99999999999999999999",
                                          "--unit-dir", str(units), "--no-systemctl", "-c", str(cfg)])
    assert huge.exit_code == 2 and not units.exists(), huge.output
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    result = CliRunner().invoke(cli_app(), ["service", "install", "--unit-dir", str(a_file), "--no-systemctl",
                                            "-c", str(cfg)])
    assert result.exit_code == 2 and "is not a folder" in result.stderr and "Errno" not in result.stderr, result.output


def test_a_failed_reinstall_leaves_the_installed_units_settings_alone(
    tmp_path: Path, cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review catch: a reinstall that could not write the unit (a folder not writable without
    sudo) had already deleted the service.env the installed unit reads: systemd then refuses it."""
    from nanobot.service.systemd import ServiceError

    cfg, _ = write_config(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123456")
    assert CliRunner().invoke(cli_app(), ["service", "install", "--user", "-c", str(cfg)]).exit_code == 0
    env_file = tmp_path / "home" / "service.env"
    assert env_file.exists()
    monkeypatch.delenv("OPENAI_API_KEY")

    def refused(*_args, **_kwargs):  # noqa: ANN202
        raise ServiceError("cannot write the unit: permission denied (use sudo)")

    monkeypatch.setattr(service_cmd, "install_unit", refused)
    result = CliRunner().invoke(cli_app(), ["service", "install", "--user", "-c", str(cfg)])
    assert result.exit_code != 0
    assert env_file.exists() and "sk-test-123456" in env_file.read_text()


def test_service_env_follows_units_through_failures_and_relative_folders(
    tmp_path: Path, cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review catches: a relative --unit-dir was recorded as such, so an uninstall run from another
    folder deleted a service.env that unit read; an uninstall whose reload failed after removing
    the unit, and a first install that could not write its unit, left the keys behind for good."""
    cfg, _ = write_config(tmp_path)
    env_file = tmp_path / "home" / "service.env"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123456")
    runner = CliRunner()
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert runner.invoke(cli_app(), ["service", "install", "--unit-dir", "units", "-c", str(cfg)]).exit_code == 0
    absolute = tmp_path / "abs-units"
    assert runner.invoke(cli_app(), ["service", "install", "--unit-dir", str(absolute), "-c", str(cfg)]).exit_code == 0
    monkeypatch.chdir(tmp_path)  # elsewhere
    assert runner.invoke(cli_app(), ["service", "uninstall", "--unit-dir", str(absolute)]).exit_code == 0
    assert env_file.exists()  # work/units still reads it

    def reload_fails(self, *args):  # noqa: ANN001, ANN002, ANN202 - systemctl daemon-reload exits 1
        from nanobot.service.systemd import ServiceError

        raise ServiceError("systemctl daemon-reload exited 1")

    monkeypatch.setattr(service_cmd.Systemctl, "must", reload_fails)
    result = runner.invoke(cli_app(), ["service", "uninstall", "--unit-dir", str(tmp_path / "work" / "units")])
    assert result.exit_code != 0
    assert not (tmp_path / "work" / "units" / "nanobot.service").exists() and not env_file.exists()

    blocked = tmp_path / "blocked"
    (blocked / "nanobot.service").mkdir(parents=True)  # the unit cannot be written there
    result = runner.invoke(cli_app(), ["service", "install", "--unit-dir", str(blocked), "-c", str(cfg)])
    assert result.exit_code != 0 and not env_file.exists()
