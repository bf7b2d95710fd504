"""k8s-schema and k8s-policy: the manifests against Kubernetes' schemas, and the rules the deployment
rests on (drain, probes, resources, security, the edge's configuration, bridges, the limit store)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from . import common
from .bridges import bridge_errors, in_process_bridge_errors, socket_errors
from .common import (
    DRAIN_DEADLINE_S,
    DRAIN_DELAY_S,
    Doc,
    EdgeConfig,
    Result,
    arg_value,
    bridge_args,
    command_of,
    cpu_cores,
    interpolation_env,
    is_edge,
    k8s_sets,
    kind_name,
    load_docs,
    prestop_sleep,
    rel,
)
from .mounted_config import edge_config_for

# The oldest Kubernetes the manifests support (preStop `sleep`, matchLabelKeys) and the newest that
# kubernetes-validate ships schemas for (its versions: kubernetes_validate.utils.all_versions()).
KUBERNETES_VERSIONS = ("1.30", "1.37")


# The servers a limit store's container runs (the edge's tenancy.backend = "redis").
STORE_SERVERS = ("redis-server", "valkey-server")
REDIS_PORT = 6379


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


def check_k8s_schema() -> Result:
    result = Result("k8s-schema")
    count = 0
    for docs in k8s_sets().values():
        for source, doc in docs:
            result.errors += schema_errors(doc, source)
            count += 1
    for source, doc in ((rel(p), d) for p in [common.DEPLOY / "knative" / "configmap.yaml"] for d in load_docs(p)):
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
