"""Answers translated to legacy text completions (ingress/translate/text.py): whole and streamed, and their
logprobs in the legacy shape, streamed in any chunks."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types import Completion

from ingress import wire
from ingress.errors import UpstreamProtocolError
from ingress.translate.text import TextStreamTranslator, translate_text_response


def test_an_answer_translates_to_what_the_sdk_reads_as_a_completion() -> None:
    response = wire.Response(id="cmpl-1", model="m", created=9, usage=wire.Usage(prompt_tokens=2, completion_tokens=3),
                             choices=[wire.Choice(index=0, content="ab", finish_reason="stop"),
                                      wire.Choice(index=1, finish_reason="length")])
    doc = msgspec.json.decode(msgspec.json.encode(translate_text_response(response)))
    assert doc["object"] == "text_completion"
    assert doc["choices"] == [{"text": "ab", "index": 0, "finish_reason": "stop", "logprobs": None},
                              {"text": "", "index": 1, "finish_reason": "length", "logprobs": None}]
    parsed = Completion.model_validate(doc)
    assert parsed.usage is not None and parsed.usage.total_tokens == 5


def _frames(*chunks: wire.Chunk) -> list[bytes]:
    return [bytes(wire.write_chunk(c)) for c in chunks]


def test_a_stream_becomes_text_chunks_with_usage_last() -> None:
    translator = TextStreamTranslator(id="cmpl-x", model="m", created=1, include_usage=True)
    out = []
    for frame in _frames(wire.Chunk(sequence=0, id="cmpl-s", role="assistant", content=""),
                         wire.Chunk(sequence=1, choice_index=1, content=" w"),
                         wire.Chunk(sequence=2, choice_index=1, finish_reason="stop"),
                         wire.Chunk(sequence=3, usage=wire.Usage(prompt_tokens=1, completion_tokens=1), done=True)):
        out += translator.feed_frame(frame)
    translator.finish()
    docs = [msgspec.json.decode(msgspec.json.encode(c)) for c in out]
    assert [d["choices"] for d in docs] == [
        [{"text": " w", "index": 1, "finish_reason": None, "logprobs": None}],
        [{"text": "", "index": 1, "finish_reason": "stop", "logprobs": None}],
        [],
    ]
    assert [d["usage"] for d in docs][:2] == [None, None] and docs[2]["usage"]["total_tokens"] == 2
    assert {d["id"] for d in docs} == {"cmpl-s"} and {d["object"] for d in docs} == {"text_completion"}
    assert translator.done and translator.usage is not None


def test_a_stream_cut_short_fails() -> None:
    translator = TextStreamTranslator(id="cmpl-x", model="m", created=1, include_usage=False)
    translator.feed_frame(_frames(wire.Chunk(sequence=0, content="a"))[0])
    with pytest.raises(UpstreamProtocolError):
        translator.finish()


def _token(text: str, logprob: float, *top: tuple[str, float]) -> wire.TokenLogprob:
    return wire.TokenLogprob(token=text, logprob=logprob, bytes=list(text.encode()),
                             top_logprobs=[wire.TopLogprob(token=t, logprob=p) for t, p in top])


WORDS = [_token("Hé", -0.1, ("Hé", -0.1), ("He", -1.5)), _token(" là", -0.25, (" là", -0.25), (" la", -0.5)),
         _token(" 🚀", -2.0)]


def test_logprobs_are_answered_in_the_legacy_shape() -> None:
    response = wire.Response(id="cmpl-1", model="m", created=9, choices=[
        wire.Choice(index=0, content="Hé là 🚀", finish_reason="stop", logprobs=WORDS),
        wire.Choice(index=1, content="x", finish_reason="stop")])
    doc = msgspec.json.decode(msgspec.json.encode(translate_text_response(
        wire.decode_response(bytes(wire.write_response(response))))))
    # Each logprob went through a float32 and comes out as the decimal it was; offsets count characters.
    assert doc["choices"][0]["logprobs"] == {
        "tokens": ["Hé", " là", " 🚀"], "token_logprobs": [-0.1, -0.25, -2.0],
        "top_logprobs": [{"Hé": -0.1, "He": -1.5}, {" là": -0.25, " la": -0.5}, {}], "text_offset": [0, 2, 5]}
    assert doc["choices"][1]["logprobs"] is None  # none sent: null, as OpenAI writes it
    logprobs = Completion.model_validate(doc, strict=True).choices[0].logprobs
    assert logprobs is not None and logprobs.tokens == ["Hé", " là", " 🚀"] and logprobs.text_offset == [0, 2, 5]


def test_the_offsets_of_an_answer_that_begins_with_its_prompt_start_after_it() -> None:
    # A service asked for echo (the edge refuses it with logprobs; a binary client may not) sends the
    # completion's tokens only: they are the end of the text.
    choice = wire.Choice(index=0, content="a prompt" + "Hé là 🚀", finish_reason="stop", logprobs=WORDS)
    [out] = translate_text_response(wire.Response(id="c", model="m", created=1, choices=[choice])).choices
    assert out.logprobs is not None and out.logprobs.text_offset == [8, 10, 13]


def test_a_repeated_top_token_keeps_its_most_likely_logprob() -> None:
    choice = wire.Choice(index=0, content="a", logprobs=[_token("a", -0.5, ("a", -0.5), ("b", -1.0), ("a", -3.0))])
    [out] = translate_text_response(wire.Response(id="c", model="m", created=1, choices=[choice])).choices
    assert out.logprobs is not None and out.logprobs.top_logprobs == [{"a": -0.5, "b": -1.0}]


# Two choices' answers, each an echo without tokens and then its words, streamed in any grouping of
# consecutive words (a chunk may also carry the echo's end with its first words) and interleaved.
word_text = st.text(st.characters(codec="utf-8"), min_size=1, max_size=4)
answers = st.lists(st.tuples(st.text(max_size=6), st.lists(word_text, min_size=1, max_size=8)),
                   min_size=1, max_size=2)
Piece = tuple[int, str, list[wire.TokenLogprob] | None]  # a chunk's choice, its text and its tokens


@settings(max_examples=200, deadline=None, database=None)
@given(answers=answers, data=st.data())
def test_streamed_logprobs_are_the_whole_answers_whatever_the_chunks(
        answers: list[tuple[str, list[str]]], data: st.DataObject) -> None:
    logprobs = [[_token(w, -(k + 1) / 8, (w, -(k + 1) / 8)) for k, w in enumerate(words)] for _, words in answers]
    queues: list[list[Piece]] = []  # each choice's pieces, in order
    for index, ((echo, words), tokens) in enumerate(zip(answers, logprobs, strict=True)):
        cuts = data.draw(st.sets(st.integers(1, len(words) - 1)) if len(words) > 1 else st.just(set[int]()),
                         label="cuts")
        groups = [slice(a, b) for a, b in itertools.pairwise([0, *sorted(cuts), len(words)])]
        lead = data.draw(st.integers(0, len(echo)), label="the echo's characters sent alone")
        own: list[Piece] = [(index, echo[:lead], None)] if lead else []
        own += [(index, (echo[lead:] if g.start == 0 else "") + "".join(words[g]), tokens[g]) for g in groups]
        queues.append(own)
    merged: list[Piece] = []
    while any(queues):
        merged.append(data.draw(st.sampled_from([q for q in queues if q]), label="next choice").pop(0))

    translator = TextStreamTranslator(id="cmpl-x", model="m", created=1, include_usage=False)
    frames = [wire.Chunk(sequence=k, choice_index=i, content=text, logprobs=tokens)
              for k, (i, text, tokens) in enumerate(merged)]
    frames.append(wire.Chunk(sequence=len(frames), done=True))
    streamed: dict[int, dict[str, list[Any]]] = {}
    for frame in _frames(*frames):
        for chunk in translator.feed_frame(frame):
            for c in chunk.choices:
                if c.logprobs is not None:
                    whole = streamed.setdefault(c.index, {})
                    for key, values in msgspec.structs.asdict(c.logprobs).items():
                        whole.setdefault(key, []).extend(values)
    translator.finish()

    response = wire.Response(id="c", model="m", created=1, choices=[
        wire.Choice(index=i, content=echo + "".join(words), logprobs=tokens)
        for i, ((echo, words), tokens) in enumerate(zip(answers, logprobs, strict=True))])
    whole_answer = translate_text_response(wire.decode_response(bytes(wire.write_response(response))))
    assert streamed == {c.index: msgspec.structs.asdict(c.logprobs) for c in whole_answer.choices if c.logprobs}
    for (echo, words), choice in zip(answers, whole_answer.choices, strict=True):
        assert choice.logprobs is not None and choice.logprobs.tokens == words
        assert choice.logprobs.text_offset == [len(echo) + len("".join(words[:k])) for k in range(len(words))]
