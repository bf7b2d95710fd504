"""ingress.metrics: the build gauge, the GC hook, the event loop's task count, the exposition of one
process or of several, and a stream's gaps counted as observing each would (buckets and count; the sum
up to float rounding).

The multi-process case runs real processes: prometheus_client picks file-backed values at import
time from PROMETHEUS_MULTIPROC_DIR, as a worker started by the supervisor does.
"""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import subprocess
import sys
import textwrap
import threading
from importlib import metadata
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.parser import text_string_to_metric_families
from waiting import eventually

from ingress import __version__, metrics
from ingress.metrics import CHUNK, Gaps, gcpauses
from ingress.serve.app import fold_metrics_forever

ROOT = Path(__file__).resolve().parents[2]


def test_build_info_is_one_series_set_to_one() -> None:
    metrics.set_build_info()
    labels = {"version": __version__, "python": platform.python_version(),
              "flatbuffers": metadata.version("flatbuffers")}
    assert REGISTRY.get_sample_value("ingress_build_info", labels) == 1
    series = [s for f in REGISTRY.collect() if f.name == "ingress_build_info" for s in f.samples]
    assert len(series) == 1


def test_gc_recorder_times_each_collection_by_generation() -> None:
    def value(name: str, labels: dict[str, str] | None = None) -> float:
        return REGISTRY.get_sample_value(name, labels or {}) or 0.0

    # No collection between the readings: the process's own recorder (see record_gc) would count it.
    enabled = gc.isenabled()
    gc.disable()
    try:
        count, total = value("ingress_gc_pause_seconds_count"), value("ingress_gc_pause_seconds_sum")
        fast = value("ingress_gc_pause_seconds_bucket", {"le": "0.005"})
        gen1 = value("ingress_gc_collections_total", {"generation": "1"})
        recorder = metrics.GcRecorder()
        with mock.patch("time.perf_counter", side_effect=[10.0, 10.004]):
            recorder("start", {"generation": 1})
            recorder("stop", {"generation": 1, "collected": 0, "uncollectable": 0})
        assert value("ingress_gc_pause_seconds_count") == count  # noted, recorded at the next flush
        recorder.flush()
        metrics.fold()
        assert value("ingress_gc_pause_seconds_count") == count + 1
        assert abs(value("ingress_gc_pause_seconds_sum") - total - 0.004) < 1e-9
        assert value("ingress_gc_pause_seconds_bucket", {"le": "0.005"}) == fast + 1
        assert value("ingress_gc_collections_total", {"generation": "1"}) == gen1 + 1
    finally:
        if enabled:
            gc.enable()


def test_a_collection_inside_a_metric_update_does_not_wait_for_the_metric_lock() -> None:
    """prometheus-client's locks are not reentrant, and a collection can start inside any allocation, one
    made while a metric's lock is held included (in multiprocess mode one lock guards every value, and a new
    labelled child allocates under it). The hook must not take a lock: here the pause histogram's own is
    held by another thread; a hook that observed into it would block until that thread let go."""
    recorder = metrics.GcRecorder()
    lock = metrics.GC_PAUSE._sum._lock  # single-process mode: each value has its own Lock
    done = threading.Event()

    def collection() -> None:
        recorder("start", {"generation": 0})
        recorder("stop", {"generation": 0, "collected": 0, "uncollectable": 0})
        done.set()

    with lock:
        worker = threading.Thread(target=collection, daemon=True)
        worker.start()
        finished = done.wait(5)
    worker.join(5)
    assert finished, "the GC hook waited for a metric's lock"
    assert len(recorder.pending) == 1
    recorder.flush()
    assert recorder.pending == []


async def test_the_noted_collections_reach_the_metrics_every_second_and_on_each_scrape() -> None:
    metrics.record_gc()
    recorder = gcpauses._gc_recorder
    assert recorder is not None
    enabled = gc.isenabled()
    gc.disable()  # no real collection noted between a flush and the reading
    try:
        recorder("start", {"generation": 2})
        recorder("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
        metrics.render()
        assert recorder.pending == []
        recorder("start", {"generation": 2})
        recorder("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
        flusher = asyncio.get_running_loop().create_task(fold_metrics_forever(0.01))
        try:
            await eventually(lambda: not recorder.pending, "the pause flushed")
        finally:
            flusher.cancel()
    finally:
        if enabled:
            gc.enable()


def test_record_gc_installs_one_recorder_per_process() -> None:
    metrics.record_gc()
    metrics.record_gc()
    assert sum(isinstance(cb, metrics.GcRecorder) for cb in gc.callbacks) == 1


def test_render_one_process_is_the_default_registry() -> None:
    metrics.REQUESTS.labels("/v1/test-render", "other", "200").inc()
    body, content_type = metrics.render()
    assert content_type == CONTENT_TYPE_LATEST
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert "python_gc_objects_collected" in families  # the default collectors are there
    assert any(s.labels.get("route") == "/v1/test-render" for s in families["ingress_requests"].samples)


_WORKER = """
import sys
from ingress import metrics
served, health = int(sys.argv[1]), sys.argv[2:]
metrics.REQUESTS.labels("/v1/chat/completions", "ingress-demo", "200").inc(served)
metrics.TTFT.labels("ingress-demo").observe(0.02)
metrics.IN_FLIGHT.inc()
for endpoint, healthy in zip(health[::2], health[1::2]):
    metrics.ENDPOINT_HEALTHY.labels("main", endpoint).set(int(healthy))
metrics.set_build_info()
print(__import__("os").getpid())
"""

_SCRAPER = """
import sys
from prometheus_client import multiprocess
multiprocess.mark_process_dead(int(sys.argv[1]))
from ingress import metrics
sys.stdout.buffer.write(metrics.render()[0])
"""


def _run(code: str, env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_render_several_processes_sums_counters_and_keeps_gauges_per_edge(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    dead = int(_run(_WORKER, env, "3", "http://a:1", "1"))
    _run(_WORKER, env, "4", "http://a:1", "0", "http://b:1", "1")
    _run(_WORKER, env, "5", "http://a:1", "0", "http://b:1", "0")
    text = _run(_SCRAPER, env, str(dead))  # the supervisor marks a worker dead when it replaces it
    samples = {(s.name, frozenset(s.labels.items())): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}

    def value(name: str, **labels: str) -> float | None:
        return samples.get((name, frozenset(labels.items())))

    # Counters and histograms keep a dead worker's share; live gauges drop it.
    assert value("ingress_requests_total", route="/v1/chat/completions", model="ingress-demo", status="200") == 12
    assert value("ingress_time_to_first_token_seconds_count", model="ingress-demo") == 3
    assert value("ingress_in_flight") == 2
    # An endpoint is healthy when some live worker may choose it.
    assert value("ingress_upstream_endpoint_healthy", group="main", endpoint="http://a:1") == 0
    assert value("ingress_upstream_endpoint_healthy", group="main", endpoint="http://b:1") == 1
    assert value("ingress_build_info", version=__version__, python=platform.python_version(),
                 flatbuffers=metadata.version("flatbuffers")) == 1
    assert not [key for key in samples if "pid" in dict(key[1])], "one series per edge, not per worker"


_COLLECTING_WORKER = """
import gc, sys
from ingress import metrics
metrics.record_gc()
gc.set_threshold(1)  # a collection at nearly every allocation, those under prometheus-client's lock included
for i in range(int(sys.argv[1])):
    metrics.REQUESTS.labels(f"/route-{i}", "m", "200").inc()  # each new child allocates under the lock
metrics.flush_gc()
metrics.fold()
print(metrics.GC_PAUSE._sum.get() > 0)
"""


def test_a_worker_whose_collections_start_under_the_metrics_lock_goes_on(tmp_path: Path) -> None:
    # A worker (PROMETHEUS_MULTIPROC_DIR set) hung forever here when the GC hook observed a metric itself.
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    assert _run(_COLLECTING_WORKER, env, "300").strip() == "True"


async def test_render_counts_the_event_loop_tasks_alive_at_the_scrape() -> None:
    release = asyncio.Event()
    waiting = [asyncio.create_task(release.wait()) for _ in range(5)]
    await asyncio.sleep(0)
    try:
        text = metrics.render()[0].decode()
        [family] = [f for f in text_string_to_metric_families(text) if f.name == "ingress_event_loop_tasks"]
        assert family.samples[0].value == len(asyncio.all_tasks()) >= len(waiting) + 1  # and this test's own
    finally:
        release.set()
        await asyncio.gather(*waiting)
    text = metrics.render()[0].decode()
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "ingress_event_loop_tasks"]
    assert family.samples[0].value == len(asyncio.all_tasks())


def _samples(h: Histogram, label: str) -> dict[tuple[str, str], float]:
    return {(s.name, s.labels.get("le", "")): s.value for m in h.collect() for s in m.samples
            if s.labels.get("model") == label and not s.name.endswith("_created")}


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.floats(0, 30, allow_nan=False) | st.sampled_from(list(CHUNK)), max_size=80),
       st.integers(1, 3))
def test_gaps_counted_per_stream_match_an_observe_each(gaps: list[float], streams: int) -> None:
    h = Histogram("gaps", "gaps", ["model"], buckets=CHUNK, registry=CollectorRegistry())
    batched = metrics.FoldedHistogram(h.labels("batched"))
    for _ in range(streams):  # several streams into one child, each flushed at its end
        counted, now = Gaps(batched), 100.0
        counted.mark(now)
        for gap in gaps:
            now += gap
            counted.mark(now)
    batched.fold()
    each = h.labels("each")
    for _ in range(streams):
        now = 100.0
        for gap in gaps:
            each.observe((now + gap) - now)  # the same float arithmetic as mark's
            now += gap
    batched_samples, each_samples = _samples(h, "batched"), _samples(h, "each")
    # the sum is added once a stream, not once a gap: the same up to the order of float additions
    assert batched_samples.pop(("gaps_sum", "")) == pytest.approx(each_samples.pop(("gaps_sum", "")), rel=1e-12)
    assert batched_samples == each_samples


# --- folding: what the loop records, added to prometheus-client every second and on scrape ---------------

observations = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.floats(0, 200, allow_nan=False)), max_size=60)


@settings(max_examples=100, deadline=None, database=None)
@given(observations, st.integers(1, 4))
def test_folded_metrics_read_as_the_same_records_made_directly(records: list[tuple[str, float]], folds: int) -> None:
    registry = CollectorRegistry()
    counter = Counter("c", "c", ["label", "way"], registry=registry)
    histogram = Histogram("h", "h", ["label", "way"], buckets=metrics.LATENCY, registry=registry)
    folded = {label: (metrics.FoldedCounter(counter.labels(label, "folded")),
                      metrics.FoldedHistogram(histogram.labels(label, "folded"))) for label in "ab"}
    for label in "ab":  # the same series on both sides, recorded or not
        counter.labels(label, "direct"), histogram.labels(label, "direct")
    for i, (label, value) in enumerate(records):
        c, h = folded[label]
        c.inc(value)
        h.observe(value)
        counter.labels(label, "direct").inc(value)
        histogram.labels(label, "direct").observe(value)
        if i % max(len(records) // folds, 1) == 0:
            for parts in folded.values():
                for part in parts:
                    part.fold()
    for parts in folded.values():
        for part in parts:
            part.fold()
    samples: dict[str, dict[tuple[str, str, str], float]] = {"folded": {}, "direct": {}}
    for family in registry.collect():
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                key = (sample.name, sample.labels["label"], sample.labels.get("le", ""))
                samples[sample.labels["way"]][key] = sample.value
    assert samples["folded"].keys() == samples["direct"].keys()
    for key, value in samples["direct"].items():
        assert samples["folded"][key] == pytest.approx(value, rel=1e-9, abs=1e-9)


def test_a_folded_child_is_kept_and_reaches_the_exposition_at_the_scrape() -> None:
    child = metrics.child(metrics.REQUESTS, "/v1/test-fold", "other", "200")
    assert metrics.child(metrics.REQUESTS, "/v1/test-fold", "other", "200") is child
    before = metrics.REQUESTS.labels("/v1/test-fold", "other", "200")._value.get()
    child.inc()
    child.inc(2)
    assert metrics.REQUESTS.labels("/v1/test-fold", "other", "200")._value.get() == before  # not yet folded
    body, _ = metrics.render()
    series = 'ingress_requests_total{model="other",route="/v1/test-fold",status="200"}'
    assert f"{series} {before + 3}" in body.decode()
    with pytest.raises(ValueError, match="non-negative"):
        child.inc(-1)
