"""The Exchange: what one request did, filled in stage by stage, read when it ends (settle, metrics, log)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingress.errors import IngressError
    from ingress.routing.affinity import Decision
    from ingress.tenancy.limiter import Admission
    from ingress.tenancy.policy import Principal
    from ingress.tracing import RequestTrace
    from ingress.upstream.group import Lease
    from ingress.wire.types import Usage


@dataclass
class Exchange:
    """One request's record. Stages write what they learn; nothing here does I/O."""

    request_id: str
    started: float = field(default_factory=time.perf_counter)
    model: str | None = None  # as asked
    route: str | None = None  # the route that took it, as configured (ingress/pipeline/gateway.py)
    served_model: str | None = None  # as the service's answer named it (a whole answer's, a stream's first chunk's)
    variant: str | None = None  # the split's variant that took it (a route's name), when its route splits
    served_by: tuple[str, str] | None = None  # the route (its name) and the upstream model of the answer's attempt
    fell_back: list[str] | None = None  # the chain's routes that failed it, each as "route:class", in order
    metric_model: str = "other"  # a name some route serves, for bounded metric labels
    group: str | None = None
    upstream: str | None = None
    stream: bool = False
    binary: bool = False
    attempts: int = 0
    paced: float | None = None  # its start waited for a later turn of the loop until then (ingress/edge/pacing.py)
    decoded: float | None = None  # perf_counter marks of the stages, for Server-Timing and metrics
    encoded: float | None = None
    upstream_sent: float | None = None
    upstream_head: float | None = None
    upstream_done: float | None = None
    first_byte: float | None = None
    usage: Usage | None = None
    error: IngressError | None = None
    lease: Lease | None = None  # the endpoint's slot, held until the exchange settles
    choice: Decision | None = None  # how a cache-affine group chose the last attempt's endpoint (None: by P2C)
    upstream_ok: bool | None = None  # for the endpoint's health: True, False (its failure), None (not its doing)
    principal: Principal | None = None  # the key the request presented (tenancy on)
    admission: Admission | None = None  # its reservation against the limits, held until the exchange settles
    limit_headers: dict[str, str] | None = None  # x-ratelimit-*, on the answer whatever it is
    limit_outcome: str | None = None  # admitted, limited, degraded_...
    admitted: float | None = None  # perf_counter mark: the admission's round trip ended
    prompt_tokens: int | None = None  # as the edge counted them (the passport's estimate)
    output_tokens: int | None = None  # of a stream's output as the edge counted it, when the service gave no usage
    api: str | None = None  # its API family: chat, completions, responses, embeddings, models, messages, count_tokens
    # (the last two Anthropic's); None off the API (probes, /metrics, unknown paths)
    dropped: list[str] | None = None  # processing hints of the request not sent to its service, by name
    trace: RequestTrace | None = None  # its spans, when the edge traces ([tracing])
    cache: str | None = None  # the route's response cache: hit, miss or bypass (None: the route has none)
    cache_control: str | None = None  # the request's Cache-Control as the cache reads it: no-store, no-cache

    def mark_first_byte(self) -> None:
        if self.first_byte is None:
            self.first_byte = time.perf_counter()
