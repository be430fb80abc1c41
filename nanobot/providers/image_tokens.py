"""What an image in a prompt costs, in tokens, from its pixel size.

Images go at the provider's default detail, which prices them by their size: at OpenAI's high
detail an image is scaled into 2048 × 2048, then its short side to 768, and costs 85 + 170 per
512-pixel tile (765 for a square photo); Anthropic charges about width × height / 750 after scaling
the long side to 1568 (~1,600 for a square photo). The estimate takes the larger of the two. Counted
as 85 each (low detail), an album of ten photos was ~850 tokens where the provider counted ~10,000,
and a small window overflowed. The size is read from the image's header (PNG, GIF, WebP, JPEG);
an image whose size cannot be read costs the most any image can.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from typing import Any

MAX_IMAGE_TOKENS = 1_600  # what a provider charges at most for one image (the long side scaled down)
_HEADER_CHARS = 131_072  # base64 characters decoded to find a JPEG's size (EXIF may come first)


def image_part_tokens(part: Any) -> int:
    """Tokens of one non-text content part (an `image_url` part; anything else as the largest image)."""
    url = part.get("image_url", {}).get("url", "") if isinstance(part, dict) else ""
    size = _data_url_size(url) if isinstance(url, str) else None
    return MAX_IMAGE_TOKENS if size is None else image_tokens(*size)


def image_tokens(width: int, height: int) -> int:
    if width <= 0 or height <= 0:
        return MAX_IMAGE_TOKENS
    return min(MAX_IMAGE_TOKENS, max(_openai_high_detail(width, height), _anthropic(width, height)))


def _openai_high_detail(width: int, height: int) -> int:
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


def _anthropic(width: int, height: int) -> int:
    scale = min(1.0, 1568 / max(width, height))
    return math.ceil(width * scale * height * scale / 750)


def _data_url_size(url: str) -> tuple[int, int] | None:
    if not url.startswith("data:") or ";base64," not in url:
        return None  # an image by address: its size is unknown here
    encoded = url.split(";base64,", 1)[1][:_HEADER_CHARS]
    try:
        head = base64.b64decode(encoded[: len(encoded) // 4 * 4])
    except (binascii.Error, ValueError):
        return None
    return pixel_size(head)


def pixel_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the first bytes of a PNG, GIF, WebP or JPEG image; None if not found."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_size(data)
    if data.startswith(b"\xff\xd8"):
        return _jpeg_size(data)
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    kind = data[12:16]
    if kind == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if kind == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if kind == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start-of-frame markers


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 9 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            at += 2
            continue
        length = int.from_bytes(data[at + 2 : at + 4], "big")
        if marker in _JPEG_FRAMES:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        at += 2 + length
    return None
