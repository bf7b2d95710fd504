"""knative: the Service checked as Knative's webhook would (field mask, reserved names), its PodSpec
against Kubernetes' Pod schema, its timeouts against the edge's."""

from __future__ import annotations

import json
from collections.abc import Mapping

from . import common
from .common import Doc, EdgeConfig, Result, kind_name, load_docs, rel
from .k8s_schema import schema_errors
from .pods import pod_errors

# Knative: a Service asking for less than this is too short for long generations.
LONG_STREAM_S = 1800


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
    directory = common.DEPLOY / "knative"
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
