"""The gateway: channels, agent loop, cron, heartbeat and watchdog until SIGINT/SIGTERM.

Shutdown order: stop taking input, let in-flight turns finish within `gateway.shutdownGraceS`
(then cancel them safely), deliver their replies, stop channels, drain background memory work
within `gateway.drainTimeoutS` (unfinished work stays recoverable from the kept transcripts), flush
sessions, release the workspace lock, exit 0. A second signal forces an immediate exit.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from loguru import logger

from nanobot.agent.factory import build_agent
from nanobot.agent.loop import AgentLoop
from nanobot.bus.events import OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.config.schema import Config
from nanobot.scheduler.heartbeat import HeartbeatService, resolve_heartbeat_target
from nanobot.service.state import GatewayAlreadyRunning, GatewayLock, GatewayState, run_watchdog
from nanobot.service.systemd import sd_notify

EXIT_FORCED = 1
OUTBOUND_FLUSH_TIMEOUT_S = 2.0
FSYNC_INTERVAL_S = 1.0
_INTERNAL_CHANNELS = ("cli", "cron", "heartbeat", "system")
HEARTBEAT_SESSION = "heartbeat:main"


def last_private_chat(workspace: Path) -> tuple[str, str] | None:
    """The most recently active private chat on a real channel (sessions of allowed users only)."""
    sessions = workspace / "sessions"
    if not sessions.exists():
        return None
    for path in sorted(sessions.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True):
        channel, _, chat_id = path.stem.partition("_")
        if channel in _INTERNAL_CHANNELS or not chat_id:
            continue
        if _is_group_session(path):
            continue
        return channel, chat_id
    return None


def _is_group_session(path: Path) -> bool:
    """Sessions record `is_group` in their first metadata line; unknown counts as a group (safe)."""
    try:
        with open(path, encoding="utf-8") as fh:
            for _, line in zip(range(5), fh, strict=False):
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict) and obj.get("_type") == "metadata" and "is_group" in obj:
                    return bool(obj["is_group"])
    except OSError:
        pass
    return True


class Gateway:
    def __init__(self, config: Config, config_path: str = "config.json") -> None:
        self.config = config
        self.workspace = config.workspace_path
        self.bus = MessageBus()
        self.agent = build_agent(config, self.bus, config_path=config_path)
        self.loop = AgentLoop(self.bus, self.agent, config.agents.defaults.max_concurrent_turns)
        from nanobot.channels.manager import ChannelManager

        self.channels = ChannelManager(config, self.bus, self.workspace)
        self.cron = self.agent.cron
        hb = config.gateway.heartbeat
        self.heartbeat = (
            HeartbeatService(
                self.workspace,
                hb.interval_s,
                self._heartbeat_tasks,
                lambda: resolve_heartbeat_target(hb.target, lambda: last_private_chat(self.workspace)),
                self._deliver,
            )
            if hb.enabled
            else None
        )
        self.state = GatewayState(self.workspace)
        self._stop = asyncio.Event()
        self._signals = 0

    async def _deliver(self, channel: str, chat_id: str, text: str) -> None:
        await self.bus.publish_outbound(OutboundMessage(channel=channel, chat_id=chat_id, content=text))

    async def _heartbeat_tasks(self, tasks: str) -> str | None:
        prompt = (
            "[Heartbeat] These are your standing tasks from HEARTBEAT.md. Do what is due now. "
            "If nothing needs the user's attention, reply exactly HEARTBEAT_OK.\n\n" + tasks
        )
        return await self.agent.process_direct(
            prompt, session_key=HEARTBEAT_SESSION, channel="heartbeat", chat_id="main"
        )

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        if self._signals > 1:
            logger.warning("second signal: forcing exit")
            os._exit(EXIT_FORCED)
        logger.info("signal {} received: shutting down", signal.Signals(signum).name)
        self._stop.set()

    def _refresh_state(self, state: GatewayState) -> None:
        for name, info in self.channels.status().items():
            state.set_channel(name, str(info.get("state")), info.get("error"))
        state.set_pending_tasks(self.agent.lifecycle.pending() + len(self.loop.in_flight()))

    async def _fsync_loop(self) -> None:
        while True:
            await asyncio.sleep(FSYNC_INTERVAL_S)
            self.agent.sessions.fsync_dirty()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, sig)
        self.agent.lifecycle.recover_pending()
        self.loop.start()
        await self.channels.start_all()
        await self.cron.start()
        if self.heartbeat is not None:
            await self.heartbeat.start()
        self._refresh_state(self.state)
        watchdog = asyncio.create_task(
            run_watchdog(self.state, self.config.gateway.watchdog_interval_s, self._refresh_state)
        )
        fsyncer = asyncio.create_task(self._fsync_loop())
        sd_notify("READY=1")
        logger.info(
            "gateway running: workspace {}, channels {}", self.workspace, list(self.channels.channels)
        )
        await self._stop.wait()
        sd_notify("STOPPING=1")
        await self._shutdown(watchdog, fsyncer)
        return 0

    async def _shutdown(self, *background: asyncio.Task[None]) -> None:
        g = self.config.gateway
        await self.loop.stop_accepting()
        await self.cron.stop()
        if self.heartbeat is not None:
            await self.heartbeat.stop()
        await self.loop.finish(g.shutdown_grace_s)
        await self._wait_outbound_empty(OUTBOUND_FLUSH_TIMEOUT_S)
        await self.channels.stop_all()
        await self.agent.aclose(drain_timeout_s=g.drain_timeout_s)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        self.state.clear()
        logger.info("gateway stopped")

    async def _wait_outbound_empty(self, timeout_s: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not self.bus.outbound.empty() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)


async def run_gateway(config: Config, config_path: str = "config.json") -> int:
    """Run until a signal; returns the exit code. Raises GatewayAlreadyRunning for a second gateway."""
    lock = GatewayLock(config.workspace_path)
    lock.acquire()
    try:
        gateway = Gateway(config, config_path)
        return await gateway.run()
    finally:
        lock.release()


__all__ = ["Gateway", "GatewayAlreadyRunning", "last_private_chat", "run_gateway"]
