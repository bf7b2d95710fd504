"""The limit store the edges share (tenancy.backend = "redis"): one Redis or Valkey, never two at once,
secured like the edge, bounded so that it refuses writes rather than forgetting limits, behind a
Service that the edges' tenancy.redis.url reaches."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from .common import Doc, EdgeConfig, arg_value, command_of
from .pods import container_security_errors, resources_errors

# The servers a limit store's container runs (the edge's tenancy.backend = "redis").
STORE_SERVERS = ("redis-server", "valkey-server")
REDIS_PORT = 6379


def is_store(container: Doc) -> bool:
    """A limit store's container: redis-server or valkey-server."""
    args = command_of(container)
    return bool(args) and args[0].rsplit("/", 1)[-1] in STORE_SERVERS


def store_errors(where: str, deployment: Doc, hpa_targets: set[str]) -> list[str]:
    """A Redis or Valkey the edges share: exactly one, never two at once, secured like the edge, with
    probes, and a memory bound under which it refuses writes rather than forgetting limits."""
    errors = []
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    if spec.get("replicas") != 1 or deployment["metadata"]["name"] in hpa_targets:
        errors.append(f"{where}: a limit store runs exactly one replica (replicas: 1, no autoscaler): "
                      f"two behind one Service would split every limit")
    if (spec.get("strategy") or {}).get("type") != "Recreate":
        errors.append(f"{where}: a limit store's strategy must be Recreate: a rolling update runs two at once")
    for container in pod.get("containers") or []:
        cwhere = f"{where} container {container.get('name')}"
        errors += container_security_errors(cwhere, pod, container)
        errors += resources_errors(cwhere, container)
        for probe in ("livenessProbe", "readinessProbe"):
            if not container.get(probe):
                errors.append(f"{cwhere}: no {probe}")
        if is_store(container):
            args = command_of(container)
            if arg_value(args, "--maxmemory") is None:
                errors.append(f"{cwhere}: no --maxmemory: the store would grow until the kernel kills it")
            if arg_value(args, "--maxmemory-policy") != "noeviction":
                errors.append(f"{cwhere}: --maxmemory-policy must be noeviction: an evicted key is a forgotten "
                              f"limit, where a refused write is an error the edges count and degrade on")
    return errors


def redis_target_errors(config: EdgeConfig, services: Mapping[str, Doc],
                        store_pods: list[Mapping[str, Any]]) -> tuple[list[str], str | None]:
    """The edge's tenancy.redis.url, when it names a Service among the manifests: its port is one of
    the Service's, and the Service selects a limit store. Returns the errors and the Service's name."""
    tenancy = getattr(config.settings, "tenancy", None)
    if tenancy is None or tenancy.backend != "redis" or tenancy.redis is None:
        return [], None
    url = urlsplit(tenancy.redis.url)
    host = url.hostname or ""
    name = host.split(".")[0]
    service = services.get(name)
    if service is None or not re.fullmatch(rf"{re.escape(name)}(\.[a-z0-9-]+(\.svc(\.cluster\.local)?)?)?", host):
        return [], None
    errors = []
    port = url.port or REDIS_PORT
    if port not in {p.get("port") for p in service["spec"].get("ports") or []}:
        errors.append(f"{config.source}: tenancy.redis.url {url.scheme}://{host}:{port}: Service {name} has no "
                      f"port {port}")
    selector = service["spec"].get("selector") or {}
    if not any(selector and all(labels.get(k) == v for k, v in selector.items()) for labels in store_pods):
        errors.append(f"{config.source}: tenancy.redis.url names Service {name}, which selects no limit store")
    return errors, name


def memory_backend_errors(where: str, configs: list[EdgeConfig], *, several: bool) -> list[str]:
    """No tenancy.backend = "memory" in a Deployment of several pods: they would share no store at all."""
    errors = []
    for config in configs:
        tenancy = getattr(config.settings, "tenancy", None)
        if several and tenancy is not None and tenancy.backend == "memory":
            errors.append(f"{where}: tenancy.backend \"memory\" in several pods: each would admit every "
                          f"limit in full; a fleet shares one Redis (backend = \"redis\")")
    return errors


def store_service_errors(configs: list[EdgeConfig], services: Mapping[str, Doc],
                         store_labels: list[Mapping[str, Any]]) -> list[str]:
    """Every edge's tenancy.redis.url that names a Service reaches a limit store through it, and every
    Service in front of a limit store is named by some edge."""
    errors: list[str] = []
    used: set[str] = set()
    for config in configs:
        target_errors, service = redis_target_errors(config, services, store_labels)
        errors += target_errors
        if service is not None:
            used.add(service)
    for name, svc in services.items():
        selector = svc["spec"].get("selector") or {}
        if name not in used and any(selector and all(labels.get(k) == v for k, v in selector.items())
                                    for labels in store_labels):
            errors.append(f"Service/{name}: a limit store that no edge's tenancy.redis.url names")
    return errors
