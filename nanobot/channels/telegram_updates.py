"""Reading a getUpdates batch the Telegram library cannot parse as a whole.

python-telegram-bot parses a batch at once: one update with a field missing that a newer Bot API
requires (an older local Bot API server leaves it out, in a stranger's poll, say) failed every
poll, the offset never moved past it, and the bot heard no one, restarts included. The batch is read
again update by update; an unreadable one is logged, marked received and handled (so the offset
moves past it), and the others are handled as usual.
"""

from __future__ import annotations

import warnings

from loguru import logger
from telegram import Bot, Update

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
