"""The one Markdown → platform formatter.

The agent writes Markdown. Telegram gets HTML (the subset its Bot API accepts, with `& < >` escaped
everywhere outside tags); Discord renders Markdown natively, so it keeps it, with only the
constructs Discord lacks rewritten. When Telegram still rejects the markup, the channel resends the
Markdown source as plain text (see TelegramChannel).
"""

from __future__ import annotations

import html
import re

_FENCED = re.compile(r"^ {0,3}```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^ {0,3}```[ \t]*$|\Z)", re.M | re.S)
_INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
_LINK = re.compile(r"\[([^\]\n]+)\]\((\S+?)(?:\s+\"[^\"]*\")?\)")
_AUTOLINK = re.compile(r"<(https?://[^\s>]+)>")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC = re.compile(
    r"(?<![\w*])\*(?=[^\s*])([^*\n]+?)(?<=\S)\*(?![\w*])"  # *italic*, not **bold** or 2*3*4
    r"|(?<!\w)_(?=\S)([^_\n]+?)(?<=\S)_(?!\w)"  # _italic_, not snake_case
)
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_SPOILER = re.compile(r"\|\|(?=\S)(.+?)(?<=\S)\|\|")
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+", re.M)
_HR = re.compile(r"^ {0,3}([-*_])( *\1){2,} *$", re.M)
_QUOTE_LINE = re.compile(r"^&gt; ?(.*)$", re.M)
_INLINE_TAG = re.compile(r"<(/?)(b|i|s|tg-spoiler)>")
_PLACEHOLDER = "\x00{}\x00"
_PLACEHOLDER_RE = re.compile(r"\x00(\d+)\x00")
_SAFE_URL = re.compile(r"^(https?|mailto|tg|ftp)://|^mailto:", re.I)


def escape_html(text: str) -> str:
    """Escape the three characters Telegram's HTML parser treats specially."""
    return html.escape(text, quote=False)


class _Stash:
    """Holds already-rendered fragments behind placeholders so later passes cannot touch them."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def put(self, rendered: str) -> str:
        self.items.append(rendered)
        return _PLACEHOLDER.format(len(self.items) - 1)

    def restore(self, text: str) -> str:
        # Placeholders may nest (a link label holding inline code), so resolve until none remain.
        while _PLACEHOLDER_RE.search(text):
            text = _PLACEHOLDER_RE.sub(lambda m: self.items[int(m.group(1))], text)
        return text


def _well_nested(text: str) -> bool:
    stack: list[str] = []
    for closing, tag in _INLINE_TAG.findall(text):
        if not closing:
            stack.append(tag)
        elif not stack or stack.pop() != tag:
            return False
    return not stack


def _inline(text: str, stash: _Stash) -> str:
    """Render inline Markdown on already-escaped text (one line).

    Overlapping emphasis (`*a **b* c**`) would give crossing tags, which Telegram rejects: such a
    line keeps its Markdown markers as plain text instead.
    """
    out = _BOLD.sub(lambda m: f"<b>{m.group(1) or m.group(2)}</b>", text)
    out = _ITALIC.sub(lambda m: f"<i>{m.group(1) or m.group(2)}</i>", out)
    out = _STRIKE.sub(lambda m: f"<s>{m.group(1)}</s>", out)
    out = _SPOILER.sub(lambda m: f"<tg-spoiler>{m.group(1)}</tg-spoiler>", out)
    return out if _well_nested(out) else text


def markdown_to_telegram_html(markdown: str) -> str:
    """Convert Markdown to Telegram Bot API HTML (parse_mode="HTML")."""
    stash = _Stash()

    def fenced(m: re.Match[str]) -> str:
        lang, body = m.group(1), m.group(2).rstrip("\n")
        attr = f' class="language-{escape_html(lang)}"' if lang else ""
        return stash.put(f"<pre><code{attr}>{escape_html(body)}</code></pre>")

    text = _FENCED.sub(fenced, markdown)
    text = _INLINE_CODE.sub(lambda m: stash.put(f"<code>{escape_html(m.group(2).strip())}</code>"), text)

    def link(m: re.Match[str]) -> str:
        label, url = m.group(1), m.group(2)
        if not _SAFE_URL.match(url):
            return m.group(0)
        return stash.put(f'<a href="{html.escape(url, quote=True)}">{_inline(escape_html(label), stash)}</a>')

    text = _LINK.sub(link, text)
    text = _AUTOLINK.sub(lambda m: stash.put(escape_html(m.group(1))), text)
    text = escape_html(text)
    text = _HR.sub("──────────", text)
    text = _HEADING.sub(lambda m: f"<b>{m.group(1)}</b>", text)
    text = _BULLET.sub(lambda m: f"{m.group(1)}• ", text)
    text = "\n".join(_inline(line, stash) for line in text.split("\n"))
    text = _merge_quotes(text)
    return stash.restore(text)


def _merge_quotes(text: str) -> str:
    """Turn runs of `> ` lines (escaped as `&gt; `) into one <blockquote>."""
    out: list[str] = []
    quote: list[str] = []
    for line in text.split("\n"):
        m = _QUOTE_LINE.match(line)
        if m:
            quote.append(m.group(1))
            continue
        if quote:
            out.append("<blockquote>" + "\n".join(quote) + "</blockquote>")
            quote = []
        out.append(line)
    if quote:
        out.append("<blockquote>" + "\n".join(quote) + "</blockquote>")
    return "\n".join(out)


_DEEP_HEADING = re.compile(r"^ {0,3}#{4,6}[ \t]+(.+?)[ \t#]*$", re.M)


def markdown_to_discord(markdown: str) -> str:
    """Discord renders Markdown itself; only headings deeper than ### (unsupported) become bold."""
    parts = re.split(r"(^ {0,3}```.*?(?:^ {0,3}```[ \t]*$|\Z))", markdown, flags=re.M | re.S)
    # Odd indices are code blocks, left untouched.
    return "".join(p if i % 2 else _DEEP_HEADING.sub(r"**\1**", p) for i, p in enumerate(parts))
