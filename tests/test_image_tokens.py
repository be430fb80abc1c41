"""Images in a prompt are priced by their size, as the providers charge them at their default detail.

Counted as 85 tokens each (OpenAI's low detail, which nanobot never asked for), ten photos on an
8,192-token window were estimated at ~3,100 tokens where the provider counted ~10,000: the request
went over the window and the turn failed.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

from nanobot.providers.image_tokens import MAX_IMAGE_TOKENS, image_part_tokens, image_tokens, pixel_size
from tests.agent_helpers import make_runtime
from tests.fakes.llm_server import FakeLLMServer, Reply


def png(width: int, height: int) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + header
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(header)) + chunk + struct.pack(">I", zlib.crc32(chunk))


def jpeg(width: int, height: int) -> bytes:
    exif = b"\xff\xe1" + struct.pack(">H", 2 + 30_000) + b"E" * 30_000  # a camera's EXIF block first
    frame = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, height, width, 3) + b"\x00" * 9
    return b"\xff\xd8" + exif + frame + b"\xff\xd9"


def test_the_size_is_read_from_each_kind_of_image() -> None:
    assert pixel_size(png(2048, 1536)) == (2048, 1536)
    assert pixel_size(jpeg(4032, 3024)) == (4032, 3024)
    assert pixel_size(b"GIF89a" + struct.pack("<HH", 320, 200)) == (320, 200)
    vp8x = b"RIFF\x00\x00\x00\x00WEBPVP8X" + b"\x00" * 8 + (1999).to_bytes(3, "little") + (999).to_bytes(3, "little")
    assert pixel_size(vp8x) == (2000, 1000)
    assert pixel_size(b"not an image") is None


def test_a_photo_costs_at_least_what_the_providers_charge() -> None:
    assert image_tokens(2048, 2048) >= 765  # OpenAI high detail: four 512-pixel tiles + 85
    assert image_tokens(4032, 3024) >= 765
    assert image_tokens(1092, 1092) >= 1590  # Anthropic: ~width x height / 750
    assert image_tokens(64, 64) < 300  # a small one stays cheap
    encoded = base64.b64encode(png(2048, 2048)).decode()
    assert image_part_tokens({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}}) == (
        image_tokens(2048, 2048)
    )
    by_address = {"type": "image_url", "image_url": {"url": "https://example.invalid/x.png"}}
    assert image_part_tokens(by_address) == MAX_IMAGE_TOKENS


async def test_an_album_on_a_small_window_sends_what_fits_and_names_the_rest(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    from nanobot.bus.events import InboundMessage

    config, _ = make_config(**{"agents.defaults.contextWindowTokens": 8192, "agents.defaults.maxTokens": 1024})
    runtime = make_runtime(config)
    runtime.agent.provider.supports_vision = lambda: True
    media = config.workspace_path / "media"
    media.mkdir(parents=True, exist_ok=True)
    photos = []
    for n in range(10):
        photo = media / f"telegram_5_{n}_photo.png"
        photo.write_bytes(png(2048, 2048) + bytes([n]) * 19_000)
        photos.append(str(photo))
    fake_llm.push(Reply(content="nice photos"))
    try:
        runtime.loop.start()
        out = await runtime.bus.request(InboundMessage("telegram", "5", "5", "what do you see?", media=photos))
    finally:
        await runtime.aclose()
    assert out is not None and out.content == "nice photos"
    sent: list[dict[str, Any]] = fake_llm.requests[-1]["messages"]
    images = [p for m in sent if isinstance(m["content"], list) for p in m["content"] if p["type"] == "image_url"]
    text = json.dumps([m["content"] if isinstance(m["content"], str) else m["content"][0]["text"] for m in sent])
    assert len(images) >= 1 and len(images) * 765 + len(text) // 3 <= 8192 - 1024, len(images)  # as OpenAI counts
    assert text.count("not shown: this message's images take more") == 10 - len(images)
