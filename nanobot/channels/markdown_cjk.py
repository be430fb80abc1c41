"""CJK-friendly emphasis for markdown-it: `**注意：**这个文件` is bold in Chinese and Japanese text.

CommonMark decides whether `**` opens or closes by what stands beside it, and assumes a space
next to punctuation: `**注意：**这个` ends bold after "：" followed by a letter, which it refuses,
so the asterisks were shown as they are (or the wrong words were bold). Text in Chinese, Japanese
and Korean puts no spaces around punctuation, and models write it this way all the time. Here a
CJK character beside a delimiter run counts as the space CommonMark expects next to punctuation;
text of other scripts is parsed exactly as CommonMark says.
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.common.utils import isMdAsciiPunct, isPunctChar, isWhiteSpace
from markdown_it.parser_inline import ParserInline
from markdown_it.rules_inline.state_inline import Scanned, StateInline
from markdown_it.token import Token
from markdown_it.utils import EnvType

_CJK_RANGES = (
    (0x1100, 0x11FF),  # Hangul jamo
    (0x2E80, 0x2FDF),  # CJK radicals
    (0x3000, 0x303F),  # CJK symbols and punctuation (、。「」)
    (0x3040, 0x30FF),  # hiragana, katakana
    (0x3130, 0x318F),  # Hangul compatibility jamo
    (0x31F0, 0x31FF),  # katakana extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFE30, 0xFE4F),  # CJK compatibility forms
    (0xFF00, 0xFFEF),  # full-width and half-width forms (：，！ ｶﾅ)
    (0x20000, 0x3FFFF),  # CJK extensions B and beyond
)


def is_cjk(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _CJK_RANGES)


def _cjk_beside(cjk_side: str, punct: str, run: int) -> bool:
    """Whether a CJK character beside the run stands in for the space beside `punct`: for CJK
    punctuation (：「」“”), and for a colon or the like after bold (`**注意:**这个`) — not for a lone
    `*` before ASCII punctuation (`删除*.log和*.tmp文件` is a file pattern, not italics)."""
    return is_cjk(cjk_side) and (not punct.isascii() or (run >= 2 and punct in _BOLD_ASCII_PUNCT))


_BOLD_ASCII_PUNCT = frozenset(":;,.!?)\"'")


class _CjkFriendlyState(StateInline):
    def scanDelims(self, start: int, canSplitWord: bool) -> Scanned:  # noqa: N802, N803 - the library's names
        """CommonMark's flanking rules, with a CJK character beside the run standing in for a space
        where a punctuation character would otherwise keep the run from opening or closing."""
        marker = self.src[start]
        pos = start
        while pos < self.posMax and self.src[pos] == marker:
            pos += 1
        last = self.src[start - 1] if start > 0 else " "  # the line's start and end count as spaces
        after = self.src[pos] if pos < self.posMax else " "
        last_punct = isMdAsciiPunct(ord(last)) or isPunctChar(last)
        next_punct = isMdAsciiPunct(ord(after)) or isPunctChar(after)
        last_space, next_space = isWhiteSpace(ord(last)), isWhiteSpace(ord(after))
        run = pos - start
        left = not next_space and (not next_punct or last_space or last_punct or _cjk_beside(last, after, run))
        right = not last_space and (not last_punct or next_space or next_punct or _cjk_beside(after, last, run))
        can_open = left and (canSplitWord or not right or last_punct)
        can_close = right and (canSplitWord or not left or next_punct)
        return Scanned(can_open, can_close, run)


class _CjkFriendlyInline(ParserInline):
    def parse(self, src: str, md: MarkdownIt, env: EnvType, tokens: list[Token]) -> list[Token]:
        state = _CjkFriendlyState(src, md, env, tokens)
        self.tokenize(state)
        for rule in self.ruler2.getRules(""):
            rule(state)
        return state.tokens


def cjk_friendly(md: MarkdownIt) -> MarkdownIt:
    """`md` with CJK-friendly emphasis; its inline rules stay as its preset configured them."""
    inline = _CjkFriendlyInline()
    vars(inline).update(vars(md.inline))
    md.inline = inline
    return md
