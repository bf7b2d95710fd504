"""pipeline.stream's gap counting: a stream's gaps added to the histogram at its end come out exactly as
observing each one would have made them (buckets and count; the sum up to float rounding)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from ingress.metrics import CHUNK
from ingress.pipeline.stream import Gaps


def _samples(h: Histogram, label: str) -> dict[tuple[str, str], float]:
    return {(s.name, s.labels.get("le", "")): s.value for m in h.collect() for s in m.samples
            if s.labels.get("model") == label and not s.name.endswith("_created")}


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.floats(0, 30, allow_nan=False) | st.sampled_from(list(CHUNK)), max_size=80),
       st.integers(1, 3))
def test_gaps_counted_per_stream_match_an_observe_each(gaps: list[float], streams: int) -> None:
    h = Histogram("gaps", "gaps", ["model"], buckets=CHUNK, registry=CollectorRegistry())
    batched = h.labels("batched")
    for _ in range(streams):  # several streams into one child, each flushed at its end
        counted, now = Gaps(batched), 100.0
        counted.mark(now)
        for gap in gaps:
            now += gap
            counted.mark(now)
        counted.flush()
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
