"""Size-prefixed frames: split a byte stream into frames whatever the read boundaries (sans-I/O)."""

from __future__ import annotations

import struct
from collections.abc import Iterator

PREFIX = struct.Struct("<I")
MAX_FRAME = 16 * 1024 * 1024


class FrameError(ValueError):
    """The byte stream is not a sequence of well-formed frames."""


class FrameDecoder:
    """Feed bytes as they arrive; get back every frame completed so far, size prefix included (a frame
    is verified whole: its fields are aligned from the start of the prefix)."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame
        self._error: FrameError | None = None

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The frames completed so far, in order; a bad size prefix raises FrameError right after the
        frames before it (at once when there are none), so nothing good is lost and the outcome does
        not depend on how the bytes were split. Every later feed() or finish() raises it again.

        The bytes are parsed here, eagerly; the iterator only hands out what was found. A caller that
        loops over it gets the good frames, then the error, in the one loop."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        # With nothing held back (the common case: reads end where frames do), frames are cut from `data`
        # itself, and a read that is one whole frame is that frame: no copy into the buffer and out again.
        src = data if not buf and type(data) is bytes else buf
        if src is buf:
            buf += data
        frames: list[bytes] = []
        pos = 0
        n = len(src)
        while n - pos >= PREFIX.size:
            (size,) = PREFIX.unpack_from(src, pos)
            if size < 8 or size > self._max:
                self._error = FrameError(f"frame size {size} is outside 8..{self._max}")
                break
            end = pos + PREFIX.size + size
            if end > n:
                break
            frames.append(src if end == n and not pos and src is data else bytes(src[pos:end]))
            pos = end
        if src is buf:
            if pos:
                del buf[:pos]
        elif pos < n:
            buf += memoryview(data)[pos:]
        if self._error is None:
            return iter(frames)
        if not frames:
            raise self._error
        return _then_raise(frames, self._error)

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back."""
        return len(self._buf)

    def finish(self) -> None:
        """At end of stream: leftover bytes mean the stream was cut inside a frame."""
        if self._error is not None:
            raise self._error
        if self._buf:
            raise FrameError(f"stream ended inside a frame ({len(self._buf)} bytes left over)")


def _then_raise(frames: list[bytes], error: FrameError) -> Iterator[bytes]:
    yield from frames
    raise error


def frame(buf: bytes | bytearray) -> bytes:
    """Prefix an unprefixed buffer with its size. (Builders can also finish size-prefixed directly.)"""
    return PREFIX.pack(len(buf)) + buf
