"""Splits: which variant of a route serves a request, sticky by a key (weighted rendezvous hashing). Pure.

Each variant scores `-weight / ln(u)`, with `u` in (0, 1) a hash of the key and the variant's name; the
highest score wins. A variant's share of keys is its weight's share of the total; a key keeps its variant
while the weights stay as they are, in every process and on every replica (the hash is BLAKE2b, not
Python's salted `hash`); changing one variant's weight moves only the keys it gains or loses, and adding a
variant takes its share from all the others, moving no key between them.
"""

from __future__ import annotations

import functools
import math
from hashlib import blake2b
from typing import Final

_SCALE: Final = 2.0**64


@functools.cache
def _seeded(name: str) -> blake2b:
    """BLAKE2b already fed the variant's name (length-prefixed): each key costs a copy and its own bytes."""
    named = name.encode()
    return blake2b(len(named).to_bytes(4, "big") + named, digest_size=8, person=b"ingress-split")


def _unit(key: bytes, name: str) -> float:
    """A hash of (key, name) in the open interval (0, 1)."""
    hasher = _seeded(name).copy()
    hasher.update(key)
    return (int.from_bytes(hasher.digest(), "big") + 0.5) / _SCALE


def choose(key: bytes, shares: tuple[tuple[str, int], ...]) -> str:
    """The variant (by name) that serves `key`, among `shares` (name, weight); a weight of 0 is never chosen
    while another weighs more."""
    best, best_score = shares[0][0], -1.0
    for name, weight in shares:
        if weight <= 0:
            continue
        score = -weight / math.log(_unit(key, name))
        if score > best_score:
            best, best_score = name, score
    return best
