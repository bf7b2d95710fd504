"""The exposition: what /metrics answers (this process's metrics, or every worker's), and the gauges read from
the process as it is asked (the build, the event loop's tasks)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
from importlib import metadata

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess

from ingress.metrics.families import BUILD, EVENT_LOOP_TASKS
from ingress.metrics.folding import fold
from ingress.metrics.gcpauses import flush_gc


def set_build_info() -> None:
    from ingress import __version__

    BUILD.labels(__version__, platform.python_version(), metadata.version("flatbuffers")).set(1)


def count_tasks() -> None:
    """Set EVENT_LOOP_TASKS from the running loop (none running: left as it was)."""
    with contextlib.suppress(RuntimeError):  # no running event loop
        EVENT_LOOP_TASKS.set(len(asyncio.all_tasks()))


def render() -> tuple[bytes, str]:
    """The exposition text: this process's metrics, or every worker's when running several."""
    count_tasks()
    flush_gc()
    fold()
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # unannotated upstream
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST
