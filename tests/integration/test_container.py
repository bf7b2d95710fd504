"""The edge's image, built from deploy/Dockerfile and run as the manifests run it: UID 10001, a read-only
root file system with a tmpfs /tmp, no capabilities, two workers, the image's default configuration
(the built-in demo model), reached through a port published on loopback."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import anthropic
import openai
import pytest
from podman_images import Container, Image, Podman, http_get, podman
from prometheus_client.parser import text_string_to_metric_families
from redis_servers import free_port

pytestmark = pytest.mark.podman

MODEL = "ingress-demo"
READY_TIMEOUT = 30.0
FOLD_S = 1.5  # a worker's counts reach /metrics within a second (ingress/metrics/), whichever worker scrapes
# How the manifests run the edge (deploy/k8s/*/deployment.yaml): their securityContext, their /tmp
# emptyDir, their arguments.
AS_THE_MANIFESTS = (
    "--user", "10001:10001", "--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp:rw,size=64m,mode=1777",
    "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
)
SERVE = ("serve", "--config", "/etc/ingress/ingress.toml", "--host", "0.0.0.0", "--port", "8080", "--workers", "2")
# What podman itself writes into a container's file system: mount points for the files it provides.
PODMANS_OWN = {"/etc", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/run", "/run/.containerenv"}


@dataclass
class Edge:
    container: Container
    url: str
    cold_start_s: float


def wait_ready(url: str, container: Container, timeout: float = READY_TIMEOUT) -> float:
    """Seconds until GET /readyz answers 200; fails with the container's output if it never does."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if http_get(f"{url}/readyz", timeout=1.0)[0] == 200:
                return time.monotonic() - started
        except OSError:  # refused, or reset while the container's port forwarding comes up
            pass
        time.sleep(0.05)
    stdout, stderr = container.logs()
    pytest.fail(f"{container.name} not ready after {timeout:.0f} s:\n{stdout[-3000:]}\n{stderr[-3000:]}")


def say(request: pytest.FixtureRequest, line: str) -> None:
    """A figure for the run's output, whatever pytest captures."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)


@pytest.fixture(scope="module")
def edge(request: pytest.FixtureRequest, podman_image: Image) -> Iterator[Edge]:
    """The image with its default configuration, for the whole module."""
    runner = Podman(f"ingress-test-image-{free_port()}")
    port = free_port()
    try:
        started = time.monotonic()
        container = runner.run("edge", *AS_THE_MANIFESTS, "--publish", f"127.0.0.1:{port}:8080", podman_image.tag,
                               *SERVE)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, container)
        cold_start = time.monotonic() - started
        say(request, f"image {podman_image.tag}: {podman_image.size_bytes / 1e6:.0f} MB; cold start to ready "
                     f"{cold_start:.2f} s (podman run to the first 200 on /readyz)")
        yield Edge(container, url, cold_start)
    finally:
        runner.close()


def test_it_runs_unprivileged_and_answers_its_probes(edge: Edge, podman_image: Image) -> None:
    assert edge.container.exec("id", "-u").stdout.strip() == "10001"
    host_config = edge.container.inspect()["HostConfig"]
    assert isinstance(host_config, dict) and host_config["ReadonlyRootfs"] is True
    status, body = http_get(f"{edge.url}/healthz")
    assert status == 200
    status, body = http_get(f"{edge.url}/readyz")
    assert status == 200 and json.loads(body)["status"] == "ready"
    # The image's own HEALTHCHECK (python's urllib, no curl in the image), run as the engine would.
    healthcheck = podman("healthcheck", "run", edge.container.name, check=False)
    assert healthcheck.returncode == 0, healthcheck.stdout + healthcheck.stderr
    assert edge.cold_start_s < READY_TIMEOUT
    assert 50e6 < podman_image.size_bytes < 1e9


def test_the_openai_sdk_chats_streams_and_uses_responses(edge: Edge) -> None:
    client = openai.OpenAI(base_url=f"{edge.url}/v1", api_key="client-key", max_retries=0, timeout=10.0)
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello from a box"}])
    assert chat.choices[0].message.content == "hello from a box" and chat.choices[0].finish_reason == "stop"
    assert chat.usage is not None and chat.usage.completion_tokens == 4

    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "one two three"}],
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3

    response = client.responses.create(model=MODEL, input="a response, please", instructions="Be brief.")
    assert response.status == "completed" and response.output_text == "a response, please"


def test_the_anthropic_sdk_sends_messages(edge: Edge) -> None:
    client = anthropic.Anthropic(base_url=edge.url, api_key="client-key", max_retries=0, timeout=10.0)
    message = client.messages.create(model=MODEL, max_tokens=64,
                                     messages=[{"role": "user", "content": "hello, Messages"}])
    assert message.content[0].type == "text" and message.content[0].text == "hello, Messages"
    assert message.stop_reason == "end_turn" and message.usage.output_tokens == 2
    with client.messages.stream(model=MODEL, max_tokens=64,
                                messages=[{"role": "user", "content": "streamed words"}]) as stream:
        assert "".join(stream.text_stream) == "streamed words"
        assert stream.get_final_message().stop_reason == "end_turn"


def _requests_served(url: str) -> float:
    _, body = http_get(f"{url}/metrics")
    return sum(sample.value for family in text_string_to_metric_families(body.decode())
               if family.name == "ingress_requests" for sample in family.samples
               if sample.name == "ingress_requests_total" and sample.labels.get("model") == MODEL
               and sample.labels.get("status") == "200")


def test_prometheus_counts_every_request_across_workers(edge: Edge) -> None:
    time.sleep(FOLD_S)  # the earlier tests' counts all folded in: a baseline that stays put
    before = _requests_served(edge.url)
    client = openai.OpenAI(base_url=f"{edge.url}/v1", api_key="client-key", max_retries=0, timeout=10.0)
    for n in range(6):  # new connections: the two workers share them
        client.with_options(max_retries=0).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"count {n}"}], extra_headers={"connection": "close"})
    time.sleep(FOLD_S)
    assert _requests_served(edge.url) - before == 6
    _, body = http_get(f"{edge.url}/metrics")
    names = {family.name for family in text_string_to_metric_families(body.decode())}
    assert {"ingress_request_duration_seconds", "ingress_tokens", "ingress_in_flight"} <= names


def test_the_access_log_is_json_on_stdout(edge: Edge) -> None:
    client = openai.OpenAI(base_url=f"{edge.url}/v1", api_key="client-key", max_retries=0, timeout=10.0)
    answer = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "log this"}])
    request_id = answer.headers["x-request-id"]
    deadline = time.monotonic() + 5.0
    while True:
        stdout, stderr = edge.container.logs()
        lines = [json.loads(line) for line in stdout.splitlines()]  # every line is one JSON object
        mine = [line for line in lines if line.get("request_id") == request_id]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert stderr == ""
    assert [(m["event"], m["path"], m["status"], m["outcome"], m["model"]) for m in mine] == [
        ("request", "/v1/chat/completions", 200, "ok", MODEL)]
    assert "log this" not in stdout  # never a prompt's text
    assert {line["event"] for line in lines} >= {"starting", "worker started", "ready"}


def test_nothing_is_written_outside_tmp(edge: Edge) -> None:
    # The requests above ran under a read-only root: the edge's own files (workers' metrics, the embedded
    # demo's socket) went to /tmp, and the container's file system holds nothing new of its own.
    in_tmp = {name.rsplit("-", 1)[0] for name in edge.container.exec("ls", "/tmp").stdout.split()}
    assert in_tmp == {"ingress-metrics", "ingress-inner"}
    changed = {line.split(maxsplit=1)[1] for line in edge.container.diff()}
    assert changed - PODMANS_OWN == set()
    refused = edge.container.exec("python", "-c", "open('/opt/ingress/x', 'w')")
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr


@pytest.mark.timeout(120)
def test_sigterm_drains_an_in_flight_stream_and_exits_0(
    containers: Podman, podman_image: Image, request: pytest.FixtureRequest
) -> None:
    """SIGTERM while a stream flows: unready at once, the stream finishes whole, the container exits 0."""
    port = free_port()
    pod = containers.pod("drain", "--publish", f"127.0.0.1:{port}:8080")
    # A slow model in the pod (150 ms a token) so that the stream outlives drain.delay (5 s).
    containers.run("model", "--pod", pod, *AS_THE_MANIFESTS, podman_image.tag,
                   "demo-upstream", "--host", "127.0.0.1", "--port", "9000", "--delay-ms", "150")
    edge = containers.run("edge", "--pod", pod, *AS_THE_MANIFESTS, podman_image.tag, *SERVE,
                          "--upstream", "http://127.0.0.1:9000")
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, edge)
    words = [f"w{n}" for n in range(50)]  # 50 tokens: 7.5 s
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="client-key", max_retries=0, timeout=30.0)
    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": " ".join(words)}],
                                            stream=True)
    received: list[str] = []
    chunks = iter(stream)
    while not received:
        chunk = next(chunks)
        received.extend(c.delta.content for c in chunk.choices if c.delta.content)
    signalled = time.monotonic()
    edge.signal("TERM")
    status, body = http_get(f"{url}/readyz")
    assert (status, json.loads(body)["draining"]) == (503, True)  # still accepting, unready
    finish = None
    for chunk in chunks:
        for choice in chunk.choices:
            received.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(received).split() == words and finish == "stop"
    code = edge.wait(timeout=60.0)
    stopped = time.monotonic() - signalled
    assert code == 0
    assert stopped < 5.0 + 30.0  # drain.delay + drain.deadline
    say(request, f"SIGTERM during a stream: the stream finished whole, the container exited 0 {stopped:.1f} s later")
    stdout, stderr = edge.logs()
    lines = [json.loads(line) for line in stdout.splitlines()]
    streamed = [line for line in lines if line.get("path") == "/v1/chat/completions"]
    assert [(s["status"], s["outcome"], s["stream"], s["completion_tokens"]) for s in streamed] == [
        (200, "ok", True, 50)]
    assert lines[-1]["event"] == "all workers stopped" and stderr == ""
