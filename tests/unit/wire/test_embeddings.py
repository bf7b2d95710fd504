"""The embeddings wire tables read (ingress/wire/embeddings.py): the answer as written, the service's error
raised as its own, and what is no such table refused."""

from __future__ import annotations

import struct

import pytest

from ingress import wire
from ingress.errors import UpstreamAnswered, UpstreamProtocolError
from ingress.wire.embeddings import (
    Embeddings,
    decode_embeddings,
    decode_embeddings_answer,
    read_embedding_request,
    read_embedding_request_data,
)


def test_a_chat_request_is_no_embedding_request() -> None:
    chat = bytes(wire.write_response(wire.Response(id="x", model="m", created=0, choices=[])))
    with pytest.raises(wire.WireError, match="file identifier"):
        read_embedding_request(chat)
    with pytest.raises(wire.WireError, match="expected an LGEQ buffer"):
        read_embedding_request_data(chat)


def test_answer_reads_back_as_written() -> None:
    sent = Embeddings(model="m", vectors=[[0.5, -1.0, 3.25], [], [2.0**-149]],
                      usage=wire.Usage(prompt_tokens=4, total_tokens=4))
    assert decode_embeddings(bytes(wire.write_embeddings(sent))) == sent


def test_an_error_answer_is_raised_as_the_services_error() -> None:
    error = wire.ErrorInfo(status=429, type="rate_limit_error", code="slow_down", message="later", param="input")
    with pytest.raises(UpstreamAnswered) as info:
        decode_embeddings_answer(bytes(wire.write_error(error)))
    assert (info.value.status, info.value.code, info.value.param) == (429, "slow_down", "input")


@pytest.mark.parametrize("body", [
    pytest.param(b"", id="empty"),
    pytest.param(b"not flatbuffers at all", id="garbage"),
    pytest.param(bytes(wire.write_embeddings(Embeddings(model="m", vectors=[[1.0]])))[:-6], id="truncated"),
    pytest.param(bytes(wire.write_response(wire.Response(id="x", model="m", created=0, choices=[]))),
                 id="a-chat-response"),
])
def test_an_unreadable_answer_is_a_protocol_error(body: bytes) -> None:
    with pytest.raises(UpstreamProtocolError):
        decode_embeddings_answer(body)


def test_an_unverified_unreadable_answer_is_still_a_protocol_error() -> None:
    buf = bytearray(wire.write_embeddings(Embeddings(model="m", vectors=[[1.0, 2.0]])))
    struct.pack_into("<I", buf, 0, len(buf) + 64)  # the root offset points past the end
    with pytest.raises(UpstreamProtocolError):
        decode_embeddings_answer(bytes(buf), verify_answer=False)
