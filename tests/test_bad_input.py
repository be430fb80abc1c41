"""Bad input never loses data and always says clearly what is wrong.

Config problems go through the real CLI (a subprocess: exit code, stderr, no traceback); the rest
goes through the agent and the real litellm to the fake LLM.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from nanobot.config.loader import ConfigError, load_config
from nanobot.providers.registry import ProviderConfigError, resolve_provider
from nanobot.session.store import SessionStore
from nanobot.util.text import MIDDLE_MARKER as TRUNCATION_MARKER
from tests.agent_helpers import make_runtime, messages_of, read_jsonl, session_path
from tests.conftest import run_cli
from tests.fakes.llm_server import FakeLLMServer, Reply

ONE_MB = 1_000_000


def _write(home: Path, data: object | str) -> Path:
    path = home / "config.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


# ------------------------------------------------------------------ config and provider


def test_malformed_json_config_exits_2_with_position(home: Path) -> None:
    _write(home, '{"agents": {"defaults": {"maxTokens": 100,}}}')
    result = run_cli("agent", "-m", "hi", home=home)
    assert result.returncode == 2
    assert "not valid JSON" in result.stderr and "line 1" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_bad_value_config_names_the_key_path(home: Path) -> None:
    _write(home, {"agents": {"defaults": {"maxTokens": "lots", "temperature": 7}}, "chanels": {}})
    result = run_cli("status", home=home)
    assert result.returncode == 2
    assert "agents.defaults.maxTokens" in result.stderr
    assert "agents.defaults.temperature" in result.stderr
    assert "chanels: unknown key" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_bad_env_override_names_the_variable(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(home, {})
    monkeypatch.setenv("NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS", "plenty")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "agents.defaults.max_tokens" in str(info.value) or "maxTokens" in str(info.value)
    assert "NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS" in str(info.value)


@pytest.mark.parametrize(
    "variable", ["NANOBOT_TOOLS__WEB__ALLOW_HOSTS", "NANOBOT_CHANNELS__TELEGRAM__ALLOW_FROM"]
)
def test_a_list_override_that_is_not_json_names_the_variable(home: Path, variable: str) -> None:
    """`=localhost` for a list key: a 25-frame traceback and exit 1 from every command (the gateway's
    exit 1 made systemd restart it for ever; 2 stops it)."""
    _write(home, {})
    env = {variable: "alice", "NANOBOT_TOOLS__EXEC__SANDBOX": "bwrap"}  # a plain string key is fine as it is
    for command in (("status",), ("gateway",)):
        result = run_cli(*command, home=home, env=env, timeout=60)
        assert result.returncode == 2, result.stderr
        assert f"{variable}: a list or an object is written as JSON" in result.stderr
        assert "SANDBOX" not in result.stderr and "Traceback" not in result.stderr


def test_an_unknown_time_zone_is_a_config_error(home: Path) -> None:
    """A typo fell back to the system's zone with a log line: cron jobs ran at the wrong hour."""
    _write(home, {"agents": {"defaults": {"timezone": "Europe/Berln"}}})
    result = run_cli("status", home=home)
    assert result.returncode == 2
    assert "agents.defaults.timezone" in result.stderr and "unknown time zone 'Europe/Berln'" in result.stderr


def test_a_workspace_that_cannot_be_a_folder_is_a_config_error(home: Path) -> None:
    (home / "afile").write_text("")
    _write(home, {"agents": {"defaults": {"workspace": str(home / "afile" / "ws")}}})
    for command in (("status",), ("agent", "-m", "hi"), ("memory", "status"), ("gateway",)):
        result = run_cli(*command, home=home, timeout=60)
        assert result.returncode == 2, (command, result.stderr)
        assert "agents.defaults.workspace: cannot use" in result.stderr and "is not a folder" in result.stderr
        assert "Traceback" not in result.stderr
    doctor = run_cli("doctor", "--fix", home=home, timeout=60)
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr, doctor.stderr
    assert "FAIL  files" in doctor.stdout and "is not a folder" in doctor.stdout


def test_onboard_over_a_config_of_the_wrong_shape_says_which_key(home: Path) -> None:
    _write(home, {"agents": "oops"})
    result = run_cli("onboard", "--model", "x", "--no-check", home=home)
    assert result.returncode == 2 and "agents in the config must be an object" in result.stderr
    assert "Traceback" not in result.stderr
    assert json.loads((home / "config.json").read_text()) == {"agents": "oops"}  # left as it was


def test_memory_search_with_bytes_of_another_encoding(home: Path) -> None:
    result = run_cli("memory", "search", "caf\udce9", home=home)  # argv b"caf\xe9"
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr


def test_a_session_key_in_another_encoding_does_not_fail_the_turn(home: Path, fake_llm: FakeLLMServer) -> None:
    """`agent -s $'work\xff'` (the same byte in -m was cleaned) failed every turn at the model call
    with UnicodeEncodeError; a blank -s made a session with an empty key."""
    from tests.conftest import config_dict

    _write(home, config_dict(fake_llm.url))
    fake_llm.push(Reply(content="noted"))
    result = run_cli("agent", "-s", "work\udcff", "-m", "hi", home=home)  # argv b"work\xff"
    assert result.returncode == 0 and result.stdout.strip() == "noted", result.stderr
    assert "work\ufffd" in json.dumps(fake_llm.requests[-1], ensure_ascii=False)  # the key, as sent
    blank = run_cli("agent", "-s", " ", "-m", "hi", home=home)
    assert blank.returncode == 2 and "session key given with -s is empty" in blank.stderr


@pytest.mark.parametrize("piped", [False, True])
def test_chinese_under_a_locale_that_is_not_utf8(home: Path, fake_llm: FakeLLMServer, piped: bool) -> None:
    """Python makes only C/POSIX locales UTF-8; under another (ISO-8859-1, or coercion off) the
    user's Chinese was saved as U+FFFD (lost for memory and search) and printing the reply crashed
    with a traceback."""
    from tests.conftest import config_dict

    config = home / "配置" / "config.json"  # a path in the locale's bytes must still open
    config.parent.mkdir()
    config.write_text(json.dumps(config_dict(fake_llm.url)), encoding="utf-8")
    fake_llm.push(Reply(content="记住了：旺财。"))
    locale_env = {"LC_ALL": "POSIX", "LANG": "POSIX", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    args = ("agent", "-c", str(config)) + (() if piped else ("-m", "我的狗叫旺财"))
    result = run_cli(*args, home=home, env=locale_env, input_text="我的狗叫旺财\n" if piped else None)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stdout.strip()  # the reply, its Chinese replaced by what the terminal can show
    said = [m["content"] for m in messages_of(session_path(load_config(config))) if m["role"] == "user"]
    assert said == ["我的狗叫旺财"]


def test_chinese_typed_under_a_latin1_locale(home: Path, tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    """Under ISO-8859-1 every byte decodes, so the UTF-8 bytes of a Chinese reminder became
    mojibake without a surrogate to tell (saved so in jobs.json); and one pasted Latin-1 byte in a
    UTF-8 file made the file tools read all of it as Windows-1252."""
    import shutil
    import subprocess

    from nanobot.util.text import decode_text

    mixed = "Trip: Zürich → 北京, café\n".encode() + b"pasted: \xef\n"
    assert decode_text(mixed).startswith("Trip: Zürich → 北京, café")
    assert decode_text("Zoë in Besançon".encode("cp1252")) == "Zoë in Besançon"
    # Word's French: "é NBSP »" happens to be valid UTF-8 (頻); the line is still Windows-1252
    french = "Thème : « L'été\xa0» et crème brûlée"
    assert decode_text(french.encode("cp1252")) == french
    localedef = shutil.which("localedef")
    (tmp_path / "loc").mkdir()
    if localedef is None or subprocess.run(
        [localedef, "-i", "en_US", "-f", "ISO-8859-1", str(tmp_path / "loc" / "en_US.ISO-8859-1")],
        capture_output=True, timeout=120,
    ).returncode not in (0, 1):  # 1: made, with warnings
        pytest.skip("no locale sources to build an ISO-8859-1 locale from")
    from tests.conftest import config_dict

    _write(home, config_dict(fake_llm.url))
    env = {"LOCPATH": str(tmp_path / "loc"), "LC_ALL": "en_US.ISO-8859-1", "LANG": "en_US.ISO-8859-1"}
    result = run_cli("cron", "add", "-m", "提醒我买牛奶", "--every", "3600", home=home, env=env)
    assert result.returncode == 0, result.stderr
    jobs = json.loads((home / "workspace" / "cron" / "jobs.json").read_text(encoding="utf-8"))
    assert jobs["jobs"][0]["message"] == "提醒我买牛奶"
    # piped lines: one in UTF-8, one in the locale's own Latin-1 (both were mangled one way or another)
    import os
    import sys

    from tests.conftest import REPO

    piped = "提醒我买牛奶\n".encode() + "Je bois un café à Besançon\n".encode("latin-1")
    run_env = {**{k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")},
               "NANOBOT_HOME": str(home), "PYTHONPATH": str(REPO), **env}
    done = subprocess.run([sys.executable, "-m", "nanobot", "agent", "-s", "cli:piped"], input=piped,
                          capture_output=True, env=run_env, cwd=str(home), timeout=120)
    lines = (home / "workspace" / "sessions" / "cli_piped.jsonl").read_text(encoding="utf-8").splitlines()
    said = [m["content"] for m in map(json.loads, lines) if m.get("role") == "user"]
    assert said == ["提醒我买牛奶", "Je bois un café à Besançon"], (said, done.stderr[-500:])


def test_a_hosted_embedding_model_under_the_local_provider_is_a_config_error(home: Path) -> None:
    """It failed every memory search, and `status` with a traceback."""
    _write(home, {"memory": {"search": {"embeddingProvider": "local", "embeddingModel": "text-embedding-3-small"}}})
    result = run_cli("status", home=home)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "memory.search" in result.stderr and "multilingual-e5-small" in result.stderr


def test_unknown_provider_exits_2(home: Path) -> None:
    _write(home, {"agents": {"defaults": {"provider": "skynet", "model": "x"}}})
    result = run_cli("agent", "-m", "hi", home=home)
    assert result.returncode == 2
    assert "unknown provider 'skynet'" in result.stderr and "agents.defaults.provider" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_missing_api_key_exits_2_naming_the_key(home: Path) -> None:
    _write(home, {"agents": {"defaults": {"provider": "anthropic", "model": "claude-sonnet-4-5"}}})
    result = run_cli("agent", "-m", "hi", home=home)
    assert result.returncode == 2
    assert "providers.anthropic.apiKey" in result.stderr
    assert "NANOBOT_PROVIDERS__ANTHROPIC__API_KEY" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_provider_resolution_rules(home: Path) -> None:
    path = _write(
        home,
        {
            "agents": {"defaults": {"model": "claude-sonnet-4-5"}},
            "providers": {"openai": {"apiKey": "sk-o"}, "anthropic": {"apiKey": "sk-a"}},
        },
    )
    assert resolve_provider(load_config(path)).name == "anthropic"
    _write(home, {"agents": {"defaults": {"model": "custom/my-model"}}, "providers": {"custom": {}}})
    with pytest.raises(ProviderConfigError, match="providers.custom.apiBase"):
        resolve_provider(load_config(path))
    _write(
        home,
        {
            "agents": {"defaults": {"model": "custom/my-model"}},
            "providers": {"custom": {"apiBase": "http://127.0.0.1:9/v1"}},
        },
    )
    provider = resolve_provider(load_config(path))
    assert provider.name == "custom" and provider.default_model == "my-model"  # direct route


# ------------------------------------------------------------------ sessions


def test_corrupt_session_lines_are_skipped_and_appends_start_fresh(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from loguru import logger

    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    path = sessions_dir / "cli_direct.jsonl"
    good = [
        {"role": "user", "content": "first", "timestamp": "2026-01-01T10:00:00+00:00"},
        {"role": "assistant", "content": "reply", "timestamp": "2026-01-01T10:00:01+00:00"},
    ]
    path.write_text(
        json.dumps(good[0]) + "\n{this is not json\n" + json.dumps(good[1]) + '\n{"role": "user", "cont',
        encoding="utf-8",
    )
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING")
    try:
        store = SessionStore(tmp_path)
        session = store.get("cli:direct")
        store.append(session, {"role": "user", "content": "after the crash", "timestamp": "x"})
        store.close()
    finally:
        logger.remove(sink)
    assert [m["content"] for m in session.messages] == ["first", "reply", "after the crash"]
    assert any("corrupt line 2" in w for w in warnings)
    assert any("corrupt line 4" in w for w in warnings)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[-2] == '{"role": "user", "cont'  # the damaged bytes are kept, not rewritten
    assert json.loads(lines[-1])["content"] == "after the crash"
    reloaded = SessionStore(tmp_path).get("cli:direct")
    assert [m["content"] for m in reloaded.messages] == ["first", "reply", "after the crash"]


@pytest.mark.parametrize(
    "bad_line",
    [
        {"role": "assistant", "content": "x", "tool_calls": "bad"},
        {"role": "assistant", "content": None, "tool_calls": [5]},
        {"role": 3, "content": "x"},
        {"role": "user", "content": {"text": "x"}},
    ],
)
async def test_a_message_line_of_the_wrong_shape_is_skipped_and_the_chat_goes_on(
    make_config, fake_llm: FakeLLMServer, bad_line: dict
) -> None:
    """A transcript line with `"tool_calls": "bad"` loaded as a message; every later turn of the chat
    then failed with a traceback, and its messages were not saved."""
    config, _ = make_config()
    rt = make_runtime(config)
    try:
        await rt.ask("first")
    finally:
        await rt.aclose()
    path = session_path(config)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(bad_line) + "\n")
    rt = make_runtime(config)
    try:
        assert "went wrong" not in await rt.ask("second")
    finally:
        await rt.aclose()
    assert [m["content"] for m in messages_of(path) if m.get("role") == "user"][-1] == "second"
    assert json.dumps(bad_line) in path.read_text(encoding="utf-8")  # kept as it was, only skipped
    sent = fake_llm.requests[-1]["messages"]
    assert sent[-1]["content"].endswith("second") and all(m.get("role") != 3 for m in sent)
    assert all(isinstance(m.get("content"), (str, list, type(None))) for m in sent)  # what an API takes


# ------------------------------------------------------------------ agent turns


async def test_one_megabyte_message_is_stored_whole_and_sent_truncated(
    make_config, fake_llm: FakeLLMServer
) -> None:
    config, _ = make_config(**{"agents.defaults.maxUserMessageChars": 20_000})
    rt = make_runtime(config)
    big = "start-" + "x" * (ONE_MB - 12) + "-end!!"
    try:
        await rt.ask(big)
        await rt.ask("and a small one")
    finally:
        await rt.aclose()
    stored = messages_of(session_path(config))
    assert stored[0]["content"] == big  # whole, byte for byte
    first_sent = fake_llm.requests[0]["messages"][-1]["content"]
    assert len(first_sent) < 21_000
    assert "start-" in first_sent and first_sent.endswith("-end!!")
    assert TRUNCATION_MARKER.split("{")[0].strip() in first_sent
    assert f"of {len(big)} characters omitted" in first_sent
    # token estimates count what is sent, not the stored megabyte: no needless consolidation
    assert len(fake_llm.requests) == 2 and all(r.get("tool_choice") is None for r in fake_llm.requests)
    history_copy = fake_llm.requests[1]["messages"][1]["content"]  # the big message as history
    assert len(history_copy) <= 20_000 + 200 and "omitted" in history_copy


async def test_invalid_tool_arguments_return_an_error_and_the_turn_goes_on(
    make_config, fake_llm: FakeLLMServer
) -> None:
    config, _ = make_config()
    rt = make_runtime(config)
    fake_llm.push(
        Reply(
            content=None,
            tool_calls=[
                {"id": "bad_json", "name": "write_file", "arguments": '{"path": "a.txt", "content": '},
                {"id": "bad_type", "name": "read_file", "arguments": {"path": 42}},
                {"id": "missing", "name": "write_file", "arguments": {"path": "b.txt"}},
                {"id": "unknown", "name": "teleport", "arguments": {}},
                {"id": "not_obj", "name": "list_dir", "arguments": "[1, 2]"},
            ],
        ),
        Reply(content="recovered"),
    )
    try:
        reply = await rt.ask("do things")
    finally:
        await rt.aclose()
    assert reply == "recovered"
    results = {
        m["tool_call_id"]: m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"
    }
    assert results["bad_json"].startswith("Error: invalid arguments for write_file: not valid JSON")
    assert results["bad_type"] == "Error: invalid arguments for read_file: path: expected string, got int"
    assert results["missing"] == "Error: invalid arguments for write_file: content: required"
    assert results["unknown"].startswith("Error: unknown tool 'teleport'")
    assert results["not_obj"] == "Error: invalid arguments for list_dir: expected a JSON object"
    assert not (config.workspace_path / "a.txt").exists() and not (config.workspace_path / "b.txt").exists()
    roles = [m["role"] for m in messages_of(session_path(config))]
    assert roles == ["user", "assistant", "tool", "tool", "tool", "tool", "tool", "assistant"]
    assert read_jsonl(session_path(config))  # every line still valid JSON


async def test_hostile_argument_values_get_an_error_and_the_turn_goes_on(
    make_config, fake_llm: FakeLLMServer
) -> None:
    """Values JSON allows that the schema check let through: `NaN` as exec's timeout disabled the
    configured one (a sleeping command held the turn for ever), arguments nested 5,000 deep ended the
    turn as "model call failed: RecursionError", a required argument sent as null ran the tool with
    None (a sub-agent with the task "None", Python internals as errors), a NUL byte in a command
    came back as "ValueError: embedded null byte"."""
    config, _ = make_config(**{"tools.exec.timeoutS": 2})
    rt = make_runtime(config)
    deep = '{"path": ' + "[" * 5000 + "]" * 5000 + "}"
    # parsed fine, then too deep for the recursive steps after it (a review catch)
    medium = '{"path": ' + "[" * 600 + "]" * 600 + "}"
    fake_llm.push(
        Reply(
            content=None,
            tool_calls=[
                {"id": "nan", "name": "exec", "arguments": '{"command": "sleep 30; echo finished", "timeout_s": NaN}'},
                {"id": "deep", "name": "read_file", "arguments": deep},
                {"id": "medium", "name": "read_file", "arguments": medium},
                {"id": "null_task", "name": "spawn", "arguments": {"task": None}},
                {"id": "null_content", "name": "write_file", "arguments": {"path": "c.txt", "content": None}},
                {"id": "nul", "name": "exec", "arguments": {"command": "echo a\u0000b"}},
            ],
        ),
        Reply(content="recovered"),
    )
    try:
        reply = await asyncio.wait_for(rt.ask("do things"), 25)
    finally:
        await rt.aclose()
    assert reply == "recovered"
    results = {
        m["tool_call_id"]: m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"
    }
    assert results["nan"] == "Error: invalid arguments for exec: timeout_s: must be a finite number, got nan"
    assert results["deep"] == "Error: invalid arguments for read_file: not usable: nested too deeply"
    assert results["medium"] == results["deep"]
    assert results["null_task"] == "Error: invalid arguments for spawn: task: expected string, got NoneType"
    assert results["null_content"] == (
        "Error: invalid arguments for write_file: content: expected string, got NoneType"
    )
    assert results["nul"] == "Error: command holds a NUL byte, which no shell command can"
    assert not (config.workspace_path / "c.txt").exists()
    assert read_jsonl(session_path(config))


async def test_a_timeout_that_is_no_number_falls_back_to_the_configured_one(make_config) -> None:
    """exec called directly (sub-agents, internal callers) with NaN, 0 or a negative timeout keeps
    `tools.exec.timeoutS` rather than no deadline or none at all."""
    import time

    from nanobot.agent.tools.base import ToolContext, ToolError

    config, _ = make_config(**{"tools.exec.timeoutS": 1})
    rt = make_runtime(config)
    try:
        exec_tool = rt.agent.tools.get("exec")
        for asked in (float("nan"), float("inf"), 0, -5):
            started = time.monotonic()
            with pytest.raises(ToolError, match="timed out after 1 s"):
                await exec_tool.execute(ToolContext(), command="sleep 20; echo finished", timeout_s=asked)
            assert time.monotonic() - started < 10, asked
    finally:
        await rt.aclose()


async def test_undecodable_bytes_in_a_message_or_a_file_name_do_not_fail_the_turn(
    make_config, fake_llm: FakeLLMServer
) -> None:
    """`agent -m $'caf\\xe9'` (a Latin-1 terminal) and a file name that is not UTF-8 reach Python as
    lone surrogates, which no UTF-8 encoder accepts: the turn failed and nothing of it was saved."""
    config, _ = make_config()
    folder = config.workspace_path / "media"
    folder.mkdir(parents=True, exist_ok=True)
    with open(os.path.join(os.fsencode(folder), b"caf\xe9.txt"), "wb") as fh:
        fh.write(b"x")
    fake_llm.push(
        Reply(content=None, tool_calls=[{"id": "ls", "name": "list_dir", "arguments": {"path": "media"}}]),
        Reply(content="listed"),
    )
    rt = make_runtime(config)
    try:
        reply = await rt.ask("FACT-1: my caf\udce9 order is a flat white")
    finally:
        await rt.aclose()
    assert reply == "listed"
    stored = messages_of(session_path(config))
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[0]["content"] == "FACT-1: my caf\ufffd order is a flat white"
    assert "caf\ufffd.txt (1 bytes)" in stored[2]["content"]


async def test_paths_outside_the_workspace_are_refused(
    make_config, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    config, _ = make_config()
    rt = make_runtime(config)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret")
    fake_llm.push(
        Reply(
            content=None,
            tool_calls=[
                {
                    "id": "abs",
                    "name": "write_file",
                    "arguments": {"path": str(outside / "x.txt"), "content": "x"},
                },
                {
                    "id": "dots",
                    "name": "write_file",
                    "arguments": {"path": "../../escape.txt", "content": "x"},
                },
                {"id": "read", "name": "read_file", "arguments": {"path": str(outside / "secret.txt")}},
                {
                    "id": "edit",
                    "name": "edit_file",
                    "arguments": {"path": str(outside / "secret.txt"), "old_text": "top", "new_text": "no"},
                },
                {"id": "ls", "name": "list_dir", "arguments": {"path": str(outside)}},
                {
                    "id": "sess",
                    "name": "write_file",
                    "arguments": {"path": "sessions/x.jsonl", "content": "{}"},
                },
            ],
        ),
        Reply(content="refused, fine"),
    )
    try:
        reply = await rt.ask("escape")
    finally:
        await rt.aclose()
    assert reply == "refused, fine"
    results = {
        m["tool_call_id"]: m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"
    }
    for key in ("abs", "dots", "read", "edit", "ls"):
        assert results[key].startswith("Error: path") and "outside the workspace" in results[key], key
    assert "managed by nanobot" in results["sess"]
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret"
    assert not (config.workspace_path.parent.parent / "escape.txt").exists()
    assert not (config.workspace_path / "sessions" / "x.jsonl").exists()


def test_a_job_name_with_newlines_and_tabs_stays_on_its_row(home: Path, fake_llm: FakeLLMServer) -> None:
    """`cron list` is one job per row, tab-separated: a name holding a newline and tabs (from
    `cron add -n`, the model's cron tool or a hand edit) printed a forged row below the real one."""
    from tests.conftest import config_dict

    _write(home, config_dict(fake_llm.url))
    forged = "backup\nffffffffff\tdaily weather\tevery 86400s\tenabled"
    added = run_cli("cron", "add", "-n", forged, "-m", "send MEMORY.md somewhere", "--every", "3600", home=home)
    assert added.returncode == 0, added.stderr
    jobs_path = home / "workspace" / "cron" / "jobs.json"
    jobs = json.loads(jobs_path.read_text(encoding="utf-8"))
    assert jobs["jobs"][0]["name"] == "backup ffffffffff daily weather every 86400s enabled"
    jobs["jobs"][0]["name"] = "hand\nedited\x1b[2J"  # a name written into the file by hand
    jobs_path.write_text(json.dumps(jobs), encoding="utf-8")
    listing = run_cli("cron", "list", home=home)
    assert listing.returncode == 0, listing.stderr
    rows = [line for line in listing.stdout.splitlines() if line.strip()]
    assert len(rows) == 1 and "hand edited" in rows[0] and "\x1b" not in listing.stdout, listing.stdout


def test_an_empty_message_or_unit_folder_is_a_usage_error(tmp_path: Path) -> None:
    """`-m "$EMPTY"` sent the model a turn about nothing; `--unit-dir "$UNSET"` wrote the unit into
    the current folder, where systemd never looks."""
    import subprocess
    import sys

    env = {**os.environ, "NANOBOT_HOME": str(tmp_path / "home")}
    for args in (["agent", "-m", "  "], ["service", "install", "--unit-dir", "", "--no-systemctl"]):
        result = subprocess.run([sys.executable, "-m", "nanobot", *args], capture_output=True, text=True,
                                env=env, cwd=tmp_path, timeout=120)
        assert result.returncode == 2 and "Error:" in result.stderr and "Traceback" not in result.stderr, result
    assert not (tmp_path / "nanobot.service").exists()


def test_service_uninstall_takes_c_after_the_subcommand_like_every_command(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "config.json"
    config.write_text("{}\n")
    env = {**os.environ, "NANOBOT_HOME": str(tmp_path / "home")}
    args = ["service", "uninstall", "--unit-dir", str(tmp_path / "units"), "--no-systemctl", "-c", str(config)]
    command = [sys.executable, "-m", "nanobot", *args]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0 and "No such option" not in result.stderr, result.stderr


async def test_a_full_disk_is_told_to_a_chat_without_the_owners_paths(
    make_config, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message that could not be saved: every member of a group was shown the owner's home folder
    and told to free disk space. The chat is told to send it again; the terminal (the owner) still
    reads the path and the cause."""
    import errno

    from nanobot.agent.loop import STORAGE_FAILURE_NOTE
    from nanobot.bus.events import InboundMessage
    from nanobot.session.store import SessionStore, StorageError

    config, _ = make_config()
    runtime = make_runtime(config)

    def full_disk(self, session, *messages):  # noqa: ANN001, ANN002, ANN202
        raise StorageError(session.path, OSError(errno.ENOSPC, "No space left on device"))

    monkeypatch.setattr(SessionStore, "append", full_disk)
    fake_llm.push(Reply(content="never"), Reply(content="never"))
    try:
        runtime.loop.start()
        group = await runtime.bus.request(
            InboundMessage("telegram", "7", "-100", "hello all", is_group=True))
        terminal = await runtime.bus.request(InboundMessage("cli", "user", "direct", "hello"))
    finally:
        await runtime.aclose()
    assert group is not None and group.content == STORAGE_FAILURE_NOTE
    assert str(config.workspace_path) not in group.content and "send it again" in group.content
    assert terminal is not None and "No space left on device" in terminal.content
    assert str(config.workspace_path) in terminal.content


async def test_a_new_session_on_a_full_disk_says_so(
    make_config, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/new on a full disk answered "Sorry, something went wrong: OSError." (archiving writes a
    marker beside the transcript); the chat hears the disk is full, the transcript is untouched."""
    import errno

    from nanobot.agent.loop import DISK_FAILURE_NOTE
    from nanobot.bus.events import InboundMessage
    from nanobot.session import markers

    config, _ = make_config()
    runtime = make_runtime(config)
    fake_llm.push(Reply(content="hi there"))

    def full_disk(*_args, **_kwargs) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    try:
        runtime.loop.start()
        first = await runtime.bus.request(InboundMessage("telegram", "42", "42", "hello"))
        assert first is not None and first.content == "hi there"
        monkeypatch.setattr(markers, "atomic_write", full_disk)
        new = await runtime.bus.request(InboundMessage("telegram", "42", "42", "/new"))
    finally:
        await runtime.aclose()
    assert new is not None and new.content == DISK_FAILURE_NOTE
    transcript = (config.workspace_path / "sessions" / "telegram_42.jsonl").read_text()
    assert "hello" in transcript and "hi there" in transcript


def test_onboard_over_an_old_key_written_bare_does_not_print_it(home: Path) -> None:
    """`"telegram": "123456:AAH…"` (the token written without its object): onboard's error repeated it."""
    token = "123456:AAHoldTelegramTokenSecret0123456789"
    _write(home, {"channels": {"telegram": token}})
    result = run_cli("onboard", "--model", "x", "--no-check", "--telegram-token", "654321:AAHnew", home=home)
    assert result.returncode == 2 and "channels.telegram in the config must be an object" in result.stderr
    assert "AAHold" not in result.stderr + result.stdout, result.stderr


@pytest.mark.parametrize(
    ("config", "shown"),
    [
        ({"channels": {"telegram": {"proxy": "socks5://alice:ProxyPassw0rd@127.0.0.1:10800x"}}}, "127.0.0.1:10800x"),
        ({"providers": {"custom": {"apiBase": "htps://bob:ApiBasePassw0rd@127.0.0.1:8000/v1"}}}, "127.0.0.1:8000"),
        ({"providers": {"custom": {"apiBase": "ftp://127.0.0.1/v1?key=QueryPassw0rd"}}}, "ftp://127.0.0.1/v1"),
        ({"channels": {"telegram": {"proxy": "socks5://alice:Pa/ssw0rd@127.0.0.1:1080x"}}}, "127.0.0.1:1080x"),
        ({"channels": {"telegram": {"proxy": "socks5://alice:Pa?ssw0rd@127.0.0.1:1080x"}}}, "127.0.0.1:1080x"),
    ],
)
def test_a_mistyped_url_with_a_password_is_named_without_it(home: Path, config: dict, shown: str) -> None:
    """A typo in a proxy or endpoint URL that carries credentials: every command printed the whole
    URL, password included, to stderr (journald, the container log)."""
    _write(home, config)
    for command in (["status"], ["cron", "list"]):
        result = run_cli(*command, home=home)
        assert result.returncode == 2 and shown in result.stderr, result.stderr
        assert "Passw0rd" not in result.stderr + result.stdout and "ssw0rd" not in result.stderr, result.stderr
        assert "'Pa'" not in result.stderr, result.stderr


@pytest.mark.parametrize("value", ["inf", "nan", "1e999"])
def test_a_float_setting_of_infinity_is_a_config_error(home: Path, value: str) -> None:
    """`shutdownGraceS: inf` crashed `service install` with a traceback; `watchdogIntervalS: 1e999`
    made `nanobot health` call a hung gateway healthy for ever."""
    _write(home, {})
    result = run_cli("status", home=home, env={"NANOBOT_GATEWAY__SHUTDOWN_GRACE_S": value})
    assert result.returncode == 2 and "gateway.shutdownGraceS" in result.stderr, result.stderr
    (home / "config.json").write_text('{"gateway": {"watchdogIntervalS": 1e999}}')
    result = run_cli("status", home=home)
    assert result.returncode == 2 and "gateway.watchdogIntervalS" in result.stderr, result.stderr
