"""Stop signals that come before the gateway can act on them.

`nanobot gateway` takes seconds to read its config and import what it needs before its own signal
handlers are in place; a SIGHUP meanwhile killed the process, a death systemd takes for a clean exit
(Restart=on-failure then left the bot down), and a SIGTERM lost the clean stop. `remember()` runs on
the command's first line; the gateway honours what `remembered` holds once it can stop cleanly.
"""

from __future__ import annotations

import signal

remembered: list[int] = []
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def remember() -> None:
    """Keep each stop signal for later (a signal ignored already, as `nohup` leaves SIGHUP, stays so)."""
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, lambda signum, _frame: remembered.append(signum))


def command_of(argv: list[str]) -> str | None:
    """The subcommand of a `nanobot` command line, read as the CLI reads its root options: `-c X`,
    `--config X`, `--config=X`, grouped short flags (`-vc X`, `-vcX`), `--` before the command."""
    args = iter(argv)
    for arg in args:
        if arg == "--":
            return next(args, None)
        if arg == "--config":
            next(args, None)
        elif arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            if arg.index("c", 1) == len(arg) - 1:  # `-c X` / `-vc X`: the next word is its path
                next(args, None)  # (`-cx.c`: what follows the first c is the path)
        elif not arg.startswith("-"):
            return arg
    return None
