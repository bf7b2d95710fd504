"""A Tracer that keeps the spans it is given, for the tests of ingress/tracing/ that read them back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ingress.settings import Tracing
from ingress.tracing.spans import Span, Tracer


class Recording(Tracer):
    """A Tracer whose ended spans are kept as they are (`ended`), besides being queued for export."""

    def __init__(self, config: Tracing) -> None:
        super().__init__(config)
        self.ended: list[Span] = []

    def submit(self, span: Span) -> None:
        self.ended.append(span)
        super().submit(span)


@pytest.fixture
def tracer() -> Iterator[Recording]:
    """Every new trace sampled; its exporter points at the discard port, and is stopped after the test."""
    recording = Recording(Tracing(endpoint="http://127.0.0.1:9/v1/traces", sample_ratio=1.0,
                                  flush_interval=60.0, export_timeout=0.2))
    yield recording
    recording.flush(2.0)
