"""relay: FlatBuffers in, verified, routed on fields read in place, the same bytes out; the service's bytes back."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass

from ingress.errors import (
    IngressError,
    InvalidRequest,
)
from ingress.exchange import Exchange
from ingress.pipeline.admit import admit_estimate
from ingress.pipeline.gateway import Gateway, hop_headers
from ingress.pipeline.prepare import Prepared, took
from ingress.pipeline.send import send
from ingress.routing.affinity import Prefix, key_hash
from ingress.upstream import http1
from ingress.upstream.group import Lease
from ingress.wire import verify
from ingress.wire.decode import PROVIDER_NAMES, WireError, read_request
from ingress.wire.passport import prefix_at

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


async def relay(gateway: Gateway, body: bytes, exchange: Exchange,
                affinity_headers: tuple[tuple[str, str], ...] = ()) -> RelayedAnswer:
    """Verify a CompletionRequest, route on fields read in place, forward the exact bytes. A cache-affine
    group chooses by the client's own passport's chain, and the route's affinity header (the values of
    those routes name, `affinity_headers`) or the request's prompt_cache_key."""
    try:
        verify.verify_request(body, max_size=gateway.settings.max_body_bytes)
        view = read_request(body)
        model = (view.ModelName() or b"").decode()
        provider = view.Provider()
        stream = view.Stream()
        passport = view.Passport()
        prompt_tokens = passport.PromptTokensEstimate() if passport is not None else 0
        max_output_tokens = view.MaxTokens() if view.MaxTokensSet() else None
    except WireError as exc:
        raise InvalidRequest(f"The FlatBuffers request is invalid: {exc}.", code="invalid_flatbuffer") from None
    routed = exchange.routed
    routed.model, routed.stream = model, stream
    if not model:
        raise InvalidRequest("The FlatBuffers request names no model.", param="model_name")
    if not 0 <= provider < len(PROVIDER_NAMES):
        raise InvalidRequest(f"Unknown provider {provider}.", param="provider")
    match, asked = gateway.route(model, exchange)
    took(routed, asked, match)
    prefix = None
    if gateway.affine(match.route):
        blocks, conversation_block = prefix_at(body)
        name = (match.route.affinity_header or "").lower()
        key = next((value for sent, value in affinity_headers if sent == name), None)
        key = key or (view.PromptCacheKey() or b"").decode(errors="replace")
        prefix = Prefix(blocks, conversation_block, key_hash(key) if key else None)
    await admit_estimate(gateway, exchange, prompt_tokens, max_output_tokens)
    headers, timeouts = hop_headers(exchange.request_id, None), gateway.timeouts(match)
    if exchange.trace is not None:  # the buffer is the client's, sent as it came: only the header names the attempt
        exchange.trace.hop(None, headers)
    if (principal := exchange.principal) is not None:
        # the buffer's passport is the client's own: who the edge admitted goes beside it
        headers["x-ingress-tenant"], headers["x-ingress-key-id"] = principal.tenant_name, principal.id
    prepared = Prepared(None, match, body, headers, timeouts, prompt_tokens, max_output_tokens, prefix)

    async def forward(lease: Lease, _: Prepared[None]) -> tuple[http1.Response, AsyncIterator[bytes]]:
        return await lease.client.forward(body, headers, timeouts)  # never rerouted: the buffer is the client's

    response, reads = await send(gateway, prepared, exchange, forward)
    answer = exchange.answer
    answer.began()
    headers_out = {name: value for name in RELAYED_HEADERS if (value := response.headers.get(name.lower())) is not None}

    async def chunks() -> AsyncGenerator[bytes, None]:
        try:
            async for data in reads:
                yield data
        except IngressError as exc:
            answer.upstream_ok = False
            answer.failure = exc
            raise
        finally:
            answer.done = time.perf_counter()
        answer.upstream_ok = True

    return RelayedAnswer(response.status, headers_out, chunks(), response.close)
