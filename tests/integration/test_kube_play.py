"""The Kubernetes manifests played for real with `podman kube play`: deploy/k8s/sidecar (the edge and the
demo model server sharing a socket), sidecar-vllm (with llama-server where vLLM would be) and standalone.

Each is played as written but for what a single host needs: the image built by this run, one replica
(podman publishes a pod's container ports on the host, so a second replica would find the port taken),
the edge's port published on a free loopback port, and an app container beside the edge in the sidecar
pods, the client a sidecar serves. The probes the manifests declare are then asked as the kubelet would
ask them, since podman turns only liveness probes into health checks, and those through curl.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import llama_engine
import openai
import pytest
import yaml
from podman_images import REPO, Container, Image, Podman, http_get, podman
from redis_servers import free_port

pytestmark = pytest.mark.podman

K8S = REPO / "deploy" / "k8s"
THE_IMAGE = "registry.example.com/ingress:0.1.0"
READY_TIMEOUT = 60.0
# The client beside the edge: waits for SIGTERM (a process with PID 1 dies of no signal it does not handle).
APP = {
    "name": "app",
    "command": ["python", "-c", "import signal; signal.signal(signal.SIGTERM, lambda *_: exit(0)); signal.pause()"],
    "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]}},
}
# What the app runs to ask the edge on localhost: a chat and a stream, plain HTTP, printed as JSON.
CLIENT = """
import json, sys, urllib.request
def post(body):
    request = urllib.request.Request("http://127.0.0.1:8080/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return answer.read().decode()
model, text = sys.argv[1], sys.argv[2]
messages = [{"role": "user", "content": text}]
chat = json.loads(post({"model": model, "messages": messages, "max_tokens": 8}))
events = [line[6:] for line in post({"model": model, "messages": messages, "max_tokens": 8, "stream": True}
                                    ).splitlines() if line.startswith("data: ")]
streamed = "".join(c["delta"].get("content") or "" for e in events[:-1] for c in json.loads(e)["choices"])
print(json.dumps({"chat": chat, "streamed": streamed, "done": events[-1]}))
"""


def documents(directory: str) -> list[dict[str, Any]]:
    return [doc for path in sorted((K8S / directory).glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())
            if doc]


class Played:
    """A directory's manifests as played: the Deployment's pod and its containers."""

    def __init__(self, runner: Podman, tmp: Path, directory: str, image: Image, *, app: bool,
                 engine: dict[str, Any] | None = None, env: dict[str, str] | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        docs = documents(directory)
        # podman plays Pods, Deployments and ConfigMaps; Services, autoscalers and budgets need a cluster.
        played = [doc for doc in docs if doc["kind"] in ("ConfigMap", "Deployment")]
        (self.deployment,) = [doc for doc in played if doc["kind"] == "Deployment"]
        self.deployment["spec"]["replicas"] = 1
        spec = self.deployment["spec"]["template"]["spec"]
        self.port = free_port()
        for container in spec["containers"]:
            if container["image"] == THE_IMAGE:
                container["image"] = image.tag
            if container["name"] == "edge":
                for port in container.get("ports", []):
                    port.update(hostPort=self.port, hostIP="127.0.0.1")
                for var in container.get("env", []):
                    if var["name"] in (env or {}):
                        var["value"] = (env or {})[var["name"]]
            if engine is not None and container["name"] == engine["name"]:
                container.update(engine)
        if app:
            spec["containers"].append({**APP, "image": image.tag})
        if extra is not None:
            spec["containers"].append({**extra, "image": image.tag})
        self.spec = spec
        self.documents = played
        self.manifest = tmp / f"{directory}.yaml"
        self.runner = runner
        self.pod_name = f"{self.deployment['metadata']['name']}-pod-0"
        self.url = f"http://127.0.0.1:{self.port}"

    def play(self) -> Played:
        self.manifest.write_text(yaml.safe_dump_all(self.documents))
        self.runner.play(self.manifest)
        return self

    def container(self, name: str) -> Container:
        return Container(f"{self.pod_name}-{name}")

    def wait_ready(self) -> float:
        started = time.monotonic()
        while time.monotonic() - started < READY_TIMEOUT:
            try:
                if http_get(f"{self.url}/readyz", timeout=1.0)[0] == 200:
                    return time.monotonic() - started
            except OSError:
                pass
            time.sleep(0.1)
        logs = {c["name"]: self.container(c["name"]).logs() for c in self.spec["containers"]}
        pytest.fail(f"{self.pod_name} not ready after {READY_TIMEOUT:.0f} s: {logs}")

    def probe(self, container: dict[str, Any], kind: str) -> tuple[bool, str]:
        """Ask one declared probe as the kubelet would: (answered as declared, what was seen)."""
        probe = container[kind]
        if "httpGet" in probe:
            port = probe["httpGet"]["port"]
            if isinstance(port, str):  # a named port, as the kubelet resolves it
                (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == port]
            (published,) = [p["hostPort"] for p in container["ports"] if p["containerPort"] == port]
            status, _ = http_get(f"http://127.0.0.1:{published}{probe['httpGet']['path']}",
                                 timeout=probe["timeoutSeconds"])
            return 200 <= status < 400, f"GET {probe['httpGet']['path']}: {status}"
        argv = probe["exec"]["command"]
        proc = self.container(container["name"]).exec(*argv, timeout=probe["timeoutSeconds"] + 5.0)
        return proc.returncode == 0, f"{argv[:2]}: exit {proc.returncode} {proc.stderr[-300:]}"

    def probes(self) -> dict[str, tuple[bool, str]]:
        return {f"{c['name']}.{kind}": self.probe(c, kind) for c in self.spec["containers"]
                for kind in ("startupProbe", "livenessProbe", "readinessProbe") if kind in c}

    def stop(self) -> dict[str, int]:
        """Stop the pod within the manifest's grace period (podman's default is 10 s); each container's exit code."""
        grace = self.deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        podman("pod", "stop", "--time", str(grace), self.pod_name, timeout=grace + 30.0)
        return {c["name"]: int(podman("inspect", "--format", "{{.State.ExitCode}}", f"{self.pod_name}-{c['name']}")
                               .stdout.strip()) for c in self.spec["containers"]}


def _ask_from_the_app(played: Played, model: str, text: str) -> dict[str, Any]:
    proc = played.container("app").exec("python", "-c", CLIENT, model, text, timeout=90.0)
    assert proc.returncode == 0, proc.stderr
    answer: dict[str, Any] = json.loads(proc.stdout)
    return answer


def _stops_cleanly(played: Played, runner: Podman) -> None:
    codes = played.stop()
    assert codes == dict.fromkeys(codes, 0)
    down = runner.down(played.manifest)
    assert down.returncode == 0, down.stderr
    assert podman("pod", "exists", played.pod_name, check=False).returncode == 1
    assert [name for name in podman("ps", "--all", "--format", "{{.Names}}").stdout.split()
            if name.startswith(played.pod_name)] == []


@pytest.mark.timeout(180)
def test_the_sidecar_pod_serves_its_app_on_localhost(containers: Podman, podman_image: Image,
                                                     tmp_path: Path) -> None:
    played = Played(containers, tmp_path, "sidecar", podman_image, app=True).play()
    played.wait_ready()
    answer = _ask_from_the_app(played, "ingress-demo", "hello from the app")
    assert answer["chat"]["choices"][0]["message"]["content"] == "hello from the app"
    assert answer["streamed"] == "hello from the app" and answer["done"] == "[DONE]"
    # The edge reached the model server over the socket on the volume they share.
    _, body = http_get(f"{played.url}/readyz")
    assert json.loads(body)["healthy_endpoints"] == {"model": 1}
    stdout, _ = played.container("model").logs()
    assert json.loads(stdout.splitlines()[0])["listen"] == "unix:/sockets/model.sock"
    probes = played.probes()
    assert probes == {name: (True, seen) for name, (_, seen) in probes.items()}
    # The Prometheus annotations name the port and path that serve the metrics.
    annotations = played.deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "8080"
    status, metrics = http_get(f"{played.url}{annotations['prometheus.io/path']}")
    assert status == 200 and b'ingress_requests_total{model="ingress-demo"' in metrics
    _stops_cleanly(played, containers)


def _engine(image: Image, model: Path, server: Path, port: str, served: str) -> dict[str, Any]:
    """llama-server in vLLM's place: the same loopback address, the same served name, the same probes (run
    by the python3 of the edge's image, where the binary and the model are mounted), no GPU asked for."""
    return {
        "name": "vllm",
        "image": image.tag,
        "command": [f"/engine/{server.name}"],
        "args": ["-m", f"/model/{model.name}", "--host", "127.0.0.1", "--port", port,
                 *llama_engine.SERVE_ARGS[2:],  # less its own --alias: the manifest's served name instead
                 "--alias", served],
        "resources": {},
    }


@pytest.mark.timeout(240)
def test_the_vllm_sidecar_pod_serves_through_its_bridge(containers: Podman, podman_image: Image,
                                                        tmp_path: Path, llama_binary: tuple[Path, Path]) -> None:
    server, model = llama_binary
    docs = documents("sidecar-vllm")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (vllm,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"]
    args = vllm["args"]
    served, port = args[args.index("--served-model-name") + 1], args[args.index("--port") + 1]
    assert args[args.index("--host") + 1] == "127.0.0.1"
    engine = _engine(podman_image, model, server, port, served)
    played = Played(containers, tmp_path, "sidecar-vllm", podman_image, app=True, engine=engine)
    volumes = played.spec["volumes"]
    volumes += [{"name": "engine", "hostPath": {"path": str(server.parent), "type": "Directory"}},
                {"name": "model", "hostPath": {"path": str(model.parent), "type": "Directory"}}]
    (vllm_played,) = [c for c in played.spec["containers"] if c["name"] == "vllm"]
    vllm_played["volumeMounts"] += [{"name": "engine", "mountPath": "/engine", "readOnly": True},
                                    {"name": "model", "mountPath": "/model", "readOnly": True}]
    played.play().wait_ready()
    answer = _ask_from_the_app(played, served, "The capital of France is")
    chat = answer["chat"]
    # A real model's words, through the edge, the bridge on its socket and the engine on loopback.
    assert chat["model"] == served and chat["choices"][0]["message"]["content"].strip()
    assert chat["usage"]["completion_tokens"] > 0 and answer["streamed"].strip() and answer["done"] == "[DONE]"
    _, body = http_get(f"{played.url}/readyz")
    assert json.loads(body)["healthy_endpoints"] == {"vllm": 1}
    probes = played.probes()
    assert probes == {name: (True, seen) for name, (_, seen) in probes.items()}
    _stops_cleanly(played, containers)


@pytest.mark.timeout(180)
def test_the_standalone_edge_serves_from_outside_its_pod(containers: Podman, podman_image: Image,
                                                         tmp_path: Path) -> None:
    # The model Service the edge forwards to, in the pod (the demo model server on loopback): the edge's
    # configuration takes its URL from INGRESS_MODEL_URL, as in a cluster.
    model = {"name": "model", "args": ["demo-upstream", "--host", "127.0.0.1", "--port", "9000"],
             "securityContext": APP["securityContext"]}
    played = Played(containers, tmp_path, "standalone", podman_image, app=False,
                    env={"INGRESS_MODEL_URL": "http://127.0.0.1:9000"}, extra=model).play()
    played.wait_ready()
    client = openai.OpenAI(base_url=f"{played.url}/v1", api_key="client-key", max_retries=0, timeout=30.0)
    chat = client.chat.completions.create(model="any-model", messages=[{"role": "user", "content": "standalone"}])
    assert chat.choices[0].message.content == "standalone"
    streamed = client.chat.completions.create(model="any-model", messages=[{"role": "user", "content": "a b c"}],
                                              stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == "a b c"
    probes = played.probes()
    assert probes == {name: (True, seen) for name, (_, seen) in probes.items()}
    _stops_cleanly(played, containers)
