"""`nanobot service install|uninstall|status [--user]`: the gateway as a systemd service."""

from __future__ import annotations

import contextlib
import getpass
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from nanobot.cli.common import (
    EXIT_USAGE,
    ConfigOption,
    command_group,
    config_path,
    err,
    fail,
    load_cli_config,
    out,
    require_named_config,
)
from nanobot.config.paths import HOME_ENV, NANOBOT_DIR, nanobot_home, workspace_problem
from nanobot.service.state import WATCHDOG_STALE_FACTOR, gateway_summary
from nanobot.service.systemd import (
    ServiceError,
    Systemctl,
    UnitSpec,
    default_unit_path,
    environment_file_of,
    environment_file_readers,
    install_unit,
    linger_hint,
    record_environment_file_readers,
    stop_timeout_s,
    uninstall_unit,
    unit_status,
    userns_available,
    write_environment_file,
)
from nanobot.util.fs import ensure_private_dir, repair_private

app = command_group(help="Run the gateway as a systemd service.")

SERVICE_ENV_FILE = "service.env"  # in NANOBOT_HOME: the installing shell's settings for the service
MAX_WATCHDOG_S = 24 * 3600  # a longer WatchdogSec= is not one systemd parses (the watchdog was silently off)

UserOption = Annotated[
    bool, typer.Option("--user", help="A user unit (~/.config/systemd/user) instead of a system one.")
]
UnitDirOption = Annotated[
    Path | None,
    typer.Option("--unit-dir", help="Write the unit into this folder instead of systemd's (for packaging)."),
]
NoSystemctlOption = Annotated[
    bool,
    typer.Option("--no-systemctl", help="Do not call systemctl (only write, remove or show the unit file)."),
]


def nanobot_executable() -> str:
    """The absolute path of the `nanobot` being run, so the unit starts this very install."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    candidates = [argv0] if argv0 is not None and argv0.name == "nanobot" else []
    candidates.append(Path(sys.executable).parent / "nanobot")
    found = shutil.which("nanobot")
    if found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate.absolute())
    fail("Error: cannot find the nanobot executable (is nanobot installed in this environment?)")


def _home_of_sudo_user() -> None:
    """Under `sudo` (HOME is root's), the system unit runs as the invoking user with that user's
    nanobot home (and config, unless -c names another): NANOBOT_HOME is set to theirs for this
    command, unless it was given. The unit pointed at root's missing config (with -c too: root's home
    as NANOBOT_HOME), and the folder made for it in root's home was handed to the user."""
    user_home = _sudo_user_home()
    if os.geteuid() != 0 or user_home is None or os.environ.get(HOME_ENV, "").strip():
        return
    if Path.home() != user_home:
        os.environ[HOME_ENV] = str(user_home / NANOBOT_DIR)
        err(f"Using {os.environ['SUDO_USER']}'s nanobot home {user_home / NANOBOT_DIR} (run by sudo)")


def _sudo_user_home() -> Path | None:
    """The home folder of the user who ran sudo (None: not under sudo, or sudo from root)."""
    sudo_user = os.environ.get("SUDO_USER")
    if not sudo_user or sudo_user == "root":
        return None
    import pwd

    try:
        return Path(pwd.getpwnam(sudo_user).pw_dir)
    except KeyError:
        return None


def _unit_path(user: bool, unit_dir: Path | None) -> Path:
    if unit_dir is not None and str(unit_dir).strip() in ("", "."):
        # `--unit-dir "$UNSET"` (read as ".") put the unit in the current folder, where systemd never looks
        fail("Error: --unit-dir is empty (or '.'); give the folder for nanobot.service", EXIT_USAGE)
    # absolute: the path is recorded in service.env and compared from other folders later
    return (unit_dir.absolute() / "nanobot.service") if unit_dir is not None else default_unit_path(user)


def _systemctl(user: bool, no_systemctl: bool) -> Systemctl | None:
    return None if no_systemctl else Systemctl(user)


@app.command("install")
def install(
    config: ConfigOption = None,
    user: UserOption = False,
    watchdog_sec: Annotated[
        int,
        typer.Option("--watchdog-sec", help="systemd restarts a gateway silent this long (0: off).", min=0,
                     max=MAX_WATCHDOG_S),
    ] = 0,
    no_sandbox: Annotated[
        bool, typer.Option("--no-sandbox", help="Leave out namespace sandboxing (no user namespaces).")
    ] = False,
    unit_dir: UnitDirOption = None,
    no_systemctl: NoSystemctlOption = False,
) -> None:
    """Write the unit (Restart=on-failure, hardened) and enable it with systemctl."""
    unit_path = _unit_path(user, unit_dir)
    if problem := workspace_problem(unit_path.parent):  # a file there: "[Errno 17] File exists", exit 1
        fail(f"Error: the unit's folder {unit_path.parent}: {problem}", EXIT_USAGE)
    if not user:
        _home_of_sudo_user()
    cfg = load_cli_config(config, missing_ok=True)  # it warns: onboard may come later
    interval_s = cfg.gateway.watchdog_interval_s
    if 0 < watchdog_sec < interval_s * 2:
        fail(
            f"Error: --watchdog-sec must be at least twice gateway.watchdogIntervalS ({interval_s:g}s); "
            f"try {math.ceil(interval_s * WATCHDOG_STALE_FACTOR)}",
            EXIT_USAGE,
        )
    unit_config = config_path(config).expanduser().absolute()
    if not unit_config.exists():
        err(f"Warning: {unit_config} does not exist yet; run `nanobot onboard` before starting the service")
    home = nanobot_home().absolute()
    workspace = cfg.workspace_path
    # Everything the gateway writes outside NANOBOT_HOME: the workspace, the config's folder (pairing
    # state lives beside config.json) and the log file's folder.
    log_file = cfg.log_file_path
    writes = [workspace, unit_config.parent, *([log_file.parent] if log_file else [])]
    extra = tuple(dict.fromkeys(p for p in writes if not p.is_relative_to(home)))
    run_as = None if user else (os.environ.get("SUDO_USER") or getpass.getuser())
    # What this shell sets (a key exported as the README shows) the service would not see: it would
    # answer with another provider, or the demo model, without a word. It gets them in a file.
    from nanobot.providers.registry import settings_from_environment

    inherited = settings_from_environment()
    env_file = home / SERVICE_ENV_FILE if inherited else None
    spec = UnitSpec(
        executable=nanobot_executable(),
        config_path=unit_config,
        home=home,
        user_unit=user,
        run_as=run_as,
        watchdog_sec=watchdog_sec,
        sandbox=not no_sandbox,
        extra_rw_paths=extra,
        environment_file=env_file,
        stop_timeout_s=stop_timeout_s(cfg.gateway.shutdown_grace_s, cfg.gateway.drain_timeout_s),
    )
    # ProtectSystem=strict only lets the service write paths that exist when it starts.
    for folder in (home, *extra):
        if folder == home:  # it holds config.json and service.env: private, as the contract says
            ensure_private_dir(folder)
            repair_private(folder, recursive=False)
        else:
            folder.mkdir(parents=True, exist_ok=True)
        if run_as and os.geteuid() == 0 and run_as != "root":
            shutil.chown(folder, user=run_as)
    if user and spec.sandbox and userns_available() is False:
        err(
            "Warning: unprivileged user namespaces are off here; the sandboxed user unit may fail to start. "
            "Re-run with --no-sandbox if it does."
        )
    stale = environment_file_of(unit_path)  # what the unit being replaced reads
    try:
        if env_file is not None:
            write_environment_file(env_file, inherited, [*_other_readers(env_file, unit_path), unit_path])
            if run_as and os.geteuid() == 0 and run_as != "root":
                shutil.chown(env_file, user=run_as)
            err(
                f"The service gets these settings of this shell from {env_file} (mode 0600): "
                f"{', '.join(sorted(inherited))}"
            )
        notes = install_unit(spec, unit_path, _systemctl(user, no_systemctl))
    except (ServiceError, OSError) as exc:  # OSError: the unit file itself could not be written
        now_read = environment_file_of(unit_path)  # what the unit on disk reads after the failure
        for unread in {stale, env_file} - {now_read, None}:  # a copy only the failed install names
            for note in _remove_environment_file(unread, unit_path):
                err(note)
        fail(f"Error: {exc}")
    if stale is not None and stale != env_file:  # only once the new unit is in: the old one read it
        notes += _remove_environment_file(stale, unit_path)
    for note in notes:
        err(note)
    if user:
        err(linger_hint(getpass.getuser()))


@app.command("uninstall")
def uninstall(
    user: UserOption = False,
    unit_dir: UnitDirOption = None,
    no_systemctl: NoSystemctlOption = False,
    config: ConfigOption = None,
) -> None:
    """Stop and disable the service and remove its unit."""
    require_named_config(config)  # -c is taken after the subcommand as everywhere; the unit is the same
    unit_path = _unit_path(user, unit_dir)
    env_file = environment_file_of(unit_path)
    try:
        notes = uninstall_unit(unit_path, _systemctl(user, no_systemctl))
    except ServiceError as exc:
        if env_file is not None and not unit_path.exists():  # the unit went; a reload failed after
            for note in _remove_environment_file(env_file, unit_path):
                err(note)
        fail(f"Error: {exc}")
    if env_file is not None:
        notes += _remove_environment_file(env_file, unit_path)
    for note in notes:
        err(note)


def _installed_unit_paths() -> list[Path]:
    """Where nanobot's units are installed by default: the system one, this user's, and under sudo
    the invoking user's (their user unit may read the same service.env)."""
    paths = [default_unit_path(True), default_unit_path(False)]
    if (home := _sudo_user_home()) is not None:
        paths.append(home / ".config" / "systemd" / "user" / default_unit_path(True).name)
    return paths


def _other_readers(env_file: Path, unit_path: Path) -> list[Path]:
    """The units other than `unit_path` that still read `env_file`: those it records (any --unit-dir)
    and, for a file written before it recorded them, the default places."""
    candidates = [*environment_file_readers(env_file), *_installed_unit_paths()]
    return [u for u in dict.fromkeys(candidates) if u != unit_path and environment_file_of(u) == env_file]


def _remove_environment_file(env_file: Path, unit_path: Path) -> list[str]:
    """The shell settings `install` copied for a unit (API keys among them) go with the last unit
    that reads them; while another still does, the file stays and forgets this one."""
    if env_file.name != SERVICE_ENV_FILE:  # not the file install writes (a unit edited by hand)
        return []
    if others := _other_readers(env_file, unit_path):
        with contextlib.suppress(OSError):  # the record is only a help: the units' EnvironmentFile= decide
            record_environment_file_readers(env_file, others)
        return [f"kept {env_file}: another nanobot unit still reads it ({others[0]})"]
    try:
        env_file.unlink()
    except FileNotFoundError:
        return []
    except OSError as exc:
        return [f"Warning: could not remove {env_file} ({exc.strerror}); it holds the settings (API keys) "
                "install copied from its shell: delete it by hand"]
    return [f"removed {env_file} (the settings install copied from its shell)"]


@app.command("status")
def status(
    config: ConfigOption = None,
    user: UserOption = False,
    unit_dir: UnitDirOption = None,
    no_systemctl: NoSystemctlOption = False,
) -> None:
    """Where the unit is, what systemd says of it, and whether a gateway runs on the workspace."""
    cfg = load_cli_config(config)
    try:
        info = unit_status(_unit_path(user, unit_dir), _systemctl(user, no_systemctl))
    except ServiceError as exc:
        fail(f"Error: {exc}")
    out(f"unit: {info['path']} ({'installed' if info['installed'] else 'not installed'})")
    if "active" in info:
        out(f"active: {info['active']}")
        out(f"enabled: {info['enabled']}")
    elif "systemctl" in info:  # said, or "nothing about systemd" read as "systemd says nothing"
        out("systemd: systemctl not found here; whether the unit runs is not known")
    summary = gateway_summary(cfg.workspace_path)
    if summary["running"]:
        uptime = summary["uptime_s"]
        up = f", up {uptime:.0f}s" if uptime is not None else ""
        out(f"gateway: running (pid {summary['pid']}{up}) on {cfg.workspace_path}")
    else:
        out(f"gateway: not running on {cfg.workspace_path}")
