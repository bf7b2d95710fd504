"""Cache-affine choice: send a request where its prompt's prefix is likely in an engine's KV cache, within a
load bound. Pure: the request's hashes, the endpoints' loads and states, and `now` are passed in.

In order:
1. **hit**: the endpoint that most recently served the longest matching chain of the request's blocks
   (this worker's PrefixMap), unless it is ejected, excluded, full, or above the load bound.
2. **hashed**: rendezvous (highest-random-weight) hashing of the request's conversation over the
   endpoints, walking down its order to the first healthy one within the bound. The conversation's hash is
   the block that ends with its first user message (ingress/wire/prefix.py): every turn has it, on any
   worker of any replica, so a conversation goes to the same place without the replicas talking to each
   other, while the conversations behind one shared system prompt still spread (over every endpoint, or
   first over a few when the prompt is long: below). Only blocks from that
   one on are remembered, so a new conversation never "hits" on the shared system prompt alone.
   **affinity_key**: the same, on the client's explicit key (`prompt_cache_key`, or the route's header).
   The order is that of the key's bucket (its low 12 bits: BUCKETS of them), rendezvous over (bucket,
   endpoint identity), computed on a bucket's first use and kept until the set of endpoints or their weights
   change (an ejection or a failed health check is no change: the walk skips such endpoints). Every worker
   and replica computes the same orders with nothing shared; an endpoint leaving or returning moves only
   the buckets it heads; each endpoint heads a share of the buckets proportional to its weight (4,096
   buckets: ~256 ± 16 each of 16 equal endpoints). Held: BUCKETS slots, a filled one ~33 + N bytes.
   **A shared prefix spread over a few endpoints** (`prefix_spread` k > 0): when LONG_PREFIX_BLOCKS or more
   whole blocks come before the conversation's (a long system prompt, tools: what thousands of
   conversations may share), the walk starts with the first k endpoints of the first block's order, taken
   in the conversation's own order (rendezvous over those k), then goes on down the first block's order.
   The shared prompt is prefilled on k endpoints, not on all, each conversation still has its own place
   among them on any replica, and the load bound sends the overflow on to the next endpoints of the same
   order (which then hold the prompt too). An endpoint leaving moves its own conversations, and may move
   others within the subsets it was among.
3. **overridden_by_load**: the endpoint the cache or the hash preferred was full or above the bound, so
   another was taken (the next in rendezvous order within it, else the least loaded with room).
4. **balanced**: nothing to go by (no hashes, no key), or every endpoint ejected: as power of two choices.

The load bound is that of consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam) with an
absolute allowance beside it (as SGLang's router's balance_abs_threshold beside its relative one): an
endpoint may take the request if its outstanding requests, this one included, are at most
ceil((1 + load_slack) x m), where m is the healthy endpoints' mean, this request counted, times the
endpoint's share p of their weight; or if they are at most load_allowance above the others' mean (scaled
to its weight), which is n <= m + load_allowance x (1 - p). Some healthy endpoint always fits (the relative
bounds alone add up to more than the load), so a choice exceeds it only when the ones that fit are at their
max_in_flight or excluded by a retry. The relative bound rules at high load (past m ~ allowance / slack:
~8 requests an endpoint with the defaults), the allowance at low load, where the relative bound alone is
strict (with four endpoints and two requests, one endpoint may hold one) and pushed a fifth of a
16-endpoint multi-turn run's turns off the endpoint that held their conversation (bench/notes/
cache_affinity.md). Measured against the others' mean, not the mean, the allowance cannot empty the other
endpoints of a small group: with two endpoints and four requests one may hold three, not four (as the mean
+ 2 let it, which on two one-slot llama-servers queued most requests behind one engine). With
load_allowance 0 the bound is the relative one alone.

A choice and its remembering take ~6-15 µs, a new conversation's as a later turn's, one behind a spread
prefix ~1 µs more (bench/cache_affinity.py --parts choice: 4 or 16 endpoints, a map holding 2,000 other
conversations, a 33-block chain; the machine's load moves these by half); a bucket's first use costs what
scoring every endpoint does (~16-35 µs at 16), at most BUCKETS times per group and worker.
"""

from __future__ import annotations

import enum
import hashlib
import math
import random
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from itertools import repeat

from ingress.routing.balance import choose
from ingress.routing.health import EndpointState

_MASK = 2**64 - 1
BUCKETS = 4096  # a power of two: a key's bucket is its low bits (SHA-256 bits, ingress/wire/prefix.py)
# A prefix_spread applies behind at least this many whole blocks before the conversation's (4 KiB, ~1,000
# tokens): what prefilling a shared prompt on fewer endpoints saves grows with its length, what gathering
# its conversations on them costs does not.
LONG_PREFIX_BLOCKS = 8
_u64 = struct.Struct("<Q").unpack_from


class Way(enum.StrEnum):
    """Which way a choice went (for metrics and the access line)."""

    HIT = "hit"
    HASHED = "hashed"
    AFFINITY_KEY = "affinity_key"
    OVERRIDDEN_BY_LOAD = "overridden_by_load"
    BALANCED = "balanced"


@dataclass(frozen=True, slots=True)
class Prefix:
    """What the choice knows of a request: its passport's chain, the index of its conversation's block in
    it, and an explicit affinity key (hashed), if any."""

    blocks: Sequence[int] = ()
    conversation_block: int = 0
    key: int | None = None

    def start(self) -> int:
        """The conversation's block, or the first when the index is out of range (a client's passport)."""
        return self.conversation_block if self.conversation_block < len(self.blocks) else 0


@dataclass(frozen=True, slots=True)
class Decision:
    endpoint: EndpointState
    way: Way
    matched: int = 0  # the longest chain this worker had seen served, in blocks from the first (0: none)


# The headers coding agents name their session by (Codex CLI's `session-id`, opencode's `x-session-affinity`
# and `x-session-id`): a conversation's affinity key when neither the route's header nor the request's
# own `prompt_cache_key` gives one.
SESSION_HEADERS = ("session-id", "x-session-affinity", "x-session-id")


def key_hash(key: str) -> int:
    """An affinity key as the 64-bit number rendezvous hashing takes (as stable as the chain's hashes)."""
    return int(_u64(hashlib.sha256(key.encode()).digest())[0])


@cache
def _seed(url: str) -> int:
    return int(_u64(hashlib.sha256(url.encode()).digest())[0])


def _mix(x: int) -> int:
    """splitmix64's finaliser: 64 well-mixed bits from 64."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def score(key: int, endpoint: EndpointState) -> float:
    """The endpoint's weight for `key` (weighted rendezvous hashing: weight / -ln u, u uniform in (0, 1)
    from the key and the endpoint's identity). The same on every worker, replica and release."""
    u = ((_mix(key ^ _seed(endpoint.identity or endpoint.url)) >> 11) + 0.5) / 2**53
    return endpoint.weight / -math.log(u)


def _bits(key: int, endpoint: EndpointState) -> int:
    """The 53 bits `score` draws u from, with _mix inlined (this runs for every endpoint of a new conversation)."""
    x = ((key ^ _seed(endpoint.identity or endpoint.url)) + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return (x ^ (x >> 31)) >> 11


def bucket(key: int) -> int:
    """The bucket whose rendezvous order a key follows."""
    return key & (BUCKETS - 1)


def _ranks(key: int, endpoints: Sequence[EndpointState]) -> list[int]:
    """The endpoints' indexes in `key`'s rendezvous order, best first.

    When the weights are all one value, `score` grows with u and u with its 53 bits: ordered by the bits, the
    same order without a logarithm or a float per endpoint (a third cheaper at 16 endpoints)."""
    indexes = range(len(endpoints))
    if endpoints and all(e.weight == endpoints[0].weight for e in endpoints):
        return sorted(indexes, key=lambda i: _bits(key, endpoints[i]), reverse=True)
    return sorted(indexes, key=lambda i: score(key, endpoints[i]), reverse=True)


def rendezvous(key: int, endpoints: Sequence[EndpointState]) -> list[EndpointState]:
    """The endpoints in `key`'s order, best first. An endpoint leaving or returning moves no other. The choice
    follows the order of a key's bucket: `rendezvous(bucket(key), endpoints)`."""
    return [endpoints[i] for i in _ranks(key, endpoints)]


class PrefixMap:
    """Block hash -> (endpoint URL, when it served that prefix), one per group and worker.

    Bounded by `max_entries`: two generations of half of it each, the older dropped whole when the newer is
    full (what an LRU keeps, at a dict's cost); an entry older than `max_age` seconds is not matched. A
    request's blocks are remembered together, so a block is at least as fresh as any later one of its chain
    and the longest match is found by bisection."""

    def __init__(self, max_entries: int, max_age: float) -> None:
        self.max_age = max_age
        self._half = max(1, max_entries // 2)
        self._young: dict[int, tuple[str, float]] = {}
        self._old: dict[int, tuple[str, float]] = {}

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def _get(self, block: int, now: float) -> tuple[str, float] | None:
        entry = self._young.get(block) or self._old.get(block)
        return entry if entry is not None and now - entry[1] <= self.max_age else None

    def longest(self, blocks: Sequence[int], start: int, now: float) -> tuple[str, int] | None:
        """The endpoint that served the longest chain of `blocks[start:]` this map knows, and its length
        in blocks from the first; None when not even `blocks[start]` is known."""
        found = self._get(blocks[start], now)
        if found is None:
            return None
        low, high = start, len(blocks)  # blocks[low] is known; blocks[high] is not (or past the end)
        while high - low > 1:
            middle = (low + high) // 2
            entry = self._get(blocks[middle], now)
            if entry is not None:
                low, found = middle, entry
            else:
                high = middle
        return found[0], low + 1

    def remember(self, blocks: Sequence[int], start: int, url: str, now: float) -> None:
        """`url` served `blocks` at `now`: from `start` on (before it, a prefix others share)."""
        self._young.update(zip(blocks[start:], repeat((url, now))))
        if len(self._young) >= self._half:
            self._old, self._young = self._young, {}


class CacheAffinity:
    """One group's cache-affine choice on one worker: its PrefixMap, its load bound (slack and allowance) and
    how many endpoints a shared prefix's conversations are hashed over first (0: all of them)."""

    def __init__(self, load_slack: float, max_entries: int, max_age: float, load_allowance: float = 0.0,
                 prefix_spread: int = 0) -> None:
        self.load_slack = load_slack
        self.load_allowance = load_allowance
        self.prefix_spread = prefix_spread
        self.seen = PrefixMap(max_entries, max_age)
        # Each bucket's rendezvous order (endpoints' indexes), for the endpoints and weights in _members.
        self._members: list[tuple[str, str, int]] = []
        self._orders: list[Sequence[int] | None] = [None] * BUCKETS

    def _sync(self, endpoints: Sequence[EndpointState]) -> None:
        """The kept orders dropped if the endpoints' identities, URLs or weights changed."""
        members = [(e.identity, e.url, e.weight) for e in endpoints]
        if members != self._members:
            self._members, self._orders = members, [None] * BUCKETS

    def _order(self, key: int, endpoints: Sequence[EndpointState]) -> Sequence[int]:
        """`rendezvous(bucket(key), endpoints)` as indexes into `endpoints`, kept per bucket (for the
        endpoints of the last `_sync`)."""
        b = bucket(key)
        order = self._orders[b]
        if order is None:
            ranks = _ranks(b, endpoints)
            order = self._orders[b] = bytes(ranks) if len(ranks) <= 256 else tuple(ranks)
        return order

    def choose(self, endpoints: Sequence[EndpointState], prefix: Prefix | None, now: float, rng: random.Random,
               exclude: frozenset[str] = frozenset()) -> Decision | None:
        """The endpoint to try next and why, or None when every candidate is full (the caller waits)."""
        healthy: list[EndpointState] = []
        load = weight = 0
        for e in endpoints:  # one pass, not three: ~2 µs less at 16 endpoints
            if e.url not in exclude and e.healthy(now):
                healthy.append(e)
                load += e.in_flight
                weight += e.weight
        if not healthy or prefix is None or (not prefix.blocks and prefix.key is None):
            chosen = choose(endpoints, now, rng, exclude)  # panic routing, or nothing to go by: as P2C
            return Decision(chosen, Way.BALANCED) if chosen is not None else None
        if not any(e.has_room() for e in healthy):
            return None
        total = load + 1  # this request counted
        scale, allowance = (1 + self.load_slack) * total / weight, self.load_allowance

        def fits(e: EndpointState) -> bool:
            # n <= m + allowance x (1 - its share of the weight), m = total x its share: multiplied out
            # (exact for whole numbers, so that a bound met exactly is met)
            n = e.in_flight + 1
            return e.has_room() and (n <= math.ceil(scale * e.weight)
                                     or n * weight <= total * e.weight + allowance * (weight - e.weight))

        matched, overridden = 0, False
        start = prefix.start()
        if prefix.blocks:
            found = self.seen.longest(prefix.blocks, start, now)
            if found is not None:
                url, matched = found
                served = next((e for e in healthy if e.url == url), None)
                if served is not None:
                    if fits(served):
                        return Decision(served, Way.HIT, matched)
                    overridden = True
        if prefix.key is not None:
            key, way = prefix.key, Way.AFFINITY_KEY
        else:
            key, way = prefix.blocks[start], Way.HASHED
        self._sync(endpoints)
        order = self._order(key, endpoints)
        if self.prefix_spread and prefix.key is None and start >= LONG_PREFIX_BLOCKS:
            order = self._spread(order, self._order(prefix.blocks[0], endpoints))
        rank = 0  # among the healthy endpoints not excluded
        for i in order:
            e = endpoints[i]
            if e.url in exclude or not e.healthy(now):
                continue
            if fits(e):
                return Decision(e, way if rank == 0 and not overridden else Way.OVERRIDDEN_BY_LOAD, matched)
            rank += 1
        # None fits: some are full, or excluded ones carry the load. The least loaded with room.
        least = min((e for e in healthy if e.has_room()), key=EndpointState.load)
        return Decision(least, Way.OVERRIDDEN_BY_LOAD, matched)

    def _spread(self, own: Sequence[int], shared: Sequence[int]) -> list[int]:
        """The walk of a conversation behind a shared prefix: the first `prefix_spread` endpoints of the
        shared block's order, in the conversation's own order (rendezvous over that subset), then the rest
        of the shared block's order."""
        head = shared[:self.prefix_spread]
        return [i for i in own if i in head] + list(shared[self.prefix_spread:])

    def served(self, prefix: Prefix | None, url: str, now: float) -> None:
        """The request was sent to `url`: its blocks are remembered there."""
        if prefix is not None and prefix.blocks:
            self.seen.remember(prefix.blocks, prefix.start(), url, now)
