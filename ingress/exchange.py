"""The Exchange: what one request did, filled in stage by stage, read when it ends (settle, metrics, log)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingress.errors import IngressError
    from ingress.upstream.group import Lease
    from ingress.wire.types import Usage


@dataclass
class Exchange:
    """One request's record. Stages write what they learn; nothing here does I/O."""

    request_id: str
    started: float = field(default_factory=time.perf_counter)
    model: str | None = None
    metric_model: str = "other"  # a name some route serves, for bounded metric labels
    group: str | None = None
    upstream: str | None = None
    stream: bool = False
    binary: bool = False
    attempts: int = 0
    decoded: float | None = None  # perf_counter marks of the stages, for Server-Timing and metrics
    encoded: float | None = None
    upstream_sent: float | None = None
    upstream_head: float | None = None
    upstream_done: float | None = None
    first_byte: float | None = None
    usage: Usage | None = None
    error: IngressError | None = None
    lease: Lease | None = None  # the endpoint's slot, held until the exchange settles
    upstream_ok: bool | None = None  # for the endpoint's health: True, False (its failure), None (not its doing)

    def mark_first_byte(self) -> None:
        if self.first_byte is None:
            self.first_byte = time.perf_counter()
