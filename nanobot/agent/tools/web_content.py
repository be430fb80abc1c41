"""What web_fetch makes of a response body: read within a byte limit (decompressing no more than
that), judged text or binary, decoded as a browser would (web encodings only) and HTML turned into
plain text in linear time. Pure functions of the bytes, run off the event loop by the tool.
"""

from __future__ import annotations

import codecs
import html
import re
import zlib
from typing import TYPE_CHECKING, Any

from nanobot.agent.tools.base import ToolError

if TYPE_CHECKING:
    import httpx


_SKIPPED_TAGS = ("script", "style", "noscript", "svg", "head")
# the tag name ends where a browser ends it: `<svg-icon>` is another element, `</script >` a closer
_SKIPPED_BLOCK = re.compile(rf"(?i)<({'|'.join(_SKIPPED_TAGS)})(?=[\s/>])")
# the closer's name only: its `>` is found with str.find (a `[^>]*>` in the pattern scanned to the end
# of the page for every `</script ` without one, quadratic: a 2 MB page held the daemon 8 minutes)
_CLOSER = {tag: re.compile(rf"(?i)</{tag}(?=[\s/>])") for tag in _SKIPPED_TAGS}
# a numeric character reference of 8+ decimal or 7+ hex digits is past U+10FFFF: U+FFFD, as a browser
# shows it (html.unescape turned its digits into an int: over 4,300 digits a ValueError failed the fetch)
_HUGE_CHAR_REF = re.compile(r"&#(?:0*[1-9][0-9]{7,}|[xX]0*[1-9a-fA-F][0-9a-fA-F]{6,});?")


def _drop_blocks(markup: str) -> str:
    """`markup` without <script>…</script> and the like, in linear time (a lazy `.*?` regex scans to
    the end once per unclosed opener: quadratic, and it runs on the event loop)."""
    closed_from: dict[str, int] = {}  # tag -> first position from which its closer is known absent
    out: list[str] = []
    pos = 0
    for m in _SKIPPED_BLOCK.finditer(markup):
        if m.start() < pos:
            continue
        tag = m.group(1).lower()
        close_end = -1
        if m.end() < closed_from.get(tag, len(markup) + 1):
            found = _CLOSER[tag].search(markup, m.end())
            close_end = markup.find(">", found.end()) if found is not None else -1
        if close_end < 0:  # no closer, or none with its `>`: nor will a later opener find one
            closed_from[tag] = min(closed_from.get(tag, len(markup) + 1), m.end())
            continue  # unclosed: left for the tag stripper, as before
        out.append(markup[pos : m.start()])
        out.append(" ")
        pos = close_end + 1
    out.append(markup[pos:])
    return "".join(out)


def html_to_text(markup: str) -> str:
    markup = _drop_blocks(markup)
    markup = re.sub(r"(?i)<br\s*/?>|</(p|div|li|h[1-6]|tr|section|article)>", "\n", markup)
    markup = re.sub(r"<[^<>]+>", " ", markup)  # [^<>]: a run of '<' costs linear, not quadratic, time
    text = html.unescape(_HUGE_CHAR_REF.sub("\ufffd", markup))
    text = re.sub(r"[ \t\r\f\v]+", " ", text)
    text = re.sub(r" *\n *", "\n", text)  # tags replaced by spaces leave them at line edges
    return re.sub(r"\n\s*\n+", "\n\n", text).strip()


def _decoder(content_encoding: str) -> Any:
    """A zlib decompressor for the response's Content-Encoding (None: identity). One layer only:
    nested encodings ("gzip, gzip") multiply the ratio of a decompression bomb."""
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return None
    if len(codings) > 1 or codings[0] not in ("gzip", "x-gzip", "deflate"):
        raise ToolError(f"unsupported content encoding: {content_encoding}")
    return zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header, detected


def _raw_deflate_instead(content_encoding: str, decoded: int) -> Any:
    """A decompressor for raw deflate (no zlib header), which some servers send as "deflate", when
    nothing was decoded yet; None otherwise (the body is bad)."""
    if decoded == 0 and content_encoding.strip().lower() == "deflate":
        return zlib.decompressobj(-zlib.MAX_WBITS)
    return None


async def read_limited(resp: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    """At most `max_bytes` of the decoded body (and whether there was more), decompressing no more
    than that: the output of every decompress call is bounded, whatever the ratio."""
    encoding = resp.headers.get("content-encoding", "")
    decoder = _decoder(encoding)
    body = bytearray()
    raw_total = 0
    seen = bytearray()  # the raw bytes until something decoded (to start again as raw deflate)
    async for raw in resp.aiter_raw():
        raw_total += len(raw)
        if decoder is None:
            body.extend(raw)
        else:
            if not body:
                seen.extend(raw)
            try:
                body.extend(decoder.decompress(raw, max_bytes + 1 - len(body)))
                # a gzip body may hold several members, one after another: each is decoded (the
                # text after the first was dropped without a word)
                while decoder.eof and decoder.unused_data.lstrip(b"\x00") and len(body) <= max_bytes:
                    rest, decoder = decoder.unused_data.lstrip(b"\x00"), zlib.decompressobj(zlib.MAX_WBITS | 32)
                    try:
                        body.extend(decoder.decompress(rest, max_bytes + 1 - len(body)))
                    except zlib.error:  # not another member (trailing garbage): the body ended
                        decoder = None
                        break
                if decoder is None:
                    break
            except zlib.error as exc:
                decoder = _raw_deflate_instead(encoding, len(body))
                if decoder is None:
                    raise ToolError(f"fetch failed: bad compressed body: {exc}") from None
                try:
                    body.extend(decoder.decompress(bytes(seen), max_bytes + 1))
                except zlib.error as exc2:
                    raise ToolError(f"fetch failed: bad compressed body: {exc2}") from None
        if len(body) > max_bytes or raw_total > max_bytes:
            return bytes(body[:max_bytes]), True
    return bytes(body), False


# declared binary whatever the body; other types (application/vnd.ms-excel is served for CSV) are
# judged by their bytes
_BINARY_TYPES = ("image/", "audio/", "video/", "font/", "application/pdf", "application/zip", "application/gzip",
                 "application/x-tar", "application/x-7z", "application/x-rar")


def binary_body(content_type: str, body: bytes) -> bool:
    """Whether a body is not text: declared as media, a PDF or an archive, or holding NUL bytes (text
    in UTF-8 or a single-byte charset has none; many text types are declared as application/...)."""
    ctype = content_type.split(";", 1)[0].strip().lower()
    if ctype.startswith(_BINARY_TYPES) and not ctype.endswith(("+xml", "+json")):
        return True
    if re.search(r"charset\s*=\s*[\"']?utf-?(16|32)", content_type, re.IGNORECASE):
        return False  # declared text in an encoding whose text holds NUL bytes
    head = body[:4096]
    return b"\x00" in head and not head.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff"))


_BOMS = (
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_.:-]+)""", re.I)
#: labels browsers read as another encoding than Python does: Latin-1 (or ASCII) as its superset
#: Windows-1252, with "€" and "–"; Turkish Latin-5 as Windows-1254 and Thai TIS-620 as Windows-874
#: (their supersets); and labels Python does not know
_WEB_LABELS = {
    **dict.fromkeys(("iso-8859-1", "iso8859-1", "latin-1", "latin1", "l1", "ascii", "us-ascii"), "cp1252"),
    **dict.fromkeys(("iso-8859-9", "iso8859-9", "latin5", "l5"), "cp1254"),
    **dict.fromkeys(("tis-620", "iso-8859-11", "iso8859-11", "windows-874"), "cp874"),
    "x-sjis": "shift_jis",
    "windows-31j": "cp932",
    "gb_2312-80": "gbk",
    "x-gbk": "gbk",
    "x-mac-roman": "mac-roman",
    "x-mac-cyrillic": "mac-cyrillic",
}
#: the encodings of the web (those browsers know), by Python's name for them. Python has more text
#: codecs, and a page named them: `punycode` decodes in quadratic time (2 MB: about a minute of CPU
#: in a thread the fetch deadline cannot stop; six of them starved the daemon's name lookups), and
#: `unicode_escape` or `utf-7` are no page encodings either.
_WEB_ENCODINGS = frozenset(
    codecs.lookup(name).name
    for name in (
        "utf-8", "utf-16", "utf-16-le", "utf-16-be", "cp866", "koi8-r", "koi8-u", "mac-roman", "mac-cyrillic",
        "cp874", "cp1250", "cp1251", "cp1252", "cp1253", "cp1254", "cp1255", "cp1256", "cp1257", "cp1258",
        "iso8859-2", "iso8859-3", "iso8859-4", "iso8859-5", "iso8859-6", "iso8859-7", "iso8859-8", "iso8859-10",
        "iso8859-13", "iso8859-14", "iso8859-15", "iso8859-16", "gbk", "gb2312", "gb18030", "big5", "big5hkscs",
        "euc-jp", "iso2022-jp", "shift_jis", "cp932", "euc-kr", "cp949",
    )
)


def decode_body(body: bytes, header_charset: str | None) -> str:
    """A page's text as a browser would read it: a byte-order mark first, then the charset of the
    Content-Type header, then one a `<meta>` tag declares in the first 2 KB; otherwise UTF-8, and
    Windows-1252 for a body that is not valid UTF-8 (old pages without any declaration)."""
    for bom, codec in _BOMS:
        if body.startswith(bom):
            return body.decode(codec, errors="replace")
    declared = header_charset
    from_meta = False
    if not declared and (meta := _META_CHARSET.search(body[:2048])):
        declared, from_meta = meta.group(1).decode("ascii", errors="replace"), True
    if declared:
        name = declared.strip().lower()
        name = _WEB_LABELS.get(name, name)
        if from_meta and name.replace("_", "-").startswith("utf-16"):
            name = "utf-8"  # a page that can say so in ASCII is no UTF-16 page: browsers read UTF-8
        try:
            # a web encoding only: "base64" or "rot13" failed the whole fetch, "punycode" stalled it
            if codecs.lookup(name).name in _WEB_ENCODINGS:
                return body.decode(name, errors="replace")
        except (LookupError, UnicodeError):
            pass
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body.decode("cp1252", errors="replace")
