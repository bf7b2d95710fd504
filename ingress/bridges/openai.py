"""The OpenAI-compatible dialect (sans-I/O): our contract ↔ `/v1/chat/completions` and `/v1/completions`
of vLLM, SGLang, llama.cpp, TGI, Ollama and OpenAI itself, each engine's known quirks absorbed: the
request is `openai_request.py`'s, the answers `openai_answers.py`'s, the errors `failures.py`'s. A
Responses request a route sends whole (`responses_json`) goes to `/v1/responses` as its client sent it,
with the route's model name; its answers are `responses_answers.py`'s. An EmbeddingRequest goes to
`/v1/embeddings` (`openai_embeddings.py`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

import msgspec

from ingress import wire
from ingress.bridges.dialect import Dialect, EngineRequest, Target, as_sent, readable, under
from ingress.bridges.failures import engine_error
from ingress.bridges.openai_answers import OpenAIStream, read_answer
from ingress.bridges.openai_embeddings import EmbeddingsCall, build_embeddings
from ingress.bridges.openai_request import CHAT_PATH, RESPONSES_PATH, TEXT_PATH, request_body, request_headers
from ingress.bridges.responses_answers import ResponsesStream, decode_answer
from ingress.encoding.reading import decode_request, decode_text_request
from ingress.oai.chat import ChatCompletionRequest
from ingress.oai.completions import TextCompletionRequest
from ingress.wire.types import ErrorInfo, Response


class OpenAICall:
    """One request's exchange with an OpenAI-compatible engine."""

    def __init__(self, request: EngineRequest, *, text: bool, fallback_id: str, model: str,
                 clock: Callable[[], float]) -> None:
        self.request = request
        self._text = text
        self._fallback_id = fallback_id
        self._model = model
        self._clock = clock

    def answer(self, body: bytes) -> Response:
        return read_answer(body, text=self._text, fallback_id=self._fallback_id, model=self._model,
                           clock=self._clock)

    def stream(self) -> OpenAIStream:
        return OpenAIStream(fallback_id=self._fallback_id, text=self._text)


class ResponsesCall:
    """A Responses request sent on whole to `/v1/responses`."""

    def __init__(self, request: EngineRequest, created: int) -> None:
        self.request = request
        self._created = created

    def answer(self, body: bytes) -> Response:
        return decode_answer(body, self._created)

    def stream(self) -> ResponsesStream:
        return ResponsesStream(self._created)


class OpenAIDialect:
    """vLLM, SGLang, llama.cpp, TGI, Ollama, OpenAI: one dialect. `clock` fills a missing `created`."""

    name = "openai"

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    @readable
    def build(self, buf: bytes, target: Target) -> OpenAICall | ResponsesCall:
        view = wire.read_request(buf)
        if (sent := view.ResponsesJson()) is not None:  # a Responses request, as its client sent it
            model = (view.ModelName() or b"").decode() or target.model or ""
            engine = EngineRequest(path=under(target, RESPONSES_PATH), headers=request_headers(target, view.Stream()),
                                   body=as_sent(sent, model), stream=view.Stream())
            return ResponsesCall(engine, created=int(self._clock()))
        text = bool(view.TextCompletion())
        request: ChatCompletionRequest | TextCompletionRequest
        request = decode_text_request(buf) if text else decode_request(buf)
        model = request.model or target.model or ""
        body = request_body(request, text=text, model=model, extra_json=view.ExtraJson(),
                            host=urlsplit(target.url).hostname)
        stream = bool(request.stream)
        request_id = (view.RequestId() or b"").decode("utf-8", "replace")
        fallback_id = ("cmpl-" if text else "chatcmpl-") + (request_id or "bridge")
        engine = EngineRequest(path=under(target, TEXT_PATH if text else CHAT_PATH),
                               headers=request_headers(target, stream), body=msgspec.json.encode(body), stream=stream)
        return OpenAICall(engine, text=text, fallback_id=fallback_id, model=model, clock=self._clock)

    def embed(self, buf: bytes, target: Target) -> EmbeddingsCall:
        return build_embeddings(buf, target)

    def error(self, status: int, headers: Mapping[str, str], body: bytes, *, clients_key: bool = False) -> ErrorInfo:
        return engine_error(status, headers, body, clients_key=clients_key, clock=self._clock)


DIALECT: Dialect = OpenAIDialect()  # typed: mypy holds the class to the protocol
