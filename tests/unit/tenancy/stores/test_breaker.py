"""ingress/tenancy/stores/breaker.py: the circuit breaker the limit store's and the response cache's Redis
calls go through, on a clock the test moves."""

from __future__ import annotations

from ingress.tenancy.stores.breaker import Breaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_it_opens_after_failures_in_a_row_and_says_so_once() -> None:
    breaker = Breaker(failures=3, open_for=5.0, clock=Clock())

    assert [breaker.failed_once() for _ in range(3)] == [False, False, True]
    assert not breaker.closed and not breaker.allows()
    assert not breaker.failed_once()  # already open: not opened again


def test_a_success_between_failures_starts_the_count_again() -> None:
    breaker = Breaker(failures=2, open_for=5.0, clock=Clock())

    for _ in range(5):
        assert not breaker.failed_once()
        assert not breaker.succeeded()  # it was closed: nothing closed

    assert breaker.closed and breaker.allows()


def test_once_open_for_long_enough_one_call_probes_and_its_success_closes_it() -> None:
    clock = Clock()
    breaker = Breaker(failures=1, open_for=5.0, clock=clock)
    breaker.failed_once()

    clock.now = 104.9
    assert not breaker.allows()
    clock.now = 105.0
    assert breaker.allows()  # the probe
    assert not breaker.allows()  # and no other call while it is out
    assert breaker.succeeded()  # the probe's success closed it
    assert breaker.closed and all(breaker.allows() for _ in range(3))


def test_a_failed_probe_opens_it_again_from_then() -> None:
    clock = Clock()
    breaker = Breaker(failures=1, open_for=5.0, clock=clock)
    breaker.failed_once()
    clock.now = 106.0
    assert breaker.allows()

    assert not breaker.failed_once()  # opened again quietly

    assert breaker.opened_at == 106.0 and not breaker.allows()
    clock.now = 110.9
    assert not breaker.allows()
    clock.now = 111.0
    assert breaker.allows()


def test_an_abandoned_probe_lets_the_next_call_probe() -> None:
    clock = Clock()
    breaker = Breaker(failures=1, open_for=1.0, clock=clock)
    breaker.failed_once()
    clock.now = 101.0
    assert breaker.allows() and not breaker.allows()

    breaker.abandoned()  # cancelled: neither an answer nor a failure

    assert not breaker.closed and breaker.allows()
