"""What a bridge's dialect is: how one engine's or provider's HTTP API is spoken, without I/O.

A bridge is an internal service: it takes our contract (`POST /v1/complete` with a CompletionRequest
buffer) and speaks a real engine's or provider's JSON API on the other side. The service around a
dialect (`ingress.bridges.service`) does the I/O: it verifies the buffer, asks the dialect for the
engine request, sends it with the edge's own HTTP/1.1 client, and feeds the engine's answer back to the
dialect, which makes our types of it (`wire.Response`, numbered `wire.Chunk`s, `wire.ErrorInfo`); the
service writes them as buffers or frames.

A dialect is pure functions of bytes and our types, so every quirk of an engine is tested without a
socket, for any split of its stream:

- `build(buf, target)`: the `EngineCall` for a verified CompletionRequest buffer: the engine request,
  and what reads its answer (it knows what it asked for). It raises `Unsupported` (a 400
  `unsupported_parameter` naming the parameter) for what the engine cannot honour, before anything is
  sent: never a silent drop.
- `EngineCall.answer(body)`: a whole (non-streamed) engine answer, as one wire.Response.
- `EngineCall.stream()`: a fresh `StreamDecoder` for its streamed answer.
- `embed(buf, target)`, for a dialect whose engines answer embeddings (the service refuses them for one
  without): the `EmbeddingCall` for a verified EmbeddingRequest buffer, whose `answer` reads the engine's
  whole answer as one wire `Embeddings`. An embeddings request is never streamed.
- `error(status, headers, body, clients_key=)`: an engine's refusal (any non-2xx answer), as the
  ErrorInfo our contract carries: the same status and OpenAI's shape for the client's mistakes; 502
  `upstream_auth_failed` for our own credentials refused (401/403: the client's key is not the
  problem), but the 401/403 itself when the key was the client's own (`clients_key`: its route
  forwards it); the provider's Retry-After kept. Its text is scrubbed of secrets and addresses.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ParamSpec, Protocol, TypeVar
from urllib.parse import urlsplit

import msgspec

from ingress.bridges.eventstream import Event, EventStreamError, EventStreamParser
from ingress.bridges.failures import protocol_error
from ingress.oai.codec import NESTED_TOO_DEEPLY
from ingress.wire import types as wire_types
from ingress.wire.embeddings import Embeddings


@dataclass(frozen=True)
class Target:
    """Where and how the bridge calls: the engine's base URL, the model name to send when the route
    names none, credentials (already read from the environment or a file: never from a request), and a
    default `max_tokens` for providers that require one."""

    url: str
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    max_tokens: int = 4096
    headers: Mapping[str, str] = field(default_factory=dict)


def under(target: Target, path: str) -> str:
    """A dialect's `path` (/v1/...) under the target's base URL, whose own path may already end in /v1
    (`https://host/v1`, `https://gateway/openai/v1`)."""
    return urlsplit(target.url).path.rstrip("/").removesuffix("/v1") + path


@dataclass(frozen=True)
class EngineRequest:
    """One HTTP request to the engine; `headers` include the credentials the target holds."""

    path: str
    headers: Mapping[str, str] = field(repr=False)  # credentials: never in a log line or a traceback
    body: bytes
    stream: bool
    method: str = "POST"


class Unsupported(Exception):
    """The request asks for what the engine cannot do: a 400 before anything is sent."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message

    def info(self) -> wire_types.ErrorInfo:
        return wire_types.ErrorInfo(status=400, type="invalid_request_error", code="unsupported_parameter",
                                    message=self.message, param=self.param)


class NestedTooDeeply(Unsupported):
    """JSON in the request too deep to decode or encode: the 400 the edge gives such a body, naming no
    parameter (a subclass: the service refuses it as it refuses any Unsupported)."""

    def __init__(self) -> None:
        super().__init__("", NESTED_TOO_DEEPLY)

    def info(self) -> wire_types.ErrorInfo:
        return wire_types.ErrorInfo(status=400, type="invalid_request_error", code="invalid_json", message=self.message)


P = ParamSpec("P")
R = TypeVar("R")


def readable(build: Callable[P, R]) -> Callable[P, R]:
    """A dialect's `build` that refuses JSON in the request nested too deeply to decode or encode (msgspec's
    RecursionError) as the edge refuses such a body, a 400 `invalid_json`, never a crash: a buffer from
    a binary client was not read by the edge, and any JSON field may hold it (a tool's schema, a tool
    call's arguments, the engine extras)."""

    @functools.wraps(build)
    def build_or_refuse(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return build(*args, **kwargs)
        except RecursionError:
            raise NestedTooDeeply from None

    return build_or_refuse


class EngineFailed(Exception):
    """The engine's answer is an error, or is broken (unreadable, cut short): `info` is what our
    contract carries for it. Raised by a StreamDecoder, `chunks` are those it decoded from the same
    data before the error: they are sent first, so that nothing the engine answered is lost."""

    def __init__(self, info: wire_types.ErrorInfo, chunks: list[wire_types.Chunk] | None = None) -> None:
        super().__init__(info.message)
        self.info = info
        self.chunks = chunks or []


UINT32_MAX = 2**32 - 1


def count(value: int | None) -> int:
    """An engine's token count as our contract's uint32 holds it: none is 0, and no count is out of range."""
    return 0 if value is None else max(0, min(value, UINT32_MAX))


def sized_as_asked(vectors: list[list[float]], dimensions: int | None, who: str) -> None:
    """Embeddings of the length the client asked (`dimensions`), else a 400 naming it: an engine that ignores
    it (llama-server answers its model's whole vectors) never gives the client vectors of another length."""
    if dimensions is not None and (wrong := next((v for v in vectors if len(v) != dimensions), None)) is not None:
        raise EngineFailed(Unsupported("dimensions", f"{who} does not honour dimensions: it answered vectors of "
                                                     f"{len(wrong)} dimensions, not {dimensions}.").info())


@contextmanager
def keeping(out: list[wire_types.Chunk]) -> Iterator[None]:
    """Around a decoder's work on one feed: an EngineFailed raised inside carries the chunks `out`
    already holds, so that they reach the client before the error."""
    try:
        yield
    except EngineFailed as exc:
        raise EngineFailed(exc.info, [*out, *exc.chunks]) from None


class StreamDecoder(Protocol):
    """One streamed answer: the engine's body bytes in, in any split; our chunks out, numbered from 0.
    The last chunk has `done` set (with usage, when the engine counted it). `feed` raises EngineFailed
    for an error event in the stream; `finish`, at the end of the body, raises it for a stream that
    ended before it was complete (an error, never a success)."""

    def feed(self, data: bytes) -> list[wire_types.Chunk]: ...

    def finish(self) -> list[wire_types.Chunk]: ...


class EventStreamDecoder:
    """A StreamDecoder of server-sent events: each event of the body, read in any split, given to `_event`
    until it sets `_done`; what was read before a failure reaches the client before it. `source` names
    who writes the stream, in the errors."""

    source = "The engine"

    def __init__(self) -> None:
        self._events = EventStreamParser()
        self._done = False

    def _event(self, event: Event, out: list[wire_types.Chunk]) -> None:
        raise NotImplementedError

    def feed(self, data: bytes) -> list[wire_types.Chunk]:
        if self._done:
            return []
        out: list[wire_types.Chunk] = []
        try:
            events = self._events.feed(data)
        except EventStreamError as exc:
            raise EngineFailed(protocol_error(f"{self.source}'s stream is unreadable: {exc}.")) from None
        with keeping(out):
            for event in events:
                if self._done:
                    break
                self._event(event, out)
        return out

    def finish(self) -> list[wire_types.Chunk]:
        """At the end of the body: its last event, if its blank line never came; a stream not done is cut."""
        out: list[wire_types.Chunk] = []
        if not self._done:
            with keeping(out):
                for event in self._events.finish():
                    if not self._done:
                        self._event(event, out)
        if not self._done:
            raise EngineFailed(wire_types.ErrorInfo(status=502, type="server_error", code="upstream_unavailable",
                                                    message=f"{self.source}'s stream ended before it was complete."),
                               out)
        return out


class EngineCall(Protocol):
    """One request's exchange with the engine: what to send, and what reads the answer."""

    request: EngineRequest

    def answer(self, body: bytes) -> wire_types.Response: ...

    def stream(self) -> StreamDecoder: ...


class EmbeddingCall(Protocol):
    """One embeddings request's exchange with the engine: what to send (never a stream), what reads the answer."""

    request: EngineRequest

    def answer(self, body: bytes) -> Embeddings: ...


class Dialect(Protocol):
    name: str

    def build(self, buf: bytes, target: Target) -> EngineCall: ...

    def error(self, status: int, headers: Mapping[str, str], body: bytes, *,
              clients_key: bool = False) -> wire_types.ErrorInfo: ...


_fields = msgspec.json.Decoder(dict[str, msgspec.Raw])


def as_sent(sent: bytes, model: str) -> bytes:
    """A request as its client sent it (a Messages or a Responses request: a JSON object, checked at the
    edge), with `model` the route's name for the model: every other field, and its order, unchanged."""
    fields = _fields.decode(sent)
    fields["model"] = msgspec.Raw(msgspec.json.encode(model))
    return msgspec.json.encode(fields)
