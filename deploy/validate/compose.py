"""compose: compose.yaml against the Compose Specification's schema, its services, health checks and
mounts, and the edge's configuration."""

from __future__ import annotations

import json
import re

import yaml

from . import common
from .common import Result, arg_value, parse_edge_config, rel, seconds


def check_compose() -> Result:
    import jsonschema

    result = Result("compose")
    path = common.DEPLOY / "compose.yaml"
    compose = yaml.safe_load(path.read_text())
    schema = json.loads((common.DEPLOY / "schemas" / "compose-spec.json").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    for error in sorted(validator.iter_errors(compose), key=lambda e: list(e.path)):
        result.errors.append(f"{rel(path)}: {'.'.join(str(p) for p in error.path) or '(top)'}: {error.message}")
    result.checked.append("Compose Specification schema")
    services = compose.get("services") or {}
    for name in ("edge", "demo"):
        if name not in services:
            result.errors.append(f"{rel(path)}: no service {name!r}")
    if result.errors:
        return result
    for name, service in services.items():
        where = f"{rel(path)} services.{name}"
        if "image" not in service and "build" not in service:
            result.errors.append(f"{where}: neither image nor build")
        build = service.get("build")
        if isinstance(build, dict):
            context = (path.parent / build.get("context", ".")).resolve()
            if not (context / build.get("dockerfile", "Dockerfile")).is_file():
                result.errors.append(f"{where}: build.dockerfile does not exist in the context")
        test = (service.get("healthcheck") or {}).get("test")
        if not test or ("/healthz" not in str(test) and "/readyz" not in str(test)):
            result.errors.append(f"{where}: no healthcheck against /healthz or /readyz")
        if not service.get("command"):
            result.errors.append(f"{where}: no command")
    demo, edge = services["demo"], services["edge"]
    demo_cmd = [str(a) for a in demo["command"]]
    edge_cmd = [str(a) for a in edge["command"]]
    if demo_cmd[:1] != ["demo-upstream"] or arg_value(demo_cmd, "--host") != "0.0.0.0":
        result.errors.append(f"{rel(path)}: demo must run `demo-upstream --host 0.0.0.0 --port N`")
    if edge_cmd[:1] != ["serve"]:
        result.errors.append(f"{rel(path)}: edge must run `serve ...`")
    depends = edge.get("depends_on") or {}
    if not isinstance(depends, dict) or (depends.get("demo") or {}).get("condition") != "service_healthy":
        result.errors.append(f"{rel(path)}: edge should depend on demo being service_healthy")
    config_path = arg_value(edge_cmd, "--config")
    mounts = [v for v in edge.get("volumes") or [] if isinstance(v, dict) and v.get("target") == config_path]
    if not mounts:
        result.errors.append(f"{rel(path)}: nothing is mounted at the edge's --config {config_path}")
        return result
    source = (path.parent / mounts[0]["source"]).resolve()
    if not source.is_file():
        result.errors.append(f"{rel(path)}: the edge's configuration {mounts[0]['source']} does not exist")
        return result
    config = parse_edge_config(source.read_text(), {}, rel(source))
    if config.error:
        result.errors.append(config.error)
        return result
    result.checked.append(f"edge configuration {rel(source)}")
    if seconds(edge.get("stop_grace_period", "10s")) <= config.drain_total:
        result.errors.append(f"{rel(path)}: edge stop_grace_period {edge.get('stop_grace_period', '10s (default)')}"
                             f" does not exceed drain.delay + drain.deadline ({config.drain_total:g} s)")
    groups, _ = config.settings.resolved()
    for group in groups.values():
        for endpoint in group.endpoints:
            m = re.fullmatch(r"https?://([^:/]+)(?::(\d+))?/?", endpoint.url)
            if not m or m[1] not in services:
                result.errors.append(f"{rel(source)}: {endpoint.url} is not a service of compose.yaml")
            elif m[2] and arg_value([str(a) for a in services[m[1]]["command"]], "--port") != m[2]:
                result.errors.append(f"{rel(source)}: {endpoint.url}: service {m[1]} listens on another port")
    port = arg_value(edge_cmd, "--port") or "8080"
    if not any(str(p).endswith(f":{port}") or (isinstance(p, dict) and str(p.get("target")) == port)
               for p in edge.get("ports") or []):
        result.errors.append(f"{rel(path)}: the edge's port {port} is not published")
    return result
