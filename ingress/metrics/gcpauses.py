"""The GC's pauses: a gc.callbacks hook notes them, and ordinary code records them (GC_PAUSE, GC_COLLECTIONS)."""

from __future__ import annotations

import gc
import time
from typing import Any

from ingress.metrics.families import GC_COLLECTIONS, GC_PAUSE
from ingress.metrics.folding import child


class GcRecorder:
    """A gc.callbacks hook feeding the GC metrics.

    A collection starts inside whatever allocation crosses the threshold, and prometheus-client's locks are
    not reentrant: a collection started while this thread held one (in multiprocess mode one lock guards
    every value, and creating a labelled child allocates under it) would block on it forever if the hook
    updated a metric. So the hook only notes the pause, and `flush()` records what it noted from ordinary
    code: every second (the app's `metrics-fold` task) and before each scrape."""

    def __init__(self) -> None:
        self._started = 0.0
        self.pending: list[tuple[int, float]] = []  # (generation, seconds paused), not yet recorded

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.pending.append((info["generation"], time.perf_counter() - self._started))

    def flush(self) -> None:
        if not self.pending:
            return
        pending, self.pending = self.pending, []  # a collection during the updates notes into the new list
        for generation, seconds in pending:
            child(GC_PAUSE).observe(seconds)
            child(GC_COLLECTIONS, str(generation)).inc()


_gc_recorder: GcRecorder | None = None


def record_gc() -> None:
    """Feed the GC metrics from this process's collections (once per process)."""
    global _gc_recorder
    if _gc_recorder is None:
        _gc_recorder = GcRecorder()
        gc.callbacks.append(_gc_recorder)


def flush_gc() -> None:
    """Record the collections noted since the last flush (see GcRecorder)."""
    if _gc_recorder is not None:
        _gc_recorder.flush()
