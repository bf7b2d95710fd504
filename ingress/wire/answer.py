"""A model service's answers, verified and decoded: a response or a stream frame, or its Error raised.

The edge's one way in for FlatBuffers that come back from an internal service (`upstream` receives the
bytes, `translate` turns what this returns into OpenAI's shapes). An Error buffer becomes the
`UpstreamAnswered` error it stands for; anything unreadable becomes an `UpstreamProtocolError`.
"""

from __future__ import annotations

import struct

from ingress.errors import IngressError, UpstreamAnswered, UpstreamError, UpstreamProtocolError
from ingress.wire import decode, identifiers, verify
from ingress.wire import types as wt
from ingress.wire.runtime import MAX_SIZE


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


def decode_answer(body: bytes, *, verify_answer: bool = True) -> wt.Response:
    """A non-streamed answer body: a CompletionResponse, or an Error raised as UpstreamAnswered."""
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


def decode_frame(frame: bytes, *, verify_frame: bool = True) -> wt.Chunk:
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
# CompletionChunk's vtable slots (schema order) a token's delta may hold: the three it carries, and the
# three scalars an encoder may write at their defaults (created 0, finish_reason none, done false)
_SEQUENCE, _CREATED, _CHOICE, _ROLE, _CONTENT, _FINISH, _DONE = 0, 3, 4, 5, 6, 8, 12
_DELTA_SLOTS = {n: struct.Struct(f"<{n}H").unpack_from for n in range(1, 64)}
_PAD = {n: (0,) * (_DONE + 1 - n) for n in range(_DONE + 1)}  # a shorter vtable: the slots past it are absent


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
    if have <= _DONE:
        e += _PAD[have]
    o = e[_CONTENT]
    if not o or e[1] or e[2] or e[_ROLE] or e[7] or any(e[9:_DONE]) or any(e[_DONE + 1:]):
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
