"""tenancy/stores/resp_codec.py: the reply parser against redis-py's own (the oracle), replies split at random
byte boundaries; NOSCRIPT and garbage; commands and scripts encoded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis._parsers import _AsyncRESP2Parser
from redis._parsers.encoders import Encoder
from redis.exceptions import NoScriptError as RedisNoScriptError
from redis.exceptions import ResponseError

from ingress.tenancy.stores.resp_codec import NoScriptError, ProtocolError, ReplyError, ReplyParser, Script, encode

ERRORS = ["ERR unknown command 'FOO'", "NOSCRIPT No matching script. Please use EVAL.",
          "WRONGTYPE Operation against a key holding the wrong kind of value", "ERR Error running script",
          "OOM command not allowed when used memory > 'maxmemory'.", "ERR é, a non-ASCII message"]

Value = Any
leaves = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(lambda i: ("int", i)),
    st.binary(max_size=40).map(lambda b: ("bulk", b)),
    st.binary(max_size=20).filter(lambda b: b"\r" not in b and b"\n" not in b).map(lambda b: ("simple", b)),
    st.sampled_from(ERRORS).map(lambda e: ("error", e)),
    st.just(("nil", None)), st.just(("nil array", None)))


def arrays(inner: st.SearchStrategy[Value]) -> st.SearchStrategy[Value]:
    return st.lists(inner, max_size=6).map(lambda items: ("array", items))


values = st.recursive(leaves, arrays, max_leaves=30)


def wire(value: Value) -> bytes:
    kind, v = value
    if kind == "int":
        return b":%d\r\n" % v
    if kind == "bulk":
        return b"$%d\r\n%b\r\n" % (len(v), v)
    if kind == "simple":
        return b"+%b\r\n" % v
    if kind == "error":
        return b"-%b\r\n" % v.encode()
    if kind == "nil":
        return b"$-1\r\n"
    if kind == "nil array":
        return b"*-1\r\n"
    return b"*%d\r\n" % len(v) + b"".join(map(wire, v))


def same(ours: Any, theirs: Any) -> bool:
    """The same reply; an error's message is our whole line, redis-py's without the codes it knows (ERR,
    NOSCRIPT...), and a NOSCRIPT is each one's NoScriptError."""
    if isinstance(ours, list):
        return isinstance(theirs, list) and len(ours) == len(theirs) and all(map(same, ours, theirs))
    if isinstance(ours, ReplyError):
        return (isinstance(theirs, ResponseError) and ours.message.endswith(str(theirs))
                and isinstance(ours, NoScriptError) == isinstance(theirs, RedisNoScriptError))
    return type(ours) is type(theirs) and ours == theirs


class _Stream:
    """What redis-py's parser reads from: a connection with a StreamReader."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self.encoder = Encoder("utf-8", "strict", decode_responses=False)  # type: ignore[no-untyped-call]  # redis-py is untyped


async def oracle(data: bytes, count: int) -> list[Any]:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    parser = _AsyncRESP2Parser(65536)
    parser.on_connect(_Stream(reader))  # type: ignore[no-untyped-call]  # redis-py is untyped
    return [await parser.read_response() for _ in range(count)]


@settings(max_examples=300, deadline=None)
@given(replies=st.lists(values, min_size=1, max_size=5), cuts=st.lists(st.integers(min_value=0), max_size=12))
def test_the_parser_reads_what_redis_py_reads_whatever_the_byte_boundaries(replies: list[Value],
                                                                            cuts: list[int]) -> None:
    data = b"".join(map(wire, replies))
    points = sorted({c % (len(data) + 1) for c in cuts})
    parser, ours = ReplyParser(), []
    for start, end in zip([0, *points], [*points, len(data)], strict=True):
        ours += parser.feed(data[start:end])
    theirs = asyncio.run(oracle(data, len(replies)))
    assert len(ours) == len(theirs) and all(map(same, ours, theirs)), (ours, theirs)
    assert parser.buffer == b""


def test_a_noscript_reply_is_its_own_error_and_garbage_is_a_protocol_error() -> None:
    (reply,) = ReplyParser().feed(b"-NOSCRIPT No matching script.\r\n")
    assert isinstance(reply, NoScriptError) and reply.message == "NOSCRIPT No matching script."
    for garbage in (b"?what\r\n", b":12x\r\n", b"$3\r\nabcd\r\n"):
        with pytest.raises(ProtocolError):
            ReplyParser().feed(garbage)


def test_commands_are_encoded_as_arrays_of_bulk_strings() -> None:
    assert encode("SET", "k", 12, b"\xff") == b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n12\r\n$1\r\n\xff\r\n"
    script = Script("return 1")
    ascii_ = script.command(["k:é"], [b'{"a":1}', -7, "x"])  # a non-ASCII key: encoded byte by byte
    assert ascii_ == encode("EVALSHA", script.sha, 1, "k:é", b'{"a":1}', -7, "x")
    assert script.command(["k"], [b"\xff"]) == encode("EVALSHA", script.sha, 1, "k", b"\xff")
    with pytest.raises(TypeError, match="not bool"):
        script.command([], [True])
    with pytest.raises(TypeError, match="not float"):
        encode(1.5)  # type: ignore[arg-type]  # what the types refuse is refused at run time too
