"""langchain-openai's OpenAIEmbeddings against a real edge with the embedded demo, by `base_url` alone.

`check_embedding_ctx_length=False` is what LangChain documents for OpenAI-compatible servers: with it,
texts are sent as they are; without it, LangChain first tokenizes them with tiktoken, whose encoding
files it would download (this machine has no such access, and the demo counts its own tokens).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from langchain_openai import OpenAIEmbeddings
from pydantic import SecretStr

from ingress.demo.embed import vector
from ingress.wire import EmbeddingInputData

MODEL = "ingress-demo"
DOCS = ["FlatBuffers inside", "JSON at the edge", "one schema, evolved compatibly"]


@pytest.fixture
def sync_http() -> Iterator[httpx.Client]:
    """The HTTP client LangChain's openai client uses, closed by the test (LangChain never closes its own)."""
    with httpx.Client() as client:
        yield client


@pytest.fixture
async def async_http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def _embedder(base_url: str, http: httpx.Client | httpx.AsyncClient, *, dimensions: int | None = None,
              chunk_size: int = 1000) -> OpenAIEmbeddings:
    sync, not_sync = (http, None) if isinstance(http, httpx.Client) else (None, http)
    return OpenAIEmbeddings(model=MODEL, base_url=f"{base_url}/v1", api_key=SecretStr("sk-test"),
                            check_embedding_ctx_length=False, max_retries=0, dimensions=dimensions,
                            chunk_size=chunk_size, http_client=sync, http_async_client=not_sync)


def _demo(text: str, dimensions: int = 256) -> list[float]:
    return vector(EmbeddingInputData(text=text), dimensions)


def test_embed_documents_and_query(threaded_demo_edge: str, sync_http: httpx.Client) -> None:
    embedder = _embedder(threaded_demo_edge, sync_http)
    assert embedder.embed_documents(DOCS) == [_demo(d) for d in DOCS]
    assert embedder.embed_query("where do vectors travel?") == _demo("where do vectors travel?")


def test_dimensions_and_small_chunks(threaded_demo_edge: str, sync_http: httpx.Client) -> None:
    embedder = _embedder(threaded_demo_edge, sync_http, dimensions=12, chunk_size=2)  # two requests for three documents
    assert embedder.embed_documents(DOCS) == [_demo(d, 12) for d in DOCS]


async def test_async_embed_documents(demo_edge: str, async_http: httpx.AsyncClient) -> None:
    embedder = _embedder(demo_edge, async_http)
    assert await embedder.aembed_documents(DOCS) == [_demo(d) for d in DOCS]
    assert await embedder.aembed_query(DOCS[0]) == _demo(DOCS[0])
