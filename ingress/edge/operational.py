"""The operator's endpoints: liveness, readiness and the Prometheus metrics."""

from __future__ import annotations

import time

from aiohttp import web

from ingress import metrics
from ingress.edge.appkeys import DRAIN, GATEWAY
from ingress.edge.writers import json_response


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process serves requests."""
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: not draining, and some upstream endpoint may be chosen (not ejected, checks passing)."""
    gateway, drain = request.app[GATEWAY], request.app[DRAIN]
    now = time.monotonic()
    reachable = {name: sum(s.healthy(now) for s in g.states) for name, g in gateway.groups.items()}
    ready = not drain.draining and any(reachable.values())
    body = {"status": "ready" if ready else "not ready", "draining": drain.draining, "healthy_endpoints": reachable}
    response = json_response(body)
    response.set_status(200 if ready else 503)
    return response


async def metrics_endpoint(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    now = time.monotonic()
    for name, group in gateway.groups.items():
        for state in group.states:
            metrics.ENDPOINT_HEALTHY.labels(name, state.url).set(1 if state.healthy(now) else 0)
    body, content_type = metrics.render()
    response = web.Response(body=body)
    response.headers["Content-Type"] = content_type
    return response
