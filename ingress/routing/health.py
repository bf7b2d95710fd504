"""Per-endpoint state: outstanding requests, passive health with growing ejections (pure; `now` passed in)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ingress.settings import Ejection


@dataclass
class EndpointState:
    url: str
    weight: int = 1
    identity: str = ""  # what rendezvous hashing names it by, the same on every worker and replica ("": url)
    max_in_flight: int = 0  # 0: unlimited
    ejection: Ejection = field(default_factory=Ejection)
    in_flight: int = 0
    failures: int = 0  # consecutive
    ejections: int = 0  # consecutive ejections, for the growing backoff
    ejected_until: float = 0.0
    active_healthy: bool = True  # the last active check's verdict (True when checks are off)

    def healthy(self, now: float) -> bool:
        return self.active_healthy and now >= self.ejected_until

    def has_room(self) -> bool:
        return self.max_in_flight == 0 or self.in_flight < self.max_in_flight

    def load(self) -> float:
        """Outstanding requests per unit of weight: what least-outstanding balancing compares."""
        return self.in_flight / self.weight

    def record_success(self) -> None:
        self.failures = 0
        self.ejections = 0

    def record_failure(self, now: float) -> bool:
        """Count a failure; return True when this one ejects the endpoint."""
        self.failures += 1
        if self.failures < self.ejection.failures:
            return False
        backoff = min(self.ejection.base * 2**self.ejections, self.ejection.max)
        self.ejections += 1
        self.failures = 0
        self.ejected_until = now + backoff
        return True
