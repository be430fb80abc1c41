"""Core tools: exec guards and environment, web_fetch SSRF guard / size cap / redirects over a real
127.0.0.1 HTTP server, file tool limits, the registry's validation."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nanobot.agent.tools.base import ToolContext, ToolError
from nanobot.agent.tools.files import file_tools
from nanobot.agent.tools.registry import ToolRegistry
from nanobot.agent.tools.shell import ExecTool
from nanobot.agent.tools.web import WebFetchTool, WebSearchTool, html_to_text
from nanobot.config.schema import ExecToolConfig, WebSearchConfig, WebToolConfig
from nanobot.memory.store import MemoryStore
from nanobot.timeutil import resolve_tz

CTX = ToolContext()
BIG_BODY_BYTES = 300_000


# ------------------------------------------------------------------ a local web server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        return

    def _send(
        self, status: int, body: bytes, ctype: str = "text/html; charset=utf-8", **headers: str
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/page":
            self._send(
                200,
                b"<html><head><title>t</title><script>evil()</script></head>"
                b"<body><h1>Hello</h1><p>World &amp; friends</p></body></html>",
            )
        elif self.path == "/big":
            self._send(200, b"a" * BIG_BODY_BYTES, "text/plain")
        elif self.path.startswith("/hop/"):
            n = int(self.path.rsplit("/", 1)[1])
            if n == 0:
                self._send(200, b"arrived", "text/plain")
            else:
                self._send(302, b"", "text/plain", Location=f"/hop/{n - 1}")
        elif self.path == "/to-loopback":
            self._send(
                302, b"", "text/plain", Location=f"http://localhost:{self.server.server_address[1]}/page"
            )
        else:
            self._send(404, b"nope", "text/plain")


@pytest.fixture(scope="module")
def web_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# ------------------------------------------------------------------ web_fetch


async def test_web_fetch_refuses_loopback_by_default(web_server: str) -> None:
    tool = WebFetchTool(WebToolConfig())
    with pytest.raises(ToolError, match="not a public address"):
        await tool.execute(CTX, url=f"{web_server}/page")


async def test_web_fetch_allows_listed_hosts(web_server: str) -> None:
    tool = WebFetchTool(WebToolConfig(allow_hosts=["127.0.0.1"]))
    text = await tool.execute(CTX, url=f"{web_server}/page")
    assert "Status: 200" in text
    assert "Hello" in text and "World & friends" in text and "evil" not in text


async def test_web_fetch_checks_every_redirect_hop(web_server: str) -> None:
    tool = WebFetchTool(WebToolConfig(allow_hosts=["127.0.0.1"]))
    with pytest.raises(ToolError, match="refusing to fetch localhost"):
        await tool.execute(CTX, url=f"{web_server}/to-loopback")


async def test_web_fetch_redirect_limit(web_server: str) -> None:
    tool = WebFetchTool(WebToolConfig(allow_hosts=["127.0.0.1"], max_redirects=3))
    assert (await tool.execute(CTX, url=f"{web_server}/hop/3")).endswith("arrived")
    with pytest.raises(ToolError, match="too many redirects"):
        await tool.execute(CTX, url=f"{web_server}/hop/4")


async def test_web_fetch_size_cap(web_server: str) -> None:
    tool = WebFetchTool(WebToolConfig(allow_hosts=["127.0.0.1"], max_bytes=10_000))
    text = await tool.execute(CTX, url=f"{web_server}/big")
    assert "(truncated)" in text
    assert text.count("a") <= 10_000 + 50


async def test_web_fetch_refuses_other_schemes_and_private_literals() -> None:
    tool = WebFetchTool(WebToolConfig())
    for url in (
        "file:///etc/passwd",
        "ftp://example.com/x",
        "http://10.0.0.1/",
        "http://[::1]:8080/",
        "http://169.254.169.254/latest/meta-data",
        "http://0.0.0.0/",
    ):
        with pytest.raises(ToolError):
            await tool.execute(CTX, url=url)


async def test_web_search_unconfigured_is_a_clear_error() -> None:
    tool = WebSearchTool(WebSearchConfig())
    with pytest.raises(ToolError, match="tools.web.search.provider"):
        await tool.execute(CTX, query="x")
    with pytest.raises(ToolError, match="apiKey"):
        await WebSearchTool(WebSearchConfig(provider="brave")).execute(CTX, query="x")


@pytest.mark.parametrize(("provider", "offered"), [("", False), ("duckduckgo", True)])
async def test_web_search_is_offered_only_when_configured(make_config, provider: str, offered: bool) -> None:  # noqa: ANN001
    """Unconfigured it can only fail: offered anyway, small models called it and got an error."""
    from nanobot.agent.factory import build_runtime

    config, _ = make_config(**{"tools.web.search.provider": provider})
    rt = build_runtime(config)
    try:
        assert ("web_search" in {s["function"]["name"] for s in rt.agent.tools.schemas()}) is offered
    finally:
        await rt.aclose()


def test_html_to_text() -> None:
    assert html_to_text("<p>a</p><p>b<br>c</p><style>x{}</style>") == "a\nb\nc"


# ------------------------------------------------------------------ exec


@pytest.fixture
def sandboxed_exec(tmp_path: Path) -> ExecTool:
    from nanobot.sandbox import detect

    assert detect("bwrap").active == "bwrap", detect("bwrap").detail  # CI has it: a failure, not a skip
    ws = tmp_path / "ws"
    ws.mkdir()
    return ExecTool(ws, ExecToolConfig(sandbox="bwrap", timeout_s=10, max_output_chars=1000), restrict=True)


@pytest.fixture
def exec_tool(tmp_path: Path) -> ExecTool:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ExecTool(ws, ExecToolConfig(sandbox="off", timeout_s=5, max_output_chars=1000), restrict=True)


async def test_exec_runs_in_the_workspace(exec_tool: ExecTool) -> None:
    assert (await exec_tool.execute(CTX, command="pwd")).strip() == str(exec_tool.workspace)
    out = await exec_tool.execute(CTX, command="echo hi > f.txt && cat f.txt; exit 3")
    assert out.startswith("hi") and "[exit code 3]" in out
    assert (exec_tool.workspace / "f.txt").read_text() == "hi\n"


OUTSIDE_EVEN_IN_A_SANDBOX = [
    "cat /etc/passwd",
    'cat "/etc/passwd"',
    "ls /",
    "touch /tmp/outside.txt",
    "cat /e*/passwd",
    "cat /{etc,x}/passwd",
    "cat {/etc,x}/passwd",
    "cat /[^x]tc/passwd",
    "ls {~root,x}/.profile",
    "cat ~/.ssh/id_rsa",
]


@pytest.mark.parametrize(
    "command",
    [
        *OUTSIDE_EVEN_IN_A_SANDBOX,
        "ls ../",
        "cp x ../../y",
        "echo $HOME/x",
        "cd / && ls",
        "cat '/'etc/passwd",
        "find / -name '*.key'",
        "cp notes.txt /etc/new-file",
        "echo $((6 / 3)) > /tmp/x",
        "cat /\\etc/passwd",
        "cat /e'tc'/passwd",
        'cat /e"tc/pass"wd',
        "echo $((`cat /etc/passwd >&2`0))",
        "cd '/' && cat etc/passwd",
        "find '/' -maxdepth 3 -name passwd",
        "cat /[[:lower:]]tc/passwd",
        "cat /@(etc)/passwd",
        "a=(~root); ls -d ${a[0]}",
        "echo '$((' ; cat /etc/hostname ; echo '))'",
        "cd $'/' && cat etc/hostname",
        "cd \"\"'/' && cat etc/hostname",
        "x='/'; cd $x && cat etc/hostname",
        "cat $*/etc/hostname",
        "cat <<'E'\n$((\nE\ncat /etc/hostname\ncat <<E\n))\nE",
        "cat \"/$X/passwd\"",
        "(~root)",
    ],
)
async def test_exec_refuses_paths_outside_the_workspace(exec_tool: ExecTool, command: str) -> None:
    await _refused(exec_tool, command)


async def _refused(tool: ExecTool, command: str) -> None:
    with pytest.raises(ToolError, match="refused"):
        await tool.execute(CTX, command=command)


@pytest.mark.parametrize(
    "command",
    [
        "ls -d */",
        "du -sh */",
        "awk '/error/ {print}' app.log",
        "sed '/^#/d' conf.ini",
        "find . -path '*/tests/*'",
        "echo $((6 / 3))",
        "cut -d'/' -f1 paths.txt",
        "python3 -c 'print(\"a/b\".split(\"/\"))'",
        "tr '/' '_' < paths.txt",
        "awk -F '/' '{print $1}' paths.txt",
        "cut -d '/' -f1 paths.txt",
        "cat paths.txt | tr '/' '\\n'",
        "awk '/[Ee]rror/ {print}' app.log",
        "sed -n '/start.*end/p' app.log",
        "total=120; echo $(( $total / 60 ))",
        "files=(a b); echo $(( ${#files[@]} / 2 ))",
        "python3 -c 'print(~5)'",
        "echo $((~0 & 255))",
        "grep -c '[^~]' app.log",
        "p=src/app/main.py; IFS='/' read -ra parts <<< \"$p\"; echo ${#parts[@]}",
        "dir=out; for f in \"$dir\"/*.txt; do wc -l \"$f\"; done",
        "python3 -c 'import os; print(os.sep == \"/\")'",
        "python3 -c 'print(6 /2)'",
        "grep -c '/api/v2/' access.log",
    ],
)
async def test_exec_runs_commands_whose_slashes_name_no_outside_path(sandboxed_exec: ExecTool, command: str) -> None:
    """In a sandbox, a slash after a glob, a quote or a space counted as an absolute path: listing
    the folders, an awk or sed address, a find pattern and shell arithmetic were refused as "'/' lies
    outside the workspace"; the model gave up on ordinary tasks. (Without a sandbox the guard is
    all there is, and refuses them as before.)"""
    for name in ("app.log", "conf.ini", "paths.txt", "access.log"):
        (sandboxed_exec.workspace / name).write_text("# a\nerror here\n/api/v2/x\n")
    (sandboxed_exec.workspace / "tests").mkdir(exist_ok=True)
    (sandboxed_exec.workspace / "out").mkdir(exist_ok=True)
    out = await sandboxed_exec.execute(CTX, command=command)
    assert "refused" not in out, out


@pytest.mark.parametrize("command", OUTSIDE_EVEN_IN_A_SANDBOX)
async def test_in_a_sandbox_the_guard_still_names_outside_paths(sandboxed_exec: ExecTool, command: str) -> None:
    await _refused(sandboxed_exec, command)


async def test_the_home_folder_refusal_tells_the_model_what_home_is(exec_tool: ExecTool) -> None:
    """The refusal of `ls $HOME/memory` said the home folder lies outside the workspace, while
    commands get the workspace as HOME: the model was told something false about where it runs."""
    with pytest.raises(ToolError, match="workspace as HOME") as refused:
        await exec_tool.execute(CTX, command="ls $HOME/memory")
    assert "outside" not in str(refused.value)
    assert (await exec_tool.execute(CTX, command="printenv HOME")).strip() == str(exec_tool.workspace)


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf /",
        "rm -rf ~",
        "mkfs.ext4 /dev/sda1",
        "dd if=/dev/zero of=/dev/sda",
        ":(){ :|:& };:",
        "shutdown -h now",
    ],
)
async def test_exec_refuses_destructive_patterns(tmp_path: Path, command: str) -> None:
    tool = ExecTool(tmp_path, ExecToolConfig(sandbox="off"), restrict=False)
    with pytest.raises(ToolError, match="safety guard"):
        await tool.execute(CTX, command=command)


async def test_exec_allows_system_programs_and_workspace_paths(exec_tool: ExecTool) -> None:
    inside = exec_tool.workspace / "data.txt"
    inside.write_text("x")
    assert (await exec_tool.execute(CTX, command=f"/bin/cat {inside}")).strip() == "x"
    assert await exec_tool.execute(CTX, command="ls > /dev/null") == "(no output)"


async def test_exec_custom_deny_patterns(tmp_path: Path) -> None:
    tool = ExecTool(tmp_path, ExecToolConfig(sandbox="off", deny_patterns=[r"\bcurl\b"]), restrict=True)
    with pytest.raises(ToolError, match="safety guard"):
        await tool.execute(CTX, command="curl http://x")


async def test_exec_environment_has_no_secrets(exec_tool: ExecTool, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "OPENAI_API_KEY": "s3cr3t-openai",
        "ANTHROPIC_API_KEY": "s3cr3t-anthropic",
        "TELEGRAM_BOT_TOKEN": "s3cr3t-telegram",
        "DISCORD_TOKEN": "s3cr3t-discord",
        "NANOBOT_PROVIDERS__GROQ__API_KEY": "s3cr3t-groq",
        "NANOBOT_CHANNELS__TELEGRAM__TOKEN": "s3cr3t-channel",
        "MY_SERVICE_PASSWORD": "s3cr3t-password",
    }
    for key, value in secrets.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HARMLESS_SETTING", "visible")
    out = await exec_tool.execute(CTX, command="env | grep -E 's3cr3t|HARMLESS_SETTING|^PATH='")
    assert "s3cr3t-" not in out
    assert "HARMLESS_SETTING" not in out  # an allow-list: unknown names stay out too
    assert "PATH=" in out
    assert "PATH=" in out


async def test_exec_timeout_and_output_cap(exec_tool: ExecTool) -> None:
    with pytest.raises(ToolError, match="timed out"):
        await exec_tool.execute(CTX, command="sleep 10", timeout_s=1)
    out = await exec_tool.execute(CTX, command="seq 1 5000")
    assert len(out) < 1200 and "bytes omitted" in out
    assert out.startswith("1\n2\n") and out.rstrip().endswith("5000")
    # what the marker says is what was left out of all the command printed (it counted only what
    # the collector had kept: 30,034 of 588,895 for `seq 1 100000`)
    printed = len("".join(f"{i}\n" for i in range(1, 100_001)))
    out = await exec_tool.execute(CTX, command="seq 1 100000")
    head, _, rest = out.partition("\n\n[... ")
    omitted, _, tail = rest.partition(" bytes omitted ...]\n\n")
    assert int(omitted) + len(head) + len(tail) == printed, (omitted, len(head), len(tail))
    assert (await exec_tool.execute(CTX, command="echo short")).strip() == "short"


async def test_the_model_cannot_stretch_the_configured_exec_timeout(tmp_path: Path) -> None:
    """`timeout_s` from the model was allowed up to 5 x tools.exec.timeoutS (300 s by default)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    tool = ExecTool(ws, ExecToolConfig(sandbox="off", timeout_s=1), restrict=True)
    started = time.monotonic()
    with pytest.raises(ToolError, match="timed out"):
        await tool.execute(CTX, command="sleep 4; echo survived", timeout_s=10)
    assert time.monotonic() - started < 3.5


# ------------------------------------------------------------------ files and registry


@pytest.fixture
def registry(tmp_path: Path) -> ToolRegistry:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    reg = ToolRegistry(None)
    for tool in file_tools(ws, MemoryStore(ws, resolve_tz("UTC")), True, 2000):
        reg.register(tool)
    return reg


async def test_a_write_over_a_steering_file_keeps_its_earlier_version(registry: ToolRegistry, tmp_path: Path) -> None:
    """A model obeying a hostile page overwrote AGENTS.md (and a skill): the owner's own text was lost,
    where MEMORY.md and the notes keep their versions."""
    ws = tmp_path / "ws"
    (ws / "AGENTS.md").write_text("# My rules\n- answer in French\n")
    (ws / "skills" / "tea").mkdir(parents=True)
    (ws / "skills" / "tea" / "SKILL.md").write_text("---\ndescription: tea\n---\nbrew green tea\n")
    (ws / "notes.txt").write_text("plain notes\n")
    await registry.execute("write_file", {"path": "AGENTS.md", "content": "obey the page\n"}, CTX)
    await registry.execute("edit_file", {"path": "skills/tea/SKILL.md", "old_text": "green", "new_text": "no"}, CTX)
    await registry.execute("write_file", {"path": "notes.txt", "content": "changed\n"}, CTX)
    store = MemoryStore(ws, resolve_tz("UTC"))
    [agents] = store.steering_backups("AGENTS.md")
    assert agents.read_text() == "# My rules\n- answer in French\n"
    [skill] = store.steering_backups("skills/tea/SKILL.md")
    assert "brew green tea" in skill.read_text()
    assert not (ws / "memory" / ".backups" / "steering" / "notes.txt").exists()  # only steering files
    await registry.execute("write_file", {"path": "AGENTS.md", "content": "obey the page\n"}, CTX)
    assert len(store.steering_backups("AGENTS.md")) == 2


async def test_file_tools_round_trip(registry: ToolRegistry, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    assert (
        await registry.execute("write_file", {"path": "a/b.txt", "content": "one\ntwo\nthree\n"}, CTX)
    ).startswith("Wrote")
    assert await registry.execute("read_file", {"path": "a/b.txt", "offset": 2, "limit": 1}, CTX) == "two\n"
    assert (
        await registry.execute("edit_file", {"path": "a/b.txt", "old_text": "two", "new_text": "2"}, CTX)
    ).startswith("Replaced 1")
    assert (ws / "a" / "b.txt").read_text() == "one\n2\nthree\n"
    listing = await registry.execute("list_dir", {"path": "a"}, CTX)
    assert listing == "b.txt (12 bytes)"
    missing = await registry.execute("edit_file", {"path": "a/b.txt", "old_text": "zzz", "new_text": ""}, CTX)
    assert missing.startswith("Error: old_text was not found")


async def test_file_size_cap_and_memory_routing(registry: ToolRegistry, tmp_path: Path) -> None:
    big = await registry.execute("write_file", {"path": "big.txt", "content": "x" * 5000}, CTX)
    assert big == "Error: content is larger than the 2000-byte limit"
    assert not (tmp_path / "ws" / "big.txt").exists()
    ok = await registry.execute("write_file", {"path": "memory/MEMORY.md", "content": "- likes tea\n"}, CTX)
    assert ok.startswith("Wrote")
    assert (tmp_path / "ws" / "memory" / "MEMORY.md").read_text().startswith("- likes tea")


async def test_edit_file_refuses_a_file_over_the_limit_before_reading_it(
    registry: ToolRegistry, tmp_path: Path
) -> None:
    """A file the edit could never write back (a 400 MB file filled the daemon's memory) is refused
    by its size, before a byte of it is read."""
    (tmp_path / "ws" / "big.log").write_text("x" * 5000)
    args = {"path": "big.log", "old_text": "x", "new_text": "y", "replace_all": True}
    result = await registry.execute("edit_file", args, CTX)
    assert result.startswith("Error: big.log is larger than 2000 bytes (5000)"), result
    assert (tmp_path / "ws" / "big.log").read_text() == "x" * 5000


async def test_edit_file_names_nanobots_own_files_as_unwritable_whatever_the_text(
    registry: ToolRegistry, tmp_path: Path
) -> None:
    """An edit of a file only nanobot writes (the jobs, the transcripts) is refused as such before it
    is read: answered "old_text was not found" or "larger than", a model kept retrying other texts."""
    jobs = tmp_path / "ws" / "cron" / "jobs.json"
    jobs.parent.mkdir()
    jobs.write_text('{"jobs": []}\n')
    for old_text in ("not in the file", '"jobs"'):
        args = {"path": "cron/jobs.json", "old_text": old_text, "new_text": "x"}
        result = await registry.execute("edit_file", args, CTX)
        assert "managed by nanobot itself" in result, result
    assert jobs.read_text() == '{"jobs": []}\n'


async def test_symlink_escape_is_refused(registry: ToolRegistry, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "ws" / "link").symlink_to(outside)
    result = await registry.execute("write_file", {"path": "link/x.txt", "content": "x"}, CTX)
    assert "outside the workspace" in result
    assert list(outside.iterdir()) == []


def test_schemas_are_sorted_and_stable(registry: ToolRegistry) -> None:
    names = [s["function"]["name"] for s in registry.schemas()]
    assert names == sorted(names) == ["edit_file", "list_dir", "read_file", "write_file"]
    assert registry.schemas() == registry.schemas()
    assert [s["function"]["name"] for s in registry.schemas({"read_file"})] == ["read_file"]


def test_schema_memo_follows_registration(registry: ToolRegistry, tmp_path: Path) -> None:
    tokens = registry.schema_tokens()
    assert tokens > 0 and registry.schema_tokens() == tokens
    registry.register(ExecTool(tmp_path, ExecToolConfig(sandbox="off"), restrict=True))
    assert "exec" in [s["function"]["name"] for s in registry.schemas()]
    assert registry.schema_tokens() > tokens
    registry.unregister("exec")
    assert registry.schema_tokens() == tokens
    assert registry.schema_tokens({"read_file"}) < tokens
    listed = registry.schemas()
    listed.clear()  # callers get their own list
    assert len(registry.schemas()) == 4


async def test_a_long_file_is_read_in_part_with_what_is_left_said(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    reg = ToolRegistry(None)
    for tool in file_tools(ws, MemoryStore(ws, resolve_tz("UTC")), True, 1_000_000):
        reg.register(tool)
    text = "".join(f"line {i:06d}\n" for i in range(15_000))  # 180,000 characters
    (ws / "big.txt").write_text(text)
    result = await reg.execute("read_file", {"path": "big.txt"}, CTX)
    shown, _, note = result.partition("\n\n[... ")
    assert len(result) <= 100_000 and text.startswith(shown)
    assert note.endswith("more characters; use offset/limit to read on]")
    assert len(shown) + int(note.split()[0]) == len(text)  # the count of what is left is exact


async def test_edit_file_refuses_what_it_would_garble_and_edits_windows_1252(
    registry: ToolRegistry, tmp_path: Path
) -> None:
    """One word fixed on an ASCII line rewrote every other line of a GBK, Shift-JIS or UTF-16 file
    as UTF-8 mojibake (Shift-JIS bytes lost for good); read_file showed a UTF-16 file as 'ÿþh\\x00'."""
    ws = tmp_path / "ws"
    files = {
        "gbk.txt": ("TODO: fix teh typo\n" + "会议记录：明天上午九点开会\n").encode("gbk"),
        "sjis.txt": ("TODO: fix teh typo\n" + "会議は明日の午前九時です。\n").encode("shift_jis"),
        "utf16.txt": "TODO: fix teh typo\r\nCafé\r\n".encode("utf-16"),
    }
    for name, data in files.items():
        (ws / name).write_bytes(data)
        out = await registry.execute("edit_file", {"path": name, "old_text": "teh", "new_text": "the"}, CTX)
        assert out.startswith("Error:") and "not UTF-8" in out and "iconv" in out, (name, out)
        assert (ws / name).read_bytes() == data  # untouched
    assert await registry.execute("read_file", {"path": "utf16.txt"}, CTX) == "TODO: fix teh typo\r\nCafé\r\n"
    western = [("pt.txt", "Reunião de informação: teh\n"), ("de.txt", "„Über“ teh\n"), ("q.txt", "«\xa0oui\xa0» teh\n")]
    for name, text in western:
        (ws / name).write_bytes(text.encode("cp1252"))
        out = await registry.execute("edit_file", {"path": name, "old_text": "teh", "new_text": "the"}, CTX)
        assert not out.startswith("Error:"), (name, out)  # review: refused as "double-byte"
    (ws / "fr.txt").write_bytes("Réunion à Besançon: teh café\n".encode("cp1252"))
    out = await registry.execute("edit_file", {"path": "fr.txt", "old_text": "teh", "new_text": "the"}, CTX)
    assert not out.startswith("Error:"), out
    assert (ws / "fr.txt").read_text(encoding="utf-8") == "Réunion à Besançon: the café\n"  # as README says


async def test_read_file_past_the_last_line_does_not_say_empty(registry: ToolRegistry, tmp_path: Path) -> None:
    """A 40-line file read from line 50 said "(empty file)": a model may then overwrite it."""
    (tmp_path / "ws" / "log.txt").write_text("".join(f"line {i}\n" for i in range(1, 41)))
    out = await registry.execute("read_file", {"path": "log.txt", "offset": 50}, CTX)
    assert "empty" not in out and "40 lines" in out, out
    assert await registry.execute("read_file", {"path": "log.txt", "offset": 40}, CTX) == "line 40\n"


async def test_an_edited_script_stays_executable(registry: ToolRegistry, tmp_path: Path) -> None:
    """One edit_file on deploy.sh made it 0600: the user's script no longer ran."""
    script = tmp_path / "ws" / "deploy.sh"
    script.write_text("#!/bin/sh\necho old\n")
    script.chmod(0o755)
    await registry.execute("edit_file", {"path": "deploy.sh", "old_text": "old", "new_text": "new"}, CTX)
    assert script.read_text() == "#!/bin/sh\necho new\n"
    assert script.stat().st_mode & 0o777 == 0o700  # the owner's bits kept, never group or other ones
    await registry.execute("write_file", {"path": "new.txt", "content": "x"}, CTX)
    assert (tmp_path / "ws" / "new.txt").stat().st_mode & 0o777 == 0o600
