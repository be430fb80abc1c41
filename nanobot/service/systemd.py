"""The systemd unit for the gateway: render, install, uninstall, status; and sd_notify.

Every path and the `systemctl` executable are parameters, so tests never touch /etc or the real
service manager. The same unit, with placeholders, is kept in scripts/nanobot.service for people
who install by hand (a test keeps the two identical).
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from loguru import logger

from nanobot.config.paths import TOOL_CACHE_FOLDERS
from nanobot.util.fs import atomic_write

UNIT_NAME = "nanobot.service"
SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
# Longer than the gateway's own shutdown budget (grace + drain + 2 s: 10 s by default), so systemd
# never SIGKILLs a clean drain; a config with more grace or drain gets more (stop_timeout_s).
STOP_TIMEOUT_S = 20
STOP_TIMEOUT_MARGIN_S = 10
RESTART_DELAY_S = 5
# A config error (exit 2) would fail the same way on every restart: do not retry it.
CONFIG_ERROR_EXIT = 2
START_LIMIT_INTERVAL_S = 300
START_LIMIT_BURST = 5
SYSTEMCTL_TIMEOUT_S = 60.0


class ServiceError(RuntimeError):
    """Installing or removing the unit failed; the message says what to do."""


@dataclass(frozen=True)
class UnitSpec:
    """What goes into the unit. `user_unit` selects a user unit (no User=, default.target)."""

    executable: str
    config_path: Path
    home: Path
    user_unit: bool = False
    run_as: str | None = None
    watchdog_sec: int = 0
    sandbox: bool = True
    extra_rw_paths: tuple[Path, ...] = field(default_factory=tuple)
    environment_file: Path | None = None  # the installing shell's settings (environment_file())
    stop_timeout_s: int = STOP_TIMEOUT_S


def stop_timeout_s(shutdown_grace_s: float, drain_timeout_s: float) -> int:
    """TimeoutStopSec for a gateway with this grace and drain: at least STOP_TIMEOUT_S, and always
    STOP_TIMEOUT_MARGIN_S more than the two (30 s of grace under 20 s was cut off by SIGKILL)."""
    return max(STOP_TIMEOUT_S, math.ceil(shutdown_grace_s + drain_timeout_s + STOP_TIMEOUT_MARGIN_S))


def _check(value: str) -> str:
    if any(ch in value for ch in "\n\r\0"):
        raise ServiceError(f"unit values cannot contain control characters: {value!r}")
    return value


def quote_arg(value: str) -> str:
    """One word for ExecStart=: quoted, with systemd's `%` specifiers and `$` expansion escaped."""
    value = _check(value).replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{value}"'


def quote_setting(value: str) -> str:
    """A quoted word for Environment= / ReadWritePaths= (specifiers expand there, variables do not)."""
    value = _check(value).replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{value}"'


READ_BY = "# read by: "  # an environment file's record of the units that read it (systemd skips it)


def environment_file_readers(path: Path) -> list[Path]:
    """The units an environment file written by `write_environment_file` records as its readers."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    return [Path(line.removeprefix(READ_BY)) for line in lines if line.startswith(READ_BY)]


def record_environment_file_readers(path: Path, readers: list[Path]) -> None:
    """Replace the readers an environment file records, its settings unchanged."""
    settings = [line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith(READ_BY)]
    atomic_write(path, "\n".join([*_reader_lines(readers), *settings]) + "\n")


def _reader_lines(readers: list[Path]) -> list[str]:
    if any(ch in str(reader) for reader in readers for ch in "\n\r\0"):
        raise ServiceError("a unit path with a line break cannot be recorded in an environment file")
    return [f"{READ_BY}{reader}" for reader in dict.fromkeys(readers)]


def write_environment_file(path: Path, values: dict[str, str], readers: list[Path]) -> None:
    """`values` as a systemd environment file (KEY='value' lines), mode 0600: API keys go in it.
    `readers`, the units that read it, are recorded in comments: the file goes with the last one."""
    lines = _reader_lines(readers)
    for name, value in sorted(values.items()):
        if any(ch in value for ch in "'\n\r\0"):
            raise ServiceError(
                f"{name} holds a quote or a line break, which an environment file cannot carry as it is; "
                "put the setting in config.json instead"
            )
        lines.append(f"{name}='{value}'")
    atomic_write(path, "\n".join(lines) + "\n")


def render_unit(spec: UnitSpec) -> str:
    """The unit file text."""
    system = not spec.user_unit
    unit = [
        "[Unit]",
        "Description=nanobot gateway (personal AI assistant)",
    ]
    if system:
        # time-sync: a box without a real-time clock boots with a stale time; started before NTP
        # sets it, missed-message ages and reminders would be judged by that time
        unit += ["Wants=network-online.target", "After=network-online.target time-sync.target"]
    unit += [f"StartLimitIntervalSec={START_LIMIT_INTERVAL_S}", f"StartLimitBurst={START_LIMIT_BURST}"]

    service = [
        "[Service]",
        # The gateway sends READY=1 once its channels run, WATCHDOG=1 on every beat, STOPPING=1 on exit.
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStart={quote_arg(spec.executable)} -c {quote_arg(str(spec.config_path))} gateway",
        f"Environment={quote_setting(f'NANOBOT_HOME={spec.home}')}",
        "Environment=PYTHONUNBUFFERED=1",
    ]
    if spec.environment_file is not None:
        # the whole rest of the line is the path (quotes would make it relative); % is a specifier
        service.append(f"EnvironmentFile={_check(str(spec.environment_file)).replace('%', '%%')}")
    if system and spec.run_as:
        service.append(f"User={_check(spec.run_as)}")
    service += [
        "Restart=on-failure",
        f"RestartSec={RESTART_DELAY_S}",
        f"RestartPreventExitStatus={CONFIG_ERROR_EXIT}",
        f"TimeoutStopSec={spec.stop_timeout_s}",
        # SIGTERM to the gateway only; whatever is left after the timeout (e.g. exec children) is killed.
        "KillMode=mixed",
    ]
    if spec.watchdog_sec > 0:
        service.append(f"WatchdogSec={spec.watchdog_sec}")
    service.append("NoNewPrivileges=yes")
    if spec.sandbox:
        if spec.user_unit:
            service.append(
                "# In a user unit these need unprivileged user namespaces (install --no-sandbox if not)."
            )
        rw = " ".join(quote_setting(str(p)) for p in (spec.home, *spec.extra_rw_paths))
        caches = " ".join(quote_setting(f"{name}={spec.home / folder}") for name, folder in TOOL_CACHE_FOLDERS.items())
        service += [
            "ProtectSystem=strict",
            f"ReadWritePaths={rw}",
            "# the home folder is read-only: what MCP servers started with npx or uvx download goes here",
            f"Environment={caches}",
            "PrivateTmp=yes",
            "ProtectKernelTunables=yes",
            "ProtectKernelModules=yes",
            "ProtectControlGroups=yes",
            "RestrictSUIDSGID=yes",
            "LockPersonality=yes",
        ]

    install = ["[Install]", f"WantedBy={'multi-user.target' if system else 'default.target'}"]
    header = "# nanobot gateway: written by `nanobot service install`; re-run it rather than editing."
    return "\n\n".join("\n".join(block) for block in ([header], unit, service, install)) + "\n"


def user_unit_dir() -> Path:
    config_home = os.environ.get("XDG_CONFIG_HOME", "").strip()
    base = Path(config_home) if config_home else Path.home() / ".config"
    return base / "systemd" / "user"


def default_unit_path(user_unit: bool) -> Path:
    return (user_unit_dir() if user_unit else SYSTEM_UNIT_DIR) / UNIT_NAME


def linger_hint(user: str) -> str:
    return (
        "A user service stops when you log out unless lingering is on; enable it once with:\n"
        f"  loginctl enable-linger {user}"
    )


def userns_available() -> bool | None:
    """Whether unprivileged user namespaces are allowed (None when the kernel does not say)."""
    answers = []
    for knob in ("/proc/sys/kernel/unprivileged_userns_clone", "/proc/sys/user/max_user_namespaces"):
        try:
            answers.append(Path(knob).read_text().strip() != "0")
        except OSError:
            continue
    return all(answers) if answers else None


class Systemctl:
    """`systemctl [--user] ...` through a given executable (default: the one on PATH)."""

    def __init__(self, user_unit: bool, executable: str | None = None) -> None:
        self.user_unit = user_unit
        self.executable = executable if executable is not None else shutil.which("systemctl")

    @property
    def available(self) -> bool:
        return bool(self.executable)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        if not self.executable:
            raise ServiceError("systemctl not found")
        cmd = [self.executable, *(["--user"] if self.user_unit else []), *args]
        logger.debug("running {}", cmd)
        try:
            return subprocess.run(
                cmd, capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServiceError(f"{' '.join(cmd)} failed: {exc}") from None

    def must(self, *args: str) -> None:
        done = self.run(*args)
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            last = lines[-1] if lines else "no output"
            raise ServiceError(f"systemctl {' '.join(args)} exited {done.returncode}: {last}")

    def query(self, verb: str) -> str:
        """`is-active` / `is-enabled` answer (e.g. active, inactive, enabled, not-found)."""
        done = self.run(verb, UNIT_NAME)
        answer = done.stdout.strip().splitlines()
        if answer:
            return answer[0]
        problem = done.stderr.strip().splitlines()
        return f"unknown ({problem[0]})" if problem else "unknown"


def write_unit(text: str, path: Path) -> None:
    """Write the unit atomically with mode 0644."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # a system folder: not ours to make private
        atomic_write(path, text, mode=0o644)
    except PermissionError:
        raise ServiceError(
            f"cannot write {path}: permission denied (use sudo, or --user for a user unit)"
        ) from None


def install_unit(spec: UnitSpec, path: Path, systemctl: Systemctl | None) -> list[str]:
    """Write the unit; with systemctl, reload and `enable --now` it. Returns notices for the user."""
    write_unit(render_unit(spec), path)
    notes = [f"wrote {path}"]
    scope = "--user " if spec.user_unit else ""
    start = f"systemctl {scope}daemon-reload && systemctl {scope}enable --now {UNIT_NAME}"
    if systemctl is None or not systemctl.available:
        notes.append(f"systemctl not used; start it with: {start}")
        return notes
    try:
        systemctl.must("daemon-reload")
    except ServiceError as exc:
        # the unit is in place (and `service status` says installed): where no service manager
        # answers (a container, WSL) the user was told only the error
        raise ServiceError(
            f"{exc}\nThe unit was written to {path}; start it once systemd answers: {start} "
            "(or install with --no-systemctl)"
        ) from None
    try:
        systemctl.must("enable", "--now", UNIT_NAME)
    except ServiceError as exc:  # systemd answered: the unit would not enable or start
        raise ServiceError(
            f"{exc}\nThe unit was written to {path} but did not start: see systemctl {scope}status "
            f"{UNIT_NAME} and journalctl {scope}-u {UNIT_NAME}"
        ) from None
    notes.append(f"enabled and started {UNIT_NAME}")
    return notes


def environment_file_of(unit: Path) -> Path | None:
    """The `EnvironmentFile=` of a unit file nanobot wrote (None: no such file or setting)."""
    try:
        lines = unit.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        if line.startswith("EnvironmentFile="):
            return Path(line.removeprefix("EnvironmentFile=").lstrip("-").replace("%%", "%"))
    return None


def uninstall_unit(path: Path, systemctl: Systemctl | None) -> list[str]:
    """Stop and disable the service, remove the unit, reload. Idempotent."""
    notes: list[str] = []
    if systemctl is not None and systemctl.available:
        done = systemctl.run("disable", "--now", UNIT_NAME)
        if done.returncode == 0:
            notes.append(f"stopped and disabled {UNIT_NAME}")
    if path.exists():
        try:
            path.unlink()
        except PermissionError:
            raise ServiceError(f"cannot remove {path}: permission denied (use sudo)") from None
        notes.append(f"removed {path}")
    else:
        notes.append(f"no unit at {path}")
    if systemctl is not None and systemctl.available:
        systemctl.must("daemon-reload")
    return notes


def unit_status(path: Path, systemctl: Systemctl | None) -> dict[str, str | bool]:
    """installed, path, and (with systemctl) active / enabled as systemctl reports them, or
    systemctl "not found" when it was to be asked and is not on PATH."""
    status: dict[str, str | bool] = {"installed": path.exists(), "path": str(path)}
    if systemctl is not None and systemctl.available:
        status["active"] = systemctl.query("is-active")
        status["enabled"] = systemctl.query("is-enabled")
    elif systemctl is not None:
        status["systemctl"] = "not found"
    return status


def sd_notify(message: str) -> bool:
    """Send a state change (READY=1, WATCHDOG=1, STOPPING=1) to systemd; False outside systemd."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace
    elif not address.startswith("/"):
        return False  # vsock addresses are for VMs, not for us
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode("utf-8"))
    except OSError as exc:
        logger.debug("sd_notify {!r} failed: {}", message, exc)
        return False
    return True


def systemd_watchdog_interval_s() -> float | None:
    """Half of systemd's WatchdogSec for this process (WATCHDOG_USEC), or None without a watchdog."""
    usec = os.environ.get("WATCHDOG_USEC", "")
    pid = os.environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) <= 0 or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2_000_000


def beat_interval_s(configured_s: float) -> float:
    """How often the gateway pings: gateway.watchdogIntervalS, or half of systemd's WatchdogSec
    when that is shorter (a unit edited, or the interval raised, after `service install` checked
    them: systemd killed a healthy gateway that pinged too late, again and again)."""
    systemd = systemd_watchdog_interval_s()
    if systemd is not None and systemd < configured_s:
        logger.warning(
            "gateway.watchdogIntervalS {:g} s is longer than half of systemd's WatchdogSec: pinging every {:g} s",
            configured_s,
            systemd,
        )
        return systemd
    return configured_s
