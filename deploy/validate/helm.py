"""helm-chart and helm-render: the chart's files and values, and the chart rendered for each scenario
then checked as the manifests are."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from . import common
from .common import Doc, Result, rel
from .k8s_policy import manifest_set_errors
from .k8s_schema import KUBERNETES_VERSIONS, schema_errors

HELM_TEMPLATES = ("deployment.yaml", "service.yaml", "hpa.yaml", "pdb.yaml", "configmap.yaml",
                  "serviceaccount.yaml", "secret-keys.yaml", "redis.yaml", "_helpers.tpl", "NOTES.txt")


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
    chart_dir = common.DEPLOY / "helm" / "ingress"
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
    chart_dir = common.DEPLOY / "helm" / "ingress"
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
    for path in sorted((common.DEPLOY / "helm").glob("values-*.yaml")):
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
