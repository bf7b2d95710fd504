"""Anthropic's Messages API as a bridge dialect (sans-I/O): our request → `POST /v1/messages`
(`anthropic_request.py`), its answers, events and errors → our types (`anthropic_answers.py`). A request
that came to the edge in Anthropic's own API carries it as sent (`anthropic_json`): that is what goes,
with the route's model name and the client's beta flags and version."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import msgspec

from ingress import wire
from ingress.bridges.anthropic_answers import MessagesStream, decode_answer, decode_error
from ingress.bridges.anthropic_request import COUNT_PATH, PATH, request_body, request_headers
from ingress.bridges.dialect import Dialect, EngineFailed, EngineRequest, Target, Unsupported, as_sent, readable, under
from ingress.bridges.failures import retry_after
from ingress.encoding.reading import decode_request
from ingress.wire.types import ErrorInfo, Response, Usage

_json = msgspec.json.Encoder()


class _Count(msgspec.Struct):
    input_tokens: int


_count = msgspec.json.Decoder(_Count)


@dataclass
class CountCall:
    """Anthropic's count of a prompt (`POST /v1/messages/count_tokens`), answered in our contract as a
    CompletionResponse with no choices and the count as its usage."""

    request: EngineRequest
    model: str
    created: int

    def answer(self, body: bytes) -> Response:
        try:
            counted = _count.decode(body).input_tokens
        except msgspec.DecodeError as exc:
            raise EngineFailed(ErrorInfo(status=502, type="server_error", code="upstream_protocol_error",
                                         message=f"Anthropic's count could not be read: {exc}.")) from None
        return Response(id="", model=self.model, created=self.created, choices=[],
                        usage=Usage(prompt_tokens=counted, total_tokens=counted))

    def stream(self) -> MessagesStream:
        raise AssertionError("a count is never streamed")


@dataclass
class MessagesCall:
    request: EngineRequest
    created: int

    def answer(self, body: bytes) -> Response:
        return decode_answer(body, self.created)

    def stream(self) -> MessagesStream:
        return MessagesStream(self.created)


class AnthropicDialect:
    """`clock` gives an answer's `created` (Anthropic's answers carry none): the time it was asked."""

    name = "anthropic"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    @readable
    def build(self, buf: bytes, target: Target) -> MessagesCall:
        view = wire.read_request(buf)
        if view.AnthropicJson() is not None:  # a Messages request, as its client sent it
            sent, _ = _as_sent(view, target, PATH)
            return MessagesCall(sent, created=int(self._clock()))
        if view.TextCompletion():
            raise Unsupported("prompt", "Anthropic's Messages API has no text completions: use chat completions.")
        request = decode_request(buf)
        body = request_body(request, target, view.ExtraJson())
        return MessagesCall(EngineRequest(path=under(target, PATH), headers=request_headers(target),
                                          body=_json.encode(body), stream=bool(request.stream)),
                            created=int(self._clock()))

    @readable
    def count(self, buf: bytes, target: Target) -> CountCall:
        """A Messages request's prompt counted by Anthropic: the request as its client sent it (to
        count_tokens, which has no max_tokens), with the route's model name."""
        view = wire.read_request(buf)
        if view.AnthropicJson() is None:
            raise Unsupported("messages", "Anthropic counts only a request sent in its own Messages API.")
        request, model = _as_sent(view, target, COUNT_PATH)
        return CountCall(request, model, int(self._clock()))

    def error(self, status: int, headers: Mapping[str, str], body: bytes, *, clients_key: bool = False) -> ErrorInfo:
        info = decode_error(status, body, clients_key=clients_key)
        if (wait := retry_after(headers)) is not None:
            info.retry_after = wait
        return info


def _as_sent(view: wire.RequestView, target: Target, path: str) -> tuple[EngineRequest, str]:
    """The request to `path` for a Messages request as its client sent it (`anthropic_json`): that
    request with the route's model name, the client's beta flags and version; and the model name."""
    model = (view.ModelName() or b"").decode() or target.model
    if not model:
        raise Unsupported("model", "The bridge has no model name to send to Anthropic.")
    betas = [view.AnthropicBeta(j).decode() for j in range(view.AnthropicBetaLength())]
    version = view.AnthropicVersion()
    return EngineRequest(path=under(target, path), headers=request_headers(target, version and version.decode(), betas),
                         body=as_sent(view.AnthropicJson(), model), stream=view.Stream()), model


DIALECT: Dialect = AnthropicDialect()  # typed: mypy holds the class to the protocol
