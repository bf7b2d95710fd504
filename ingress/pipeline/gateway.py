"""What every request shares (the Gateway), and the headers of the internal hop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ingress.cache import ResponseCache
from ingress.encoding.passport import RequestMeta
from ingress.encoding.requests import encode_request
from ingress.errors import NotFound
from ingress.exchange import Exchange
from ingress.oai.chat import ChatCompletionRequest
from ingress.oai.sealing import Sealer, new_key
from ingress.routing.budget import RetryBudget
from ingress.routing.chain import route_name
from ingress.routing.split import choose
from ingress.routing.table import Match, RouteTable
from ingress.settings import Route, Settings, Timeouts
from ingress.state import ResponseStore
from ingress.tenancy import Tenancy
from ingress.tracing import Tracer
from ingress.upstream.group import EndpointGroup
from ingress.wire.passport import Passport

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
    tracer: Tracer | None = None  # OpenTelemetry spans ([tracing]); None: none are made
    cache: ResponseCache | None = None  # the routes' response caches' stores; None: no route has one
    responses: ResponseStore | None = None  # what `store: true` keeps (ingress/state); None: nothing is kept
    encode_request: EncodeRequest = encode_request  # benchmarks swap in the stock flatbuffers.Builder
    affinity_headers: tuple[str, ...] = ()  # the request headers routes take affinity keys from
    # What seals reasoning and compactions for clients to send back ([sealing], or a key made at start).
    sealer: Sealer = field(default_factory=lambda: Sealer([("test", new_key())]))
    _affine: frozenset[str] = field(init=False, default=frozenset())  # the cache-affine groups' names
    _affine_chains: frozenset[int] = field(init=False, default=frozenset())  # routes with one in their chain

    def __post_init__(self) -> None:
        self._affine = frozenset(name for name, group in self.groups.items() if group.affinity is not None)
        self._affine_chains = frozenset(id(route) for route in self.routes.routes
                                        if any(link.group in self._affine for link in self.routes.chain(route)))

    def route(self, model: str, exchange: Exchange, meta: RequestMeta | None = None, user: str | None = None,
              safety_identifier: str | None = None) -> tuple[Match, Route]:
        """The route that serves `model` for this request: the one its name selects, or the variant of that
        route's split its sticky key (`meta`'s key or header, `user`, `safety_identifier`) falls on; and the
        route its name selected (the split's, when a variant serves)."""
        match = self.routes.match(model)
        principal = exchange.principal
        if match is None or (principal is not None and not (principal.allows(model)
                                                            and principal.reaches(route_name(match.route)))):
            # One answer for all three, as OpenAI's: a key learns nothing of the models (routes) it may not use.
            raise NotFound(f"The model '{model}' does not exist or you do not have access to it.", param="model",
                           code="model_not_found")
        asked = match.route
        if shares := self.routes.shares(match):
            key = _split_key(asked, exchange, meta, user, safety_identifier)
            match = self.routes.variant(match, choose(key.encode(), shares), model)
        return match, asked

    def affine(self, route: Route) -> bool:
        """Whether the route's group or fallback chooses by the prompt's prefix: its passport then carries
        the prefix hash chain, which costs tens of µs a request to compute."""
        return route.group in self._affine or route.fallback in self._affine or id(route) in self._affine_chains

    def forwards_extras(self, model: str) -> bool:
        """The model's route forwards the fields that are not OpenAI's (asked only when a body has some)."""
        match = self.routes.match(model)
        return match is not None and match.route.extra_fields == "forward"

    def timeouts(self, match: Match) -> Timeouts:
        return match.route.timeouts or self.settings.timeouts


def _split_key(route: Route, exchange: Exchange, meta: RequestMeta | None, user: str | None,
               safety_identifier: str | None) -> str:
    """What keeps a request on its split's variant: the route's `split_by`, as the request gives it; a request
    without one is placed by its own id (a weighted draw, not sticky)."""
    by = route.split_by
    key: str | None = None
    if by == "key":
        principal = exchange.principal
        key = principal.id if principal is not None else meta.api_key if meta is not None else None
    elif by == "user":
        key = user
    elif by == "safety_identifier":
        key = safety_identifier
    elif meta is not None:
        key = meta.header(route.split_header)
    return f"{by}:{key}" if key else exchange.request_id


def hop_headers(request_id: str, passport: Passport | None) -> dict[str, str]:
    headers = {"x-request-id": request_id}
    if passport is not None and passport.traceparent:
        headers["traceparent"] = passport.traceparent
        if passport.tracestate:
            headers["tracestate"] = passport.tracestate
    return headers

