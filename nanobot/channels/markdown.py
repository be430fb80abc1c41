"""The one Markdown → platform formatter.

The agent writes Markdown. Telegram gets HTML in the subset its Bot API accepts, rendered from
markdown-it-py's syntax tree (CommonMark plus tables and ~~strikethrough~~; raw HTML in the source is
shown as text):
- headings → bold; **bold**, *italic*, ~~strike~~, `code`, fenced and indented code (with the
  language as `class="language-x"`), links (http, https, mailto, tg, ftp only; others keep their label
  as text), images → a link named by their alt text, block quotes → <blockquote>,
  bullet and numbered lists (nested, indented) → "•"/"◦"/"▪" and "N." prefixes,
  tables → a <pre> block of aligned columns, rules → a line.
- `& < >` are escaped everywhere outside tags; tags are always well nested.

`telegram_parts` splits a reply for Telegram: the Markdown is cut with the shared splitter (code
fences closed and reopened), and a part whose rendering shows more than the limit (table padding)
is cut again, smaller. Each part keeps its Markdown source: when Telegram still rejects the HTML,
the channel resends that source as plain text (see TelegramChannel).

Discord renders Markdown natively, so it keeps it, with only the constructs Discord lacks rewritten.
"""

from __future__ import annotations

import html
import re
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from nanobot.channels.markdown_cjk import cjk_friendly
from nanobot.channels.split import split_message, utf16_len

_SAFE_URL = re.compile(r"^(https?|tg|ftp)://|^mailto:", re.I)
_BULLETS = ("•", "◦", "▪")
_RULE = "──────────"
_TAG = re.compile(r"<[^<>]*>")


def escape_html(text: str) -> str:
    """Escape the three characters Telegram's HTML parser treats specially."""
    return html.escape(text, quote=False)


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return cjk_friendly(MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"]))


# ----------------------------------------------------------------------------------- inline


def _inline(node: SyntaxTreeNode, plain: bool = False) -> str:
    """Render inline children; `plain` gives visible text only (for table cells)."""
    return "".join(_inline_node(child, plain) for child in node.children)


def _wrap(tag: str, inner: str, plain: bool) -> str:
    return inner if plain or not inner else f"<{tag}>{inner}</{tag}>"


def _inline_node(node: SyntaxTreeNode, plain: bool) -> str:
    kind = node.type
    if kind == "text":
        return node.content if plain else escape_html(node.content)
    if kind in ("softbreak", "hardbreak"):
        return " " if plain else "\n"
    if kind == "code_inline":
        return node.content if plain else f"<code>{escape_html(node.content)}</code>"
    if kind == "strong":
        return _wrap("b", _inline(node, plain), plain)
    if kind == "em":
        return _wrap("i", _inline(node, plain), plain)
    if kind == "s":
        return _wrap("s", _inline(node, plain), plain)
    if kind == "link":
        return _anchor(str(node.attrs.get("href", "")), _inline(node, plain), plain)
    if kind == "image":
        label = _inline(node, plain) or "image"
        return _anchor(str(node.attrs.get("src", "")), label, plain)
    # html_inline cannot occur (raw HTML is off); anything unexpected is shown as its source text.
    text = node.content or "".join(_inline_node(c, True) for c in node.children)
    return text if plain else escape_html(text)


def _anchor(url: str, label: str, plain: bool) -> str:
    if plain or not _SAFE_URL.match(url):
        return label
    return f'<a href="{html.escape(url, quote=True)}">{label or escape_html(url)}</a>'


# ----------------------------------------------------------------------------------- blocks


def _indent(text: str, first: str, rest: str) -> str:
    lines = text.split("\n")
    return "\n".join([first + lines[0], *(rest + line if line else line for line in lines[1:])])


def _blocks(node: SyntaxTreeNode, depth: int, quoted: bool) -> list[str]:
    return [out for child in node.children if (out := _block(child, depth, quoted))]


def _list(node: SyntaxTreeNode, depth: int, quoted: bool) -> str:
    ordered = node.type == "ordered_list"
    number = int(node.attrs.get("start", 1) or 1) if ordered else 0
    tight = all(p.hidden for item in node.children for p in item.children if p.type == "paragraph")
    items: list[str] = []
    for item in node.children:
        marker = f"{number + len(items)}." if ordered else _BULLETS[depth % len(_BULLETS)]
        body = ("\n" if tight else "\n\n").join(_blocks(item, depth + 1, quoted))
        items.append(_indent(body, marker + " ", " " * (len(marker) + 1)))
    return ("\n" if tight else "\n\n").join(items)


def _code(content: str, lang: str = "") -> str:
    attr = f' class="language-{html.escape(lang, quote=True)}"' if lang else ""
    return f"<pre><code{attr}>{escape_html(content.rstrip(chr(10)))}</code></pre>"


def _table(node: SyntaxTreeNode) -> str:
    rows: list[list[str]] = []
    right: list[bool] = []
    for section in node.children:  # thead, tbody
        for tr in section.children:
            cells = [_inline(cell.children[0], plain=True) if cell.children else "" for cell in tr.children]
            rows.append(cells)
            if not right:
                right = ["right" in str(cell.attrs.get("style", "")) for cell in tr.children]
    width = max(len(r) for r in rows)
    sizes = [max((len(r[i]) for r in rows if i < len(r)), default=0) for i in range(width)]

    def line(cells: list[str]) -> str:
        padded = [
            (c.rjust(sizes[i]) if i < len(right) and right[i] else c.ljust(sizes[i]))
            for i, c in enumerate(cells + [""] * (width - len(cells)))
        ]
        return " │ ".join(padded).rstrip()

    out = [line(rows[0]), "─┼─".join("─" * s for s in sizes), *(line(r) for r in rows[1:])]
    return "<pre>" + escape_html("\n".join(out)) + "</pre>"


def _block(node: SyntaxTreeNode, depth: int, quoted: bool) -> str:
    kind = node.type
    if kind == "paragraph":
        return _inline(node.children[0]) if node.children else ""
    if kind == "heading":
        return _wrap("b", _inline(node.children[0]), False) if node.children else ""
    if kind in ("bullet_list", "ordered_list"):
        return _list(node, depth, quoted)
    if kind == "fence":
        return _code(node.content, node.info.strip().split(" ")[0] if node.info else "")
    if kind == "code_block":
        return _code(node.content)
    if kind == "hr":
        return _RULE
    if kind == "table":
        return _table(node)
    if kind == "blockquote":
        inner = "\n\n".join(_blocks(node, depth, True))
        # Telegram does not nest quotes: an inner quote is marked by a bar instead.
        return _indent(inner, "▎", "▎") if quoted else f"<blockquote>{inner}</blockquote>"
    # html_block cannot occur (raw HTML is off); show any other block as escaped source.
    return escape_html(node.content)


def markdown_to_telegram_html(markdown: str) -> str:
    """Convert Markdown to Telegram Bot API HTML (parse_mode="HTML")."""
    tree = SyntaxTreeNode(_parser().parse(markdown))
    return "\n\n".join(_blocks(tree, 0, False))


def visible_text(telegram_html: str) -> str:
    """The text Telegram shows for HTML this module rendered (tags dropped, entities decoded)."""
    return html.unescape(_TAG.sub("", telegram_html))


def _regroup_tables(markdown: str, max_chars: int) -> str:
    """Cut long top-level tables into tables of at most half a message each, header repeated, so
    that a part cut between them still shows a table."""
    lines = markdown.split("\n")
    tree = SyntaxTreeNode(_parser().parse(markdown))
    for table in reversed([n for n in tree.children if n.type == "table" and n.map]):
        start, end = table.map
        width = max(utf16_len(line) for line in visible_text(_table(table)).split("\n")) + 1
        per = max(1, max_chars // 2 // width - 2)
        head, body = lines[start : start + 2], lines[start + 2 : end]
        if len(body) <= per:
            continue
        regrouped: list[str] = []
        for i in range(0, len(body), per):
            regrouped += ([""] if i else []) + head + body[i : i + per]
        lines[start:end] = regrouped
    return "\n".join(lines)


def _shown_or_source(markdown: str) -> int:
    """The larger of a part's Markdown length and the length Telegram shows once it is rendered."""
    return max(utf16_len(markdown), utf16_len(visible_text(markdown_to_telegram_html(markdown))))


def telegram_parts(markdown: str, max_chars: int) -> list[tuple[str, str]]:
    """(html, markdown source) parts whose source and shown text both fit in `max_chars`."""
    out: list[tuple[str, str]] = []
    for part in split_message(markdown, max_chars):
        rendered = markdown_to_telegram_html(part)
        if utf16_len(visible_text(rendered)) <= max_chars:
            out.append((rendered, part))
            continue
        # Rendering grew the part (table padding): cut it again, measuring what Telegram shows.
        regrouped = _regroup_tables(part, max_chars)
        out.extend(
            (markdown_to_telegram_html(sub), sub)
            for sub in split_message(regrouped, max_chars, measure=_shown_or_source)
        )
    return out


# ---------------------------------------------------------------------------------- Discord

_DEEP_HEADING = re.compile(r"^ {0,3}#{4,6}[ \t]+(.*)$", re.M)


def _bold_heading(match: re.Match[str]) -> str:
    """A deep heading as bold text, without its closing run of # (which counts only after a space:
    "#### Learn C#" is about C#). Trimmed by hand: a pattern for the closing run backtracked over a
    long run of spaces, seconds of the event loop for one crafted line."""
    text = match.group(1).rstrip(" \t")
    unclosed = text.rstrip("#")
    if unclosed != text and (not unclosed or unclosed[-1] in " \t"):
        text = unclosed.rstrip(" \t")
    return f"**{text}**" if text else match.group(0)


#: a fenced code block: ``` or ~~~ (three or more), closed by a fence of the same character at least
#: as long (a ``` line inside a ```` block does not close it), or by the end of the text
_FENCED = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,}).*?(?:^ {0,3}(?P=fence)[`~]*[ \t]*$|\Z)", re.M | re.S)


def markdown_to_discord(markdown: str) -> str:
    """Discord renders Markdown itself; only headings deeper than ### (unsupported) become bold,
    outside code blocks (a `#### ` line of a shell script in a ~~~ block stays as it is)."""
    out, done = [], 0
    for block in _FENCED.finditer(markdown):
        out += [_DEEP_HEADING.sub(_bold_heading, markdown[done : block.start()]), block.group(0)]
        done = block.end()
    out.append(_DEEP_HEADING.sub(_bold_heading, markdown[done:]))
    return "".join(out)
