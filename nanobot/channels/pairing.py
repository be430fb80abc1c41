"""Pairing: how an unknown sender in a private chat becomes an allowed one without reading logs.

Under `channels.<name>.dmPolicy: "pairing"` (the default) a sender who is not on `allowFrom` and
writes to the bot in a private chat gets one short message with a pairing code; their message is
dropped (it never reaches the model or a session file). The owner runs
`nanobot pairing approve CODE` and that sender is allowed from their next message on, by a running
gateway too: the store re-reads its file whenever the file changed.

Limits, so strangers cannot spam the owner or the store: one code per sender per
`CODE_TTL_S` (an hour; a code expires after that and the sender may ask again), at most
`MAX_PENDING_PER_CHANNEL` (3) unexpired requests per channel, and a denied sender never gets another
code (the owner can still add them to `allowFrom`).

The store is one JSON file beside config.json (`pairing.json`, mode 0600): `pending` requests,
`approved` and `denied` senders, per channel. Every change is a read-modify-write under an OS lock
(`pairing.json.lock`) with an atomic replace, so the gateway and `nanobot pairing` never lose each
other's updates.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from loguru import logger

from nanobot.timeutil import CLOCK_SLACK_S
from nanobot.util.fs import atomic_write, file_lock

PAIRING_FILE_NAME = "pairing.json"
CODE_TTL_S = 3600.0
MAX_PENDING_PER_CHANNEL = 3
CODE_LENGTH = 8
# No 0/O, 1/I/L: a code is read off a phone and typed into a terminal.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
STORE_FORMAT = 1

Issue = Literal["issued", "pending", "full", "denied"]


def pairing_path(config_path: Path | str) -> Path:
    """The pairing store that belongs to a config file: `pairing.json` in the same folder."""
    return Path(config_path).expanduser().absolute().parent / PAIRING_FILE_NAME


@dataclass
class PairingRequest:
    code: str
    channel: str
    sender_id: str
    username: str
    chat_id: str
    created_at: float
    expires_at: float


@dataclass
class PairedSender:
    channel: str
    sender_id: str
    username: str
    at: float  # when approved (or denied)


class PairingError(Exception):
    """A pairing command the store cannot carry out (unknown or expired code)."""


def _empty() -> dict[str, Any]:
    return {"format": STORE_FORMAT, "pending": [], "approved": [], "denied": []}


def _live(request: dict[str, Any], now: float) -> bool:
    """A pending request still counts: its hour is not over, and the clock has not been stepped back
    past its creation (a wrong clock corrected by NTP would otherwise stretch the hour by the step,
    and three such codes keep everyone else from pairing as long)."""
    return float(request.get("expires_at", 0)) > now and float(request.get("created_at") or 0) <= now + CLOCK_SLACK_S


def _entry(key: str, raw: object) -> dict[str, Any]:
    """One entry of the store's `key` list in the shape the code reads (ValueError naming what is
    wrong): the file is also edited by hand, e.g. to take an approval back."""
    if not isinstance(raw, dict) or not raw.get("channel") or raw.get("sender_id") in (None, ""):
        raise ValueError(f"an entry of {key!r} is not an object with a channel and a sender_id: {raw!r}")
    try:
        if key == "pending":
            return asdict(
                PairingRequest(
                    code=str(raw["code"]),
                    channel=str(raw["channel"]),
                    sender_id=str(raw["sender_id"]),
                    username=str(raw.get("username") or ""),
                    chat_id=str(raw.get("chat_id") or raw["sender_id"]),
                    created_at=float(raw.get("created_at") or 0),
                    expires_at=float(raw["expires_at"]),
                )
            )
        sender = PairedSender(
            channel=str(raw["channel"]),
            sender_id=str(raw["sender_id"]),
            username=str(raw.get("username") or ""),
            at=float(raw.get("at") or 0),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"an entry of {key!r} has a missing or bad field ({exc}): {raw!r}") from None
    return asdict(sender)


class PairingStore:
    """The pairing file, shared by the running gateway (checks, codes) and `nanobot pairing`."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._clock = clock
        self._data: dict[str, Any] = _empty()
        self._signature: tuple[int, int, int] | None = None

    # ------------------------------------------------------------------ file
    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _load(self, *, strict: bool = False) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return _empty()
        except (OSError, ValueError) as exc:
            if strict:  # never write over it: it holds the approved and denied senders
                raise PairingError(
                    f"{self.path} is unreadable ({exc}); fix or remove it (nothing was changed)"
                ) from None
            # Never guess: an unreadable store admits nobody new; the owner sees why.
            logger.error("pairing: {} is unreadable ({}); approved senders are not admitted", self.path, exc)
            return _empty()
        try:
            if not isinstance(data, dict):
                raise ValueError("the file holds no object of pending, approved and denied senders")
            for key in ("pending", "approved", "denied"):
                entries = data.get(key)
                if entries is not None and not isinstance(entries, list):
                    raise ValueError(f"'{key}' is not a list")  # rewriting it would drop the senders
                data[key] = [_entry(key, e) for e in entries or []]
        except ValueError as exc:  # a hand edit gave an entry another shape: as unreadable as bad JSON
            if strict:
                raise PairingError(f"{self.path}: {exc}; fix or remove it (nothing was changed)") from None
            logger.error("pairing: {}: {}; approved senders are not admitted", self.path, exc)
            return _empty()
        return data

    def check_readable(self) -> None:
        """PairingError when the file exists but cannot be read as a store (a hand edit gone wrong)."""
        self._load(strict=True)

    def refresh(self) -> None:
        """Re-read the file if it changed since the last read (a stat; cheap)."""
        signature = self._stat()
        if signature != self._signature:
            self._data = self._load()
            self._signature = signature

    def _update(self, change: Callable[[dict[str, Any]], Any]) -> Any:
        """Apply `change` to the current file contents under the lock and write the result."""
        with file_lock(self.lock_path):
            data = self._load(strict=True)
            now = self._clock()
            data["pending"] = [p for p in data["pending"] if _live(p, now)]
            result = change(data)
            atomic_write(self.path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            self._data, self._signature = data, self._stat()
        return result

    # ------------------------------------------------------------------ reads
    def _has(self, key: str, channel: str, sender_id: str) -> bool:
        return any(
            e.get("channel") == channel and str(e.get("sender_id")) == str(sender_id) for e in self._data[key]
        )

    def is_approved(self, channel: str, sender_id: str) -> bool:
        """True when the owner approved this sender on this channel (re-reads a changed file)."""
        self.refresh()
        return self._has("approved", channel, sender_id)

    def pending(self) -> list[PairingRequest]:
        """Unexpired requests, oldest first."""
        self.refresh()
        now = self._clock()
        out = [PairingRequest(**p) for p in self._data["pending"] if _live(p, now)]
        return sorted(out, key=lambda p: p.created_at)

    def approved(self) -> list[PairedSender]:
        self.refresh()
        return [PairedSender(**e) for e in self._data["approved"]]

    # ------------------------------------------------------------------ writes
    def request(self, channel: str, sender_id: str, username: str, chat_id: str) -> tuple[Issue, str | None]:
        """Ask for a code for an unknown sender: ("issued", code) means send it; otherwise send nothing
        ("pending": they already hold an unexpired code; "full": too many pending on this channel;
        "denied": the owner refused them)."""

        def change(data: dict[str, Any]) -> tuple[Issue, str | None]:
            refusal = self._refusal(data, channel, sender_id)
            if refusal is not None:
                return refusal, None
            taken = {p.get("code") for p in data["pending"]}
            code = _new_code(taken)
            now = self._clock()
            req = PairingRequest(code, channel, sender_id, username, chat_id, now, now + CODE_TTL_S)
            data["pending"].append(asdict(req))
            return "issued", code

        self.refresh()
        # A stranger writing again is the common case: answer it from memory, without the lock.
        refusal = self._refusal(self._data, channel, sender_id)
        if refusal is not None:
            return refusal, None
        return self._update(change)

    def _refusal(self, data: dict[str, Any], channel: str, sender_id: str) -> Issue | None:
        """Why no new code may be issued to this sender now (None: one may)."""
        now = self._clock()
        live = [p for p in data["pending"] if _live(p, now) and p.get("channel") == channel]
        if any(str(e.get("sender_id")) == sender_id and e.get("channel") == channel for e in data["denied"]):
            return "denied"
        if any(str(p.get("sender_id")) == sender_id for p in live):
            return "pending"
        if len(live) >= MAX_PENDING_PER_CHANNEL:
            return "full"
        return None

    def _resolve(self, code: str, into: str) -> PairingRequest:
        wanted = code.strip().upper()

        def change(data: dict[str, Any]) -> PairingRequest:
            match = next((p for p in data["pending"] if p.get("code") == wanted), None)
            if match is None:
                raise PairingError(
                    f"no pending pairing request with code {wanted!r} (codes expire after "
                    f"{CODE_TTL_S / 60:.0f} minutes; the sender gets a new one by writing again)"
                )
            req = PairingRequest(**match)
            data["pending"] = [p for p in data["pending"] if p is not match]
            for key in ("approved", "denied"):  # a sender is in at most one of the two
                data[key] = [
                    e
                    for e in data[key]
                    if not (e.get("channel") == req.channel and e.get("sender_id") == req.sender_id)
                ]
            data[into].append(asdict(PairedSender(req.channel, req.sender_id, req.username, self._clock())))
            return req

        return self._update(change)

    def approve(self, code: str) -> PairingRequest:
        """Allow the sender of a pending request; raises PairingError for an unknown or expired code."""
        return self._resolve(code, "approved")

    def deny(self, code: str) -> PairingRequest:
        """Refuse the sender of a pending request: they get no further codes."""
        return self._resolve(code, "denied")

    def revoke(self, channel: str, sender: str) -> PairedSender:
        """Take back an approval (`sender`: the id, or @username): the sender is denied from their
        next message on, and gets no further codes. Raises PairingError when none matches."""
        wanted = sender.strip()
        if wanted in ("", "@"):  # `@$NAME` with NAME unset matched every sender without a username
            raise PairingError("name the sender: their id, or @username (see `nanobot pairing list`)")

        def matches(entry: dict[str, Any]) -> bool:
            if entry.get("channel") != channel:
                return False
            if wanted.startswith("@"):
                return str(entry.get("username") or "").lower() == wanted[1:].lower()
            return str(entry.get("sender_id")) == wanted

        def change(data: dict[str, Any]) -> PairedSender:
            found = [e for e in data["approved"] if matches(e)]
            if not found:
                raise PairingError(f"no approved {channel} sender {wanted!r} (see `nanobot pairing list`)")
            if len(found) > 1:  # a username two of them held at their approvals: not a guess
                ids = ", ".join(str(e.get("sender_id")) for e in found)
                raise PairingError(f"{wanted!r} names {len(found)} approved {channel} senders ({ids}): give the id")
            match = found[0]
            data["approved"] = [e for e in data["approved"] if e is not match]
            username = str(match.get("username") or "")
            revoked = PairedSender(channel, str(match.get("sender_id")), username, self._clock())
            data["denied"].append(asdict(revoked))
            return revoked

        return self._update(change)


def _new_code(taken: set[Any]) -> str:
    while True:
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        if code not in taken:
            return code


def pairing_message(code: str) -> str:
    """The one reply an unknown sender gets (no details about the owner or the bot's setup)."""
    return (
        "Hi! I only talk to people my owner has approved.\n"
        f"Your pairing code: `{code}`\n"
        f"Ask the owner to run `nanobot pairing approve {code}`, then write again. "
        f"The code expires in {CODE_TTL_S / 60:.0f} minutes."
    )
