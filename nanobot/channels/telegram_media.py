"""Telegram attachments: which parts of a message are media, and how to fetch one (the download
loop itself is the channels' shared one, `Channel._download_media`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from telegram import Message
from telegram.error import TelegramError

from nanobot.channels.media import MediaItem, Received

if TYPE_CHECKING:
    from nanobot.channels.telegram import TelegramChannel


def media_items(message: Message) -> list[MediaItem]:
    """Photo (largest size), document, voice, audio and video of a message."""
    items: list[MediaItem] = []

    def add(obj: object, filename: str, mime: str | None, voice: bool = False) -> None:
        items.append(MediaItem(filename, mime, getattr(obj, "file_size", None) or 0, voice, obj))

    if message.photo:
        add(message.photo[-1], "photo.jpg", "image/jpeg")
    if message.document:
        add(message.document, message.document.file_name or "document", message.document.mime_type)
    if message.voice:
        add(message.voice, "voice.ogg", message.voice.mime_type, voice=True)
    if message.audio:
        add(message.audio, message.audio.file_name or "audio", message.audio.mime_type)
    if message.video:
        add(message.video, message.video.file_name or "video.mp4", message.video.mime_type)
    return items


async def download_media(channel: TelegramChannel, message: Message) -> Received:
    """Download the message's media into workspace/media."""

    async def fetch(item: MediaItem, path: Path) -> None:
        assert channel.bot is not None
        bot = channel.bot
        tg_file = await channel._with_retry("getFile", lambda: bot.get_file(item.handle.file_id))
        await tg_file.download_to_drive(path)

    return await channel._download_media(
        message.chat_id, message.message_id, media_items(message), fetch, (TelegramError, OSError)
    )
