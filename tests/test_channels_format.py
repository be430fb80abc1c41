"""Unit tests: the shared message splitter and the Markdown → platform formatter."""

from __future__ import annotations

import re

import pytest

from nanobot.channels.markdown import markdown_to_discord, markdown_to_telegram_html
from nanobot.channels.split import DISCORD_MAX_CHARS, TELEGRAM_MAX_CHARS, split_message, utf16_len
from tests.fakes.telegram_server import parse_html


def _fences_balanced(part: str) -> bool:
    return len(re.findall(r"^ {0,3}```", part, flags=re.M)) % 2 == 0


def _long_reply(chars: int = 10_000) -> str:
    prose = "\n\n".join(
        f"Paragraph {i}. " + "Lorem ipsum dolor sit amet, consectetur. " * 8 for i in range(12)
    )
    code = "```python\n" + "".join(f"value_{i} = compute({i})  # step {i}\n" for i in range(160)) + "```\n"
    text = prose + "\n\n" + code + "\n" + prose
    return text[:chars] if len(text) > chars else text + "\n\nend " + "word " * ((chars - len(text)) // 5)


def test_short_text_is_one_part_and_blank_is_none() -> None:
    assert split_message("hello", 2000) == ["hello"]
    assert split_message("   \n ", 2000) == []


@pytest.mark.parametrize("limit", [TELEGRAM_MAX_CHARS, DISCORD_MAX_CHARS])
def test_long_reply_split_within_limit_with_fences_reopened(limit: int) -> None:
    text = _long_reply()
    parts = split_message(text, limit)
    assert len(parts) >= -(-len(text) // limit)
    assert all(utf16_len(p) <= limit for p in parts)
    assert all(_fences_balanced(p) for p in parts)
    # Every line of code survives, and a part that continues a block reopens it with its language.
    joined = "\n".join(parts)
    for i in range(160):
        assert f"value_{i} = compute({i})" in joined
    continued = [p for p in parts[1:] if p.startswith("```python\n")]
    assert continued, "the code block crossing a boundary was not reopened"


def test_prefers_paragraph_then_line_then_word_boundaries() -> None:
    para = "a" * 60 + "\n\n" + "b" * 60
    assert split_message(para, 100) == ["a" * 60, "b" * 60]
    lines = "c" * 60 + "\n" + "d" * 60
    assert split_message(lines, 100) == ["c" * 60, "d" * 60]
    words = ("word " * 40).strip()
    parts = split_message(words, 100)
    assert all(not p.startswith(" ") and not p.endswith(" ") for p in parts)
    assert " ".join(parts) == words


def test_hard_cut_when_no_boundary_and_nothing_lost() -> None:
    text = "x" * 250
    parts = split_message(text, 100)
    assert "".join(parts) == text
    assert all(len(p) <= 100 for p in parts)


def test_utf16_counting_for_emoji() -> None:
    text = "😀" * 1500  # 3000 UTF-16 units
    parts = split_message(text, DISCORD_MAX_CHARS)
    assert len(parts) == 2
    assert all(utf16_len(p) <= DISCORD_MAX_CHARS for p in parts)


def test_telegram_html_basic_formatting() -> None:
    html = markdown_to_telegram_html("# Title\nSome **bold**, *italic*, ~~gone~~ and `x < y`.")
    assert "<b>Title</b>" in html
    assert "<b>bold</b>" in html and "<i>italic</i>" in html and "<s>gone</s>" in html
    assert "<code>x &lt; y</code>" in html


def test_telegram_html_escapes_special_characters_everywhere() -> None:
    html = markdown_to_telegram_html("a < b && c > d <script>alert(1)</script>")
    assert html == "a &lt; b &amp;&amp; c &gt; d &lt;script&gt;alert(1)&lt;/script&gt;"
    assert parse_html(html)[1] is None


def test_telegram_html_code_block_with_language_is_escaped() -> None:
    html = markdown_to_telegram_html('Run:\n```python\nif a < b and "&":\n    print(**kw)\n```\nDone **now**')
    assert '<pre><code class="language-python">if a &lt; b and "&amp;":\n    print(**kw)</code></pre>' in html
    assert html.endswith("Done <b>now</b>")


def test_telegram_html_links_are_escaped_and_unsafe_schemes_left_as_text() -> None:
    html = markdown_to_telegram_html("[docs & more](https://ex.com/a?b=1&c=<2>) and [x](javascript:alert(1))")
    assert '<a href="https://ex.com/a?b=1&amp;c=&lt;2&gt;">docs &amp; more</a>' in html
    assert '<a href="javascript' not in html
    assert parse_html(html)[1] is None


def test_telegram_html_lists_quotes_and_snake_case() -> None:
    html = markdown_to_telegram_html("- one\n* two\n> quoted\n> more\nuse my_var_name here")
    assert "• one\n• two" in html
    assert "<blockquote>quoted\nmore</blockquote>" in html
    assert "my_var_name" in html and "<i>" not in html


def test_telegram_html_is_always_valid_for_tricky_inputs() -> None:
    samples = [
        "**unclosed bold and <tag>",
        "*a **b* c**",
        "```\nunterminated code <x>",
        "`code with ** stars`**",
        "__init__.py and 2*3*4 = 24",
        "[a](https://x.y/(z)) & ~~ <",
    ]
    for sample in samples:
        text, error = parse_html(markdown_to_telegram_html(sample))
        assert error is None, (sample, error)


def test_discord_keeps_markdown_but_rewrites_deep_headings() -> None:
    text = "# Big\n**bold** `x<y>`\n#### deep\n```\n#### not a heading in code\n```"
    out = markdown_to_discord(text)
    assert out.startswith("# Big\n**bold** `x<y>`")
    assert "**deep**" in out
    assert "#### not a heading in code" in out
