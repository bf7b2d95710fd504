"""ingress/translate/stream.py: the stream translator's state rules, FlatBuffers chunk frames into OpenAI's
chat.completion.chunk objects, and the usage, logprobs and service tier a stream carries."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ingress import wire
from ingress.errors import UpstreamAnswered, UpstreamProtocolError
from ingress.translate.stream import StreamTranslator
from ingress.wire import Chunk, ErrorInfo, ToolCallDelta, Usage

USAGE = Usage(prompt_tokens=7, completion_tokens=3, total_tokens=10, cached_tokens=4, reasoning_tokens=1)
USAGE_OUT = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10,
             "prompt_tokens_details": {"cached_tokens": 4, "audio_tokens": 0},
             "completion_tokens_details": {"reasoning_tokens": 1, "audio_tokens": 0, "accepted_prediction_tokens": 0,
                                           "rejected_prediction_tokens": 0}}


def translator(include_usage: bool = False) -> StreamTranslator:
    return StreamTranslator(id="chatcmpl-edge", model="requested", created=1000, include_usage=include_usage)


def as_json(objects: list[Any]) -> list[Any]:
    return [msgspec.json.decode(msgspec.json.encode(o)) for o in objects]


def run(t: StreamTranslator, *chunks: Chunk) -> list[Any]:
    out = []
    for chunk in chunks:
        out += t.feed(chunk)
    return as_json(out)


STREAM = [
    Chunk(sequence=0, id="chatcmpl-up", model="served", created=2000, role="assistant", content="",
          system_fingerprint="fp_1"),
    Chunk(sequence=1, content="Hel"),
    Chunk(sequence=2, content="lo"),
    Chunk(sequence=3, finish_reason="stop"),
    Chunk(sequence=4, usage=USAGE, done=True),
]


def head(**fields: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 2000, "model": "served",
            "system_fingerprint": "fp_1", **fields}


def test_stream_without_usage() -> None:
    t = translator()
    assert run(t, *STREAM) == [
        head(choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None,
                       "logprobs": None}]),
        head(choices=[{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None, "logprobs": None}]),
        head(choices=[{"index": 0, "delta": {"content": "lo"}, "finish_reason": None, "logprobs": None}]),
        head(choices=[{"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None}]),
    ]
    assert t.done and t.usage == USAGE  # kept for the log line even when the client did not ask for it
    assert t.served_model == "served"  # and the model the service named, for the usage record
    t.finish()


def test_stream_with_usage() -> None:
    out = run(translator(include_usage=True), *STREAM)
    assert [o["usage"] for o in out] == [None, None, None, None, USAGE_OUT]
    assert out[-1]["choices"] == []
    assert all(len(o["choices"]) == 1 for o in out[:-1])


def test_first_chunk_fields_carry_over_and_defaults_stand_in() -> None:
    t = translator()
    assert run(t, Chunk(sequence=0, content="a"))[0]["id"] == "chatcmpl-edge"
    later = run(t, Chunk(sequence=1, id="chatcmpl-late", content="b"), Chunk(sequence=2, content="c"))
    assert [(o["id"], o["model"], o["created"]) for o in later] == [("chatcmpl-late", "requested", 1000)] * 2
    assert all("system_fingerprint" not in o for o in later)
    assert t.served_model is None  # the service named none: the usage record does not pretend it did


def test_tool_call_deltas() -> None:
    out = run(
        translator(),
        Chunk(sequence=0, tool_calls=[ToolCallDelta(index=0, id="call_1", type="function", name="get_weather",
                                                    arguments="")]),
        Chunk(sequence=1, tool_calls=[ToolCallDelta(index=0, arguments='{"city":'),
                                      ToolCallDelta(index=1, id="call_2", name="noop")]),
        Chunk(sequence=2, tool_calls=[ToolCallDelta(index=1)], finish_reason="tool_calls", done=True),
    )
    assert [o["choices"][0]["delta"]["tool_calls"] for o in out] == [
        [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}],
        [{"index": 0, "function": {"arguments": '{"city":'}},
         {"index": 1, "id": "call_2", "function": {"name": "noop"}}],
        [{"index": 1}],
    ]
    assert out[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_tool_call_deltas_of_a_legacy_request_are_function_call_deltas() -> None:
    legacy = StreamTranslator(id="chatcmpl-edge", model="m", created=1000, include_usage=False,
                              legacy_functions=True)
    out = run(
        legacy,
        Chunk(sequence=0, role="assistant", tool_calls=[ToolCallDelta(index=0, id="call_1", type="function",
                                                                      name="get_weather", arguments="")]),
        Chunk(sequence=1, tool_calls=[ToolCallDelta(index=0, arguments='{"city":'),
                                      ToolCallDelta(index=1, id="call_2", name="noop")]),
        Chunk(sequence=2, tool_calls=[ToolCallDelta(index=1, arguments="{}")]),  # only a second call: nothing
        Chunk(sequence=3, finish_reason="tool_calls", done=True),
    )
    assert [o["choices"][0]["delta"] for o in out] == [
        {"role": "assistant", "function_call": {"name": "get_weather", "arguments": ""}},
        {"function_call": {"arguments": '{"city":'}},
        {},
    ]
    assert [o["choices"][0]["finish_reason"] for o in out] == [None, None, "function_call"]


def test_choice_index_and_refusal() -> None:
    out = run(translator(), Chunk(sequence=0, choice_index=3, refusal="no"))
    assert out[0]["choices"] == [{"index": 3, "delta": {"refusal": "no"}, "finish_reason": None, "logprobs": None}]


def test_empty_chunk_writes_nothing() -> None:
    t = translator()
    assert run(t, Chunk(sequence=0), Chunk(sequence=1, done=True)) == []
    t.finish()


@pytest.mark.parametrize(
    "sequences",
    [
        pytest.param([1], id="first-is-not-0"),
        pytest.param([0, 2], id="gap"),
        pytest.param([0, 0], id="repeat"),
        pytest.param([0, 1, 0], id="backwards"),
        pytest.param([2**64 - 1], id="huge"),
    ],
)
def test_sequence_out_of_order_is_a_protocol_error(sequences: list[int]) -> None:
    t = translator()
    for seq in sequences[:-1]:
        t.feed(Chunk(sequence=seq, content="x"))
    with pytest.raises(UpstreamProtocolError, match="skipped frames"):
        t.feed(Chunk(sequence=sequences[-1], content="x"))


def test_data_after_done_is_a_protocol_error() -> None:
    t = translator()
    t.feed(Chunk(sequence=0, content="x", done=True))
    with pytest.raises(UpstreamProtocolError, match="after the end"):
        t.feed(Chunk(sequence=1, content="y"))
    error = UpstreamProtocolError("")
    assert (error.status, error.code) == (502, "upstream_protocol_error")


@pytest.mark.parametrize("fed", [0, 2])
def test_finish_without_done_is_a_protocol_error(fed: int) -> None:
    t = translator()
    for seq in range(fed):
        t.feed(Chunk(sequence=seq, content="x"))
    with pytest.raises(UpstreamProtocolError, match="ended before"):
        t.finish()


# --- frames --------------------------------------------------------------------------------------


def test_frames_are_decoded_and_translated() -> None:
    t = translator(include_usage=True)
    out = []
    for chunk in STREAM:
        out += t.feed_frame(bytes(wire.write_chunk(chunk)))
    assert as_json(out) == run(translator(include_usage=True), *STREAM)
    t.finish()


@pytest.mark.parametrize(
    ("error", "status", "type_"),
    [
        pytest.param(ErrorInfo(status=429, type="rate_limit_exceeded", code="rate_limit", message="slow down",
                               param="model"), 429, "rate_limit_exceeded", id="429"),
        pytest.param(ErrorInfo(status=400, type="", message=""), 400, "invalid_request_error", id="400-untyped"),
        pytest.param(ErrorInfo(status=503, type="", message="busy"), 503, "server_error", id="503-untyped"),
        pytest.param(ErrorInfo(status=200, message="not an error status"), 502, "server_error", id="200"),
        pytest.param(ErrorInfo(status=0, message="no status"), 502, "server_error", id="0"),
        pytest.param(ErrorInfo(status=65535, message="max"), 502, "server_error", id="65535"),
    ],
)
def test_error_frame_raises_with_its_status(error: ErrorInfo, status: int, type_: str) -> None:
    t = translator()
    t.feed(Chunk(sequence=0, content="partial"))
    with pytest.raises(UpstreamAnswered) as info:
        t.feed_frame(bytes(wire.write_error(error, framed=True)))
    exc = info.value
    assert (exc.status, exc.type, exc.code, exc.param) == (status, type_, error.code, error.param)
    assert exc.message == (error.message or "The model service returned an error.")


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x00" * 7, id="short"),
        pytest.param(b"\x08\x00\x00\x00LGXX\x00\x00\x00\x00", id="unknown-identifier"),
        pytest.param(wire.write_response(wire.Response(id="r", model="m", created=1, choices=[])), id="a-response"),
        pytest.param(b"\xff\xff\x00\x00LGCK" + bytes(8), id="chunk-root-past-end"),
    ],
)
def test_unreadable_frame_is_a_protocol_error(frame: bytes) -> None:
    with pytest.raises(UpstreamProtocolError, match="unreadable"):
        translator().feed_frame(frame)


# --- logprobs, annotations, service tier, usage details ------------------------------------------

TOKEN = wire.TokenLogprob(token=" hi", logprob=-0.1, bytes=list(b" hi"), top_logprobs=[
    wire.TopLogprob(token=" hi", logprob=-0.1, bytes=list(b" hi")),
    wire.TopLogprob(token="<|x|>", logprob=-9999.0)])
TOKEN_OUT = {"token": " hi", "logprob": -0.1, "bytes": [32, 104, 105], "top_logprobs": [
    {"token": " hi", "logprob": -0.1, "bytes": [32, 104, 105]},
    {"token": "<|x|>", "logprob": -9999.0, "bytes": None}]}  # a token without bytes: null, as OpenAI writes it
COUNTED = Usage(prompt_tokens=9, completion_tokens=8, total_tokens=17, cached_tokens=1, cache_write_tokens=5,
                prompt_image_tokens=3, prompt_text_tokens=6, completion_text_tokens=8)


def test_the_newer_usage_details_are_left_out_when_not_counted() -> None:
    # 0 on the wire is "not counted": a text_tokens of 0 beside a prompt of text would be untrue.
    [_, last] = run(translator(include_usage=True), Chunk(sequence=0, content="x"),
                    Chunk(sequence=1, usage=Usage(prompt_tokens=2, completion_tokens=1), done=True))
    assert last["usage"]["prompt_tokens_details"] == {"cached_tokens": 0, "audio_tokens": 0}
    assert last["usage"]["completion_tokens_details"] == {
        "reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}


def test_stream_logprobs_and_service_tier() -> None:
    out = run(
        translator(),
        Chunk(sequence=0, id="chatcmpl-up", role="assistant", content="", service_tier="default"),
        Chunk(sequence=1, content=" hi", logprobs=[TOKEN]),
        Chunk(sequence=2, logprobs=[wire.TokenLogprob(token="!", logprob=-1.5)]),  # logprobs alone still go out
        Chunk(sequence=3, refusal="no", refusal_logprobs=[wire.TokenLogprob(token="no", logprob=-0.5)]),
        Chunk(sequence=4, finish_reason="stop", done=True),
    )
    assert [o["choices"][0]["logprobs"] for o in out] == [
        None,
        {"content": [TOKEN_OUT], "refusal": None},
        {"content": [{"token": "!", "logprob": -1.5, "bytes": None, "top_logprobs": []}], "refusal": None},
        {"content": None, "refusal": [{"token": "no", "logprob": -0.5, "bytes": None, "top_logprobs": []}]},
        None,
    ]
    assert out[2]["choices"][0]["delta"] == {}
    assert [o["service_tier"] for o in out] == ["default"] * 5  # carried from the first chunk, as the id
