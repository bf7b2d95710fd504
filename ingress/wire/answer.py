"""A model service's answers, verified and decoded: a response or a stream frame, or its Error raised.

The edge's one way in for FlatBuffers that come back from an internal service (`upstream` receives the
bytes, `translate` turns what this returns into OpenAI's shapes). An Error buffer becomes the
`UpstreamAnswered` error it stands for; anything unreadable becomes an `UpstreamProtocolError`.
"""

from __future__ import annotations

from ingress.errors import IngressError, UpstreamAnswered, UpstreamProtocolError
from ingress.wire import decode, identifiers, verify
from ingress.wire import types as wt


def error_from_upstream(info: wt.ErrorInfo) -> UpstreamAnswered:
    """The service's Error, as the error the edge answers with (its status, type, code and message)."""
    return UpstreamAnswered(info.status, info.type, info.code, info.message, info.param)


def decode_answer(body: bytes, *, verify_answer: bool = True) -> wt.Response:
    """A non-streamed answer body: a CompletionResponse, or an Error raised as UpstreamAnswered."""
    kind = identifiers.identifier_of(body)
    try:
        if kind == identifiers.ERROR:
            if verify_answer:
                verify.verify_error(body)
            raise error_from_upstream(decode.decode_error(body))
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
            if verify_frame:
                verify.verify_error(frame, size_prefixed=True)
            raise error_from_upstream(decode.decode_error(frame[4:]))
        if verify_frame:
            verify.verify_chunk(frame)
        return decode.decode_chunk(frame[4:])
    except IngressError:
        raise
    except Exception as exc:  # unverified, a malformed buffer can fail anywhere in the generated readers
        raise UpstreamProtocolError("The model service sent an unreadable stream frame.") from exc
