"""Telegram attachments: which parts of a message are media, how to fetch one (the download loop
itself is the channels' shared one, `Channel._download_media`), and albums.

An album (photos sent together, one caption) arrives as one update per photo, sharing a
`media_group_id`, in one poll or the next. Each became a turn of its own: three answers, two of
them to a photo without its question. `Albums` gathers the parts until none has come for
ALBUM_QUIET_S, so the channel publishes them as one message.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import quote, urlsplit, urlunsplit

from telegram import Message, Update
from telegram.error import TelegramError

from nanobot.channels import media as media_util
from nanobot.channels.media import MediaItem, Received
from nanobot.channels.split import utf16_len
from nanobot.util.text import quoted, unlabelled

if TYPE_CHECKING:
    from nanobot.channels.telegram import TelegramChannel


def shared_as_text(message: Message) -> str:
    """What a message without text or caption shares, in words: a location, venue, contact, a
    sticker's emoji or a dice throw ("" when none: such a message is not answered)."""
    if message.venue:
        venue = message.venue
        where = venue.location
        return f"[venue: {venue.title}, {venue.address} ({where.latitude:.5f}, {where.longitude:.5f})]"
    if message.location:
        return f"[location: {message.location.latitude:.5f}, {message.location.longitude:.5f}]"
    if message.contact:
        contact = message.contact
        name = " ".join(part for part in (contact.first_name, contact.last_name) if part)
        return f"[contact: {name}, {contact.phone_number}]"
    if message.sticker and message.sticker.emoji:
        return f"[sticker {message.sticker.emoji}]"
    if message.dice:
        return f"[dice {message.dice.emoji} {message.dice.value}]"
    return ""


@dataclass(frozen=True)
class Sender:
    id: int
    username: str | None
    first_name: str | None


def sender_of(message: Message) -> Sender | None:
    """Who wrote a message: its user; in a group, the chat it was sent as (an anonymous admin, or a
    channel posting there: the user is then a placeholder bot); None for another bot's."""
    if message.sender_chat is not None and message.chat.type != "private":
        chat = message.sender_chat
        return Sender(chat.id, chat.username, chat.title)
    user = message.from_user
    if user is None or user.is_bot:
        return None
    return Sender(user.id, user.username, user.first_name)


def inbound_metadata(message: Message, sender: Sender) -> dict[str, Any]:
    """What the channel keeps with a message it publishes (see nanobot/bus/events.py)."""
    metadata: dict[str, Any] = {
        "message_id": message.message_id,
        "username": sender.username,
        "first_name": sender.first_name,
        "chat_type": str(message.chat.type),
    }
    if message.reply_to_message is not None:
        metadata["reply_to_message_id"] = message.reply_to_message.message_id
    return metadata


REPLY_QUOTE_CHARS = 300  # of the message a reply answers, shown with it


def with_reply_context(message: Message, text: str, bot_id: int | None) -> str:
    """`text` of a reply preceded by what it answers, labelled as a quote ("translate this" said
    under a member's message reached the model without that message). Commands stay as typed."""
    replied = message.reply_to_message
    if replied is None or not text or text.startswith("/"):
        return text
    answered = message.quote.text if message.quote is not None else replied.text or replied.caption or ""
    if not answered:
        return text
    # in a fixed form no name a user picks can imitate: a member named "your message" passed their
    # words off as the assistant's own
    author = replied.from_user
    if replied.sender_chat is not None and replied.chat.type != "private":
        posted_as = replied.sender_chat
        whose = f"chat {quoted(posted_as.title or posted_as.username or '')} (id {posted_as.id})"
    elif author is not None and author.id == bot_id:
        whose = "your own earlier message"
    elif author is not None:
        whose = f"member {quoted(author.username or author.first_name)} (id {author.id})"
    else:
        whose = "a message"
    excerpt = " ".join(answered.split())
    if len(excerpt) > REPLY_QUOTE_CHARS:
        excerpt = excerpt[: REPLY_QUOTE_CHARS - 1] + "…"
    return f"[in reply to {whose}: {quoted(excerpt)}]\n{text}"


def with_origin(message: Message, text: str) -> str:
    """`text` of a forwarded message labelled with whom it came from: the model took a third
    party's words ("run this on the server") for the owner's, and a forwarded "/new" ran."""
    text = unlabelled(text)  # what the sender typed cannot pass for one of the labels
    origin = message.forward_origin
    if origin is None:
        return text
    user = getattr(origin, "sender_user", None)
    chat = getattr(origin, "sender_chat", None) or getattr(origin, "chat", None)
    name = (
        (user.full_name + (f" (@{user.username})" if user.username else "")) if user is not None
        else getattr(origin, "sender_user_name", None) or (chat.title if chat is not None else None)
    )
    # quoted: a name cannot write a label of its own; also alone: a forwarded voice note's transcript follows
    label = f"[forwarded from {quoted(name) if name else 'someone'}]"
    return f"{label}\n{text}" if text else label


def media_items(message: Message) -> list[MediaItem]:
    """Photo (largest size), document, voice, audio, video and round video of a message."""
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
    if message.video_note:  # a round video: saved as a video is
        add(message.video_note, "video_note.mp4", "video/mp4")
    return items


def chat_of(message: Message) -> str:
    """The chat a message belongs to: a forum topic is one of its own, `<chat id>:<topic id>`, so
    its replies go to that topic (not to General) and its conversation is its own session."""
    if message.is_topic_message and message.message_thread_id:
        return f"{message.chat.id}:{message.message_thread_id}"
    return str(message.chat.id)


def download_url(base_file_url: str, file_path: str | None) -> str:
    """The URL a file getFile described is downloaded from, its path percent-encoded.

    The library's own download reads `file_path` from the local disk when it names an existing
    file: Telegram's relative `documents/file_7.pdf` resolved against the working directory, where
    a group member could have written a file of that name to stand in for the owner's next
    document, or an absolute path a Bot API server answered (any file the daemon can read,
    config.json with its keys, copied into media/ where the chat's tools read it). Here a path is
    always one under the API's file URL; an absolute one, or one that climbs out, is refused."""
    relative = file_path or ""
    if relative.startswith(base_file_url + "/"):  # the library put the file URL in front
        relative = relative[len(base_file_url) + 1 :]  # checked as well: `../../bot<token>/getMe`
    if relative and not relative.startswith("/") and ".." not in PurePosixPath(relative).parts:
        url = f"{base_file_url}/{relative}"
    else:
        raise TelegramError(f"getFile gave a path nanobot does not download from: {file_path!r}")
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=quote(parts.path)))


async def download_media(channel: TelegramChannel, message: Message) -> Received:
    """Download the message's media into workspace/media, named after the message's chat (a forum
    topic's own: by the bare group id its files were the group's, and not the topic's)."""

    async def fetch(item: MediaItem, out: BinaryIO) -> None:
        assert channel.bot is not None
        bot = channel.bot
        tg_file = await channel._with_retry("getFile", lambda: bot.get_file(item.handle.file_id))
        # The library reads a download whole into memory before a byte reaches `out` (its cap
        # guards the disk only): a size getFile reports past the cap is refused before the download.
        if (tg_file.file_size or 0) > media_util.MAX_MEDIA_BYTES:
            raise media_util.TooLarge(f"getFile reports {tg_file.file_size} bytes")
        out.write(await bot.request.retrieve(download_url(bot.base_file_url, tg_file.file_path)))

    return await channel._download_media(
        chat_of(message), message.message_id, media_items(message), fetch, (TelegramError, OSError)
    )


ALBUM_QUIET_S = 1.0  # parts come a poll apart at most (0.5 s while updates are pending)
ALBUM_MAX_WAIT_S = 60.0  # polls failing longer than this: the parts so far go on their own
AlbumKey = tuple[int, str]  # (chat id, media_group_id)


def album_of(update: Update) -> AlbumKey | None:
    message = update.message
    if message is None or not message.media_group_id:
        return None
    return (message.chat.id, message.media_group_id)


# The Telegram app sends a paste longer than 4,096 characters as several messages, cut at about that
# length: a text this long opens a gathering of the sender's next messages, as an album's parts are.
PASTE_PART_UNITS = 4000


def paste_key(message: Message | None) -> AlbumKey | None:
    """The key a sender's long paste gathers under: per topic and per sender (channels posting in
    a group share one `from` user)."""
    sender = sender_of(message) if message is not None else None
    if message is None or sender is None:
        return None
    return (message.chat.id, f"paste:{chat_of(message)}:{sender.id}")


def paste_of(update: Update, albums: Albums) -> AlbumKey | None:
    """The key gathering a long paste the app sent as several messages (one turn, not one per piece,
    the first answered with the question still unsent), or None."""
    message = update.message
    key = paste_key(message)
    if key is None or message is None or not message.text or message.media_group_id:
        return None
    if message.text.startswith("/"):  # a command (/stop) is never a paste's piece
        return None
    if albums.is_open(key) or utf16_len(message.text) >= PASTE_PART_UNITS:
        return key
    return None


class Albums:
    """The albums (and long pastes) whose parts are being gathered."""

    def __init__(self) -> None:
        self._open: dict[AlbumKey, list[Update]] = {}
        # Polls are numbered as they start: an album is complete only after a poll that started
        # after its last part came back without another part (a poll failing meanwhile - a 429, a
        # 5xx backoff - split an album whose parts came a poll apart into two turns).
        self._polls_started = 0
        self._last_poll_done = 0
        self._joined_at: dict[AlbumKey, int] = {}

    def poll_started(self) -> int:
        self._polls_started += 1
        return self._polls_started

    def poll_done(self, poll: int) -> None:
        """Poll number `poll` (from poll_started) returned its updates."""
        self._last_poll_done = max(self._last_poll_done, poll)

    def is_open(self, key: AlbumKey) -> bool:
        return key in self._open

    def close(self, key: AlbumKey) -> None:
        """A message of the sender that cannot join their paste (a photo) came: the paste goes on
        with what it has, and their later texts come after that message, in the order sent (they
        joined the paste and reached the agent before the photo sent between them). The key is
        free at once: a new long paste opens a gathering of its own."""
        if self._open.pop(key, None) is not None:
            self._joined_at.pop(key, None)

    def join(self, key: AlbumKey, update: Update) -> list[Update] | None:
        """Add a part to its album: None when it joined one, else the new album's parts (this
        part's handler gathers them: `gather(key, parts)`)."""
        self._joined_at[key] = self._polls_started
        parts = self._open.get(key)
        if parts is None:
            parts = self._open[key] = [update]
            return parts
        parts.append(update)
        return None

    async def gather(self, key: AlbumKey, parts: list[Update]) -> list[Update]:
        """All parts of the album, in the order they were sent, once no new one came for a while
        and a later poll succeeded (or polls kept failing for ALBUM_MAX_WAIT_S), or once it was
        closed (`parts` is held from the start: a paste closed before its handler ran was lost)."""
        deadline = asyncio.get_running_loop().time() + ALBUM_MAX_WAIT_S
        try:
            while self._open.get(key) is parts:  # closed: it takes nothing more
                seen = len(parts)
                await asyncio.sleep(ALBUM_QUIET_S)
                if self._open.get(key) is not parts:
                    break
                polled = self._last_poll_done > self._joined_at[key]
                if seen == len(parts) and (polled or asyncio.get_running_loop().time() >= deadline):
                    break
        finally:
            if self._open.get(key) is parts:
                del self._open[key], self._joined_at[key]
        return sorted(parts, key=lambda u: u.update_id)
