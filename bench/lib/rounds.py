"""Variants measured side by side in interleaved rounds: each round's order, each round's figures, and the
medians, ranges and round-by-round ratios and differences read from them.

A ratio or a difference is taken within a round, between runs made back to back, and the median of the
rounds' values reported with their range: the host's speed drifts between rounds more than most changes
move a figure (bench/README.md, "A fair side by side").
"""

from __future__ import annotations

import math
import operator
import random
import statistics
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

V = TypeVar("V", bound=Hashable)
Order = Literal["rotate", "alternate", "shuffle", "fixed"]
Run = Mapping[str, Any]  # one variant's figures in one round (a wrk run's summary, a timing...)
# A figure of a run: its name; a path of names into nested figures (("cpu_us_per_request", "edge")); or a
# function of (variant, run).
Key = str | tuple[str, ...] | Callable[[Any, Run], float]


def median(values: Iterable[float]) -> float:
    """The median, NaNs left out (a figure a round could not give); NaN when nothing is left."""
    kept = [v for v in values if v == v]
    return float(statistics.median(kept)) if kept else math.nan


@dataclass(frozen=True)
class Spread:
    """A figure over rounds: the median of the rounds' values, and their range."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        kept = [v for v in values if v == v]
        if not kept:
            return cls(math.nan, math.nan, math.nan)
        return cls(float(statistics.median(kept)), min(kept), max(kept))

    def range(self, digits: int = 2) -> str:
        return f"{self.low:.{digits}f}-{self.high:.{digits}f}"


class Rounds(Generic[V]):
    """`variants` measured `rounds` times, each once a round, in an order that changes from round to round so
    that bursts of foreign load land on all of them alike; every round's figures kept, per variant and per
    cell (a load, a level: whatever else a round runs each variant at).

    The order of round r:
      rotate     the variants as given, starting at the r-th: each goes first in turn;
      alternate  as given, then reversed (A B, B A: for two variants, the A B B A of two rounds);
      shuffle    a random order, the previous round's shuffled again (`rng`, or the `random` module's);
      fixed      as given every round.
    With `warmup`, iterating first yields a round numbered -1 (in the order its number gives), whose runs
    a caller runs but does not add. Ratios and differences are against `baseline` unless another is named.
    """

    def __init__(self, variants: Iterable[V], rounds: int, *, order: Order = "rotate", baseline: V | None = None,
                 warmup: bool = False, rng: random.Random | None = None) -> None:
        self.variants = tuple(variants)
        self.rounds = rounds
        self.order = order
        self.baseline = baseline
        self.warmup = warmup
        self._shuffle = rng.shuffle if rng is not None else random.shuffle
        self._shuffled = list(self.variants)
        self._runs: dict[tuple[Hashable, V], list[Run]] = {}

    def order_of(self, r: int) -> list[V]:
        variants = self.variants
        if self.order == "rotate":
            k = r % len(variants)
            return [*variants[k:], *variants[:k]]
        if self.order == "alternate":
            return list(variants if r % 2 == 0 else variants[::-1])
        if self.order == "shuffle":
            self._shuffle(self._shuffled)
            return list(self._shuffled)
        return list(variants)

    def __iter__(self) -> Iterator[tuple[int, list[V]]]:
        """(the round's number, its order), round by round."""
        for r in range(-1 if self.warmup else 0, self.rounds):
            yield r, self.order_of(r)

    def collect(self, measure: Callable[[V], Run], cell: Hashable = None) -> Rounds[V]:
        """Every round, each variant in the round's order measured by `measure(variant)` and kept (a warm-up
        round's runs are not)."""
        for r, order in self:
            for variant in order:
                run = measure(variant)
                if r >= 0:
                    self.add(variant, run, cell)
        return self

    def add(self, variant: V, run: Run, cell: Hashable = None) -> None:
        self._runs.setdefault((cell, variant), []).append(run)

    def runs(self, variant: V, cell: Hashable = None) -> list[Run]:
        """The variant's runs at `cell`, round by round."""
        return self._runs.setdefault((cell, variant), [])

    def by_variant(self, cell: Hashable = None) -> dict[V, list[Run]]:
        return {v: self.runs(v, cell) for v in self.variants}

    def values(self, variant: V, key: Key, cell: Hashable = None) -> list[float]:
        return [self._figure(variant, run, key) for run in self.runs(variant, cell)]

    def median(self, variant: V, key: Key, cell: Hashable = None) -> float:
        return median(self.values(variant, key, cell))

    def spread(self, variant: V, key: Key, cell: Hashable = None) -> Spread:
        return Spread.of(self.values(variant, key, cell))

    def paired(self, variant: V, key: Key, op: Callable[[float, float], float], *, baseline: V | None = None,
               cell: Hashable = None) -> Spread:
        """`op(the variant's figure, the baseline's)` in each round, over the rounds."""
        base = self._baseline(baseline)
        pairs = zip(self.runs(variant, cell), self.runs(base, cell), strict=True)
        return Spread.of(op(self._figure(variant, a, key), self._figure(base, b, key)) for a, b in pairs)

    def ratio(self, variant: V, key: Key, *, baseline: V | None = None, cell: Hashable = None) -> Spread:
        """The variant's figure over the baseline's, round by round."""
        return self.paired(variant, key, operator.truediv, baseline=baseline, cell=cell)

    def added(self, variant: V, key: Key, *, baseline: V | None = None, cell: Hashable = None) -> Spread:
        """The variant's figure minus the baseline's, round by round."""
        return self.paired(variant, key, operator.sub, baseline=baseline, cell=cell)

    def _baseline(self, baseline: V | None) -> V:
        base = baseline if baseline is not None else self.baseline
        if base is None:
            raise ValueError("no baseline: name one, here or when the rounds are made")
        return base

    @staticmethod
    def _figure(variant: Any, run: Run, key: Key) -> float:
        if isinstance(key, str):
            return float(run[key])
        if isinstance(key, tuple):
            found: Any = run
            for name in key:
                found = found[name]
            return float(found)
        return float(key(variant, run))
