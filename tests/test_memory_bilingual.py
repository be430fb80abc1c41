"""Memory search for a bilingual user: Chinese time expressions, chunks in another script than the
question, questions that are only a date, daily notes whose first heading is only a title, and the
one line of a chunk that answers."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path

import pytest

from nanobot.config.schema import MemorySearchConfig
from nanobot.memory.chunking import chunk_markdown
from nanobot.memory.fts import non_latin_share
from nanobot.memory.index import MemoryIndex
from nanobot.memory.ranking import TIME_WEIGHT, VECTOR_FLOOR_SHARE
from nanobot.memory.store import MemoryStore
from nanobot.memory.temporal import parse_time_range
from tests.test_memory_index import PlantedEmbedder, write

MONDAY = date(2026, 4, 20)


def _range(query: str) -> tuple[date, date] | None:
    when, _ = parse_time_range(query, MONDAY)
    return (when.first, when.last) if when else None


def test_chinese_months_weekdays_and_parts_of_a_month() -> None:
    assert _range("四月份到账的奖金是多少") == (date(2026, 4, 1), date(2026, 4, 30))
    assert _range("十二月的电费") == (date(2025, 12, 1), date(2025, 12, 31))  # the most recent December
    assert _range("2025年十一月底") == (date(2025, 11, 21), date(2025, 11, 30))
    assert _range("三月初家里断网") == (date(2026, 3, 1), date(2026, 3, 10))
    assert _range("一月中旬") == (date(2026, 1, 11), date(2026, 1, 20))
    assert _range("上周四下午的活动") == (date(2026, 4, 16), date(2026, 4, 16))
    assert _range("上个星期天") == (date(2026, 4, 19), date(2026, 4, 19))
    assert _range("这周一开会了吗") == (date(2026, 4, 20), date(2026, 4, 20))
    assert _range("星期三去了哪") == (date(2026, 4, 15), date(2026, 4, 15))  # the most recent Wednesday
    assert _range("上周我和谁吃饭") == (date(2026, 4, 13), date(2026, 4, 19))
    # Not a date: a frequency, a count of months, no month thirteen.
    assert _range("二十月") is None and _range("十十月") is None and _range("二二月") is None
    for query in ("一周一次", "每周一开会", "三个月前的事"):
        assert _range(query) is None, query
    assert parse_time_range("上周四下午的活动", MONDAY)[1] == "下午的活动"


def test_chinese_parts_of_a_year_and_of_this_or_last_month() -> None:
    assert _range("今年年初的加薪") == (date(2026, 1, 1), date(2026, 2, 28))
    assert _range("年初定的目标") == (date(2026, 1, 1), date(2026, 2, 28))  # this year
    assert _range("去年底搬的家") == _range("去年年末") == (date(2025, 11, 1), date(2025, 12, 31))
    assert _range("2025年初") == (date(2025, 1, 1), date(2025, 2, 28))
    assert _range("上个月底交的房租") == (date(2026, 3, 21), date(2026, 3, 31))
    assert _range("月初的账单") == (date(2026, 4, 1), date(2026, 4, 10))
    assert _range("本月中旬") == (date(2026, 4, 11), date(2026, 4, 20))
    assert parse_time_range("去年底搬的家", MONDAY)[1] == "搬的家"
    # A count of years or months, the mid-autumn festival, a bottom line: no date.
    for query in ("每年中秋", "十年底线", "三年初", "三个月底", "一年中最冷的时候", "每月底交房租", "正月初一"):
        assert _range(query) is None, query


def test_any_run_of_chinese_numerals_before_a_month_parses_or_is_no_date() -> None:
    # Whatever the user (or a model) types, a search never fails on the date parser.
    numerals = "〇一二三四五六七八九十两"
    runs = [a + b + c for a in numerals for b in ("", *numerals) for c in ("", *numerals)]
    for run in runs:
        for query in (f"{run}月", f"{run}月底", f"上周{run}", f"星期{run}"):
            when, _ = parse_time_range(query, MONDAY)
            assert when is None or when.first <= when.last, query


async def test_a_question_that_is_only_a_date_finds_the_notes_of_that_day(tmp_path: Path) -> None:
    # After "last Saturday" is taken out only stop words remain; they must not decide the ranking.
    write(tmp_path, "memory/HISTORY.md",
          "[2026-04-10 09:00] What did you do? I did the laundry and did do the dishes.\n"
          "[2026-04-18 18:40] Tulip fields near Lisse with Jonas.\n")
    write(tmp_path, "memory/2026-04-11.md", "- What do I do with rhubarb? Did it into a crumble.\n")
    for n, errand in enumerate(("Paid the rent.", "Bought new running shoes.", "Cat to the vet.", "Boiler serviced.",
                                "Booked flights to Chengdu.", "Tax return filed.", "Called the bank.")):
        write(tmp_path, f"memory/2026-03-{n + 10}.md", f"- {errand}\n")  # the stop words are rare: BM25 counts them
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"), today=lambda: MONDAY)
    results = (await idx.search("What did I do last Saturday?")).results
    assert results and "Lisse" in results[0].snippet
    # Without a date, a query of stop words still searches by them.
    assert (await idx.search("what did I do")).results
    idx.close()


def test_non_latin_share_tells_the_script_apart() -> None:
    assert non_latin_share("What did the specialist say?") == 0.0
    assert non_latin_share("诊断：左膝骨关节炎，中度。") == 1.0
    assert non_latin_share("我们现在用的是 dagster 1.9.6") > 0.5  # Chinese quoting a name stays Chinese
    assert non_latin_share("Café au lait, très bon") < 0.5
    assert non_latin_share("# 2026-04-14") is None  # no letters: no script


COSINES = {"膝盖": 0.85, "knee": 0.70, "garden": 0.80}  # each note's planted cosine to any query


async def test_a_chunk_in_another_script_is_not_held_back_by_the_keyword_side(tmp_path: Path) -> None:
    # English question. The Chinese note is the closest by vector but cannot share a word with the
    # question; the English knee note shares words but is further. The weighted merge alone (0.7 x
    # 0.85 = 0.595 against 0.7 x 0.70 + 0.3 x its keyword score) ranks the English note first.
    write(tmp_path, "memory/2026-03-24.md", "- 医生说妈妈的膝盖是骨关节炎，中度，暂时不用手术。\n")
    write(tmp_path, "memory/2026-03-01.md", "- Mum's knee specialist appointment is booked; the knee got worse.\n")
    write(tmp_path, "memory/2026-03-05.md", "- Planted tomatoes in the garden.\n")  # same script, no keyword
    for n in range(4):
        write(tmp_path, f"memory/2026-02-0{n + 1}.md", f"- Unrelated errand number {n}.\n")
    cfg = MemorySearchConfig(embedding_provider="local", min_score=0.0)
    embedder = PlantedEmbedder(lambda text: next((c for word, c in COSINES.items() if word in text), 0.1))
    idx = MemoryIndex(tmp_path, cfg, embedder=embedder)
    await idx.sync()
    results = (await idx.search("What did the knee specialist say about Mum's knee?", max_results=3)).results
    assert [r.path for r in results[:2]] == ["memory/2026-03-24.md", "memory/2026-03-01.md"]
    garden = next(r for r in (await idx.search("knee specialist Mum", max_results=10)).results
                  if r.path == "memory/2026-03-05.md")
    assert abs(garden.score - 0.7 * 0.80) < 1e-3  # an English note without the words: not lifted
    idx.close()


async def test_a_chunk_dated_in_the_asked_range_is_not_held_back_by_the_keyword_side(tmp_path: Path) -> None:
    # "pay bump" shares no word with "raise"; the bike-path note shares three words but is further by
    # vector. Both lie in the asked range (the start of the year), so the date lifts both alike.
    write(tmp_path, "memory/2026-01-12.md", "- Payroll slip came in: the January raise is 4 percent.\n")
    write(tmp_path, "memory/2026-02-03.md", "- The big bump on the bike path is still there, pay attention.\n")
    write(tmp_path, "memory/2026-03-10.md", "- Another raise rumour going round at work.\n")  # outside the range
    for n in range(4):
        write(tmp_path, f"memory/2026-03-1{n + 1}.md", f"- Unrelated errand number {n}.\n")
    cosines = {"January raise": 0.80, "bike path": 0.50, "rumour": 0.80}
    cfg = MemorySearchConfig(embedding_provider="local", min_score=0.0)
    embedder = PlantedEmbedder(lambda text: next((c for words, c in cosines.items() if words in text), 0.1))
    idx = MemoryIndex(tmp_path, cfg, embedder=embedder, today=lambda: MONDAY)
    await idx.sync()
    results = (await idx.search("How big was the pay bump I got at the start of the year?")).results
    assert [r.path for r in results[:2]] == ["memory/2026-01-12.md", "memory/2026-02-03.md"]
    rumour = next(r for r in results if r.path == "memory/2026-03-10.md")
    assert abs(rumour.score - (1 - TIME_WEIGHT) * 0.7 * 0.80) < 1e-3  # outside the range: no floor, no lift
    assert abs(results[0].score - ((1 - TIME_WEIGHT) * VECTOR_FLOOR_SHARE * 0.80 + TIME_WEIGHT)) < 1e-3
    idx.close()


def test_a_bare_title_heading_over_sections_is_not_a_chunk_of_its_own() -> None:
    note = "# 2026-04-14\n\n## Work\n- Shipped the fix.\n\n## Life\n- Bonus came in.\n# Lone heading\n"
    chunks = chunk_markdown(note, file_day="2026-04-14")
    assert [(c.start_line, c.end_line) for c in chunks] == [(3, 5), (6, 7), (8, 8)]
    assert all(c.title == "2026-04-14" for c in chunks[:2])  # the title heading still names them
    assert chunks[2].text == "# Lone heading"  # a heading with nothing deeper below stays findable


async def test_an_index_chunked_by_an_older_chunker_is_rechunked(tmp_path: Path) -> None:
    write(tmp_path, "memory/2026-04-14.md", "# 2026-04-14\n\n## Work\n- Shipped the fix.\n")
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"))
    await idx.sync()
    idx._db.set_meta({"chunking": "400/80/memory+sessions"})  # what an index before CHUNKER_VERSION says
    idx.close()
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"))
    stats = await idx.sync()
    assert stats.full_reindex and idx.status()["chunks"] == 1
    idx.close()


async def test_a_chunk_is_scored_by_its_best_line_not_only_by_its_average(tmp_path: Path) -> None:
    # One day's note: six errands and, among them, the line that answers. Its chunk vector (the mean
    # of its lines) is far from the question; another note's single line is nearer than that mean
    # but further than the answering line, which must win.
    errands = [f"- Errand number {n}: picked up the parcel." for n in range(6)]
    note = errands[:3] + ["- Cancel the gym trial before it auto-renews on the 30th."] + errands[3:]
    write(tmp_path, "memory/2026-03-24.md", "\n".join(note) + "\n")
    write(tmp_path, "memory/2026-03-01.md", "- Looked at the price list of the climbing hall.\n")
    planted = {"gym trial": 0.9, "climbing": 0.6}
    embedded: list[str] = []

    def cosine_of(text: str) -> float:
        embedded.append(text)
        return next((c for words, c in planted.items() if words in text), 0.2)

    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="local", min_score=0.0),
                      embedder=PlantedEmbedder(cosine_of))
    await idx.sync()
    # Each line that says something is embedded on its own; the whole chunk is not.
    assert "- Cancel the gym trial before it auto-renews on the 30th." in embedded
    assert not any("\n" in text for text in embedded)
    results = (await idx.search("a subscription to stop before it charges me again", max_results=2)).results
    assert results[0].path == "memory/2026-03-24.md"
    # The mean of the seven lines alone is near 0.32; with the best line's 0.9 the note scores 0.72.
    assert results[0].score == pytest.approx(0.7 * (0.3 * 0.316 + 0.7 * 0.9), abs=0.01)
    idx.close()


def test_session_notes_keep_a_topic_written_in_any_script(tmp_path: Path) -> None:
    """Only a-z and 0-9 counted: 东京出差, 誕生日パーティー and رحلة القاهرة all became "…-session.md"."""
    store = MemoryStore(tmp_path)
    when = datetime(2026, 3, 2, 18, 0)
    names = [store.write_session_note(slug, "note", when).name for slug in
             ("东京出差", "誕生日パーティー", "رحلة القاهرة", "नमस्ते दुनिया", "Tokyo trip!", "Ｔｏｋｙｏ", "../..")]
    assert names == [
        "2026-03-02-东京出差.md", "2026-03-02-誕生日パーティー.md", "2026-03-02-رحلة-القاهرة.md",
        "2026-03-02-नमस्ते-दुनिया.md", "2026-03-02-tokyo-trip.md", "2026-03-02-tokyo.md", "2026-03-02-session.md",
    ]


def test_a_note_written_all_in_chinese_is_a_note() -> None:
    """A session note or history entry with no Latin letters counted no words and was refused as too
    short every time (the session note fell back to a raw excerpt)."""
    from nanobot.memory.consolidator import echo_sources
    from nanobot.memory.validation import Refusal, check_note, fact_lines

    sources = echo_sources("[2026-03-02 10:00] USER: 我下周去东京出差，预算五千元。", small_model=False)
    note = "用户下周去东京出差，讨论了预算和酒店安排。"
    assert not isinstance(check_note(note, "summary", sources), Refusal)
    assert isinstance(check_note("好的", "summary", sources), Refusal)  # still not a note
    for loop in ("哈哈哈哈哈哈", "哈" * 1500, "用户讨论" * 400):  # a model stuck in a loop (a review catch)
        assert isinstance(check_note(loop, "summary", sources), Refusal), loop[:8]
    # the template's comment is no fact the guard puts back
    template = "# Long-term Memory\n\n<!-- Durable facts about the user: preferences, people -->\n"
    assert fact_lines(template) == []
