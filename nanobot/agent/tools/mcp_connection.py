"""One MCP server's connection: a long-lived owner task per server holds the transport and the
ClientSession (anyio requires a context manager to be exited by the task that entered it); tool
calls reach it as jobs answered through futures, so any task may call, a hung call times out on its
own, and shutdown is clean. How its tools are named and shown: mcp_naming.py.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal

from loguru import logger

from nanobot.agent.tools.mcp_naming import enabled_in_listing, listing_names, render_result, schema_fits
from nanobot.agent.tools.mcp_transport import (
    HttpErrorStatus,
    StderrTail,
    describe_error,
    detect_type,
    is_connection_lost,
    open_transport,
)
from nanobot.config.schema import MCPServerConfig
from nanobot.util.extras import install_hint
from nanobot.util.retry import backoff_s

# The stdio transport's own stop of a server: 0.5 s to flush, 2 s to exit once its stdin closes,
# 2 s after SIGTERM, 2 s to reap after SIGKILL. Cancelled before it ends (waits of 5 s did), a
# server ignoring SIGTERM was never killed: one more process left running at each retry.
STDIO_STOP_S = 6.5
SHUTDOWN_TIMEOUT_S = STDIO_STOP_S + 1.5  # per server
CALL_GRACE_S = 5.0  # beyond tool_timeout before the caller stops waiting on a wedged transport
PING_TIMEOUT_S = 5.0  # after a call timed out: a session that does not answer a ping is restarted
_PING = "\0ping"  # a job that pings the server instead of calling a tool (no tool has this name)
RETRY_BASE_S = 5.0  # first backoff after a failed start; doubles up to RETRY_MAX_S
RETRY_MAX_S = 300.0
MAX_LIST_PAGES = 50
MAX_TOOLS_PER_SERVER = 128

State = Literal["idle", "connecting", "ready", "failed"]


class Restarted(Exception):  # noqa: N818 - what happened, not an error kind
    """The session was ended under a call because it answered nothing (the call may have run)."""


class ConnectionLost(Exception):
    """The session died under a call (process exit, closed stream, expired HTTP session)."""


def _new_future() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


@dataclass(eq=False)  # one job is one call: kept in sets by identity
class _Job:
    tool: str
    args: dict[str, Any]
    timeout_s: float
    future: asyncio.Future[Any]
    scope: Any = None  # the anyio CancelScope running it, so an abandoning caller can cancel it

    def abandon(self) -> None:
        if self.scope is not None:
            self.scope.cancel()
        if not self.future.done():
            self.future.cancel()


@dataclass
class _Generation:
    """One connection attempt and its session's life; a reconnect starts a new generation."""

    jobs: asyncio.Queue[_Job] = field(default_factory=asyncio.Queue)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Future[list[Any]] = field(default_factory=_new_future)
    task: asyncio.Task[None] | None = None
    stderr: StderrTail | None = None
    http_status: HttpErrorStatus = field(default_factory=HttpErrorStatus)
    live: bool = False
    running: set[_Job] = field(default_factory=set)  # calls sent and not answered yet

    def __post_init__(self) -> None:
        # Mark a start failure as retrieved even when nobody awaits it any more (a retired attempt).
        self.ready.add_done_callback(lambda f: None if f.cancelled() else f.exception())


class MCPServerConnection:
    """State and session owner for one configured server."""

    def __init__(
        self, name: str, cfg: MCPServerConfig, retry_base_s: float = RETRY_BASE_S, servers: Collection[str] = ()
    ) -> None:
        self.name = name
        self.servers = tuple(servers)  # every configured server's name: they decide the wrapped names
        self.unmatched_patterns: list[str] = []  # enabledTools entries none of its tools matched
        self.retry_base_s = retry_base_s
        self.cfg = cfg
        self.kind = detect_type(cfg)
        self.state: State = "idle"
        self.error = ""
        self.remote_tools: list[Any] = []  # mcp Tool objects that pass enabledTools
        self.tool_names: list[str] = []  # their wrapped names, given by the whole listing
        self.listing_changes = 0  # times a reconnect brought another list of tools
        self._gen: _Generation | None = None
        self._lock = asyncio.Lock()
        self._failures = 0
        self._reported = ""  # the start failure already logged as a warning
        self._retry_at = 0.0
        self._closed = False

    @property
    def live(self) -> bool:
        return self._gen is not None and self._gen.live and not self._gen.stop.is_set()

    async def ensure_ready(self, retry_now: bool = False) -> bool:
        """Connect unless connected; a failed server is retried only after its backoff (or when asked)."""
        if self.live:
            return True
        async with self._lock:
            if self.live:
                return True
            backing_off = self.state == "failed" and time.monotonic() < self._retry_at
            if self._closed or (backing_off and not retry_now):
                return False
            gen = self._gen
            if gen is None or gen.task is None or gen.task.done() or gen.stop.is_set():
                await self._retire(gen)
                gen = self._start()
            # else: an attempt whose first waiter was cancelled is still under way; wait for it.
            return await self._await_ready(gen)

    def _start(self) -> _Generation:
        self.state = "connecting"
        gen = self._gen = _Generation()
        gen.stderr = StderrTail(self.name) if self.kind == "stdio" else None
        gen.task = asyncio.create_task(self._own(gen, gen.stderr), name=f"mcp-server:{self.name}")
        return gen

    async def _await_ready(self, gen: _Generation) -> bool:
        try:
            # past connectTimeoutS the transport stops the server: time for that to finish
            listing = await asyncio.wait_for(asyncio.shield(gen.ready), self.cfg.connect_timeout_s + SHUTDOWN_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - any start failure is reported, never raised
            await self._retire(gen)
            # a server that did not answer in time was stopped by nanobot: its exit is not news
            tail = await gen.stderr.tail(stopped_by_us=isinstance(exc, TimeoutError)) if gen.stderr else ""
            if isinstance(exc, TimeoutError) and not str(exc):
                exc = TimeoutError(f"no answer within {self.cfg.connect_timeout_s:g}s (connectTimeoutS)")
            said = f" (stderr: {tail})" if tail else ""
            if gen.http_status.last:
                said += f" ({gen.http_status.last})"
            self._mark_failed(describe_error(exc) + said)
            return False
        patterns = self.cfg.enabled_tools
        remote = [t.name for t in listing]
        # by position: a server listing one tool twice gave both the second's (hashed) name
        named = zip(listing, listing_names(self.name, remote, self.servers), strict=True)
        on = enabled_in_listing(self.name, remote, patterns, self.servers)
        enabled = [(t, name) for (t, name), is_on in zip(named, on, strict=True) if is_on]
        unmatched = [p for p in patterns if not any(enabled_in_listing(self.name, remote, [p], self.servers))]
        if unmatched and unmatched != self.unmatched_patterns:  # a typo turns a tool off without a word
            logger.warning("MCP server {}: enabledTools {} match none of its tools", self.name, unmatched)
        self.unmatched_patterns = unmatched
        kept = [(t, name) for t, name in enabled if schema_fits(self.name, t)][:MAX_TOOLS_PER_SERVER]
        tools = [t for t, _ in kept]
        if [t.name for t in tools] != [t.name for t in self.remote_tools] and self.remote_tools:
            self.listing_changes += 1  # a server upgraded while running: the agent registers again
        self.remote_tools = tools
        self.tool_names = [name for _, name in kept]
        if len(enabled) > MAX_TOOLS_PER_SERVER:
            logger.warning(
                "MCP server {}: {} tools, only the first {} are used (narrow it with enabledTools)",
                self.name, len(enabled), MAX_TOOLS_PER_SERVER,
            )
        if self._failures:
            logger.info("MCP server {} is back ({} tools)", self.name, len(self.remote_tools))
        self.state, self.error, self._failures, self._reported = "ready", "", 0, ""
        return True

    def _mark_failed(self, error: str) -> None:
        self._failures += 1
        backoff = backoff_s(self._failures - 1, self.retry_base_s, RETRY_MAX_S)
        self._retry_at = time.monotonic() + backoff
        if error != self._reported:
            # Reported once per distinct problem; later retries of the same failure stay quiet.
            logger.warning("MCP server {} could not start: {} (retry in {:g}s)", self.name, error, backoff)
            self._reported = error
        else:
            logger.debug("MCP server {} still failing: {}", self.name, error)
        self.state, self.error = "failed", error

    async def _own(self, gen: _Generation, stderr: StderrTail | None) -> None:
        """The task that enters, serves and exits this generation's transport and session."""
        from contextlib import AsyncExitStack

        try:
            import anyio
            from mcp import ClientSession, Implementation
        except ImportError as exc:
            gen.ready.set_exception(ImportError(f"{exc}: install it {install_hint('mcp')}"))
            return
        try:
            with anyio.CancelScope() as scope:
                # A deadline on an outer scope (not fail_after around each enter): the transport's
                # task group opened inside must not outlive a scope that is exited early.
                scope.deadline = anyio.current_time() + self.cfg.connect_timeout_s
                async with AsyncExitStack() as stack:
                    read, write = await open_transport(stack, self.kind, self.cfg, stderr, gen.http_status)
                    info = Implementation(name="nanobot", version="1")
                    session = await stack.enter_async_context(ClientSession(read, write, client_info=info))
                    await session.initialize()
                    listing = await _list_all_tools(session)
                    scope.deadline = math.inf
                    gen.live = True
                    gen.ready.set_result(listing)
                    await self._serve(gen, session)
            if not gen.ready.done():
                raise TimeoutError(f"no answer within {self.cfg.connect_timeout_s:g}s (connectTimeoutS)")
        except Exception as exc:  # noqa: BLE001 - reported through the ready future or the state
            if not gen.ready.done():
                gen.ready.set_exception(exc)
            else:
                logger.debug("MCP server {} session ended: {}", self.name, describe_error(exc))
        finally:
            if not gen.ready.done():
                gen.ready.set_exception(ConnectionLost("connection task stopped"))
            gen.live = False
            while not gen.jobs.empty():
                _settle(gen.jobs.get_nowait().future, exc=ConnectionLost("connection closed"))
            if self._gen is gen and self.state == "ready":
                # The next call reconnects at once: losing a session is not a failed start.
                self.state = "idle"
            if stderr is not None:
                stderr.close_writer()

    async def _serve(self, gen: _Generation, session: Any) -> None:
        import anyio

        async with anyio.create_task_group() as tg:

            async def stop_watch() -> None:
                await gen.stop.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(stop_watch)
            while True:
                job = await gen.jobs.get()
                tg.start_soon(self._run_job, gen, session, job)

    async def _run_job(self, gen: _Generation, session: Any, job: _Job) -> None:
        import anyio
        from mcp import MCPError
        from mcp_types import REQUEST_TIMEOUT

        if job.future.done():
            return
        started = time.monotonic()
        gen.running.add(job)
        try:
            with anyio.CancelScope() as job.scope:
                if job.tool == _PING:
                    result = await session.send_ping()
                else:
                    result = await session.call_tool(job.tool, job.args, read_timeout_seconds=job.timeout_s)
                _settle(job.future, result=result)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
            waited_s = time.monotonic() - started
            # the client's own timeout; a server may answer with that code at once ("timed out after
            # 30s" after one second, for the server's own error)
            if isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT and waited_s >= job.timeout_s * 0.9:
                _settle(job.future, exc=TimeoutError())
            elif is_connection_lost(exc):
                gen.stop.set()  # this session is dead: end it so the caller's retry starts a fresh one
                _settle(job.future, exc=ConnectionLost(describe_error(exc)))
            else:
                _settle(job.future, exc=exc)
        finally:
            gen.running.discard(job)
            _settle(job.future, exc=ConnectionLost("connection closed during the call"))

    async def call(self, tool: str, args: dict[str, Any]) -> str:
        """Call a remote tool; always returns text. A lost connection gets one reconnect and retry."""
        timeout_s = self.cfg.tool_timeout
        for attempt in range(2):
            if not await self.ensure_ready(retry_now=attempt > 0):
                return f"Error: MCP server '{self.name}' is not available: {self.error or 'closed'}"
            gen = self._gen
            assert gen is not None
            job = _Job(tool, args, timeout_s, asyncio.get_running_loop().create_future())
            gen.jobs.put_nowait(job)
            if gen.task is None or gen.task.done():  # ended since ensure_ready: its drain already ran
                _settle(job.future, exc=ConnectionLost("connection closed"))
            try:
                result = await asyncio.wait_for(asyncio.shield(job.future), timeout_s + CALL_GRACE_S)
            except Restarted:
                return (
                    f"Error: MCP server '{self.name}' stopped answering and was restarted during the call "
                    f"to '{tool}'; it may or may not have run"
                )
            except ConnectionLost as exc:
                gen.stop.set()  # whatever ended the call, this session is done; the retry starts a new one
                if attempt == 0:
                    logger.info("MCP server {}: connection lost ({}); reconnecting", self.name, exc)
                    continue
                return f"Error: MCP server '{self.name}' connection lost: {exc}"
            except TimeoutError:
                job.abandon()
                await self._restart_unless_answering(gen)
                return f"Error: MCP tool '{tool}' on server '{self.name}' timed out after {timeout_s:g}s"
            except asyncio.CancelledError:
                job.abandon()
                raise
            except Exception as exc:  # noqa: BLE001 - protocol errors (unknown tool, bad params) are results
                return f"Error: MCP tool '{tool}' on server '{self.name}' failed: {describe_error(exc)}"
            return render_result(result)
        return f"Error: MCP server '{self.name}' is not available"

    async def _restart_unless_answering(self, gen: _Generation) -> None:
        """After a call timed out: a session that answers no ping either is wedged (a stdio
        server's 100 MB result line held the client's reader for minutes, and every later call
        waited out toolTimeout, never reconnecting): it is ended, so the next call starts afresh. A
        slow tool on a server that still answers keeps its session (and the server its state)."""
        ping = _Job(_PING, {}, PING_TIMEOUT_S, asyncio.get_running_loop().create_future())
        gen.jobs.put_nowait(ping)
        try:
            await asyncio.wait_for(asyncio.shield(ping.future), PING_TIMEOUT_S)
        except TimeoutError:
            ping.abandon()
            logger.warning("MCP server {}: a call timed out and a ping got no answer; it is restarted", self.name)
            for job in list(gen.running):  # never sent again on the new session: it may have run
                _settle(job.future, exc=Restarted())
            gen.stop.set()
        except Exception:  # noqa: BLE001, S110 - a lost connection reconnects at the next call anyway
            pass

    async def _retire(self, gen: _Generation | None) -> None:
        """Stop a generation's owner task and wait for it (bounded)."""
        if gen is None or gen.task is None:
            return
        gen.stop.set()
        if gen.live:
            await asyncio.wait({gen.task}, timeout=SHUTDOWN_TIMEOUT_S)
        if not gen.task.done():
            gen.task.cancel()  # still connecting, or wedged: cancellation unwinds the transport (shielded)
            await asyncio.wait({gen.task}, timeout=SHUTDOWN_TIMEOUT_S)

    async def aclose(self) -> None:
        self._closed = True
        await self._retire(self._gen)
        if self.state == "ready":
            self.state = "idle"


def _settle(future: asyncio.Future[Any], result: Any = None, exc: BaseException | None = None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


async def _list_all_tools(session: Any) -> list[Any]:
    from mcp_types import PaginatedRequestParams

    listing = await session.list_tools()
    tools = list(listing.tools)
    for _ in range(MAX_LIST_PAGES):
        if not listing.next_cursor:
            break
        listing = await session.list_tools(params=PaginatedRequestParams(cursor=listing.next_cursor))
        tools.extend(listing.tools)
    return tools
