"""ToolRegistry: the tools of one agent, their schemas, and safe execution.

Every call passes the trust policy of its context first, and every result has known secret values
redacted before it reaches the LLM, a session file or a chat. The policy is given at construction;
None (only tests and tools run for the owner alone pass it) treats every caller as the owner.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from loguru import logger

from nanobot.agent.tools.base import Tool, ToolContext, ToolError
from nanobot.agent.tools.policy import TrustPolicy
from nanobot.providers.tokens import count_tools
from nanobot.secrets import mask
from nanobot.util.text import valid_unicode
from nanobot.util.tool_args import parse_arguments


class ToolRegistry:
    def __init__(self, policy: TrustPolicy | None) -> None:
        self._tools: dict[str, Tool] = {}
        self.policy = policy
        # Schemas and their token count are rebuilt only when the tool set changes (every turn
        # needs them; JSON-dumping and encoding ~10 KB of schemas costs milliseconds).
        self._version = 0
        self._memo: dict[frozenset[str] | None, tuple[int, list[dict[str, Any]], int | None]] = {}

    def register(self, tool: Tool) -> None:
        self._tools[tool.name] = tool
        self._version += 1

    def unregister(self, name: str) -> None:
        if self._tools.pop(name, None) is not None:
            self._version += 1

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def _entry(self, only: set[str] | None) -> tuple[int, list[dict[str, Any]], int | None]:
        key = frozenset(only) if only is not None else None
        entry = self._memo.get(key)
        if entry is None or entry[0] != self._version:
            schemas = [t.to_schema() for n, t in sorted(self._tools.items()) if only is None or n in only]
            entry = self._memo[key] = (self._version, schemas, None)
        return entry

    def offered(self, only: set[str] | None, ctx: ToolContext) -> set[str] | None:
        """The tools of `only` (None: all) worth offering in `ctx`: without those its trust policy
        refuses there whatever the arguments. None when that is every registered tool."""
        names = set(self._tools) if only is None else set(only)
        withheld = self.policy.withheld(names, ctx) if self.policy is not None else set()
        return only if not withheld else names - withheld

    def withheld(self, names: Collection[str], ctx: ToolContext) -> set[str]:
        """Which of `names`, registered or not, the trust policy refuses in `ctx` whatever the
        arguments."""
        return self.policy.withheld(set(names), ctx) if self.policy is not None else set()

    def schemas(self, only: set[str] | None = None) -> list[dict[str, Any]]:
        """Schemas sorted by name, so the tool list is byte-stable across turns (prompt cache)."""
        return list(self._entry(only)[1])

    def schema_tokens(self, only: set[str] | None = None) -> int:
        """Token estimate of `schemas(only)`, computed once per tool set."""
        version, schemas, tokens = self._entry(only)
        if tokens is None:
            tokens = count_tools(schemas)
            self._memo[frozenset(only) if only is not None else None] = (version, schemas, tokens)
        return tokens

    async def execute(self, name: str, arguments: dict[str, Any] | str, ctx: ToolContext) -> str:
        """Run a tool and return its text result, secrets redacted. Never raises: every failure
        becomes an error text."""
        return valid_unicode(mask(await self._execute(name, arguments, ctx)))

    async def _execute(self, name: str, arguments: dict[str, Any] | str, ctx: ToolContext) -> str:
        tool = self._tools.get(name)
        if tool is None:
            return f"Error: unknown tool '{name}'. Available tools: {', '.join(sorted(self._tools))}"
        args = parse_arguments(arguments)
        if isinstance(args, str):
            return f"Error: invalid arguments for {name}: {args}"
        try:
            problems = tool.validate(args)
        except Exception as exc:  # noqa: BLE001 - a schema we cannot read must not kill the turn
            logger.warning("tool {}: its schema could not be checked: {}", name, exc)
            problems = []
        if problems:
            return f"Error: invalid arguments for {name}: " + "; ".join(problems)
        refusal = self.policy.refusal(name, args, ctx) if self.policy is not None else None
        if refusal is not None:
            return f"Error: {refusal}"
        try:
            return await tool.execute(ctx, **args)
        except ToolError as exc:
            return f"Error: {exc}"
        except TypeError as exc:
            return f"Error: invalid arguments for {name}: {exc}"
        except Exception as exc:  # noqa: BLE001 - a tool bug must not kill the turn
            logger.opt(exception=exc).warning("tool {} failed", name)
            return f"Error: {name} failed: {type(exc).__name__}: {exc}"
