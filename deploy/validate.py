#!/usr/bin/env python3
"""Offline validation of everything under deploy/, for CI: `python deploy/validate.py`.

Checks, each reported on one line of the summary:

  yamllint        every YAML file (deploy/.yamllint); Helm templates excluded, they are not YAML yet
  dockerfile      hadolint (any finding fails) and the image's contract: stages, base tag, non-root
                  numeric user, HEALTHCHECK, STOPSIGNAL, ENTRYPOINT/CMD, copied paths
  compose         compose.yaml against the Compose Specification's JSON schema (vendored in
                  deploy/schemas/), plus services, healthchecks, mounts and the edge's configuration
  k8s-schema      deploy/k8s/** and deploy/knative/configmap.yaml against Kubernetes' own OpenAPI
                  schemas (kubernetes-validate, strict: unknown fields fail), for each version in
                  KUBERNETES_VERSIONS
  k8s-policy      the same manifests: grace period > drain.delay + drain.deadline, probes, resources,
                  security contexts, selectors, the mounted TOML parsed by the edge's own parser, bridge
                  containers' flags parsed by the bridge's, their keys and engines present in the pod,
                  every container beside the edge outliving its drain, the keys file on a Secret
                  the edge mounts (read by the edge's parser), one Redis per fleet that the edges'
                  tenancy.redis.url reaches, no memory backend behind several pods...
  helm-chart      Chart.yaml, the templates' presence, a comment above every values.yaml key, every
                  .Values reference in the templates resolving to a key (and every key used)
  helm-render     the chart rendered for standalone and sidecar mode and with each example values file
                  (deploy/helm/values-*.yaml), then k8s-schema and k8s-policy on the output; skipped
                  when no renderer is available (a `helm` binary on PATH, or the helm-python-sdk package)
  knative         Knative has no schema here: its field mask and reserved names are checked as
                  Knative's webhook does, the PodSpec part against Kubernetes' Pod schema, and the
                  timeouts against the edge's
  grafana         the dashboard is valid JSON with a datasource variable, every panel query selecting
                  by $job and $instance, panels and query variables reading only metrics the edge
                  exports, and each of those on a panel (METRICS, checked each way against
                  ingress/metrics.py when importable)

Nothing here reaches the network: sockets other than Unix ones are refused while the checks run.
Exit status: 0 when no check failed (skipped ones do not fail), 1 otherwise.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import json
import math
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

DEPLOY = Path(__file__).resolve().parent
ROOT = DEPLOY.parent
if str(ROOT) not in sys.path:  # the edge's own configuration parser, when run as a script
    sys.path.insert(0, str(ROOT))

# The oldest Kubernetes the manifests support (preStop `sleep`, matchLabelKeys) and the newest that
# kubernetes-validate ships schemas for (its versions: kubernetes_validate.utils.all_versions()).
KUBERNETES_VERSIONS = ("1.30", "1.37")

# The edge's drain defaults (ingress/settings.py Drain), used when a configuration cannot be read.
DRAIN_DELAY_S = 5.0
DRAIN_DEADLINE_S = 30.0

# Knative: a Service asking for less than this is too short for long generations.
LONG_STREAM_S = 1800

# The metrics the edge exports, as exposed (counters with _total), and their types.
METRICS: dict[str, str] = {
    "ingress_requests_total": "counter",
    "ingress_request_duration_seconds": "histogram",
    "ingress_overhead_seconds": "histogram",
    "ingress_upstream_duration_seconds": "histogram",
    "ingress_time_to_first_token_seconds": "histogram",
    "ingress_inter_chunk_seconds": "histogram",
    "ingress_in_flight": "gauge",
    "ingress_tokens_total": "counter",
    "ingress_upstream_endpoint_healthy": "gauge",
    "ingress_retries_total": "counter",
    "ingress_rejections_total": "counter",
    "ingress_admissions_total": "counter",
    "ingress_limited_total": "counter",
    "ingress_prompt_tokens_counted_total": "counter",
    "ingress_tokens_reserved_total": "counter",
    "ingress_tokens_settled_total": "counter",
    "ingress_tokens_refunded_total": "counter",
    "ingress_leases_expired_total": "counter",
    "ingress_limit_store_seconds": "histogram",
    "ingress_limit_store_errors_total": "counter",
    "ingress_limit_breaker_open": "gauge",
    "ingress_gc_collections_total": "counter",
    "ingress_gc_pause_seconds": "histogram",
    "ingress_event_loop_tasks": "gauge",
    "ingress_build_info": "gauge",
}
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")

HELM_TEMPLATES = ("deployment.yaml", "service.yaml", "hpa.yaml", "pdb.yaml", "configmap.yaml",
                  "serviceaccount.yaml", "secret-keys.yaml", "redis.yaml", "_helpers.tpl", "NOTES.txt")

# The servers a limit store's container runs (the edge's tenancy.backend = "redis").
STORE_SERVERS = ("redis-server", "valkey-server")
REDIS_PORT = 6379
# What a variable the edge reads from a Secret that is not among the manifests stands in as: the one
# such variable the configurations here read is tenancy.redis.url (its password kept in a Secret).
UNRESOLVED_SECRET = "redis://value-from-a-secret.invalid:6379/0"
# Values the chart is rendered with by helm-render: both modes, and a configuration given whole (the
# example values files in deploy/helm/ are rendered too, see helm_scenarios).
HELM_SCENARIOS: dict[str, dict[str, Any]] = {
    "standalone": {},
    "sidecar": {"sidecar": {"enabled": True}, "autoscaling": {"enabled": False}},
    "own-config": {
        "config": '[groups.g]\nendpoints = [{ url = "http://model:9000" }]\n\n'
                  '[[routes]]\nmodel = "m"\ngroup = "g"\n\n[drain]\ndelay = 5.0\ndeadline = 30.0\n',
        "podDisruptionBudget": {"enabled": False}, "topologySpread": {"enabled": False},
    },
}

Doc = dict[str, Any]


@dataclasses.dataclass
class Result:
    name: str
    errors: list[str] = dataclasses.field(default_factory=list)
    checked: list[str] = dataclasses.field(default_factory=list)
    skipped: str | None = None

    @property
    def status(self) -> str:
        return "FAIL" if self.errors else "skip" if self.skipped else "ok"


# --- helpers ------------------------------------------------------------------------------------


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """Refuse every connection but Unix sockets: a check that tries the network fails loudly."""
    real_connect = socket.socket.connect
    real_create = socket.create_connection

    def connect(self: socket.socket, address: Any) -> None:
        if self.family == socket.AF_UNIX:
            return real_connect(self, address)
        raise OSError(f"deploy/validate.py runs offline: refused a connection to {address!r}")

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        raise OSError(f"deploy/validate.py runs offline: refused a connection to {address!r}")

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.create_connection = create_connection
    try:
        yield
    finally:
        socket.socket.connect = real_connect  # type: ignore[method-assign]
        socket.create_connection = real_create


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def load_docs(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kind_name(doc: Doc) -> str:
    return f"{doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}"


def seconds(value: Any) -> float:
    """A compose duration (`45s`, `1m30s`, `500ms`) or a number of seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    total, units = 0.0, {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", str(value))
    if not parts or "".join(n + u for n, u in parts) != str(value):
        raise ValueError(f"not a duration: {value!r}")
    for number, unit in parts:
        total += float(number) * units[unit]
    return total


def cpu_cores(quantity: Any) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def interpolation_env(container: Doc) -> dict[str, str]:
    """What the edge's ${VAR} interpolation sees: the container's literal environment values."""
    return {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}


def secret_data(secret: Doc) -> dict[str, str]:
    """A Secret's data as text: stringData over the base64 data, as the API server merges them."""
    data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    data.update({k: str(v) for k, v in (secret.get("stringData") or {}).items()})
    return data


def secret_env(container: Doc, secrets: Mapping[str, Doc]) -> tuple[dict[str, str], list[str]]:
    """The container's variables from secretKeyRef: the Secret's value when it is among the manifests,
    else UNRESOLVED_SECRET (and a note saying so)."""
    env: dict[str, str] = {}
    notes: list[str] = []
    for e in container.get("env") or []:
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        if not ref:
            continue
        secret = secrets.get(ref.get("name"))
        value = secret_data(secret).get(ref.get("key")) if secret is not None else None
        if value is None:
            notes.append(f"{e['name']} from Secret {ref.get('name')}[{ref.get('key')}], not among the manifests: "
                         f"stands in as {UNRESOLVED_SECRET}")
            value = UNRESOLVED_SECRET
        env[e["name"]] = value
    return env, notes


@dataclasses.dataclass
class EdgeConfig:
    """An edge configuration found in a manifest, parsed with the edge's own parser."""

    source: str
    settings: Any = None  # ingress.settings.Settings
    error: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)  # what could not be checked, and why
    keys_file: str | None = None  # the keys file's text, as mounted (tenancy.keys_file)

    @property
    def drain_total(self) -> float:
        drain = getattr(self.settings, "drain", None)
        if drain is None:
            return DRAIN_DELAY_S + DRAIN_DEADLINE_S
        return float(drain.delay) + float(drain.deadline)


def parse_edge_config(text: str, env: Mapping[str, str], source: str) -> EdgeConfig:
    try:
        from ingress.config import ConfigError, parse_config
    except ImportError as exc:  # pragma: no cover - the project is installed wherever this runs
        return EdgeConfig(source, error=f"cannot import the edge's configuration parser: {exc}")
    try:
        return EdgeConfig(source, settings=parse_config(text, env, source))
    except ConfigError as exc:
        return EdgeConfig(source, error=str(exc))


def arg_value(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def is_edge(container: Doc) -> bool:
    args = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
    return (bool(args) and args[0] in ("serve", "ingress") and "demo-upstream" not in args
            and "bridge" not in args[:2])


def bridge_args(container: Doc) -> list[str] | None:
    """The arguments after `ingress bridge` when the container runs a bridge, else None."""
    args = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
    if args[:1] == ["ingress"]:
        args = args[1:]
    return args[1:] if args[:1] == ["bridge"] else None


def env_names(container: Doc) -> set[str] | None:
    """The environment variables the container sets (literal or from a Secret); None when an envFrom
    makes the set unknowable here."""
    if container.get("envFrom"):
        return None
    return {str(e.get("name")) for e in container.get("env") or []}


def on_a_mount(container: Doc, path: str) -> bool:
    return any(path.startswith(m.get("mountPath", "").rstrip("/") + "/") for m in container.get("volumeMounts") or [])


def prestop_sleep(container: Doc) -> float | None:
    sleep = (((container.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}).get("seconds")
    return float(sleep) if isinstance(sleep, (int, float)) else None


# --- Kubernetes schemas ---------------------------------------------------------------------------


def schema_errors(doc: Doc, source: str) -> list[str]:
    """kubernetes-validate, strict, for each supported version; a kind without schema is an error."""
    import kubernetes_validate.utils as kv

    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            errors.append(f"{source}: {kind_name(doc)} (Kubernetes {version}): {path}: {exc.message}")
        except kv.SchemaNotFoundError as exc:
            errors.append(f"{source}: {kind_name(doc)}: {exc.message}")
        except kv.VersionNotSupportedError:
            errors.append(f"kubernetes-validate has no schemas for Kubernetes {version}: upgrade it")
    return errors


# --- Kubernetes policy ----------------------------------------------------------------------------


def container_security_errors(where: str, pod: Doc, container: Doc) -> list[str]:
    errors = []
    pod_sc = pod.get("securityContext") or {}
    sc = container.get("securityContext") or {}
    if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
        errors.append(f"{where}: runAsNonRoot is not set")
    for key in ("runAsUser", "runAsGroup"):
        if sc.get(key, pod_sc.get(key)) == 0:
            errors.append(f"{where}: {key} is 0 (root)")
    if sc.get("readOnlyRootFilesystem") is not True:
        errors.append(f"{where}: readOnlyRootFilesystem is not true")
    if sc.get("allowPrivilegeEscalation") is not False:
        errors.append(f"{where}: allowPrivilegeEscalation is not false")
    if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
        errors.append(f"{where}: capabilities.drop does not include ALL")
    if (sc.get("capabilities") or {}).get("add"):
        errors.append(f"{where}: capabilities.add is set")
    seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
    if seccomp != "RuntimeDefault":
        errors.append(f"{where}: seccompProfile is {seccomp!r}, not RuntimeDefault")
    return errors


def resources_errors(where: str, container: Doc) -> list[str]:
    resources = container.get("resources") or {}
    return [f"{where}: resources.{part}.{res} is not set"
            for part in ("requests", "limits") for res in ("cpu", "memory")
            if res not in (resources.get(part) or {})]


def probe_errors(where: str, container: Doc, *, startup: bool = True) -> list[str]:
    errors = []
    wanted = {"livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    if startup:
        wanted["startupProbe"] = "/healthz"
    port_names = {p.get("name") for p in container.get("ports") or []}
    port_numbers = {p.get("containerPort") for p in container.get("ports") or []}
    for probe, path in wanted.items():
        spec = container.get(probe)
        if not spec:
            errors.append(f"{where}: no {probe}")
            continue
        http = spec.get("httpGet") or {}
        if http.get("path") != path:
            errors.append(f"{where}: {probe} should GET {path}, not {http.get('path')!r}")
        port = http.get("port")
        if port is not None and port not in port_names and port not in port_numbers:
            errors.append(f"{where}: {probe} port {port!r} is not a port of the container")
    return errors


def mounted_file(pod: Doc, container: Doc, path: str) -> tuple[Doc | None, str | None, str | None, str | None]:
    """What the container reads at `path`: (its mount, the volume's kind, the ConfigMap's or Secret's
    name, the key in it); Nones when no volume is mounted there."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    mounts = sorted(container.get("volumeMounts") or [], key=lambda m: -len(m.get("mountPath", "")))
    for mount in mounts:
        mount_path = mount.get("mountPath", "").rstrip("/")
        if not (path.startswith(mount_path + "/") or (mount.get("subPath") and path == mount_path)):
            continue
        volume = volumes.get(mount.get("name")) or {}
        for kind, name_key in (("configMap", "name"), ("secret", "secretName")):
            if kind in volume:
                source = volume[kind] or {}
                key = mount.get("subPath") or path[len(mount_path) + 1:]
                for item in source.get("items") or []:  # items: key -> path inside the volume
                    if item.get("path") == key:
                        key = item.get("key")
                return mount, kind, source.get(name_key), key
        return mount, next((k for k in volume if k != "name"), None), None, None
    return None, None, None, None


def keys_file_config(pod: Doc, container: Doc, text: str, secrets: Mapping[str, Doc],
                     where: str) -> tuple[str | None, list[str], list[str]]:
    """The configuration's tenancy.keys_file found where the container mounts it: (the file's text, or
    None when the configuration names none; errors; notes)."""
    try:
        keys_path = ((tomllib.loads(text).get("tenancy") or {}).get("keys_file"))
    except tomllib.TOMLDecodeError:
        return None, [], []  # the edge's parser reports it
    if not isinstance(keys_path, str) or "${" in keys_path:
        return None, [], []
    mount, kind, name, key = mounted_file(pod, container, keys_path)
    errors: list[str] = []
    notes: list[str] = []
    content = ""
    if mount is None:
        errors.append(f"{where}: tenancy.keys_file {keys_path} is on no volume the edge mounts")
    elif kind != "secret":
        errors.append(f"{where}: tenancy.keys_file {keys_path} is on a {kind} volume, not a Secret")
    else:
        if mount.get("subPath"):
            errors.append(f"{where}: tenancy.keys_file {keys_path} is mounted with subPath: the kubelet never "
                          f"updates it, so a SIGHUP would re-read the old keys")
        secret = secrets.get(str(name))
        if secret is None:
            notes.append(f"keys file from Secret {name}, not among the manifests: not checked")
        elif key not in secret_data(secret):
            errors.append(f"{where}: tenancy.keys_file {keys_path}: Secret {name} has no key {key!r}")
        else:
            content = secret_data(secret)[str(key)]
    return content, errors, notes


def edge_config_for(pod: Doc, container: Doc, configmaps: Mapping[str, Doc], source: str,
                    secrets: Mapping[str, Doc] | None = None) -> EdgeConfig:
    """The TOML the edge container reads (--config), from the ConfigMap volume mounted there, with its
    environment (literal, and from the Secrets among the manifests) and its keys file (from the Secret
    volume mounted where tenancy.keys_file says)."""
    path = arg_value([str(a) for a in container.get("args") or []], "--config")
    if path is None:
        return EdgeConfig(source, error=f"{source}: the edge is started without --config")
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        mount_path = mount.get("mountPath", "").rstrip("/")
        if not path.startswith(mount_path + "/"):
            continue
        volume = volumes.get(mount.get("name")) or {}
        cm_name = (volume.get("configMap") or {}).get("name")
        if cm_name is None:
            return EdgeConfig(source, error=f"{source}: {path} is not on a ConfigMap volume")
        key = mount.get("subPath") or path[len(mount_path) + 1:]
        cm = configmaps.get(cm_name)
        if cm is None:
            return EdgeConfig(source, error=f"{source}: ConfigMap {cm_name} is not among the manifests")
        text = (cm.get("data") or {}).get(key)
        if text is None:
            return EdgeConfig(source, error=f"{source}: ConfigMap {cm_name} has no key {key!r}")
        env, notes = secret_env(container, secrets or {})
        env = {**interpolation_env(container), **env}
        keys_text, errors, more = keys_file_config(pod, container, text, secrets or {}, source)
        if errors:
            return EdgeConfig(source, error="; ".join(errors))
        config = parse_edge_config_with_keys(text, env, f"{source} ConfigMap/{cm_name}[{key}]", keys_text)
        config.notes += notes + more
        return config
    return EdgeConfig(source, error=f"{source}: no volume is mounted at the directory of {path}")


def parse_edge_config_with_keys(text: str, env: Mapping[str, str], source: str, keys_text: str | None) -> EdgeConfig:
    """parse_edge_config, with tenancy.keys_file read from `keys_text` (the mounted file's content)
    through a temporary copy; the settings keep the path as written."""
    if keys_text is None:
        return parse_edge_config(text, env, source)
    keys_path = tomllib.loads(text)["tenancy"]["keys_file"]
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "keys.toml"
        copy.write_text(keys_text)
        quoted = re.compile(r"([\"'])" + re.escape(keys_path) + r"\1")
        config = parse_edge_config(quoted.sub(lambda m: json.dumps(str(copy)), text, count=1), env, source)
    config.keys_file = keys_text
    if config.settings is not None:
        import msgspec

        tenancy = msgspec.structs.replace(config.settings.tenancy, keys_file=keys_path)
        config.settings = msgspec.structs.replace(config.settings, tenancy=tenancy)
    elif config.error:
        config.error = config.error.replace(str(copy), keys_path)
    return config


def writable_dirs(pod: Doc, container: Doc) -> set[str]:
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    return {m["mountPath"].rstrip("/") for m in container.get("volumeMounts") or []
            if not m.get("readOnly") and "emptyDir" in (volumes.get(m.get("name")) or {})}


def pod_errors(where: str, pod: Doc, configmaps: Mapping[str, Doc], *, knative: bool = False,
               secrets: Mapping[str, Doc] | None = None) -> tuple[list[str], list[EdgeConfig]]:
    """Policy for one pod spec: security, resources, probes, mounts, and the edge's configuration."""
    errors: list[str] = []
    configs: list[EdgeConfig] = []
    containers = pod.get("containers") or []
    volumes = {v.get("name") for v in pod.get("volumes") or []}
    edges = [c for c in containers if is_edge(c)]
    if len(edges) != 1:
        errors.append(f"{where}: expected one edge container (args `serve ...`), found {len(edges)}")
    for container in containers:
        cwhere = f"{where} container {container.get('name')}"
        errors += container_security_errors(cwhere, pod, container)
        errors += resources_errors(cwhere, container)
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") not in volumes:
                errors.append(f"{cwhere}: volumeMount {mount.get('name')!r} has no volume")
    for edge in edges:
        cwhere = f"{where} container {edge.get('name')}"
        args = [str(a) for a in edge.get("args") or []]
        errors += probe_errors(cwhere, edge, startup=not knative)
        config = edge_config_for(pod, edge, configmaps, where, secrets)
        configs.append(config)
        if config.error:
            errors.append(config.error)
        grace = pod.get("terminationGracePeriodSeconds")
        if not knative and (grace is None or grace <= config.drain_total):
            errors.append(f"{where}: terminationGracePeriodSeconds {grace} does not exceed drain.delay + "
                          f"drain.deadline ({config.drain_total:g} s)")
        port = arg_value(args, "--port")
        if port is not None and int(port) not in {p.get("containerPort") for p in edge.get("ports") or []}:
            errors.append(f"{cwhere}: --port {port} is not a containerPort")
        if arg_value(args, "--host") not in ("0.0.0.0", "::"):
            errors.append(f"{cwhere}: --host must be 0.0.0.0 (or ::) to be reachable in the pod")
        workers = arg_value(args, "--workers")
        cpu_limit = ((edge.get("resources") or {}).get("limits") or {}).get("cpu")
        if workers is None:
            errors.append(f"{cwhere}: no --workers: the edge would start one per CPU of the node")
        elif cpu_limit is not None and int(workers) > max(1, math.ceil(cpu_cores(cpu_limit))):
            errors.append(f"{cwhere}: --workers {workers} exceeds the CPU limit {cpu_limit}")
        if workers != "1" and (edge.get("securityContext") or {}).get("readOnlyRootFilesystem"):
            tmp = interpolation_env(edge).get("TMPDIR", "/tmp").rstrip("/")
            if tmp not in writable_dirs(pod, edge):
                errors.append(f"{cwhere}: several workers need a writable {tmp} (an emptyDir) for their "
                              f"metrics under a read-only root file system")
        if config.settings is not None:
            errors += socket_errors(where, pod, edge, config.settings)
            errors += in_process_bridge_errors(cwhere, edge, config.settings)
    drain_total = configs[0].drain_total if configs else DRAIN_DELAY_S + DRAIN_DEADLINE_S
    grace = pod.get("terminationGracePeriodSeconds")
    for container in containers:
        if container in edges:
            continue
        cwhere = f"{where} container {container.get('name')}"
        if bridge_args(container) is not None:
            errors += bridge_errors(cwhere, pod, container)
        # What the edge forwards to must outlive its drain, within the grace period.
        sleep = prestop_sleep(container)
        if edges and not knative and (sleep is None or sleep < drain_total):
            errors.append(f"{cwhere}: stops before the edge's drain ends: a preStop sleep of at least "
                          f"drain.delay + drain.deadline ({drain_total:g} s) is needed, found {sleep}")
        elif sleep is not None and grace is not None and sleep >= grace:
            errors.append(f"{cwhere}: preStop sleep {sleep:g} s leaves nothing of the {grace} s grace period")
    return errors, configs


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
            arg_value([str(a) for a in (c.get("command") or []) + (c.get("args") or [])], "--port") == str(port)
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
                       and path in [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
                       and any(m.get("name") == mounted[directory] for m in c.get("volumeMounts") or [])]
            if not servers:
                errors.append(f"{where}: groups.{name}: no other container serves {path} on the shared volume")
    return errors


def command_of(container: Doc) -> list[str]:
    return [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]


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


def selects(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    match = selector.get("matchLabels", selector) if isinstance(selector, Mapping) else {}
    return bool(match) and all(labels.get(k) == v for k, v in match.items())


def manifest_set_errors(docs: list[tuple[str, Doc]]) -> tuple[list[str], list[EdgeConfig]]:
    """Policy for a set of manifests deployed together (one directory, or one Helm rendering)."""
    errors: list[str] = []
    configs: list[EdgeConfig] = []
    by_kind: dict[str, list[tuple[str, Doc]]] = {}
    for source, doc in docs:
        by_kind.setdefault(doc.get("kind", ""), []).append((source, doc))
    configmaps = {d["metadata"]["name"]: d for _, d in by_kind.get("ConfigMap", [])}
    secrets = {d["metadata"]["name"]: d for _, d in by_kind.get("Secret", [])}
    deployments = by_kind.get("Deployment", [])
    if not deployments:
        errors.append("no Deployment among the manifests")
    hpa_targets = {d["spec"]["scaleTargetRef"]["name"] for _, d in by_kind.get("HorizontalPodAutoscaler", [])}
    stores = [(s, d) for s, d in deployments
              if any(is_store(c) for c in d["spec"]["template"]["spec"].get("containers") or [])]
    for source, dep in deployments:
        where = f"{source} {kind_name(dep)}"
        spec = dep["spec"]
        template = spec["template"]
        labels = template.get("metadata", {}).get("labels") or {}
        if not selects(spec.get("selector") or {}, labels):
            errors.append(f"{where}: the selector does not match the pod template's labels")
        if (source, dep) in stores:
            errors += store_errors(where, dep, hpa_targets)
            continue
        rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
        if (spec.get("strategy") or {}).get("type", "RollingUpdate") != "RollingUpdate" \
                or rolling.get("maxUnavailable") not in (0, "0", "0%"):
            errors.append(f"{where}: the rolling update must have maxUnavailable 0")
        if dep["metadata"]["name"] in hpa_targets and "replicas" in spec:
            errors.append(f"{where}: sets replicas although a HorizontalPodAutoscaler owns them")
        for constraint in template["spec"].get("topologySpreadConstraints") or []:
            if not selects(constraint.get("labelSelector") or {}, labels):
                errors.append(f"{where}: a topologySpreadConstraint does not select the pods")
        pod_errs, pod_configs = pod_errors(where, template["spec"], configmaps, secrets=secrets)
        errors += pod_errs
        configs += pod_configs
        several = dep["metadata"]["name"] in hpa_targets or int(spec.get("replicas", 1)) > 1
        for config in pod_configs:
            tenancy = getattr(config.settings, "tenancy", None)
            if several and tenancy is not None and tenancy.backend == "memory":
                errors.append(f"{where}: tenancy.backend \"memory\" in several pods: each would admit every "
                              f"limit in full; a fleet shares one Redis (backend = \"redis\")")
    pods = [(d["spec"]["template"].get("metadata", {}).get("labels") or {}, d["spec"]["template"]["spec"])
            for _, d in deployments]
    for source, svc in by_kind.get("Service", []):
        selector = svc["spec"].get("selector") or {}
        matched = [pod for labels, pod in pods if selector and all(labels.get(k) == v for k, v in selector.items())]
        if not matched:
            errors.append(f"{source} {kind_name(svc)}: the selector matches no Deployment's pods")
        for port in svc["spec"].get("ports") or []:
            target = port.get("targetPort", port.get("port"))
            if matched and not any(target in (p.get("name"), p.get("containerPort"))
                                   for pod in matched for c in pod.get("containers") or []
                                   for p in c.get("ports") or []):
                errors.append(f"{source} {kind_name(svc)}: targetPort {target!r} is no container port")
    names = {d["metadata"]["name"] for _, d in deployments}
    for source, hpa in by_kind.get("HorizontalPodAutoscaler", []):
        ref = hpa["spec"]["scaleTargetRef"]
        if ref.get("kind") != "Deployment" or ref.get("name") not in names:
            errors.append(f"{source} {kind_name(hpa)}: scaleTargetRef names no Deployment here")
        if hpa["spec"].get("minReplicas", 1) < 2:
            errors.append(f"{source} {kind_name(hpa)}: minReplicas below 2 leaves no pod during a drain")
    for source, pdb in by_kind.get("PodDisruptionBudget", []):
        if not any(selects(pdb["spec"].get("selector") or {}, labels) for labels, _ in pods):
            errors.append(f"{source} {kind_name(pdb)}: the selector matches no Deployment's pods")
    for source, policy in by_kind.get("NetworkPolicy", []):
        if not any(selects(policy["spec"].get("podSelector") or {}, labels) for labels, _ in pods):
            errors.append(f"{source} {kind_name(policy)}: the podSelector matches no Deployment's pods")
        for rule in policy["spec"].get("ingress") or []:
            for peer in rule.get("from") or []:
                if "podSelector" in peer and "namespaceSelector" not in peer and not any(
                        selects(peer["podSelector"], labels) for labels, _ in pods):
                    errors.append(f"{source} {kind_name(policy)}: an ingress podSelector matches no Deployment's pods")
    services = {d["metadata"]["name"]: d for _, d in by_kind.get("Service", [])}
    store_labels = [d["spec"]["template"].get("metadata", {}).get("labels") or {} for _, d in stores]
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
    return errors, configs


def k8s_sets() -> dict[str, list[tuple[str, Doc]]]:
    """The plain manifests, by directory: each directory is one deployment."""
    sets: dict[str, list[tuple[str, Doc]]] = {}
    for path in sorted((DEPLOY / "k8s").rglob("*.yaml")):
        sets.setdefault(rel(path.parent), []).extend((rel(path), d) for d in load_docs(path))
    return sets


# --- checks -------------------------------------------------------------------------------------


def check_yamllint() -> Result:
    from yamllint import linter
    from yamllint.config import YamlLintConfig

    result = Result("yamllint")
    conf = YamlLintConfig(file=str(DEPLOY / ".yamllint"))
    files = [p for p in sorted(DEPLOY.rglob("*")) if p.is_file() and conf.is_yaml_file(str(p))
             and not conf.is_file_ignored(str(p.relative_to(DEPLOY)))]
    for path in files:
        for problem in linter.run(path.read_text(), conf, str(path)):
            result.errors.append(f"{rel(path)}:{problem.line}:{problem.column}: {problem.desc} ({problem.rule})")
    result.checked.append(f"{len(files)} YAML files")
    return result


def hadolint_binary() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.exists() else shutil.which("hadolint")


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        if whole:
            word, _, rest = whole.partition(" ")
            instructions.append((word.upper(), rest.strip()))
    return instructions


def check_dockerfile() -> Result:
    result = Result("dockerfile")
    dockerfile = DEPLOY / "Dockerfile"
    binary = hadolint_binary()
    if binary is None:
        result.errors.append("hadolint not found: install the dev dependencies (pip install -e '.[dev]')")
    else:
        run = subprocess.run([binary, "--config", str(DEPLOY / ".hadolint.yaml"), "--format", "json",
                              "--no-fail", str(dockerfile)], capture_output=True, text=True, check=False)
        try:
            findings = json.loads(run.stdout or "[]")
        except json.JSONDecodeError:
            findings = [{"line": 0, "code": "hadolint", "message": (run.stdout + run.stderr).strip()}]
        for f in findings:
            result.errors.append(f"{rel(dockerfile)}:{f.get('line')}: {f.get('code')} {f.get('message')}")
        version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
        result.checked.append(f"{version.strip() or 'hadolint'}: {len(findings)} findings")
    result.errors += dockerfile_contract_errors(dockerfile.read_text())
    result.checked.append("image contract")
    docker_default = DEPLOY / "docker" / "ingress.toml"
    config = parse_edge_config(docker_default.read_text(), {}, rel(docker_default))
    if config.error:
        result.errors.append(config.error)
    return result


COPY_ALLOWED = {"pyproject.toml", "README.md", "ingress/", "deploy/docker/ingress.toml"}


def dockerfile_contract_errors(text: str) -> list[str]:
    errors: list[str] = []
    instructions = dockerfile_instructions(text)
    args = {}
    for word, rest in instructions:
        if word == "ARG" and "=" in rest:
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip().strip('"')
    stages: list[list[tuple[str, str]]] = []
    for word, rest in instructions:
        if word == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((word, rest))
    if len(stages) < 2:
        errors.append("Dockerfile: not multi-stage (a builder and a final stage)")
        return errors
    for stage in stages:
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m[1], m[0]), stage[0][1].split()[0])
        name, _, tag = image.partition(":")
        if name != "python" or not re.fullmatch(r"3\.11(\.\d+)?-slim(-\w+)?", tag):
            errors.append(f"Dockerfile: base image {image!r} is not a pinned python:3.11 slim tag")
    final = stages[-1]

    def values(word: str) -> list[str]:
        return [rest for w, rest in final if w == word]

    users = values("USER")
    if not users:
        errors.append("Dockerfile: the final stage sets no USER (it would run as root)")
    else:
        user = users[-1].split(":")[0]
        if not user.isdigit() or int(user) == 0:
            errors.append(f"Dockerfile: USER {users[-1]} is not a numeric non-root UID "
                          f"(runAsNonRoot can only verify a number)")
    if not any("/healthz" in h for h in values("HEALTHCHECK")):
        errors.append("Dockerfile: no HEALTHCHECK against /healthz")
    if any("curl" in h or "wget" in h for h in values("HEALTHCHECK")):
        errors.append("Dockerfile: HEALTHCHECK uses a tool the slim image does not have")
    if values("STOPSIGNAL") != ["SIGTERM"]:
        errors.append("Dockerfile: STOPSIGNAL is not SIGTERM")
    if "8080" not in " ".join(values("EXPOSE")).split():
        errors.append("Dockerfile: EXPOSE 8080 is missing")
    if [json.loads(v) for v in values("ENTRYPOINT")] != [["ingress"]]:
        errors.append('Dockerfile: ENTRYPOINT is not ["ingress"]')
    cmd = [json.loads(v) for v in values("CMD")]
    if not cmd or cmd[-1][:1] != ["serve"] or arg_value(cmd[-1], "--config") is None:
        errors.append("Dockerfile: CMD is not `serve ... --config FILE` in exec form")
    if not any("PYTHONDONTWRITEBYTECODE=1" in v for v in values("ENV")):
        errors.append("Dockerfile: PYTHONDONTWRITEBYTECODE=1 is not set in the final stage")
    if not any("compileall" in rest for w, rest in stages[0] if w == "RUN"):
        errors.append("Dockerfile: the builder does not byte-compile (python -m compileall)")
    for word, rest in instructions:
        if word not in ("COPY", "ADD"):
            continue
        if word == "ADD":
            errors.append(f"Dockerfile: ADD {rest}: use COPY")
        if "--from=" in rest:
            continue
        sources = [s for s in rest.split() if not s.startswith("--")][:-1]
        for source in sources:
            if source not in COPY_ALLOWED:
                errors.append(f"Dockerfile: COPY {source}: only {sorted(COPY_ALLOWED)} belong in the image")
            elif not (ROOT / source).exists():
                errors.append(f"Dockerfile: COPY {source}: no such path in the repository")
    return errors


def check_compose() -> Result:
    import jsonschema

    result = Result("compose")
    path = DEPLOY / "compose.yaml"
    compose = yaml.safe_load(path.read_text())
    schema = json.loads((DEPLOY / "schemas" / "compose-spec.json").read_text())
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


def check_k8s_schema() -> Result:
    result = Result("k8s-schema")
    count = 0
    for docs in k8s_sets().values():
        for source, doc in docs:
            result.errors += schema_errors(doc, source)
            count += 1
    for source, doc in ((rel(p), d) for p in [DEPLOY / "knative" / "configmap.yaml"] for d in load_docs(p)):
        result.errors += schema_errors(doc, source)
        count += 1
    result.checked.append(f"{count} resources x Kubernetes {', '.join(KUBERNETES_VERSIONS)} (strict)")
    return result


def check_k8s_policy() -> Result:
    result = Result("k8s-policy")
    for directory, docs in k8s_sets().items():
        errors, configs = manifest_set_errors(docs)
        result.errors += errors
        result.checked.append(f"{directory}: {len(docs)} resources, {len(configs)} edge configurations")
        result.checked += [f"{directory}: {note}" for config in configs for note in config.notes]
    return result


def values_comment_errors(path: Path) -> list[str]:
    """Every key of values.yaml has a comment on the line above it."""
    lines = path.read_text().splitlines()
    errors = []

    def walk(node: yaml.Node) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                line = key.start_mark.line
                if line == 0 or not lines[line - 1].strip().startswith("#"):
                    errors.append(f"{rel(path)}:{line + 1}: key {key.value!r} has no comment on the line above")
                walk(value)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item)

    root = yaml.compose(path.read_text())
    if root is not None:
        walk(root)
    return errors


def value_paths(values: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(values, dict):
        for key, value in values.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            yield path
            yield from value_paths(value, path)


def leaf_paths(values: Any, prefix: str = "") -> Iterator[str]:
    """The paths of values that are not themselves maps of further values."""
    for path in value_paths(values, prefix):
        node = values
        for part in path.split("."):
            node = node[part]
        if not (isinstance(node, dict) and node):
            yield path


def check_helm_chart() -> Result:
    result = Result("helm-chart")
    chart_dir = DEPLOY / "helm" / "ingress"
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    if chart.get("apiVersion") != "v2":
        result.errors.append("Chart.yaml: apiVersion is not v2")
    for key in ("name", "version", "appVersion", "kubeVersion"):
        if not chart.get(key):
            result.errors.append(f"Chart.yaml: no {key}")
    if not re.fullmatch(r"\d+\.\d+\.\d+(-[\w.]+)?", str(chart.get("version"))):
        result.errors.append(f"Chart.yaml: version {chart.get('version')!r} is not SemVer")
    for name in HELM_TEMPLATES:
        if not (chart_dir / "templates" / name).is_file():
            result.errors.append(f"templates/{name} is missing")
    values_path = chart_dir / "values.yaml"
    result.errors += values_comment_errors(values_path)
    values = yaml.safe_load(values_path.read_text())
    templates = "\n".join(p.read_text() for p in sorted((chart_dir / "templates").iterdir()) if p.is_file())
    refs = set(re.findall(r"\.Values\.([A-Za-z0-9_.]*[A-Za-z0-9_])", templates))
    known = set(value_paths(values))
    for ref in sorted(refs - known):
        result.errors.append(f"templates: .Values.{ref} is not a key of values.yaml")
    for path in sorted(leaf_paths(values)):
        # Used if referenced itself, or through a parent passed on whole (toYaml, with, default...).
        parts = path.split(".")
        if not any(re.search(rf"\.Values\.{re.escape('.'.join(parts[:n]))}(?![\w.])", templates)
                   for n in range(len(parts), 0, -1)):
            result.errors.append(f"values.yaml: {path} is used by no template")
    result.checked.append(f"{len(known)} values, {len(refs)} references, {len(HELM_TEMPLATES)} templates")
    return result


def helm_renderer() -> tuple[str, Callable[[dict[str, Any]], str]] | None:
    """A way to render the chart offline: the helm binary, else the helm-python-sdk package."""
    chart_dir = DEPLOY / "helm" / "ingress"
    binary = shutil.which("helm")
    if binary is not None:
        def with_binary(values: dict[str, Any]) -> str:
            with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
                json.dump(values, f)
                f.flush()
                run = subprocess.run([binary, "template", "edge", str(chart_dir), "--namespace", "llm",
                                      "--kube-version", f"{KUBERNETES_VERSIONS[0]}.0", "--values", f.name],
                                     capture_output=True, text=True, check=False)
            if run.returncode:
                raise RuntimeError(run.stderr.strip())
            return run.stdout
        return f"helm ({binary})", with_binary
    try:
        import helm_python
    except ImportError:
        return None

    def with_sdk(values: dict[str, Any]) -> str:
        with helm_python.Chart.load(str(chart_dir)) as chart:
            out = chart.render(values, name="edge", namespace="llm")
        return "\n---\n".join(text for name, text in sorted(out.items()) if name.endswith((".yaml", ".yml")))
    return "helm-python-sdk", with_sdk


def helm_scenarios() -> dict[str, dict[str, Any]]:
    """HELM_SCENARIOS, then each example values file beside the chart (helm/values-*.yaml, by its
    name), as a user would pass it with -f."""
    scenarios = dict(HELM_SCENARIOS)
    for path in sorted((DEPLOY / "helm").glob("values-*.yaml")):
        scenarios[path.stem] = yaml.safe_load(path.read_text()) or {}
    return scenarios


def helm_renderings() -> tuple[str | None, dict[str, list[tuple[str, Doc]] | str]]:
    """The chart rendered for each scenario (documents, or the error text), and the renderer used."""
    renderer = helm_renderer()
    if renderer is None:
        return None, {}
    label, render = renderer
    out: dict[str, list[tuple[str, Doc]] | str] = {}
    for scenario, values in helm_scenarios().items():
        try:
            text = render(values)
        except Exception as exc:  # the renderer's own errors: a template that does not render
            out[scenario] = f"{type(exc).__name__}: {exc}"
            continue
        out[scenario] = [(f"helm[{scenario}]", d) for d in yaml.safe_load_all(text) if d]
    return label, out


def check_helm_render() -> Result:
    result = Result("helm-render")
    label, renderings = helm_renderings()
    if label is None:
        result.skipped = ("no chart renderer: neither a `helm` binary on PATH nor the helm-python-sdk "
                          "package; the chart's rendered output is not validated")
        return result
    for scenario, docs in renderings.items():
        if isinstance(docs, str):
            result.errors.append(f"helm[{scenario}]: rendering failed: {docs}")
            continue
        for source, doc in docs:
            result.errors += schema_errors(doc, source)
        errors, configs = manifest_set_errors(docs)
        result.errors += errors
        result.checked.append(f"{scenario}: {len(docs)} resources, {len(configs)} edge configurations")
        result.checked += [f"{scenario}: {note}" for config in configs for note in config.notes]
    result.checked.insert(0, f"rendered with {label}")
    return result


# Knative Serving's webhook: the PodSpec and Container fields it accepts (with default feature flags),
# its reserved names, and the RevisionSpec fields beside the PodSpec.
KNATIVE_REVISION_FIELDS = {"containerConcurrency", "timeoutSeconds", "responseStartTimeoutSeconds",
                           "idleTimeoutSeconds"}
KNATIVE_POD_FIELDS = {"containers", "volumes", "serviceAccountName", "imagePullSecrets", "enableServiceLinks",
                      "automountServiceAccountToken"}
KNATIVE_CONTAINER_FIELDS = {"name", "args", "command", "env", "workingDir", "envFrom", "image", "imagePullPolicy",
                            "livenessProbe", "ports", "readinessProbe", "resources", "securityContext",
                            "terminationMessagePath", "terminationMessagePolicy", "volumeMounts"}
KNATIVE_SECURITY_FIELDS = {"capabilities", "readOnlyRootFilesystem", "runAsUser", "runAsGroup", "runAsNonRoot",
                           "allowPrivilegeEscalation", "seccompProfile"}
KNATIVE_VOLUME_SOURCES = {"configMap", "secret", "projected", "emptyDir"}
KNATIVE_RESERVED_PATHS = {"/", "/dev", "/dev/log", "/tmp", "/var", "/var/log"}
KNATIVE_RESERVED_ENV = {"PORT", "K_SERVICE", "K_CONFIGURATION", "K_REVISION"}
KNATIVE_RESERVED_PORTS = {8012, 8013, 8022, 8112, 9090, 9091, 8008}
KNATIVE_ANNOTATIONS = ("autoscaling.knative.dev/min-scale", "autoscaling.knative.dev/max-scale",
                       "autoscaling.knative.dev/target")


def knative_errors(doc: Doc, source: str, configmaps: Mapping[str, Doc]) -> tuple[list[str], list[EdgeConfig]]:
    errors: list[str] = []
    where = f"{source} {kind_name(doc)}"
    if doc.get("apiVersion") != "serving.knative.dev/v1" or doc.get("kind") != "Service":
        return [f"{where}: not a serving.knative.dev/v1 Service"], []
    template = (doc.get("spec") or {}).get("template") or {}
    spec = dict(template.get("spec") or {})
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    for key in sorted(set(spec) - KNATIVE_REVISION_FIELDS - KNATIVE_POD_FIELDS):
        errors.append(f"{where}: spec.template.spec.{key} is not accepted by Knative (by default)")
    containers = spec.get("containers") or []
    if len(containers) != 1:
        errors.append(f"{where}: expected one container, found {len(containers)}")
    for c in containers:
        cwhere = f"{where} container {c.get('name')}"
        for key in sorted(set(c) - KNATIVE_CONTAINER_FIELDS):
            errors.append(f"{cwhere}: {key} is not accepted by Knative")
        for key in sorted(set(c.get("securityContext") or {}) - KNATIVE_SECURITY_FIELDS):
            errors.append(f"{cwhere}: securityContext.{key} is not accepted by Knative")
        ports = c.get("ports") or []
        if len(ports) > 1:
            errors.append(f"{cwhere}: Knative allows one container port")
        for p in ports:
            if p.get("name", "") not in ("", "http1", "h2c"):
                errors.append(f"{cwhere}: port name {p.get('name')!r} must be http1 or h2c")
            if p.get("containerPort") in KNATIVE_RESERVED_PORTS:
                errors.append(f"{cwhere}: port {p.get('containerPort')} is reserved by Knative")
        for e in c.get("env") or []:
            if e.get("name") in KNATIVE_RESERVED_ENV:
                errors.append(f"{cwhere}: env {e.get('name')} is reserved by Knative")
        volume_kinds = {v.get("name"): set(v) - {"name"} for v in spec.get("volumes") or []}
        for m in c.get("volumeMounts") or []:
            if m.get("mountPath", "").rstrip("/") in KNATIVE_RESERVED_PATHS or m.get("mountPath") == "/":
                errors.append(f"{cwhere}: mountPath {m.get('mountPath')} is reserved by Knative")
            if not m.get("readOnly") and "emptyDir" not in volume_kinds.get(m.get("name"), set()):
                errors.append(f"{cwhere}: volumeMount {m.get('name')} must be readOnly")
        for probe in ("livenessProbe", "readinessProbe"):
            if (c.get(probe) or {}).get("periodSeconds") and not (c.get(probe) or {}).get("timeoutSeconds"):
                errors.append(f"{cwhere}: {probe} with periodSeconds needs timeoutSeconds")
    for v in spec.get("volumes") or []:
        for key in sorted(set(v) - {"name"} - KNATIVE_VOLUME_SOURCES):
            errors.append(f"{where}: volume {v.get('name')}: {key} volumes are not accepted by Knative")
    if spec.get("automountServiceAccountToken") is True:
        errors.append(f"{where}: Knative only accepts automountServiceAccountToken: false")
    # The PodSpec part, against Kubernetes' own schema (a typo in a Kubernetes field fails here),
    # with the probes' port filled in as Knative's defaulting does.
    pod = {k: v for k, v in spec.items() if k not in KNATIVE_REVISION_FIELDS}
    defaulted = json.loads(json.dumps(pod))
    for c in defaulted.get("containers") or []:
        port = next((p.get("containerPort") for p in c.get("ports") or []), 8080)
        for probe in ("livenessProbe", "readinessProbe"):
            http = (c.get(probe) or {}).get("httpGet")
            if http is not None:
                http.setdefault("port", port)
    metadata = {"name": "knative-revision", **(template.get("metadata") or {})}
    errors += schema_errors({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": defaulted},
                            f"{source} (PodSpec)")
    # Autoscaling and concurrency.
    for key in KNATIVE_ANNOTATIONS:
        if not str(annotations.get(key, "")).isdigit():
            errors.append(f"{where}: annotation {key} is not set to a whole number")
    if not errors:
        low, high = (int(annotations[k]) for k in KNATIVE_ANNOTATIONS[:2])
        target = int(annotations[KNATIVE_ANNOTATIONS[2]])
        concurrency = spec.get("containerConcurrency")
        if low > high:
            errors.append(f"{where}: min-scale {low} exceeds max-scale {high}")
        if not isinstance(concurrency, int) or concurrency < 0:
            errors.append(f"{where}: containerConcurrency is not set")
        elif concurrency and concurrency < target:
            errors.append(f"{where}: containerConcurrency {concurrency} is below the target {target}")
    # The edge and its configuration: probes, security, and timeouts long enough for its own.
    pod_errs, configs = pod_errors(where, pod, configmaps, knative=True)
    errors += pod_errs
    for config in configs:
        if config.settings is None:
            continue
        timeouts = config.settings.timeouts
        timeout = spec.get("timeoutSeconds", 300)
        if timeout < LONG_STREAM_S:
            errors.append(f"{where}: timeoutSeconds {timeout} cuts streams longer than {LONG_STREAM_S} s")
        start = spec.get("responseStartTimeoutSeconds", timeout)
        if start < timeouts.first_byte:
            errors.append(f"{where}: responseStartTimeoutSeconds {start} is below the edge's first_byte timeout "
                          f"({timeouts.first_byte:g} s)")
        idle = spec.get("idleTimeoutSeconds", 0)
        if idle and idle <= timeouts.idle:
            errors.append(f"{where}: idleTimeoutSeconds {idle} does not exceed the edge's idle timeout "
                          f"({timeouts.idle:g} s)")
    return errors, configs


def check_knative() -> Result:
    result = Result("knative")
    directory = DEPLOY / "knative"
    docs = [(rel(p), d) for p in sorted(directory.glob("*.yaml")) for d in load_docs(p)]
    configmaps = {d["metadata"]["name"]: d for _, d in docs if d.get("kind") == "ConfigMap"}
    services = [(s, d) for s, d in docs if d.get("kind") == "Service"]
    if not services:
        result.errors.append(f"{rel(directory)}: no Knative Service")
    for source, doc in services:
        errors, configs = knative_errors(doc, source, configmaps)
        result.errors += errors
        result.checked.append(f"{kind_name(doc)}: field mask, PodSpec schema, {len(configs)} edge configurations")
    return result


def exported_metrics() -> dict[str, str] | None:
    """The metrics ingress/metrics.py defines, as exposed; None when it cannot be imported."""
    try:
        import prometheus_client

        from ingress import metrics as module
    except ImportError:
        return None
    exposed: dict[str, str] = {}
    for value in vars(module).values():
        if isinstance(value, prometheus_client.metrics.MetricWrapperBase):
            for family in value.describe():
                suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
                exposed[family.name + suffix] = {"info": "gauge"}.get(family.type, family.type)
    return exposed


PROMQL_WORDS = {"sum", "min", "max", "avg", "count", "by", "without", "rate", "irate", "increase",
                "histogram_quantile", "clamp_min", "clamp_max", "label_values", "topk", "bottomk", "on",
                "ignoring", "group_left", "group_right", "le", "and", "or", "unless", "offset", "abs",
                "time", "vector", "scalar", "delta", "deriv", "avg_over_time", "max_over_time"}


# What every selector of an edge metric on the dashboard carries: the job and instance variables.
DASHBOARD_SELECTORS = ('job=~"$job"', 'instance=~"$instance"')


def promql_names(expr: str) -> Iterator[str]:
    """The metric names an expression reads (PromQL's own words, labels, ranges and numbers left out)."""
    bare = re.sub(r'"[^"]*"', '""', expr)  # label values are not metric names,
    bare = re.sub(r"\{[^}]*\}", "{}", bare)  # nor are label matchers,
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)  # grouping,
    bare = re.sub(r"\[[^\]]*\]", "[]", bare)  # ranges,
    bare = re.sub(r"(?<![\w.])\d+(\.\d+)?([eE][-+]?\d+)?", "0", bare)  # and numbers
    bare = re.sub(r",\s*\w+\s*\)\s*$", ")", bare) if bare.startswith("label_values(") else bare  # the label
    for name in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare):
        if name not in PROMQL_WORDS and not re.fullmatch(r"\d.*", name):
            yield name


def queried_metric(name: str) -> tuple[str | None, str | None]:
    """(the METRICS entry a series name reads, or None; an error, or None)."""
    base = next((name[: -len(s)] for s in HISTOGRAM_SERIES
                 if name.endswith(s) and METRICS.get(name[: -len(s)]) == "histogram"), None)
    if base is not None:
        return base, None
    if METRICS.get(name) == "histogram":
        return None, f"histogram {name} queried without a _bucket/_sum/_count series"
    if name in METRICS:
        return name, None
    return None, f"{name} is not a metric the edge exports"


def check_grafana() -> Result:
    result = Result("grafana")
    path = DEPLOY / "grafana" / "ingress-dashboard.json"
    try:
        dashboard = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        result.errors.append(f"{rel(path)}: not JSON: {exc}")
        return result
    for key in ("title", "uid", "panels", "templating", "schemaVersion"):
        if key not in dashboard:
            result.errors.append(f"{rel(path)}: no {key!r}")
    variables = {v.get("name"): v for v in (dashboard.get("templating") or {}).get("list") or []}
    ds = variables.get("datasource") or {}
    if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        result.errors.append(f"{rel(path)}: no `datasource` template variable of type datasource (prometheus)")
    for name, variable in variables.items():
        if variable.get("type") != "query":
            continue
        given = variable.get("query")
        query = str((given.get("query") if isinstance(given, dict) else given) or "")
        if (variable.get("datasource") or {}).get("uid") != "${datasource}":
            result.errors.append(f"{rel(path)}: variable ${name}: datasource is not ${{datasource}}")
        for var in re.findall(r"\$(\w+)", query):
            if var not in variables:
                result.errors.append(f"{rel(path)}: variable ${name}: unknown variable ${var}")
        for series in promql_names(query):
            if queried_metric(series)[1] is not None:
                result.errors.append(f"{rel(path)}: variable ${name}: {series} is not a metric the edge exports")
    panels = list(dashboard.get("panels") or [])
    for panel in list(panels):
        panels += panel.get("panels") or []  # collapsed rows hold their panels
    ids = [p.get("id") for p in panels]
    if len(ids) != len(set(ids)):
        result.errors.append(f"{rel(path)}: panel ids are not unique")
    used: set[str] = set()
    exprs = 0
    for panel in panels:
        if panel.get("type") == "row":
            continue
        title = panel.get("title")
        grid = panel.get("gridPos") or {}
        if not grid or grid.get("x", 0) + grid.get("w", 0) > 24:
            result.errors.append(f"{rel(path)}: panel {title!r}: gridPos missing or wider than 24")
        targets = panel.get("targets") or []
        if not targets:
            result.errors.append(f"{rel(path)}: panel {title!r} has no query")
        for target in [panel, *targets]:
            uid = (target.get("datasource") or {}).get("uid")
            if uid != "${datasource}":
                result.errors.append(f"{rel(path)}: panel {title!r}: datasource {uid!r} is not ${{datasource}}")
        for target in targets:
            expr = target.get("expr", "")
            exprs += 1
            if expr.count("(") != expr.count(")") or expr.count("{") != expr.count("}"):
                result.errors.append(f"{rel(path)}: panel {title!r}: unbalanced brackets in {expr!r}")
            for var in re.findall(r"\$(\w+)", expr):
                if var not in variables and not var.startswith("__"):
                    result.errors.append(f"{rel(path)}: panel {title!r}: unknown variable ${var}")
            blanked = re.sub(r'"[^"]*"', lambda m: '"' + " " * (len(m[0]) - 2) + '"', expr)  # same offsets
            for selected in re.finditer(r"\b(ingress_\w+)\s*(\{[^}]*\})?", blanked):
                matchers = expr[selected.start(2):selected.end(2)] if selected.group(2) else ""
                for wanted in DASHBOARD_SELECTORS:
                    if wanted not in matchers:
                        result.errors.append(f"{rel(path)}: panel {title!r}: {selected.group(1)} is not selected "
                                             f"by {wanted}")
            for name in promql_names(expr):
                metric, error = queried_metric(name)
                if error is not None:
                    result.errors.append(f"{rel(path)}: panel {title!r}: {error}")
                elif metric is not None:
                    used.add(metric)
    for name in sorted(set(METRICS) - used):
        result.errors.append(f"{rel(path)}: metric {name} is on no panel")
    result.checked.append(f"{len(panels)} panels, {exprs} queries, {len(used)}/{len(METRICS)} metrics, "
                          f"{len(variables)} variables")
    exported = exported_metrics()
    if exported is None:
        result.checked.append("ingress/metrics.py not importable: metric names checked against METRICS only")
    else:
        for name in sorted(set(METRICS) - set(exported)):
            result.errors.append(f"ingress/metrics.py does not export {name}")
        for name in sorted(set(exported) - set(METRICS)):
            result.errors.append(f"ingress/metrics.py exports {name}, which METRICS does not list: add it, and "
                                 f"a panel for it")
        for name in sorted(set(METRICS) & set(exported)):
            if exported[name] != METRICS[name]:
                result.errors.append(f"ingress/metrics.py exports {name} as a {exported[name]}, not a {METRICS[name]}")
        result.checked.append("METRICS agrees with ingress/metrics.py")
    return result


CHECKS: dict[str, Callable[[], Result]] = {
    "yamllint": check_yamllint,
    "dockerfile": check_dockerfile,
    "compose": check_compose,
    "k8s-schema": check_k8s_schema,
    "k8s-policy": check_k8s_policy,
    "helm-chart": check_helm_chart,
    "helm-render": check_helm_render,
    "knative": check_knative,
    "grafana": check_grafana,
}


def run(names: Iterable[str] | None = None) -> list[Result]:
    results = []
    with offline():
        for name in names or CHECKS:
            try:
                results.append(CHECKS[name]())
            except Exception as exc:  # a check that crashes is a failed check, reported like the others
                results.append(Result(name, errors=[f"the check crashed: {type(exc).__name__}: {exc}"]))
    return results


def summary(results: list[Result], verbose: bool = False) -> str:
    width = max(len(r.name) for r in results)
    lines = [f"{'check':<{width}}  status  detail", f"{'-' * width}  ------  {'-' * 40}"]
    for r in results:
        detail = (f"{len(r.errors)} error(s)" if r.errors else r.skipped if r.skipped else "; ".join(r.checked))
        lines.append(f"{r.name:<{width}}  {r.status:<6}  {detail}")
    for r in results:
        if r.errors or (verbose and r.checked):
            lines.append("")
            lines.append(f"{r.name}:")
            lines += [f"  - {e}" for e in r.errors]
            if verbose:
                lines += [f"  checked: {c}" for c in r.checked]
    failed = sum(1 for r in results if r.errors)
    skipped = sum(1 for r in results if r.status == "skip")
    lines.append("")
    lines.append(f"{len(results) - failed - skipped} passed, {failed} failed, {skipped} skipped")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("checks", nargs="*", metavar="CHECK",
                        help=f"checks to run (default: all): {', '.join(CHECKS)}")
    parser.add_argument("-v", "--verbose", action="store_true", help="also list what each check covered")
    args = parser.parse_args(argv)
    unknown = [c for c in args.checks if c not in CHECKS]
    if unknown:
        parser.error(f"unknown check(s): {', '.join(unknown)}; choose from {', '.join(CHECKS)}")
    results = run(args.checks or None)
    print(summary(results, args.verbose))
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
