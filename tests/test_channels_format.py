"""Unit tests: the shared message splitter and the Markdown → platform formatter."""

from __future__ import annotations

import re

import pytest

from nanobot.channels.markdown import (
    markdown_to_discord,
    markdown_to_telegram_html,
    telegram_parts,
    visible_text,
)
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


@pytest.mark.parametrize("opener", ["~~~text", "````markdown"])
def test_a_cut_fence_is_closed_and_reopened_with_its_own_marker(opener: str) -> None:
    """A cut ~~~ block was closed with ``` (which does not close it), and a ```` block holding a ```
    one counted as closed at the inner fence, so the next part lost its code block."""
    marker = opener.rstrip("abcdefghijklmnopqrstuvwxyz")
    body = [f"row {i} value" for i in range(300)]
    body[3:3] = ["```python", "print('inner')", "```"]  # an inner fence, text of the outer block
    parts = split_message("\n".join([opener, *body, marker, "after"]), DISCORD_MAX_CHARS)
    assert len(parts) > 1
    for index, part in enumerate(parts):
        lines = part.split("\n")
        if index > 0:
            assert lines[0] == opener, (index, lines[:2])  # the block goes on, with its language
        closing = [line for line in lines if line == marker]
        assert closing, (index, lines[-2:])  # every part closes the block with the same marker
    assert parts[-1].endswith(f"{marker}\nafter")


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


@pytest.mark.parametrize("opener", ["# ", "> ", "- ", "1. ", "| ", "**"])
def test_a_line_too_long_is_not_cut_after_its_block_syntax_alone(opener: str) -> None:
    """`# ` + 5,000 letters became a part "#" (empty once rendered: Telegram refused it, and the
    fallback sent a lone "#" to the chat), then the text."""
    text = opener + "h" * 5000
    for limit in (TELEGRAM_MAX_CHARS, DISCORD_MAX_CHARS):
        parts = split_message(text, limit)
        assert "".join(parts) == text and all(len(p) <= limit for p in parts)
        assert all(re.search(r"\w", p) for p in parts), [p[:8] for p in parts]
    for html, _source in telegram_parts(text, TELEGRAM_MAX_CHARS):
        shown, error = parse_html(html)
        assert error is None and shown.strip("#>•-|*. \n"), html[:40]


@pytest.mark.parametrize("intro", ["", "Here is the config:\n\n", "p " * 600 + "\n"])
@pytest.mark.parametrize("opener", ["```json", "``` json with words", "~~~json"])
def test_a_block_holding_one_long_line_never_yields_an_empty_block(intro: str, opener: str) -> None:
    """The only line break after the opener was taken as the cut, so a part ended in "```json"
    closed at once: an empty code block, or a message of its own holding nothing else."""
    marker = opener.split(" ")[0].rstrip("json")
    minified = "{" + ",".join(f'"k{i}":{i}' for i in range(400)) + "}"
    text = f"{intro}{opener}\n{minified}\n{marker}"
    parts = split_message(text, DISCORD_MAX_CHARS)
    assert all(utf16_len(p) <= DISCORD_MAX_CHARS for p in parts)
    for part in parts:
        assert len(re.findall(rf"^ {{0,3}}{re.escape(marker)}", part, flags=re.M)) % 2 == 0, part[:40]
        assert f"{opener}\n{marker}" not in part, f"an empty code block: {part[-40:]!r}"
    # Nothing is lost: the code parts rejoin (minus the reopened/closing fences) into the JSON.
    code = "".join(p.removeprefix(opener + "\n").removesuffix("\n" + marker) for p in parts if p.startswith(opener))
    assert code == minified
    assert len(parts) == len(split_message(intro, DISCORD_MAX_CHARS)) + 3


@pytest.mark.parametrize("marker", ["~~~", "````"])
def test_an_opener_line_cut_hard_is_closed_with_its_own_marker(marker: str) -> None:
    """An opener line too long for a part was reopened and closed as ```, which leaves a ~~~ or
    ```` block open: the rest of the part and the next ones rendered as code."""
    text = f"{marker}{'y' * 3000}\nlast line\n{marker}\nafter"
    parts = split_message(text, DISCORD_MAX_CHARS)
    assert len(parts) >= 2 and all(utf16_len(p) <= DISCORD_MAX_CHARS for p in parts)
    for part in parts:
        fences = re.findall(rf"^{re.escape(marker)}", part, flags=re.M)
        assert len(fences) % 2 == 0 and part.endswith((f"\n{marker}", "after")), part[-20:]
    assert "".join(parts).count("y") == 3000


def test_utf16_counting_for_emoji() -> None:
    text = "😀" * 1500  # 3000 UTF-16 units
    parts = split_message(text, DISCORD_MAX_CHARS)
    assert len(parts) == 2
    assert all(utf16_len(p) <= DISCORD_MAX_CHARS for p in parts)


FAMILY = "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466"


@pytest.mark.parametrize(
    ("text", "unit"),
    [
        ("x" + "🇯🇵" * 2500, "🇯🇵"),  # flags are pairs: a cut inside one re-paired every flag after it
        ("x" + "👍🏽" * 2000, "👍🏽"),
        (FAMILY * 1500, FAMILY),
        ("x" + "e\u0301" * 5000, "e\u0301"),
        ("\u1112\u1161\u11ab" * 3000, "\u1112\u1161\u11ab"),  # 한, decomposed
    ],
)
@pytest.mark.parametrize("limit", [TELEGRAM_MAX_CHARS, DISCORD_MAX_CHARS])
def test_a_hard_cut_never_falls_inside_a_shown_character(text: str, unit: str, limit: int) -> None:
    parts = split_message(text, limit)
    assert len(parts) > 1 and "".join(parts) == text
    for part in parts:
        assert utf16_len(part) <= limit
        assert part.lstrip("x").replace(unit, "") == "", (part[:8], part[-8:])


@pytest.mark.parametrize(
    "sentence",
    [
        "ฉันทำน้ำส้มให้แม่ดื่มทุกเช้า",  # Thai: น้ำ, ทำ (SARA AM is a letter drawn onto the one before)
        "ຂ້ອຍຄຳນວນນ້ຳ",  # Lao
        "हिन्दीक्षित्रस्त्री",  # Devanagari conjuncts: the consonant after a virama joins the one before
    ],
)
@pytest.mark.parametrize("limit", [TELEGRAM_MAX_CHARS, DISCORD_MAX_CHARS])
def test_scripts_without_spaces_are_never_cut_inside_a_shown_character(sentence: str, limit: int) -> None:
    """A long Thai reply was cut between น้ and ำ: the next message began with a lone ำ (a dotted circle)."""
    import regex

    for pad in range(12):  # every offset of the sentence against the cut
        text = "ก" * pad + sentence * (limit // len(sentence) + 5)
        parts = split_message(text, limit)
        assert "".join(parts) == text
        starts = {m.start() for m in regex.finditer(r"\X", text)}
        at = 0
        for part in parts[:-1]:
            at += len(part)
            assert at in starts, (pad, part[-3:], text[at : at + 3])


def test_text_without_spaces_is_cut_after_a_sentence_then_a_comma() -> None:
    sentences = "这是一个很长的句子，里面有很多内容。" * 300
    parts = split_message(sentences, DISCORD_MAX_CHARS)
    assert "".join(parts) == sentences and all(p.endswith("。") for p in parts)
    clauses = "日本語の文章は、" * 600
    parts = split_message(clauses, DISCORD_MAX_CHARS)
    assert "".join(parts) == clauses and all(p.endswith("、") for p in parts)
    # a long link's "," or "?" is no sentence end: the cut stays at the line before it
    link = "https://maps.example/place?q=" + ",".join(f"48.{i:04d}" for i in range(150))
    text = "intro " * 150 + "\n" + link + "\nthe end"
    assert any(part.strip() == link or part.strip().startswith(link) for part in split_message(text, DISCORD_MAX_CHARS))


def _valid(markdown: str) -> str:
    """Render and check the HTML the way the fake Bot API (like Telegram) parses it."""
    html = markdown_to_telegram_html(markdown)
    assert parse_html(html)[1] is None, (markdown, html)
    return html


def test_telegram_html_headings_and_emphasis() -> None:
    html = _valid("# Title\n\nSome **bold**, *italic*, ~~gone~~ and ***both***.")
    assert html == "<b>Title</b>\n\nSome <b>bold</b>, <i>italic</i>, <s>gone</s> and <i><b>both</b></i>."
    assert _valid("### Deep *one*") == "<b>Deep <i>one</i></b>"


@pytest.mark.parametrize(
    ("markdown", "html"),
    [
        ("**注意：**这个文件很重要。这是**“重要”**的事情。", "<b>注意：</b>这个文件很重要。这是<b>“重要”</b>的事情。"),
        ("日本語の**「強調」**です", "日本語の<b>「強調」</b>です"),
        ("중요：**“주의”**입니다", "중요：<b>“주의”</b>입니다"),
        ("中文*斜体：*中文", "中文<i>斜体：</i>中文"),
        ("**foo.**bar", "**foo.**bar"),  # other scripts: CommonMark as it is
        ("**注意:**这个", "<b>注意:</b>这个"),
        ("请删除*.log和*.tmp文件。", "请删除*.log和*.tmp文件。"),  # file patterns, not italics (a review catch)
    ],
)
def test_emphasis_beside_cjk_punctuation_renders(markdown: str, html: str) -> None:
    """Chinese and Japanese put no space around punctuation, so CommonMark left `**注意：**这个`
    with its asterisks shown (or the wrong words bold): models write bold this way all the time."""
    assert _valid(markdown) == html


def test_telegram_html_escapes_special_characters_everywhere() -> None:
    html = _valid("a < b && c > d <script>alert(1)</script>")
    assert html == "a &lt; b &amp;&amp; c &gt; d &lt;script&gt;alert(1)&lt;/script&gt;"


def test_telegram_html_inline_and_fenced_code_are_escaped() -> None:
    assert _valid("use `x < y` here") == "use <code>x &lt; y</code> here"
    html = _valid('Run:\n```python\nif a < b and "&":\n    print(**kw)\n```\nDone **now**')
    assert '<pre><code class="language-python">if a &lt; b and "&amp;":\n    print(**kw)</code></pre>' in html
    assert html.endswith("Done <b>now</b>")
    assert _valid("    indented <code>\n") == "<pre><code>indented &lt;code&gt;</code></pre>"
    assert "**" in _valid("`code with ** stars`**")


def test_telegram_html_links_images_and_unsafe_schemes() -> None:
    html = _valid("[docs & **more**](https://ex.com/a?b=1&c=2) and [x](javascript:alert(1))")
    assert '<a href="https://ex.com/a?b=1&amp;c=2">docs &amp; <b>more</b></a>' in html
    assert '<a href="javascript' not in html
    assert _valid("<https://ex.com/x>") == '<a href="https://ex.com/x">https://ex.com/x</a>'
    assert _valid("![a cat](https://ex.com/cat.png)") == '<a href="https://ex.com/cat.png">a cat</a>'
    assert _valid("![](https://ex.com/c.png)") == '<a href="https://ex.com/c.png">image</a>'
    assert _valid("[tel](tel:123)") == "tel"  # a scheme Telegram links do not take: the label


def test_telegram_html_blockquotes_including_nested() -> None:
    assert _valid("> quoted\n> more") == "<blockquote>quoted\nmore</blockquote>"
    html = _valid("> outer\n>\n> > inner")
    assert html.count("<blockquote>") == 1 and "▎inner" in html


def test_telegram_html_nested_lists() -> None:
    html = _valid("- one\n- two\n  - deep\n    1. first\n    2. second\n- three")
    assert html == "• one\n• two\n  ◦ deep\n    1. first\n    2. second\n• three"
    assert _valid("3. c\n4. d") == "3. c\n4. d"
    loose = _valid("- a\n\n- b")
    assert loose == "• a\n\n• b"
    assert "my_var_name" in _valid("use my_var_name and __init__.py") and "<i>" not in _valid("my_var_name")


def test_telegram_html_table_is_a_preformatted_block() -> None:
    html = _valid("| Name | Qty |\n|:-----|----:|\n| apple & pear | 3 |\n| fig | **12** |")
    text, _ = parse_html(html)
    assert html.startswith("<pre>") and html.endswith("</pre>")
    assert text.split("\n") == [
        "Name         │ Qty",
        "─────────────┼────",
        "apple & pear │   3",
        "fig          │  12",
    ]


def test_telegram_html_rule_and_paragraphs() -> None:
    assert _valid("above\n\n---\n\nbelow") == "above\n\n──────────\n\nbelow"
    assert _valid("line one\nline two") == "line one\nline two"


def test_telegram_html_is_always_valid_for_tricky_inputs() -> None:
    samples = [
        "**unclosed bold and <tag>",
        "*a **b* c**",
        "```\nunterminated code <x>",
        "__init__.py and 2*3*4 = 24",
        "[a](https://x.y/(z)) & ~~ <",
        "> - quoted list\n>   > deeper ```x```",
        "| a |\n|---|\n| `<b>` |\n| x | extra |",
        "&amp; &#60; &lt;",
        "* [ ] task\n* [x] done",
        "<div>raw html</div>\n\n<!-- comment -->",
    ]
    for sample in samples:
        _valid(sample)


def test_telegram_parts_fit_the_limit_even_when_rendering_grows() -> None:
    # A table whose padding makes the shown text far longer than its Markdown source.
    wide = "a much longer cell " * 4  # every tenth row: all rows are padded to it
    rows = "".join(f"| {wide if i % 10 == 0 else 'x'} | {i} |\n" for i in range(70))
    table = "| text | n |\n|---|---|\n" + rows
    assert utf16_len(table) < TELEGRAM_MAX_CHARS
    parts = telegram_parts(table, TELEGRAM_MAX_CHARS)
    assert len(parts) >= 2
    for html, source in parts:
        text, error = parse_html(html)
        assert error is None and utf16_len(text) <= TELEGRAM_MAX_CHARS
        assert utf16_len(source) <= TELEGRAM_MAX_CHARS and visible_text(html) == text
        assert html.startswith("<pre>text ")
    assert telegram_parts("  \n", TELEGRAM_MAX_CHARS) == []


def test_discord_keeps_markdown_but_rewrites_deep_headings() -> None:
    text = "# Big\n**bold** `x<y>`\n#### deep\n```\n#### not a heading in code\n```"
    out = markdown_to_discord(text)
    assert out.startswith("# Big\n**bold** `x<y>`")
    assert "**deep**" in out
    assert "#### not a heading in code" in out


def test_a_deep_headings_own_closing_hashes_go_not_the_last_character() -> None:
    """"#### Learn C#" reached Discord as "**Learn C**": every trailing # was taken for a closing run."""
    assert markdown_to_discord("#### Learn C#\nIt is fun.") == "**Learn C#**\nIt is fun."
    assert markdown_to_discord("#### Learn C# ##") == "**Learn C#**"
    assert markdown_to_discord("##### a # b #") == "**a # b**"
    assert markdown_to_discord("#### spaced  " + " " * 5_000 + "#") == "**spaced**"


def test_discord_leaves_tilde_and_nested_code_blocks_alone() -> None:
    """A `#### ` line in a ~~~ block (a shell script's comment) was rewritten to bold, and so was
    one after a ``` line inside a ```` block."""
    tilde = "Here:\n\n~~~bash\n#### Setup\necho hi\n~~~\n#### After"
    assert markdown_to_discord(tilde) == "Here:\n\n~~~bash\n#### Setup\necho hi\n~~~\n**After**"
    nested = "````md\n```\n#### inner\n```\n````\n#### out"
    assert markdown_to_discord(nested) == "````md\n```\n#### inner\n```\n````\n**out**"


def test_blank_lines_at_the_end_of_a_long_text_make_no_part_of_their_own() -> None:
    """A `message` text just over the limit with blank lines at its end gave a last part of newlines
    only: Telegram refused it ("message text is empty") and the file sent with it never left."""
    text = "Here is the report you asked for.\n\n" + ("Summary line. " * 290)[:4030] + "\n" * 40
    parts = split_message(text, 4096)
    assert parts and all(part.strip() for part in parts), [len(p) for p in parts]
    assert "".join(parts).strip() == text.strip()
    fenced = "```\n" + "code line\n" * 500 + "\n" * 30
    assert all(part.strip() not in ("", "```") for part in split_message(fenced, 4096))
