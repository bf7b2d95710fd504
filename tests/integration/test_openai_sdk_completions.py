"""`POST /v1/completions` (legacy text completions) through the official openai SDK, blocking and async.

With the embedded demo the answers are known in advance (ingress/demo/text.py): each prompt echoed
back, cut at max_tokens; in front of the scripted fake upstream, the fake shows what travelled.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import openai
import pytest
from fakes import upstream as fu
from fakes.upstream import FakeUpstream
from integration.conftest import FAST, StartEdge
from openai.types import Completion

from ingress import wire
from ingress.demo.answer import logprob as demo_logprob
from ingress.encoding.reading import decode_text_request
from ingress.settings import Endpoint, Group, Route, Settings

MODEL = "ingress-demo"


# --- the blocking client ----------------------------------------------------------------------------


def test_a_string_prompt_is_completed(client: openai.OpenAI) -> None:
    raw = client.completions.with_raw_response.create(model=MODEL, prompt="the quick brown fox")
    doc = raw.http_response.json()
    assert doc["object"] == "text_completion" and doc["choices"][0]["logprobs"] is None
    result = raw.parse()
    assert result.id.startswith("cmpl-") and result.model == MODEL
    assert [(c.index, c.text, c.finish_reason) for c in result.choices] == [(0, "the quick brown fox", "stop")]
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.total_tokens) == (4, 4, 8)


def test_a_list_of_prompts_with_n_answers_prompt_times_n_choices_in_order(client: openai.OpenAI) -> None:
    result = client.completions.create(model=MODEL, prompt=["one two", "three"], n=2)
    assert [(c.index, c.text) for c in result.choices] == [(0, "one two"), (1, "one two"), (2, "three"),
                                                           (3, "three")]
    assert result.usage is not None and result.usage.completion_tokens == (2 + 1) * 2


def test_token_id_prompts_travel_as_ids(client: openai.OpenAI) -> None:
    single = client.completions.create(model=MODEL, prompt=[101, 7, 2**31 - 1])
    assert single.choices[0].text == f" 101 7 {2**31 - 1}"
    assert single.usage is not None and single.usage.prompt_tokens == 3
    several = client.completions.create(model=MODEL, prompt=[[1, 2], [3]])
    assert [c.text for c in several.choices] == [" 1 2", " 3"]


def test_echo_max_tokens_and_the_other_parameters(client: openai.OpenAI) -> None:
    result = client.completions.create(
        model=MODEL, prompt="a b c d", echo=True, max_tokens=2, suffix="!", best_of=3, n=2,
        temperature=0.5, top_p=0.9, stop=["\n"], seed=7, presence_penalty=0.1, frequency_penalty=-0.1,
        logit_bias={"50256": -100}, user="u-1")
    assert [(c.text, c.finish_reason) for c in result.choices] == [("a b c d" + "a b", "length")] * 2
    zero = client.completions.create(model=MODEL, prompt="a b", echo=True, max_tokens=0)
    assert (zero.choices[0].text, zero.choices[0].finish_reason) == ("a b", "length")


def test_stream_with_usage(client: openai.OpenAI) -> None:
    chunks = list(client.completions.create(model=MODEL, prompt=["x y", "z"], echo=True, stream=True,
                                            stream_options={"include_usage": True}))
    assert all(c.object == "text_completion" for c in chunks)
    texts: dict[int, str] = {}
    finishes: dict[int, str | None] = {}
    for chunk in chunks[:-1]:
        assert chunk.usage is None
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            finishes[choice.index] = choice.finish_reason or finishes.get(choice.index)
    assert texts == {0: "x yx y", 1: "zz"} and finishes == {0: "stop", 1: "stop"}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 3


def test_a_stream_without_usage_asked_has_none(client: openai.OpenAI) -> None:
    chunks = list(client.completions.create(model=MODEL, prompt="hi there", stream=True))
    assert "".join(ch.text for c in chunks for ch in c.choices) == "hi there"
    assert all(c.usage is None for c in chunks) and chunks[-1].choices[0].finish_reason == "stop"


# --- logprobs, in the legacy shape: the demo derives them from each word (ingress/demo/answer.py) ----


def _expected(words: list[str], top: int, start: int = 0) -> dict[str, list[Any]]:
    """The demo's logprobs of `words`, answered from `start` characters into the choice's text."""
    lps = [demo_logprob(w, top) for w in words]
    return {"tokens": words, "token_logprobs": [t.logprob for t in lps],
            "top_logprobs": [{a.token or "": a.logprob for a in t.top_logprobs or ()} for t in lps],
            "text_offset": [start + len("".join(words[:k])) for k in range(len(words))]}


def test_logprobs_are_answered(client: openai.OpenAI) -> None:
    raw = client.completions.with_raw_response.create(model=MODEL, prompt="the quick brown fox", logprobs=2)
    completion = Completion.model_validate(raw.http_response.json(), strict=True)
    assert completion == raw.parse()
    [choice] = completion.choices
    assert choice.logprobs is not None and choice.logprobs.tokens == ["the", " quick", " brown", " fox"]
    assert choice.logprobs.text_offset == [0, 3, 9, 15]
    assert choice.logprobs.model_dump() == _expected(["the", " quick", " brown", " fox"], 2)
    assert [len(top) for top in choice.logprobs.top_logprobs or ()] == [2] * 4
    # A logprob travels as a float32 and arrives as the decimal the demo meant: -0.179, not -0.1790000051.
    assert raw.http_response.json()["choices"][0]["logprobs"]["token_logprobs"][0] == demo_logprob("the", 0).logprob
    none_asked = client.completions.create(model=MODEL, prompt="the quick")
    assert none_asked.choices[0].logprobs is None


def test_logprobs_arrive_in_a_stream(client: openai.OpenAI) -> None:
    with client.completions.create(model=MODEL, prompt="one two three", logprobs=0, max_tokens=2,
                                   stream=True) as stream:
        chunks = list(stream)
    pieces = [(c.text, c.logprobs) for chunk in chunks for c in chunk.choices if c.text]
    assert [text for text, _ in pieces] == ["one", " two"]
    for text, logprobs in pieces:  # each token's logprobs ride on the chunk that carries it
        assert logprobs is not None and logprobs.tokens == [text] and logprobs.top_logprobs == [{}]
    assert [lp.text_offset for _, lp in pieces if lp] == [[0], [3]]  # counted over the choice's text so far
    assert chunks[-1].choices[0].finish_reason == "length"


async def test_logprobs_of_several_prompts_and_choices_count_their_own_text(aclient: openai.AsyncOpenAI) -> None:
    stream = await aclient.completions.create(model=MODEL, prompt=["a bb", "ccc d"], n=2, logprobs=1, stream=True,
                                              stream_options={"include_usage": True})
    whole: dict[int, dict[str, list[Any]]] = {}
    async for chunk in stream:
        for c in chunk.choices:
            for key, values in (c.logprobs.model_dump() if c.logprobs else {}).items():
                whole.setdefault(c.index, {}).setdefault(key, []).extend(values)
    assert whole == {0: _expected(["a", " bb"], 1), 1: _expected(["a", " bb"], 1),
                     2: _expected(["ccc", " d"], 1), 3: _expected(["ccc", " d"], 1)}
    result = await aclient.completions.create(model=MODEL, prompt=["a bb", "ccc d"], n=2, logprobs=1)
    assert {c.index: c.logprobs.model_dump() for c in result.choices if c.logprobs} == whole


def test_logprobs_with_echo_are_refused(client: openai.OpenAI) -> None:
    # OpenAI answers the echoed prompt's token logprobs too; the contract carries none (oai/completions.py).
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as caught:
            client.completions.create(model=MODEL, prompt="a b", echo=True, logprobs=1, stream=stream)
        assert caught.value.param == "logprobs" and caught.value.code == "invalid_request"


# --- the async client -------------------------------------------------------------------------------


async def test_async_create_and_stream(aclient: openai.AsyncOpenAI) -> None:
    result = await aclient.completions.create(model=MODEL, prompt="async words here", max_tokens=2)
    assert (result.choices[0].text, result.choices[0].finish_reason) == ("async words", "length")
    stream = await aclient.completions.create(model=MODEL, prompt=[[5, 6]], stream=True,
                                              stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert "".join(ch.text for c in chunks for ch in c.choices) == " 5 6"
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 2


async def test_an_unknown_model_is_a_404_in_openais_shape(aclient: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await aclient.completions.create(model="no-such-model", prompt="x")
    assert caught.value.code == "model_not_found"


# --- what travels: the fake upstream sees the CompletionRequest --------------------------------------


async def test_every_field_travels_to_the_service(edge: str, fake_upstream: FakeUpstream) -> None:
    async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-test", max_retries=0) as c:
        await c.completions.create(
            model="gpt-4o", prompt=["first", "second"], echo=True, suffix="end", best_of=2, n=2,
            max_tokens=0, temperature=0.25, top_p=0.5, stop="\n\n", seed=-1, presence_penalty=2,
            frequency_penalty=-2, logit_bias={"7": 100}, user="someone")
    sent: Any = decode_text_request(fake_upstream.received[-1].body)
    assert sent.prompt == ["first", "second"] and sent.echo and sent.suffix == "end"
    assert (sent.best_of, sent.n, sent.logprobs, sent.max_tokens) == (2, 2, None, 0)
    assert (sent.temperature, sent.top_p, sent.stop, sent.seed) == (0.25, 0.5, ["\n\n"], -1)
    assert (sent.presence_penalty, sent.frequency_penalty, sent.logit_bias, sent.user) == (2, -2, {"7": 100}, "someone")
    view = wire.read_request(fake_upstream.received[-1].body)
    assert view.TextCompletion() and view.MessagesLength() == 0 and view.UserPrompt() == b"first"
    async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-test", max_retries=0) as c:
        await c.completions.create(model="gpt-4o", prompt="first", logprobs=0)  # logprobs go without echo
    assert decode_text_request(fake_upstream.received[-1].body).logprobs == 0


async def test_the_edge_refuses_before_sending(edge: str, fake_upstream: FakeUpstream,
                                               http: aiohttp.ClientSession) -> None:
    async with http.post(f"{edge}/v1/completions", json={"model": "gpt-4o", "prompt": "x", "nope": 1}) as r:
        assert r.status == 400 and (await r.json())["error"]["param"] == "nope"
    assert fake_upstream.received == []


# --- the internal hop's failures, in OpenAI's shape --------------------------------------------------


async def test_a_service_error_mid_stream_reaches_the_sdk_in_band(edge: str, fake_upstream: FakeUpstream) -> None:
    fake_upstream.play(fu.error_frame(wire.ErrorInfo(status=500, message="engine fell over", code="engine"), after=2))
    async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-test", max_retries=0) as c:
        stream = await c.completions.create(model="gpt-4o", prompt="one two three", stream=True)
        texts = []
        with pytest.raises(openai.APIError, match="engine fell over"):
            async for chunk in stream:
                texts += [choice.text for choice in chunk.choices]
    assert texts == ["one"]  # the role frame sends nothing; the first word did arrive


async def test_a_service_error_answer_keeps_its_status(edge: str, fake_upstream: FakeUpstream) -> None:
    fake_upstream.play(fu.error_answer(wire.ErrorInfo(status=429, type="rate_limit_error", message="slow down",
                                                      code="rate_limited")))
    async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-test", max_retries=0) as c:
        with pytest.raises(openai.RateLimitError) as caught:
            await c.completions.create(model="gpt-4o", prompt="x")
    assert caught.value.code == "rate_limited"


# --- engine extras: a forwarding route sends them, as for chat ----------------------------------------


async def test_a_forwarding_route_sends_the_extras_of_a_text_completion(
    start_edge: StartEdge, fake_upstream: FakeUpstream,
) -> None:
    group = {"engine": Group(endpoints=[Endpoint(url=fake_upstream.url)])}
    routes = (Route(prefix="vllm-", group="engine", extra_fields="forward"), Route(glob="*", group="engine"))
    url = await start_edge(Settings(groups=group, routes=routes, timeouts=FAST))
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0) as c:
        result = await c.completions.create(model="vllm-base", prompt="hello there", max_tokens=5,
                                            extra_body={"top_k": 40, "min_p": 0.05})
        with pytest.raises(openai.BadRequestError) as bounds:  # the OpenAI fields are checked as ever
            await c.completions.create(model="vllm-base", prompt="x", logprobs=9, extra_body={"top_k": 1})
        with pytest.raises(openai.BadRequestError) as refused:  # a route that does not forward refuses them
            await c.completions.create(model="gpt-4o", prompt="x", extra_body={"top_k": 1})
    assert result.choices[0].text == "hello there"
    assert (bounds.value.param, refused.value.param) == ("logprobs", "top_k")
    [received] = fake_upstream.received
    view = wire.read_request(received.body)
    assert json.loads(view.ExtraJson() or b"") == {"top_k": 40, "min_p": 0.05} and view.TextCompletion()
    assert decode_text_request(received.body).max_tokens == 5
