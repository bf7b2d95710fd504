"""Google's embeddings through the `google-genai` SDK, by its base URL alone, against a real edge on loopback:
`embed_content` (which the SDK sends as `batchEmbedContents`) and `embedContent` as a client sends it by hand,
served by the demo (whose vectors ingress/demo/embed.py computes), or by the scripted fake upstream to see what
travelled, to make it fail, and to show that one contract serves both APIs: an OpenAI client's embeddings and a
Google client's of the same texts are one entry of a route's response cache. Every buffer the edge sent passes the
C++ Verifier. (A real engine's vectors through Google's API: tests/integration/test_llama_embeddings.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import openai
import pytest
from fakes import upstream as fu
from fakes.upstream import FakeUpstream, fake_vector
from google import genai
from google.genai import errors, types
from recording import recording_demo, recording_edge

from ingress import wire
from ingress.cache.settings import RouteCache
from ingress.demo.answer import count_tokens
from ingress.demo.embed import DEFAULT_DIMENSIONS, vector
from ingress.exchange import Exchange
from ingress.serve.app import serve_app
from ingress.settings import Endpoint, Group, Route, Settings, Timeouts

# The SDK's async client subclasses aiohttp's ClientSession, which aiohttp warns of: its default transport, kept.
pytestmark = [pytest.mark.cxx,
              pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")]

MODEL = "gemini-embedding-001"
TEXTS = ["The quick brown fox", "jumps over the lazy dog", "🚀 naïve café"]
FAST = Timeouts(connect=1.0, first_byte=2.0, idle=0.5)


def _client(url: str) -> genai.Client:
    return genai.Client(api_key="gk-test", http_options=types.HttpOptions(base_url=url))


def demo_vector(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    return vector(wire.EmbeddingInputData(text=text), dimensions)


class Served:
    def __init__(self, url: str, bodies: list[bytes], exchanges: list[Exchange]) -> None:
        self.url, self.bodies, self.exchanges = url, bodies, exchanges
        self.client = _client(url)

    def sent(self) -> list[wire.EmbeddingRequestData]:
        return [wire.read_embedding_request(body) for body in self.bodies]


@pytest.fixture
async def demo(cxx_verifier: Any) -> AsyncIterator[Served]:
    """The edge in front of a recording demo service; at the end, every buffer it sent through the C++ Verifier."""
    bodies: list[bytes] = []
    async with AsyncExitStack() as stack:
        upstream = await stack.enter_async_context(serve_app(recording_demo(bodies), "127.0.0.1", 0))
        url, _, exchanges = await recording_edge(stack, Settings(upstream=upstream, models=(MODEL,)))
        yield Served(url, bodies, exchanges)
    assert all(cxx_verifier.verify("embedding_request", buf) for buf in bodies)


async def _post(url: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.post(f"{url}{path}", json=body,
                                                         headers={"x-goog-api-key": "gk-test"}) as r:
        return r.status, await r.json()


# --- the demo: vectors in order, dimensions, what is not sent --------------------------------------------


async def test_embed_content_answers_a_vector_per_text_in_order(demo: Served) -> None:
    result = await demo.client.aio.models.embed_content(model=MODEL, contents=TEXTS)

    assert [e.values for e in result.embeddings or []] == [demo_vector(t) for t in TEXTS]
    [sent] = demo.sent()
    assert ([i.text for i in sent.inputs or ()], sent.model_name, sent.dimensions) == (TEXTS, MODEL, None)
    [exchange] = demo.exchanges
    assert (exchange.api, exchange.routed.hints) == ("gemini_embeddings", [])
    usage = exchange.answer.usage
    assert usage is not None and usage.prompt_tokens == sum(count_tokens(t) for t in TEXTS)


async def test_dimensionality_travels_and_task_type_and_title_are_named_as_not_sent(demo: Served) -> None:
    config = types.EmbedContentConfig(output_dimensionality=8, task_type="RETRIEVAL_DOCUMENT", title="Foxes")
    result = await demo.client.aio.models.embed_content(model=MODEL, contents=TEXTS[:2], config=config)

    assert [e.values for e in result.embeddings or []] == [demo_vector(t, 8) for t in TEXTS[:2]]
    [sent] = demo.sent()
    assert sent.dimensions == 8 and [i.text for i in sent.inputs or ()] == TEXTS[:2]
    assert demo.exchanges[0].routed.hints == ["task_type", "title"]


async def test_embed_content_by_hand_in_proto_names_and_text_parts_joined(demo: Served) -> None:
    body = {"content": {"parts": [{"text": "line one"}, {"text": "line two"}]}, "output_dimensionality": 4,
            "task_type": "SEMANTIC_SIMILARITY"}
    status, answer = await _post(demo.url, f"/v1beta/models/{MODEL}:embedContent", body)

    assert status == 200, answer
    assert answer["embedding"] == {"values": demo_vector("line one\nline two", 4)}
    assert answer["usageMetadata"] == {"promptTokenCount": 4, "totalTokenCount": 4}
    [sent] = demo.sent()
    assert [i.text for i in sent.inputs or ()] == ["line one\nline two"]


@pytest.mark.parametrize(("method", "body", "field"), [
    ("embedContent", {"content": {"parts": [{"inlineData": {"mimeType": "image/png", "data": "iVBORw0K"}}]}},
     "content.parts[0].inline_data"),
    ("embedContent", {"content": {"parts": []}}, "content.parts"),
    ("embedContent", {"content": {"parts": [{"text": ""}]}}, "content.parts"),
    ("embedContent", {"content": {"parts": [{"text": "a"}]}, "taskKind": "X"}, "task_kind"),
    ("embedContent", {"content": {"parts": [{"text": "a"}]}, "outputDimensionality": 0}, "output_dimensionality"),
    ("batchEmbedContents", {"requests": []}, "requests"),
    ("batchEmbedContents", {"requests": [{"model": f"models/{MODEL}", "content": {"parts": [{"text": "a"}]}},
                                         {"model": "models/other", "content": {"parts": [{"text": "b"}]}}]},
     "requests[1].model"),
    ("batchEmbedContents", {"requests": [{"content": {"parts": [{"text": "a"}]}, "outputDimensionality": 8},
                                         {"content": {"parts": [{"text": "b"}]}}]},
     "requests[1].output_dimensionality"),
], ids=["image", "no-parts", "no-text", "unknown-field", "zero-dimensions", "empty-batch", "other-model",
        "mixed-dimensions"])
async def test_what_would_change_the_answer_is_refused_naming_the_field(demo: Served, method: str,
                                                                       body: dict[str, Any], field: str) -> None:
    status, answer = await _post(demo.url, f"/v1beta/models/{MODEL}:{method}", body)

    error = answer["error"]
    assert (status, error["code"], error["status"]) == (400, 400, "INVALID_ARGUMENT"), answer
    [violation] = [v for d in error["details"] if d["@type"].endswith("BadRequest") for v in d["fieldViolations"]]
    assert violation["field"] == field, error
    assert demo.bodies == []  # refused before anything was sent


# --- the fake: faults, and one cache entry for both APIs ---------------------------------------------------


async def test_a_rate_limited_service_is_resource_exhausted(fake_upstream: FakeUpstream, cxx_verifier: Any) -> None:
    limited = wire.ErrorInfo(status=429, type="rate_limit_error", code="rate_limit_exceeded", message="Slow down.")
    fake_upstream.play_embed(fu.embed_error(limited))
    async with AsyncExitStack() as stack:
        url, _, _ = await recording_edge(stack, Settings(upstream=fake_upstream.url, timeouts=FAST))
        with pytest.raises(errors.ClientError) as refused:
            await _client(url).aio.models.embed_content(model=MODEL, contents=TEXTS)
    assert (refused.value.code, refused.value.status, refused.value.message) == (429, "RESOURCE_EXHAUSTED",
                                                                                 "Slow down.")
    assert all(cxx_verifier.verify("embedding_request", r.body) for r in fake_upstream.embeddings_received)


async def test_an_openai_client_and_a_google_client_share_one_cache_entry(fake_upstream: FakeUpstream) -> None:
    settings = Settings(groups={"svc": Group(endpoints=[Endpoint(url=fake_upstream.url)])}, timeouts=FAST,
                        routes=(Route(model=MODEL, group="svc", cache=RouteCache(ttl=600)),))
    async with AsyncExitStack() as stack:
        url, _, exchanges = await recording_edge(stack, settings)
        oai = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
        stack.push_async_callback(oai.close)
        made = await oai.embeddings.with_raw_response.create(model=MODEL, input=TEXTS, encoding_format="float")
        served = await _client(url).aio.models.embed_content(model=MODEL, contents=TEXTS)

    assert made.headers["x-ingress-cache"] == "miss"
    assert served.sdk_http_response is not None and served.sdk_http_response.headers is not None
    assert served.sdk_http_response.headers["x-ingress-cache"] == "hit"
    assert [e.values for e in served.embeddings or []] == [d.embedding for d in made.parse().data]
    assert [e.values for e in served.embeddings or []] == [fake_vector(i, None) for i in range(len(TEXTS))]
    assert len(fake_upstream.embeddings_received) == 1  # the second was the first's entry
    assert [e.api for e in exchanges] == ["embeddings", "gemini_embeddings"]
