"""The Exchange: what one request did, read when it ends (settle, metrics, the access line, its span).

It is a few typed parts, each written by one stage and read by the edge once the request has ended:

    Exchange    the edge (ingress/edge/)      request id, start, API family, pacing, key, Cache-Control,
                                              FlatBuffers or JSON, its trace, and the error the answer carried
    .routed     prepare (pipeline/prepare*.py) what was asked and where it went: model, route, variant, the
                                              prompt as counted, the hints not sent, the decode/encode marks
    .admitted   admit (pipeline/admit.py)     the reservation, its outcome and headers
    .attempts   send (pipeline/send.py)       the endpoints tried, the one that answered and its lease, the
                                              chain's routes that failed it
    .answer     the answering stages          what the service answered: usage, model, first byte, end,
                (pipeline/answer.py, stream.py, relay.py)  whether the endpoint did its job, an in-band failure
    .cache      pipeline/cache.py             the route's response cache: hit, miss or bypass

tests/unit/test_exchange.py holds each part to its writer. Nothing here does I/O.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingress.errors import IngressError
    from ingress.routing.affinity import Decision
    from ingress.routing.table import Match
    from ingress.tenancy.limiter import Admission
    from ingress.tenancy.policy import Principal
    from ingress.tracing import RequestTrace
    from ingress.upstream.group import Lease
    from ingress.wire.types import Usage


@dataclass(slots=True)
class Routed:
    """What the request asked for and the route that took it (prepare; relay for a FlatBuffers request)."""

    model: str | None = None  # as asked; None: the request never named one its edge could read
    stream: bool = False
    route: str | None = None  # the route that took it, as configured (routing/chain.py's route_name); None: none
    group: str | None = None  # the group of that route (of the split's variant, when its route splits)
    metric_model: str = "other"  # a name some route serves, for bounded metric labels
    variant: str | None = None  # the split's variant that took it (a route's name), when its route splits
    decoded: float | None = None  # perf_counter marks of the stages, for Server-Timing and metrics
    encoded: float | None = None
    prompt_tokens: int | None = None  # as the edge counted them (the passport's estimate)
    hints: list[str] = field(default_factory=list)  # processing hints of the request not sent to its service


@dataclass(slots=True)
class Admitted:
    """The request's admission against its key's and tenant's limits (tenancy on)."""

    headers: dict[str, str] | None = None  # x-ratelimit-*, on the answer whatever it is
    outcome: str | None = None  # admitted, limited, degraded_...
    at: float | None = None  # perf_counter mark: the admission's round trip ended
    admission: Admission | None = None  # the reservation, held until the exchange settles

    def take(self) -> Admission | None:
        """The reservation, let go of here (settle charges it)."""
        admission, self.admission = self.admission, None
        return admission


@dataclass(slots=True)
class Attempts:
    """The request's attempts on the endpoints of its route's chain."""

    count: int = 0
    group: str | None = None  # the group of the last attempt
    upstream: str | None = None  # the endpoint of the last attempt
    choice: Decision | None = None  # how a cache-affine group chose it (None: by P2C)
    sent: float | None = None  # perf_counter marks: the first attempt began, the last one's head came
    head: float | None = None
    served_by: tuple[str, str] | None = None  # the route (its name) and the upstream model of the answer's attempt
    served: Match | None = None  # the route and model that served the answer (its provider seals reasoning)
    fell_back: list[str] | None = None  # the chain's routes that failed it, each as "route:class", in order
    lease: Lease | None = None  # the endpoint's slot, held until the exchange settles

    def take(self) -> Lease | None:
        """The lease, let go of here (settle releases it)."""
        lease, self.lease = self.lease, None
        return lease


@dataclass(slots=True)
class Answer:
    """What the service answered."""

    served_model: str | None = None  # as the service's answer named it (a whole answer's, a stream's first chunk's)
    usage: Usage | None = None
    output_tokens: int | None = None  # of a stream's output as the edge counted it, when the service gave no usage
    first_byte: float | None = None  # perf_counter marks: the answer's first byte, the end of its body
    done: float | None = None
    upstream_ok: bool | None = None  # for the endpoint's health: True, False (its failure), None (not its doing)
    failure: IngressError | None = None  # the stream failed after it began: ended in-band with this error

    def began(self) -> None:
        if self.first_byte is None:
            self.first_byte = time.perf_counter()


@dataclass
class Exchange:
    """One request's record: the edge's own fields, and the stages' parts."""

    request_id: str
    started: float = field(default_factory=time.perf_counter)
    api: str | None = None  # its API family: chat, completions, responses, embeddings, models, messages, count_tokens
    # (the last two Anthropic's); None off the API (probes, /metrics, unknown paths)
    paced: float | None = None  # its start waited for a later turn of the loop until then (ingress/edge/pacing.py)
    principal: Principal | None = None  # the key the request presented (tenancy on)
    cache_control: str | None = None  # the request's Cache-Control as the cache reads it: no-store, no-cache
    binary: bool = False  # a FlatBuffers request, relayed as it came
    trace: RequestTrace | None = None  # its spans, when the edge traces ([tracing])
    error: IngressError | None = None  # what its answer was instead (raised before it began, or met by the edge)
    routed: Routed = field(default_factory=Routed)
    admitted: Admitted = field(default_factory=Admitted)
    attempts: Attempts = field(default_factory=Attempts)
    answer: Answer = field(default_factory=Answer)
    cache: str | None = None  # the route's response cache: hit, miss or bypass (None: the route has none)

    @property
    def failure(self) -> IngressError | None:
        """How it failed: the error answered, else the one its stream ended with."""
        return self.error or self.answer.failure

    @property
    def group(self) -> str | None:
        """The group that answered, or last tried; else the one its route names."""
        return self.attempts.group or self.routed.group
