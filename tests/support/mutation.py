"""Mutants of a FlatBuffers buffer, for tests that a fast read accepts only what the verifier accepts."""

from __future__ import annotations

import random


def mutants(buf: bytes, rng: random.Random, *, size_prefixed: bool = False, count: int = 40) -> list[bytes]:
    """`count` copies of `buf`, each with one change: a bit flipped, a byte set to a boundary value, an
    aligned 16-bit word set to one, the end cut off, or bytes inserted. With `size_prefixed`, a change of
    length keeps the size prefix true, so that the checks past it are reached."""
    out = []
    for _ in range(count):
        b = bytearray(buf)
        kind = rng.randrange(5)
        if kind == 0:
            at = rng.randrange(len(b))
            b[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            at = rng.randrange(len(b))
            b[at] = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        elif kind == 2:  # a structural word: every aligned u32/u16 set to a boundary value
            at = rng.randrange(0, len(b) - 4, 2)
            b[at:at + 2] = rng.choice([0, 1, 2, 3, 4, 0xFFFF, 0x7FFF, len(b) & 0xFFFF]).to_bytes(2, "little")
        elif kind == 3:
            del b[rng.randrange(4 if size_prefixed else 8, len(b)):]
        else:
            at = rng.randrange(len(b))
            b[at:at] = bytes(rng.randrange(1, 8))
        if size_prefixed and kind >= 3:
            b[0:4] = (len(b) - 4).to_bytes(4, "little")
        out.append(bytes(b))
    return out
