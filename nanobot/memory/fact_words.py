"""The words a fact line is about, for telling one fact from another across languages and edits.

`fact_words(text)`: lowercase content words of three or more letters (a trailing -s, -ed or -ing
and then -e cut, so "lives", "live" and "lived" meet), digit runs ("4821"), and two-character runs of CJK text
("银行卡密码" gives 银行, 行卡, 卡密, 密码), minus function words. Used to decide:

- `replaced_by(line, new_lines)`: an edit changed the fact rather than deleting it ("- Lives in
  Lyon" → "- Lives in Paris" shares "live"): a changed fact is not a fact the user asked to forget;
- whether a request to forget names a fact (validation.py): "forget my PIN" → "- Bank card PIN is
  4821"; "请忘记我的银行卡密码" → "- 银行卡密码是4821".
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Latin words, digit runs, runs of scripts written without spaces (CJK, Thai, Lao: two-character
# pieces), and words of Hebrew, Arabic and Devanagari (their vowel signs included)
_TOKEN_RE = re.compile(
    r"[a-z]{3,}|\d+|[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\u0e00-\u0eff]+"
    r"|[\u0590-\u05ff\u0600-\u06ff\u0900-\u097f]{2,}"
)
CJK_CHAR_RE = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\u0e00-\u0eff]")
_FUNCTION_WORDS = frozenset(
    {
        "the", "and", "for", "are", "was", "were", "has", "have", "had", "not", "but", "with", "from",
        "that", "this", "into", "about", "his", "her", "its", "our", "their", "they", "them", "you",
        "your", "she", "him", "who", "what", "when", "where", "which", "will", "would", "can", "could",
        "should", "does", "did", "then", "than", "there", "please", "forget", "remember", "remove",
        "delete", "user", "like", "likes",
    }
)
#: share of a fact's words another line or text must hold to be the same fact
SAME_FACT_SHARE = 0.5


def fact_words(text: str) -> set[str]:
    words: set[str] = set()
    for token in _TOKEN_RE.findall(text.lower()):
        if CJK_CHAR_RE.match(token):
            words.update(token[i : i + 2] for i in range(max(1, len(token) - 1)))
        elif token.isdigit() or not token.isascii():
            words.add(token)
        elif token not in _FUNCTION_WORDS:
            words.add(_stem(token))
    return words


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "s"):
        if word.endswith(suffix) and not word.endswith("ss") and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def _shares(line_words: set[str], other: str) -> float:
    return len(line_words & fact_words(other)) / len(line_words) if line_words else 0.0


def replaced_by(line: str, new_lines: Iterable[str]) -> bool:
    """Whether one of `new_lines` is the same fact with another value (not a deletion)."""
    words = fact_words(line)
    return any(_shares(words, new) >= SAME_FACT_SHARE for new in new_lines)


# Two-letter words that name something ("ex", "tv", "hr"), for a request to forget that names a
# fact by one; the common function words of that length are no name.
_SHORT_RE = re.compile(r"(?<![a-z])[a-z]{2}(?![a-z])")
_SHORT_FUNCTION_WORDS = frozenset(
    {
        "am", "an", "as", "at", "be", "by", "do", "go", "he", "if", "in", "is", "it", "me",
        "my", "no", "of", "on", "or", "so", "to", "up", "us", "we", "ok", "oh", "hi",
        "mr", "ms", "dr", "st",  # titles name nobody by themselves ("forget Mr. Smith", "Mr. Jones …")
    }
)


def short_words(text: str) -> set[str]:
    """The two-letter words of `text` that may name something ("my ex" → {"ex"})."""
    return set(_SHORT_RE.findall(text.lower())) - _SHORT_FUNCTION_WORDS


def changed_as_said(line: str, new_lines: Iterable[str], said: set[str]) -> list[str]:
    """The `new_lines` that are `line`'s fact with a value the user gave (`said`: the fact_words of
    what they said): "- Lives in Lyon" → "- Lives in Berlin" after "I moved to Berlin"."""
    words = fact_words(line)
    return [
        new for new in new_lines
        if _shares(words, new) >= SAME_FACT_SHARE and (fact_words(new) - words) & said
    ]
