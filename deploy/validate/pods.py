"""k8s-policy for one pod spec, a Deployment's or Knative's: security contexts, resources, probes and
mounts of every container, the edge's flags, configuration and drain, and every container beside the
edge outliving that drain."""

from __future__ import annotations

import math
from collections.abc import Mapping

from .bridges import bridge_errors, in_process_bridge_errors, socket_errors
from .common import (
    DRAIN_DEADLINE_S,
    DRAIN_DELAY_S,
    Doc,
    EdgeConfig,
    arg_value,
    bridge_args,
    cpu_cores,
    interpolation_env,
    is_edge,
    prestop_sleep,
)
from .mounted_config import edge_config_for


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
