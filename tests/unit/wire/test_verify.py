"""The generated verifier accepts every buffer our encoders and flatc write, and rejects damage exactly
where FlatBuffers' C++ Verifier does (strict=False), or more (strict=True, the default)."""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import pytest
import stock_buffers
from cxx_oracle import SCHEMA, CxxVerifier

from codegen.schema import parse
from ingress import wire
from ingress.encoding.embeddings import encode_embedding_request
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.requests import encode_request
from ingress.encoding.stock import encode_request_stock
from ingress.oai.codec import decode_chat_request
from ingress.oai.embeddings import decode_embedding_request
from ingress.wire import verifier_runtime
from ingress.wire import verify as public
from ingress.wire._generated import verifier as gv
from ingress.wire.stock import BuilderPool
from unit.test_oracle import (
    CHUNK,
    CHUNK_BARE,
    EMBEDDING_REQUEST,
    EMBEDDING_RESPONSE,
    ERROR,
    REQUEST,
    RESPONSE,
    flatc_binary,
    python_request,
    with_identifier,
)

ROOTS = {"request": "CompletionRequest", "response": "CompletionResponse", "chunk": "CompletionChunk", "error": "Error",
         "embedding_request": "EmbeddingRequest", "embedding_response": "EmbeddingResponse"}
IDENTIFIERS = {"request": b"LGRQ", "response": b"LGRS", "chunk": b"LGCK", "error": b"LGER",
               "embedding_request": b"LGEQ", "embedding_response": b"LGES"}
TABLES = parse(SCHEMA.read_text()).tables


def verdict(kind: str, buf: bytes | bytearray, size_prefixed: bool = False, *, strict: bool = False,
            **limits: int) -> str | None:
    """None if the generated verifier accepts `buf`, else its message. Any other exception fails the test."""
    try:
        verifier = verifier_runtime.Verifier(buf, strict=strict, **limits)
        verifier.verify(*gv.ROOTS[ROOTS[kind]], size_prefixed=size_prefixed)
    except verifier_runtime.VerifyError as exc:
        assert not str(exc).startswith("unverifiable"), exc  # a read that escaped its bounds check
        return str(exc)
    return None


# --- valid buffers from every writer --------------------------------------------------------------

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Wetter für eine Stadt",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                                         "strict": True}}
OPENAI_REQUESTS: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "hello"}]},
    {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "héllo ✓ 🌍"}],
     "temperature": 0.3, "top_p": 0.9, "max_tokens": 7, "seed": -12, "stop": ["\n", "END", "终"], "n": 2,
     "presence_penalty": -1.5, "frequency_penalty": 2.0, "logit_bias": {"50256": -100, "7": 2.5}, "user": "u-1",
     "metadata": {"team": "search", "ключ": "значение"}, "response_format": {"type": "json_object"}},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                               {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\":\"Zürich\"}"}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "14 °C"}],
     "tools": [TOOL], "tool_choice": "auto", "parallel_tool_calls": False, "max_completion_tokens": 100,
     "stream": True, "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 2},
]
RESPONSES = [
    wire.Response(id="chatcmpl-1", model="m", created=1767225600, choices=[
        wire.Choice(index=0, content="Hallo 👋", finish_reason="tool_calls", tool_calls=[
            wire.FunctionCall(id="call_9", name="lookup", arguments='{"q":"naïve"}')]),
        wire.Choice(index=1, refusal="no", finish_reason="content_filter")],
        usage=wire.Usage(prompt_tokens=12, completion_tokens=3, total_tokens=15), system_fingerprint="fp_1"),
    wire.Response(id="", model="", created=0, choices=[]),
]
CHUNKS = [
    wire.Chunk(sequence=0, id="chatcmpl-1", model="m", created=1767225600, role="assistant", content="Δx ≈ 0"),
    wire.Chunk(sequence=2**63 + 5, choice_index=3, tool_calls=[
        wire.ToolCallDelta(index=0, id="call_1", type="function", name="get_weather", arguments='{"ci'),
        wire.ToolCallDelta(index=0, arguments='ty":"Köln"}')], finish_reason="length",
        usage=wire.Usage(prompt_tokens=1), done=True),
    wire.Chunk(sequence=1),
]
ERRORS = [wire.ErrorInfo(status=429, message="Too many requests — réessayez", type="rate_limit_exceeded",
                         code="rate_limit", param="model"),
          wire.ErrorInfo(status=500, message="")]
EMBEDDING_REQUESTS: list[dict[str, Any]] = [
    {"input": "héllo ✓ 🌍"},
    {"input": ["a", "b c"], "dimensions": 3, "encoding_format": "base64", "user": "u-1"},
    {"input": [[0, 2**31 - 1], [7]]},
    {"input": [1, 2]},
]
EMBEDDINGS = [wire.Embeddings(model="m", vectors=[[0.5, -0.25], [], [2.0**-149, -(2.0**127)]],
                              usage=wire.Usage(prompt_tokens=3, total_tokens=3)),
              wire.Embeddings(model="", vectors=[])]
DOCUMENTS = {"request": [REQUEST], "response": [RESPONSE], "chunk": [CHUNK, CHUNK_BARE], "error": [ERROR],
             "embedding_request": [EMBEDDING_REQUEST], "embedding_response": [EMBEDDING_RESPONSE]}


@dataclass(frozen=True)
class Valid:
    name: str
    kind: str
    data: bytes | bytearray
    size_prefixed: bool = False


def _requests() -> list[Any]:
    meta = RequestMeta(api_key="sk-test", tenant_id="tenant-7", priority=-3, timeout_ms=30_000,
                       traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tracestate="k=v")
    out = []
    for doc in OPENAI_REQUESTS:
        request = decode_chat_request(msgspec.json.encode({"model": "gpt-4o-mini", **doc}))
        out.append((request, compute_passport(request, meta, now=1767225600.0)))
    return out


@cache
def valid_buffers() -> tuple[Valid, ...]:
    """Buffers from the fast encoders, the stock Builder, and flatc itself (plain and size-prefixed)."""
    pool = BuilderPool(size=1)
    out: list[Valid] = []
    for i, (request, passport) in enumerate(_requests()):
        out.append(Valid(f"request-fast-{i}", "request", encode_request(request, f"req-{i}", passport)))
        out.append(Valid(f"request-stock-{i}", "request",
                         encode_request_stock(pool, request, f"req-{i}", passport)))
    out.append(Valid("request-python-builder", "request", python_request()))
    out.append(Valid("request-python-builder-prefixed", "request", python_request(size_prefixed=True), True))
    for i, response in enumerate(RESPONSES):
        out.append(Valid(f"response-fast-{i}", "response", wire.write_response(response)))
        out.append(Valid(f"response-stock-{i}", "response", stock_buffers.encode_response_stock(pool, response)))
    for i, chunk in enumerate(CHUNKS):
        out.append(Valid(f"chunk-fast-{i}", "chunk", wire.write_chunk(chunk), True))
        out.append(Valid(f"chunk-stock-{i}", "chunk", stock_buffers.encode_chunk_frame_stock(pool, chunk), True))
    for i, error in enumerate(ERRORS):
        for framed in (False, True):
            tag = "framed" if framed else "plain"
            out.append(Valid(f"error-fast-{tag}-{i}", "error", wire.write_error(error, framed=framed), framed))
            out.append(Valid(f"error-stock-{tag}-{i}", "error",
                             stock_buffers.encode_error_stock(pool, error, framed=framed), framed))
    passport = _requests()[1][1]
    for i, doc in enumerate(EMBEDDING_REQUESTS):
        request = decode_embedding_request(msgspec.json.encode({"model": "text-embedding-3-small", **doc}))
        out.append(Valid(f"embedding-request-fast-{i}", "embedding_request",
                         encode_embedding_request(request, f"req-{i}", passport)))
        out.append(Valid(f"embedding-request-stock-{i}", "embedding_request",
                         stock_buffers.encode_embedding_request_stock(pool, request, f"req-{i}", passport)))
    for i, embeddings in enumerate(EMBEDDINGS):
        out.append(Valid(f"embedding-response-fast-{i}", "embedding_response", wire.write_embeddings(embeddings)))
        out.append(Valid(f"embedding-response-stock-{i}", "embedding_response",
                         stock_buffers.encode_embeddings_stock(pool, embeddings)))
    with tempfile.TemporaryDirectory() as scratch:
        for kind, documents in DOCUMENTS.items():
            for i, document in enumerate(documents):
                for prefixed in (False, True):
                    data = flatc_binary(Path(scratch, f"{kind}-{i}-{prefixed}"), kind, document, size_prefixed=prefixed)
                    data = with_identifier(data, IDENTIFIERS[kind], size_prefixed=prefixed)
                    tag = "prefixed" if prefixed else "plain"
                    out.append(Valid(f"{kind}-flatc-{tag}-{i}", kind, data, prefixed))
    return tuple(out)


@pytest.mark.cxx
@pytest.mark.parametrize("valid", valid_buffers(), ids=lambda v: v.name)
def test_valid_buffers_are_accepted_by_both(cxx_verifier: CxxVerifier, valid: Valid) -> None:
    assert cxx_verifier.verify(valid.kind, valid.data, valid.size_prefixed)
    assert verdict(valid.kind, valid.data, valid.size_prefixed) is None
    assert verdict(valid.kind, valid.data, valid.size_prefixed, strict=True) is None
    verifier = verifier_runtime.Verifier(bytearray(valid.data))
    verifier.verify(*gv.ROOTS[ROOTS[valid.kind]], size_prefixed=valid.size_prefixed)
    assert 1 <= verifier.walked <= verifier.refs <= len(valid.data) // 4


@pytest.mark.cxx
@pytest.mark.parametrize("valid", valid_buffers()[::3], ids=lambda v: v.name)
def test_a_buffer_is_no_other_root_and_keeps_its_framing(cxx_verifier: CxxVerifier, valid: Valid) -> None:
    for kind in ROOTS:
        if kind != valid.kind:
            assert not cxx_verifier.verify(kind, valid.data, valid.size_prefixed)
            assert verdict(kind, valid.data, valid.size_prefixed) == (
                f"file identifier: {IDENTIFIERS[valid.kind]!r}, expected {IDENTIFIERS[kind]!r}")
    assert not cxx_verifier.verify(valid.kind, valid.data, not valid.size_prefixed)
    assert verdict(valid.kind, valid.data, not valid.size_prefixed) is not None


# --- a tiny reader and a hand assembler, to damage and craft buffers --------------------------------


def u16(buf: bytes | bytearray, at: int) -> int:
    return int(struct.unpack_from("<H", buf, at)[0])


def u32(buf: bytes | bytearray, at: int) -> int:
    return int(struct.unpack_from("<I", buf, at)[0])


def put16(buf: bytearray, at: int, value: int) -> None:
    struct.pack_into("<H", buf, at, value & 0xFFFF)


def put32(buf: bytearray, at: int, value: int) -> None:
    struct.pack_into("<I", buf, at, value & 0xFFFFFFFF)


def root_of(buf: bytes | bytearray, start: int = 0) -> int:
    return start + u32(buf, start)


def vtable_of(buf: bytes | bytearray, t: int) -> int:
    return t - int(struct.unpack_from("<i", buf, t)[0])


def entry_at(buf: bytes | bytearray, t: int, table: str, field: str) -> int:
    """Where the vtable entry of `table.field` is (the field must be present)."""
    slot = next(f.slot for f in TABLES[table].fields if f.name == field)
    at = vtable_of(buf, t) + 4 + 2 * slot
    assert at < vtable_of(buf, t) + u16(buf, vtable_of(buf, t)) and u16(buf, at), f"{table}.{field} is absent"
    return at


def field_at(buf: bytes | bytearray, t: int, table: str, field: str) -> int:
    return t + u16(buf, entry_at(buf, t, table, field))


def deref(buf: bytes | bytearray, at: int) -> int:
    return at + u32(buf, at)


class Raw:
    """A hand-placed buffer, for shapes that no builder writes."""

    def __init__(self, identifier: bytes) -> None:
        self.buf = bytearray(8)
        self.buf[4:8] = identifier

    def pad(self, align: int, before: int = 0) -> None:
        self.buf += bytes(-(len(self.buf) + before) % align)

    def vtable(self, table_size: int, entries: dict[int, int]) -> int:
        self.pad(4)
        at = len(self.buf)
        slots = max(entries, default=-1) + 1
        self.buf += struct.pack(f"<{2 + slots}H", 4 + 2 * slots, table_size, *(entries.get(i, 0) for i in range(slots)))
        return at

    def table(self, vtable: int, size: int) -> int:
        self.pad(4)
        at = len(self.buf)
        self.buf += struct.pack("<i", at - vtable) + bytes(size - 4)
        return at

    def vector(self, count: int, elem_size: int = 4, elem_align: int = 4) -> int:
        self.pad(elem_align, before=4)
        at = len(self.buf)
        self.buf += struct.pack("<I", count) + bytes(count * elem_size)
        return at

    def ref(self, at: int, target: int) -> None:
        assert target > at, "a uoffset points forward"
        put32(self.buf, at, target - at)

    def done(self, root: int) -> bytes:
        self.ref(0, root)
        return bytes(self.buf)


def slot(table: str, field: str) -> int:
    return next(f.slot for f in TABLES[table].fields if f.name == field)


def dag_request(messages: int, parts: int) -> bytes:
    """`messages` references to one Message whose `parts` are `parts` references to one ContentPart:
    1 + messages * (1 + parts) tables for the C++ Verifier, in a few kilobytes."""
    raw = Raw(b"LGRQ")  # uoffsets point forward: each table after the vector that refers to it
    request = raw.table(raw.vtable(8, {slot("CompletionRequest", "messages"): 4}), 8)
    listing = raw.vector(messages)
    message = raw.table(raw.vtable(8, {slot("Message", "parts"): 4}), 8)
    part_list = raw.vector(parts)
    part = raw.table(raw.vtable(4, {}), 4)
    raw.ref(request + 4, listing)
    for i in range(messages):
        raw.ref(listing + 4 + 4 * i, message)
    raw.ref(message + 4, part_list)
    for i in range(parts):
        raw.ref(part_list + 4 + 4 * i, part)
    return raw.done(request)


def overlapping_parts() -> bytes:
    """Two Messages whose `parts` vectors start one word apart in a run of identical words 0x00040004.

    Read as a vector length that word is 262148; read as an element it points 262148 bytes ahead, at
    a word that, read as a table, has the preceding word as its vtable: 4 bytes long, table size 4.
    Every element is a valid empty ContentPart, and the two vectors share all but one element."""
    word = 0x00040004
    raw = Raw(b"LGRQ")
    request = raw.table(raw.vtable(8, {slot("CompletionRequest", "messages"): 4}), 8)
    listing = raw.vector(2)
    vt = raw.vtable(8, {slot("Message", "parts"): 4})
    messages = [raw.table(vt, 8), raw.table(vt, 8)]
    for i, message in enumerate(messages):
        raw.ref(listing + 4 + 4 * i, message)
    raw.ref(request + 4, listing)
    raw.pad(4)
    run = len(raw.buf)
    raw.buf += struct.pack("<I", word) * (2 + 5 * word // 4 + 2)
    for i, message in enumerate(messages):
        raw.ref(message + 4, run + 4 * i)
    return raw.done(request)


def overlapping_stop(count: int) -> bytes:
    """A request whose `stop` strings start one word apart in a run of words 126: each reads as a
    string of 126 bytes ('~' and NULs) whose terminator is the high byte of a later word."""
    raw = Raw(b"LGRQ")
    request = raw.table(raw.vtable(8, {slot("CompletionRequest", "stop"): 4}), 8)
    listing = raw.vector(count)
    run = len(raw.buf)
    raw.buf += struct.pack("<I", 126) * (count + 33)
    raw.ref(request + 4, listing)
    for i in range(count):
        raw.ref(listing + 4 + 4 * i, run + 4 * i)
    return raw.done(request)


def struct_vector_at(elements_align: int) -> bytes:
    """A request whose logit_bias (16-byte structs of 8-byte alignment) starts `elements_align`-aligned."""
    raw = Raw(b"LGRQ")
    request = raw.table(raw.vtable(8, {slot("CompletionRequest", "logit_bias"): 4}), 8)
    raw.pad(8, before=4)
    if elements_align == 4:
        raw.buf += bytes(4)
    vector = raw.vector(1, 16, 4)
    struct.pack_into("<i4xd", raw.buf, vector + 4, 50256, -100.0)
    raw.ref(request + 4, vector)
    return raw.done(request)


def short_vtable(size: int) -> bytes:
    """An Error whose vtable is `size` bytes: C++ reads every field of a shorter vtable as absent."""
    raw = Raw(b"LGER")
    raw.buf += struct.pack("<HH", size, 0)
    return raw.done(raw.table(8, 8))


# --- targeted damage: each check, and what C++ lets through ----------------------------------------

(_REQUEST, _PASSPORT), (_PARTS_REQUEST, _PARTS_PASSPORT) = _requests()[1:]
REQUEST_BUF = encode_request(_REQUEST, "req-7", _PASSPORT)
PARTS_BUF = encode_request(_PARTS_REQUEST, "req-8", _PARTS_PASSPORT)
CHUNK_FRAME = wire.write_chunk(CHUNKS[0])
ERROR_FRAME = wire.write_error(ERRORS[0], framed=True)
N = len(REQUEST_BUF)
T = root_of(REQUEST_BUF)
VT = vtable_of(REQUEST_BUF, T)
MODEL = field_at(REQUEST_BUF, T, "CompletionRequest", "model_name")
STOP = deref(REQUEST_BUF, field_at(REQUEST_BUF, T, "CompletionRequest", "stop"))
PASSPORT = deref(REQUEST_BUF, field_at(REQUEST_BUF, T, "CompletionRequest", "passport"))


def _user_prompt() -> int:
    return deref(REQUEST_BUF, field_at(REQUEST_BUF, T, "CompletionRequest", "user_prompt"))


def damaged(*edits: tuple[int, int, int]) -> bytes:
    """REQUEST_BUF with each (position, width, value) written: width 1, 2 or 4 bytes."""
    buf = bytearray(REQUEST_BUF)
    for at, width, value in edits:
        if width == 1:
            buf[at] = value & 0xFF
        elif width == 2:
            put16(buf, at, value)
        else:
            put32(buf, at, value)
    return bytes(buf)


def _aligned8(*names: str) -> int:
    """The vtable entry of the first 8-byte field that sits 8-aligned."""
    for name in names:
        at = entry_at(REQUEST_BUF, T, "CompletionRequest", name)
        if (T + u16(REQUEST_BUF, at)) % 8 == 0:
            return at
    raise AssertionError("no 8-aligned 8-byte field")


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[], bytes | bytearray]
    cxx: bool  # what the C++ Verifier says, and so what strict=False says
    error: str | None  # what strict=True says: None to accept, else a substring of its message
    kind: str = "request"
    size_prefixed: bool = False


CASES = [
    # the buffer as a whole
    Case("empty", lambda: b"", False, "buffer: 0 bytes"),
    Case("shorter-than-12", lambda: REQUEST_BUF[:11], False, "shorter than the smallest buffer"),
    Case("truncated-half", lambda: REQUEST_BUF[: N // 2], False, ""),
    Case("truncated-last-byte", lambda: REQUEST_BUF[:-1], False, ""),
    Case("trailing-bytes", lambda: REQUEST_BUF + bytes(8), True, None),
    Case("identifier", lambda: REQUEST_BUF[:4] + b"LGRX" + REQUEST_BUF[8:], False, "file identifier: b'LGRX'"),
    Case("identifier-nul", lambda: REQUEST_BUF[:4] + b"LG\0Q" + REQUEST_BUF[8:], False, "file identifier"),
    # the root offset
    Case("root-zero", lambda: damaged((0, 4, 0)), False, "root: offset at 0 is 0: zero or negative"),
    Case("root-negative", lambda: damaged((0, 4, 0x80000000)), False, "zero or negative"),
    Case("root-past-end", lambda: damaged((0, 4, N)), False, "root: offset at 0 points past the end"),
    Case("root-misaligned-table", lambda: damaged((0, 4, T + 2)), False, "table at"),
    # the table and its vtable
    Case("vtable-before-start", lambda: damaged((T, 4, T + 8)), False, "out of bounds"),
    Case("vtable-past-end", lambda: damaged((T, 4, T - N)), False, "out of bounds"),
    Case("vtable-misaligned", lambda: damaged((T, 4, T - VT + 1)), False, "misaligned"),
    Case("vtable-odd-size", lambda: damaged((VT, 2, u16(REQUEST_BUF, VT) + 1)), False, "odd size"),
    Case("vtable-runs-past-end", lambda: damaged((VT, 2, 0xFFFE)), False, "runs past the end"),
    Case("vtable-2-bytes", lambda: short_vtable(2), True, "of 2 bytes (strict)", "error"),
    Case("vtable-0-bytes", lambda: short_vtable(0), True, "of 0 bytes (strict)", "error"),
    Case("vtable-4-bytes", lambda: short_vtable(4), True, "table at 12 of 0 bytes", "error"),
    Case("table-size-past-end", lambda: damaged((VT + 2, 2, 0xFFFC)), True, "of 65532 bytes out of bounds (strict)"),
    Case("table-size-zero", lambda: damaged((VT + 2, 2, 0)), True, "of 0 bytes out of bounds (strict)"),
    # scalars
    Case("scalar-past-end", lambda: damaged((entry_at(REQUEST_BUF, T, "CompletionRequest", "max_tokens"), 2,
                                             (N - T + 3) & ~3)), False, "max_tokens: scalar at"),
    Case("scalar-misaligned", lambda: damaged((entry_at(REQUEST_BUF, T, "CompletionRequest", "max_tokens"), 2,
                                               u16(REQUEST_BUF, entry_at(REQUEST_BUF, T, "CompletionRequest",
                                                                         "max_tokens")) + 2)),
         False, "max_tokens: scalar at"),
    Case("scalar-8-byte-on-4", lambda: damaged((_aligned8("top_p", "seed", "presence_penalty"), 2,
                                                u16(REQUEST_BUF, _aligned8("top_p", "seed", "presence_penalty")) + 4)),
         False, "misaligned"),
    Case("byte-scalar-anywhere", lambda: damaged((entry_at(REQUEST_BUF, T, "CompletionRequest", "stream"), 2, 5)),
         True, None),
    Case("enum-out-of-range", lambda: damaged((field_at(REQUEST_BUF, T, "CompletionRequest", "provider"), 1, 0x7F)),
         True, None),
    Case("bool-not-0-or-1", lambda: damaged((field_at(REQUEST_BUF, T, "CompletionRequest", "stream"), 1, 0xFF)),
         True, None),
    # offsets
    Case("offset-misaligned", lambda: damaged((entry_at(REQUEST_BUF, T, "CompletionRequest", "model_name"), 2,
                                               MODEL - T + 1)), False, "model_name: offset at"),
    Case("offset-zero", lambda: damaged((MODEL, 4, 0)), False, "model_name: offset at"),
    Case("offset-negative", lambda: damaged((MODEL, 4, -16)), False, "zero or negative"),
    Case("offset-past-end", lambda: damaged((MODEL, 4, N - MODEL)), False, "points past the end"),
    Case("offset-to-last-byte", lambda: damaged((MODEL, 4, N - 1 - MODEL)), False, "model_name: string at"),
    # strings
    Case("string-misaligned", lambda: damaged((MODEL, 4, u32(REQUEST_BUF, MODEL) + 2)), False, "misaligned"),
    Case("string-past-end", lambda: damaged((deref(REQUEST_BUF, MODEL), 4, 0x7FFFFFF0)), False, "runs past the end"),
    Case("string-length-overflows", lambda: damaged((deref(REQUEST_BUF, MODEL), 4, 0xFFFFFFFF)), False,
         "runs past the end"),
    Case("string-without-nul",
         lambda: damaged((deref(REQUEST_BUF, MODEL) + 4 + u32(REQUEST_BUF, deref(REQUEST_BUF, MODEL)), 1, ord("x"))),
         False, "lacks its NUL terminator"),
    Case("string-with-nul-inside", lambda: damaged((_user_prompt() + 4, 1, 0)), True, None),
    Case("string-not-utf8", lambda: damaged((_user_prompt() + 4, 1, 0xFF)), True, "is not UTF-8"),
    Case("string-surrogate", lambda: damaged((_user_prompt() + 4, 1, 0xED), (_user_prompt() + 5, 1, 0xA0),
                                             (_user_prompt() + 6, 1, 0x80)), True, "is not UTF-8"),
    Case("string-cut-sequence", lambda: damaged((_user_prompt() + 4, 1, 0xE2)), True, "is not UTF-8"),
    # vectors
    Case("vector-misaligned", lambda: damaged((field_at(REQUEST_BUF, T, "CompletionRequest", "stop"), 4,
                                               STOP - field_at(REQUEST_BUF, T, "CompletionRequest", "stop") + 2)),
         False, "stop: vector at"),
    Case("vector-past-end", lambda: damaged((STOP, 4, 0x10000)), False, "runs past the end"),
    Case("vector-byte-size-overflows-32-bits", lambda: damaged(
        (deref(REQUEST_BUF, field_at(REQUEST_BUF, T, "CompletionRequest", "logit_bias")), 4, 0x10000000)),
        False, "is too long"),
    Case("vector-length-max", lambda: damaged((STOP, 4, 0xFFFFFFFF)), False, "is too long"),
    Case("vector-element-past-end", lambda: damaged((STOP + 4, 4, N)), False, "stop: string at"),
    Case("vector-element-misaligned", lambda: damaged((STOP + 8, 4, u32(REQUEST_BUF, STOP + 8) + 1)), False,
         "misaligned"),
    Case("strings-overlap", lambda: overlapping_stop(100), True, "more string bytes than a"),
    Case("struct-vector-aligned", lambda: struct_vector_at(8), True, None),
    Case("struct-vector-misaligned", lambda: struct_vector_at(4), True, "misaligned (strict)"),
    # nested tables
    Case("nested-table-past-end", lambda: damaged((field_at(REQUEST_BUF, T, "CompletionRequest", "passport"), 4,
                                                   N - 4 - field_at(REQUEST_BUF, T, "CompletionRequest", "passport"))),
         False, "Passport"),
    Case("nested-vtable-broken", lambda: damaged((PASSPORT, 4, 0x7FFFFFF0)), False, "Passport: vtable"),
    Case("nested-field-broken", lambda: damaged((field_at(REQUEST_BUF, PASSPORT, "Passport", "tenant_id"), 4, 0)),
         False, "Passport.tenant_id"),
    Case("table-vector-element-past-end", lambda: damaged(
        (deref(REQUEST_BUF, field_at(REQUEST_BUF, T, "CompletionRequest", "messages")) + 4, 4, N)), False, "Message"),
    # size prefixes
    Case("prefix-one-more", lambda: bytes(damaged_prefix(CHUNK_FRAME, +1)), False, "size prefix", "chunk", True),
    Case("prefix-one-less", lambda: bytes(damaged_prefix(CHUNK_FRAME, -1)), False, "size prefix", "chunk", True),
    Case("prefix-max", lambda: b"\xff\xff\xff\xff" + CHUNK_FRAME[4:], False, "size prefix", "chunk", True),
    Case("prefix-only", lambda: bytes(4), False, "size prefix", "chunk", True),
    Case("prefix-and-trailing-bytes", lambda: CHUNK_FRAME + bytes(4), False, "size prefix", "chunk", True),
    Case("frame-read-as-plain", lambda: CHUNK_FRAME, False, "file identifier", "chunk"),
    Case("plain-read-as-frame", lambda: REQUEST_BUF, False, "size prefix", "request", True),
    # Alignment is counted from the first byte given, prefix included: the 8-byte fields of a frame
    # with its prefix stripped sit 4 bytes off.
    Case("frame-with-its-prefix-stripped", lambda: CHUNK_FRAME[4:], False, "CompletionChunk.sequence: scalar at",
         "chunk"),
    Case("error-frame-with-its-prefix-stripped", lambda: ERROR_FRAME[4:], True, None, "error"),
]


def damaged_prefix(frame: bytes | bytearray, delta: int) -> bytearray:
    buf = bytearray(frame)
    put32(buf, 0, u32(buf, 0) + delta)
    return buf


@pytest.mark.cxx
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_damage_is_judged_like_the_cxx_verifier(cxx_verifier: CxxVerifier, case: Case) -> None:
    buf = case.make()
    assert cxx_verifier.verify(case.kind, buf, case.size_prefixed) is case.cxx
    compat = verdict(case.kind, buf, case.size_prefixed)
    strict = verdict(case.kind, buf, case.size_prefixed, strict=True)
    assert (compat is None) is case.cxx, compat
    if case.error is None:
        assert strict is None
    else:
        assert strict is not None and case.error in strict, strict
        if not case.cxx:
            assert compat is not None and case.error in compat, compat


def test_a_valid_base_is_damaged_only_where_the_cases_say() -> None:
    for buf, kind, prefixed in ((REQUEST_BUF, "request", False), (PARTS_BUF, "request", False),
                                (CHUNK_FRAME, "chunk", True), (ERROR_FRAME, "error", True)):
        assert verdict(kind, buf, prefixed, strict=True) is None


# --- limits: size, depth, table count, work -------------------------------------------------------


def test_max_size_bounds_the_buffer() -> None:
    assert verdict("request", REQUEST_BUF, max_size=N + 1) is None
    assert verdict("request", REQUEST_BUF, max_size=N) == f"buffer: {N} bytes, not below the limit of {N}"
    # Above FLATBUFFERS_MAX_BUFFER_SIZE, the limit stays 2**31 - 1.
    assert verifier_runtime.Verifier(REQUEST_BUF, max_size=2**40).max_size == verifier_runtime.MAX_SIZE == 2**31 - 1


def test_max_depth_counts_nested_tables() -> None:
    # CompletionRequest > Message > ContentPart (and > FunctionCall): three tables deep.
    assert verdict("request", PARTS_BUF, max_depth=3) is None
    assert verdict("request", PARTS_BUF, max_depth=2) == "ContentPart: tables nested deeper than 2"
    assert verdict("request", PARTS_BUF, max_depth=1) == "ToolCall: tables nested deeper than 1"  # tools come first


@pytest.mark.cxx
@pytest.mark.parametrize(("messages", "parts", "ok"), [(999, 1000, True), (1000, 999, False), (3, 2, True)])
def test_tables_reached_twice_count_twice_but_are_walked_once(
    cxx_verifier: CxxVerifier, messages: int, parts: int, ok: bool
) -> None:
    buf = dag_request(messages, parts)
    tables = 1 + messages * (1 + parts)  # 1,000,000 is the limit, inclusive
    assert cxx_verifier.verify("request", buf) is ok
    for strict in (False, True):
        verifier = verifier_runtime.Verifier(buf, strict=strict)
        if ok:
            verifier.verify(*gv.ROOTS["CompletionRequest"])
            assert verifier.tables == tables
        else:
            with pytest.raises(verifier_runtime.VerifyError, match="more than 1000000 tables"):
                verifier.verify(*gv.ROOTS["CompletionRequest"])
        assert verifier.walked <= 5  # the request, two vectors, one Message, one ContentPart
    assert verdict("request", buf, max_tables=tables) is None
    assert verdict("request", buf, max_tables=tables - 1) is not None


@pytest.mark.cxx
def test_overlapping_vectors_are_refused_when_strict(cxx_verifier: CxxVerifier) -> None:
    # What C++ verifies in time quadratic in the buffer's size, strict mode refuses once more offsets
    # were followed than the buffer has room for.
    buf = overlapping_parts()
    assert cxx_verifier.verify("request", buf)
    compat = verifier_runtime.Verifier(buf, strict=False)
    compat.verify(*gv.ROOTS["CompletionRequest"])
    assert compat.refs > len(buf) // 4
    assert compat.tables == 1 + 2 + 2 * 0x00040004
    message = verdict("request", buf, strict=True)
    assert message is not None and "more offsets followed than" in message


# --- never another exception; the public face ------------------------------------------------------


@pytest.mark.parametrize("buf", [b"", b"\0" * 12, b"\xff" * 64, bytes(range(256)), REQUEST_BUF[:40]],
                         ids=["empty", "zeros", "ones", "counting", "head"])
@pytest.mark.parametrize("kind", list(ROOTS))
def test_garbage_raises_only_verify_error(kind: str, buf: bytes) -> None:
    for size_prefixed in (False, True):
        for strict in (False, True):
            assert verdict(kind, buf, size_prefixed, strict=strict) is not None


def test_any_bytes_like_input_is_read_as_bytes() -> None:
    for form in (bytearray(REQUEST_BUF), memoryview(REQUEST_BUF), memoryview(REQUEST_BUF + bytes(-N % 4)).cast("I")):
        gv.verify_CompletionRequest(form)


def test_input_that_is_no_buffer_is_a_verify_error() -> None:
    with pytest.raises(verifier_runtime.VerifyError, match="unverifiable: TypeError"):
        gv.verify_CompletionRequest("not bytes")  # type: ignore[arg-type]  # the point of the test


def test_public_face_raises_wire_errors() -> None:
    public.verify_request(REQUEST_BUF)
    public.verify_response(wire.write_response(RESPONSES[0]))
    public.verify_chunk(CHUNK_FRAME)
    public.verify_error(ERROR_FRAME, size_prefixed=True)
    public.verify_error(wire.write_error(ERRORS[0]))
    public.verify_embedding_response(wire.write_embeddings(EMBEDDINGS[0]))
    public.verify_embedding_request(next(v.data for v in valid_buffers() if v.kind == "embedding_request"))
    bad_utf8 = damaged((_user_prompt() + 4, 1, 0xFF))
    cases: list[tuple[Callable[[], None], str]] = [
        (lambda: public.verify_request(bad_utf8), "is not UTF-8"),
        (lambda: public.verify_request(REQUEST_BUF, max_size=N), "not below the limit"),
        (lambda: public.verify_response(REQUEST_BUF), "file identifier"),
        (lambda: public.verify_chunk(CHUNK_FRAME[4:]), "size prefix"),
        (lambda: public.verify_chunk(CHUNK_FRAME[4:], size_prefixed=False), "misaligned"),
        (lambda: public.verify_error(ERROR_FRAME), "file identifier"),
        (lambda: public.verify_embedding_request(REQUEST_BUF), "file identifier"),
        (lambda: public.verify_embedding_response(wire.write_response(RESPONSES[0])), "file identifier"),
    ]
    for call, message in cases:
        with pytest.raises(wire.WireError, match=message) as info:
            call()
        assert isinstance(info.value.__cause__, verifier_runtime.VerifyError)
