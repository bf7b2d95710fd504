"""ingress.metrics: the build gauge, the GC hook, the event loop's task count, the exposition of one
process or of several, a stream's gaps counted as observing each would (buckets and count; the sum
up to float rounding), the folded histograms (our collector) exposed byte for byte as prometheus-client's
Histogram exposes the same observations, in one process and in several, and no private field of
prometheus-client's touched under ingress/ or bench/.

The multi-process case runs real processes: prometheus_client picks file-backed values at import
time from PROMETHEUS_MULTIPROC_DIR, as a worker started by the supervisor does.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import gc
import os
import platform
import random
import re
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
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    Histogram,
    Info,
    Summary,
    generate_latest,
    multiprocess,
    values,
)
from prometheus_client.metrics_core import HistogramMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from waiting import eventually

from ingress import __version__, metrics
from ingress.metrics import CHUNK, Gaps, gcpauses
from ingress.metrics.histogram import Series
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
    labelled child allocates under it). The hook must not take a lock: here every way it could record (a
    folded child, the pause histogram's series, a counter's child) waits for a lock another thread holds; a
    hook that recorded would block until that thread let go."""
    recorder = metrics.GcRecorder()
    lock = threading.Lock()
    done = threading.Event()

    def under_the_lock(*args: object, **kwargs: object) -> None:
        with lock:
            pass

    def collection() -> None:
        recorder("start", {"generation": 0})
        recorder("stop", {"generation": 0, "collected": 0, "uncollectable": 0})
        done.set()

    recording = [mock.patch.object(gcpauses, "child", under_the_lock),
                 *(mock.patch.object(cls, name, under_the_lock) for cls, name in (
                     (metrics.FoldedHistogram, "observe"), (metrics.FoldedCounter, "inc"), (Series, "observe"),
                     (Series, "add"), (Counter, "inc")))]
    with contextlib.ExitStack() as patched:
        for patch in recording:
            patched.enter_context(patch)
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
from prometheus_client import REGISTRY
print(REGISTRY.get_sample_value("ingress_gc_pause_seconds_sum") > 0)
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


def _histogram_samples(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value for f in registry.collect() for s in f.samples
            if not s.name.endswith("_created")}


def _bulk_and_plain(name: str, buckets: tuple[float, ...], labelnames: tuple[str, ...] = ("model",),
                    ) -> tuple[metrics.BulkHistogram, Histogram, CollectorRegistry, CollectorRegistry]:
    """The same histogram twice: ours, and prometheus-client's own, each in a registry of its own."""
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    return (metrics.BulkHistogram(name, name, labelnames, buckets=buckets, registry=ours),
            Histogram(name, name, labelnames, buckets=buckets, registry=theirs), ours, theirs)


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.floats(0, 30, allow_nan=False) | st.sampled_from(list(CHUNK)), max_size=80),
       st.integers(1, 3))
def test_gaps_counted_per_stream_match_an_observe_each(gaps: list[float], streams: int) -> None:
    bulk, plain, ours, theirs = _bulk_and_plain("gaps", CHUNK)
    batched = metrics.FoldedHistogram(bulk.labels("m"))
    for _ in range(streams):  # several streams into one child, each flushed at its end
        counted, now = Gaps(batched), 100.0
        counted.mark(now)
        for gap in gaps:
            now += gap
            counted.mark(now)
    batched.fold()
    each = plain.labels("m")
    for _ in range(streams):
        now = 100.0
        for gap in gaps:
            each.observe((now + gap) - now)  # the same float arithmetic as mark's
            now += gap
    batched_samples, each_samples = _histogram_samples(ours), _histogram_samples(theirs)
    # the sum is added once a fold, not once a gap: the same up to the order of float additions
    total = ("gaps_sum", frozenset({("model", "m")}))
    assert batched_samples.pop(total) == pytest.approx(each_samples.pop(total), rel=1e-12)
    assert batched_samples == each_samples


# --- folding: what the loop records, added to prometheus-client every second and on scrape ---------------

observations = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.floats(0, 200, allow_nan=False)), max_size=60)


@settings(max_examples=100, deadline=None, database=None)
@given(observations, st.integers(1, 4))
def test_folded_metrics_read_as_the_same_records_made_directly(records: list[tuple[str, float]], folds: int) -> None:
    registry = CollectorRegistry()
    counter = Counter("c", "c", ["label", "way"], registry=registry)
    bulk, histogram, ours, theirs = _bulk_and_plain("h", metrics.LATENCY, ("label",))
    folded = {label: (metrics.FoldedCounter(counter.labels(label, "folded")),
                      metrics.FoldedHistogram(bulk.labels(label))) for label in "ab"}
    for label in "ab":  # the same series on both sides, recorded or not
        counter.labels(label, "direct"), histogram.labels(label)
    for i, (label, value) in enumerate(records):
        c, h = folded[label]
        c.inc(value)
        h.observe(value)
        counter.labels(label, "direct").inc(value)
        histogram.labels(label).observe(value)
        if i % max(len(records) // folds, 1) == 0:
            for parts in folded.values():
                for part in parts:
                    part.fold()
    for parts in folded.values():
        for part in parts:
            part.fold()
    counted: dict[str, dict[tuple[str, str], float]] = {"folded": {}, "direct": {}}
    for family in registry.collect():
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                counted[sample.labels["way"]][sample.name, sample.labels["label"]] = sample.value
    assert counted["folded"].keys() == counted["direct"].keys()
    for key, value in counted["direct"].items():
        assert counted["folded"][key] == pytest.approx(value, rel=1e-9, abs=1e-9)
    folded_h, direct_h = _histogram_samples(ours), _histogram_samples(theirs)
    assert folded_h.keys() == direct_h.keys()
    for series, value in direct_h.items():
        assert folded_h[series] == pytest.approx(value, rel=1e-9, abs=1e-9)


# --- the histograms: our collector, exposed as prometheus-client's Histogram is ---------------------------

# Multiples of 1/64 under 1,000: any order of adding up to a few hundred of them gives the same float sum,
# so the folded sum (added once a fold) and observe's (once a value) print the same. The bounds themselves
# (dyadic ones) are in, for `le`'s "less than or equal".
exact = st.integers(0, 64 * 999).map(lambda n: n / 64) | st.sampled_from([0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0])


@settings(max_examples=100, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), exact), max_size=60), st.integers(1, 4))
def test_the_exposition_of_folded_observations_is_the_histograms_byte_for_byte(
        records: list[tuple[str, float]], folds: int) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    with mock.patch("time.time", return_value=1_700_000_000.25):  # the series' _created
        bulk = metrics.BulkHistogram("ingress_t_seconds", "Help \\ with\nescapes.", ["model"],
                                     buckets=metrics.LATENCY, registry=ours)
        plain = Histogram("ingress_t_seconds", "Help \\ with\nescapes.", ["model"], buckets=metrics.LATENCY,
                          registry=theirs)
        lone_bulk = metrics.BulkHistogram("ingress_u", "No labels.", buckets=metrics.PAUSE, registry=ours)
        lone_plain = Histogram("ingress_u", "No labels.", buckets=metrics.PAUSE, registry=theirs)
        metrics.BulkHistogram("ingress_v", "Never recorded.", ["group"], buckets=metrics.BLOCKS, registry=ours)
        Histogram("ingress_v", "Never recorded.", ["group"], buckets=metrics.BLOCKS, registry=theirs)
        folded = {m: metrics.FoldedHistogram(bulk.labels(m)) for m in "ba"}  # made in this order on both sides
        direct = {m: plain.labels(m) for m in "ba"}
        lone = metrics.FoldedHistogram(lone_bulk.labels())
    parts = [*folded.values(), lone]
    for i, (model, value) in enumerate(records):
        folded[model].observe(value)
        lone.observe(value / 1024)
        direct[model].observe(value)
        lone_plain.observe(value / 1024)
        if i % max(len(records) // folds, 1) == 0:
            for part in parts:
                part.fold()
    for part in parts:
        part.fold()
    assert generate_latest(ours).decode() == generate_latest(theirs).decode()


_RECORDER = """
import sys
from prometheus_client import Histogram
from ingress import metrics
way, values = sys.argv[1], [float(v) for v in sys.argv[2:]]
if way == "bulk":
    h = metrics.BulkHistogram("ingress_t_seconds", "T.", ["model"], buckets=metrics.LATENCY, registry=None)
    recorded = [metrics.child(h, model) for model in "ba"]
    for i, value in enumerate(values):
        recorded[i % 2].observe(value)
        if i % 7 == 0:
            metrics.fold()
    metrics.fold()
else:
    h = Histogram("ingress_t_seconds", "T.", ["model"], buckets=metrics.LATENCY, registry=None)
    recorded = [h.labels(model) for model in "ba"]
    for i, value in enumerate(values):
        recorded[i % 2].observe(value)
"""


def test_several_workers_folding_expose_what_the_histogram_observing_each_would(tmp_path: Path) -> None:
    """With PROMETHEUS_MULTIPROC_DIR the folded histogram's counts are in each worker's file, keyed as a
    Histogram's, and /metrics (the MultiProcessCollector over those files) reads and sums them the same."""
    rng = random.Random(44)
    workers = [[str(rng.randrange(64 * 700) / 64) for _ in range(40)] for _ in range(2)]
    workers[0] += ["0.5", "2.5", "600", "601"]  # on a bound, and past the last
    scrapes = []
    for way in ("bulk", "plain"):
        folder = tmp_path / way
        folder.mkdir()
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder)}
        for observed in workers:
            _run(_RECORDER, env, way, *observed)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(folder))  # type: ignore[no-untyped-call]  # unannotated upstream
        # each family's lines, byte for byte; the families come in the order the collector finds the files
        scrapes.append(sorted(generate_latest(registry).decode().split("# HELP ")))
    bulk, plain = scrapes
    assert bulk == plain
    [family] = [f for f in bulk if f.startswith("ingress_t_seconds ")]
    b = [float(v) for observed in workers for v in observed[::2]]  # what each worker recorded under "b"
    assert f'ingress_t_seconds_count{{model="b"}} {float(len(b))}' in family  # both workers' share
    assert f'ingress_t_seconds_bucket{{le="600.0",model="b"}} {float(sum(v <= 600 for v in b))}' in family
    assert f'ingress_t_seconds_sum{{model="b"}} {sum(b)}' in family


def test_a_bulk_histogram_refuses_what_a_histogram_refuses() -> None:
    registry = CollectorRegistry()
    metrics.BulkHistogram("ingress_w", "w", buckets=(1, 2), registry=registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        metrics.BulkHistogram("ingress_w", "again", buckets=(1, 2), registry=registry)
    with pytest.raises(ValueError, match="sorted"):
        metrics.BulkHistogram("ingress_x", "x", buckets=(2, 1), registry=None)
    with pytest.raises(ValueError, match="le"):
        metrics.BulkHistogram("ingress_x", "x", ["le"], buckets=(1,), registry=None)
    with pytest.raises(ValueError, match="label values"):
        metrics.BulkHistogram("ingress_x", "x", ["model"], buckets=(1,), registry=None).labels()


_PROMETHEUS_PRIVATE = re.compile(r"^_[^_]|^_$")


def _private_names_of_prometheus_client() -> set[str]:
    """Every single-underscore name prometheus-client's objects and modules have: its metrics (parents,
    children, label-less), their values, the registry, the metric families, its modules' own."""
    import importlib
    import pkgutil

    import prometheus_client

    registry = CollectorRegistry()
    parents = [Counter("p_c", "c", ["l"], registry=registry), Gauge("p_g", "g", ["l"], registry=registry),
               Histogram("p_h", "h", ["l"], registry=registry), Summary("p_s", "s", ["l"], registry=registry),
               Info("p_i", "i", ["l"], registry=registry), Enum("p_e", "e", ["l"], states=["x"], registry=registry)]
    objects: list[object] = [registry, REGISTRY, *parents, *(p.labels("x") for p in parents),
                             Histogram("p_lone", "h", registry=registry),
                             HistogramMetricFamily("p_f", "f", labels=["l"]),
                             values.ValueClass("counter", "n", "n", (), (), "d")]  # this process's: MutexValue
    for info in pkgutil.iter_modules(prometheus_client.__path__, "prometheus_client."):
        if info.name.rsplit(".", 1)[-1] not in ("twisted", "django", "asgi", "aiohttp"):  # optional extras
            objects.append(importlib.import_module(info.name))
    names = {n for o in objects for n in (*dir(o), *getattr(o, "__dict__", {})) if _PROMETHEUS_PRIVATE.match(n)}
    assert {"_buckets", "_sum", "_value", "_metrics", "_upper_bounds", "_lock", "_name"} <= names
    return names


def test_nothing_under_ingress_or_bench_touches_a_private_field_of_prometheus_client() -> None:
    """No `x._field` where `_field` is a private name prometheus-client's objects have, unless x is self or cls
    (a class's own fields, which may share a name), and no private name imported from prometheus_client."""
    private = _private_names_of_prometheus_client()
    found = []
    for path in sorted([*(ROOT / "ingress").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute) and node.attr in private:
                if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                    found.append(f"{where} .{node.attr}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prometheus_client"):
                found += [f"{where} import {a.name}" for a in node.names if _PROMETHEUS_PRIVATE.match(a.name)]
    assert found == []


def test_a_folded_child_is_kept_and_reaches_the_exposition_at_the_scrape() -> None:
    child = metrics.child(metrics.REQUESTS, "/v1/test-fold", "other", "200")
    assert metrics.child(metrics.REQUESTS, "/v1/test-fold", "other", "200") is child
    labels = {"route": "/v1/test-fold", "model": "other", "status": "200"}
    before = REGISTRY.get_sample_value("ingress_requests_total", labels) or 0.0
    child.inc()
    child.inc(2)
    assert (REGISTRY.get_sample_value("ingress_requests_total", labels) or 0.0) == before  # not yet folded
    body, _ = metrics.render()
    series = 'ingress_requests_total{model="other",route="/v1/test-fold",status="200"}'
    assert f"{series} {before + 3}" in body.decode()
    with pytest.raises(ValueError, match="non-negative"):
        child.inc(-1)
