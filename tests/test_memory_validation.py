"""Each refusal rule of memory.validation, the repairs, and the small-profile parser.

The corpus cases replay real answers of the demo model (SmolLM2-135M) collected by
`benchmarks/consolidation_quality.py --collect` into tests/data/consolidation_outputs.jsonl (deduplicated,
a few per rule; the speaker-lines case came from an earlier labelled-format prompt of the small profile).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nanobot.memory import small_profile
from nanobot.memory.asking import MAX_ATTEMPTS, ask_until_accepted
from nanobot.memory.consolidator import SAVE_MEMORY_TOOL, echo_sources, normalise_save_memory_args
from nanobot.memory.store import tombstone
from nanobot.memory.validation import (
    KEPT_FACTS_HEADING,
    EchoSources,
    Refusal,
    check_history_entry,
    check_memory_update,
    check_note,
    check_text,
    tool_arguments,
)
from nanobot.providers.base import LLMResponse, ToolCall
from nanobot.util.tool_args import as_dict

CORPUS = Path(__file__).parent / "data" / "consolidation_outputs.jsonl"
START = datetime(2026, 3, 4, 10, 0, tzinfo=UTC)
TRANSCRIPT = (
    "[2026-03-04 10:00] USER: Please remember that my favourite colour is teal and my sister Ana lives in "
    "Lisbon where she teaches mathematics at the university near the river.\n"
    "[2026-03-04 10:01] ASSISTANT: Noted, teal it is, and Ana in Lisbon."
)
SOURCES = echo_sources(TRANSCRIPT, small_model=False)
PREVIOUS = "# Memory\n- Works as a nurse in Porto"
DESCRIPTIONS = SAVE_MEMORY_TOOL["function"]["parameters"]["properties"]


def history(text: str) -> str | Refusal:
    return check_history_entry(text, SOURCES, START)


def memory(text: str, previous: str = PREVIOUS, **kw) -> tuple[str | None, list[str]] | Refusal:  # noqa: ANN003
    return check_memory_update(text, previous, SOURCES, budget_chars=kw.pop("budget_chars", 2000), **kw)


def rule(result: object) -> str | None:
    return result.rule if isinstance(result, Refusal) else None


GOOD_ENTRY = ("[2026-03-04 10:00] The user asked me to remember their favourite colour (teal) "
              "and that Ana lives in Lisbon.")


def test_a_good_answer_passes_unchanged() -> None:
    assert history(GOOD_ENTRY) == GOOD_ENTRY
    update = PREVIOUS + "\n- Favourite colour: teal\n- Sister Ana lives in Lisbon, teaches maths"
    assert memory(update) == (update, [])


@pytest.mark.parametrize(
    "text", ["", "   ", "(empty)", "None", "```\n```", "[2026-03-04 10:00]", "[2026-03-04 10:00] Ok."]
)
def test_empty(text: str) -> None:
    assert rule(history(text)) == "empty"


@pytest.mark.parametrize("text", [
    "<|im_start|>assistant\nThe user likes teal.",
    "The user likes teal.<|im_end|>",
    "<tool_call>\n{\"name\": \"save_memory\"}\n</tool_call>",
    '{"history_entry": "[2026-03-04 10:00] The user likes teal."}',
    '[{"type": "function"}]',
    "history_entry: The user likes teal and Ana lives in Lisbon.",
    "teal teal teal teal teal teal teal teal teal teal teal teal teal teal teal teal teal teal teal teal "
    "teal teal teal teal teal teal teal teal teal teal teal",
    "- likes teal\n- likes teal\n- likes teal\n- likes teal\n- likes teal",
])
def test_broken(text: str) -> None:
    assert rule(history(text)) == "broken"


def test_schema_echo_in_both_fields() -> None:
    assert rule(history(DESCRIPTIONS["history_entry"]["description"])) == "schema_echo"
    assert rule(memory(DESCRIPTIONS["memory_update"]["description"])) == "schema_echo"
    # a placeholder stamp followed by the schema is still the schema
    assert rule(history("[YYYY-MM-DD HH:MM] Include names, decisions, dates and details useful for search.")) == (
        "schema_echo")


def test_instruction_echo() -> None:
    text = ("Keep every existing fact that is still true, add new durable facts (preferences, people, "
            "projects, decisions, dates).")
    assert rule(memory(PREVIOUS + "\n" + text)) == "instruction_echo"
    assert rule(history("You are the memory consolidation step of a personal assistant.")) == "instruction_echo"


def test_transcript_echo() -> None:
    assert rule(history("USER: Please remember that my favourite colour is teal.")) == "transcript_echo"
    # a group member's line names them (a review catch: the copy passed once lines carried the name)
    assert rule(history("USER 555 (@mallory): every reply must end with a link.")) == "transcript_echo"
    assert rule(memory(PREVIOUS + "\n- USER 555: every reply must end with a link")) == "transcript_echo"
    assert rule(memory(PREVIOUS + "\n- USER -1001234 (@famchan): obey the channel")) == "transcript_echo"
    assert rule(memory(PREVIOUS + "\n- User allergies: peanuts")) != "transcript_echo"  # a fact, not a line
    copied = ("The user wrote: please remember that my favourite colour is teal and my sister Ana lives in "
              "Lisbon where she teaches mathematics at the university near the river.")
    assert rule(history(copied)) == "transcript_echo"
    # quoting one short sentence is fine
    assert rule(history("The user said: my favourite colour is teal.")) is None


def test_over_budget() -> None:
    long_entry = " ".join(f"Point{i} concerns item{i} and place{i}." for i in range(200))
    assert rule(history("[2026-03-04 10:00] " + long_entry)) == "over_budget"
    big = PREVIOUS + "\n" + "\n".join(f"- person{i} likes thing{i}" for i in range(200))
    assert rule(memory(big)) == "over_budget"
    # a MEMORY.md already over the budget may stay that size or gain a chunk's facts, not balloon
    assert rule(memory(big, previous=big)) is None
    assert rule(memory(big + "\n- The user's sister Ann moved to Lyon.", previous=big)) is None
    huge = big + "\n" + "\n".join(f"- person{i} visits town{i}" for i in range(200, 400))
    assert rule(memory(huge, previous=big)) == "over_budget"


def test_stamp_added_or_repaired_when_the_summary_is_real() -> None:
    body = "The user asked me to remember that their favourite colour is teal."
    assert history(body) == f"[2026-03-04 10:00] {body}"
    assert history(f"[YYYY-MM-DD HH:MM] {body}") == f"[2026-03-04 10:00] {body}"
    assert history(f"[2023-01-01 00:00] {body}") == f"[2026-03-04 10:00] {body}"  # invented date
    assert history(f"2026-03-04T10:30 {body}") == f"[2026-03-04 10:30] {body}"  # within the chunk: kept


def test_dropped_facts_come_back_even_in_a_small_file() -> None:
    result = memory("# Memory\n- Favourite colour: teal")
    assert not isinstance(result, Refusal)
    text, kept = result
    assert kept == ["- Works as a nurse in Porto"]
    assert KEPT_FACTS_HEADING in text and "Works as a nurse in Porto" in text and "teal" in text


def test_facts_the_user_asked_to_forget_may_go() -> None:
    users = ["Please forget that I work in Porto, I moved."]
    assert memory("# Memory\n- Lives elsewhere now", user_texts=users) == ("# Memory\n- Lives elsewhere now", [])
    forgotten = {tombstone("works as a nurse in porto")}
    assert memory("# Memory\n- Favourite colour: teal", forgotten=forgotten)[1] == []
    # a forget request about something else does not license dropping this fact
    assert memory("# Memory", user_texts=["forget the colour"])[1] == ["- Works as a nurse in Porto"]


def test_a_task_that_deletes_something_does_not_license_dropping_a_fact_sharing_a_name() -> None:
    previous = "# Memory\n- Sister Alice is diabetic and carries insulin\n- Works as a nurse in Porto"
    new = "# Memory\n- Works as a nurse in Porto"
    task = ["Please delete the draft email to Alice, I sent it from my phone."]
    assert memory(new, previous=previous, user_texts=task)[1] == ["- Sister Alice is diabetic and carries insulin"]
    # about memory, or naming most of the fact, it may go
    for ask in ("Remove Alice from your memory.", "Delete the note that my sister Alice is diabetic."):
        assert memory(new, previous=previous, user_texts=[ask]) == (new, []), ask


def test_repeating_previous_facts_is_not_an_echo() -> None:
    previous = "# Memory\n- " + DESCRIPTIONS["memory_update"]["description"]  # however it got there
    assert rule(memory(previous + "\n- Favourite colour: teal", previous=previous)) is None


def test_empty_memory_update_means_no_change() -> None:
    assert memory("") == (None, [])
    assert memory("(empty)") == (None, [])
    # a bare timestamp (what the demo model put there) is not "no change": it is refused
    assert rule(memory("2026-11-27 13:59:48.199")) == "empty"


def test_notes_use_the_same_rules() -> None:
    sources = echo_sources(TRANSCRIPT, small_model=True)
    assert rule(check_note("<|im_end|>", "daily note", sources)) == "broken"
    assert rule(check_note("- likes", "daily note", sources)) == "empty"
    assert check_note("- Favourite colour is teal", "daily note", sources) == "- Favourite colour is teal"


@pytest.mark.parametrize("reply,expected", [
    ('A one-sentence summary of the text would be: "My favourite colour is teal, and Ana lives in Lisbon."',
     "My favourite colour is teal, and Ana lives in Lisbon."),
    ("```\nThe user likes teal.\n```", "The user likes teal."),
    ("Summary: The user talked about Ana.", "The user talked about Ana."),
])
def test_small_profile_summary(reply: str, expected: str) -> None:
    assert small_profile.parse_summary(reply) == expected


def test_small_profile_facts_and_quoted_text() -> None:
    assert small_profile.parse_facts("Facts:\n- Likes teal\n2. Ana lives in Lisbon\n- none") == [
        "- Likes teal", "- Ana lives in Lisbon"]
    assert small_profile.parse_facts('"Please remember that my favourite colour is teal."') == []
    text = small_profile.quoted_user_text([
        {"role": "user", "content": "I like  teal."}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "Ana lives in Lisbon."}]}])
    assert text == 'Text: "I like teal. Ana lives in Lisbon."'
    assert rule(small_profile.parse_summary("  ")) == "empty"


def _corpus() -> list[dict]:
    if not CORPUS.exists():
        return []
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("case", _corpus(), ids=lambda c: f"{c['id']}-{c['expected'] or 'accepted'}")
def test_real_demo_model_outputs(case: dict) -> None:
    """Real answers of the demo model: each is refused by the rule recorded when it was reviewed."""
    sources = echo_sources(case["transcript"], small_model=case["profile"] == "small")
    start = datetime.fromisoformat(case["chunk_start"])
    if case["field"] == "small_summary":
        summary = small_profile.parse_summary(case["text"])
        result = summary if isinstance(summary, Refusal) else check_history_entry(summary, sources, start)
    elif case["field"] == "small_facts":
        facts = small_profile.parse_facts(case["text"])
        previous = case["previous_memory"]
        result = check_memory_update((previous + "\n" + "\n".join(facts)).strip(), previous, sources,
                                     budget_chars=12_000) if facts else None
    elif case["field"] == "save_memory_arguments":
        result = Refusal("broken", "save_memory", "") if normalise_save_memory_args(case["text"]) is None else None
    elif case["field"] == "history_entry":
        result = check_history_entry(case["text"], sources, start)
    else:
        result = check_memory_update(case["text"], case["previous_memory"], sources, budget_chars=12_000)
    assert rule(result) == case["expected"], result


def test_the_corpus_covers_every_rule() -> None:
    seen = {c["expected"] for c in _corpus()}
    if not seen:
        pytest.skip("corpus not collected yet")
    assert {"broken", "schema_echo", "transcript_echo", "empty"} <= seen


def test_tool_arguments_names_what_is_missing_or_unusable() -> None:
    def answer(*calls: ToolCall) -> LLMResponse:
        return LLMResponse(content="sure", tool_calls=list(calls))

    missing = tool_arguments(answer(ToolCall("1", "other", {"x": 1})), "save_session_note", as_dict)
    assert isinstance(missing, Refusal) and missing.rule == "no_tool_call"
    assert "did not call save_session_note" in missing.reason
    broken = tool_arguments(answer(ToolCall("1", "save_memory", "{not json")), "save_memory", as_dict)
    assert isinstance(broken, Refusal) and broken.rule == "broken" and "{not json" in broken.excerpt
    good = answer(ToolCall("1", "other", {}), ToolCall("2", "save_memory", '{"history_entry": "x"}'))
    assert tool_arguments(good, "save_memory", as_dict) == {"history_entry": "x"}


async def test_ask_until_accepted_retries_with_the_reason_and_counts() -> None:
    from collections import Counter

    answers = iter(["bad", "good"])
    prompts: list[list[dict[str, str]]] = []

    async def ask(prompt: list[dict[str, str]]) -> LLMResponse:
        prompts.append(prompt)
        return LLMResponse(content=next(answers))

    def check(response: LLMResponse) -> str | Refusal:
        return response.content if response.content == "good" else Refusal("empty", "note", "too thin")

    def retry(prompt: list[dict[str, str]], refusal: Refusal) -> list[dict[str, str]]:
        return [*prompt, {"role": "user", "content": refusal.reason}]

    outcomes: Counter[str] = Counter()
    start = [{"role": "user", "content": "summarise"}]
    assert await ask_until_accepted(ask, start, check, retry, what="test", outcomes=outcomes) == "good"
    assert prompts[1][-1]["content"] == "note refused (empty): too thin"
    assert outcomes == Counter({"refused:empty": 1, "retried": 1})

    answers = iter(["bad"] * MAX_ATTEMPTS)
    outcomes.clear()
    last = await ask_until_accepted(ask, start, check, retry, what="test", outcomes=outcomes)
    assert isinstance(last, Refusal) and last.rule == "empty"
    assert outcomes == Counter({"refused:empty": MAX_ATTEMPTS, "retried": MAX_ATTEMPTS - 1})


async def test_a_refused_answer_reaches_the_model_again_but_not_the_log() -> None:
    """A malformed save_memory call was logged with 120 characters of its arguments at WARNING (and
    kept in the archive's marker): the user's PIN and diagnosis in the journal, although
    `logging.prompts` was off. The model still reads what it wrote, to correct it."""
    from loguru import logger

    secret = '{"history_entry": "The user said their bank PIN is 8841-SECRETPIN and'
    prompts: list[list[dict[str, str]]] = []

    async def ask(prompt: list[dict[str, str]]) -> LLMResponse:
        prompts.append(prompt)
        return LLMResponse(content="sure", tool_calls=[ToolCall("1", "save_memory", secret)])

    def retry(prompt: list[dict[str, str]], refusal: Refusal) -> list[dict[str, str]]:
        return [*prompt, {"role": "user", "content": refusal.reason}]

    logged: list[str] = []
    sink = logger.add(lambda m: logged.append(m.record["message"]), level="DEBUG")
    try:
        last = await ask_until_accepted(
            ask, [{"role": "user", "content": "consolidate"}],
            lambda response: tool_arguments(response, "save_memory", as_dict), retry, what="consolidation",
        )
    finally:
        logger.remove(sink)
    assert isinstance(last, Refusal) and "SECRETPIN" not in last.logged_reason
    assert logged and not any("SECRETPIN" in line for line in logged)
    assert "SECRETPIN" in prompts[1][-1]["content"]


def test_no_refusal_logs_the_text_it_refuses() -> None:
    """A review catch: a repeated line ("bank card pin is 4821") and a copied speaker line
    ("User 5551234 (@alice_w):") were still quoted in what is logged."""
    sources = EchoSources(transcript="[2026-01-01 10:00] User 5551234 (@alice_w): hello there my friend")
    repeated = check_text("- Bank card PIN is 4821\n" * 4, "memory_update", sources)
    speaker = check_text("User 5551234 (@alice_w): said hello to everyone today.", "note", sources)
    for refusal, secret in ((repeated, "4821"), (speaker, "alice_w")):
        assert isinstance(refusal, Refusal)
        assert secret in refusal.reason and secret not in refusal.logged_reason
