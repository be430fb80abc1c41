"""The gateway: channels, agent loop, cron, heartbeat and watchdog until SIGINT/SIGTERM.

Shutdown order: stop taking input, let in-flight turns finish within `gateway.shutdownGraceS`
(then cancel them safely: a message not yet saved stays unconfirmed, so the platform serves it
again after the restart), deliver their replies, stop channels, drain background memory work
within `gateway.drainTimeoutS` (unfinished work stays recoverable from the kept transcripts; an
interrupted consolidation leaves its pointer where it was), flush sessions, release the workspace
lock, exit 0. Every phase takes only what is left of one shutdown deadline. A second signal forces
an immediate exit, and so does a shutdown that overruns grace + drain + `SHUTDOWN_MARGIN_S`: every
message is already handed to the OS when it is persisted, so a forced exit loses nothing
acknowledged.

Signals are caught with plain `signal.signal` handlers (not `loop.add_signal_handler`), and the
hard deadline is armed in the handler itself, so it runs even while the event loop is blocked.
`serve()` runs the event loop without the wait `asyncio.run` makes for worker threads at the end
(an embedding batch or a model load may take longer than the whole stop budget).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from loguru import logger

from nanobot.agent.factory import build_runtime
from nanobot.bus.events import OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.config.schema import Config
from nanobot.errors import UserError
from nanobot.gateway.heartbeat_turns import HeartbeatTurns
from nanobot.logs import prompts_logged
from nanobot.providers.base import LLMProvider
from nanobot.scheduler.heartbeat import HeartbeatService
from nanobot.secrets import mask_then_cut
from nanobot.service.state import (
    GatewayAlreadyRunning,
    GatewayLock,
    GatewayState,
    run_watchdog,
)
from nanobot.service.systemd import beat_interval_s, sd_notify

EXIT_FORCED = 1
OUTBOUND_FLUSH_TIMEOUT_S = 2.0
# The hard stop after the first signal: grace + drain + this margin (10 s with the defaults).
SHUTDOWN_MARGIN_S = 2.0
CHANNELS_SETTLE_S = 60.0  # READY=1 waits this long at most for the channels to connect or fail
#: the least a later shutdown phase gets even when the earlier ones used up their share
MIN_PHASE_S = 0.5
# SIGHUP (a closed terminal, an operator's `kill -HUP` for a reload) stops gracefully too, ending
# with 128 + 1 as a shell reports it: systemd's Restart=on-failure then starts the gateway again,
# which reads the config anew. Unhandled, it killed the gateway mid-turn and systemd took that for
# a clean exit.
_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_HANGUP = 128 + signal.SIGHUP


def _on_a_terminal() -> bool:
    """SIGHUP there is the terminal closing (stop), not a reload request."""
    return any(os.isatty(fd) for fd in (0, 1, 2))


def handled_signals() -> tuple[signal.Signals, ...]:
    """The signals that stop the gateway; SIGHUP not when ignored already (`nohup nanobot gateway`
    must outlive its terminal, as it asked to)."""
    ignored = signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    return tuple(s for s in _HANDLED_SIGNALS if not (s == signal.SIGHUP and ignored))


class Gateway:
    def __init__(
        self,
        config: Config,
        config_path: str = "config.json",
        *,
        provider: LLMProvider | None = None,
        force_exit: Callable[[int], object] = os._exit,
        config_digest: str | None = None,
    ) -> None:
        self.config = config
        self.workspace = config.workspace_path
        self.bus = MessageBus()
        self.runtime = build_runtime(
            config,
            self.bus,
            provider=provider,
            config_path=config_path,
            # read when a job runs: the channels are made below (and tests may swap the manager)
            listed=lambda channel, sender, username: self.channels.lists(channel, sender, username),
            admits_queued=lambda msg: self.channels.admits_queued(msg),
        )
        self.agent = self.runtime.agent
        self.loop = self.runtime.loop
        from nanobot.channels.manager import ChannelManager
        from nanobot.channels.pairing import PairingStore, pairing_path

        pairing = PairingStore(pairing_path(config_path))
        self.channels = ChannelManager(config, self.bus, self.workspace, pairing=pairing)
        self.channels.on_delivered = self._delivered
        self.cron = self.runtime.cron
        hb = config.gateway.heartbeat
        self.lock: GatewayLock | None = None  # given by run()
        self.heartbeat_turns = HeartbeatTurns(hb.target, self.agent, self.bus, lambda: self.channels)
        self.heartbeat = (
            HeartbeatService(
                self.workspace,
                hb.interval_s,
                self.heartbeat_turns.run,
                self.heartbeat_turns.target,
                self._deliver,
                last_beat=self.heartbeat_turns.last_beat,
            )
            if hb.enabled
            else None
        )
        self.state = GatewayState(self.workspace)
        self.state.loaded_config(Path(config_path), config_digest)  # the one read at start
        self.force_exit = force_exit  # injectable so tests can observe a forced exit
        self.ready = asyncio.Event()  # set once the agent loop takes messages
        self._stop = asyncio.Event()
        self._signals = 0
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._deadline_armed = threading.Event()
        self._deadline_off = threading.Event()
        self._stop_started = 0.0  # event-loop time of the stop request
        self._exit_code = 0  # what run() returns: EXIT_HANGUP after a SIGHUP
        self.config_path = Path(config_path)
        self._reload_checks: set[asyncio.Task[None]] = set()
        self._config_existed = self.config_path.exists()  # deleted since: a reload would lose it

    @property
    def shutdown_budget_s(self) -> float:
        g = self.config.gateway
        return g.shutdown_grace_s + g.drain_timeout_s + SHUTDOWN_MARGIN_S

    async def _deliver(self, channel: str, chat_id: str, text: str) -> None:
        await self.bus.publish_outbound(OutboundMessage(channel=channel, chat_id=chat_id, content=text))

    # ------------------------------------------------------------------ signals
    def _handle_signal(self, signum: int, _frame: FrameType | None) -> None:
        """Runs in the main thread between bytecodes, whatever the event loop is doing."""
        reload = signum == signal.SIGHUP and not self._stop.is_set() and not _on_a_terminal()
        if reload and self._event_loop is not None:
            # a reload: the config is checked first (a restart on a broken one exits 2, which
            # systemd does not retry: one typo and a `kill -HUP` took the bot offline for good)
            self._event_loop.call_soon_threadsafe(self._reload_if_valid)
            return
        self._signals += 1
        if self._signals > 1:
            # No logging here: the interrupted code may hold the logger's lock.
            os.write(2, b"nanobot: second signal, forcing exit\n")
            self.force_exit(EXIT_FORCED)
            return
        # Armed here, not in request_stop: a blocked event loop would run that only much later.
        self._deadline_armed.set()
        if self._event_loop is not None:
            self._event_loop.call_soon_threadsafe(self.request_stop, signum)

    def _reload_if_valid(self) -> None:
        task = asyncio.get_running_loop().create_task(self._check_then_reload())
        self._reload_checks.add(task)
        task.add_done_callback(self._reload_checks.discard)

    async def _check_then_reload(self) -> None:
        """SIGHUP: restart (exit 129, the service manager starts it again) with a config that loads;
        with one that does not, say why and keep running on the config it has."""
        from nanobot.config.loader import load_config
        from nanobot.config.paths import workspace_problem

        try:
            if self._config_existed and not self.config_path.exists():
                raise UserError(f"{self.config_path} is gone")
            config = await asyncio.to_thread(load_config, self.config_path)
            # what the start checks besides (a workspace that is a file: the restart exited 2)
            if problem := workspace_problem(config.workspace_path):
                raise UserError(f"agents.defaults.workspace: cannot use {config.workspace_path}: {problem}")
        except Exception as exc:  # noqa: BLE001 - any reason the restart would fail
            logger.error("SIGHUP: reload refused, the running config stays: {}", mask_then_cut(str(exc), 500))
            return
        self._deadline_armed.set()
        self.request_stop(signal.SIGHUP)

    def request_stop(self, signum: int | None = None) -> None:
        """Begin a graceful shutdown (what the first SIGINT/SIGTERM does); arms the hard deadline."""
        if self._stop.is_set():
            return
        name = signal.Signals(signum).name if signum else "stop request"
        logger.info("{} received: shutting down (budget {:.0f} s)", name, self.shutdown_budget_s)
        self._exit_code = EXIT_HANGUP if signum == signal.SIGHUP else 0
        self._deadline_armed.set()
        self._stop_started = asyncio.get_running_loop().time()
        self._stop.set()

    def _watch_deadline(self) -> None:
        """A daemon thread: once armed, force the exit when the shutdown overruns its budget."""
        self._deadline_armed.wait()
        if self._deadline_off.wait(self.shutdown_budget_s):
            return
        os.write(2, f"nanobot: shutdown overran {self.shutdown_budget_s:.0f} s, forcing exit\n".encode())
        self.force_exit(EXIT_FORCED)

    def _left_s(self, phase_s: float, reserve_s: float = 0.0) -> float:
        """What a shutdown phase may take: its own limit, cut to what is left of grace + drain
        (minus `reserve_s` kept for the phases after it), never under MIN_PHASE_S."""
        g = self.config.gateway
        end = self._stop_started + g.shutdown_grace_s + g.drain_timeout_s - reserve_s
        return max(MIN_PHASE_S, min(phase_s, end - asyncio.get_running_loop().time()))

    def _install_signals(self) -> dict[int, object]:
        previous: dict[int, object] = {}
        for sig in handled_signals():
            previous[sig] = signal.signal(sig, self._handle_signal)
        return previous

    @staticmethod
    def _restore_signals(previous: dict[int, object]) -> None:
        for sig, handler in previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, handler)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ running
    def _refresh_state(self, state: GatewayState) -> None:
        if self.lock is not None:
            try:
                self.lock.keep()
            except GatewayAlreadyRunning as exc:  # another gateway took the workspace meanwhile
                logger.error("{}; stopping this one", exc)
                self.request_stop(signal.SIGTERM)
            except (OSError, UserError) as exc:  # the path unusable now: the next beat tries again
                logger.warning("gateway lock: {}", exc)
        for name, info in self.channels.status().items():
            state.set_channel(name, str(info.get("state")), info.get("error"))
        state.set_pending_tasks(self.agent.lifecycle.pending() + len(self.loop.in_flight()))

    async def _warm_up(self) -> None:
        """Run the provider's warm-up (importing litellm takes seconds) in a thread: done inside a
        turn it would block the event loop, the channels and the stop request meanwhile."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def work() -> None:
            try:
                self.agent.provider.warm_up()
            except Exception as exc:  # noqa: BLE001 - the first turn reports it properly
                logger.warning("provider warm-up failed: {}", exc)
            with contextlib.suppress(RuntimeError):  # the loop may be closed after a fast stop
                loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))

        # A daemon thread, not to_thread: a stop during the import must not wait for it at exit.
        threading.Thread(target=work, name="provider-warm-up", daemon=True).start()
        stopping = asyncio.create_task(self._stop.wait())
        await asyncio.wait({done, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()

    async def run(self, early_signals: list[int] | None = None, lock: GatewayLock | None = None) -> int:
        self.lock = lock  # kept while running (see GatewayLock.keep)
        self._event_loop = asyncio.get_running_loop()
        threading.Thread(target=self._watch_deadline, name="shutdown-deadline", daemon=True).start()
        previous = self._install_signals()
        for signum in early_signals or []:  # in the loop already: act now, not on the next turn
            if signum == signal.SIGHUP and not _on_a_terminal():
                self._reload_if_valid()  # the config may have changed since it was read
                continue
            self._signals += 1
            if self._signals > 1:
                self.force_exit(EXIT_FORCED)
            self.request_stop(signum)
        try:
            return await self._run()
        finally:
            self._restore_signals(previous)
            self._deadline_off.set()
            self._deadline_armed.set()  # lets the watcher thread end

    async def _run(self) -> int:
        if self.agent.provider.is_small_local:  # users would get its answers: say so where it is seen
            from nanobot.providers.local import DEMO_NOTICE

            logger.warning("{}", DEMO_NOTICE.replace("this reply comes", "every reply comes"))
        await self._answer_missed()  # first in the bus: ahead of what the platforms deliver again
        await self.channels.start_all()  # they connect while the provider warms up
        await self.cron.start()
        if self.heartbeat is not None:
            if self.config.gateway.heartbeat.target:
                self.heartbeat_turns.target()  # a target on a channel that is off is said at start
            await self.heartbeat.start()
        self._refresh_state(self.state)
        beat_s = beat_interval_s(self.config.gateway.watchdog_interval_s)
        watchdog = asyncio.create_task(run_watchdog(self.state, beat_s, self._refresh_state))
        await self._warm_up()
        await self._channels_settled()
        if not self._stop.is_set():
            self.agent.lifecycle.recover_pending()
            self.loop.start()
            self.ready.set()
            self._refresh_state(self.state)  # `health` right after `systemctl start` reads this
            self.state.write()
            sd_notify("READY=1")  # after the channels connected (or failed: `health` says which)
            logger.info(
                "gateway running: workspace {}, channels {}", self.workspace, list(self.channels.channels)
            )
            if prompts_logged():  # a setting left on for months fills the log with every chat
                logger.warning(
                    "logging.prompts is on: every prompt, with the private conversations and memory in it, "
                    "is written to the log"
                )
            await self._stop.wait()
        sd_notify("STOPPING=1")
        await self._shutdown(watchdog)
        return self._exit_code

    async def _channels_settled(self) -> None:
        """Wait (at most CHANNELS_SETTLE_S, or until a stop) for every channel to leave "starting":
        READY=1 went out while Telegram was still connecting, so `systemctl start` reported a bot
        ready that could not hear anyone yet."""
        deadline = time.monotonic() + CHANNELS_SETTLE_S
        while not self._stop.is_set() and time.monotonic() < deadline:
            if all(info.get("state") != "starting" for info in self.channels.status().values()):
                return
            await asyncio.sleep(0.05)

    def _delivered(self, msg: OutboundMessage) -> None:
        from nanobot.gateway.missed import mark_delivered

        try:
            mark_delivered(self.agent.sessions, msg)
        except Exception as exc:  # noqa: BLE001 - a reply that went out must not be reported failed
            logger.warning("could not record the delivery of a reply: {}", exc)

    async def _answer_missed(self) -> int:
        """Queue the user messages a crash left unanswered (see nanobot/gateway/missed.py)."""
        from nanobot.gateway.missed import answer_missed
        from nanobot.gateway.stranded import note_stranded

        try:
            channels, within_s = list(self.channels.channels), self.config.gateway.answer_missed_within_s
            note_stranded(self.agent.sessions, channels, within_s, self.agent.records.keep_result)
            return await answer_missed(
                self.agent.sessions,
                self.bus,
                channels,
                within_s,
                admits=self.channels.admits,
                listed=self.channels.lists,
            )
        except Exception:  # a bad session file must not stop the gateway
            logger.exception("could not check for unanswered messages")
            return 0

    async def _shutdown(self, *background: asyncio.Task[None]) -> None:
        g = self.config.gateway
        if not self._stop_started:
            self._stop_started = asyncio.get_running_loop().time()
        await self.loop.stop_accepting()
        await self.cron.stop_timers()  # no new runs; those in flight finish with the turns below
        if self.heartbeat is not None:
            await self.heartbeat.stop()
        # Cron runs first, while the loop still runs their turns: a run that finishes within the
        # grace delivers and records its result (it must not run again after the restart). One
        # still going is cancelled unrecorded before the loop cancels its turn, which would hand
        # the run an empty reply that it would record as done.
        await self.cron.stop(
            self._left_s(g.shutdown_grace_s, reserve_s=g.drain_timeout_s),
            turns=self.loop.in_flight,
            unwind_s=MIN_PHASE_S,
        )
        await self.loop.finish(self._left_s(g.shutdown_grace_s, reserve_s=g.drain_timeout_s))
        await self._wait_outbound_empty(self._left_s(OUTBOUND_FLUSH_TIMEOUT_S))
        await self.channels.stop_all(drain_timeout_s=self._left_s(OUTBOUND_FLUSH_TIMEOUT_S))
        self.loop.keep_waiting()  # what arrived after the loop stopped reading: not lost
        await self.runtime.aclose(drain_timeout_s=self._left_s(g.drain_timeout_s))
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        self.state.clear()
        logger.info("gateway stopped")

    async def _wait_outbound_empty(self, timeout_s: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not self.bus.outbound.empty() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)


__all__ = ["Gateway", "GatewayAlreadyRunning", "handled_signals"]
