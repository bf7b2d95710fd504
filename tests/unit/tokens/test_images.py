"""ingress/tokens/images.py: an image costs OpenAI's tile formula, its size read from the data URL's header."""

from __future__ import annotations

import base64
import struct
from typing import Any

import pytest

from unit.tokens.test_chat import chat_tokens


def _png(width: int, height: int) -> str:
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sII", 13, b"IHDR", width, height) + b"\x08\x02\x00\x00\x00"
    return "data:image/png;base64," + base64.b64encode(head + bytes(64)).decode()


def _jpeg(width: int, height: int) -> str:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, height, width, 3) + bytes(9)
    return "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8" + app0 + sof + bytes(32)).decode()


def _gif(width: int, height: int) -> str:
    gif = b"GIF89a" + struct.pack("<HH", width, height) + bytes(8)
    return "data:image/gif;base64," + base64.b64encode(gif).decode()


def _webp(width: int, height: int) -> str:
    size = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    vp8x = b"VP8X" + struct.pack("<I", 10) + bytes(4) + size
    return "data:image/webp;base64," + base64.b64encode(b"RIFF" + bytes(4) + b"WEBP" + vp8x + bytes(8)).decode()


@pytest.mark.parametrize(("model", "url", "detail", "tokens"), [
    # OpenAI's vision guide: 1024 x 1024 high is 765; 2048 x 4096 high is 1105; 4096 x 8192 low is 85
    ("gpt-4o", _png(1024, 1024), "high", 765),
    ("gpt-4o", _jpeg(2048, 4096), "high", 1105),
    ("gpt-4o", _gif(4096, 8192), "low", 85),
    ("gpt-4o", _webp(512, 512), "auto", 85 + 170),
    ("gpt-4o", _png(100, 3000), None, 85 + 170 * 4),  # 100 x 3000 → 68 x 2048: 1 x 4 tiles
    ("gpt-4o", "https://example.com/cat.png", "high", 85 + 170 * 8),  # size unknown: the most it can cost
    ("gpt-4o", "https://example.com/cat.png", "low", 85),
    ("gpt-4o-mini", _png(1024, 1024), "high", 2833 + 5667 * 4),
    ("gpt-4o-mini", "https://example.com/cat.png", "low", 2833),
])
def test_images_cost_openai_s_tile_formula(model: str, url: str, detail: str | None, tokens: int) -> None:
    image: dict[str, Any] = {"url": url} | ({"detail": detail} if detail else {})
    with_image = chat_tokens(model, [{"role": "user", "content": [{"type": "image_url", "image_url": image}]}])
    assert with_image - chat_tokens(model, [{"role": "user", "content": ""}]) == tokens
