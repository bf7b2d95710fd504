"""The whole request path on one screen, as named stages.

    JSON     prepare   decode → route → (admit) → passport → encode        CPU only: bad input raises here
             prepare_text  the same, for a legacy text completion          then complete/stream: text_completion
             prepare_responses  the same, for the Responses API: read as the chat request it amounts to
             complete  send → translate                                    one chat.completion
             respond / stream_response  as complete / stream, answered as a Responses object / events
             embed     as prepare, then send → translate                   one embeddings list
             stream    send → frames → translate, as StreamEvents         heartbeats while the service is silent
    binary   relay     verify → route on fields read in place → send the same bytes → the answer's bytes
    tenancy  (authenticate, in the edge's middleware) → prepare: the key may use the model →
             admit     the request's limits in one round trip to the store: a refusal raises, having
                       consumed nothing; the reservation is held on the exchange
    always   settle    after every end (an answer, an error, a client gone): the endpoint's slot is let go,
                       and the reservation is charged the real usage (refund or debt), off the response path

Only the edge renders bytes for the client: this module yields typed events, and raises IngressErrors.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

import msgspec

from ingress import metrics, tasks
from ingress.errors import (
    IngressError,
    InvalidRequest,
    NotFound,
    UpstreamAnswered,
    UpstreamConnectFailed,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from ingress.exchange import Exchange
from ingress.oai import answers as out
from ingress.oai import response_objects as ro
from ingress.oai.codec import decode_chat_request_forwarding
from ingress.oai.completions import TextCompletion, TextCompletionRequest, decode_text_request_forwarding
from ingress.oai.embeddings import EmbeddingList, EmbeddingRequest, decode_embedding_request
from ingress.oai.models import ChatCompletionRequest
from ingress.oai.response_objects import ResponseObject
from ingress.oai.responses import Call, as_chat, decode_responses_request_forwarding
from ingress.passport import (
    CHARS_PER_TOKEN,
    Passport,
    RequestMeta,
    compute_embedding_passport,
    compute_passport,
    compute_prompts_passport,
)
from ingress.routing.budget import RetryBudget
from ingress.routing.table import Match, RouteTable
from ingress.settings import Settings, Timeouts
from ingress.tenancy import Tenancy
from ingress.tenancy.plan import Actual, Plan
from ingress.translate.completion import decode_answer, translate_response
from ingress.translate.embeddings import translate_embeddings
from ingress.translate.responses import ResponseEvents, translate_response_object
from ingress.translate.stream import StreamTranslator
from ingress.translate.text import TextStreamTranslator, translate_text_response
from ingress.upstream import http1
from ingress.upstream.group import EndpointGroup, Lease
from ingress.wire import verify
from ingress.wire.decode import PROVIDER_NAMES, WireError, read_request
from ingress.wire.embeddings import Embeddings, decode_embeddings_answer, encode_embedding_request
from ingress.wire.encode import encode_request, encode_text_request
from ingress.wire.framing import FrameDecoder, FrameError
from ingress.wire.types import Response

T = TypeVar("T")
EncodeRequest = Callable[[ChatCompletionRequest, str, Passport, str, str | None, str | None], bytes | bytearray]


@dataclass
class Gateway:
    """What every request shares: settings, routes, upstream groups, the retry budget, the encoder."""

    settings: Settings
    routes: RouteTable
    groups: dict[str, EndpointGroup]
    budget: RetryBudget
    tenancy: Tenancy | None = None  # keys and limits; None: the edge is open
    encode_request: EncodeRequest = encode_request  # benchmarks swap in the stock flatbuffers.Builder

    def route(self, model: str, ex: Exchange) -> Match:
        match = self.routes.match(model)
        if match is None or (ex.principal is not None and not ex.principal.allows(model)):
            # One answer for both, as OpenAI's: a key learns nothing of the models it may not use.
            raise NotFound(f"The model '{model}' does not exist or you do not have access to it.", param="model",
                           code="model_not_found")
        r = match.route
        ex.metric_model = model if r.model is not None else (r.prefix or r.glob or "other")
        ex.group = r.group
        return match

    def forwards_extras(self, model: str) -> bool:
        """The model's route forwards the fields that are not OpenAI's (asked only when a body has some)."""
        match = self.routes.match(model)
        return match is not None and match.route.extra_fields == "forward"

    def timeouts(self, match: Match) -> Timeouts:
        return match.route.timeouts or self.settings.timeouts


def _hop_headers(request_id: str, passport: Passport | None) -> dict[str, str]:
    headers = {"x-request-id": request_id}
    if passport is not None and passport.traceparent:
        headers["traceparent"] = passport.traceparent
        if passport.tracestate:
            headers["tracestate"] = passport.tracestate
    return headers


# --- prepare: the CPU-only stages ---------------------------------------------------------------


R = TypeVar("R")


@dataclass
class Prepared(Generic[R]):
    """A request decoded, routed, admitted and encoded: everything the internal hop needs."""

    request: R
    match: Match
    encoded: bytes | bytearray
    headers: dict[str, str]
    timeouts: Timeouts
    prompt_tokens: int  # the passport's count, and what admission reserves with the output's bound
    max_output_tokens: int | None  # the most the request may generate (None: unbounded by the request)


Completion = ChatCompletionRequest | TextCompletionRequest  # both answered by `complete` and `stream`


def _route(gw: Gateway, ex: Exchange, model: str, stream: bool, meta: RequestMeta) -> tuple[Match, RequestMeta]:
    """The decoded request's route, for every endpoint (a model the key may not use is not found), and
    the request's meta as the passport carries it: with a key, the key's public id and its tenant."""
    ex.decoded = time.perf_counter()
    ex.model, ex.stream = model, stream
    match = gw.route(model, ex)
    if ex.principal is not None:
        meta = msgspec.structs.replace(meta, tenant_id=ex.principal.tenant_name, key_id=ex.principal.key.id)
    return match, meta


def _prepared(gw: Gateway, ex: Exchange, request: R, match: Match, passport: Passport,
              encoded: bytes | bytearray, meta: RequestMeta, max_output_tokens: int | None) -> Prepared[R]:
    ex.encoded = time.perf_counter()
    headers = _hop_headers(ex.request_id, passport)
    if match.route.forward_authorization and meta.api_key is not None:
        headers["authorization"] = f"Bearer {meta.api_key}"  # the route passes the client's own key on
    return Prepared(request, match, encoded, headers, gw.timeouts(match), passport.prompt_tokens_estimate,
                    max_output_tokens)


def _chat_output(request: ChatCompletionRequest) -> int | None:
    limit = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    return None if limit is None else limit * (request.n or 1)


def _text_output(request: TextCompletionRequest) -> int | None:
    if request.max_tokens is None:
        return None
    return request.max_tokens * max(request.n or 1, request.best_of or 1) * max(len(request.prompts), 1)


def prepare(gw: Gateway, body: bytes, meta: RequestMeta, ex: Exchange) -> Prepared[Completion]:
    """Decode, route, (admit), passport, encode. Bad input raises here, before anything is sent."""
    request, extra_json = decode_chat_request_forwarding(body, gw.forwards_extras)
    match, meta = _route(gw, ex, request.model, bool(request.stream), meta)
    passport = compute_passport(request, meta)
    encoded = gw.encode_request(request, ex.request_id, passport, match.route.provider, match.upstream_model,
                                extra_json)
    return _prepared(gw, ex, request, match, passport, encoded, meta, _chat_output(request))


def prepare_text(gw: Gateway, body: bytes, meta: RequestMeta, ex: Exchange) -> Prepared[Completion]:
    """As prepare, for a legacy text completion: it travels as a CompletionRequest with its prompts, and
    `complete` / `stream` answer it as text_completion objects."""
    request, extra_json = decode_text_request_forwarding(body, gw.forwards_extras)
    match, meta = _route(gw, ex, request.model, bool(request.stream), meta)
    passport = compute_prompts_passport(request.prompts, meta)
    encoded = encode_text_request(request, ex.request_id, passport, match.route.provider, match.upstream_model,
                                  extra_json)
    return _prepared(gw, ex, request, match, passport, encoded, meta, _text_output(request))


# --- admit: the request's limits ----------------------------------------------------------------


async def admit(gw: Gateway, prepared: Prepared[R], ex: Exchange) -> None:
    """The key's, its tenant's and the model's limits, for this request's estimate (its prompt's tokens
    and the most it may generate): one round trip to the store. Refused, it raises, having consumed
    nothing; admitted, the reservation is held on the exchange until it settles. Either way the answer
    carries the x-ratelimit headers."""
    await _admit(gw, ex, ex.model or "", prepared.prompt_tokens, prepared.max_output_tokens)


async def _admit(gw: Gateway, ex: Exchange, model: str, prompt_tokens: int, max_output_tokens: int | None) -> None:
    principal = ex.principal
    if principal is None or gw.tenancy is None:
        return
    tenancy = gw.tenancy
    plan = tenancy.policy.plan(principal, model, prompt_tokens, max_output_tokens)
    verdict = await tenancy.limiter.admit(plan, principal.tenant_name)
    ex.admitted = time.perf_counter()
    ex.limit_headers, ex.limit_outcome = verdict.headers, verdict.outcome
    if verdict.error is not None:
        raise verdict.error
    ex.admission = verdict.admission


# --- send: endpoint choice, retries, fallback ---------------------------------------------------


async def send(gw: Gateway, match: Match, ex: Exchange, attempt: Callable[[Lease], Awaitable[T]]) -> T:
    """Run `attempt` on an endpoint of the route's group, and on others when it is safe to.

    Retried, within the retry budget: a connection that could not be made (nothing was sent).
    Then the fallback group, if any: when the group is unavailable or fails before the first byte.
    Never retried: timeouts, answers (even errors) and anything once the answer had begun.
    The successful attempt's lease is left on the exchange, held until it settles.
    """
    loop = asyncio.get_running_loop()
    gw.budget.deposit(loop.time())
    groups = [match.route.group] + ([match.route.fallback] if match.route.fallback else [])
    last: IngressError | None = None
    for name in groups:
        group = gw.groups[name]
        tried: set[str] = set()
        while group.has_candidates(frozenset(tried)):
            if ex.attempts and not gw.budget.withdraw(loop.time()):
                raise last or UpstreamConnectFailed("The model service is unavailable.")
            if ex.attempts:
                metrics.RETRIES.labels(name).inc()
            ex.attempts += 1
            ex.group = name
            lease = await group.acquire(frozenset(tried))
            tried.add(lease.state.url)
            ex.upstream = lease.state.url
            if ex.upstream_sent is None:
                ex.upstream_sent = time.perf_counter()  # retries count as upstream time, not overhead
            try:
                try:
                    result = await attempt(lease)
                finally:
                    ex.upstream_head = time.perf_counter()
            except UpstreamAnswered as exc:
                lease.release(exc.status < 500)
                if exc.status < 500:
                    raise
                last = exc
                break
            except UpstreamConnectFailed as exc:
                lease.release(False)
                last = exc
                if len(tried) > gw.settings.retry.attempts:
                    break
                continue
            except UpstreamError as exc:
                lease.release(False)
                last = exc
                if isinstance(exc, UpstreamTimeout) or exc.after_head:
                    raise  # the generation may have run: sending it elsewhere could run it twice
                break  # the endpoint took the request: no retry in this group; the fallback may serve it
            except BaseException:
                lease.release(None)
                raise
            ex.lease = lease
            return result
    assert last is not None
    raise last


# --- complete: one answer -----------------------------------------------------------------------


async def complete(gw: Gateway, prepared: Prepared[Completion], ex: Exchange) -> out.ChatCompletion | TextCompletion:
    """A non-streamed chat (or text) completion. Any failure raises, before the client was sent anything."""
    response = await _completed(gw, prepared, ex)
    if isinstance(prepared.request, TextCompletionRequest):
        return translate_text_response(response)
    return translate_response(response, legacy_functions=prepared.request.legacy_functions)


async def _completed(gw: Gateway, prepared: Prepared[Completion], ex: Exchange) -> Response:
    """Send, and decode the one answer (an Error answer raises)."""

    async def attempt(lease: Lease) -> Response:
        answer = await lease.client.complete(prepared.encoded, prepared.headers, prepared.timeouts)
        try:
            return decode_answer(answer, verify_answer=gw.settings.verify_answers)  # an Error answer raises
        except UpstreamProtocolError as exc:  # a whole answer arrived: the generation ran
            raise UpstreamProtocolError(exc.message, after_head=True) from exc.__cause__

    response = await send(gw, prepared.match, ex, attempt)
    ex.upstream_ok = True
    ex.mark_first_byte()
    ex.usage = response.usage
    return response


# --- respond: the Responses API, carried as a chat request --------------------------------------


def prepare_responses(gw: Gateway, body: bytes, meta: RequestMeta, ex: Exchange) -> tuple[Call, Prepared[Completion]]:
    """As prepare, for a Responses request: decoded, then read as the chat request it amounts to, which
    travels; the decoded call is kept to answer it in its own shape."""
    call, extra_json = decode_responses_request_forwarding(body, gw.forwards_extras)
    request = as_chat(call)
    match, meta = _route(gw, ex, request.model, bool(request.stream), meta)
    passport = compute_passport(request, meta)
    encoded = gw.encode_request(request, ex.request_id, passport, match.route.provider, match.upstream_model,
                                extra_json)
    return call, _prepared(gw, ex, request, match, passport, encoded, meta, _chat_output(request))


async def respond(gw: Gateway, call: Call, prepared: Prepared[Completion], ex: Exchange) -> ResponseObject:
    """A non-streamed Responses answer, sent as `complete` sends."""
    return translate_response_object(call, await _completed(gw, prepared, ex), request_id=ex.request_id)


async def stream_response(gw: Gateway, prepared: Prepared[Completion], ex: Exchange,
                          events: ResponseEvents) -> AsyncGenerator[ResponsesStreamEvent, None]:
    """A streamed Responses answer: `stream`'s chat chunks made into Responses events by `events`.
    Failed passes through: the edge asks `events` for the failure's own events (it meets failures of
    its own, such as the drain's deadline)."""
    async with aclosing(stream(gw, prepared, ex)) as chunks:
        async for event in chunks:
            if type(event) is out.ChatCompletionChunk:
                for e in events.feed(event):
                    yield e
            elif event is OPENED:
                yield OPENED
                for e in events.opened():
                    yield e
            elif event is DONE:
                for e in events.completed(ex.usage):
                    yield e
                yield DONE
            else:
                assert isinstance(event, Signal | Failed), event
                yield event


# --- embed: one embeddings answer ---------------------------------------------------------------


def prepare_embeddings(gw: Gateway, body: bytes, meta: RequestMeta, ex: Exchange) -> Prepared[EmbeddingRequest]:
    """Decode, route (the same route table: a model name), (admit), passport, encode; bad input raises here."""
    request = decode_embedding_request(body)
    match, meta = _route(gw, ex, request.model, False, meta)
    passport = compute_embedding_passport(request, meta)
    encoded = encode_embedding_request(request, ex.request_id, passport, match.route.provider, match.upstream_model)
    return _prepared(gw, ex, request, match, passport, encoded, meta, 0)


async def embed(gw: Gateway, prepared: Prepared[EmbeddingRequest], ex: Exchange) -> EmbeddingList:
    """One embeddings answer, sent as `complete` sends (retries, fallback); any failure raises."""
    inputs = len(prepared.request.inputs)

    async def attempt(lease: Lease) -> Embeddings:
        answer = await lease.client.embed(prepared.encoded, prepared.headers, prepared.timeouts)
        try:
            embeddings = decode_embeddings_answer(answer, verify_answer=gw.settings.verify_answers)
        except UpstreamProtocolError as exc:  # a whole answer arrived: the service ran
            raise UpstreamProtocolError(exc.message, after_head=True) from exc.__cause__
        if len(embeddings.vectors) != inputs:
            raise UpstreamProtocolError(f"The model service answered {len(embeddings.vectors)} embeddings "
                                        f"for {inputs} inputs.", after_head=True)
        return embeddings

    embeddings = await send(gw, prepared.match, ex, attempt)
    ex.upstream_ok = True
    ex.mark_first_byte()
    ex.usage = embeddings.usage
    return translate_embeddings(embeddings, as_base64=prepared.request.encoding_format == "base64")


# --- stream: events -----------------------------------------------------------------------------


class Signal:
    """An event with no data; compared by identity."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


OPENED: Final = Signal("OPENED")  # the service accepted the stream: the client's response may begin
HEARTBEAT: Final = Signal("HEARTBEAT")  # the service is still silent: keep the client's connection alive
DONE: Final = Signal("DONE")  # the stream is complete


@dataclass(frozen=True, slots=True)
class Failed:
    """The stream failed after its first event: the error goes to the client in-band, and it ends."""

    error: IngressError


StreamEvent = out.ChatCompletionChunk | TextCompletion | Signal | Failed
ResponsesStreamEvent = ro.StreamEvent | Signal | Failed


async def stream(gw: Gateway, prepared: Prepared[Completion], ex: Exchange) -> AsyncGenerator[StreamEvent, None]:
    """A streamed chat completion as events: OPENED and HEARTBEATs while the service is silent (one
    loop covers the wait for its response head and for its first frame), then one chat.completion.chunk
    at a time, then DONE or Failed. A failure before the first event raises instead, so that the edge
    can answer it with its status. The upstream stream is closed when the generator is."""
    head: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    yielded = False
    async with AsyncExitStack() as upstream:
        async with tasks.scoped(_open(gw, prepared, ex, upstream, head), "stream-open") as opening:
            waiting: set[asyncio.Future[object]] = {opening, head}  # type: ignore[arg-type]  # only awaited
            while opening in waiting:
                done, _ = await asyncio.wait(waiting, timeout=prepared.timeouts.heartbeat,
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    yielded = True
                    yield HEARTBEAT
                if head in done:
                    waiting.discard(head)
                    yielded = True
                    yield OPENED
                if opening in done:
                    waiting.discard(opening)
            try:
                reads, data = opening.result()
            except IngressError as exc:
                if not yielded:
                    raise
                yield _failed(ex, exc)
                return
        async with aclosing(_translate(gw, prepared, ex, reads, data)) as events:  # its usage, however it ends
            async for event in events:
                yield event


async def _open(gw: Gateway, prepared: Prepared[Completion], ex: Exchange, upstream: AsyncExitStack,
                head: asyncio.Future[None]) -> tuple[AsyncIterator[bytes], bytes]:
    """Send; once the service's head has come, wait for the first read of its body (b"": it ended)."""

    async def attempt(lease: Lease) -> tuple[AsyncExitStack, AsyncIterator[bytes]]:
        stack = AsyncExitStack()
        try:
            reads = await stack.enter_async_context(
                lease.client.stream(prepared.encoded, prepared.headers, prepared.timeouts))
        except BaseException:
            await stack.aclose()
            raise
        return stack, reads

    stack, reads = await send(gw, prepared.match, ex, attempt)
    upstream.push_async_callback(stack.aclose)  # closed with the stream, whoever ends it
    head.set_result(None)
    return reads, await anext(reads, b"")


async def _translate(gw: Gateway, prepared: Prepared[Completion], ex: Exchange, reads: AsyncIterator[bytes],
                     data: bytes) -> AsyncGenerator[StreamEvent, None]:
    """Frames → chunks, from the first read on; DONE at the final frame, or Failed."""
    request = prepared.request
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    translator: StreamTranslator | TextStreamTranslator
    if isinstance(request, TextCompletionRequest):
        translator = TextStreamTranslator(id=f"cmpl-{ex.request_id}", model=request.model, created=int(time.time()),
                                          include_usage=include_usage, verify=gw.settings.verify_answers)
    else:
        translator = StreamTranslator(id=f"chatcmpl-{ex.request_id}", model=request.model, created=int(time.time()),
                                      include_usage=include_usage, verify=gw.settings.verify_answers,
                                      legacy_functions=request.legacy_functions)
    decoder = FrameDecoder(gw.settings.max_frame_bytes)
    gaps = metrics.INTER_CHUNK.labels(ex.metric_model)
    last: float | None = None
    try:
        while data:
            ex.mark_first_byte()
            for frame in decoder.feed(data):
                for chunk in translator.feed_frame(frame):
                    now = time.perf_counter()
                    if last is not None:
                        gaps.observe(now - last)
                    last = now
                    yield chunk
                if translator.done:
                    break  # complete: whatever follows the final frame is not read, however it arrived
            if translator.done:
                break
            data = await anext(reads, b"")
        else:
            decoder.finish()
            translator.finish()
    except FrameError as exc:
        yield _failed(ex, UpstreamProtocolError(f"The model service sent a malformed stream: {exc}."))
        return
    except IngressError as exc:
        yield _failed(ex, exc)
        return
    finally:
        ex.usage = translator.usage
        ex.output_chars = translator.output_chars
        ex.upstream_done = time.perf_counter()
    ex.upstream_ok = True
    yield DONE


def _failed(ex: Exchange, exc: IngressError) -> Failed:
    ex.error = exc
    # The service's own Error frame is an answer; a broken, unreadable or silent stream is its failure.
    ex.upstream_ok = isinstance(exc, UpstreamAnswered) or not isinstance(exc, UpstreamError)
    return Failed(exc)


# --- relay: FlatBuffers in, the service's bytes out ---------------------------------------------


RELAYED_HEADERS = ("Content-Type", "Retry-After")


@dataclass
class RelayedAnswer:
    """An upstream answer to relay unmodified: status, headers, and the body as it arrives. Reading
    `chunks` raises an IngressError if the answer breaks, stalls or overruns its deadline; `close()`
    ends the upstream response."""

    status: int
    headers: dict[str, str]
    chunks: AsyncGenerator[bytes, None]
    close: Callable[[], None]


async def relay(gw: Gateway, body: bytes, ex: Exchange) -> RelayedAnswer:
    """Verify a CompletionRequest, route on fields read in place, forward the exact bytes."""
    ex.binary = True
    try:
        verify.verify_request(body, max_size=gw.settings.max_body_bytes)
        view = read_request(body)
        model = (view.ModelName() or b"").decode()
        provider = view.Provider()
        ex.model, ex.stream = model, view.Stream()
        passport = view.Passport()
        prompt_tokens = passport.PromptTokensEstimate() if passport is not None else 0
        max_output_tokens = view.MaxTokens() if view.MaxTokensSet() else None
    except WireError as exc:
        raise InvalidRequest(f"The FlatBuffers request is invalid: {exc}.", code="invalid_flatbuffer") from None
    if not model:
        raise InvalidRequest("The FlatBuffers request names no model.", param="model_name")
    if not 0 <= provider < len(PROVIDER_NAMES):
        raise InvalidRequest(f"Unknown provider {provider}.", param="provider")
    match = gw.route(model, ex)
    await _admit(gw, ex, model, prompt_tokens, max_output_tokens)
    headers, timeouts = _hop_headers(ex.request_id, None), gw.timeouts(match)
    if ex.principal is not None:  # the buffer's passport is the client's own: who the edge admitted goes beside it
        headers["x-ingress-tenant"], headers["x-ingress-key-id"] = ex.principal.tenant_name, ex.principal.key.id

    async def forward(lease: Lease) -> tuple[http1.Response, AsyncIterator[bytes]]:
        return await lease.client.forward(body, headers, timeouts)

    response, reads = await send(gw, match, ex, forward)
    ex.mark_first_byte()
    headers_out = {name: value for name in RELAYED_HEADERS if (value := response.headers.get(name.lower())) is not None}

    async def chunks() -> AsyncGenerator[bytes, None]:
        try:
            async for data in reads:
                yield data
        except IngressError as exc:
            ex.upstream_ok = False
            ex.error = exc
            raise
        finally:
            ex.upstream_done = time.perf_counter()
        ex.upstream_ok = True

    return RelayedAnswer(response.status, headers_out, chunks(), response.close)


# --- settle: after every end --------------------------------------------------------------------


def settle(ex: Exchange) -> None:
    """The exchange has ended, however it ended (the edge calls this once, last): whatever it still
    holds is let go, and its reservation is charged what it used."""
    lease, ex.lease = ex.lease, None
    if lease is not None:
        lease.release(ex.upstream_ok)
    admission, ex.admission = ex.admission, None
    if admission is not None:
        admission.settle(used(ex, admission.plan))


def used(ex: Exchange, plan: Plan) -> Actual | None:
    """What the request used, for its reservation: the service's usage; without it, what the edge knows.
    None (refund all) when nothing ran: never sent, or refused by the service before any output."""
    if ex.usage is not None:
        return Actual(ex.usage.prompt_tokens, ex.usage.completion_tokens)
    if ex.binary:  # a relayed answer is not read: the reservation stands
        return Actual(plan.input_tokens, plan.output_tokens)
    if ex.upstream_sent is None or (isinstance(ex.error, UpstreamAnswered) and not ex.output_chars):
        return None
    return Actual(plan.input_tokens, -(-ex.output_chars // CHARS_PER_TOKEN))  # the stream so far, estimated
