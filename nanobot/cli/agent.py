"""`nanobot agent`: one turn with -m, or an interactive chat (TTY or piped stdin).

The terminal is a channel on the bus (channels/cli.py): its messages take the same path as every
other message, through the agent loop.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

import typer

from nanobot.bus.queue import MessageBus
from nanobot.cli.common import EXIT_FAILURE, EXIT_USAGE, ConfigOption, config_path, err, fail, load_cli_config
from nanobot.config.schema import Config
from nanobot.util.text import typed_text

DEFAULT_SESSION = "cli:direct"
ONE_SHOT_DRAIN_TIMEOUT_S = 120.0
EXIT_DRAIN_TIMEOUT_S = 3.0
TURN_END_WAIT_S = 0.5


def agent(
    message: Annotated[
        str | None, typer.Option("--message", "-m", help="Send one message and print the reply.")
    ] = None,
    session: Annotated[str, typer.Option("--session", "-s", help="Session key.")] = DEFAULT_SESSION,
    config: ConfigOption = None,
) -> None:
    """Chat with the agent: one turn with -m, otherwise interactive (a TTY or piped stdin)."""
    if message is not None and not message.strip():  # `-m "$EMPTY_VAR"`: a turn about nothing
        fail("Error: the message given with -m is empty", EXIT_USAGE)
    message = typed_text(message) if message is not None else None
    session = typed_text(session)  # a byte of another encoding reached the model call and failed it
    if not session.strip():
        fail("Error: the session key given with -s is empty", EXIT_USAGE)
    from nanobot.cli.app import CLOSED_AT_START

    if "stdout" in CLOSED_AT_START:  # `agent -m hi >&-`: the reply would go nowhere, and exit 0
        fail("Error: standard output is closed: the reply could not be shown", EXIT_FAILURE)
    cfg = load_cli_config(config)
    code = asyncio.run(_main(cfg, message, session, str(config_path(config))))
    raise typer.Exit(code)


def _build(cfg: Config, bus: MessageBus, config_path: str):  # noqa: ANN202
    from nanobot.agent.factory import build_runtime

    built = build_runtime(cfg, bus, config_path=config_path)  # a ConfigError is reported by the CLI
    if built.agent.provider.is_small_local:
        from nanobot.providers.local import DEMO_NOTICE

        err(DEMO_NOTICE)
    return built


async def _main(cfg: Config, message: str | None, session_key: str, config_path: str) -> int:
    from nanobot.channels.cli import TerminalChannel

    bus = MessageBus()
    runtime = _build(cfg, bus, config_path)
    terminal = TerminalChannel(bus, session_key, tty=sys.stdin.isatty())
    printer = asyncio.create_task(terminal.show_outbound())
    runtime.agent.lifecycle.recover_pending()
    runtime.loop.start()
    from nanobot.agent.runtime import CLOSE_GRACE_S

    subagents_s = EXIT_DRAIN_TIMEOUT_S  # at the exit a report still to come is kept in the session
    grace_s = CLOSE_GRACE_S
    drain_s = ONE_SHOT_DRAIN_TIMEOUT_S
    try:
        if message is not None:
            out = await terminal.one_shot(message)
            code = EXIT_FAILURE if out is not None and out.metadata.get("failed") else 0
        else:
            code = await terminal.converse()
        if message is not None or not terminal.tty:
            # -m or piped input: a sub-agent's report is printed before the exit, like the reply
            await _wait_for_background(runtime)
        while not bus.outbound.empty():  # the printer shows what the reports' turns said
            await asyncio.sleep(0.02)
    except asyncio.CancelledError:
        # Ctrl-C: the turn stops now, as /stop stops it. With a grace it went on for seconds,
        # running tools and saving a reply nobody saw.
        grace_s = 0.0
        # ...and the memory work a /new started is left to the next start (recover_pending): the
        # terminal hung silently for up to two minutes while a slow model summarised
        drain_s = EXIT_DRAIN_TIMEOUT_S
        raise
    finally:
        printer.cancel()
        if drain_s > EXIT_DRAIN_TIMEOUT_S and runtime.agent.lifecycle.pending():
            err("finishing memory work before the exit (Ctrl-C leaves it for the next start)")
        await runtime.aclose(drain_timeout_s=drain_s, grace_s=grace_s, subagents_timeout_s=subagents_s)
    return code


async def _wait_for_background(runtime) -> None:  # noqa: ANN001 - AgentRuntime, imported lazily
    """Sub-agents spawned by the turn run in the background: wait for them and their reports."""
    # the turn just answered may take a moment to end: only work still there after it is told about
    if runtime.background_work() and not await runtime.settle(TURN_END_WAIT_S):
        err("waiting for background tasks to finish (Ctrl-C stops; their report is then kept in the session)")
        if not await runtime.settle(ONE_SHOT_DRAIN_TIMEOUT_S):
            err(f"background tasks still running after {ONE_SHOT_DRAIN_TIMEOUT_S:.0f} s: stopped")
