"""A circuit breaker (sans-I/O): after enough failed calls in a row, calls are refused for a while, then one
probes. The limit store's and the response cache's calls to Redis go through one each."""

from __future__ import annotations

import time
from collections.abc import Callable


class Breaker:
    """After `failures` failed calls in a row, calls are refused for `open_for` seconds; then one call
    probes: its success closes the breaker, its failure opens it again. Sans-I/O, `clock` in seconds."""

    def __init__(self, failures: int, open_for: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.failures = failures
        self.open_for = open_for
        self.clock = clock
        self.failed = 0  # in a row
        self.opened_at: float | None = None
        self.probing = False

    @property
    def closed(self) -> bool:
        return self.opened_at is None

    def allows(self) -> bool:
        """Whether a call may go now; once open, only the one probe when `open_for` has passed."""
        if self.opened_at is None:
            return True
        if self.probing or self.clock() - self.opened_at < self.open_for:
            return False
        self.probing = True
        return True

    def succeeded(self) -> bool:
        """A call answered; True when that closed the breaker."""
        self.failed, self.probing = 0, False
        was_open, self.opened_at = self.opened_at is not None, None
        return was_open

    def failed_once(self) -> bool:
        """A call failed; True when that opened a closed breaker (a failed probe opens it again quietly)."""
        self.failed += 1
        if self.opened_at is not None:
            self.opened_at, self.probing = self.clock(), False
            return False
        if self.failed >= self.failures:
            self.opened_at = self.clock()
            return True
        return False

    def abandoned(self) -> None:
        """A call went without an answer either way (cancelled): the next call may probe."""
        self.probing = False
