"""Offline validation of everything under deploy/, for CI: `python deploy/validate`.

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
                  ingress/metrics/ when importable)

Nothing here reaches the network: sockets other than Unix ones are refused while the checks run.
Exit status: 0 when no check failed (skipped ones do not fail), 1 otherwise.

One module per target (yaml_lint, dockerfile, compose, k8s_schema, k8s_policy, helm, knative, grafana).
What k8s-policy asks of a pod, which knative and helm-render ask too, has modules of its own: pods (one
pod spec), mounted_config (the edge's configuration as its pod mounts it), bridges (bridges and the
sockets the edge reaches them on) and limit_store (the Redis the edges share). `common` holds what they
all share; `__main__` is the command line. `run` and `summary` are here, with the names the tests use.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable

from .bridges import bridge_errors, in_process_bridge_errors
from .common import (
    DEPLOY,
    DRAIN_DEADLINE_S,
    DRAIN_DELAY_S,
    ROOT,
    Doc,
    EdgeConfig,
    Result,
    arg_value,
    bridge_args,
    is_edge,
    k8s_sets,
    offline,
    parse_edge_config,
    seconds,
)
from .compose import check_compose
from .dockerfile import check_dockerfile, dockerfile_instructions, hadolint_binary
from .grafana import METRICS, check_grafana, exported_metrics
from .helm import check_helm_chart, check_helm_render, helm_renderer, helm_renderings, values_comment_errors
from .k8s_policy import check_k8s_policy, manifest_set_errors
from .k8s_schema import KUBERNETES_VERSIONS, check_k8s_schema, schema_errors
from .knative import check_knative
from .mounted_config import edge_config_for
from .yaml_lint import check_yamllint

__all__ = [
    "CHECKS", "DEPLOY", "DRAIN_DEADLINE_S", "DRAIN_DELAY_S", "KUBERNETES_VERSIONS", "METRICS", "ROOT", "Doc",
    "EdgeConfig", "Result", "arg_value", "bridge_args", "bridge_errors", "dockerfile_instructions", "edge_config_for",
    "exported_metrics", "hadolint_binary", "helm_renderer", "helm_renderings", "in_process_bridge_errors", "is_edge",
    "k8s_sets", "main", "manifest_set_errors", "offline", "parse_edge_config", "run", "schema_errors", "seconds",
    "summary", "values_comment_errors",
]

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

