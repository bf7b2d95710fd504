"""`POST /v1/embeddings` through the official openai SDK, blocking and async, against a real edge.

With the embedded demo the vectors are known in advance (ingress/demo/embed.py computes them); in
front of the scripted fake upstream, the faults of the internal hop come back in OpenAI's shape, and
the fake shows what travelled.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import openai
import pytest
from fakes import upstream as fu
from fakes.upstream import FakeUpstream
from integration.conftest import FAST, StartEdge
from recording import recording_edge

from ingress import wire
from ingress.demo.answer import count_tokens
from ingress.demo.embed import DEFAULT_DIMENSIONS, vector
from ingress.settings import Endpoint, Group, Retry, Route, Settings
from ingress.wire import EmbeddingInputData

MODEL = "ingress-demo"
TEXTS = ["The quick brown fox", "jumps over the lazy dog", "🚀 naïve café"]


def demo_vector(value: str | list[int], dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    item = EmbeddingInputData(text=value) if isinstance(value, str) else EmbeddingInputData(tokens=value)
    return vector(item, dimensions)


# --- the blocking client ----------------------------------------------------------------------------


def test_default_request_is_base64_and_the_sdk_decodes_the_demos_vector(client: openai.OpenAI) -> None:
    raw = client.embeddings.with_raw_response.create(model=MODEL, input=TEXTS[0])
    wire_doc = raw.http_response.json()
    assert isinstance(wire_doc["data"][0]["embedding"], str)  # the SDK asked for base64 on our behalf

    result = raw.parse()
    assert result.object == "list" and result.model == MODEL
    [item] = result.data
    assert (item.object, item.index) == ("embedding", 0)
    assert item.embedding == demo_vector(TEXTS[0])
    assert (result.usage.prompt_tokens, result.usage.total_tokens) == (4, 4)


def test_float_format_is_json_numbers_of_the_same_vectors(client: openai.OpenAI) -> None:
    raw = client.embeddings.with_raw_response.create(model=MODEL, input=TEXTS, encoding_format="float")
    assert all(isinstance(item["embedding"], list) for item in raw.http_response.json()["data"])

    result = raw.parse()
    assert [item.index for item in result.data] == [0, 1, 2]
    assert [item.embedding for item in result.data] == [demo_vector(t) for t in TEXTS]
    assert result.usage.prompt_tokens == sum(count_tokens(t) for t in TEXTS)


def test_explicit_base64_is_left_to_the_caller_and_decodes_exactly(client: openai.OpenAI) -> None:
    result = client.embeddings.create(model=MODEL, input=TEXTS[1], encoding_format="base64", dimensions=16)
    encoded = result.data[0].embedding
    assert isinstance(encoded, str)
    assert list(struct.unpack("<16f", base64.b64decode(encoded))) == demo_vector(TEXTS[1], 16)


def test_dimensions_are_honoured(client: openai.OpenAI) -> None:
    for dimensions in (1, 8, 1536):
        result = client.embeddings.create(model=MODEL, input=TEXTS[:2], dimensions=dimensions)
        assert [len(item.embedding) for item in result.data] == [dimensions, dimensions]
        assert result.data[1].embedding == demo_vector(TEXTS[1], dimensions)


def test_token_ids_and_token_id_lists(client: openai.OpenAI) -> None:
    one = client.embeddings.create(model=MODEL, input=[15339, 1917])
    assert [item.embedding for item in one.data] == [demo_vector([15339, 1917])]
    assert one.usage.prompt_tokens == 2

    lists = client.embeddings.create(model=MODEL, input=[[1, 2, 3], [4]], encoding_format="float")
    assert [item.embedding for item in lists.data] == [demo_vector([1, 2, 3]), demo_vector([4])]
    assert lists.usage.prompt_tokens == 4


def test_unknown_model_is_a_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.embeddings.create(model="text-embedding-unknown", input="hi")
    assert info.value.code == "model_not_found" and info.value.param == "model"


def test_bad_input_is_a_400_naming_the_field(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=MODEL, input=["fine", ""])
    assert info.value.param == "input[1]"
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=MODEL, input="x", dimensions=0)
    assert info.value.param == "dimensions"


# --- the async client -----------------------------------------------------------------------------


async def test_async_default_and_float(aclient: openai.AsyncOpenAI) -> None:
    default = await aclient.embeddings.create(model=MODEL, input=TEXTS[2])
    floats = await aclient.embeddings.create(model=MODEL, input=[TEXTS[2]], encoding_format="float")
    assert default.data[0].embedding == floats.data[0].embedding == demo_vector(TEXTS[2])
    assert default.usage.total_tokens == floats.usage.total_tokens == count_tokens(TEXTS[2])


async def test_async_list_with_dimensions(aclient: openai.AsyncOpenAI) -> None:
    result = await aclient.embeddings.create(model=MODEL, input=TEXTS, dimensions=32)
    assert [item.embedding for item in result.data] == [demo_vector(t, 32) for t in TEXTS]


async def test_async_unknown_model_is_a_404(aclient: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await aclient.embeddings.create(model="nope", input="hi")
    assert info.value.status_code == 404 and info.value.code == "model_not_found"


# --- in front of the scripted fake: what travels, and the faults ------------------------------------


@pytest.fixture
async def fake_client(edge: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-test", max_retries=0) as c:
        yield c


async def test_the_service_receives_one_embedding_request(fake_upstream: FakeUpstream,
                                                          fake_client: openai.AsyncOpenAI) -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    result = await fake_client.embeddings.create(
        model="my-embedder", input=["a b", "c"], dimensions=4, user="u-7",
        extra_headers={"x-request-id": "emb-1", "traceparent": traceparent, "OpenAI-Project": "proj-1"})

    [received] = fake_upstream.embeddings_received
    request = received.request
    assert received.headers["Content-Type"] == "application/x-flatbuffers"
    assert (received.headers["x-request-id"], received.headers["traceparent"]) == ("emb-1", traceparent)
    assert (request.request_id, request.model_name, request.dimensions, request.user) == ("emb-1", "my-embedder", 4,
                                                                                          "u-7")
    assert [i.text for i in request.inputs or ()] == ["a b", "c"]
    assert request.base64 is True  # the SDK's default
    assert request.passport is not None and request.passport.tenant_id == "proj-1"
    assert request.passport.traceparent == traceparent
    assert [item.embedding for item in result.data] == [fu.fake_vector(0, 4), fu.fake_vector(1, 4)]
    assert result.model == "fake-embedder" and result.usage.prompt_tokens == 2
    assert fake_upstream.received == []  # nothing went to the chat path


@pytest.mark.parametrize(("behaviour", "status", "code"), [
    pytest.param(fu.embed_raw(b"Internal Server Error", status=500, content_type="text/plain"), 502,
                 "upstream_protocol_error", id="a-bare-500"),
    pytest.param(fu.embed_drop(), 502, "upstream_unavailable", id="connection-dropped"),
    pytest.param(fu.embed_raw(b"\x00" * 40), 502, "upstream_protocol_error", id="an-unreadable-answer"),
    pytest.param(fu.vectors(count=1), 502, "upstream_protocol_error", id="fewer-vectors-than-inputs"),
    pytest.param(fu.embed_error(wire.ErrorInfo(status=503, message="warming up", code="loading")), 503, "loading",
                 id="its-own-error-503"),
])
async def test_a_failing_service_is_answered_in_openais_shape(
    fake_upstream: FakeUpstream, edge: str, http: aiohttp.ClientSession, behaviour: fu.EmbedBehaviour, status: int,
    code: str,
) -> None:
    fake_upstream.play_embed(behaviour)
    async with http.post(f"{edge}/v1/embeddings", json={"model": "m", "input": ["a", "b"]}) as response:
        doc = await response.json()
    assert response.status == status
    assert list(doc) == ["error"] and sorted(doc["error"]) == ["code", "message", "param", "type"]
    assert doc["error"]["code"] == code and doc["error"]["type"] == "server_error"


async def test_a_silent_service_is_a_504_and_its_call_is_cut(fake_upstream: FakeUpstream, edge: str,
                                                              http: aiohttp.ClientSession) -> None:
    fake_upstream.play_embed(fu.embed_hang())
    async with http.post(f"{edge}/v1/embeddings", json={"model": "m", "input": "a"}) as response:
        doc = await response.json()
    assert (response.status, doc["error"]["code"]) == (504, "upstream_timeout")
    await fake_upstream.wait_idle()
    assert fake_upstream.outcomes == ["cancelled"]


async def test_the_sdk_raises_a_502_when_the_service_fails(fake_upstream: FakeUpstream,
                                                           fake_client: openai.AsyncOpenAI) -> None:
    fake_upstream.play_embed(fu.embed_raw(b"oops", status=500, content_type="text/plain"))
    with pytest.raises(openai.InternalServerError) as info:
        await fake_client.embeddings.create(model="m", input="hi")
    assert info.value.status_code == 502


async def test_the_services_4xx_error_keeps_its_status_and_param(fake_upstream: FakeUpstream,
                                                                 fake_client: openai.AsyncOpenAI) -> None:
    error = wire.ErrorInfo(status=400, type="invalid_request_error", code="context_length_exceeded",
                              message="input 1 is too long", param="input[1]")
    fake_upstream.play_embed(fu.embed_error(error))
    with pytest.raises(openai.BadRequestError) as info:
        await fake_client.embeddings.create(model="m", input=["a", "b"])
    assert (info.value.code, info.value.param) == ("context_length_exceeded", "input[1]")


async def test_an_unreachable_service_is_a_502_and_the_fallback_serves_it(
    start_edge: StartEdge, fake_upstream: FakeUpstream, http: aiohttp.ClientSession,
) -> None:
    with fu.refusing_url() as refused:
        alone = await start_edge(Settings(upstream=refused, timeouts=FAST))
        async with http.post(f"{alone}/v1/embeddings", json={"model": "m", "input": "a"}) as response:
            assert response.status == 502
            assert (await response.json())["error"]["code"] == "upstream_unavailable"

        # The route's group refuses: nothing was sent, so its fallback serves the request, as for chat
        # (with a retry budget ample for a cold edge: each request deposits a whole retry, where the trickle
        # of budget_min_per_s alone depends on the loop's clock having moved since the edge started).
        groups = {"dead": Group(endpoints=[Endpoint(url=refused)]),
                  "live": Group(endpoints=[Endpoint(url=fake_upstream.url)])}
        settings = Settings(groups=groups, routes=(Route(glob="*", group="dead", fallback="live"),), timeouts=FAST,
                            retry=Retry(attempts=2, budget_ratio=1.0, budget_min_per_s=1000.0))
        async with AsyncExitStack() as stack:
            url, _, exchanges = await recording_edge(stack, settings)
            async with http.post(f"{url}/v1/embeddings", json={"model": "m", "input": "a"}) as response:
                assert response.status == 200, await response.text()
            [exchange] = exchanges
            attempts = exchange.attempts
            assert (attempts.count, exchange.group, attempts.upstream) == (2, "live", fake_upstream.url)
        assert len(fake_upstream.embeddings_received) == 1


async def test_the_exchange_records_the_embeddings_request(fake_upstream: FakeUpstream,
                                                           http: aiohttp.ClientSession) -> None:
    async with AsyncExitStack() as stack:
        url, _, exchanges = await recording_edge(stack, Settings(upstream=fake_upstream.url, timeouts=FAST))
        async with http.post(f"{url}/v1/embeddings", json={"model": "m", "input": ["a", "b", "c"]}) as response:
            assert response.status == 200
        [exchange] = exchanges
        assert (exchange.routed.model, exchange.routed.stream) == ("m", False)
        assert (exchange.answer.upstream_ok, exchange.attempts.count) == (True, 1)
        assert exchange.answer.usage is not None and exchange.answer.usage.prompt_tokens == 3
        assert exchange.attempts.lease is None  # settled


def _metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}{{{want}}} in the metrics")


async def test_metrics_count_embeddings_by_route_and_tokens(demo_edge: str, http: aiohttp.ClientSession) -> None:
    async def scrape() -> str:
        async with http.get(f"{demo_edge}/metrics") as response:
            return await response.text()

    body: dict[str, Any] = {"model": MODEL, "input": ["one two", "three"]}
    async with http.post(f"{demo_edge}/v1/embeddings", json=body) as response:
        assert response.status == 200
    before = await scrape()
    async with http.post(f"{demo_edge}/v1/embeddings", json=body) as response:
        assert response.status == 200
    after = await scrape()
    labels = {"route": "/v1/embeddings", "model": MODEL, "status": "200"}
    assert _metric(after, "ingress_requests_total", **labels) == _metric(before, "ingress_requests_total", **labels) + 1
    tokens = {"model": MODEL, "kind": "prompt"}
    assert _metric(after, "ingress_tokens_total", **tokens) - _metric(before, "ingress_tokens_total", **tokens) == 3
