"""ingress/routing/health.py: passive health, an endpoint ejected after failures in a row for a doubling time."""

from __future__ import annotations

from ingress.routing.health import EndpointState
from ingress.settings import Ejection


def test_an_endpoint_is_ejected_after_n_failures_in_a_row_for_a_doubling_time() -> None:
    state = EndpointState(url="u", ejection=Ejection(failures=3, base=5.0, max=300.0))

    assert [state.record_failure(0.0) for _ in range(3)] == [False, False, True]
    assert state.ejected_until == 5.0
    assert not state.healthy(4.99) and state.healthy(5.0)

    ejections = []
    now = 5.0
    for _ in range(8):
        assert [state.record_failure(now) for _ in range(3)] == [False, False, True]
        ejections.append(state.ejected_until - now)
        now = state.ejected_until
    assert ejections == [10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]  # capped at max


def test_a_success_resets_the_failure_count_and_the_backoff() -> None:
    state = EndpointState(url="u", ejection=Ejection(failures=2, base=1.0, max=60.0))
    for _ in range(6):
        state.record_failure(0.0)  # three ejections: 1 s, 2 s, 4 s
    assert state.ejected_until == 4.0

    state.record_failure(10.0)
    state.record_success()
    assert not state.record_failure(10.0)  # the count started again
    assert state.record_failure(10.0)
    assert state.ejected_until == 11.0  # and the backoff is back to its base


def test_failures_must_be_consecutive() -> None:
    state = EndpointState(url="u", ejection=Ejection(failures=2, base=1.0))

    for _ in range(10):
        assert not state.record_failure(0.0)
        state.record_success()

    assert state.healthy(0.0)


def test_load_is_outstanding_requests_per_unit_of_weight() -> None:
    state = EndpointState(url="u", weight=2, max_in_flight=3)

    assert state.load() == 0.0 and state.has_room()
    state.in_flight = 3
    assert state.load() == 1.5 and not state.has_room()
