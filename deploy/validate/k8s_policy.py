"""k8s-policy: the rules a set of manifests deployed together rests on (one directory of deploy/k8s/, or
one Helm rendering): rollouts, selectors, Services' ports, autoscalers, disruption budgets, network
policies and the limit store; each Deployment's pod spec by pods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import Doc, EdgeConfig, Result, k8s_sets, kind_name
from .limit_store import is_store, memory_backend_errors, store_errors, store_service_errors
from .pods import pod_errors


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
        errors += memory_backend_errors(where, pod_configs, several=several)
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
    errors += store_service_errors(configs, services, store_labels)
    return errors, configs


def check_k8s_policy() -> Result:
    result = Result("k8s-policy")
    for directory, docs in k8s_sets().items():
        errors, configs = manifest_set_errors(docs)
        result.errors += errors
        result.checked.append(f"{directory}: {len(docs)} resources, {len(configs)} edge configurations")
        result.checked += [f"{directory}: {note}" for config in configs for note in config.notes]
    return result
