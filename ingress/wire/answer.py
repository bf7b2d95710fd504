"""A model service's answers, verified and decoded: a response or a stream frame, or its Error raised.

The edge's one way in for FlatBuffers that come back from an internal service (`upstream` receives the
bytes, `translate` turns what this returns into OpenAI's shapes). An Error buffer becomes the
`UpstreamAnswered` error it stands for; anything unreadable becomes an `UpstreamProtocolError`.
"""

from __future__ import annotations

from ingress.errors import IngressError, UpstreamAnswered, UpstreamError, UpstreamProtocolError
from ingress.wire import decode, identifiers, verify
from ingress.wire import types as wt


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
