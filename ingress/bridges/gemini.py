"""Google's Gemini API as a bridge dialect (sans-I/O): our request → `POST /v1beta/models/{model}:generateContent`
(`:streamGenerateContent?alt=sse` for a stream; `gemini_request.py`), its answers, events and errors → our
types (`gemini_answers.py`); an embeddings request → `:batchEmbedContents` (`gemini_embeddings.py`). A request
that came to the edge in Google's own API carries it as sent (`gemini_json`): that is what goes, to the route's
model, with Google's built-in tools, cachedContent, files and thought signatures as the client sent them. The
key is `x-goog-api-key` (`ingress bridge gemini` reads GEMINI_API_KEY, else GOOGLE_API_KEY, when no other is
named)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import msgspec

from ingress import wire
from ingress.bridges.dialect import Dialect, EngineRequest, Target, Unsupported, readable
from ingress.bridges.failures import retry_after
from ingress.bridges.gemini_answers import GeminiStream, decode_answer, decode_count, decode_error
from ingress.bridges.gemini_embeddings import EmbeddingsCall, build_embeddings
from ingress.bridges.gemini_request import as_sent, model_path, request_body, request_headers
from ingress.encoding.reading import decode_request
from ingress.wire.types import ErrorInfo, Response

KEY_ENV = ("GEMINI_API_KEY", "GOOGLE_API_KEY")  # the environment's key when none is named, as Google's SDKs read it
_json = msgspec.json.Encoder()
_fields = msgspec.json.Decoder(dict[str, msgspec.Raw])


@dataclass
class GenerateCall:
    request: EngineRequest
    created: int

    def answer(self, body: bytes) -> Response:
        return decode_answer(body, self.created)

    def stream(self) -> GeminiStream:
        return GeminiStream(self.created)


@dataclass
class CountCall:
    """Google's count of a prompt (`:countTokens`), answered in our contract as a CompletionResponse with no
    choices and the count as its usage."""

    request: EngineRequest
    model: str
    created: int

    def answer(self, body: bytes) -> Response:
        return decode_count(body, self.model, self.created)

    def stream(self) -> GeminiStream:
        raise AssertionError("a count is never streamed")


def _model(view: wire.RequestView, target: Target) -> str:
    model = (view.ModelName() or b"").decode() or target.model
    if not model:
        raise Unsupported("model", "The bridge has no model name to send to Google.")
    return model


class GeminiDialect:
    """`clock` gives an answer's `created` (Google's answers carry none): the time it was asked."""

    name = "gemini"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    @readable
    def build(self, buf: bytes, target: Target) -> GenerateCall:
        view = wire.read_request(buf)
        model = _model(view, target)
        stream = view.Stream()
        path = model_path(target, model, "streamGenerateContent") + "?alt=sse" if stream \
            else model_path(target, model, "generateContent")
        if (sent := view.GeminiJson()) is not None:  # a Gemini request, as its client sent it
            body = as_sent(sent)
        elif view.TextCompletion():
            raise Unsupported("prompt", "Google's Gemini API has no text completions: use chat completions.")
        else:
            body = _json.encode(request_body(decode_request(buf), view.ExtraJson()))
        return GenerateCall(EngineRequest(path=path, headers=request_headers(target), body=body, stream=stream),
                            created=int(self._clock()))

    @readable
    def count(self, buf: bytes, target: Target) -> CountCall:
        """A Gemini request's prompt counted by Google: `{contents}` as sent, or the whole request wrapped as
        countTokens takes it (`generateContentRequest`, naming the model), so that tools and the system
        instruction are counted too. A request from another API is counted as the GenerateContentRequest
        its chat reading amounts to."""
        view = wire.read_request(buf)
        model = _model(view, target)
        sent = view.GeminiJson()
        if sent is None:
            if view.TextCompletion():
                raise Unsupported("prompt", "Google counts no text completions here: use chat completions.")
            sent = _json.encode(request_body(decode_request(buf)))
        fields = _fields.decode(as_sent(sent))
        if fields.keys() <= {"contents"}:
            body = _json.encode(fields)
        else:
            body = _json.encode({"generateContentRequest": {"model": f"models/{model.removeprefix('models/')}",
                                                            **fields}})
        request = EngineRequest(path=model_path(target, model, "countTokens"), headers=request_headers(target),
                                body=body, stream=False)
        return CountCall(request, model, int(self._clock()))

    @readable
    def embed(self, buf: bytes, target: Target) -> EmbeddingsCall:
        """An EmbeddingRequest as Google's batchEmbedContents (gemini_embeddings.py)."""
        return build_embeddings(buf, target)

    def error(self, status: int, headers: Mapping[str, str], body: bytes, *, clients_key: bool = False) -> ErrorInfo:
        info = decode_error(status, headers, body, clients_key=clients_key)
        if (wait := retry_after(headers)) is not None and info.status in (429, 503):
            info.retry_after = wait
        return info


DIALECT: Dialect = GeminiDialect()  # typed: mypy holds the class to the protocol
