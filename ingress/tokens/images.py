"""An image part's tokens: OpenAI's tile formula where the detail and size are known, else its maximum."""

from __future__ import annotations

import base64
import binascii
import math
import struct

# (base, per tile) of OpenAI's documented formula: gpt-4o, gpt-4.1, gpt-4.5, o1, o3 and the default;
# gpt-4o-mini bills images at 2833 + 5667 per tile. The patch-based models (gpt-4.1-mini/-nano,
# o4-mini, gpt-5-mini/-nano: 32 px patches, capped at 1536, times a multiplier) are approximated by it.
_TILES = {"gpt-4o-mini": (2833, 5667)}
_DEFAULT = (85, 170)
MAX_TILES = 8  # 768 x 2048 after the two scalings: the most any image costs at detail high
_HEAD_CHARS = 87_384  # the base64 of the first 64 KiB: where JPEG puts its frame header past EXIF


def tile_costs(model: str) -> tuple[int, int]:
    return next((cost for prefix, cost in _TILES.items() if model.startswith(prefix)), _DEFAULT)


def image_tokens(url: str, detail: str | None, costs: tuple[int, int]) -> int:
    """`detail` low is the base alone; otherwise (high, auto, original, none) the tiles of the image's
    size, read from a data: URL's header, or MAX_TILES when the size is unknown (a remote URL)."""
    base, tile = costs
    if detail == "low":
        return base
    size = _size_of(url)
    if size is None:
        return base + tile * MAX_TILES
    return base + tile * _tiles(*size)


def _tiles(w: int, h: int) -> int:
    """Fit within 2048 x 2048, then bring the shortest side down to 768; count 512 px tiles."""
    width, height = float(w), float(h)
    if max(width, height) > 2048:
        scale = 2048 / max(width, height)
        width, height = width * scale, height * scale
    if min(width, height) > 768:
        scale = 768 / min(width, height)
        width, height = width * scale, height * scale
    return max(1, math.ceil(width / 512)) * max(1, math.ceil(height / 512))


def _size_of(url: str) -> tuple[int, int] | None:
    """Width and height from the header of a base64 data: URL (PNG, GIF, WebP, JPEG), or None."""
    if not url.startswith("data:"):
        return None
    comma = url.find(",", 0, 256)
    if comma < 0 or not url[:comma].endswith(";base64"):
        return None
    head = url[comma + 1:comma + 1 + _HEAD_CHARS]
    try:
        data = base64.b64decode(head[: len(head) // 4 * 4])
    except (binascii.Error, ValueError):
        return None
    try:
        if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
            return struct.unpack(">II", data[16:24])
        if data[:6] in (b"GIF87a", b"GIF89a"):
            return struct.unpack("<HH", data[6:10])
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp(data)
        if data[:2] == b"\xff\xd8":
            return _jpeg(data)
    except struct.error:
        return None
    return None


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 ":
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    if chunk == b"VP8L":
        (bits,) = struct.unpack("<I", data[21:25])
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


def _jpeg(data: bytes) -> tuple[int, int] | None:
    """Walk the markers to the first start-of-frame (SOF0-SOF15 but DHT, JPG and DAC)."""
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        (length,) = struct.unpack(">H", data[i + 2:i + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", data[i + 5:i + 9])
            return w, h
        i += 2 + length
    return None
