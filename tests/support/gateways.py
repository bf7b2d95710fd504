"""Gateways for the request pipeline's unit tests (tests/unit/pipeline/): routes over groups of endpoints
that are never dialled (an attempt is the test's own callable), and keys with their tenancy, as the
edge builds them from its settings."""

from __future__ import annotations

from typing import Any

from ingress.exchange import Exchange
from ingress.guardrails.config import Guardrails
from ingress.pipeline import Gateway
from ingress.routing.budget import RetryBudget
from ingress.routing.table import RouteTable
from ingress.settings import Endpoint, Group, Route, Settings
from ingress.tenancy import Tenancy, build
from ingress.tenancy.keys import new_key
from ingress.tenancy.policy import Principal
from ingress.tenancy.settings import Key, Limits, Tenant
from ingress.tenancy.settings import Tenancy as TenancySettings
from ingress.upstream.client import UpstreamClient
from ingress.upstream.group import EndpointGroup

REQUEST_ID = "0123456789abcdef0123456789abcdef"


def new_gateway(*routes: Route, endpoints: int = 1, tenancy: Tenancy | None = None, budget: RetryBudget | None = None,
            **settings: Any) -> Gateway:
    """A gateway over `routes`, each group they name with `endpoints` endpoints on 127.0.g.x:9000 (never
    dialled: the tests' attempts answer for them), and a retry budget with room for many retries unless
    `budget` is given."""
    names = dict.fromkeys(route.group for route in routes)
    groups = {name: Group(endpoints=[Endpoint(url=f"http://127.0.{g}.{i + 1}:9000") for i in range(endpoints)])
              for g, name in enumerate(names)}
    config = Settings(groups=groups, routes=routes, **settings)
    pools = {name: EndpointGroup(name, group, [UpstreamClient(e.url or "", config.timeouts, 1 << 20)
                                               for e in group.endpoints])
             for name, group in groups.items()}
    return Gateway(settings=config, routes=RouteTable(routes), groups=pools, budget=budget or RetryBudget(0.2, 10, 0.0),
                   tenancy=tenancy)


def keyed(models: tuple[str, ...] = ("*",), guardrails: Guardrails | None = None,
          limits: Limits | None = None) -> tuple[Tenancy, Principal, str]:
    """A tenancy with one key (allowed `models`, with `guardrails` and `limits`), the Principal the key
    presents, and the key itself."""
    secret, key_id, key_hash = new_key()
    key = Key(id=key_id, tenant="t", hash=key_hash, models=models, guardrails=guardrails,
              limits=limits or Limits())
    tenancy = build(TenancySettings(keys=(key,), tenants={"t": Tenant()}), 1)
    return tenancy, tenancy.policy.authenticate({"Authorization": f"Bearer {secret}"}), secret


def new_exchange(principal: Principal | None = None, request_id: str = REQUEST_ID) -> Exchange:
    made = Exchange(request_id)
    made.principal = principal
    return made
