"""Server-sent events: OpenAI chunks and in-band errors as `data: ...\\n\\n` lines, in a reused buffer."""

from __future__ import annotations

from typing import Any

import msgspec

DONE = b"data: [DONE]\n\n"
_PREFIX = b"data: "

_encoder = msgspec.json.Encoder()


class SseWriter:
    """Encodes events into one reused bytearray; each call returns an independent bytes object."""

    def __init__(self) -> None:
        self._buf = bytearray(_PREFIX)

    def event(self, obj: Any) -> bytes:
        _encoder.encode_into(obj, self._buf, len(_PREFIX))
        self._buf += b"\n\n"
        return bytes(self._buf)
HEARTBEAT = b": ping\n\n"
