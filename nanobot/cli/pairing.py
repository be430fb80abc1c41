"""`nanobot pairing list|approve|deny|revoke`: admit (or refuse) unknown private-chat senders by their
code, and take an approval back.

The requests live in `pairing.json` beside the config file (see nanobot/channels/pairing.py); a
running gateway picks up an approval at the sender's next message, without a restart.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict

import typer

from nanobot.channels.pairing import PairingError, PairingStore, pairing_path
from nanobot.cli.common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    ConfigOption,
    config_path,
    err,
    fail,
    load_cli_config,
    out,
    require_named_config,
)
from nanobot.config.schema import Config

app = typer.Typer(no_args_is_help=True)


def _store(config: ConfigOption) -> PairingStore:
    require_named_config(config)
    return PairingStore(pairing_path(config_path(config)))


def _who(username: str, sender_id: str) -> str:
    return f"{sender_id} (@{username})" if username else sender_id


@app.command("list")
def list_requests(
    config: ConfigOption = None,
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Pending pairing requests (and the senders approved so far)."""
    store = _store(config)
    try:
        store.check_readable()  # a broken store listed as empty looked like nobody approved
    except PairingError as exc:
        fail(f"Error: {exc}", EXIT_FAILURE)
    pending, approved = store.pending(), store.approved()
    if as_json:
        print(
            json.dumps({"pending": [asdict(p) for p in pending], "approved": [asdict(a) for a in approved]})
        )
        return
    now = time.time()
    if not pending:
        out("No pending pairing requests.")
    for req in pending:
        left_min = max(0, int((req.expires_at - now) // 60))
        out(
            f"{req.code}  {req.channel}  sender {_who(req.username, req.sender_id)}  expires in {left_min} min"
        )
    if approved:
        out(f"Approved senders ({store.path}):")
        for sender in approved:
            out(f"  {sender.channel}  {_who(sender.username, sender.sender_id)}")


@app.command("approve")
def approve(
    code: str = typer.Argument(..., help="The code the sender received."), config: ConfigOption = None
) -> None:
    """Allow the sender of a pending request; a running gateway answers their next message."""
    try:
        req = _store(config).approve(code)
    except PairingError as exc:
        fail(f"Error: {exc}", EXIT_FAILURE)
    err(f"Approved {req.channel} sender {_who(req.username, req.sender_id)}: they can write now.")


@app.command("deny")
def deny(
    code: str = typer.Argument(..., help="The code the sender received."), config: ConfigOption = None
) -> None:
    """Refuse the sender of a pending request: they get no further codes."""
    try:
        req = _store(config).deny(code)
    except PairingError as exc:
        fail(f"Error: {exc}", EXIT_FAILURE)
    err(f"Denied {req.channel} sender {_who(req.username, req.sender_id)}: they get no further codes.")


@app.command("revoke")
def revoke(
    channel: str = typer.Argument(..., help="The channel: telegram or discord."),
    sender: str = typer.Argument(..., help="The approved sender's id, or @username (see `pairing list`)."),
    config: ConfigOption = None,
) -> None:
    """Take back an approval: a running gateway refuses the sender from their next message on, for
    good as after deny (unless allowFrom lists them, or dmPolicy "open" lets them in as a guest: said)."""
    try:
        who = _store(config).revoke(channel, sender)
    except PairingError as exc:
        from nanobot.channels.manager import CHANNEL_CLASSES

        if channel not in CHANNEL_CLASSES:  # a typo was answered as "nobody approved"
            fail(f"Error: unknown channel {channel!r} (one of: {', '.join(CHANNEL_CLASSES)})", EXIT_USAGE)
        fail(f"Error: {exc}", EXIT_FAILURE)
    still = _still_let_in(load_cli_config(config, missing_ok=True), who.channel, who.sender_id, who.username)
    name = _who(who.username, who.sender_id)
    if still:
        err(f"Revoked the pairing approval of {who.channel} sender {name}, but {still}.")
        return
    err(f"Revoked {who.channel} sender {name}: they are refused from now on, for good (as after deny).")


def _still_let_in(cfg: Config, channel: str, sender_id: str, username: str) -> str:
    """Why the sender still gets in after a revoke ("" when they do not)."""
    settings = getattr(cfg.channels, channel, None)
    if settings is None:
        return ""
    from nanobot.channels.base import allow_list_admits

    entries = [str(entry).strip() for entry in settings.allow_from]  # as the channel reads them
    if allow_list_admits(entries, sender_id, username, by_username=_matches_usernames(channel)):
        return f"channels.{channel}.allowFrom still lets them in: remove them there too"
    if settings.dm_policy == "open":
        return f'channels.{channel}.dmPolicy "open" still lets them in, as a guest'
    return ""


def _matches_usernames(channel: str) -> bool:
    """Whether the channel lets an @username in through allowFrom (Discord: ids only)."""
    import importlib

    from nanobot.channels.manager import CHANNEL_CLASSES

    module, cls, _ = CHANNEL_CLASSES[channel]
    try:
        return bool(getattr(importlib.import_module(module), cls).allows_by_username)
    except ImportError:  # the channel's library is not installed: judge as the base channel does
        return True
