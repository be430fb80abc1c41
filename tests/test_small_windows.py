"""Turns on small context windows, against a model server that refuses every request over its window
(as real providers do, HTTP 400 "context_length_exceeded"), counted with the product's own estimate.

Before: a 20,000-character paste on a 4,096-token window failed every time (and the advice to send
/new could not help); on 2,048 tokens even "hello" failed, the tool definitions alone over the
budget; one big tool result was left out whole, so the model saw nothing of the file; the memory
flush sent the whole unconsolidated tail and asked for more than maxTokens.
"""

from __future__ import annotations

from typing import Any

import pytest

from nanobot.agent.factory import build_runtime
from nanobot.bus.events import InboundMessage
from nanobot.providers.tokens import count_messages, count_tools
from tests.agent_helpers import status_of
from tests.fakes.llm_server import FakeLLMServer, Reply

PASTE = "".join(f"line {n}: the log says the disk is fine and the backup ran at {n % 24:02d}:00\n" for n in range(400))


def request_tokens(body: dict[str, Any]) -> int:
    return count_messages(body["messages"]) + count_tools(body.get("tools") or [])


def strict_model(window: int, max_tokens: int, answer: Any) -> Any:
    """A responder refusing what would not fit the window (the prompt and the reply it asks room for)."""

    def respond(body: dict[str, Any]) -> Reply:
        asked = body.get("max_tokens") or body.get("max_completion_tokens") or 0
        assert asked <= max_tokens, f"asked for {asked} reply tokens, more than maxTokens {max_tokens}"
        if request_tokens(body) + asked > window:
            return Reply(status=400, error_message="This model's maximum context length is exceeded "
                         "(context_length_exceeded)")
        return answer(body)

    return respond


def turns(server: FakeLLMServer) -> list[dict[str, Any]]:
    """The requests of chat turns (not the memory's own: consolidation, flush)."""
    memory_tools = {"save_memory", "write_daily_note", "save_session_note"}
    return [r for r in server.requests if not {t["function"]["name"] for t in r.get("tools") or []} & memory_tools
            and "memory consolidation" not in str(r["messages"][0].get("content", ""))]


def small(make_config, window: int, max_tokens: int, **extra: Any):  # noqa: ANN001, ANN201
    config, _ = make_config(
        **{"agents.defaults.contextWindowTokens": window, "agents.defaults.maxTokens": max_tokens, **extra}
    )
    return config


async def test_a_long_paste_on_a_small_window_is_answered_and_kept_whole(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    config = small(make_config, 4096, 512)
    fake_llm.responder = strict_model(4096, 512, lambda body: Reply(content="The backups ran every hour."))
    runtime = build_runtime(config)
    try:
        reply = await runtime.ask(PASTE + "\nWhat does this log say?", session_key="telegram:1")
    finally:
        await runtime.aclose()
    assert reply == "The backups ran every hour."
    sent = turns(fake_llm)[-1]["messages"][-1]["content"]
    assert "What does this log say?" in sent and "line 0:" in sent and "characters omitted" in sent, sent[-300:]
    saved = (config.workspace_path / "sessions" / "telegram_1.jsonl").read_text()
    assert saved.count("the backup ran at") == 400  # the transcript keeps every line


@pytest.mark.parametrize("window", [2048, 3072])
async def test_hello_on_a_tiny_window_is_answered(make_config, fake_llm: FakeLLMServer, window: int) -> None:  # noqa: ANN001
    config = small(make_config, window, 256)
    fake_llm.responder = strict_model(window, 256, lambda body: Reply(content="Hello!"))
    runtime = build_runtime(config)
    try:
        assert await runtime.ask("hello", session_key="telegram:1") == "Hello!"
        assert await runtime.ask("how are you?", session_key="telegram:1") == "Hello!"
    finally:
        await runtime.aclose()
    offered = {t["function"]["name"] for t in turns(fake_llm)[-1].get("tools") or []}
    assert offered <= {"read_file", "write_file", "edit_file", "list_dir"}  # what fits, if anything


@pytest.mark.parametrize("window", [4096, 8192])
async def test_a_small_window_with_maxtokens_left_at_its_default_still_answers(
    make_config, fake_llm: FakeLLMServer, window: int  # noqa: ANN001
) -> None:
    """Moving to an 8k model with contextWindowTokens set and maxTokens left at 8,192: every request
    asked for 8,192 reply tokens and the server refused them all, the first of a fresh session too."""
    config = small(make_config, window, 8192)
    fake_llm.responder = strict_model(window, 8192, lambda body: Reply(content="fine"))
    runtime = build_runtime(config)
    try:
        for n in range(3):
            assert await runtime.ask(f"question {n}", session_key="telegram:1") == "fine"
    finally:
        await runtime.aclose()
    assert {r["max_tokens"] for r in turns(fake_llm)} == {window // 4}


async def test_a_big_tool_result_is_cut_to_fit_not_left_out(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    config = small(make_config, 4096, 512)
    config.workspace_path.mkdir(parents=True, exist_ok=True)
    (config.workspace_path / "big.txt").write_text("FIRST LINE of the report\n" + "filler text here\n" * 15_000)

    def answer(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            return Reply(content="read it")
        return Reply(content=None, tool_calls=[{"name": "read_file", "arguments": {"path": "big.txt"}}])

    fake_llm.responder = strict_model(4096, 512, answer)
    runtime = build_runtime(config)
    try:
        assert await runtime.ask("read big.txt", session_key="telegram:1") == "read it"
    finally:
        await runtime.aclose()
    result = turns(fake_llm)[-1]["messages"][-1]["content"]
    assert result.startswith("FIRST LINE of the report") and "characters omitted" in result, result[:200]
    # one cut of the whole result, so the size it names is the result's (cut twice, it named the
    # 16,000 characters of maxToolResultChars)
    total = int(result.split(" characters omitted")[0].rsplit(" of ", 1)[1])
    assert total > 20_000, result[:300]


async def test_the_memory_flush_fits_the_window_and_maxtokens(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    config = small(make_config, 4096, 512)
    fake_llm.responder = strict_model(4096, 512, lambda body: Reply(content="NO_REPLY"))
    runtime = build_runtime(config)
    tail = [
        {"role": "user" if k % 2 == 0 else "assistant", "content": f"message {k}: " + "some words " * 300}
        for k in range(12)
    ]
    try:
        assert await runtime.agent.lifecycle.flusher.flush(tail, private=True)
    finally:
        await runtime.aclose()
    sent = fake_llm.requests[-1]
    assert "message 11:" in sent["messages"][-1]["content"]  # the newest part is kept


async def test_the_memory_prices_the_tools_the_turn_is_offered(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """The lifecycle priced every tool schema while the turn was offered the core tools only: every
    turn counted as over the budget, and the history was consolidated away while the real prompt fit."""
    config = small(make_config, 2048, 256)
    fake_llm.responder = strict_model(2048, 256, lambda body: Reply(content="Noted."))
    runtime = build_runtime(config)
    try:
        for n in range(6):
            await runtime.ask(f"note number {n}: my locker is {n}", session_key="telegram:1")
        status = status_of(runtime, "telegram:1")
    finally:
        await runtime.aclose()
    memory_calls = [r for r in fake_llm.requests if r not in turns(fake_llm)]
    assert memory_calls == [], [r["messages"][0]["content"][:80] for r in memory_calls]
    assert "note number 0" in str(turns(fake_llm)[-1]["messages"])  # the history is still sent
    context = status.split("Context: ~")[1].split(" prompt tokens")[0]  # "<used> of <budget>"
    used, budget = (int(x.replace(",", "")) for x in context.split(" of "))
    assert used <= budget, status


async def test_a_resumed_turn_refused_as_too_long_keeps_its_message_and_saved_steps(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """A turn run again after a restart (its message and tool steps saved) that the provider refused
    as over its window was sent again as [system, <its last tool result>]: the user's message left
    out and a tool result without its call, which real providers refuse. The older history goes."""
    from nanobot.bus.events import RESUME_KEY, InboundMessage
    from nanobot.timeutil import now

    config = small(make_config, 65536, 1024)
    runtime = build_runtime(config)
    sessions = runtime.agent.sessions
    session = sessions.get("telegram:5")
    stamp = now().isoformat()
    for n in range(1):
        sessions.append(session, {"role": "user", "content": f"older question {n}", "timestamp": stamp},
                        {"role": "assistant", "content": f"older answer {n}", "timestamp": stamp})
    asked = "check the two log files and tell me which one has errors"
    sessions.append(session, {"role": "user", "content": asked, "timestamp": stamp, "sender_id": "5"})
    for n in range(2):  # the steps saved before the restart
        call = {"id": f"call_{n}", "type": "function",
                "function": {"name": "read_file", "arguments": f'{{"path": "log{n}.txt"}}'}}
        sessions.append(session, {"role": "assistant", "content": "", "timestamp": stamp, "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": f"call_{n}", "name": "read_file",
                         "content": f"log{n}: all fine", "timestamp": stamp})
    fake_llm.push(Reply(status=400, error_message="maximum context length exceeded (context_length_exceeded)"))
    fake_llm.responder = lambda body: Reply(content="Neither has errors.")
    runtime.loop.start()
    try:
        out = await runtime.bus.request(InboundMessage("telegram", "5", "5", asked, metadata={RESUME_KEY: True}))
    finally:
        await runtime.aclose()
    assert out is not None and out.content == "Neither has errors."
    retried = turns(fake_llm)[1]["messages"]
    roles = [m["role"] for m in retried]
    assert roles[0] == "system" and roles[-4:] == ["assistant", "tool", "assistant", "tool"], roles
    assert asked in str(retried[-5]["content"]) and retried[-5]["role"] == "user"
    assert "older question 0" not in str(retried)  # the older half is what was left out


async def test_the_answer_at_the_tool_step_limit_fits_the_window(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """At the tool-step limit the last call (answer now, without tools) went out with every result
    whole: each result keeps at least a few hundred tokens, so many of them went over the window, the
    call was refused and the user got the canned "I stopped after N tool steps" for work that was done."""
    config = small(make_config, 16384, 1024, **{"agents.defaults.maxToolIterations": 3})
    config.workspace_path.mkdir(parents=True, exist_ok=True)
    for n in range(16):
        (config.workspace_path / f"part{n}.txt").write_text(f"part {n} of the report\n" + "filler words here\n" * 1_700)
    reads = [{"name": "read_file", "arguments": {"path": f"part{n}.txt"}} for n in range(16)]

    def answer(body: dict[str, Any]) -> Reply:
        if not body.get("tools"):
            return Reply(content="All sixteen parts read: the report is complete.")
        if body["messages"][-1]["role"] != "tool":  # a small first step, then two rounds of reads
            return Reply(content=None, tool_calls=[{"name": "list_dir", "arguments": {"path": "."}}])
        return Reply(content=None, tool_calls=reads)

    fake_llm.responder = strict_model(16384, 1024, answer)
    runtime = build_runtime(config)
    try:
        reply = await runtime.ask("read every part of the report", session_key="telegram:1")
    finally:
        await runtime.aclose()
    assert reply == "All sixteen parts read: the report is complete.", reply


@pytest.mark.parametrize("window", [3072, 65536])
async def test_the_system_prompt_asks_only_for_the_memory_tools_a_turn_is_offered(make_config, window: int) -> None:  # noqa: ANN001
    """On a 3,072-token window turns are offered the core file tools only, yet the system prompt
    told the model to call memory_search: a real model wrote that section into its replies, and the
    archive into HISTORY.md."""
    config = small(make_config, window, 512)
    runtime = build_runtime(config)
    try:
        system, offered, _ = runtime.agent.estimator.prompt(True, None)
    finally:
        await runtime.aclose()
    searchable = offered is None or "memory_search" in offered
    assert ("memory_search" in system) == searchable, (window, offered)


def recall_mismatches(server: FakeLLMServer) -> list[tuple[bool, bool]]:
    """(the recall section asks for memory_search, memory_search offered) of each chat turn where
    they disagree."""
    seen = []
    for body in turns(server):
        offered = "memory_search" in {t["function"]["name"] for t in body.get("tools") or []}
        asked = "## Memory recall" in str(body["messages"][0]["content"])
        if asked != offered:
            seen.append((asked, offered))
    return seen


async def group_then_owner(config, fake_llm: FakeLLMServer) -> tuple[dict[str, Any], dict[str, Any]]:  # noqa: ANN001
    """The model requests of one group turn, then one of the owner's private chat."""
    fake_llm.responder = lambda body: Reply(content="Noted.")
    runtime = build_runtime(config)
    runtime.loop.start()
    try:
        await runtime.bus.request(InboundMessage("telegram", "5", "-100", "who was at the meeting?", is_group=True))
        await runtime.ask("who was at the meeting?", session_key="telegram:5", sender_id="5")
    finally:
        await runtime.aclose()
    group, owner = turns(fake_llm)
    return group, owner


async def test_a_group_turn_is_not_asked_to_call_memory_search(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """A group (memory.shareInGroups off) is never offered memory_search, yet its system prompt told
    the model to call it before answering about people and dates: a model writes the call into
    its reply. The owner's chat keeps both."""
    config = small(make_config, 65536, 1024)
    group, owner = await group_then_owner(config, fake_llm)
    assert "## Memory recall" not in str(group["messages"][0]["content"])
    assert "## Memory recall" in str(owner["messages"][0]["content"])
    assert recall_mismatches(fake_llm) == []
    # the always-on memory skill told the group's model to search memory too
    assert "## Skill: memory" not in str(group["messages"][0]["content"])
    assert "## Skill: memory" in str(owner["messages"][0]["content"])


async def test_a_group_sharing_memory_keeps_the_memory_skill(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """With memory.shareInGroups on a group is offered memory_search: the skill and the recall
    section stay in its prompt."""
    config = small(make_config, 65536, 1024)
    config.memory.share_in_groups = True
    fake_llm.responder = lambda body: Reply(content="Noted.")
    runtime = build_runtime(config)
    runtime.loop.start()
    try:
        await runtime.bus.request(InboundMessage("telegram", "5", "-100", "who was at the meeting?", is_group=True))
    finally:
        await runtime.aclose()
    (group,) = turns(fake_llm)
    assert "memory_search" in {t["function"]["name"] for t in group.get("tools") or []}
    assert "## Skill: memory" in str(group["messages"][0]["content"])
    assert recall_mismatches(fake_llm) == []


async def test_with_memory_search_off_a_group_is_still_not_shown_the_memory_skill(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """memory_search is not there at all: the skill was never "withheld" and told groups and
    guests how to edit and forget the owner's MEMORY.md. Trust decides, not registration."""
    config = small(make_config, 65536, 1024, **{"memory.search.enabled": False})
    group, owner = await group_then_owner(config, fake_llm)
    assert "## Skill: memory" not in str(group["messages"][0]["content"])
    assert "## Skill: memory" in str(owner["messages"][0]["content"])


async def test_the_owner_using_a_groups_session_from_the_terminal_archives_nothing(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """`nanobot agent -s telegram:<group>` sends no is_group: compared for every session, it
    archived the group's conversation, and the group's next message archived it again."""
    config = small(make_config, 65536, 1024)
    fake_llm.responder = lambda body: Reply(content="Noted.")
    runtime = build_runtime(config)
    runtime.loop.start()
    try:
        group = InboundMessage("telegram", "42", "-100777", "saturday: picnic at the lake", is_group=True)
        await runtime.bus.request(group)
        await runtime.ask("what did the group plan?", session_key="telegram:-100777")
        await runtime.bus.request(InboundMessage("telegram", "42", "-100777", "bring a blanket", is_group=True))
    finally:
        await runtime.aclose()
    assert not list((config.workspace_path / "sessions" / "archive").glob("*.jsonl"))
    asked = [r for r in turns(fake_llm) if "what did the group plan?" in str(r["messages"][-1]["content"])]
    assert "picnic at the lake" in str(asked[0]["messages"])


async def test_memory_grown_after_start_takes_the_recall_section_with_the_tool(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """The section was decided once at start: a MEMORY.md that grew past the room for the memory
    tools left the turn without memory_search but still told to call it."""
    mismatches = []
    for window in range(3328, 4224, 128):
        fake_llm.requests.clear()
        config = small(make_config, window, 256)
        fake_llm.responder = lambda body: Reply(content="Noted.")
        memory_file = config.workspace_path / "memory" / "MEMORY.md"
        memory_file.parent.mkdir(parents=True, exist_ok=True)
        memory_file.write_text("# Memory\n")
        runtime = build_runtime(config)
        try:
            await runtime.ask("hello", session_key="telegram:5", sender_id="5")
            memory_file.write_text("# Memory\n" + "".join(f"- fact {n}: the blue folder holds plan {n}\n"
                                                          for n in range(120)))
            await runtime.ask("hello again", session_key="telegram:5", sender_id="5")
        finally:
            await runtime.aclose()
        mismatches += [(window, m) for m in recall_mismatches(fake_llm)]
    assert mismatches == []


@pytest.mark.parametrize("share", [False, True])
async def test_a_group_sessions_estimate_prices_the_tools_its_turns_are_sent(
    make_config, fake_llm: FakeLLMServer, share: bool  # noqa: ANN001
) -> None:
    """The memory lifecycle priced a group's next prompt with every tool and the recall section,
    which its turns never get (memory tools, exec, MCP servers withheld there): its talk was
    consolidated before its prompt was full. With memory shared the section stays and exec was
    still priced."""
    from nanobot.providers.tokens import count_message
    from nanobot.session.history import history_tokens

    config = small(make_config, 65536, 1024, **{"memory.shareInGroups": share})
    fake_llm.responder = lambda body: Reply(content="Noted.")
    runtime = build_runtime(config)
    runtime.loop.start()
    try:
        await runtime.bus.request(InboundMessage("telegram", "5", "-100", "who was at the meeting?", is_group=True))
        session = runtime.agent.sessions.get("telegram:-100")
        estimate = runtime.agent.estimator(session, share)
    finally:
        await runtime.aclose()
    sent = turns(fake_llm)[-1]
    expected = count_message(sent["messages"][0]) + count_tools(sent["tools"]) + history_tokens(session)
    assert estimate == expected, (estimate, expected)


async def test_a_message_the_model_counts_far_above_the_estimate_is_cut_until_it_fits(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """A model whose tokenizer splits digits one by one (the embedded demo model) refused a CSV
    paste that the estimate said fits: with no history left to leave out, the turn failed every
    time. The message is now cut in its middle until the model takes it; the transcript keeps it."""
    config = small(make_config, 65536, 512)
    paste = "".join(f"{n:06d},{n * 7 % 1000:04d},{n * 13 % 997:05d}\n" for n in range(2_000))

    def answer(body: dict[str, Any]) -> Reply:
        if len(str(body["messages"][-1]["content"])) > 12_000:  # this model's real limit
            return Reply(status=400, error_message="maximum context length exceeded (context_length_exceeded)")
        return Reply(content="Two thousand rows.")

    fake_llm.responder = answer
    runtime = build_runtime(config)
    try:
        reply = await runtime.ask(paste + "How many rows?", session_key="telegram:1")
    finally:
        await runtime.aclose()
    assert reply == "Two thousand rows.", reply
    sent = turns(fake_llm)[-1]["messages"][-1]["content"]
    assert "000000,0000,00000" in sent and "How many rows?" in sent and "omitted" in sent, sent[-300:]
    saved = (config.workspace_path / "sessions" / "telegram_1.jsonl").read_text()
    assert all(f"{n:06d}," in saved for n in range(2_000))  # the whole paste is kept


@pytest.mark.parametrize("share", [False, True])
async def test_a_retried_group_turn_is_priced_as_sent(make_config, fake_llm: FakeLLMServer, share: bool) -> None:  # noqa: ANN001
    """A group's prompt refused as over the window is priced again by the runner: it counted the
    schemas of tools the group is never sent (exec, the memory tools, MCP servers), so tool results
    were cut smaller than the real prompt needed."""
    from nanobot.providers.tokens import count_message

    config = small(make_config, 65536, 1024, **{"memory.shareInGroups": share})
    calls = {"n": 0}

    def respond(body: dict[str, Any]) -> Reply:
        calls["n"] += 1
        if calls["n"] == 2:  # the second turn's first request
            return Reply(status=400, error_message="maximum context length exceeded (context_length_exceeded)")
        return Reply(content="Noted.")

    fake_llm.responder = respond
    runtime = build_runtime(config)
    runner = runtime.agent.runner
    priced: list[int] = []
    real = runner._tokens
    runner._tokens = lambda convo, names: priced.append(real(convo, names)) or priced[-1]  # type: ignore[method-assign]
    runtime.loop.start()
    try:
        for text in ("first message in the group", "second message in the group"):
            await runtime.bus.request(InboundMessage("telegram", "5", "-100", text, is_group=True))
    finally:
        await runtime.aclose()
    sent = turns(fake_llm)[-1]
    assert priced == [sum(count_message(m) for m in sent["messages"]) + count_tools(sent.get("tools") or [])]


async def test_a_refused_prompt_after_a_question_given_up_is_not_sent_for_ever(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """The review: a history of one message (a question given up with /stop) came back whole from
    the halving, and a model refusing the prompt as too long got the same prompt without end."""
    from nanobot.session.store import SessionStore

    config = small(make_config, 65536, 512)
    config.workspace_path.mkdir(parents=True, exist_ok=True)
    sessions = SessionStore(config.workspace_path)
    session = sessions.get("telegram:1")
    sessions.append(session, {"role": "user", "content": "an earlier question, given up with /stop",
                               "timestamp": "2026-11-29T08:00:00+00:00", "sender_id": "1"})
    sessions.close()
    fake_llm.responder = lambda body: Reply(status=400, error_message="maximum context length exceeded "
                                            "(context_length_exceeded)")
    runtime = build_runtime(config)
    try:
        reply = await runtime.ask("hello", session_key="telegram:1")
    finally:
        await runtime.aclose()
    assert len(turns(fake_llm)) == 2, len(turns(fake_llm))  # as it was, then without the history
    assert reply and "hello" not in reply, reply
