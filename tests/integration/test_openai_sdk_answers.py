"""What OpenAI's answers carry arrives through the edge, read by the official openai SDK: token logprobs
with their top alternatives (the demo derives them from the token text), refusal logprobs, url
citations, `service_tier`, `system_fingerprint` and every usage detail (a scripted service sends those
the demo has no honest value for). Each answer is also validated, strictly, by the SDK's own pydantic
models (`model_validate`), which the SDK's parser does not do."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest
from fakes.upstream import CREATED, FakeUpstream, raw_answer, raw_stream
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessageParam

from ingress import wire
from ingress.demo.answer import logprob as demo_logprob
from ingress.demo.service import FINGERPRINT

MODEL = "ingress-demo"
PROMPT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello to the edge"}]
TOKENS = ["Say", " hello", " to", " the", " edge"]
TOP = 3


@pytest.fixture
async def aclient(edge: str) -> AsyncIterator[openai.AsyncOpenAI]:
    """The async SDK in front of the edge that serves the scripted fake upstream."""
    async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-test", max_retries=0) as c:
        yield c


def _expected(token: str) -> dict[str, Any]:
    """The demo's logprob of a token as OpenAI writes it (the demo's values are three-decimal floats)."""
    lp = demo_logprob(token, TOP)
    return {"token": token, "logprob": lp.logprob, "bytes": list(token.encode()), "top_logprobs": [
        {"token": t.token, "logprob": t.logprob, "bytes": t.bytes} for t in lp.top_logprobs or []]}


def _sse_chunks(lines: Iterator[str]) -> list[dict[str, Any]]:
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


# --- the demo: logprobs, service tier, fingerprint, usage details (zeros) ------------------------


def test_logprobs_arrive_in_a_completion(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=PROMPT, logprobs=True, top_logprobs=TOP, service_tier="flex")
    doc = json.loads(raw.http_response.text)
    completion = ChatCompletion.model_validate(doc, strict=True)
    assert completion == raw.parse()

    [choice] = completion.choices
    assert choice.logprobs is not None and choice.logprobs.refusal is None
    assert [t.model_dump() for t in choice.logprobs.content or []] == [_expected(t) for t in TOKENS]
    assert "".join(t.token for t in choice.logprobs.content or []) == choice.message.content
    # -0.423 travels as a float32 and arrives as -0.423, the decimal the service meant.
    assert doc["choices"][0]["logprobs"]["content"][0]["logprob"] == demo_logprob("Say", 0).logprob
    assert completion.service_tier == "default"  # the tier that served it, whatever was asked
    assert completion.system_fingerprint == FINGERPRINT
    usage = completion.usage
    assert usage is not None and usage.prompt_tokens_details and usage.completion_tokens_details
    # Every token the demo counts is text; it caches nothing, so no cache_write_tokens and no image_tokens.
    assert usage.prompt_tokens_details.model_dump(exclude_none=True) == {
        "cached_tokens": 0, "audio_tokens": 0, "text_tokens": usage.prompt_tokens}
    assert usage.completion_tokens_details.model_dump(exclude_none=True) == {
        "reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0,
        "text_tokens": usage.completion_tokens}


def test_without_logprobs_they_are_null(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=PROMPT)
    doc = json.loads(raw.http_response.text)
    assert doc["choices"][0]["logprobs"] is None  # as OpenAI writes it
    assert "service_tier" not in doc  # none asked for: the demo names none
    assert ChatCompletion.model_validate(doc, strict=True).choices[0].logprobs is None


def test_logprobs_arrive_in_a_stream(client: openai.OpenAI) -> None:
    with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=PROMPT, stream=True, stream_options={"include_usage": True},
            logprobs=True, top_logprobs=TOP, service_tier="auto") as response:
        docs = _sse_chunks(response.iter_lines())
    chunks = [ChatCompletionChunk.model_validate(d, strict=True) for d in docs]

    *answer, last = chunks
    streamed = [t.model_dump() for c in answer if c.choices[0].logprobs for t in c.choices[0].logprobs.content or []]
    assert streamed == [_expected(t) for t in TOKENS]
    for c in answer:  # each token's logprob rides on the chunk that carries the token
        lp, text = c.choices[0].logprobs, c.choices[0].delta.content
        assert ([t.token for t in lp.content or []] if lp else None) == ([text] if text else None)
    assert {(c.service_tier, c.system_fingerprint) for c in chunks} == {("default", FINGERPRINT)}
    assert last.choices == [] and last.usage is not None and last.usage.completion_tokens_details is not None
    assert last.usage.completion_tokens_details.reasoning_tokens == 0


def test_the_sdk_stream_reads_the_logprobs(client: openai.OpenAI) -> None:
    with client.chat.completions.create(model=MODEL, messages=PROMPT, stream=True, logprobs=True) as stream:
        tokens = [t.token for c in stream for ch in c.choices if ch.logprobs for t in ch.logprobs.content or []]
    assert tokens == TOKENS


# --- a scripted service: refusal logprobs, citations, usage details ------------------------------

CITE = wire.Annotation(type="url_citation", url="https://example.com/paris", title="Paris", start_index=4,
                       end_index=9)
USAGE = wire.Usage(prompt_tokens=20, completion_tokens=10, total_tokens=30, cached_tokens=8, prompt_audio_tokens=2,
                   reasoning_tokens=4, completion_audio_tokens=1, accepted_prediction_tokens=3,
                   rejected_prediction_tokens=2, cache_write_tokens=6, prompt_image_tokens=5, prompt_text_tokens=7,
                   completion_text_tokens=9)
WORD = wire.TokenLogprob(token=" Paris", logprob=-0.25, bytes=list(b" Paris"),
                         top_logprobs=[wire.TopLogprob(token=" Paris", logprob=-0.25, bytes=list(b" Paris")),
                                       wire.TopLogprob(token=" Lyon", logprob=-1.75)])
NO = wire.TokenLogprob(token="No", logprob=-0.5, bytes=list(b"No"), top_logprobs=[])


def _check_usage(usage: Any) -> None:
    assert usage.prompt_tokens_details.model_dump(exclude_none=True) == {
        "cached_tokens": 8, "audio_tokens": 2, "cache_write_tokens": 6, "image_tokens": 5, "text_tokens": 7}
    assert usage.completion_tokens_details.model_dump(exclude_none=True) == {
        "reasoning_tokens": 4, "audio_tokens": 1, "accepted_prediction_tokens": 3, "rejected_prediction_tokens": 2,
        "text_tokens": 9}


async def test_every_answer_field_arrives(aclient: openai.AsyncOpenAI, fake_upstream: FakeUpstream) -> None:
    response = wire.Response(
        id="chatcmpl-fake", model="m", created=CREATED, system_fingerprint="fp_fake", service_tier="priority",
        choices=[wire.Choice(index=0, content="See Paris", finish_reason="stop", logprobs=[WORD], annotations=[CITE]),
                 wire.Choice(index=1, refusal="No", finish_reason="stop", refusal_logprobs=[NO])],
        usage=USAGE)
    fake_upstream.play(raw_answer(wire.write_response(response)))
    raw = await aclient.chat.completions.with_raw_response.create(model="m", messages=PROMPT, logprobs=True,
                                                                  top_logprobs=2, n=2)
    completion = ChatCompletion.model_validate(json.loads(raw.http_response.text), strict=True)

    cited, refused = completion.choices
    assert cited.logprobs and [t.model_dump() for t in cited.logprobs.content or []] == [{
        "token": " Paris", "logprob": -0.25, "bytes": list(b" Paris"), "top_logprobs": [
            {"token": " Paris", "logprob": -0.25, "bytes": list(b" Paris")},
            {"token": " Lyon", "logprob": -1.75, "bytes": None}]}]
    [annotation] = cited.message.annotations or []
    assert annotation.type == "url_citation"
    assert annotation.url_citation.model_dump() == {"start_index": 4, "end_index": 9, "title": "Paris",
                                                    "url": "https://example.com/paris"}
    assert refused.message.refusal == "No" and refused.message.content is None
    assert refused.logprobs and refused.logprobs.content is None
    assert [t.model_dump() for t in refused.logprobs.refusal or []] == [
        {"token": "No", "logprob": -0.5, "bytes": [78, 111], "top_logprobs": []}]
    assert (completion.service_tier, completion.system_fingerprint) == ("priority", "fp_fake")
    _check_usage(completion.usage)


async def test_every_chunk_field_arrives(aclient: openai.AsyncOpenAI, fake_upstream: FakeUpstream) -> None:
    frames = [
        wire.Chunk(sequence=0, id="chatcmpl-fake", model="m", created=CREATED, role="assistant", content="",
                   system_fingerprint="fp_fake", service_tier="flex"),
        wire.Chunk(sequence=1, content=" Paris", logprobs=[WORD]),
        wire.Chunk(sequence=2, choice_index=1, refusal="No", refusal_logprobs=[NO]),
        wire.Chunk(sequence=3, finish_reason="stop"),
        wire.Chunk(sequence=4, usage=USAGE, done=True),
    ]
    fake_upstream.play(raw_stream(b"".join(bytes(wire.write_chunk(f)) for f in frames)))
    async with aclient.chat.completions.with_streaming_response.create(
            model="m", messages=PROMPT, stream=True, stream_options={"include_usage": True}, logprobs=True) as r:
        docs = _sse_chunks(iter([line async for line in r.iter_lines()]))
    chunks = [ChatCompletionChunk.model_validate(d, strict=True) for d in docs]

    logprobs = [c.choices[0].logprobs for c in chunks[:-1]]
    assert logprobs[0] is None and logprobs[3] is None
    assert logprobs[1] and [t.token for t in logprobs[1].content or []] == [" Paris"]
    assert logprobs[2] and logprobs[2].content is None and [t.token for t in logprobs[2].refusal or []] == ["No"]
    assert chunks[2].choices[0].delta.refusal == "No"
    assert {(c.service_tier, c.system_fingerprint) for c in chunks} == {("flex", "fp_fake")}
    _check_usage(chunks[-1].usage)
