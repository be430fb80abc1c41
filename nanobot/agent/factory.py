"""build_agent: wire provider, stores, tools, context and memory lifecycle from a Config."""

from __future__ import annotations

from pathlib import Path

from loguru import logger

from nanobot.agent.agent import Agent, AgentSettings
from nanobot.agent.context import Budget, ContextBuilder
from nanobot.agent.runner import TurnRunner
from nanobot.agent.subagents import SubagentManager
from nanobot.agent.tools.cron import CronTool
from nanobot.agent.tools.files import file_tools
from nanobot.agent.tools.message import MessageTool
from nanobot.agent.tools.registry import ToolRegistry
from nanobot.agent.tools.shell import ExecTool
from nanobot.agent.tools.spawn import SpawnTool
from nanobot.agent.tools.web import WebFetchTool, WebSearchTool
from nanobot.bus.events import OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.config.paths import ensure_workspace, secure_installation
from nanobot.config.schema import Config
from nanobot.memory.backends.registry import build_long_term_memory
from nanobot.memory.consolidator import Consolidator
from nanobot.memory.flush import MemoryFlusher
from nanobot.memory.lifecycle import LifecycleSettings, MemoryLifecycle
from nanobot.memory.seam import FileMemory
from nanobot.memory.store import MemoryStore
from nanobot.providers.base import LLMProvider
from nanobot.providers.registry import resolve_provider
from nanobot.scheduler.cron import CronService
from nanobot.scheduler.cron_store import CronJob, DeliverTo, cron_session_key, job_prompt, jobs_path
from nanobot.session.store import SessionStore
from nanobot.timeutil import resolve_tz

SMALL_LOCAL_WINDOW_TOKENS = 8192


def build_agent(
    config: Config,
    bus: MessageBus | None = None,
    *,
    provider: LLMProvider | None = None,
    config_path: str = "config.json",
) -> Agent:
    """The whole agent for a config. Raises ProviderConfigError when no provider can be built."""
    d = config.agents.defaults
    provider = provider or resolve_provider(config, config_path)
    bus = bus or MessageBus()
    workspace = config.workspace_path
    ensure_workspace(workspace)
    secure_installation(workspace)
    tz = resolve_tz(d.timezone)
    small = provider.is_small_local
    model: str | None = None  # the provider already carries the resolved model name

    memory = MemoryStore(workspace, tz, backups_kept=config.memory.backups_kept)
    sessions = SessionStore(workspace, fsync=config.gateway.fsync)
    tools = ToolRegistry()
    restrict = config.tools.restrict_to_workspace
    skills = _skills(workspace)
    roots = (skills.builtin_dir,) if skills is not None else ()
    for tool in file_tools(workspace, memory, restrict, config.tools.max_file_bytes, roots):
        tools.register(tool)
    tools.register(ExecTool(workspace, config.tools.exec, restrict))
    tools.register(WebFetchTool(config.tools.web))
    tools.register(WebSearchTool(config.tools.web.search, config.tools.web.timeout_s))
    tools.register(MessageTool(bus))
    cron = CronService(
        jobs_path(workspace),
        on_job=lambda job: _run_cron_job(agent, job),
        timezone=d.timezone,
        deliver=lambda channel, chat_id, text: bus.publish_outbound(
            OutboundMessage(channel=channel, chat_id=chat_id, content=text)
        ),
    )
    tools.register(CronTool(cron))

    search_on = config.memory.search.enabled and not small
    index = None
    if search_on:
        from nanobot.agent.tools.memory import MemoryGetTool, MemorySearchTool
        from nanobot.memory.index import build_index

        index = build_index(config, workspace)
        memory.on_change(lambda _path: index.mark_dirty())
        share = config.memory.share_in_groups
        tools.register(MemorySearchTool(index, share_in_groups=share))
        tools.register(MemoryGetTool(index, share_in_groups=share))

    window = min(d.context_window_tokens, SMALL_LOCAL_WINDOW_TOKENS) if small else d.context_window_tokens
    max_tokens = min(d.max_tokens, config.providers.local.max_tokens) if small else d.max_tokens
    if small:
        from nanobot.providers.local import CORE_TOOLS, LOCAL_BOOTSTRAP_MAX_CHARS, LOCAL_MAX_TOOL_ITERATIONS

        budget = Budget(LOCAL_BOOTSTRAP_MAX_CHARS, LOCAL_BOOTSTRAP_MAX_CHARS, LOCAL_BOOTSTRAP_MAX_CHARS // 2)
        tool_names: set[str] | None = set(CORE_TOOLS) if config.providers.local.enable_tools else set()
        max_iterations = min(d.max_tool_iterations, LOCAL_MAX_TOOL_ITERATIONS)
    else:
        # Small windows get smaller prompt budgets (about 4 characters a token): the bootstrap files
        # may take at most ~35% of the window and MEMORY.md ~25%, so history always has room.
        budget = Budget(
            min(d.bootstrap_max_chars, window * 4 * 35 // 100),
            min(d.bootstrap_total_max_chars, window * 4 * 35 // 100),
            min(d.memory_max_chars, window * 4 * 25 // 100),
        )
        tool_names = None
        max_iterations = d.max_tool_iterations

    extra = []
    if search_on:
        from nanobot.agent.tools.memory import memory_prompt_section

        extra.append(memory_prompt_section())
    context = ContextBuilder(
        workspace,
        memory,
        tz,
        budget=budget,
        skills=skills,
        extra_sections=extra,
        compact=small,
        share_memory_in_groups=config.memory.share_in_groups,
    )
    runner = TurnRunner(
        provider,
        tools,
        model=model,
        max_iterations=max_iterations,
        max_tokens=max_tokens,
        temperature=d.temperature,
        max_tool_result_chars=d.max_tool_result_chars,
    )
    lifecycle = MemoryLifecycle(
        sessions,
        memory,
        Consolidator(
            provider,
            memory,
            model=model,
            context_window_tokens=window,
            max_tokens=max_tokens,
            memory_budget_chars=budget.memory_chars,
            small_model=small or d.small_model,
        ),
        MemoryFlusher(provider, memory, model=model, small_model=small or d.small_model),
        LifecycleSettings(
            context_window_tokens=window,
            max_tokens=max_tokens,
            safety_buffer_tokens=min(config.memory.safety_buffer_tokens, window // 8),
            max_rounds=config.memory.max_consolidation_rounds,
            max_failures=config.memory.max_consolidation_failures,
            flush_enabled=config.memory.flush.enabled,
            flush_soft_tokens=config.memory.flush.soft_threshold_tokens,
            share_in_groups=config.memory.share_in_groups,
            max_archive_retries=config.memory.max_archive_retries,
            archive_retry_backoff_s=config.memory.archive_retry_backoff_s,
        ),
        model=model,
    )
    long_term = build_long_term_memory(config, workspace, memory, sessions)
    # With an external backend (or a control condition) long-term memory reaches the prompt only
    # through that backend's runtime context, never also through MEMORY.md in the system prompt.
    context.include_memory_file = isinstance(long_term, FileMemory)
    agent = Agent(
        provider=provider,
        bus=bus,
        sessions=sessions,
        tools=tools,
        context=context,
        runner=runner,
        lifecycle=lifecycle,
        memory=memory,
        config=config,
        long_term=long_term,
        settings=AgentSettings(
            model=model,
            max_user_message_chars=d.max_user_message_chars,
            max_tool_result_chars=d.max_tool_result_chars,
            stream=d.stream,
            tool_names=tool_names,
        ),
    )
    if not small:
        agent.subagents = SubagentManager(
            TurnRunner(
                provider,
                tools,
                model=model,
                max_iterations=15,
                max_tokens=max_tokens,
                temperature=d.temperature,
                max_tool_result_chars=d.max_tool_result_chars,
            ),
            bus,
            workspace_note=f"Workspace: {workspace}",
        )
        tools.register(SpawnTool(agent.subagents))
    agent.cron = cron
    if index is not None:
        agent.on_close.append(index.close)
    if config.tools.mcp_servers:
        from nanobot.agent.tools.mcp import MCPManager

        mcp = MCPManager(config.tools.mcp_servers)
        agent.mcp = mcp
        agent.on_first_turn.append(lambda: mcp.register_into(tools))
        agent.on_close.append(mcp.aclose)
    logger.debug(
        "agent built: provider {}, model {}, {} tools", provider.name, provider.default_model, len(tools)
    )
    return agent


async def _run_cron_job(agent: Agent, job: CronJob) -> str:
    """A due job runs in its own session; CronService delivers the reply to the job's chat."""
    target = job.deliver_to or DeliverTo("cli", "direct")
    return await agent.process_direct(
        job_prompt(job), session_key=cron_session_key(job.id), channel=target.channel, chat_id=target.chat_id
    )


def _skills(workspace: Path):  # noqa: ANN202 - optional component
    try:
        from nanobot.skills.loader import SkillsLoader
    except ImportError:
        return None
    return SkillsLoader(workspace)
