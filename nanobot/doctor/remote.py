"""Doctor checks that talk to a service, concurrently and each with a timeout: the LLM provider (one
tiny completion), each enabled channel's token (Telegram getMe, Discord /users/@me) with its allow-list
state, and each MCP server (connect and list tools). Details pass through the secret masker, since
some URLs carry a token."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from nanobot.config.schema import Config
from nanobot.doctor import Check
from nanobot.errors import ConfigError
from nanobot.secrets import mask, register_config_secrets


async def remote_checks(cfg: Config, config_path: Path, *, timeout_s: float) -> list[Check]:
    register_config_secrets(cfg)
    jobs = [check_provider(cfg, config_path, timeout_s)]
    if cfg.channels.telegram.enabled:
        jobs.append(check_telegram(cfg, timeout_s))
    if cfg.channels.discord.enabled:
        jobs.append(check_discord(cfg, timeout_s))
    if cfg.tools.mcp_servers:
        jobs.append(check_mcp(cfg, timeout_s))
    results = await asyncio.gather(*jobs)
    checks = [c for r in results for c in (r if isinstance(r, list) else [r])]
    if not (cfg.channels.telegram.enabled or cfg.channels.discord.enabled):
        checks.insert(1, Check("channels", "ok", "none enabled (the terminal only: nanobot agent)"))
    for c in checks:
        c.detail = mask(c.detail)
    return checks


async def check_provider(cfg: Config, config_path: Path, timeout_s: float) -> Check:
    from nanobot.providers.base import LLMError
    from nanobot.providers.registry import resolve_provider

    probe = cfg.model_copy(deep=True)
    probe.agents.defaults.llm_max_retries = 0  # one attempt: doctor reports, it does not insist
    probe.agents.defaults.llm_timeout_s = timeout_s
    try:
        provider = resolve_provider(probe, str(config_path))
    except ConfigError as exc:
        return Check("provider", "fail", str(exc))
    model = cfg.agents.defaults.model or provider.default_model
    if provider.is_small_local:
        return Check("provider", "warn", f"the embedded demo model ({model}): fine for trying nanobot, "
                     "not for real use (configure a provider: nanobot onboard)")
    await asyncio.to_thread(provider.warm_up)  # the client library's import is not the provider's time
    try:
        await asyncio.wait_for(
            provider.chat([{"role": "user", "content": "Reply with OK."}], max_tokens=1), timeout_s + 1
        )
    except LLMError as exc:
        return Check("provider", "fail", f"{provider.name} ({model}): {exc}")
    except TimeoutError:
        return Check("provider", "fail", f"{provider.name} ({model}): no answer within {timeout_s:g}s")
    finally:
        await provider.aclose()
    return Check("provider", "ok", f"{provider.name} answers ({model})")


def _allow_state(name: str, allow_from: list[str], dm_policy: str) -> tuple[str, str]:
    if dm_policy == "open" or "*" in allow_from:
        return "warn", "anyone who finds the bot may use it (allowFrom [\"*\"] or dmPolicy open)"
    if allow_from:
        return "ok", f"{len(allow_from)} allowed sender(s)"
    if dm_policy == "pairing":
        return "ok", "no sender approved yet: message the bot, then nanobot pairing approve CODE"
    return "warn", f"nobody may use it (channels.{name}.allowFrom is empty and dmPolicy is allowlist)"


@dataclass(frozen=True)
class _BotProbe:
    """How one chat platform confirms a bot token: the URL to GET, and what its answers mean."""

    channel: str
    token_source: str  # where a user gets the token
    api: str  # the API's name in messages
    url: str
    rejected: tuple[int, ...]  # statuses meaning "wrong token"
    rejected_hint: str
    bot_name: Callable[[Any], str | None]  # the bot's display name from the decoded answer
    no_bot: str  # what was asked, and what it failed to name, for the message
    headers: dict[str, str] | None = None
    proxy: str | None = None


async def _probe_bot(probe: _BotProbe, channel: Any, timeout_s: float) -> Check:
    name = probe.channel
    if not channel.token:
        return Check(name, "fail", f"enabled without a token (channels.{name}.token, {probe.token_source})")
    status, allow = _allow_state(name, channel.allow_from, getattr(channel, "dm_policy", "allowlist"))
    try:
        async with httpx.AsyncClient(timeout=timeout_s, proxy=probe.proxy or None) as client:
            resp = await client.get(probe.url, headers=probe.headers)
    except httpx.HTTPError as exc:
        return Check(name, "fail", f"{probe.api} unreachable: {type(exc).__name__}: {exc}")
    if resp.status_code in probe.rejected:
        return Check(name, "fail", f"token rejected by {name.capitalize()} (401): {probe.rejected_hint}")
    try:
        bot = probe.bot_name(resp.json())
    except (ValueError, KeyError, TypeError):
        bot = None
    if bot is None:
        return Check(name, "fail", probe.no_bot.format(status=resp.status_code))
    return Check(name, status, f"token ok ({bot}); {allow}")


async def check_telegram(cfg: Config, timeout_s: float) -> Check:
    tg = cfg.channels.telegram
    probe = _BotProbe(
        "telegram",
        "from @BotFather",
        "Bot API",
        f"{tg.base_url}{tg.token}/getMe",
        (401, 404),
        "copy it again from @BotFather",
        lambda me: f"@{me['result']['username']}" if me.get("ok") else None,
        "getMe answered HTTP {status} without a bot",
        proxy=tg.proxy,
    )
    return await _probe_bot(probe, tg, timeout_s)


async def check_discord(cfg: Config, timeout_s: float) -> Check:
    dc = cfg.channels.discord
    probe = _BotProbe(
        "discord",
        "from the developer portal",
        "Discord API",
        f"{dc.api_base}/users/@me",
        (401,),
        "reset it under Bot in the developer portal",
        lambda me: str(me["username"]),
        "/users/@me answered HTTP {status} without a user",
        headers={"Authorization": f"Bot {dc.token}"},
    )
    return await _probe_bot(probe, dc, timeout_s)


async def check_mcp(cfg: Config, timeout_s: float) -> list[Check]:
    from nanobot.agent.tools.mcp import MCPManager

    servers = cfg.tools.mcp_servers
    manager = MCPManager(servers)
    limit_s = max([timeout_s, *(float(getattr(s, "connect_timeout_s", 0) or 0) for s in servers.values())]) + 5
    try:
        tools = await asyncio.wait_for(manager.tools(), limit_s)
        rows = manager.status()
    except TimeoutError:
        return [Check(f"mcp {n}", "fail", f"no answer within {limit_s:g}s") for n in servers]
    finally:
        await manager.aclose()
    counts = {r["name"]: len(r.get("tools") or []) for r in rows}
    out = []
    for row in rows:
        if row["state"] == "ready" and row.get("unmatched"):
            detail = f"{counts[row['name']]} tool(s); enabledTools {row['unmatched']} match none of its tools"
            out.append(Check(f"mcp {row['name']}", "warn", detail))
        elif row["state"] == "ready":
            out.append(Check(f"mcp {row['name']}", "ok", f"{counts[row['name']]} tool(s) [{row['type']}]"))
        else:
            out.append(Check(f"mcp {row['name']}", "fail", f"{row['state']}: {row.get('error') or 'no detail'}"))
    del tools
    return out
