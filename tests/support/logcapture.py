"""The process's log lines, captured: configure logging into a buffer, read it back as JSON objects (once
the access lines buffered for the loop's next turn are written: ingress/log.py's `flush`)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from ingress.log import configure, flush


@contextmanager
def captured_logs(level: str = "info") -> Iterator[io.StringIO]:
    """Every log line written inside the block, in a buffer; the defaults come back after it."""
    stream = io.StringIO()
    configure(level, stream, cache=False)
    try:
        yield stream
    finally:
        structlog.reset_defaults()


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    """The buffer's log lines, each parsed (every line the process writes is one JSON object)."""
    flush()
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
