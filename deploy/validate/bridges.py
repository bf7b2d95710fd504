"""The bridges a pod runs and the sockets the edge reaches its neighbours on: a bridge container's flags
as the bridge itself checks them, its key and its engine in the pod; the credentials of the bridges the
edge runs itself; every unix: endpoint on a volume shared with the container serving it."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from .common import Doc, arg_value, bridge_args, command_of, env_names, on_a_mount


def bridge_errors(where: str, pod: Doc, container: Doc) -> list[str]:
    """A bridge container (`ingress bridge DIALECT ...`): its flags as the bridge itself checks them,
    its key present in its environment, the engine it calls in the pod, and probes."""
    args = bridge_args(container) or []
    errors = []
    dialect = args[0] if args and not args[0].startswith("-") else None
    raw: dict[str, Any] = {"dialect": dialect}
    for flag, key in (("--target", "target"), ("--model", "model"), ("--api-key-env", "api_key_env"),
                      ("--api-key-file", "api_key_file"), ("--max-tokens", "max_tokens")):
        value = arg_value(args, flag)
        if value is not None:
            raw[key] = int(value) if key == "max_tokens" and value.isdigit() else value
    if "target" not in raw:
        return [f"{where}: the bridge has no --target"]
    try:
        from ingress.config import ConfigError, bridge_config
    except ImportError as exc:  # pragma: no cover - the project is installed wherever this runs
        return [f"{where}: cannot import the bridge's configuration parser: {exc}"]
    try:
        bridge_config(raw, f"{where}: ingress bridge")
    except ConfigError as exc:
        errors.append(str(exc))
    names = env_names(container)
    if raw.get("api_key_env") and names is not None and raw["api_key_env"] not in names:
        errors.append(f"{where}: --api-key-env {raw['api_key_env']} is not in the container's environment: "
                      f"the bridge would refuse to start")
    if raw.get("api_key_file") and not on_a_mount(container, str(raw["api_key_file"])):
        errors.append(f"{where}: --api-key-file {raw['api_key_file']} is on no volume the container mounts")
    target = urlsplit(str(raw["target"]))
    if target.hostname in ("127.0.0.1", "localhost", "::1"):
        port = target.port or (443 if target.scheme == "https" else 80)
        engines = [c for c in pod.get("containers") or [] if c is not container and (
            arg_value(command_of(c), "--port") == str(port)
            or port in {p.get("containerPort") for p in c.get("ports") or []})]
        if not engines:
            errors.append(f"{where}: --target {raw['target']}: no other container of the pod listens on port {port}")
        for engine in engines:
            if not engine.get("readinessProbe"):
                errors.append(f"{where}: the engine's container {engine.get('name')} has no readinessProbe: the "
                              f"bridge's /healthz does not ask the engine, so the pod would be ready before it")
    for probe in ("startupProbe", "livenessProbe"):
        if not container.get(probe):
            errors.append(f"{where}: the bridge has no {probe}")
    return errors


def in_process_bridge_errors(where: str, edge: Doc, settings: Any) -> list[str]:
    """The bridges the edge runs itself find their credentials in the edge container."""
    errors = []
    names = env_names(edge)
    groups, _ = settings.resolved()
    for name, group in groups.items():
        for j, endpoint in enumerate(group.endpoints):
            bridge = endpoint.bridge
            key = f"groups.{name}.endpoints[{j}].bridge"
            if bridge is None:
                continue
            if bridge.api_key_env and names is not None and bridge.api_key_env not in names:
                errors.append(f"{where}: {key}.api_key_env {bridge.api_key_env} is not in the edge's environment: "
                              f"the edge would refuse to start")
            if bridge.api_key_file and not on_a_mount(edge, bridge.api_key_file):
                errors.append(f"{where}: {key}.api_key_file {bridge.api_key_file} is on no volume the edge mounts")
    return errors


def socket_errors(where: str, pod: Doc, edge: Doc, settings: Any) -> list[str]:
    """Every unix: endpoint of the edge lies on a volume shared with the container serving it."""
    errors = []
    groups, _ = settings.resolved()
    for name, group in groups.items():
        for endpoint in group.endpoints:
            if not endpoint.url.startswith("unix:"):
                continue
            path = endpoint.url[len("unix:"):]
            directory = path.rsplit("/", 1)[0]
            mounted = {m.get("mountPath", "").rstrip("/"): m.get("name") for m in edge.get("volumeMounts") or []}
            if directory not in mounted:
                errors.append(f"{where}: groups.{name}: {path} is not on a volume the edge mounts")
                continue
            servers = [c for c in pod.get("containers") or [] if c is not edge
                       and path in command_of(c)
                       and any(m.get("name") == mounted[directory] for m in c.get("volumeMounts") or [])]
            if not servers:
                errors.append(f"{where}: groups.{name}: no other container serves {path} on the shared volume")
    return errors
