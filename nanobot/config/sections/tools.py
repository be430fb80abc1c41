"""`tools`: limits and guards of the agent's tools, web access, and MCP servers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nanobot.config.sections.base import Section


class ExecToolConfig(Section):
    timeout_s: float = Field(60.0, gt=0, description="Seconds one shell command may run before it is "
                             "killed.")
    max_output_chars: int = Field(10_000, ge=200, description="A command's output is cut to this many "
                                  "characters.")
    deny_patterns: list[str] = Field([], description="Regular expressions of commands to refuse, added to "
                                     "the built-in deny list.")
    sandbox: Literal["auto", "bwrap", "none"] = Field("auto", description="How shell commands are "
                                                      "isolated: `auto` uses bubblewrap where it works.")


class WebSearchConfig(Section):
    provider: Literal["", "brave", "tavily", "searxng", "duckduckgo"] = Field(
        "", description="Search engine of the web_search tool; empty: the tool is not offered.")
    api_key: str = Field("", description="API key of the search engine (brave, tavily).")
    base_url: str = Field("", description="Endpoint of the search engine (a searxng instance, or a test "
                          "fake); empty: the engine's public API.")
    max_results: int = Field(5, ge=1, le=20, description="Results one search returns.")


class WebToolConfig(Section):
    allow_hosts: list[str] = Field([], description="`host` or `host:port` entries web_fetch may reach "
                                   "although they are not public addresses (all others are refused).")
    max_bytes: int = Field(2_000_000, ge=1000, description="Most bytes web_fetch downloads from one URL.")
    max_redirects: int = Field(5, ge=0, description="Most redirects web_fetch follows.")
    timeout_s: float = Field(20.0, gt=0, description="Total seconds one web_fetch may take.")
    search: WebSearchConfig = Field(WebSearchConfig(), description="The web_search tool.")


class MCPServerConfig(Section):
    type: Literal["", "stdio", "sse", "streamableHttp"] = Field(
        "", description="Transport; empty: `stdio` when `command` is set, else from the URL.")
    command: str = Field("", description="Program that runs a stdio server (`npx`, `uvx`, a path).")
    args: list[str] = Field([], description="Arguments of `command`.")
    env: dict[str, str] = Field({}, description="Environment variables added for `command`.")
    url: str = Field("", description="URL of an HTTP server (sse or streamableHttp).")
    headers: dict[str, str] = Field({}, description="HTTP headers sent to an HTTP server.")
    tool_timeout: float = Field(30.0, gt=0, description="Seconds one tool call may take.")
    connect_timeout_s: float = Field(20.0, gt=0, description="Seconds to start the server, connect and list "
                                     "its tools (raise it for `npx -y` servers that download on first start).")
    enabled_tools: list[str] = Field(["*"], description="Tool names the agent may use; `[\"*\"]`: all.")


class ToolsConfig(Section):
    restrict_to_workspace: bool = Field(True, description="File tools cannot read or write outside the "
                                        "workspace.")
    max_file_bytes: int = Field(1_000_000, ge=1000, description="Most bytes a file tool writes in one "
                                "call (reads are capped at ten times this).")
    exec: ExecToolConfig = Field(ExecToolConfig(), description="The exec (shell) tool.")
    web: WebToolConfig = Field(WebToolConfig(), description="The web_fetch and web_search tools.")
    mcp_servers: dict[str, MCPServerConfig] = Field({}, description="MCP servers by name; their tools "
                                                    "appear as `mcp_<server>_<tool>`.")
