"""The `google-genai` SDK as the tests' oracle of Google's wire: the exact body it sends for a request (caught by an
in-process httpx transport, nothing on the network), and its own reading of an answer's JSON."""

from __future__ import annotations

from typing import Any

import httpx
from google import genai
from google.genai import types


def _recording(answer: dict[str, Any]) -> tuple[genai.Client, list[httpx.Request]]:
    """A client whose requests are kept, each answered `answer`, in-process."""
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=answer)

    transport = httpx.Client(transport=httpx.MockTransport(record))
    return genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url="http://edge",
                                                                          httpx_client=transport)), sent


def sdk_body(contents: Any, config: types.GenerateContentConfig | None = None, *,
             model: str = "gemini-2.5-pro") -> tuple[str, bytes]:
    """(the URL path, the body) the SDK sends for `generate_content(model, contents, config)`."""
    client, sent = _recording({"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]},
                                               "finishReason": "STOP"}]})
    client.models.generate_content(model=model, contents=contents, config=config)
    assert len(sent) == 1
    return sent[0].url.path, sent[0].content


def sdk_response(body: bytes) -> types.GenerateContentResponse:
    """An answer's JSON as the SDK reads it (raises when it cannot)."""
    return types.GenerateContentResponse.model_validate_json(body)


def _client(status: int, body: bytes, content_type: str = "application/json") -> genai.Client:
    """A client whose every request is answered `body`, in-process."""
    transport = httpx.Client(transport=httpx.MockTransport(
        lambda request: httpx.Response(status, content=body, headers={"content-type": content_type})))
    return genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url="http://edge",
                                                                          httpx_client=transport))


def sdk_generate(body: bytes, status: int = 200) -> types.GenerateContentResponse:
    """What `generate_content` returns for an answer `body` (or raises, an error's)."""
    return _client(status, body).models.generate_content(model="gemini-x", contents="Hi")


def sdk_stream(events: list[bytes]) -> list[types.GenerateContentResponse]:
    """What `generate_content_stream` yields for a stream of events (each a JSON object), sent as Google sends
    them with `alt=sse`; an `{"error": ...}` event raises, as it does from Google."""
    sse = b"".join(b"data: " + event + b"\r\n\r\n" for event in events)
    return list(_client(200, sse, "text/event-stream").models.generate_content_stream(model="gemini-x",
                                                                                     contents="Hi"))


def sdk_models(body: bytes) -> list[types.Model]:
    """What `models.list()` yields for a models list `body`."""
    return list(_client(200, body).models.list())


def sdk_embed_body(contents: Any, config: types.EmbedContentConfig | None = None, *,
                   model: str = "gemini-embedding-001") -> tuple[str, bytes]:
    """(the URL path, the body) the SDK sends for `embed_content(model, contents, config)`."""
    client, sent = _recording({"embeddings": [{"values": [0.0]}]})
    client.models.embed_content(model=model, contents=contents, config=config)
    assert len(sent) == 1
    return sent[0].url.path, sent[0].content


def sdk_embed(body: bytes) -> types.EmbedContentResponse:
    """What `embed_content` returns for an answer `body`."""
    return _client(200, body).models.embed_content(model="gemini-embedding-001", contents="Hi")
