"""gctune: what tune() does to the collector, and what GcStats records of real collections."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from ingress.serve import gctune
from ingress.settings import Settings


@pytest.fixture(autouse=True)
def restored_gc() -> Iterator[None]:
    """Each test changes the interpreter's collector; put it back as it was."""
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    try:
        yield
    finally:
        if gc.get_freeze_count() > frozen:
            gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_tune_sets_the_young_threshold_and_the_middle_one_only_when_given() -> None:
    _, t1, t2 = gc.get_threshold()
    gctune.tune(12_345, freeze=False)
    assert gc.get_threshold() == (12_345, t1, t2)
    gctune.tune(2_000, 100, freeze=False)
    assert gc.get_threshold() == (2_000, 100, t2)  # the oldest generation's left to CPython


class Node:
    """An object in a reference cycle with itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_tune_collects_start_up_garbage_before_freezing() -> None:
    garbage = weakref.ref(Node())  # unreachable already, but a cycle: waiting for a collection
    gctune.tune(Settings().gc_threshold0)
    assert garbage() is None  # freed, not frozen with the live objects


def test_tune_freezes_what_is_alive_at_start_up() -> None:
    gc.unfreeze()
    node = Node()
    kept = weakref.ref(node)
    gctune.tune(Settings().gc_threshold0)
    assert gc.get_freeze_count() > 0
    del node
    gc.collect()
    assert kept() is not None  # in the permanent generation: no collection scans it
    gc.unfreeze()
    gc.collect()
    assert kept() is None


def test_tune_without_freeze_leaves_the_permanent_generation_alone() -> None:
    gc.unfreeze()
    gctune.tune(Settings().gc_threshold0, freeze=False)
    assert gc.get_freeze_count() == 0


def test_stats_record_each_collection_by_generation() -> None:
    stats = gctune.GcStats().install()
    try:
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
    finally:
        stats.remove()
    assert stats.collections[0] >= 1 and stats.collections[2] >= 2
    assert len(stats.pauses_s) == sum(stats.collections)
    assert all(p >= 0 for p in stats.pauses_s)
    assert stats.pause_max_s[2] <= stats.pause_total_s[2]
    assert sum(stats.pause_total_s) == pytest.approx(sum(stats.pauses_s))


def test_removed_stats_record_nothing_more() -> None:
    stats = gctune.GcStats().install()
    stats.remove()
    stats.remove()  # twice is harmless
    gc.collect()
    assert stats.collections == [0, 0, 0] and stats.pauses_s == []
    assert stats.callback not in gc.callbacks


def test_stats_keep_a_bounded_list_of_pauses() -> None:
    stats = gctune.GcStats(keep=3).install()
    try:
        for _ in range(5):
            gc.collect(0)
    finally:
        stats.remove()
    assert stats.collections[0] >= 5
    assert len(stats.pauses_s) == 3  # every collection counted, only the first `keep` pauses listed


async def test_a_serving_process_takes_both_thresholds_from_its_settings() -> None:
    from aiohttp import web

    from ingress.edge.appkeys import SETTINGS
    from ingress.serve.app import tune_gc

    app = web.Application()
    app[SETTINGS] = Settings(gc_threshold0=3_000, gc_threshold1=7, gc_freeze=False)
    await tune_gc(app)
    assert gc.get_threshold()[:2] == (3_000, 7)
