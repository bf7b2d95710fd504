"""Embeddings from a real engine: the official `openai` SDK (and Google's `google-genai`, by Google's API) → the
edge → its in-process OpenAI bridge → llama.cpp's llama-server serving SmolLM2-135M as an embedder
(`llama_embedder`: `--embeddings --pooling mean`, one thread; tests/support/llama_engine.py), through a key with a
token limit, a route's response cache and a fallback chain.

What the engine says is read from the engine itself (its dimension from `/v1/models`, its vectors and
counts by asking it directly), never written here.
"""

from __future__ import annotations

import base64
import math
from array import array
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import aiohttp
import openai
import pytest
from fakes.upstream import refusing_url
from google import genai
from google.genai import types
from metric_values import sample_value
from recording import recording_edge
from waiting import eventually

from ingress.cache.settings import RouteCache
from ingress.exchange import Exchange
from ingress.settings import Bridge, Endpoint, Group, Retry, Route, Settings, Timeouts
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Key, Limits, Tenancy, Tenant

MODEL = "smollm2"  # what llama-server answers as (its --alias)
CACHED = "smollm2-cached"  # the same engine, through a route with a response cache
OPENAI_NAME = "text-embedding-3-small"  # a route to a group that is down, falling back to the engine
FALLBACK = "llama-embedder"
TENANT = "embedding-tenant"
KEY, KEY_ID, KEY_HASH = new_key()
TPM = 100_000
TEXTS = ["The capital of France is Paris.", "Vectors through the edge, the bridge and the engine."]
PATIENT = Timeouts(connect=5.0, first_byte=60.0, idle=60.0)  # a tiny model on a shared core
SERVED_BY = "x-ingress-served-by"


@dataclass
class Served:
    client: openai.AsyncOpenAI
    exchanges: list[Exchange]
    engine: str


def _settings(engine: str, down: str, tenancy: Tenancy | None = None) -> Settings:
    bridge = Bridge(dialect="openai", target=f"{engine}/v1", timeouts=PATIENT)
    groups = {"llama": Group(endpoints=[Endpoint(bridge=bridge)]), "down": Group(endpoints=[Endpoint(url=down)])}
    routes = (Route(model=MODEL, group="llama"),
              Route(model=CACHED, upstream_model=MODEL, group="llama", cache=RouteCache(ttl=600)),
              Route(model=OPENAI_NAME, group="down", fallbacks=[FALLBACK]),
              Route(name=FALLBACK, upstream_model=MODEL, group="llama"))
    return Settings(groups=groups, routes=routes, timeouts=PATIENT, tenancy=tenancy,
                    retry=Retry(budget_ratio=1.0, budget_min_per_s=100.0))  # a cold edge may fall back at once


@pytest.fixture
async def served(llama_embedder: str) -> AsyncIterator[Served]:
    async with AsyncExitStack() as stack:
        down = stack.enter_context(refusing_url())
        url, _, exchanges = await recording_edge(stack, _settings(llama_embedder, down))
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-client", max_retries=0, timeout=60)
        stack.push_async_callback(client.close)
        yield Served(client, exchanges, llama_embedder)


async def _dimension(engine: str) -> int:
    """The model's embedding size, as the engine reports it (`meta.n_embd` of its one model)."""
    async with aiohttp.ClientSession() as http, http.get(f"{engine}/v1/models") as r:
        models = await r.json()
    size: int = models["data"][0]["meta"]["n_embd"]
    return size


async def _direct(engine: str, inputs: Sequence[str | list[int]]) -> tuple[list[list[float]], dict[str, int]]:
    """The engine's own answer for `inputs`, asked directly in floats: its vectors and usage."""
    body = {"model": MODEL, "input": list(inputs), "encoding_format": "float"}
    async with aiohttp.ClientSession() as http, http.post(f"{engine}/v1/embeddings", json=body) as r:
        assert r.status == 200, await r.text()
        answer = await r.json()
    vectors = [item["embedding"] for item in sorted(answer["data"], key=lambda item: item["index"])]
    return vectors, answer["usage"]


def _f32(vectors: Iterable[Any]) -> list[list[float]]:
    """Vectors at float32, as they travel: what float and base64 must agree on."""
    return [array("f", v).tolist() for v in vectors]


async def test_vectors_of_the_models_dimension_alike_in_either_format_and_usage_counted(served: Served) -> None:
    dimension = await _dimension(served.engine)
    default = await served.client.embeddings.with_raw_response.create(model=MODEL, input=TEXTS)  # base64, decoded
    floats = await served.client.embeddings.with_raw_response.create(model=MODEL, input=TEXTS,
                                                                     encoding_format="float")
    assert all(isinstance(item["embedding"], str) for item in default.http_response.json()["data"])
    assert all(isinstance(item["embedding"], list) for item in floats.http_response.json()["data"])
    as_base64, as_floats = default.parse(), floats.parse()
    assert [len(item.embedding) for item in as_base64.data] == [dimension, dimension]
    assert _f32(i.embedding for i in as_base64.data) == _f32(i.embedding for i in as_floats.data)
    vectors, usage = await _direct(served.engine, TEXTS)
    assert _f32(i.embedding for i in as_floats.data) == _f32(vectors)  # the engine's own, unchanged
    assert all(math.isclose(math.fsum(x * x for x in i.embedding), 1.0, rel_tol=1e-3) for i in as_floats.data)
    for result in (as_base64, as_floats):
        assert (result.usage.prompt_tokens, result.usage.total_tokens) == (usage["prompt_tokens"],
                                                                           usage["total_tokens"])
        assert result.model == MODEL and result.usage.prompt_tokens > 0
    explicit = await served.client.embeddings.create(model=MODEL, input=TEXTS[0], encoding_format="base64")
    encoded = explicit.data[0].embedding
    assert isinstance(encoded, str)  # left to the caller, who asked for it
    assert _f32([array("f", base64.b64decode(encoded))]) == _f32(vectors[:1])
    [exchange, *_] = served.exchanges
    assert exchange.answer.usage is not None and exchange.answer.usage.prompt_tokens == usage["prompt_tokens"]


@pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")
async def test_a_google_client_gets_the_engines_own_vectors(served: Served) -> None:
    """Google's API on the same route: the SDK's embed_content (batchEmbedContents) and its dimensionality."""
    edge = str(served.client.base_url).rstrip("/").removesuffix("/v1")
    client = genai.Client(api_key="gk-client", http_options=types.HttpOptions(base_url=edge))
    result = await client.aio.models.embed_content(model=MODEL, contents=TEXTS)

    vectors, usage = await _direct(served.engine, TEXTS)
    assert _f32(e.values or [] for e in result.embeddings or []) == _f32(vectors)  # the engine's own, unchanged
    [exchange] = served.exchanges
    assert exchange.api == "gemini_embeddings"
    assert exchange.answer.usage is not None and exchange.answer.usage.prompt_tokens == usage["prompt_tokens"]
    with pytest.raises(genai.errors.ClientError) as refused:  # llama-server answers its model's whole vectors
        await client.aio.models.embed_content(model=MODEL, contents=TEXTS,
                                              config=types.EmbedContentConfig(output_dimensionality=8))
    assert (refused.value.code, refused.value.status) == (400, "INVALID_ARGUMENT")
    assert isinstance(refused.value.details, dict)
    [bad_request] = [d for d in refused.value.details["error"]["details"] if d["@type"].endswith("BadRequest")]
    assert [v["field"] for v in bad_request["fieldViolations"]] == ["requests[0].output_dimensionality"]
    assert str(refused.value.message).endswith("not 8.")  # the vectors the engine answered are not what was asked


async def test_token_ids_are_embedded_as_ids(served: Served) -> None:
    ids = [[1, 2, 3], [4, 5]]
    lists = await served.client.embeddings.create(model=MODEL, input=ids, encoding_format="float")
    one = await served.client.embeddings.create(model=MODEL, input=ids[0])  # a list of ids is one input
    vectors, usage = await _direct(served.engine, ids)
    assert _f32(i.embedding for i in lists.data) == _f32(vectors)
    assert _f32(i.embedding for i in one.data) == _f32(vectors[:1])
    assert (lists.usage.prompt_tokens, one.usage.prompt_tokens) == (usage["prompt_tokens"], 3) == (5, 3)


async def test_dimensions_llama_server_does_not_honour_are_refused_naming_them(served: Served) -> None:
    """llama-server answers the model's whole vectors whatever `dimensions` asks (it takes the field and
    ignores it): the client is told, rather than given vectors of another length than it asked for."""
    dimension = await _dimension(served.engine)
    with pytest.raises(openai.BadRequestError) as refused:
        await served.client.embeddings.create(model=MODEL, input=TEXTS[0], dimensions=64)
    assert (refused.value.code, refused.value.param) == ("unsupported_parameter", "dimensions")
    assert f"vectors of {dimension} dimensions, not 64" in refused.value.message
    whole = await served.client.embeddings.create(model=MODEL, input=TEXTS[0], dimensions=dimension)
    assert len(whole.data[0].embedding) == dimension


async def test_the_engines_refusal_reaches_the_client_in_openais_shape(served: Served) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await served.client.embeddings.create(model=MODEL, input=[[999_999_999]])  # beyond its vocabulary
    assert refused.value.status_code == 400 and "invalid tokens" in refused.value.message


async def test_an_input_longer_than_the_engines_batch_is_the_clients_400(served: Served) -> None:
    """llama-server answers it with a 500; the input is what is wrong, so no `5xx` fallback moves it."""
    with pytest.raises(openai.BadRequestError) as refused:
        await served.client.embeddings.create(model=MODEL, input="word " * 1500)
    assert refused.value.code == "context_length_exceeded" and "too large to process" in refused.value.message


async def test_a_repeated_request_is_answered_from_the_routes_cache(served: Served) -> None:
    first = await served.client.embeddings.with_raw_response.create(model=CACHED, input=TEXTS,
                                                                    encoding_format="float")
    again = await served.client.embeddings.with_raw_response.create(model=CACHED, input=TEXTS)  # base64
    assert (first.headers["x-ingress-cache"], again.headers["x-ingress-cache"]) == ("miss", "hit")
    assert _f32(i.embedding for i in first.parse().data) == _f32(i.embedding for i in again.parse().data)
    assert first.parse().usage == again.parse().usage
    assert [exchange.cache for exchange in served.exchanges] == ["miss", "hit"]


async def test_a_route_whose_group_is_down_falls_back_to_the_bridged_engine(served: Served) -> None:
    dimension = await _dimension(served.engine)
    raw = await served.client.embeddings.with_raw_response.create(model=OPENAI_NAME, input=TEXTS)
    assert raw.headers[SERVED_BY] == f'route="{FALLBACK}", model="{MODEL}"'
    result = raw.parse()
    assert [len(item.embedding) for item in result.data] == [dimension, dimension]
    _, usage = await _direct(served.engine, TEXTS)
    assert result.usage.prompt_tokens == usage["prompt_tokens"]
    [exchange] = served.exchanges
    assert (exchange.attempts.count, exchange.group) == (2, "llama")


def _settled() -> float:
    return sample_value("ingress_tokens_settled_total", {"tenant": TENANT}) or 0.0


async def test_a_keys_token_limit_is_charged_the_engines_count(llama_embedder: str) -> None:
    tenancy = Tenancy(keys=(Key(id=KEY_ID, tenant=TENANT, hash=KEY_HASH, limits=Limits(tpm=TPM)),),
                      tenants={TENANT: Tenant()})
    async with AsyncExitStack() as stack:
        down = stack.enter_context(refusing_url())
        url, _, exchanges = await recording_edge(stack, _settings(llama_embedder, down, tenancy))
        anonymous = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-nobody", max_retries=0, timeout=60)
        keyed = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60)
        stack.push_async_callback(anonymous.close)
        stack.push_async_callback(keyed.close)
        with pytest.raises(openai.AuthenticationError):
            await anonymous.embeddings.create(model=MODEL, input=TEXTS)
        before = _settled()
        raw = await keyed.embeddings.with_raw_response.create(model=MODEL, input=TEXTS)
        charged = await eventually(lambda: _settled() - before, "the request settled")
    _, usage = await _direct(llama_embedder, TEXTS)
    assert raw.headers["x-ratelimit-limit-tokens"] == str(TPM)
    assert int(raw.headers["x-ratelimit-remaining-tokens"]) < TPM  # its prompt, reserved as the edge counts it
    assert raw.parse().usage.prompt_tokens == charged == usage["prompt_tokens"]  # settled: the engine's count
    assert exchanges[-1].answer.usage is not None and exchanges[-1].answer.usage.prompt_tokens == usage["prompt_tokens"]
