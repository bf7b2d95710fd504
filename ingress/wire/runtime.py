"""The hand-written runtime of the generated modules in `_generated/`: what their code calls, typed.

`python -m codegen` writes one specialised function per table (`encoders.py`, `readers.py`,
`verifier.py`); everything that does not depend on the schema lives here (the verifier's in
verifier_runtime.py), where mypy and ruff read it like any other module. It is the generated code's API,
not a service's: reach the wire format through `ingress.wire`.

- encoders: append strings, vectors and offsets to a bytearray written forward (`write_string`, `ref`,
  `vector_start`, `string_vector`, `finish`);
- readers: a table's vtable, strings and vectors of a verified buffer (`vtable`, `read_string`, `vector`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
Buffer = bytes | bytearray | memoryview

u16 = struct.Struct("<H").unpack_from
u32 = struct.Struct("<I").unpack_from
i32 = struct.Struct("<i").unpack_from

# Unpackers of the first k vtable entries, and k absent ones, by k: the generated modules reserve as
# many as their widest table has fields (`reserve_slots`), when they are imported.
ENTRIES: list[Callable[[Buffer, int], tuple[int, ...]]] = []
ABSENT: list[tuple[int, ...]] = []


def reserve_slots(slots: int) -> None:
    """Make ENTRIES and ABSENT cover tables of up to `slots` fields."""
    for k in range(len(ENTRIES), slots + 1):
        ENTRIES.append(struct.Struct(f"<{k}H").unpack_from)
        ABSENT.append((0,) * k)


# --- encoders: a buffer written forward ----------------------------------------------------------------

# Annotated: the generated encoders import these through an import cycle, where a compiled build's type
# check cannot infer them
ZERO: tuple[bytes, ...] = tuple(bytes(n) for n in range(8))
_U32 = struct.Struct("<I")
pack_u32: Callable[[int], bytes] = _U32.pack
patch_u32: Callable[[bytearray, int, int], None] = _U32.pack_into


def write_string(buf: bytearray, value: str) -> int:
    """Append a string (u32 length, UTF-8 bytes, NUL) 4-byte aligned; return its position."""
    data = value.encode()
    pad = -len(buf) & 3
    if pad:
        buf += ZERO[pad]
    pos = len(buf)
    buf += pack_u32(len(data))
    buf += data
    buf += b"\0"
    return pos


def ref(buf: bytearray, at: int, target: int) -> None:
    """Point the uoffset at `at` forward to `target`."""
    patch_u32(buf, at, target - at)


def vector_start(buf: bytearray, count: int, elem_align: int = 4) -> int:
    """Append a vector's length, 4-aligned (it is a uint32), so that its elements start
    `elem_align`-aligned; return its position."""
    pad = -(len(buf) + 4) & (max(elem_align, 4) - 1)
    if pad:
        buf += ZERO[pad]
    pos = len(buf)
    buf += pack_u32(count)
    return pos


def string_vector(buf: bytearray, values: list[str]) -> int:
    """Append a vector of strings: the offsets, then each string after them; return its position."""
    pos = vector_start(buf, len(values))
    buf += bytes(4 * len(values))
    for i, value in enumerate(values):
        ref(buf, pos + 4 + 4 * i, write_string(buf, value))
    return pos


def finish(
    buf: bytearray, write: Callable[[bytearray, T], int], data: T, identifier: bytes, size_prefixed: bool
) -> None:
    """Root offset (after an optional size prefix) and file identifier, then the root table."""
    start = 4 if size_prefixed else 0
    buf += bytes(start + 8)
    buf[start + 4 : start + 8] = identifier
    root = write(buf, data)
    patch_u32(buf, start, root - start)
    if size_prefixed:
        patch_u32(buf, 0, len(buf) - 4)


# --- readers: a verified buffer --------------------------------------------------------------------------


def vtable(buf: bytes, t: int, slots: int) -> tuple[int, ...]:
    """The field offsets of the table at `t`, one per slot (0: absent), however long its vtable."""
    vt: int = t - i32(buf, t)[0]
    have: int = (u16(buf, vt)[0] - 4) >> 1
    if have >= slots:
        return ENTRIES[slots](buf, vt + 4)
    return ENTRIES[have](buf, vt + 4) + ABSENT[slots - have]


def read_string(buf: bytes, at: int) -> str:
    """The string whose uoffset is at `at`."""
    at += u32(buf, at)[0]
    start = at + 4
    return str(buf[start : start + u32(buf, at)[0]], "utf-8")


def vector(buf: bytes, at: int) -> tuple[int, int]:
    """(start of the elements, count) of the vector whose uoffset is at `at`."""
    at += u32(buf, at)[0]
    return at + 4, u32(buf, at)[0]
