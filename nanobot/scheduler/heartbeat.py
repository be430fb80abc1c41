"""HeartbeatService: every `interval_s`, read HEARTBEAT.md and, when it holds tasks, let the agent do them.

"Actionable" means HEARTBEAT.md has at least one line of real content once these are ignored:
HTML comments (`<!-- ... -->`, also across lines), headings (`# ...`), blank lines, horizontal
rules (`---`, `***`, `___`) and empty list items (`-`, `*`, `+`, `1.`, `- [ ]`, `- [x]` with no
text). The shipped template holds only headings and comments, so a fresh workspace costs nothing:
the heartbeat stays silent and never calls the LLM.

When there are tasks, `on_tasks(prompt, target)` runs them (the gateway gives it its own session,
answering in the target chat, so what the turn sends on its own, a sub-agent's report or the
`message` tool, reaches that chat too) and the reply goes to `resolve_target()`
(gateway.heartbeat.target, or the most recently active private chat of an allowed user). A reply
that is empty or just HEARTBEAT_OK is not delivered. The first beat comes an interval after the
last one that ran tasks (`last_beat`), so restarts neither skip the tasks nor run them twice.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from loguru import logger

from nanobot.bus.events import NO_ANSWER_REPLY
from nanobot.config.paths import HEARTBEAT_FILE
from nanobot.util.nofollow import read_regular_head
from nanobot.util.text import truncate_head

HEARTBEAT_OK = "HEARTBEAT_OK"
HEARTBEAT_SESSION_KEY = "heartbeat:main"
MAX_HEARTBEAT_CHARS = 20_000  # more than this is not a task list; the rest is cut off
# what is read of the file: its comments are taken out before the cut, and a file a command keeps
# appending to must not be read whole on every beat
MAX_HEARTBEAT_READ_BYTES = 1 << 20

HEARTBEAT_PROMPT = (
    "[Heartbeat] This is a periodic check of your task list in HEARTBEAT.md, shown below. "
    "Do the tasks that are due now. If there is nothing to do or report, reply exactly "
    f"{HEARTBEAT_OK} and nothing else; otherwise reply with what the user should know.\n\n"
)

#: a restart finds a beat overdue: it runs this long after the start (the channels connect first)
OVERDUE_BEAT_DELAY_S = 10.0

OnTasks = Callable[[str, tuple[str, str]], Awaitable[str | None]]  # (prompt, (channel, chat_id))
ResolveTarget = Callable[[], tuple[str, str] | None]
Deliver = Callable[[str, str, str], Awaitable[None]]  # (channel, chat_id, text)
LastBeat = Callable[[], float | None]  # the Unix time the tasks last ran, None when never

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_HEADING = re.compile(r"^#{1,6}(\s|$)")
_RULE = re.compile(r"^([-*_])(\s*\1){2,}$")
_EMPTY_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])(?:\s+\[[ xX]?\])?$")
_OK_DECORATION = "*_`'\". \t\r\n"


def task_lines(text: str) -> list[str]:
    """The lines of a HEARTBEAT.md that count as content (see the module docstring)."""
    lines = []
    for raw in _COMMENT.sub("", text).splitlines():
        line = raw.strip()
        if not line or _HEADING.match(line) or _RULE.match(line) or _EMPTY_ITEM.match(line):
            continue
        lines.append(line)
    return lines


def is_actionable(text: str) -> bool:
    return bool(task_lines(text))


def is_heartbeat_ok(reply: str | None) -> bool:
    """Empty (or the model gave no answer), or HEARTBEAT_OK give or take Markdown emphasis, quotes
    and a final full stop."""
    return not reply or reply == NO_ANSWER_REPLY or reply.strip(_OK_DECORATION) in ("", HEARTBEAT_OK)


def parse_target(value: str) -> tuple[str, str] | None:
    """`channel:chat_id` (e.g. `telegram:12345`) as a pair; None when empty or malformed."""
    channel, sep, chat_id = (value or "").strip().partition(":")
    if not sep or not channel.strip() or not chat_id.strip():
        return None
    return channel.strip(), chat_id.strip()


def resolve_heartbeat_target(
    configured: str, last_private_chat: Callable[[], tuple[str, str] | None]
) -> tuple[str, str] | None:
    """gateway.heartbeat.target when set (any chat, groups included: the user chose it); otherwise
    the most recently active private chat, which `last_private_chat` must never answer with a group.
    A malformed target delivers nowhere rather than somewhere unexpected."""
    if configured.strip():
        target = parse_target(configured)
        if target is None:
            logger.warning("heartbeat: gateway.heartbeat.target {!r} is not channel:chat_id", configured)
        return target
    return last_private_chat()


class HeartbeatService:
    def __init__(
        self,
        workspace: Path,
        interval_s: float,
        on_tasks: OnTasks,
        resolve_target: ResolveTarget,
        deliver: Deliver,
        last_beat: LastBeat | None = None,
    ) -> None:
        self.workspace = workspace
        self.interval_s = interval_s
        self._on_tasks = on_tasks
        self._resolve_target = resolve_target
        self._deliver = deliver
        self._last_beat = last_beat
        self._task: asyncio.Task[None] | None = None

    @property
    def file(self) -> Path:
        return self.workspace / HEARTBEAT_FILE

    async def start(self) -> None:
        if self._task is None:
            first_s = self.first_delay_s()
            self._task = asyncio.create_task(self._loop(first_s), name="heartbeat")
            logger.info("heartbeat: every {}s from {}, next in {:.0f}s", self.interval_s, self.file, first_s)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def first_delay_s(self, now: float | None = None) -> float:
        """Seconds to the first beat: an interval after the last one that ran tasks (a gateway
        restarted more often than the interval waited a whole one each time and never ran them),
        soon when that is past, a whole interval when none ever ran."""
        try:
            last = self._last_beat() if self._last_beat is not None else None
        except Exception as exc:  # noqa: BLE001 - an unreadable session only costs the head start
            logger.warning("heartbeat: when it last ran is unknown ({}); first beat in {}s", exc, self.interval_s)
            last = None
        if last is None:
            return float(self.interval_s)
        due = last + self.interval_s - (time.time() if now is None else now)
        # a clock set back makes the last beat look recent: never more than one interval
        return min(float(self.interval_s), max(OVERDUE_BEAT_DELAY_S, due))

    async def _loop(self, first_s: float) -> None:
        delay_s = first_s
        while True:
            await asyncio.sleep(delay_s)
            delay_s = self.interval_s
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - one bad beat must not end the heartbeat
                logger.opt(exception=exc).error("heartbeat: tick failed")

    def read_tasks(self) -> str | None:
        """HEARTBEAT.md's text without its comments when it is actionable, else None. Past
        MAX_HEARTBEAT_CHARS it is cut, said in the log and to the model (tasks after a long comment
        were cut off with it, silently never done)."""
        try:
            # Only a regular file in the workspace: a symlink a command planted there would make
            # the heartbeat send whatever it points at (config.json) to the model.
            text, more = read_regular_head(self.file, MAX_HEARTBEAT_READ_BYTES, beneath=self.workspace)
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.warning("heartbeat: cannot read {}: {}", self.file, exc.strerror or exc)
            return None
        text = _COMMENT.sub("", text)
        if not is_actionable(text):
            if more:  # a task past a comment longer than what is read would be skipped without a word
                logger.warning(
                    "heartbeat: the first {} bytes of {} hold no task and the rest is not read; "
                    "shorten its comments",
                    MAX_HEARTBEAT_READ_BYTES, self.file.name,
                )
            return None
        if more or len(text) > MAX_HEARTBEAT_CHARS:
            logger.warning(
                "heartbeat: {} is longer than {} characters without its comments; only its start is used",
                self.file.name, MAX_HEARTBEAT_CHARS,
            )
            text = truncate_head(text, MAX_HEARTBEAT_CHARS, marker="")
            text += "\n[HEARTBEAT.md goes on; the rest is not shown]"
        return text

    async def tick(self) -> str | None:
        """One beat; returns the text delivered, or None when it stayed silent."""
        tasks = self.read_tasks()
        if tasks is None:
            logger.debug("heartbeat: nothing to do")
            return None
        target = self._resolve_target()
        if target is None:
            # Running tasks nobody will hear about would spend tokens for nothing.
            logger.info(
                "heartbeat: tasks found but no chat to report to (gateway.heartbeat.target, or the "
                "last private chat of a user still allowed); the tasks are not done"
            )
            return None
        logger.info("heartbeat: running tasks from {}", self.file.name)
        reply = await self._on_tasks(HEARTBEAT_PROMPT + tasks.strip(), target)
        if is_heartbeat_ok(reply):
            logger.debug("heartbeat: agent reports nothing to say")
            return None
        assert reply is not None
        channel, chat_id = target
        await self._deliver(channel, chat_id, reply)
        return reply
