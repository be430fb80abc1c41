"""Reading updates: a getUpdates batch the Telegram library cannot parse as a whole, and whom a
group message is for.

python-telegram-bot parses a batch at once: one update with a field missing that a newer Bot API
requires (an older local Bot API server leaves it out, in a stranger's poll, say) failed every
poll, the offset never moved past it, and the bot heard no one, restarts included. The batch is read
again update by update; an unreadable one is logged, marked received and handled (so the offset
moves past it), and the others are handled as usual.

In a group under groupPolicy "mention" a message is for the bot when it replies to the bot, names
it (`@bot` as a word of its own) or opens with a command; `/new@other_bot` is another bot's.
"""

from __future__ import annotations

import re
import warnings

from loguru import logger
from telegram import Bot, Message, Update

from nanobot.bus.commands import starts_with_command
from nanobot.channels.delivery import AckWindow


async def readable_updates(bot: Bot, offset: int | None, acks: AckWindow, error: Exception) -> list[Update]:
    """The batch at `offset`, without the updates the library cannot read; re-raises `error` when
    nothing could be read again."""
    with warnings.catch_warnings():  # "use Bot.get_updates": the raw answer is what is needed here
        warnings.simplefilter("ignore")
        raw = await bot.do_api_request(
            "getUpdates", api_kwargs={"offset": offset, "timeout": 0, "allowed_updates": ["message"]}
        )
    readable: list[Update] = []
    for item in raw if isinstance(raw, list) else []:
        try:
            readable.append(Update.de_json(item, bot))
        except Exception as exc:  # noqa: BLE001 - this update only
            update_id = item.get("update_id") if isinstance(item, dict) else None
            logger.warning("telegram: skipping update {} the library cannot read: {}", update_id, exc)
            if isinstance(update_id, int) and acks.is_new(update_id):
                acks.receive(update_id)
                acks.handled(update_id)
                acks.release(update_id)  # confirmed with the next poll: the offset moves past it
    if not readable and not raw:
        raise error
    return readable


def mention_pattern(bot_username: str) -> re.Pattern[str]:
    """`@bot` as a word of its own: not @nano_bot_fans, not the middle of ops@nano_bot.dev."""
    return re.compile(rf"(?<![\w.@])@{re.escape(bot_username)}\b(?![.@]\w)", re.I)


def addressed(
    message: Message, typed: str, text: str, bot_id: int | None, bot_username: str | None
) -> bool:
    """In a group under groupPolicy "mention": is this message for the bot? `typed` is what the
    sender wrote (a forward's label naming the bot, as on a copy of its own message, is not a
    mention); `text` is what reaches the agent (a forwarded "/new" is labelled, no command)."""
    reply = message.reply_to_message
    if reply is not None and reply.from_user is not None and reply.from_user.id == bot_id:
        return True
    if bot_username and mention_pattern(bot_username).search(typed):
        return True
    return starts_with_command(text)

