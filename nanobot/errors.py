"""Errors the user must act on. Each carries the exit code the CLI ends with.

Raise them anywhere; the CLI catches `UserError` once (nanobot/cli/app.py), prints the message on
stderr without a traceback and exits with `exit_code`. An OSError (a full disk, a folder it cannot
write) is printed as one line too. Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

EXIT_FAILURE = 1
EXIT_USAGE = 2


class UserError(Exception):
    """A problem the user can fix (a running gateway, a missing file): printed, then exit 1."""

    exit_code = EXIT_FAILURE


class ConfigError(UserError):
    """A bad config value, unknown key or missing credential: printed with the key path, then exit 2."""

    exit_code = EXIT_USAGE


def user_message(exc: UserError) -> str:
    """The text shown for `exc`: messages that already name the program stand alone."""
    text = str(exc)
    return text if text.startswith("nanobot:") else f"Error: {text}"
