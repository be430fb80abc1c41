"""Secrets that a tool stumbles on (a key copied into a workspace file, a variable passed to exec on
purpose) are redacted before the result reaches the LLM, the session file or the chat."""

from __future__ import annotations

from pathlib import Path

from tests.agent_helpers import make_runtime, messages_of, session_path
from tests.fakes.llm_server import FakeLLMServer, Reply

PROVIDER_KEY = "sk-proj-AbCdEf0123456789xyzLIVEKEY"
TG_TOKEN = "7000001:AAHredactionTokenForTests_abcdefgh"
EMBED_KEY = "embedding-key-5f2e9d1c7b"
ENV_SECRET = "github-pat-11AAAAexampleSecret"


async def test_secrets_in_tool_results_never_reach_llm_session_or_chat(
    make_config,
    fake_llm: FakeLLMServer,
    monkeypatch,  # noqa: ANN001
) -> None:
    monkeypatch.setenv("GITHUB_PAT", ENV_SECRET)  # e.g. for a gh skill, in the daemon's environment
    config, _ = make_config(
        **{
            "providers.openai.apiKey": PROVIDER_KEY,
            "channels.telegram.token": TG_TOKEN,
            "memory.search.embeddingApiKey": EMBED_KEY,
            "tools.exec.env": {"GITHUB_PAT": ENV_SECRET},
            "tools.exec.sandbox": "bwrap",
        }
    )
    runtime = make_runtime(config)
    ws = config.workspace_path
    (ws / "leak.txt").write_text(f"openai={PROVIDER_KEY}\ntelegram={TG_TOKEN}\nembed={EMBED_KEY}\n")
    fake_llm.push(
        Reply(content=None, tool_calls=[{"name": "read_file", "arguments": {"path": "leak.txt"}}]),
        Reply(content=None, tool_calls=[{"name": "exec", "arguments": {"command": "echo pat=$GITHUB_PAT"}}]),
        Reply(content="done"),
    )
    reply = await runtime.ask("show me leak.txt and the token", session_key="cli:direct")
    await runtime.aclose()
    sent_to_llm = repr(fake_llm.requests)
    stored = Path(session_path(config)).read_text()
    for secret in (PROVIDER_KEY, TG_TOKEN, EMBED_KEY, ENV_SECRET):
        assert secret not in sent_to_llm
        assert secret not in stored
        assert secret not in reply
    tool_results = [m["content"] for m in messages_of(session_path(config)) if m["role"] == "tool"]
    assert "openai=***" in tool_results[0] and "pat=***" in tool_results[1]
