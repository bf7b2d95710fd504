"""deploy/: every check of deploy/validate/ as a test, the invariants the deployment rests on, and
proof that each check fails on the mistake it is there to catch."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _load_validator() -> ModuleType:
    package = DEPLOY / "validate"
    spec = importlib.util.spec_from_file_location("deploy_validate", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


validate = _load_validator()


@pytest.mark.parametrize("name", list(validate.CHECKS))
def test_check(name: str) -> None:
    [result] = validate.run([name])
    if result.skipped:
        pytest.skip(result.skipped)
    assert result.errors == []
    assert result.checked, "the check examined nothing"


def test_the_validator_exits_zero_and_prints_a_summary() -> None:
    run = subprocess.run([sys.executable, str(DEPLOY / "validate")], capture_output=True, text=True,
                         timeout=50, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split() == ["check", "status", "detail"]
    assert {line.split()[0] for line in lines[2:2 + len(validate.CHECKS)]} == set(validate.CHECKS)
    assert lines[-1].endswith(" 0 failed, 0 skipped") or lines[-1].endswith(" 0 failed, 1 skipped")


# --- invariants -----------------------------------------------------------------------------------


Docs = dict[str, dict[str, Any]]


def _deployments() -> Iterator[tuple[str, dict[str, Any], Docs, Docs]]:
    """Every Deployment of an edge (plain manifests, and the chart's renderings when a renderer
    exists), with the ConfigMaps and Secrets deployed beside it."""
    sets: dict[str, list[tuple[str, dict[str, Any]]]] = dict(validate.k8s_sets())
    _, renderings = validate.helm_renderings()
    for scenario, docs in renderings.items():
        assert not isinstance(docs, str), f"helm[{scenario}] does not render: {docs}"
        sets[f"helm[{scenario}]"] = docs
    for where, docs in sets.items():
        configmaps = {d["metadata"]["name"]: d for _, d in docs if d["kind"] == "ConfigMap"}
        secrets = {d["metadata"]["name"]: d for _, d in docs if d["kind"] == "Secret"}
        for _, doc in docs:
            containers = doc["spec"]["template"]["spec"]["containers"] if doc["kind"] == "Deployment" else []
            if any(validate.is_edge(c) for c in containers):
                yield where, doc, configmaps, secrets


def test_grace_period_exceeds_drain_delay_plus_deadline_everywhere() -> None:
    seen = 0
    for where, deployment, configmaps, secrets in _deployments():
        pod = deployment["spec"]["template"]["spec"]
        [edge] = [c for c in pod["containers"] if validate.is_edge(c)]
        config = validate.edge_config_for(pod, edge, configmaps, where, secrets)
        assert config.error is None, config.error
        drain = config.settings.drain
        assert config.drain_total == drain.delay + drain.deadline
        assert pod["terminationGracePeriodSeconds"] > drain.delay + drain.deadline, where
        seen += 1
    assert seen >= 2  # sidecar and standalone at least

    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    edge_config = validate.parse_edge_config((DEPLOY / "compose" / "ingress.toml").read_text(), {}, "compose")
    grace = validate.seconds(compose["services"]["edge"]["stop_grace_period"])
    assert grace > edge_config.drain_total

    values = yaml.safe_load((DEPLOY / "helm" / "ingress" / "values.yaml").read_text())
    assert values["terminationGracePeriodSeconds"] > validate.DRAIN_DELAY_S + validate.DRAIN_DEADLINE_S
    # The sidecar's model server and the bridge outlive the edge's drain, within the grace period.
    for part in ("sidecar", "bridge"):
        assert validate.DRAIN_DELAY_S + validate.DRAIN_DEADLINE_S <= values[part]["preStopSleepSeconds"] \
            < values["terminationGracePeriodSeconds"], part


# --- bridges ----------------------------------------------------------------------------------------


def _pod_of(where: str) -> dict[str, Any]:
    [pod] = [d["spec"]["template"]["spec"] for w, d, _, _ in _deployments() if w == where]
    assert isinstance(pod, dict)
    return pod


def _containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod["containers"]}


def test_beside_vllm_the_edge_reaches_vllm_only_through_the_bridge() -> None:
    pod = _pod_of("deploy/k8s/sidecar-vllm")
    containers = _containers(pod)
    assert set(containers) == {"edge", "bridge", "vllm"}
    edge, bridge, vllm = containers["edge"], containers["bridge"], containers["vllm"]
    configmaps = {d["metadata"]["name"]: d for _, d in validate.k8s_sets()["deploy/k8s/sidecar-vllm"]
                  if d["kind"] == "ConfigMap"}
    config = validate.edge_config_for(pod, edge, configmaps, "sidecar-vllm")
    assert config.error is None, config.error
    groups, routes = config.settings.resolved()
    assert [e.url for g in groups.values() for e in g.endpoints] == ["unix:/run/ingress/bridge.sock"]
    assert validate.bridge_args(bridge) == ["openai", "--target", "http://127.0.0.1:8000",
                                            "--unix", "/run/ingress/bridge.sock"]
    vllm_args = vllm["args"]
    assert vllm["image"].startswith("vllm/vllm-openai:v") and vllm["image"].split(":")[1] != "latest"
    assert validate.arg_value(vllm_args, "--host") == "127.0.0.1"  # nothing outside the pod reaches it
    assert validate.arg_value(vllm_args, "--port") == "8000"
    # The name clients ask for is the one vLLM serves.
    assert [r.model for r in routes] == [validate.arg_value(vllm_args, "--served-model-name")]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert "http://127.0.0.1:8000/health" in " ".join(vllm[probe]["exec"]["command"]), probe
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == vllm["resources"]["requests"]["nvidia.com/gpu"] == 1
    # The edge neither mounts vLLM's volumes nor holds a key: the bridge is its one way to the engine.
    assert {m["name"] for m in edge["volumeMounts"]} & {m["name"] for m in vllm["volumeMounts"]} == set()


def test_the_chart_renders_the_bridge_for_vllm_and_for_a_provider() -> None:
    label, renderings = validate.helm_renderings()
    if label is None:
        pytest.skip("no chart renderer")
    assert {"values-vllm", "values-anthropic"} <= set(renderings)
    vllm = _containers(_pod_of("helm[values-vllm]"))
    assert set(vllm) == {"edge", "bridge", "model"}
    assert vllm["model"]["image"] == "vllm/vllm-openai:v0.33.0"
    assert "readinessProbe" in vllm["model"]
    assert "env" not in vllm["bridge"]  # vLLM on loopback needs no key
    provider = _containers(_pod_of("helm[values-anthropic]"))
    assert set(provider) == {"edge", "bridge"}
    bridge = provider["bridge"]
    args = validate.bridge_args(bridge)
    assert args is not None and args[0] == "anthropic"
    assert validate.arg_value(args, "--max-tokens") == "4096"
    assert validate.arg_value(args, "--api-key-env") == "ANTHROPIC_API_KEY"
    assert bridge["env"] == [{"name": "ANTHROPIC_API_KEY",
                              "valueFrom": {"secretKeyRef": {"name": "anthropic", "key": "api-key"}}}]
    assert "env" not in provider["edge"]  # the key is the bridge's alone


def test_the_chart_refuses_a_bridge_in_front_of_the_demo_model_server() -> None:
    renderer = validate.helm_renderer()
    if renderer is None:
        pytest.skip("no chart renderer")
    _, render = renderer
    with pytest.raises(Exception, match=r"needs sidecar\.image\.repository"):
        render({"sidecar": {"enabled": True}, "bridge": {"enabled": True}})


BRIDGES_EXAMPLE = DEPLOY / "bridges.toml"


def test_the_in_process_example_passes_check_config() -> None:
    run = subprocess.run([sys.executable, "-m", "ingress", "check-config", str(BRIDGES_EXAMPLE)],
                         capture_output=True, text=True, timeout=30, check=False)
    assert run.returncode == 0, run.stderr
    assert "3 groups, 3 endpoints, 3 routes" in run.stdout


def test_the_in_process_example_fronts_openai_anthropic_and_vllm_through_bridges() -> None:
    from ingress.config import load_config

    groups, routes = load_config(BRIDGES_EXAMPLE).resolved()
    bridges = {name: [e.bridge for e in g.endpoints] for name, g in groups.items()}
    assert all(e.url is None for g in groups.values() for e in g.endpoints)  # every endpoint is a bridge
    [openai], [anthropic], [vllm] = bridges["openai"], bridges["anthropic"], bridges["vllm"]
    assert openai is not None and anthropic is not None and vllm is not None
    assert (openai.dialect, openai.target, openai.api_key_env) == ("openai", "https://api.openai.com",
                                                                  "OPENAI_API_KEY")
    assert (anthropic.dialect, anthropic.target, anthropic.api_key_env) == (
        "anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY")
    assert anthropic.max_tokens == 4096
    assert (vllm.dialect, vllm.api_key_env, vllm.api_key_file) == ("openai", None, None)
    assert [(r.prefix or r.model, r.group, r.provider) for r in routes] == [
        ("gpt-", "openai", "openai"), ("claude-", "anthropic", "anthropic"),
        ("qwen2.5-7b-instruct", "vllm", "self_hosted")]


def test_the_in_process_example_will_not_start_without_its_keys() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    run = subprocess.run([sys.executable, "-m", "ingress", "serve", "--config", str(BRIDGES_EXAMPLE),
                          "--host", "127.0.0.1"], capture_output=True, text=True, timeout=30, env=env, check=False)
    assert run.returncode != 0
    assert "OPENAI_API_KEY is not set" in run.stderr


def test_an_edge_running_bridges_needs_their_keys_in_its_environment() -> None:
    from ingress.config import load_config

    settings = load_config(BRIDGES_EXAMPLE)
    edge: dict[str, Any] = {"name": "edge", "env": [{"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {
        "name": "openai", "key": "api-key"}}}]}
    errors = validate.in_process_bridge_errors("edge", edge, settings)
    assert len(errors) == 1 and "ANTHROPIC_API_KEY is not in the edge's environment" in errors[0], errors
    edge["env"].append({"name": "ANTHROPIC_API_KEY", "value": "from-a-secret-in-real-life"})
    assert validate.in_process_bridge_errors("edge", edge, settings) == []


def test_the_readmes_network_form_is_valid() -> None:
    from ingress.config import parse_config

    text = (DEPLOY / "README.md").read_text()
    section = text[text.index("**The bridge as a network service**"):text.index("### Standalone")]
    yamls = re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)
    tomls = re.findall(r"```toml\n(.*?)```", section, re.DOTALL)
    assert len(yamls) == 2 and len(tomls) == 1
    [container] = yaml.safe_load(yamls[0])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vllm"}, "spec": {"containers": [container]}}
    assert validate.schema_errors(pod, "README bridge container") == []
    args = validate.bridge_args(container)
    assert args is not None and validate.arg_value(args, "--host") == "0.0.0.0"
    assert validate.bridge_errors("README", {"containers": [container, {"name": "vllm", "args": [
        "--port", "8000"], "readinessProbe": {"exec": {"command": ["true"]}}}]}, container) == []
    docs = [d for d in yaml.safe_load_all(yamls[1]) if d]
    assert [d["kind"] for d in docs] == ["Service", "NetworkPolicy"]
    for doc in docs:
        assert validate.schema_errors(doc, "README") == []
    service, policy = docs
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
    assert policy["spec"]["podSelector"]["matchLabels"] == service["spec"]["selector"]
    groups, _ = parse_config(tomls[0], {}).resolved()
    [endpoint] = groups["vllm"].endpoints
    assert endpoint.url is not None and endpoint.url.startswith(f"http://{service['metadata']['name']}.")
    assert endpoint.url.endswith(f":{service['spec']['ports'][0]['port']}")


# --- a fleet with keys and limits ------------------------------------------------------------------

TENANCY_EXAMPLE = DEPLOY / "tenancy.toml"
FLEET_ENV = {"REDIS_URL": "redis://10.0.0.5:6379/0", "INGRESS_MODEL_URL": "http://model:9000"}


def test_the_tenancy_example_passes_check_config() -> None:
    run = subprocess.run([sys.executable, "-m", "ingress", "check-config", str(TENANCY_EXAMPLE)],
                         capture_output=True, text=True, timeout=30, env={**os.environ, **FLEET_ENV}, check=False)
    assert run.returncode == 0, run.stderr
    assert "1 groups, 1 endpoints, 1 routes" in run.stdout
    # The store's URL is the environment's, as on Kubernetes: without it the file is refused, naming it.
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {"INGRESS_MODEL_URL": "http://model:9000"}
    run = subprocess.run([sys.executable, "-m", "ingress", "check-config", str(TENANCY_EXAMPLE)],
                         capture_output=True, text=True, timeout=30, env=env, check=False)
    assert run.returncode != 0 and "tenancy.redis.url: environment variable REDIS_URL is not set" in run.stderr


def test_the_tenancy_example_has_keys_limits_prices_and_a_guardrail_on_redis() -> None:
    from ingress.config import load_config
    from ingress.tenancy.policy import Policy

    tenancy = load_config(TENANCY_EXAMPLE, FLEET_ENV).tenancy
    assert tenancy is not None and tenancy.redis is not None
    assert (tenancy.backend, tenancy.redis.url, tenancy.degraded) == ("redis", FLEET_ENV["REDIS_URL"], "local")
    [key] = tenancy.keys
    assert key.tenant == "acme" and key.limits.rpm == 60 and key.limits.concurrency == 4
    acme = tenancy.tenants["acme"]
    assert acme.guardrails is not None and acme.guardrails.max_prompt_tokens == 32000
    assert acme.limits.budget is not None and acme.limits.budget.usd == 50.0
    policy = Policy.load(tenancy)
    mini, llama = policy.model_policy("gpt-4o-mini"), policy.model_policy("llama-3.1-8b")
    assert mini is not None and mini[1].price.output == 0.6
    assert llama is not None and llama == ("llama-*", tenancy.models["llama-*"])  # the glob's


def _fleet(where: str) -> tuple[dict[str, Any], Any]:
    """The edge container of a fleet deployment and its configuration as the edge would read it."""
    [(deployment, configmaps, secrets)] = [(d, c, s) for w, d, c, s in _deployments() if w == where]
    pod = deployment["spec"]["template"]["spec"]
    [edge] = [c for c in pod["containers"] if validate.is_edge(c)]
    config = validate.edge_config_for(pod, edge, configmaps, where, secrets)
    assert config.error is None, config.error
    return edge, config


@pytest.mark.parametrize("where", ["deploy/k8s/fleet", "helm[values-fleet]"])
def test_a_fleet_shares_one_redis_and_reads_its_keys_from_a_secret(where: str) -> None:
    if where.startswith("helm") and validate.helm_renderer() is None:
        pytest.skip("no chart renderer")
    import msgspec

    from ingress.tenancy.policy import Policy
    from ingress.tenancy.settings import KeysFile

    edge, config = _fleet(where)
    tenancy = config.settings.tenancy
    assert tenancy.backend == "redis" and tenancy.degraded == "local"
    assert tenancy.keys == ()  # the keys are in the keys file, not in the ConfigMap
    assert tenancy.keys_file is not None and tenancy.keys_file.startswith("/etc/ingress-keys/")
    # The keys file is the Secret's, read by the edge's own parser: one key of a declared tenant.
    assert config.keys_file is not None and config.notes == []
    keys = msgspec.convert(tomllib.loads(config.keys_file), KeysFile).keys
    assert [(k.tenant, k.models) for k in keys] == [("acme", ("gpt-4o-mini",))]
    assert keys[0].hash.startswith("sha256:") and "sk-ig-" not in config.keys_file
    assert set(tenancy.tenants) == {"acme"}
    with_keys = msgspec.structs.replace(tenancy, keys=keys, keys_file=None)
    mini = Policy.load(with_keys).model_policy("gpt-4o-mini")
    assert mini is not None and mini[1].limits.tpm == 2_000_000
    assert len(Policy.load(with_keys).keyring) == 1
    # The one Redis, by its Service, on its port.
    [redis_env] = [e for e in edge["env"] if e["name"] == "REDIS_URL"]
    assert tenancy.redis.url == redis_env["value"]
    renderings = {f"helm[{k}]": v for k, v in validate.helm_renderings()[1].items()}
    sets: dict[str, Any] = {**validate.k8s_sets(), **renderings}
    docs = sets[where]
    assert not isinstance(docs, str)
    kinds = {(d["kind"], d["metadata"]["name"]) for _, d in docs}
    host = tenancy.redis.url.split("//")[1].split(":")[0]
    assert ("Service", host) in kinds and ("Deployment", host) in kinds and ("NetworkPolicy", host) in kinds
    [hpa] = [d for _, d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["spec"]["minReplicas"] == 3


def _render(values: dict[str, Any]) -> list[dict[str, Any]]:
    renderer = validate.helm_renderer()
    if renderer is None:
        pytest.skip("no chart renderer")
    return [d for d in yaml.safe_load_all(renderer[1](values)) if d]


def _fleet_values(**tenancy: Any) -> dict[str, Any]:
    values = yaml.safe_load((DEPLOY / "helm" / "values-fleet.yaml").read_text())
    values["tenancy"].update(tenancy)
    return dict(values)


def _pod_annotations(docs: list[dict[str, Any]]) -> dict[str, str]:
    [edge] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "edge-ingress"]
    return dict(edge["spec"]["template"]["metadata"]["annotations"])


def test_the_chart_rolls_the_pods_when_the_keys_change_and_only_then() -> None:
    values = _fleet_values()
    before = _pod_annotations(_render(values))
    values["tenancy"]["keys"][0]["limits"]["rpm"] = 61
    after = _pod_annotations(_render(values))
    assert before["checksum/keys"] != after["checksum/keys"]
    assert before["checksum/config"] == after["checksum/config"]  # the keys are not in the configuration
    values["tenancy"]["degraded"] = "refuse"
    assert _pod_annotations(_render(values))["checksum/keys"] == after["checksum/keys"]


def test_the_chart_mounts_a_keys_secret_of_your_own_and_takes_the_store_url_from_a_secret() -> None:
    docs = _render(_fleet_values(keysSecret="acme-keys", redis={"existingSecret": {"name": "store", "key": "url"}}))
    assert not any(d["kind"] == "Secret" for d in docs)  # the chart makes no keys Secret of its own
    assert "checksum/keys" not in _pod_annotations(docs)  # and cannot see yours change
    [edge] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "edge-ingress"]
    pod = edge["spec"]["template"]["spec"]
    assert {"name": "keys", "secret": {"secretName": "acme-keys"}} in pod["volumes"]
    container = pod["containers"][0]
    assert {"name": "REDIS_URL", "valueFrom": {"secretKeyRef": {"name": "store", "key": "url"}}} in container["env"]
    errors, [config] = validate.manifest_set_errors([("helm", d) for d in docs])
    # The chart's own Redis is deployed (values-fleet) but the edges were sent elsewhere: said so.
    assert errors == ["Service/edge-ingress-redis: a limit store that no edge's tenancy.redis.url names"]
    assert config.error is None and len(config.notes) == 2
    assert "REDIS_URL from Secret store[url], not among the manifests" in config.notes[0]
    assert "keys file from Secret acme-keys, not among the manifests: not checked" in config.notes[1]


def test_the_chart_renders_tenancy_values_as_the_toml_they_mean() -> None:
    from ingress.config import parse_config

    pattern = r"TCK-\d{6}"
    values = _fleet_values(
        tenants={"acme": {"limits": {"tpm": 2_000_000, "budget": {"usd": 12.5}},
                          "guardrails": {"patterns": [{"name": "ticket", "regex": pattern, "action": "redact"}],
                                         "blocked_terms": ['say "no"']}}},
        models={"qwen2.5-*": {"price": {"input": 0.05}}}, leaseTtl=12.5)
    [cm] = [d for d in _render(values) if d["kind"] == "ConfigMap"]
    text = cm["data"]["ingress.toml"]
    assert "e+06" not in text
    settings = parse_config(text.replace('keys_file = "/etc/ingress-keys/keys.toml"\n', ""),
                            {"REDIS_URL": "redis://r:6379/0"})
    tenancy = settings.tenancy
    assert tenancy is not None and tenancy.lease_ttl == 12.5
    acme = tenancy.tenants["acme"]
    assert acme.limits.tpm == 2_000_000 and acme.limits.budget is not None and acme.limits.budget.usd == 12.5
    assert acme.guardrails is not None and acme.guardrails.patterns[0].regex == pattern
    assert acme.guardrails.blocked_terms == ('say "no"',)
    assert tenancy.models["qwen2.5-*"].price.input == 0.05


@pytest.mark.parametrize(("values", "message"), [
    ({"tenancy": {"enabled": True}}, "tenancy.backend redis needs a store"),
    ({"tenancy": {"enabled": True, "backend": "memory"}, "autoscaling": {"enabled": False},
      "config": '[groups.g]\nendpoints = [{ url = "http://m:9000" }]\n\n[tenancy]\nbackend = "memory"\n'},
     "`config` has one already"),
])
def test_the_chart_refuses_tenancy_it_cannot_render(values: dict[str, Any], message: str) -> None:
    renderer = validate.helm_renderer()
    if renderer is None:
        pytest.skip("no chart renderer")
    with pytest.raises(Exception, match=re.escape(message)):
        renderer[1](values)


def test_a_memory_backend_behind_an_autoscaler_is_refused() -> None:
    docs = _render({"tenancy": {"enabled": True, "backend": "memory"}})
    errors, _ = validate.manifest_set_errors([("helm", d) for d in docs])
    assert len(errors) == 1 and 'tenancy.backend "memory" in several pods' in errors[0], errors
    docs = _render({"tenancy": {"enabled": True, "backend": "memory"}, "autoscaling": {"enabled": False},
                    "replicaCount": 1, "podDisruptionBudget": {"enabled": False}})
    assert validate.manifest_set_errors([("helm", d) for d in docs])[0] == []


def _image_user() -> str:
    instructions = validate.dockerfile_instructions((DEPLOY / "Dockerfile").read_text())
    final = instructions[max(i for i, (word, _) in enumerate(instructions) if word == "FROM"):]
    users = [rest for word, rest in final if word == "USER"]
    assert users, "the final stage sets no USER"
    return str(users[-1])


def test_the_image_runs_as_a_numeric_non_root_user_that_the_manifests_name() -> None:
    uid, _, gid = _image_user().partition(":")
    assert uid.isdigit() and int(uid) != 0
    assert gid.isdigit() and int(gid) != 0
    values = yaml.safe_load((DEPLOY / "helm" / "ingress" / "values.yaml").read_text())
    contexts = [values["podSecurityContext"]] + [
        d["spec"]["template"]["spec"]["securityContext"] for _, d, _, _ in _deployments()]
    for context in contexts:
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] == int(uid)
        assert context["runAsGroup"] == context["fsGroup"] == int(gid)


def test_every_values_key_has_a_comment_on_the_line_above() -> None:
    path = DEPLOY / "helm" / "ingress" / "values.yaml"
    lines = path.read_text().splitlines()
    keys = 0

    def walk(node: yaml.Node) -> None:
        nonlocal keys
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                keys += 1
                assert lines[key.start_mark.line - 1].lstrip().startswith("#"), f"values.yaml: {key.value}"
                walk(value)

    walk(yaml.compose(path.read_text()))
    assert keys > 50
    assert validate.values_comment_errors(path) == []


def test_the_dashboard_queries_the_exported_metrics_only() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "ingress-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets") or [])
    for name, kind in validate.METRICS.items():
        assert name in exprs, name
        if kind == "histogram":
            assert f"{name}_bucket" in exprs
    exported = validate.exported_metrics()
    assert exported == validate.METRICS  # each way: a metric the edge gains must reach the dashboard


def test_the_dashboard_shows_the_tenancy_metrics_by_the_selected_tenant() -> None:
    from prometheus_client.metrics import MetricWrapperBase

    from ingress import metrics

    dashboard = json.loads((DEPLOY / "grafana" / "ingress-dashboard.json").read_text())
    panels = dashboard["panels"]
    [start] = [i for i, p in enumerate(panels) if p["type"] == "row" and p["title"] == "Keys and limits"]
    end = next((i for i, p in enumerate(panels) if i > start and p["type"] == "row"), len(panels))
    in_row = panels[start + 1:end]
    assert len(in_row) >= 10 and all(p["gridPos"]["y"] > panels[start]["gridPos"]["y"] for p in in_row)
    exprs = " ".join(t["expr"] for p in in_row for t in p["targets"])
    shown: tuple[MetricWrapperBase | metrics.BulkHistogram, ...] = (
        metrics.ADMISSIONS, metrics.LIMITED, metrics.TOKENS_RESERVED, metrics.TOKENS_SETTLED, metrics.TOKENS_REFUNDED,
        metrics.PROMPT_COUNTED, metrics.LEASES_EXPIRED, metrics.STORE_LATENCY, metrics.STORE_ERRORS,
        metrics.BREAKER_OPEN)
    for metric in shown:
        [family] = metric.describe()
        assert family.name in exprs, family.name
    assert 'ingress_rejections_total{job=~"$job", instance=~"$instance", reason="prompt_blocked"}' in exprs
    assert 'ingress_tokens_total{job=~"$job", instance=~"$instance", kind="prompt"}' in exprs
    # Every query of a metric labelled by tenant follows the $tenant variable, which lists the tenants seen.
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert "ingress_admissions_total" in variables["tenant"]["definition"]
    assert variables["tenant"]["includeAll"] and variables["tenant"]["allValue"] == ".*"
    by_tenant = {m._name for m in vars(metrics).values()
                 if isinstance(m, MetricWrapperBase) and "tenant" in m._labelnames}
    assert len(by_tenant) == 5
    for panel in dashboard["panels"]:
        for target in panel.get("targets") or []:
            for name, matchers in re.findall(r"\b(ingress_\w+)\{([^}]*)\}", target["expr"]):
                if name.removesuffix("_total") in by_tenant:
                    assert 'tenant=~"$tenant"' in matchers, (panel["title"], name)


def test_the_grafana_check_wants_every_exported_metric_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    [before] = validate.run(["grafana"])
    assert before.errors == []
    monkeypatch.delitem(validate.METRICS, "ingress_limit_breaker_open")
    [after] = validate.run(["grafana"])
    assert ("ingress/metrics/ exports ingress_limit_breaker_open, which METRICS does not list: add it, and a panel "
            "for it") in after.errors


def test_kubernetes_validate_ships_the_versions_validated_against() -> None:
    import kubernetes_validate.utils as kv

    shipped = {".".join(v.split(".")[:2]) for v in kv.all_versions()}
    assert set(validate.KUBERNETES_VERSIONS) <= shipped


def test_the_validator_runs_offline() -> None:
    with validate.offline():
        with pytest.raises(OSError, match="offline"):
            socket.create_connection(("127.0.0.1", 9), timeout=1)
        with socket.socket(socket.AF_INET) as s, pytest.raises(OSError, match="offline"):
            s.connect(("127.0.0.1", 9))
        left, right = socket.socketpair()  # Unix sockets stay usable
        left.close()
        right.close()


# --- each check catches its mistakes --------------------------------------------------------------


@pytest.fixture
def deploy_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of deploy/ that the validator reads instead of the real one."""
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(validate.common, "DEPLOY", copy)  # every check reads deploy/ from there
    return copy


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path.name} no longer contains {old!r}: update the test"
    path.write_text(text.replace(old, new, 1))


Mutation = tuple[str, str, str, str, str]  # check, file, old text, new text, expected error
MUTATIONS: dict[str, Mutation] = {
    "grace-period": ("k8s-policy", "k8s/standalone/deployment.yaml", "terminationGracePeriodSeconds: 45",
                     "terminationGracePeriodSeconds: 30", "does not exceed drain.delay + drain.deadline"),
    "no-readiness-probe": ("k8s-policy", "k8s/sidecar/deployment.yaml", "readinessProbe:", "readinessProbeX:",
                           "no readinessProbe"),
    "capabilities-kept": ("k8s-policy", "k8s/standalone/deployment.yaml", "drop:\n                - ALL",
                          "drop:\n                - NET_RAW", "capabilities.drop does not include ALL"),
    "unknown-field": ("k8s-schema", "k8s/standalone/deployment.yaml", "readOnlyRootFilesystem: true",
                      "readOnlyRootFileSystem: true", "'readOnlyRootFileSystem' was unexpected"),
    "bad-config": ("k8s-policy", "k8s/standalone/configmap.yaml", "endpoints = [", "endpoint = [",
                   "unknown field"),
    "socket-mismatch": ("k8s-policy", "k8s/sidecar/deployment.yaml", "- --unix\n            - /sockets/model.sock",
                        "- --unix\n            - /sockets/other.sock", "no other container serves"),
    "hpa-target": ("k8s-policy", "k8s/standalone/hpa.yaml", "    name: ingress\n  minReplicas",
                   "    name: ingres\n  minReplicas", "scaleTargetRef names no Deployment"),
    "too-many-workers": ("k8s-policy", "k8s/standalone/deployment.yaml", '- --workers\n            - "2"',
                         '- --workers\n            - "8"', "exceeds the CPU limit"),
    "knative-tmp": ("knative", "knative/service.yaml", "mountPath: /run/ingress", "mountPath: /tmp",
                    "reserved by Knative"),
    "knative-timeout": ("knative", "knative/service.yaml", "timeoutSeconds: 3600", "timeoutSeconds: 600",
                        "cuts streams"),
    "compose-grace": ("compose", "compose.yaml", "stop_grace_period: 45s", "stop_grace_period: 30s",
                      "does not exceed drain.delay + drain.deadline"),
    "compose-upstream": ("compose", "compose/ingress.toml", "http://demo:9000", "http://model:9000",
                         "is not a service of compose.yaml"),
    "compose-schema": ("compose", "compose.yaml", "stop_grace_period:", "stop_grace_periods:",
                       "'stop_grace_periods' was unexpected"),
    "root-user": ("dockerfile", "Dockerfile", "USER 10001:10001", "USER root", "not a numeric non-root UID"),
    "unpinned-base": ("dockerfile", "Dockerfile", "ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm",
                      "ARG PYTHON_IMAGE=python:latest", "not a pinned python:3.11 slim tag"),
    "uncommented-value": ("helm-chart", "helm/ingress/values.yaml",
                          "  # Registry and repository.\n  repository: registry", "  repository: registry",
                          "key 'repository' has no comment on the line above"),
    "unknown-value": ("helm-chart", "helm/ingress/templates/service.yaml", ".Values.service.type",
                      ".Values.service.typ", ".Values.service.typ is not a key"),
    "unknown-metric": ("grafana", "grafana/ingress-dashboard.json", "ingress_retries_total",
                       "ingress_retry_total", "ingress_retry_total is not a metric the edge exports"),
    "unselected-instance": ("grafana", "grafana/ingress-dashboard.json",
                            'ingress_leases_expired_total{job=~\\"$job\\", instance=~\\"$instance\\"}',
                            'ingress_leases_expired_total{job=~\\"$job\\"}',
                            'ingress_leases_expired_total is not selected by instance=~"$instance"'),
    "variable-metric": ("grafana", "grafana/ingress-dashboard.json", "label_values(ingress_admissions_total{",
                        "label_values(ingress_admission_total{",
                        "variable $tenant: ingress_admission_total is not a metric the edge exports"),
    "unknown-tenant-variable": ("grafana", "grafana/ingress-dashboard.json", 'tenant=~\\"$tenant\\"',
                                'tenant=~\\"$tenants\\"', "unknown variable $tenants"),
    "yaml-style": ("yamllint", "k8s/standalone/service.yaml", "type: ClusterIP", "type: ClusterIP   ",
                   "trailing spaces"),
    "bridge-dialect": ("k8s-policy", "k8s/sidecar-vllm/deployment.yaml", "- bridge\n            - openai",
                       "- bridge\n            - openia", "dialect: Invalid enum value 'openia'"),
    "bridge-key-missing": ("k8s-policy", "k8s/sidecar-vllm/deployment.yaml", "- --target\n            - http",
                           "- --api-key-env\n            - ENGINE_API_KEY\n            - --target\n            - http",
                           "--api-key-env ENGINE_API_KEY is not in the container's environment"),
    "bridge-target-port": ("k8s-policy", "k8s/sidecar-vllm/deployment.yaml", "- http://127.0.0.1:8000",
                           "- http://127.0.0.1:8001", "no other container of the pod listens on port 8001"),
    "bridge-no-probe": ("k8s-policy", "k8s/sidecar-vllm/deployment.yaml",
                        "- /run/ingress/bridge.sock\n          # The kubelet cannot send an HTTP probe to a Unix "
                        "socket: ask /healthz over it from the\n          # container's own interpreter. It tells "
                        "that the bridge serves, not that vLLM does.\n          startupProbe:",
                        "- /run/ingress/bridge.sock\n          startupProbeX:", "the bridge has no startupProbe"),
    "engine-not-ready": ("k8s-policy", "k8s/sidecar-vllm/deployment.yaml",
                         "(a pod is ready only when every container is).\n          readinessProbe:",
                         "(a pod is ready only when every container is).\n          readinessProbeX:",
                         "the engine's container vllm has no readinessProbe"),
    "bridge-stops-first": ("k8s-policy", "k8s/sidecar-vllm/deployment.yaml", "seconds: 35", "seconds: 20",
                           "container bridge: stops before the edge's drain ends"),
    "chart-bridge-port": ("helm-render", "helm/values-vllm.yaml", "target: http://127.0.0.1:8000",
                          "target: http://127.0.0.1:8001", "no other container of the pod listens on port 8001"),
    "chart-engine-stops-first": ("helm-render", "helm/values-vllm.yaml", "bridge:\n  enabled: true",
                                 "  preStopSleepSeconds: 0\nbridge:\n  enabled: true",
                                 "container model: stops before the edge's drain ends"),
    "keys-subpath": ("k8s-policy", "k8s/fleet/deployment.yaml", "mountPath: /etc/ingress-keys\n",
                     "mountPath: /etc/ingress-keys/keys.toml\n              subPath: keys.toml\n",
                     "is mounted with subPath: the kubelet never updates it"),
    "keys-unmounted": ("k8s-policy", "k8s/fleet/configmap.yaml", 'keys_file = "/etc/ingress-keys/keys.toml"',
                       'keys_file = "/etc/ingress/keys.toml"', "is on a configMap volume, not a Secret"),
    "keys-bad-tenant": ("k8s-policy", "k8s/fleet/secret.yaml", 'tenant = "acme"', 'tenant = "acne"',
                        "no tenant named 'acne'"),
    "keys-bad-limit": ("k8s-policy", "k8s/fleet/secret.yaml", "rpm = 60", "rpms = 60", "unknown field"),
    "redis-port": ("k8s-policy", "k8s/fleet/deployment.yaml", "redis://ingress-redis:6379/0",
                   "redis://ingress-redis:6380/0", "Service ingress-redis has no port 6380"),
    "redis-two": ("k8s-policy", "k8s/fleet/redis.yaml", "replicas: 1", "replicas: 2", "exactly one replica"),
    "redis-rolling": ("k8s-policy", "k8s/fleet/redis.yaml", "type: Recreate", "type: RollingUpdate",
                      "strategy must be Recreate"),
    "redis-evicts": ("k8s-policy", "k8s/fleet/redis.yaml", "- noeviction", "- allkeys-lru",
                     "--maxmemory-policy must be noeviction"),
    "redis-unguarded": ("k8s-policy", "k8s/fleet/redis.yaml", "instance: fleet", "instance: flet",
                        "an ingress podSelector matches no Deployment's pods"),
    "fleet-memory": ("k8s-policy", "k8s/fleet/configmap.yaml", 'backend = "redis"\n    redis = { url = "${REDIS_URL}", '
                     'deadline_ms = 50, breaker = { failures = 3, open_for = 2.0 } }', 'backend = "memory"',
                     'tenancy.backend "memory" in several pods'),
    "chart-keys-subpath": ("helm-render", "helm/ingress/templates/deployment.yaml",
                           'mountPath: {{ include "ingress.keysDir" . }}\n',
                           'mountPath: {{ include "ingress.keysDir" . }}/keys.toml\n              subPath: keys.toml\n',
                           "is mounted with subPath"),
    "chart-redis-port": ("helm-render", "helm/ingress/templates/_helpers.tpl", 'printf "redis://%s:6379/0"',
                         'printf "redis://%s:6378/0"', "has no port 6378"),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_the_check_catches(mutation: str, deploy_copy: Path) -> None:
    check, file, old, new, expected = MUTATIONS[mutation]
    [before] = validate.run([check])
    assert before.errors == []
    _edit(deploy_copy / file, old, new)
    [after] = validate.run([check])
    assert any(expected in error for error in after.errors), after.errors


def test_hadolint_reports_findings(deploy_copy: Path) -> None:
    if validate.hadolint_binary() is None:
        pytest.fail("hadolint is a dev dependency: pip install -e '.[dev]'")
    _edit(deploy_copy / "Dockerfile", "WORKDIR /src\n", "WORKDIR src\nRUN cd /src && ls\n")
    [result] = validate.run(["dockerfile"])
    codes = " ".join(result.errors)
    assert "DL3000" in codes  # relative WORKDIR
    assert "DL3003" in codes  # cd instead of WORKDIR

