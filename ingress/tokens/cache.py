"""Exact counts of whole texts remembered by their content's hash: a conversation's old turns are counted once.

A multi-turn client sends its whole conversation every turn, so without memory the edge would count the
same messages again on every request. `CountCache` keeps each text's exact count under the SHA-256 of its
UTF-8 bytes (hardware-accelerated here: ~1.1 GB/s, against ~30 MB/s for counting it), never the text
itself: no prompt is held in memory past its request. It is one engine's (a vocabulary's or a
tokenizer.json's): a count is only equal to another engine's by chance.

It is bounded: at most `entries` counts, the least recently used dropped first. An entry is a 32-byte
digest, an int and the OrderedDict's links, ~200 bytes (tests/unit/test_tokens.py holds it under 300), so
the default 16,384 entries are ~3.3 MB an engine and worker, whatever the texts' sizes. Texts of `SHORT`
characters or fewer (roles, names, ids) are counted in well under a microsecond and never enter it; 4,096
of them are kept by their text in a plain dict, cleared when full, as the estimate's are.

A count found here is the one the engine would give, so what is counted does not depend on what was
asked before (`_Budget` in `__init__.py` keeps the per-request byte limit the same with or without it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from hashlib import sha256
from typing import Protocol

ENTRIES = 16_384  # counts kept per engine: ~3.3 MB
SHORT = 32  # characters: a text this short (a role, a name, an id) is kept by itself, not by its digest
SHORT_ENTRIES = 4_096


def short_count(memo: dict[str, int], text: str, count: Callable[[str], int]) -> int:
    """`count(text)` for a text of SHORT characters or fewer, remembered in `memo` by the text itself (cleared
    when it holds SHORT_ENTRIES): the exact counts' and the estimate's alike."""
    found = memo.get(text)
    if found is None:
        if len(memo) >= SHORT_ENTRIES:
            memo.clear()
        found = memo[text] = count(text)
    return found


class _Counts(Protocol):
    def count(self, text: str) -> int: ...


class CountCache:
    """One engine's exact counts, by the SHA-256 of each text's UTF-8; `hits` and `misses` say how it does."""

    __slots__ = ("_counts", "_short", "entries", "hits", "misses")

    def __init__(self, entries: int = ENTRIES) -> None:
        self.entries = entries
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self._short: dict[str, int] = {}
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._counts)

    def count(self, engine: _Counts, text: str, data: bytes | None = None) -> int:
        """`engine.count(text)`, remembered; `data`, when the caller has it, is the text's UTF-8."""
        if len(text) <= SHORT:
            return short_count(self._short, text, engine.count)
        key = sha256(text.encode("utf-8", "surrogatepass") if data is None else data).digest()
        counts = self._counts
        found = counts.get(key)
        if found is not None:
            self.hits += 1
            counts.move_to_end(key)
            return found
        self.misses += 1
        found = counts[key] = engine.count(text)
        if len(counts) > self.entries:
            counts.popitem(last=False)
        return found
