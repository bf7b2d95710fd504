"""langchain-openai's OpenAIEmbeddings and ChatOpenAI against a real edge with the embedded demo, by
`base_url` alone.

`check_embedding_ctx_length=False` is what LangChain documents for OpenAI-compatible servers: with it,
texts are sent as they are; without it, LangChain first tokenizes them with tiktoken, whose encoding
files it would download (this machine has no such access, and the demo counts its own tokens).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Literal

import httpx
import pytest
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from pydantic import BaseModel, SecretStr

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


# --- structured output ------------------------------------------------------------------------------


class Ticket(BaseModel):
    """A support ticket."""

    title: str
    priority: int
    urgent: bool


def _chat(base_url: str, http: httpx.Client | httpx.AsyncClient, *, responses: bool = False) -> ChatOpenAI:
    sync, not_sync = (http, None) if isinstance(http, httpx.Client) else (None, http)
    return ChatOpenAI(model=MODEL, base_url=f"{base_url}/v1", api_key=SecretStr("sk-test"), max_retries=0,
                      http_client=sync, http_async_client=not_sync, use_responses_api=responses)


# With tool calling, LangChain offers one tool named after the schema, "Ticket", and names it in
# tool_choice; the demo calls it (nothing else asks for it: the text does not say "Ticket") with
# arguments built from the schema it received: the user's text, 0 for the integer, false for the boolean.
TROUBLE = "the printer in room 4 is on fire"
CALLED = Ticket(title=TROUBLE, priority=0, urgent=False)


def test_structured_output_by_tool_calling(threaded_demo_edge: str, sync_http: httpx.Client) -> None:
    structured = _chat(threaded_demo_edge, sync_http).with_structured_output(Ticket, method="function_calling")
    assert structured.invoke(TROUBLE) == CALLED


async def test_async_structured_output_by_tool_calling_with_the_raw_message(demo_edge: str,
                                                                          async_http: httpx.AsyncClient) -> None:
    structured = _chat(demo_edge, async_http).with_structured_output(Ticket, method="function_calling",
                                                                     include_raw=True)
    result = await structured.ainvoke(TROUBLE)
    assert (result["parsed"], result["parsing_error"]) == (CALLED, None)
    [call] = result["raw"].tool_calls
    assert (call["name"], call["args"]) == ("Ticket", CALLED.model_dump())


@pytest.mark.parametrize("method", ["json_schema", "json_mode"])
def test_structured_output_from_the_message_content(threaded_demo_edge: str, sync_http: httpx.Client,
                                                    method: Literal["json_schema", "json_mode"]) -> None:
    """LangChain sends `response_format` and parses the content; the demo echoes the user's message, so
    the message is the JSON document LangChain must parse into the schema."""
    ticket = Ticket(title="printer on fire", priority=2, urgent=True)
    structured = _chat(threaded_demo_edge, sync_http).with_structured_output(Ticket, method=method)
    assert structured.invoke(ticket.model_dump_json()) == ticket


@pytest.mark.parametrize("responses", [False, True], ids=["chat-completions", "responses-api"])
def test_structured_output_by_tool_calling_over_either_api(threaded_demo_edge: str, sync_http: httpx.Client,
                                                           responses: bool) -> None:
    """ChatOpenAI(use_responses_api=True) sends the same request to /v1/responses."""
    chat = _chat(threaded_demo_edge, sync_http, responses=responses)
    assert chat.with_structured_output(Ticket, method="function_calling").invoke(TROUBLE) == CALLED
    assert chat.invoke("plain words").text == "plain words"


async def test_a_responses_api_stream(demo_edge: str, async_http: httpx.AsyncClient) -> None:
    chat = _chat(demo_edge, async_http, responses=True)
    pieces = [chunk.text async for chunk in chat.astream("one two three")]
    assert "".join(pieces) == "one two three" and len([p for p in pieces if p]) == 3
