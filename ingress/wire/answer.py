"""A model service's answers, verified and decoded: a response or a stream frame, or its Error raised.

The edge's one way in for FlatBuffers that come back from an internal service (`upstream` receives the
bytes, `translate` turns what this returns into OpenAI's shapes). An Error buffer becomes the
`UpstreamAnswered` error it stands for; anything unreadable becomes an `UpstreamProtocolError`.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable

from ingress.errors import IngressError, UpstreamAnswered, UpstreamError, UpstreamProtocolError
from ingress.wire import decode, identifiers, verify
from ingress.wire import types as wire_types
from ingress.wire._generated import readers, slots
from ingress.wire.decode import FINISH_NAMES
from ingress.wire.runtime import ABSENT, ENTRIES, u16
from ingress.wire.verifier_runtime import MAX_SIZE


def error_of(buf: bytes, *, verify_error: bool = True, size_prefixed: bool = False,
             retry_after: int | None = None) -> UpstreamAnswered:
    """An Error buffer (or frame), as the error the edge answers with: its status, type, code and
    message, and the Retry-After its HTTP answer carried. Raises VerifyError if it does not verify."""
    if verify_error:
        verify.verify_error(buf, size_prefixed=size_prefixed)
    info = decode.decode_error(buf[4:] if size_prefixed else buf)
    return UpstreamAnswered(info.status, info.type, info.code, info.message, info.param, retry_after=retry_after)


def decode_refusal(body: bytes, *, retry_after: int | None) -> UpstreamError:
    """The body of an answer with a failure status: the service's Error, verified, or a protocol error
    (caused by what was wrong with it) if it is unreadable."""
    try:
        return error_of(body, retry_after=retry_after)
    except Exception as exc:  # unverifiable: the generated verifier or readers can fail anywhere
        error = UpstreamProtocolError("The model service sent an unreadable answer.", retry_after=retry_after)
        error.__cause__ = exc  # for the log line's detail, as `raise ... from exc` would set it
        return error


def decode_answer(body: bytes, *, verify_answer: bool = True) -> wire_types.Response:
    """A non-streamed answer body: a CompletionResponse, or an Error raised as UpstreamAnswered."""
    if (common := common_response(body)) is not None:  # nearly every answer
        return common
    kind = identifiers.identifier_of(body)
    try:
        if kind == identifiers.ERROR:
            raise error_of(body, verify_error=verify_answer)
        if verify_answer:
            verify.verify_response(body)
        return decode.decode_response(body)
    except IngressError:
        raise
    except Exception as exc:  # unverified, a malformed buffer can fail anywhere in the generated readers
        raise UpstreamProtocolError("The model service sent an unreadable answer.") from exc


def decode_frame(frame: bytes, *, verify_frame: bool = True) -> wire_types.Chunk:
    """One whole stream frame (size prefix included): a CompletionChunk, or an Error raised as
    UpstreamAnswered. A frame is verified whole: its fields are aligned from the start of the prefix."""
    kind = identifiers.identifier_of(frame, 4)
    try:
        if kind == identifiers.ERROR:
            raise error_of(frame, verify_error=verify_frame, size_prefixed=True)
        if verify_frame:
            verify.verify_chunk(frame)
        return decode.decode_chunk(frame[4:])
    except IngressError:
        raise
    except Exception as exc:  # unverified, a malformed buffer can fail anywhere in the generated readers
        raise UpstreamProtocolError("The model service sent an unreadable stream frame.") from exc


# --- the common frame, read in place ---------------------------------------------------------------

_FRAME_HEAD = struct.Struct("<II4s").unpack_from  # size prefix, root offset, file identifier
_I32 = struct.Struct("<i").unpack_from
_U16X2 = struct.Struct("<HH").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_CHUNK = identifiers.CHUNK
# CompletionChunk's vtable slots a token's delta may hold: the three it carries, and the three scalars an
# encoder may write at their defaults (created 0, finish_reason none, done false); every other must be absent
_CC = slots.CompletionChunk
_SEQUENCE, _CREATED, _CHOICE, _CONTENT, _FINISH, _DONE, _CHUNK_SLOTS = (
    _CC.sequence, _CC.created, _CC.choice_index, _CC.content, _CC.finish_reason, _CC.done, _CC.SLOTS)
_OTHERS = operator.itemgetter(*sorted(set(range(_CHUNK_SLOTS)) - {_SEQUENCE, _CREATED, _CHOICE, _CONTENT, _FINISH,
                                                                   _DONE}))
_DELTA_SLOTS = {n: struct.Struct(f"<{n}H").unpack_from for n in range(1, 64)}
_PAD = {n: (0,) * (_CHUNK_SLOTS - n) for n in range(_CHUNK_SLOTS)}  # a shorter vtable: the slots past it are absent


def content_delta(frame: bytes) -> tuple[int, int, str] | None:
    """(sequence, choice_index, content) of a frame that is a CompletionChunk carrying a token's delta
    and nothing else (nearly every frame of a stream; created, finish_reason and done may be present
    at their defaults), read in place with the generated verifier's checks for those fields; None for
    every other frame, and for any frame those checks would refuse: the caller then verifies and
    decodes it the general way (`decode_frame`), which accepts or refuses it. A frame this accepts,
    the verifier accepts, and decodes to the same values.
    """
    n = len(frame)
    if n < 16 or n >= MAX_SIZE:
        return None
    size, root, ident = _FRAME_HEAD(frame, 0)
    t = 4 + root
    if size != n - 4 or ident != _CHUNK or root == 0 or root > 0x7FFFFFFF or t & 3 or t > n - 4:
        return None
    vt = t - _I32(frame, t)[0]
    if vt & 1 or vt < 0 or vt > n - 4:
        return None
    vs, ts = _U16X2(frame, vt)
    if vs & 1 or vs < 4 or vs >= n or vt > n - vs or ts < 4 or ts >= n or t > n - ts:
        return None
    have = (vs - 4) >> 1
    if have <= _CONTENT or have > 63:
        return None
    e = _DELTA_SLOTS[have](frame, vt + 4)
    if have < _CHUNK_SLOTS:
        e += _PAD[have]
    elif have > _CHUNK_SLOTS and any(e[_CHUNK_SLOTS:]):  # a newer writer's fields
        return None
    o = e[_CONTENT]
    if not o or any(_OTHERS(e)):
        return None
    o_seq, o_created, o_choice = e[_SEQUENCE], e[_CREATED], e[_CHOICE]
    o_finish, o_done = e[_FINISH], e[_DONE]
    if o_seq and ((t + o_seq) & 7 or t + o_seq > n - 8):
        return None
    if o_created and ((t + o_created) & 7 or t + o_created > n - 8 or _U64(frame, t + o_created)[0]):
        return None
    if o_choice and ((t + o_choice) & 3 or t + o_choice > n - 4):
        return None
    if o_finish and (t + o_finish > n - 1 or frame[t + o_finish]):
        return None
    if o_done and (t + o_done > n - 1 or frame[t + o_done]):
        return None
    p = t + o
    if p & 3 or p > n - 4:
        return None
    u = _U32(frame, p)[0]
    s = p + u
    if u == 0 or u > 0x7FFFFFFF or s > n - 1 or s & 3 or s > n - 4:
        return None
    end = s + 4 + _U32(frame, s)[0]
    if end >= n or frame[end]:
        return None
    try:
        content = str(frame[s + 4:end], "utf-8")
    except UnicodeDecodeError:
        return None
    return (_U64(frame, t + o_seq)[0] if o_seq else 0, _U32(frame, t + o_choice)[0] if o_choice else 0, content)


# --- the common answer, read in place ----------------------------------------------------------------

_RESPONSE = identifiers.RESPONSE
_I64 = struct.Struct("<q").unpack_from


Entries = Callable[[tuple[int, ...]], tuple[int, ...]]


def _fields(slot_count: int, *read: int) -> tuple[Entries, Entries | None]:
    """Of a table's vtable entries: the offsets of the fields the common shape reads, and of every other field
    (None: there is none), each of which must be absent, a field the schema adds later included, or the
    buffer is read the general way."""
    others = sorted(set(range(slot_count)) - set(read))
    return operator.itemgetter(*read), operator.itemgetter(*others) if others else None


_R, _C, _M = slots.CompletionResponse, slots.Choice, slots.Message
_response_fields, _response_others = _fields(_R.SLOTS, _R.id, _R.model, _R.created, _R.choices, _R.usage,
                                             _R.system_fingerprint, _R.service_tier)
_choice_fields, _choice_others = _fields(_C.SLOTS, _C.index, _C.message, _C.finish_reason, _C.reasoning,
                                         _C.signature, _C.stop_sequence)
_message_fields, _message_others = _fields(_M.SLOTS, _M.role, _M.content, _M.refusal)
_MAX_CHOICES = 64  # more are read the general way (and a verifier's table count stays far below its limit)


class _NotCommon(Exception):
    """Raised inside `common_response` for anything it does not read in place."""


_NOT_COMMON = _NotCommon()


def common_response(body: bytes) -> wire_types.Response | None:
    """The CompletionResponse nearly every non-streamed answer is, read in place: its id, model, created,
    usage, system fingerprint and service tier, and choices that carry a message's content and refusal,
    a finish reason, reasoning, its signature and a stop sequence, and nothing else (a message's role may
    be there; every other field of a choice or its message absent). Each field it reads gets the generated
    verifier's strict checks, and the offsets and string bytes it follows are bounded as the verifier bounds
    them (counted each time they are reached, which is never fewer than the verifier counts). None for every
    other buffer, and for any that those checks would refuse: the caller then reads it the general way
    (`decode_answer`), which accepts or refuses it. A buffer this accepts, the verifier accepts, and decodes
    to the same value."""
    try:
        return _response(body)
    except _NotCommon:
        return None
    except UnicodeDecodeError:  # a string that is not UTF-8: the verifier refuses it
        return None


def _response(buf: bytes) -> wire_types.Response:
    n = len(buf)
    if n < 12 or n >= MAX_SIZE or buf[4:8] != _RESPONSE:
        raise _NOT_COMMON
    t = _offset(buf, n, 0)
    e = _table(buf, n, t, _R.SLOTS)
    if _response_others is not None and any(_response_others(e)):
        raise _NOT_COMMON
    o_id, o_model, o_created, o_choices, o_usage, o_fingerprint, o_tier = _response_fields(e)
    # the offsets followed: the root's, and one for each field that is an offset
    refs = 1 + bool(o_id) + bool(o_model) + bool(o_choices) + bool(o_usage) + bool(o_fingerprint) + bool(o_tier)
    (id_, d_id), (model, d_model) = _text(buf, n, t, o_id), _text(buf, n, t, o_model)
    (fingerprint, d_fingerprint), (tier, d_tier) = _text(buf, n, t, o_fingerprint), _text(buf, n, t, o_tier)
    decoded = d_id + d_model + d_fingerprint + d_tier
    created = _I64(buf, _at(n, t, o_created, 8))[0] if o_created else 0
    choices: list[wire_types.Choice] = []
    if o_choices:
        x = _offset(buf, n, t + o_choices)
        if x & 3 or x > n - 4:
            raise _NOT_COMMON
        count = _U32(buf, x)[0]
        if count > _MAX_CHOICES or x + 4 + 4 * count > n:  # x > 0: so the vector is shorter than the buffer
            raise _NOT_COMMON
        refs += count
        for at in range(x + 4, x + 4 + 4 * count, 4):
            choice, r, d = _choice(buf, n, at + _U32(buf, at)[0])
            choices.append(choice)
            refs += r
            decoded += d
    usage = _usage(buf, n, _offset(buf, n, t + o_usage)) if o_usage else None
    if refs > n // 4 or decoded > n:  # the verifier's strict bounds on the work a buffer can ask for
        raise _NOT_COMMON
    return wire_types.Response(id=id_ or "", model=model or "", created=created, choices=choices, usage=usage,
                               system_fingerprint=fingerprint, service_tier=tier)


def _choice(buf: bytes, n: int, t: int) -> tuple[wire_types.Choice, int, int]:
    """A choice of the common shape, with the offsets it followed and the string bytes it decoded."""
    e = _table(buf, n, t, _C.SLOTS)
    if _choice_others is not None and any(_choice_others(e)):
        raise _NOT_COMMON
    o_index, o_message, o_finish, o_reasoning, o_signature, o_stop = _choice_fields(e)
    index = _U32(buf, _at(n, t, o_index, 4))[0] if o_index else 0
    finish = buf[_at(n, t, o_finish, 1)] if o_finish else 0
    if finish >= len(FINISH_NAMES):  # the general way refuses it, naming the value
        raise _NOT_COMMON
    (reasoning, d_reasoning), (signature, d_signature) = _text(buf, n, t, o_reasoning), _text(buf, n, t, o_signature)
    stop_sequence, d_stop = _text(buf, n, t, o_stop)
    decoded = d_reasoning + d_signature + d_stop
    refs = bool(o_message) + bool(o_reasoning) + bool(o_signature) + bool(o_stop)
    content = refusal = None
    if o_message:
        m = _offset(buf, n, t + o_message)
        e = _table(buf, n, m, _M.SLOTS)
        if _message_others is not None and any(_message_others(e)):
            raise _NOT_COMMON
        o_role, o_content, o_refusal = _message_fields(e)
        if o_role:
            _at(n, m, o_role, 1)
        (content, d_content), (refusal, d_refusal) = _text(buf, n, m, o_content), _text(buf, n, m, o_refusal)
        refs += bool(o_content) + bool(o_refusal)
        decoded += d_content + d_refusal
    choice = wire_types.Choice(index=index, content=content, refusal=refusal, finish_reason=FINISH_NAMES[finish],
                               reasoning=reasoning, signature=signature, stop_sequence=stop_sequence)
    return choice, refs, decoded


def _usage(buf: bytes, n: int, t: int) -> wire_types.Usage:
    """The Usage table at `t`, its fields (all uint32) checked as the verifier checks them, then read by
    the generated reader."""
    for o in _table(buf, n, t, slots.Usage.SLOTS):
        if o:
            _at(n, t, o, 4)
    return readers._read_Usage(buf, t)


def _offset(buf: bytes, n: int, p: int) -> int:
    """The target of the uoffset at `p`, checked as the verifier checks it."""
    if p & 3 or p > n - 4:
        raise _NOT_COMMON
    u: int = _U32(buf, p)[0]
    if u == 0 or p + u > n - 1:  # one past 0x7FFFFFFF (negative as signed) points past any buffer we read
        raise _NOT_COMMON
    return p + u


def _table(buf: bytes, n: int, t: int, slots: int) -> tuple[int, ...]:
    """The first `slots` vtable entries of the table at `t` (0: absent), checked as the strict verifier
    checks a table's start."""
    if t & 3 or t > n - 4:
        raise _NOT_COMMON
    vt = t - _I32(buf, t)[0]
    if vt & 1 or vt < 0 or vt > n - 2:
        raise _NOT_COMMON
    vs: int = u16(buf, vt)[0]
    if vs & 1 or vs < 4 or vs >= n or vt > n - vs:  # then its two header entries are inside the buffer
        raise _NOT_COMMON
    ts: int = u16(buf, vt + 2)[0]
    if ts < 4 or ts >= n or t > n - ts:
        raise _NOT_COMMON
    have = (vs - 4) >> 1
    if have >= slots:  # the runtime's unpackers, as the generated readers and verifier read a vtable
        return ENTRIES[slots](buf, vt + 4)
    return ENTRIES[have](buf, vt + 4) + ABSENT[slots - have]


def _at(n: int, t: int, o: int, size: int) -> int:
    """The position of the scalar field of `size` bytes at vtable offset `o` (present) of the table at `t`,
    aligned to its size and inside the buffer."""
    p = t + o
    if p & (size - 1) or p > n - size:
        raise _NOT_COMMON
    return p


def _text(buf: bytes, n: int, t: int, o: int) -> tuple[str | None, int]:
    """The string field at vtable offset `o` of the table at `t` (None if absent), and its length in bytes."""
    return _string(buf, n, _offset(buf, n, t + o)) if o else (None, 0)


def _string(buf: bytes, n: int, s: int) -> tuple[str, int]:
    """The string at `s` and its length in bytes, checked as the strict verifier checks it."""
    if s & 3 or s > n - 4:
        raise _NOT_COMMON
    size = _U32(buf, s)[0]
    end = s + 4 + size
    if end >= n or buf[end]:
        raise _NOT_COMMON
    return str(buf[s + 4:end], "utf-8"), size
