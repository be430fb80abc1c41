"""Text preparation for the FTS5 side of memory search: CJK bigrams, keywords, MATCH queries.

FTS5's unicode61 tokenizer keeps a whole run of Chinese/Japanese/Korean characters as one token
and the trigram tokenizer cannot match two-character words, so CJK runs are rewritten as
overlapping bigrams ("记忆检索" -> "记忆 忆检 检索") both when indexing and when querying.
Text and queries are also folded to one width (NFKC) on both sides: an input method writes the
phone number 13800138000 as `１３８００１３８０００` and katakana as `ｶﾛｰﾗ`, and a search typed the
other way found neither.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

# Bump when the text stored for FTS changes: indexes built before are re-chunked (2: width folding).
FTS_TEXT_VERSION = 2
# Han (incl. extension A and compatibility), kana (half-width too), Hangul syllables and jamo.
_CJK_CLASS = (
    r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\u1100-\u11ff\u3130-\u318f\uff66-\uff9f"
)
_CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")
# Words of letters/digits that are not CJK; "_" is kept out so snake_case splits like FTS5 does.
_WORD = re.compile(f"[^\\W_{_CJK_CLASS}]+|[{_CJK_CLASS}]+")

MAX_QUERY_TERMS = 32  # an FTS OR-query over more terms gets slow and no better
MAX_MATCHED_ROWS = 2000  # BM25 is computed for every matching row: bound the work per query

_STOPWORD_TEXT = """
a about above after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing done down during each else ever few for
from further get got had has have having he her here hers herself him himself his how i if in
into is it its itself just let me more most much my myself no nor not now of off on once only or
other our ours ourselves out over own please same she should so some such than that the their
theirs them themselves then there these they this those through to too under until up very was
we were what when where which while who whom whose why will with would yet you your yours
yourself yourselves tell know remember recall did anything something thing things think say said
ever 的 了 是 在 我 你 他 她 它 们 吗
呢 吧 啊 和 与 或 也 都 就 还 又 什么
怎么 哪里 为什么 一个 这个 那个 我们 你们 他们 之前 以前 は
が を に の
で と も へ か ね よ 이 가 은 는 을 를 에 의 도
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())


_NOT_ASCII_LETTERS = bytes(b for b in range(128) if not chr(b).isalpha())
WIDE_CHAR_LETTERS = 3  # one CJK character carries about what three letters of an alphabet do


def non_latin_share(text: str) -> float | None:
    """How much of the text is written in other characters than ASCII letters, 0.0-1.0.

    Non-ASCII characters (mostly CJK here) count WIDE_CHAR_LETTERS letters each, so a Chinese
    sentence quoting a product name stays Chinese; None for text with neither (a bare date).
    Two texts far apart on this scale cannot share words. Runs in C: it is computed per candidate.
    """
    ascii_text = text.encode("ascii", "ignore")
    wide = WIDE_CHAR_LETTERS * (len(text) - len(ascii_text))
    letters = len(ascii_text.translate(None, _NOT_ASCII_LETTERS))
    return wide / (wide + letters) if wide + letters else None


def is_cjk_char(ch: str) -> bool:
    return bool(_CJK_RUN.fullmatch(ch))


def cjk_char_count(text: str) -> int:
    """How many characters of the text are CJK (one regex pass; plain ASCII is not scanned)."""
    return 0 if text.isascii() else sum(map(len, _CJK_RUN.findall(text)))


def cjk_bigrams(run: str) -> list[str]:
    """Overlapping bigrams of a CJK run; a single character stays a unigram."""
    if len(run) < 2:
        return [run] if run else []
    return [run[i : i + 2] for i in range(len(run) - 1)]


def fold(text: str) -> str:
    """One width for every character (NFKC): full-width digits and letters as ASCII, half-width
    katakana as full-width, ligatures and circled numbers as what they stand for."""
    return text if text.isascii() else unicodedata.normalize("NFKC", text)


def _fold_char(char: str) -> str:
    folded = unicodedata.normalize("NFKC", char)
    return folded if len(folded) == 1 else char


# The width folding of the forms block one character for one: offsets into the text stay true.
_SAME_LENGTH_FOLD = {code: _fold_char(chr(code)) for code in (0x3000, *range(0xFF01, 0xFFEF))}


def to_fts_text(text: str) -> str:
    """The text as stored in the FTS5 column: folded, CJK runs replaced by space-separated bigrams."""
    return _CJK_RUN.sub(lambda m: " " + " ".join(cjk_bigrams(m.group(0))) + " ", fold(text))


def tokenize(text: str) -> list[str]:
    """Lower-cased search terms of the folded text: words for alphabetic scripts, bigrams for CJK."""
    terms: list[str] = []
    for match in _WORD.finditer(fold(text).lower()):
        token = match.group(0)
        if _CJK_RUN.fullmatch(token):
            terms.extend(cjk_bigrams(token))
        else:
            terms.append(token)
    return terms


def keywords(query: str, only_stopwords_ok: bool = True) -> list[str]:
    """Distinct query terms without stopwords.

    A query of stop words only ("to be or not to be") keeps them all, unless only_stopwords_ok is
    False ("what did I do" once "last Saturday" was taken out: the date alone says what is wanted).
    """
    terms = tokenize(query)
    kept = [t for t in terms if t not in STOPWORDS and not (len(t) == 1 and t.isascii())]
    chosen = kept or (terms if only_stopwords_ok else [])
    seen: dict[str, None] = {}
    for term in chosen:
        seen.setdefault(term, None)
    return list(seen)[:MAX_QUERY_TERMS]


def selective_terms(terms: list[str], total: int, doc_counts: dict[str, int]) -> list[str]:
    """The keywords worth matching, given how many of `total` chunks contain each.

    Terms found nowhere are dropped. BM25 is computed for every matching row, so when the terms
    together match more than MAX_MATCHED_ROWS rows (large indexes only), terms in more than half
    of the chunks go first (FTS5 clamps their idf to ~0: ranking barely changes, work drops), then
    the most common remaining ones, always keeping the rarest term.
    """
    chosen = sorted((t for t in terms if doc_counts.get(t, 0) > 0), key=lambda t: doc_counts[t])

    def rows() -> int:
        return sum(doc_counts[t] for t in chosen)

    while len(chosen) > 1 and rows() > MAX_MATCHED_ROWS and doc_counts[chosen[-1]] * 2 > total:
        chosen.pop()
    while len(chosen) > 1 and rows() > MAX_MATCHED_ROWS:
        chosen.pop()
    return [t for t in terms if t in chosen]


def match_query(terms: list[str]) -> str:
    """An FTS5 MATCH expression: every keyword as its own quoted query, merged with OR.

    BM25 then ranks a chunk higher the more (and the rarer) keywords it contains, which is the
    merge of the per-keyword result lists. Quoting keeps FTS5 operators in user text inert.
    """
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def match_stem(term: str) -> str:
    """The part of a keyword that inflected forms share ("painting", "painted" -> "paint")."""
    return term if len(term) <= 4 or not term.isascii() else term[: max(4, len(term) - 3)]


@lru_cache(maxsize=256)
def _stems_pattern(terms: tuple[str, ...]) -> re.Pattern[str]:
    """One pattern for all keywords: words beginning with an English stem ("sist" finds "sister",
    never "assistant"), CJK bigrams anywhere."""
    ascii_stems = sorted({re.escape(match_stem(t)) for t in terms if t.isascii()}, key=len, reverse=True)
    other = sorted({re.escape(t) for t in terms if not t.isascii()}, key=len, reverse=True)
    parts = [rf"(?<![^\W_])(?:{'|'.join(ascii_stems)})"] if ascii_stems else []
    parts += other
    return re.compile("|".join(parts) or r"(?!)")


def hit_offsets(text: str, terms: list[str]) -> list[int]:
    """Where in `text` the keywords occur (character offsets, in order)."""
    if not terms:
        return []
    if text.isascii():
        return [m.start() for m in _stems_pattern(tuple(terms)).finditer(text.lower())]
    folded, where = _folded_with_offsets(text)
    return [where[m.start()] for m in _stems_pattern(tuple(terms)).finditer(folded.lower())]


def _folded_with_offsets(text: str) -> tuple[str, list[int]]:
    """The text folded as `fold` does for the forms block, and each folded character's offset in
    `text`: a half-width kana and its sound mark (ｶﾞ) become one character (ガ)."""
    out: list[str] = []
    where: list[int] = []
    i = 0
    while i < len(text):
        pair = text[i : i + 2]
        if len(pair) == 2 and pair[1] in "\uff9e\uff9f" and len(joined := unicodedata.normalize("NFKC", pair)) == 1:
            out.append(joined)
            i_next = i + 2
        else:
            out.append(_SAME_LENGTH_FOLD.get(ord(text[i]), text[i]))
            i_next = i + 1
        where.append(i)
        i = i_next
    where.append(len(text))
    return "".join(out), where


def term_hits(line: str, terms: list[str], weights: dict[str, float] | None = None) -> float:
    """Keyword occurrences in a line (used to place snippets), each weighted by its rarity when given."""
    return lines_hits([line], terms, weights)[0]


def lines_hits(lines: list[str], terms: list[str], weights: dict[str, float] | None = None) -> list[float]:
    """term_hits() of every line, with the pattern and the weights by stem prepared once."""
    if not terms:
        return [0.0] * len(lines)
    if weights is None:
        return [float(sum(fold(line).lower().count(t) for t in terms)) for line in lines]
    by_stem = {match_stem(t) if t.isascii() else t: weights.get(t, 1.0) for t in terms}
    find = _stems_pattern(tuple(terms)).findall
    return [sum(by_stem.get(m, 1.0) for m in find(fold(line).lower())) for line in lines]
