"""Real `nanobot gateway` subprocesses on the local fakes for what an owner meets in service:
`nanobot health` when every channel failed.

The gateways start together at the beginning of the module (their start-up dominates the run time).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import FakeTelegramServer
from tests.gateway_harness import TG_TOKEN, GatewayProcess, gateway_config, run_cli


@dataclass
class Site:
    gw: GatewayProcess
    tg: FakeTelegramServer


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        server.responder = lambda body: Reply(content="ok")
        yield server


@pytest.fixture(scope="module")
def sites(llm: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Site]]:
    made: dict[str, Site] = {}
    servers: list[FakeTelegramServer] = []
    try:
        for name in ("dead",):
            home: Path = tmp_path_factory.mktemp(f"gateway-{name}")
            tg = FakeTelegramServer().start()
            servers.append(tg)
            if name == "dead":
                tg.rejected_tokens.add(TG_TOKEN)
            config = gateway_config(llm.url, tg, None, dc_allowed="")
            (home / "config.json").write_text(json.dumps(config), encoding="utf-8")
            made[name] = Site(GatewayProcess(home).start(), tg)
        yield made
    finally:
        for site in made.values():
            site.gw.kill()
        for server in servers:
            server.stop()


def test_health_fails_when_every_channel_failed(sites: dict[str, Site]) -> None:
    dead = sites["dead"]
    dead.gw.wait_channels({"telegram": "failed"})
    health = run_cli(dead.gw.home, "health")
    assert health.returncode == 1, health.stderr
    assert "every enabled channel failed (telegram)" in health.stderr
    assert dead.gw.returncode() is None  # the gateway itself lives on (cron, a fixed token later)
    assert dead.gw.stop() == 0
