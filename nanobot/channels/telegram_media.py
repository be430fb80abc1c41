"""Telegram attachments: download photos, documents, voice, audio and video into workspace/media."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loguru import logger
from telegram import Message
from telegram.error import TelegramError

from nanobot.channels import media as media_util

if TYPE_CHECKING:
    from nanobot.channels.telegram import TelegramChannel


async def download_media(
    channel: TelegramChannel, message: Message
) -> tuple[list[str], list[str], list[str]]:
    """Download photo/document/voice/audio/video into workspace/media: (paths, types, notes)."""
    candidates: list[tuple[Any, str, str | None, bool]] = []
    if message.photo:
        candidates.append((message.photo[-1], "photo.jpg", "image/jpeg", False))
    if message.document:
        doc = message.document
        candidates.append((doc, doc.file_name or "document", doc.mime_type, False))
    if message.voice:
        candidates.append((message.voice, "voice.ogg", message.voice.mime_type, True))
    if message.audio:
        candidates.append((message.audio, message.audio.file_name or "audio", message.audio.mime_type, False))
    if message.video:
        candidates.append(
            (message.video, message.video.file_name or "video.mp4", message.video.mime_type, False)
        )
    paths: list[str] = []
    types: list[str] = []
    notes: list[str] = []
    for item, filename, mime, voice in candidates:
        size = getattr(item, "file_size", None) or 0
        if size > media_util.MAX_MEDIA_BYTES:
            notes.append(f"[{filename}: {size} bytes, too large to download]")
            continue
        path = channel.media_dir() / media_util.safe_filename(channel.name, message.message_id, filename)
        try:
            assert channel.bot is not None
            tg_file = await channel._with_retry("getFile", lambda i=item: channel.bot.get_file(i.file_id))
            await tg_file.download_to_drive(path)
        except (TelegramError, OSError) as exc:
            logger.warning("telegram: could not download {}: {}", filename, exc)
            notes.append(f"[{filename}: download failed]")
            continue
        kind = media_util.media_type(mime, filename, voice=voice)
        paths.append(str(path))
        types.append(kind)
        rel = path.relative_to(channel.workspace).as_posix()
        if voice or kind == "audio":
            cfg = channel.channels_config.transcription
            notes.append(await media_util.voice_note_text(path, rel, cfg, channel.providers))
    return paths, types, notes
