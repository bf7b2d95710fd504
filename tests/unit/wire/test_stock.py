"""BuilderPool: builders are reused, the pool is bounded, and a builder that grew too large is dropped."""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from ingress.wire.stock import BuilderPool


def test_a_returned_builder_is_reused() -> None:
    pool = BuilderPool(size=4)
    with pool.builder() as first:
        first.Finish(first.CreateString("x"))
    with pool.builder() as second:
        pass
    assert second is first
    assert (pool.created, len(pool)) == (1, 1)


def test_pool_keeps_at_most_size_builders() -> None:
    pool = BuilderPool(size=2)
    with ExitStack() as stack:
        held = [stack.enter_context(pool.builder()) for _ in range(5)]
        assert len({id(b) for b in held}) == 5 and len(pool) == 0
    assert (pool.created, len(pool)) == (5, 2)


def test_pool_of_size_zero_keeps_nothing() -> None:
    pool = BuilderPool(size=0)
    for _ in range(3):
        with pool.builder():
            pass
    assert (pool.created, len(pool)) == (3, 0)


@pytest.mark.parametrize(("written", "kept"), [(512, True), (4096, False)])
def test_builder_grown_past_max_keep_is_dropped(written: int, kept: bool) -> None:
    pool = BuilderPool(size=4, initial=64, max_keep=1024)
    with pool.builder() as b:
        b.Finish(b.CreateString("x" * written))
    assert len(pool) == (1 if kept else 0)
    with pool.builder() as again:
        assert (again is b) is kept
    assert pool.created == (1 if kept else 2)


def test_builder_is_returned_cleared_after_an_exception() -> None:
    pool = BuilderPool(size=1)
    with pytest.raises(RuntimeError), pool.builder() as b:
        b.StartObject(3)  # left half-built
        raise RuntimeError("encoding failed")
    assert len(pool) == 1
    with pool.builder() as again:
        assert again is b
        again.Finish(again.CreateString("ok"))  # not refused as nested inside the abandoned table
        assert b"\x02\x00\x00\x00ok\x00" in bytes(again.Output())
