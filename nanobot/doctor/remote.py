"""Doctor checks that talk to a service, concurrently and each with a timeout: the LLM provider (one
tiny completion), each enabled channel's token (Telegram getMe, Discord /users/@me) with its allow-list
state, and each MCP server (connect and list tools). Details pass through the secret masker, since
some URLs carry a token."""

from __future__ import annotations

import asyncio
from pathlib import Path

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


async def _get(url: str, timeout_s: float, headers: dict[str, str] | None = None,
               proxy: str | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=timeout_s, proxy=proxy or None) as client:
        return await client.get(url, headers=headers)


async def check_telegram(cfg: Config, timeout_s: float) -> Check:
    tg = cfg.channels.telegram
    if not tg.token:
        return Check("telegram", "fail", "enabled without a token (channels.telegram.token, from @BotFather)")
    status, allow = _allow_state("telegram", tg.allow_from, getattr(tg, "dm_policy", "allowlist"))
    try:
        resp = await _get(f"{tg.base_url}{tg.token}/getMe", timeout_s, proxy=tg.proxy)
    except httpx.HTTPError as exc:
        return Check("telegram", "fail", f"Bot API unreachable: {type(exc).__name__}: {exc}")
    if resp.status_code in (401, 404):
        return Check("telegram", "fail", "token rejected by Telegram (401): copy it again from @BotFather")
    try:
        me = resp.json()
        username = me["result"]["username"] if me.get("ok") else None
    except (ValueError, KeyError, TypeError):
        username = None
    if username is None:
        return Check("telegram", "fail", f"getMe answered HTTP {resp.status_code} without a bot")
    return Check("telegram", status, f"token ok (@{username}); {allow}")


async def check_discord(cfg: Config, timeout_s: float) -> Check:
    dc = cfg.channels.discord
    if not dc.token:
        return Check("discord", "fail", "enabled without a token (channels.discord.token, from the developer portal)")
    status, allow = _allow_state("discord", dc.allow_from, getattr(dc, "dm_policy", "allowlist"))
    try:
        resp = await _get(f"{dc.api_base}/users/@me", timeout_s, headers={"Authorization": f"Bot {dc.token}"})
    except httpx.HTTPError as exc:
        return Check("discord", "fail", f"Discord API unreachable: {type(exc).__name__}: {exc}")
    if resp.status_code == 401:
        return Check("discord", "fail", "token rejected by Discord (401): reset it under Bot in the developer portal")
    try:
        name = resp.json()["username"]
    except (ValueError, KeyError, TypeError):
        return Check("discord", "fail", f"/users/@me answered HTTP {resp.status_code} without a user")
    return Check("discord", status, f"token ok ({name}); {allow}")


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
        if row["state"] == "ready":
            out.append(Check(f"mcp {row['name']}", "ok", f"{counts[row['name']]} tool(s) [{row['type']}]"))
        else:
            out.append(Check(f"mcp {row['name']}", "fail", f"{row['state']}: {row.get('error') or 'no detail'}"))
    del tools
    return out
