"""`nanobot agent`: one turn with -m, or an interactive chat (TTY or piped stdin)."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

import typer

from nanobot.bus.queue import MessageBus
from nanobot.cli.common import EXIT_FAILURE, EXIT_INTERRUPTED, ConfigOption, config_path, err, load_cli_config
from nanobot.config.schema import Config

DEFAULT_SESSION = "cli:direct"
ONE_SHOT_DRAIN_TIMEOUT_S = 120.0
EXIT_WORDS = {"/exit", "/quit", "exit", "quit", ":q"}


def agent(
    message: Annotated[
        str | None, typer.Option("--message", "-m", help="Send one message and print the reply.")
    ] = None,
    session: Annotated[str, typer.Option("--session", "-s", help="Session key.")] = DEFAULT_SESSION,
    config: ConfigOption = None,
) -> None:
    """Chat with the agent: one turn with -m, otherwise interactive (a TTY or piped stdin)."""
    cfg = load_cli_config(config)
    code = asyncio.run(_main(cfg, message, session, str(config_path(config))))
    raise typer.Exit(code)


def _build(cfg: Config, bus: MessageBus, config_path: str):  # noqa: ANN202
    from nanobot.agent.factory import build_agent

    built = build_agent(cfg, bus, config_path=config_path)  # a ConfigError is reported by the CLI
    if built.provider.is_small_local:
        from nanobot.providers.local import DEMO_NOTICE

        err(DEMO_NOTICE)
    return built


async def _print_outbound(bus: MessageBus, session_channel: str) -> None:
    """Messages the agent sends on its own (the `message` tool) go to stdout like replies."""
    while True:
        out = await bus.consume_outbound()
        if out.kind == "message" and out.channel == session_channel and out.content:
            print(out.content, flush=True)


async def _main(cfg: Config, message: str | None, session_key: str, config_path: str) -> int:
    bus = MessageBus()
    built = _build(cfg, bus, config_path)
    channel, _, chat_id = session_key.partition(":")
    channel, chat_id = (channel or "cli"), (chat_id or "direct")
    printer = asyncio.create_task(_print_outbound(bus, channel))
    built.lifecycle.recover_pending()
    try:
        if message is not None:
            reply = await built.process_direct(message, session_key, channel, chat_id)
            print(reply, flush=True)
            code = EXIT_FAILURE if built.last_turn_failed else 0
        else:
            code = await _interactive(built, session_key, channel, chat_id)
    finally:
        printer.cancel()
        await built.aclose(drain_timeout_s=ONE_SHOT_DRAIN_TIMEOUT_S)
    return code


async def _interactive(built, session_key: str, channel: str, chat_id: str) -> int:  # noqa: ANN001
    tty = sys.stdin.isatty()
    if tty:
        err("nanobot — interactive chat. /new starts a fresh session, /help lists commands, /exit quits.")
    while True:
        try:
            line = await asyncio.to_thread(_read_line, tty)
        except KeyboardInterrupt:
            err("")
            return EXIT_INTERRUPTED
        if line is None:
            return 0
        text = line.strip()
        if not text:
            continue
        if text.lower() in EXIT_WORDS:
            return 0
        try:
            reply = await built.process_direct(text, session_key, channel, chat_id)
        except KeyboardInterrupt:
            err("(interrupted)")
            continue
        if tty:
            print(f"\nnanobot: {reply}\n", flush=True)
        else:
            print(reply, flush=True)


def _read_line(tty: bool) -> str | None:
    try:
        return input("You: ") if tty else (sys.stdin.readline() or None)
    except EOFError:
        return None
