"""Garbage-collector tuning and measurement: freeze start-up objects, raise thresholds, time pauses."""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingress.settings import Settings


@dataclass
class GcStats:
    """Collections and pause times per generation, recorded through gc.callbacks."""

    collections: list[int] = field(default_factory=lambda: [0, 0, 0])
    pause_total_s: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    pause_max_s: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    pauses_s: list[float] = field(default_factory=list)  # every pause, for percentiles (bounded below)
    _started: float = 0.0
    keep: int = 100_000

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        gen = int(info["generation"])
        self.collections[gen] += 1
        self.pause_total_s[gen] += pause
        self.pause_max_s[gen] = max(self.pause_max_s[gen], pause)
        if len(self.pauses_s) < self.keep:
            self.pauses_s.append(pause)

    def install(self) -> GcStats:
        gc.callbacks.append(self.callback)
        return self

    def remove(self) -> None:
        if self.callback in gc.callbacks:
            gc.callbacks.remove(self.callback)


def tune(threshold0: int, threshold1: int | None = None, freeze: bool = True) -> None:
    """After start-up: move every live object to the permanent generation (so full collections stop
    rescanning imports and settings), then set the young and middle generations' thresholds (the middle
    one left as it is if None)."""
    if freeze:
        gc.collect()
        gc.freeze()
    _, t1, t2 = gc.get_threshold()
    gc.set_threshold(threshold0, t1 if threshold1 is None else threshold1, t2)


def tune_as_served(settings: Settings) -> None:
    """tune() as a serving process with these settings runs it."""
    tune(settings.gc_threshold0, settings.gc_threshold1, freeze=settings.gc_freeze)
