"""`tools`: limits and guards of the agent's tools, web access, and MCP servers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from nanobot.config.sections.base import Credential, Section, endpoint_url

SandboxMode = Literal["auto", "bwrap", "landlock", "off"]


class ExecToolConfig(Section):
    timeout_s: float = Field(60.0, gt=0, description="Seconds one shell command may run before it is "
                             "killed.")
    max_output_chars: int = Field(10_000, ge=200, description="A command's output is cut to this many "
                                  "characters.")
    deny_patterns: list[str] = Field([], description="Regular expressions of commands to refuse, added to "
                                     "the built-in deny list.")
    sandbox: SandboxMode = Field(
        "auto",
        description="OS sandbox of shell commands: `auto` (bubblewrap, else Landlock, else exec is "
        "disabled with a start-up warning), `bwrap`, `landlock`, or `off` (no sandbox; warned at every "
        "start). `nanobot status` shows the active one.",
    )
    network: bool = Field(True, description="Commands may use the network (false: bubblewrap gives them "
                          "no network; under Landlock no socket can be made).")
    in_groups: bool = Field(False, description="Allow exec in group chats (sandboxed, without memory/ and "
                            "sessions/ mounted).")
    env: dict[str, str] = Field({}, description="Extra environment variables for commands; the rest is an "
                                "allow-list (PATH, locale, TZ, TERM; HOME is the workspace).")
    max_output_bytes: int = Field(4_000_000, ge=10_000, description="A command printing more than this "
                                  "many bytes is killed.")
    max_processes: int = Field(256, ge=8, description="Processes and threads one command may run at once.")
    max_cpu_s: int = Field(120, ge=1, description="CPU seconds each process of a command may use.")
    max_file_mb: int = Field(1024, ge=1, description="Largest file a command may write, in MB.")
    max_memory_mb: int = Field(4096, ge=64, description="Address space of each process of a command, in MB.")

    @field_validator("sandbox", mode="before")
    @classmethod
    def _legacy_none(cls, value: object) -> object:
        return "off" if value == "none" else value  # the old spelling of the opt-out


class WebSearchConfig(Section):
    provider: Literal["", "brave", "tavily", "searxng", "duckduckgo"] = Field(
        "", description="Search engine of the web_search tool; empty: the tool is not offered.")
    api_key: Credential = Field("", description="API key of the search engine (brave, tavily).")
    base_url: str = Field("", description="Endpoint of the search engine (a searxng instance, or a test "
                          "fake); empty: the engine's public API.")
    max_results: int = Field(5, ge=1, le=20, description="Results one search returns.")

    @field_validator("base_url")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        return endpoint_url(value)


class WebToolConfig(Section):
    allow_hosts: list[str] = Field([], description="Hosts web_fetch may reach although they are not public "
                                   "addresses (all others are refused): `host` allows any port, `host:port` "
                                   "only that port (IPv6 as `[::1]:8080`). In the owner's chats only: in "
                                   "groups and for guests web_fetch reaches public addresses alone.")
    max_bytes: int = Field(2_000_000, ge=1000, description="Most bytes web_fetch downloads from one URL.")
    max_redirects: int = Field(5, ge=0, description="Most redirects web_fetch follows.")
    timeout_s: float = Field(20.0, gt=0, description="Total seconds one web_fetch may take, redirects and "
                             "slow bodies included.")
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

    @field_validator("url")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        return endpoint_url(value)


class ToolsConfig(Section):
    restrict_to_workspace: bool = Field(True, description="File tools cannot read or write outside the "
                                        "workspace.")
    max_file_bytes: int = Field(1_000_000, ge=1000, description="Most bytes a file tool writes in one "
                                "call (reads are capped at ten times this).")
    exec: ExecToolConfig = Field(ExecToolConfig(), description="The exec (shell) tool.")
    web: WebToolConfig = Field(WebToolConfig(), description="The web_fetch and web_search tools.")
    mcp_servers: dict[str, MCPServerConfig] = Field({}, description="MCP servers by name; their tools "
                                                    "appear as `mcp_<server>_<tool>`.")
