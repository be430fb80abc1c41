"""Received media: file naming under `<workspace>/media/`, media types, voice transcription."""

from __future__ import annotations

import io
import mimetypes
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import httpx
from loguru import logger

from nanobot.config.paths import file_name_part, media_prefix
from nanobot.config.schema import ProvidersConfig, TranscriptionConfig
from nanobot.secrets import mask_then_cut
from nanobot.util.fs import PRIVATE_FILE_MODE, numbered_names
from nanobot.util.nofollow import open_folder_beneath

MAX_MEDIA_BYTES = 20 * 1024 * 1024  # the Bot API's own download limit; Discord's free tier is lower
TRANSCRIPTION_TIMEOUT_S = 60.0
MAX_FILENAME_CHARS = 80
# Whisper-compatible endpoints known by provider name; `custom` (or any) may set its own apiBase.
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
DEFAULT_TRANSCRIPTION_BASES = {
    "openai": "https://api.openai.com/v1",
    "groq": "https://api.groq.com/openai/v1",
}


class TranscriptionError(Exception):
    pass


@dataclass
class MediaItem:
    """One attachment of a received message, as the platform describes it."""

    filename: str
    mime: str | None
    size: int
    voice: bool
    handle: Any  # what the platform's fetch needs (a Telegram file object, a Discord attachment)


@dataclass
class Received:
    """What `Channel._download_media` made of a message's attachments."""

    paths: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def extend(self, other: Received) -> None:
        """Add another message's attachments (the parts of one album)."""
        self.paths += other.paths
        self.types += other.types
        self.notes += other.notes


Fetch = Callable[[MediaItem, BinaryIO], Awaitable[None]]  # download one item into the open file


def safe_filename(
    channel: str, chat_id: str | int, message_id: str | int, name: str, mime: str | None = None
) -> str:
    """`<channel>_<chat>_<message id>_<stem>.<ext>` with anything but [A-Za-z0-9._-] replaced, no
    path parts. Message ids are unique only within a chat (two chats' photo 57 are both `photo.jpg`),
    so the chat is part of the name; a long name is shortened in its stem, never in the prefix. The
    extension is kept apart (`фото.jpg` is `file.jpg`, not `jpg`: the type is read from it), or comes
    from `mime` when the name has none."""
    prefix = f"{media_prefix(channel, chat_id)}{file_name_part(str(message_id))}_"
    stem, dot, ext = Path(name).name.rpartition(".")
    if not (dot and stem):
        stem, ext = Path(name).name, ""
    ext = re.sub(r"[^A-Za-z0-9]+", "", ext)[:10]
    if not ext and mime:
        ext = (mimetypes.guess_extension(mime.split(";")[0].strip()) or "").lstrip(".")
    suffix = f".{ext}" if ext else ""
    stem = file_name_part(stem) or "file"
    room = max(MAX_FILENAME_CHARS - len(prefix) - len(suffix), 8)
    return prefix + stem[:room].rstrip("._") + suffix


def create_free(root: Path, folder: Path, name: str) -> tuple[Path, BinaryIO]:
    """A new file `folder/name` (or `name` with -2, -3 ... before its extension when taken), created
    0600 and open for writing. It is created with O_EXCL and O_NOFOLLOW through a descriptor of
    `folder`, which must lie under `root`: a name taken by anything (a dangling symlink a command
    planted for the next predictable name included) is skipped, so a download never writes through
    a link to ~/.ssh."""
    stem, dot, ext = name.rpartition(".")
    stem, suffix = (stem, f".{ext}") if dot and stem else (name, "")
    folder_fd = open_folder_beneath(root, folder)
    try:
        for candidate in numbered_names(stem, suffix):
            try:
                fd = os.open(candidate, _NEW_FILE, PRIVATE_FILE_MODE, dir_fd=folder_fd)
            except FileExistsError:
                continue
            return folder / candidate, os.fdopen(fd, "wb")
        raise AssertionError("unreachable")  # numbered_names never ends
    finally:
        os.close(folder_fd)


class TooLarge(OSError):
    """A download grew past MAX_MEDIA_BYTES although its announced size (optional) was smaller."""


class CappedWriter(io.BufferedIOBase):
    """A file open for writing that refuses to grow past `limit` bytes: the size an update announces
    is optional, and a local Bot API server has no 20 MB cap of its own. A BufferedIOBase, as
    libraries test for one before writing into it (discord.py takes anything else for a path)."""

    def __init__(self, out: BinaryIO, limit: int) -> None:
        super().__init__()
        self._out = out
        self._limit = limit
        self.written = 0

    def write(self, data: Any) -> int:
        self.written += len(data)
        if self.written > self._limit:
            raise TooLarge(f"larger than {self._limit} bytes")
        return self._out.write(data)

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._out.seek(offset, whence)

    def tell(self) -> int:
        return self._out.tell()

    def flush(self) -> None:
        self._out.flush()


def media_type(mime: str | None, filename: str, voice: bool = False) -> str:
    """One of "image", "voice", "audio", "video", "document"."""
    if voice:
        return "voice"
    mime = mime or mimetypes.guess_type(filename)[0] or ""
    for kind in ("image", "audio", "video"):
        if mime.startswith(kind + "/"):
            return kind
    return "document"


def transcription_enabled(cfg: TranscriptionConfig) -> bool:
    return bool(cfg.provider)


async def transcribe(path: Path, cfg: TranscriptionConfig, providers: ProvidersConfig) -> str:
    """POST the audio to `<apiBase>/audio/transcriptions` (the OpenAI Whisper API) and return the text."""
    provider = getattr(providers, cfg.provider, None)
    if provider is None or not hasattr(provider, "api_key"):
        raise TranscriptionError(f"unknown transcription provider {cfg.provider!r}")
    base = (provider.api_base or DEFAULT_TRANSCRIPTION_BASES.get(cfg.provider, "")).rstrip("/")
    if not base:
        raise TranscriptionError(f"providers.{cfg.provider}.apiBase is not set")
    headers = {"Authorization": f"Bearer {provider.api_key}"} if provider.api_key else {}
    headers.update(provider.extra_headers)
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    async with httpx.AsyncClient(timeout=TRANSCRIPTION_TIMEOUT_S) as client:
        with path.open("rb") as fh:
            response = await client.post(
                f"{base}/audio/transcriptions",
                headers=headers,
                data={"model": cfg.model},
                files={"file": (path.name, fh, mime)},
            )
    if response.status_code != 200:
        raise TranscriptionError(f"HTTP {response.status_code}: {mask_then_cut(response.text, 200)}")
    if "json" not in response.headers.get("content-type", "").lower():
        return response.text.strip()  # a plain-text answer (response_format "text"): "42" is a transcript
    try:
        answer = response.json()
    except ValueError:
        answer = None
    text = answer.get("text") if isinstance(answer, dict) else None
    if not isinstance(text, str):  # a list, a bare string, {"text": null}: no transcript in it
        raise TranscriptionError(f"unexpected answer: {mask_then_cut(response.text, 200)}")
    return text.strip()


async def voice_note_text(path: Path, rel: str, cfg: TranscriptionConfig, providers: ProvidersConfig) -> str:
    """The line added to the message content for a voice note: its transcript or a note why not."""
    if not transcription_enabled(cfg):
        return f"[voice message saved as {rel}; transcription is not configured]"
    try:
        text = await transcribe(path, cfg, providers)
    except (TranscriptionError, httpx.HTTPError, OSError) as exc:
        logger.warning("voice transcription failed for {}: {}", rel, exc)
        return f"[voice message saved as {rel}; transcription failed]"
    return (
        f"[voice transcription] {text}" if text else f"[voice message saved as {rel}; no speech recognised]"
    )

