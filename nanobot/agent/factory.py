"""build_runtime: assemble provider, stores, tools, context, memory lifecycle, agent and loop.

Every part is complete when it is constructed; nothing is patched in afterwards. What the
gateway and the CLI need comes back as explicit handles in an `AgentRuntime` (runtime.py). The
prompt budgets are sized here from the context window and the tool schemas (prompt_budget.py);
cron jobs run as turns through `run_cron_job` (cron_turn.py), wired in as CronService's `on_job`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.agent.agent import Agent, AgentSettings
from nanobot.agent.context import Budget, ContextBuilder
from nanobot.agent.cron_turn import deliver_and_confirm, run_cron_job
from nanobot.agent.loop import AgentLoop
from nanobot.agent.prompt_budget import (
    CHARS_PER_TOKEN,
    cut_bootstrap,
    cut_memory,
    reply_tokens,
    system_room_tokens,
    warn_if_cramped,
)
from nanobot.agent.prompt_tokens import PromptEstimator
from nanobot.agent.runner import TurnRunner
from nanobot.agent.runtime import AgentRuntime
from nanobot.agent.subagents import MAX_SUBAGENT_ITERATIONS, SubagentManager
from nanobot.agent.tools.cron import CronTool
from nanobot.agent.tools.files import file_tools
from nanobot.agent.tools.message import MessageTool
from nanobot.agent.tools.policy import TrustPolicy
from nanobot.agent.tools.registry import ToolRegistry
from nanobot.agent.tools.shell import ExecTool
from nanobot.agent.tools.spawn import SpawnTool
from nanobot.agent.tools.web import WebFetchTool, WebSearchTool
from nanobot.bus.events import InboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.config.paths import (
    PRIVATE_DIRS,
    default_config_path,
    ensure_workspace,
    moved_workspace_hint,
    secure_installation,
)
from nanobot.config.schema import Config
from nanobot.memory.backends.registry import build_long_term_memory
from nanobot.memory.consolidator import Consolidator
from nanobot.memory.flush import FLUSH_MAX_TOKENS, MemoryFlusher
from nanobot.memory.lifecycle import LifecycleSettings, MemoryLifecycle
from nanobot.memory.store import MemoryStore
from nanobot.providers.base import LLMProvider
from nanobot.providers.registry import resolve_provider
from nanobot.providers.tokens import count_message
from nanobot.scheduler.cron import CronService
from nanobot.scheduler.cron_store import jobs_path
from nanobot.secrets import register_config_secrets, register_env_secrets
from nanobot.session.store import SessionStore
from nanobot.timeutil import resolve_tz

SMALL_LOCAL_WINDOW_TOKENS = 8192
MCP_SCHEMA_SHARE_DIVISOR = 4  # MCP tool definitions may take a quarter of the context window


def build_runtime(
    config: Config,
    bus: MessageBus | None = None,
    *,
    provider: LLMProvider | None = None,
    config_path: str | None = None,
    listed: Callable[[str, str, str | None], bool] | None = None,
    admits_queued: Callable[[InboundMessage], bool] | None = None,
) -> AgentRuntime:
    """The whole agent for a config. Raises ProviderConfigError when no provider can be built.

    `config_path` is the file the config came from (default: $NANOBOT_HOME/config.json): exec
    commands must never see it, wherever it lies. `listed(channel, sender, username)`: whether a chat
    channel's allowFrom or pairing list names that sender now (the gateway's channels; a cron job of
    a removed sender does not run, one for a chat whose user is only a guest now runs as a guest's);
    `admits_queued(msg)`: whether a channel's message may still run when its turn starts (AgentLoop)."""
    config_path = config_path or str(default_config_path())
    d = config.agents.defaults
    provider = provider or resolve_provider(config, config_path)
    bus = bus or MessageBus()
    workspace = config.workspace_path
    if hint := moved_workspace_hint(workspace):  # started empty, silently, an assistant that forgot
        logger.warning("{}; starting with an empty workspace", hint)
    ensure_workspace(workspace)
    secure_installation(workspace)
    tz = resolve_tz(d.timezone)
    small = provider.is_small_local

    memory = MemoryStore(workspace, tz, backups_kept=config.memory.backups_kept)
    sessions = SessionStore(
        workspace,
        fsync=config.gateway.fsync,
        count_caps={"user": d.max_user_message_chars, "tool": d.max_tool_result_chars},
    )
    restrict = config.tools.restrict_to_workspace
    skills = _skills(workspace)
    roots = (skills.builtin_dir,) if skills is not None else ()
    private = () if config.memory.share_in_groups else tuple(workspace / d for d in PRIVATE_DIRS)
    policy = TrustPolicy(
        workspace,
        share_in_groups=config.memory.share_in_groups,
        exec_in_groups=config.tools.exec.in_groups,
        readable_roots=roots,
    )
    tools = ToolRegistry(policy)
    for tool in file_tools(
        workspace, memory, restrict, config.tools.max_file_bytes, roots, private, policy
    ):
        tools.register(tool)
    tools.register(ExecTool(workspace, config.tools.exec, restrict, **_own_files(config, config_path)))
    register_config_secrets(config)
    register_env_secrets()
    tools.register(WebFetchTool(config.tools.web))
    if config.tools.web.search.provider:  # unconfigured, it could only fail: not offered
        tools.register(WebSearchTool(config.tools.web.search, config.tools.web.timeout_s))
    tools.register(MessageTool(bus, workspace, policy, restrict=restrict, **_own_files(config, config_path)))
    cron = CronService(
        jobs_path(workspace),
        on_job=lambda job: run_cron_job(bus, job, sessions, listed),
        timezone=d.timezone,
        deliver=lambda channel, chat_id, text: deliver_and_confirm(bus, channel, chat_id, text),
    )
    tools.register(CronTool(cron))
    closers: list[Callable[[], Any]] = []

    search_on = config.memory.search.enabled and not small
    if search_on:
        from nanobot.agent.tools.memory import IndexOnFirstUse, MemoryGetTool, MemorySearchTool

        def open_index() -> Any:
            from nanobot.memory.index import build_index  # numpy and the retrieval modules load here

            return build_index(config, workspace)

        index = IndexOnFirstUse(open_index)
        memory.on_change(lambda _path: index.mark_dirty())
        share = config.memory.share_in_groups
        tools.register(MemorySearchTool(index, share_in_groups=share))
        tools.register(MemoryGetTool(index, share_in_groups=share))
        closers.append(index.close)

    window, max_tokens, budget, tool_names, max_iterations = _turn_limits(config, small)

    settings = LifecycleSettings(
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
    )

    def runner_with(iterations: int) -> TurnRunner:
        """Turns and sub-agents run tools alike; only their step limit differs."""
        return TurnRunner(
            provider,
            tools,
            max_iterations=iterations,
            max_tokens=max_tokens,
            temperature=d.temperature,
            max_tool_result_chars=d.max_tool_result_chars,
            prompt_budget_tokens=settings.budget_tokens,
            max_tokens_key=_max_tokens_key(config, small),
        )

    subagents = None
    if not small:
        subagents = SubagentManager(
            runner_with(MAX_SUBAGENT_ITERATIONS),
            bus,
            workspace_note=f"Workspace: {workspace}",
            max_running=d.max_concurrent_turns // 2,  # beside the turns, not in their place
        )
        tools.register(SpawnTool(subagents))
    mcp = None
    if config.tools.mcp_servers:
        from nanobot.agent.tools.mcp import MCPManager

        # tool definitions go with every request: MCP servers get a quarter of the window for theirs
        mcp = MCPManager(config.tools.mcp_servers, schema_budget_tokens=window // MCP_SCHEMA_SHARE_DIVISOR)
        closers.append(mcp.aclose)

    tool_sections = {}
    if search_on:
        from nanobot.agent.tools.memory import memory_prompt_section

        tool_sections["memory_search"] = memory_prompt_section()

    def context_with(prompt_budget: Budget, include_memory_file: bool) -> ContextBuilder:
        return ContextBuilder(
            workspace,
            memory,
            tz,
            budget=prompt_budget,
            skills=skills,
            tool_sections=tool_sections,
            compact=small,
            include_memory_file=include_memory_file,
        )

    memory_file_chars = budget.memory_chars  # the file's own limit for consolidation
    if not small:  # the prompt shares leave the conversation room beside the tool schemas
        tool_tokens = tools.schema_tokens(tool_names)
        system_tokens = system_room_tokens(settings.budget_tokens, tool_tokens)
        budget = cut_bootstrap(budget, system_tokens)
        rest = count_message({"role": "system", "content": context_with(budget, False).system_prompt()})
        budget = cut_memory(budget, system_tokens, rest)
        warn_if_cramped(settings.budget_tokens, tool_tokens, rest + budget.memory_chars // CHARS_PER_TOKEN)
    long_term = build_long_term_memory(config, workspace, memory, budget.memory_chars)
    # With an external backend (or a control condition) long-term memory reaches the prompt
    # only through that backend's runtime context, never also through MEMORY.md.
    context = context_with(budget, long_term.owns_memory_file)
    estimator = PromptEstimator(context, tools, tool_names, settings.budget_tokens)
    runner = runner_with(max_iterations)
    lifecycle = MemoryLifecycle(
        sessions,
        memory,
        Consolidator(
            provider,
            memory,
            context_window_tokens=window,
            max_tokens=max_tokens,
            memory_budget_chars=memory_file_chars,
            small_model=small or d.small_model,
        ),
        MemoryFlusher(
            provider,
            memory,
            max_tokens=min(FLUSH_MAX_TOKENS, max_tokens),
            budget_tokens=settings.budget_tokens,
            small_model=small or d.small_model,
        ),
        settings,
        estimator=estimator,
    )
    agent = Agent(
        provider=provider,
        bus=bus,
        sessions=sessions,
        tools=tools,
        context=context,
        runner=runner,
        lifecycle=lifecycle,
        estimator=estimator,
        long_term=long_term,
        settings=AgentSettings(
            max_user_message_chars=d.max_user_message_chars,
            max_tool_result_chars=d.max_tool_result_chars,
            stream=d.stream,
            streaming_channels=frozenset(
                name for name in type(config.channels).model_fields
                if getattr(getattr(config.channels, name), "streaming", False) is True
            ),
            tool_names=tool_names,
            share_memory_in_groups=config.memory.share_in_groups,
        ),
        subagents=subagents,
        mcp=mcp,
    )
    loop = AgentLoop(bus, agent, d.max_concurrent_turns, admits_queued=admits_queued)
    logger.debug(
        "agent built: provider {}, model {}, {} tools", provider.name, provider.default_model, len(tools)
    )
    return AgentRuntime(
        config=config, bus=bus, agent=agent, loop=loop, cron=cron, memory=memory, mcp=mcp, closers=closers
    )


def _turn_limits(config: Config, small: bool) -> tuple[int, int, Budget, set[str] | None, int]:
    """(context window, reply tokens, prompt budget, tools offered (None: all), tool steps) for the
    provider: the embedded small model gets its own smaller limits and only the core tools."""
    d = config.agents.defaults
    # the embedded model's window is the context llama.cpp allocates (providers.local.nCtx): a lower
    # one was ignored, and a long paste failed every time instead of being cut to fit
    window = (
        min(d.context_window_tokens, SMALL_LOCAL_WINDOW_TOKENS, config.providers.local.n_ctx)
        if small else d.context_window_tokens
    )
    max_tokens = min(d.max_tokens, config.providers.local.max_tokens) if small else reply_tokens(d.max_tokens, window)
    if small:
        from nanobot.providers.local import CORE_TOOLS, LOCAL_BOOTSTRAP_MAX_CHARS, LOCAL_MAX_TOOL_ITERATIONS

        budget = Budget(LOCAL_BOOTSTRAP_MAX_CHARS, LOCAL_BOOTSTRAP_MAX_CHARS, LOCAL_BOOTSTRAP_MAX_CHARS // 2)
        tool_names: set[str] | None = set(CORE_TOOLS) if config.providers.local.enable_tools else set()
        max_iterations = min(d.max_tool_iterations, LOCAL_MAX_TOOL_ITERATIONS)
    else:
        # Small windows get smaller prompt budgets (about 4 characters a token): the bootstrap files
        # may take at most ~35% of the window and MEMORY.md ~25%; build_runtime cuts both further to
        # what the tool schemas leave (agent/prompt_budget.py), so history always has room.
        budget = Budget(
            min(d.bootstrap_max_chars, window * 4 * 35 // 100),
            min(d.bootstrap_total_max_chars, window * 4 * 35 // 100),
            min(d.memory_max_chars, window * 4 * 25 // 100),
        )
        tool_names = None
        max_iterations = d.max_tool_iterations
    return window, max_tokens, budget, tool_names, max_iterations


def _max_tokens_key(config: Config, small: bool) -> str:
    """The config key whose value is the reply limit (_turn_limits): the embedded model's own when lower."""
    if small and config.providers.local.max_tokens < config.agents.defaults.max_tokens:
        return "providers.local.maxTokens"
    return "agents.defaults.maxTokens"


def _own_files(config: Config, config_path: str) -> dict[str, tuple[Path, ...]]:
    """nanobot's own files, which exec commands never see and the message tool never attaches:
    NANOBOT_HOME, the config file and the folder it is in (pairing state lives beside it), the log."""
    from nanobot.config.paths import nanobot_home

    config_file = Path(config_path)
    dirs = [nanobot_home(), *([config_file.resolve().parent] if config_file.is_file() else [])]
    files = [config_file, *([config.log_file_path] if config.log_file_path else [])]
    return {"private_dirs": tuple(dirs), "private_files": tuple(files)}


def _skills(workspace: Path):  # noqa: ANN202 - optional component
    try:
        from nanobot.skills.loader import SkillsLoader
    except ImportError:
        return None
    return SkillsLoader(workspace)
