"""MemoryLifecycle: context management that always runs, whatever stores long-term memory.

- Budget: contextWindowTokens − maxTokens − safety buffer. Over it, the oldest unconsolidated
  messages (up to a user-turn boundary) are consolidated until the estimate is about half the budget.
- Flush: within a soft margin below the budget, one silent flush turn per compaction cycle first.
- Background work after each turn; per-session locks, a `consolidating` set and strong task
  references; drained on shutdown. A prompt that would overflow is consolidated before the call.
- /new: archive the transcript at once, then consolidate the rest and write session notes in the
  background; a failure leaves a `.pending` marker and the kept transcript, retried at start-up with
  a backoff; after `max_archive_retries` failed attempts the rest is raw-archived into HISTORY.md
  and the marker becomes `.failed` (reported by `nanobot status`); SessionStore keeps the markers
  (`session/markers.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.memory.consolidator import Consolidator
from nanobot.memory.flush import MemoryFlusher
from nanobot.memory.seam import memory_origin, memory_private
from nanobot.memory.session_notes import write_session_note
from nanobot.memory.store import MemoryStore
from nanobot.memory.transcript import boundary_after, owners_part
from nanobot.session.history import history_indices
from nanobot.session.store import Session, SessionStore
from nanobot.util.fs import cannot_write
from nanobot.util.keyed_locks import KeyedLocks
from nanobot.util.tasks import finish_or_cancel

#: tokens of the next prompt: (session, whether the owner's memory is in the prompt) -> tokens
Estimator = Callable[[Session, bool], int]
#: the flush margin never takes more than this share of a small window's budget
MAX_FLUSH_MARGIN_SHARE = 0.25
#: when the prompt without its history is over the budget (a huge message), consolidation waits
#: until the history is at least this share of the budget instead of running before every turn
MIN_HOPELESS_HISTORY_SHARE = 0.25
OVER_WARN_STEP_TOKENS = 256  # "still over budget" is logged again when the prompt grows by this


@dataclass
class LifecycleSettings:
    context_window_tokens: int = 65536
    max_tokens: int = 8192
    safety_buffer_tokens: int = 1024
    max_rounds: int = 3
    max_failures: int = 3
    flush_enabled: bool = True
    flush_soft_tokens: int = 4000
    share_in_groups: bool = False
    max_archive_retries: int = 5
    archive_retry_backoff_s: float = 300.0

    @property
    def budget_tokens(self) -> int:
        """The prompt budget: context window − reply tokens − safety buffer."""
        return max(512, self.context_window_tokens - self.max_tokens - self.safety_buffer_tokens)


class MemoryLifecycle:
    def __init__(
        self,
        sessions: SessionStore,
        memory: MemoryStore,
        consolidator: Consolidator,
        flusher: MemoryFlusher,
        settings: LifecycleSettings,
        *,
        estimator: Estimator,
    ) -> None:
        self.sessions = sessions
        self.memory = memory
        self.consolidator = consolidator
        self.flusher = flusher
        self.settings = settings
        self.estimator = estimator
        self._locks = KeyedLocks()  # per session key, while held or awaited
        self.consolidating: set[str] = set()
        self._over_warned: dict[str, int] = {}  # session -> prompt size (in steps) last warned about
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ thresholds
    @property
    def budget_tokens(self) -> int:
        return self.settings.budget_tokens

    @property
    def flush_threshold_tokens(self) -> int:
        margin = min(self.settings.flush_soft_tokens, int(self.budget_tokens * MAX_FLUSH_MARGIN_SHARE))
        return self.budget_tokens - margin

    def session_locked(self, key: str) -> bool:
        """Whether memory work on the session holds its lock now."""
        return self._locks.locked(key)

    @asynccontextmanager
    async def lock_for(self, session: Session) -> AsyncIterator[None]:
        """The session's memory lock: consolidation, flush and /new of one session take turns, in
        this process and with any other on the workspace (a one-shot `nanobot agent` beside the
        gateway); the session is read again first if another process changed its file meanwhile."""
        async with self._locks.hold(session.key), self.sessions.memory_lock(session.key):
            self.sessions.refresh(session)
            yield

    # ------------------------------------------------------------------ tasks
    def track(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run `coro` in the background with a strong reference until it ends."""
        task = asyncio.create_task(self._guard(coro, name), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @staticmethod
    async def _guard(coro: Coroutine[Any, Any, Any], name: str) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - background work never crashes the loop
            logger.opt(exception=exc).error("background task {} failed", name)

    def pending(self) -> int:
        return len(self._tasks)

    async def drain(self, timeout_s: float) -> bool:
        """Wait for background tasks; cancel what is left after `timeout_s` (it stays recoverable)."""
        left = await finish_or_cancel(self._tasks, timeout_s, unwind_s=1.0)
        if left:
            logger.warning(
                "{} background memory task(s) cancelled at shutdown; the transcripts keep their data",
                len(left),
            )
        return not left

    # ------------------------------------------------------------------ per turn
    async def ensure_fits(self, session: Session, estimate: Callable[[], int], *, private: bool) -> None:
        """Before an LLM call: if the prompt would overflow, consolidate now (waiting for background work)."""
        if estimate() <= self.budget_tokens:
            return
        async with self.lock_for(session):
            if not session.archived and estimate() > self.budget_tokens:
                await self._consolidate_locked(session, private, estimate)

    def after_turn(self, session: Session, *, private: bool) -> None:
        """Schedule the flush and/or consolidation this session needs, in the background."""
        if session.key in self.consolidating:
            return
        # The next prompt adds a user message: expect one about the size of the last one, so the
        # work starts in the background now instead of blocking the next turn.
        estimate = self.estimator(session, private) + self._last_user_tokens(session)
        wants_flush = (
            private
            and self.settings.flush_enabled
            and estimate > self.flush_threshold_tokens
            and session.metadata.get("flushed_at") != session.last_consolidated
        )
        if estimate > self.budget_tokens or wants_flush:
            self.consolidating.add(session.key)
            self.track(self._background(session, private), f"memory:{session.key}")

    @staticmethod
    def _last_user_tokens(session: Session) -> int:
        floor = max(session.last_consolidated, len(session.messages) - 50)
        for i in range(len(session.messages) - 1, floor - 1, -1):
            if session.messages[i].get("role") == "user":
                return session.tokens_of(i)
        return 0

    async def _background(self, session: Session, private: bool) -> None:
        def next_prompt() -> int:
            return self.estimator(session, private) + self._last_user_tokens(session)

        try:
            async with self.lock_for(session):
                if session.archived:  # /new got here first and owns these messages now
                    return
                await self.maybe_flush(session, private)
                if next_prompt() > self.budget_tokens:
                    await self._consolidate_locked(session, private, next_prompt)
        finally:
            self.consolidating.discard(session.key)

    async def maybe_flush(self, session: Session, private: bool) -> None:
        """At most one flush per compaction cycle (the cycle is the consolidation pointer's value)."""
        if not private or _origin(session) != "" or not self.settings.flush_enabled:
            # a group's or a guest's talk is no note of the owner's day, shared memory or not: the
            # daily note carries no origin, and a member's claim came back as the owner's own fact
            return
        if session.metadata.get("flushed_at") == session.last_consolidated:
            return
        if self.estimator(session, private) + self._last_user_tokens(session) <= self.flush_threshold_tokens:
            return
        tail = owners_part(session.messages[session.last_consolidated :])
        if await self.flusher.flush(tail, private=private):
            self.sessions.set_metadata(session, flushed_at=session.last_consolidated)

    async def _consolidate_locked(
        self, session: Session, private: bool, estimate: Callable[[], int]
    ) -> None:
        for _round in range(self.settings.max_rounds):
            current = estimate()
            history = sum(session.tokens_of(i) for i in history_indices(session))
            fixed = max(0, current - history)  # system prompt, tools, the new message
            # "about half the budget", or half of what the history may use when the fixed part is large
            target = max(self.budget_tokens // 2, fixed + (self.budget_tokens - fixed) // 2)
            if current <= self.budget_tokens and _round > 0:
                break
            if fixed >= self.budget_tokens and history < self.budget_tokens * MIN_HOPELESS_HISTORY_SHARE:
                break  # the rest alone is over: consolidating this little history would only repeat
            start = session.last_consolidated
            if start >= len(session.messages):
                break
            excess = current - target
            removed, end = 0, start
            while end < len(session.messages) and removed < excess:
                removed += session.tokens_of(end)
                end += 1
            end = boundary_after(session.messages, start, end)
            if not await self._consolidate_range(session, start, end, private):
                break
        left = estimate()
        if left > self.budget_tokens and self._over_warned.get(session.key) != left // OVER_WARN_STEP_TOKENS:
            self._over_warned[session.key] = left // OVER_WARN_STEP_TOKENS  # said once per size
            history = sum(session.tokens_of(i) for i in history_indices(session))
            logger.warning(
                "session {}: prompt still ~{} tokens after consolidation (budget {}); the system prompt, "
                "tools and the new message alone take ~{}",
                session.key,
                left,
                self.budget_tokens,
                left - history,
            )

    async def _consolidate_range(self, session: Session, start: int, end: int, private: bool) -> bool:
        origin = _origin(session)
        if origin is None:  # a guest: out of the prompt, into no memory file
            self.sessions.set_metadata(session, last_consolidated=end, consolidation_failures=0)
            return True
        chunk = owners_part(session.messages[start:end])
        try:
            return await self._consolidate_chunk(session, chunk, start, end, private, origin)
        except OSError as exc:
            if not cannot_write(exc):
                raise
            # memory/ (or the session file) cannot be written (a full disk, a read-only mount): not
            # the model's failure, and not the turn's — the chunk stays unconsolidated (the caller
            # trims the prompt instead) and is tried again once there is room; the user's message
            # is saved all the same
            reason = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror or str(exc)
            logger.error("session {}: consolidation cannot write to disk ({}); it waits", session.key, reason)
            self.consolidator.last_failure = f"cannot write to disk: {reason}"
            return False

    async def _consolidate_chunk(
        self, session: Session, chunk: list[dict[str, Any]], start: int, end: int, private: bool, origin: str
    ) -> bool:
        if await self.consolidator.consolidate(chunk, private=private, origin=origin):
            self.sessions.set_metadata(session, last_consolidated=end, consolidation_failures=0)
            logger.info("session {}: consolidated messages {}..{}", session.key, start, end - 1)
            return True
        failures = int(session.metadata.get("consolidation_failures", 0)) + 1
        if failures >= self.settings.max_failures:
            self.consolidator.raw_archive(chunk, f"consolidation failed {failures} times", origin=origin)
            self.sessions.set_metadata(session, last_consolidated=end, consolidation_failures=0)
            logger.warning(
                "session {}: raw-archived messages {}..{} after {} failures",
                session.key,
                start,
                end - 1,
                failures,
            )
            return True
        self.sessions.set_metadata(session, consolidation_failures=failures)
        return False

    # ------------------------------------------------------------------ /new
    async def start_new_session(self, session: Session) -> None:
        """Archive the transcript now (after any running consolidation), process it in the background."""
        async with self.lock_for(session):
            archived = self.sessions.archive(session, self.memory.now(), pending=True)
            forgets = self.memory.forget_count  # what is forgotten from now on stays out of its note
        if archived is None:
            return
        self.track(self._process_archive(archived, session.key, forgets), f"archive:{session.key}")

    def archive_at_shutdown(self, session: Session) -> bool:
        """Archive the transcript now, without waiting: for a `/new` a shutdown cancelled. Its
        processing is left to the next start (`recover_pending`). False, and nothing done, while a
        consolidation of the session runs (it would write into the fresh session)."""
        if self.session_locked(session.key):
            return False
        self.sessions.archive(session, self.memory.now(), pending=True)
        return True

    async def _process_archive(self, archived: Path, session_key: str, forgets: int = 0) -> None:
        """`forgets`: the store's forget_count when it was archived (0, one archived before this
        process started: every forget made in it came later)."""
        with self.sessions.claim_archive(archived) as mine:
            if mine:
                await self._consolidate_archive(archived, session_key, forgets)
            else:
                logger.info("archive {} is processed by another process (or was already)", archived.name)

    async def _consolidate_archive(self, archived: Path, session_key: str, forgets: int) -> None:
        old = self.sessions.load_archived(archived)
        private = memory_private(
            bool(old.metadata.get("is_group", False)), self.settings.share_in_groups, bool(old.metadata.get("guest"))
        )
        origin = _origin(old, session_key)
        start = old.last_consolidated
        rest = owners_part(old.messages[start:])
        if rest and origin is not None:
            ok = await self.consolidator.consolidate(rest, private=private, origin=origin)
            if not ok and not self._archive_failed(archived, session_key, rest, origin):
                return
        if len(old.messages) > start:
            self.sessions.set_metadata(old, last_consolidated=len(old.messages))
        if not old.metadata.get("note_written") and origin is not None:
            await write_session_note(
                self.consolidator.provider,
                self.memory,
                old.messages,  # the note reads its end, a guest's turns left out (render_tail)
                session_key,
                small_model=self.consolidator.small_model,
                origin=origin,
                forgotten_since=forgets,
            )
            self.sessions.set_metadata(old, note_written=True)
        self.sessions.release(old)
        self.sessions.clear_pending(archived)
        logger.info("archived session {} processed", session_key)

    def _archive_failed(self, archived: Path, session_key: str, rest: list[dict[str, Any]], origin: str) -> bool:
        """Count a failed attempt. True when that was the last one: the rest is raw-archived, go on."""
        record = self.sessions.record_archive_failure(
            archived, self.memory.now(), self.consolidator.last_failure or "unknown"
        )
        limit = self.settings.max_archive_retries
        if record.attempts < limit:
            logger.warning(
                "archive of {} not consolidated (attempt {}/{}: {}); a later start-up retries {}",
                session_key, record.attempts, limit, record.last_error, archived.name,
            )
            return False
        self.consolidator.raw_archive(
            rest, f"consolidation of the archived session failed {limit} times", origin=origin
        )
        self.sessions.give_up_archive(archived)
        logger.error(
            "archive of {} not consolidated after {} attempts ({}); raw-archived into HISTORY.md",
            session_key, limit, record.last_error,
        )
        return True

    def recover_pending(self) -> int:
        """At start-up: retry the archives whose processing did not finish and whose backoff is over.

        Returns how many retries were started."""
        started = 0
        for archived, record in self.sessions.pending_archives():
            due = record.next_attempt(self.settings.archive_retry_backoff_s)
            if due is not None and due > self.memory.now():
                logger.info("archive {}: retry backs off until {:%Y-%m-%d %H:%M}", archived.name, due)
                continue
            self.track(self._process_archive(archived, record.key), f"archive-retry:{record.key}")
            started += 1
        return started


def _origin(session: Session, key: str | None = None) -> str | None:
    """memory_origin of a (live or archived) session, from its recorded metadata."""
    meta = session.metadata
    return memory_origin(key or session.key, bool(meta.get("is_group", False)), bool(meta.get("guest")))
