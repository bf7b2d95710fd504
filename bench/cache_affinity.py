"""What cache-affine balancing buys against round robin and power of two choices, side by side in one run:
prefix-cache hit ratio (and its ratio to an oracle), load imbalance, time to first token, requests/s, the
edge's CPU, and the choice's own cost and memory (issue 32's benchmarks).

    nice -n 10 .venv/bin/python -m bench cache_affinity [--quick] [--rounds 2] [--parts choice sim llama]
                                                        [--endpoints 4 16] [--workloads ...] [--policies ...]
                                                        [--load-slack X] [--load-allowance X]
                                                        [--prefix-spread K] [--out FILE]
                                                        [--llama-cache-ram 16 256] [--llama-policies ...]
        -> results/cache_affinity.json and .png (~14 min; --quick ~3 min, results/cache_affinity-quick.json)

Parts:

- **choice**: in process, timeit-style (calibrated loops, GC off, thread CPU time, the median of rounds):
  `CacheAffinity.choose` and remembering where the request went (`served`) at 4 and 16 endpoints, for a
  conversation's later turn (a hit) and for a new one (rendezvous; and one behind a long shared prefix, which
  the prefix spread orders), a map already holding 2,000 other conversations and a 33-block chain, the
  configuration's default `affinity`; beside P2C's `choose` and round robin's on the same endpoints. And the
  prefix map's memory (tracemalloc) filled far past its `max_entries` cap with 33-block chains.
- **sim**: the demo's simulated KV caches: N `ingress demo-upstream --cache-blocks 256 --prefill-us-per-token
  200 --delay-ms 30` processes (N = 4 and 16: each holds 256 blocks of 512 bytes, a first token waits 200 µs
  for each uncached prompt token, and the 6 tokens asked for come 30 ms apart), and one single-worker edge a
  policy in front of all N, each a group of the N with `balance` = round_robin, p2c or cache_affine, route
  `gpt-4o` (the round-robin and P2C groups have a cache-affine fallback that nothing fails over to, so their
  edges compute the same passport chain: the services see the same chain, the edges differ in the choice).
  Four seeded workloads, the same bodies for every policy (the first message carries a run's tag, so each
  run starts on caches cold for it: the demos' LRUs drop the other runs' blocks first):
    multi-turn      conversations of 10-30 turns, each turn the last one's prompt plus an answer and a
                    question, behind one of 4 system prompts;
    shared-prefix   one-turn requests: one of 4 long system prompts and its tool set (~9 KB), and a short
                    question of their own;
    unique          one-turn requests sharing nothing (~4 KB each);
    skewed          multi-turn conversations keyed (`prompt_cache_key`) by their family: half of them in
                    one family, the rest over 15 others (the explicit key sends a family to one endpoint:
                    the load bound must hold);
    multi-turn-long (only when named in --workloads) multi-turn behind system prompts of ~6 KB, long
                    enough for the prefix spread: what gathering conversations on a few endpoints costs.
  Each request is streamed (usage in its last chunk, max_tokens 6) from this process (aiohttp, closed loop:
  4 x N workers, each sending its conversation's next turn 0.2 s (exponential, seeded) after the last one
  ended; --quick: 3-5 turns, 10 x N one-turn requests; else 10-30 turns, 30 x N). Per policy:
  hit ratio = cached over prompt tokens as the answers' usage reports them (the edge's
  `ingress_upstream_tokens_total{group,kind}` is read beside it as a check); the oracle's = the same
  requests, in the order they were sent, through one `ingress.demo.cache.KvCache` of N x B blocks with the
  same passport chain the edge computes (an upper bound: one cache seeing everything); load imbalance =
  max over mean of the endpoints' requests in flight, sampled every 5 ms while at least three quarters of
  the workers still had conversations (each request's endpoint read from the edge's access line, its span
  from the client's send to its last byte), the samples' mean and 95th percentile, and beside them the
  imbalance of the time-averaged loads ("of means": max over mean of each endpoint's in-flight count
  averaged over the same samples); TTFT p50/p99 (send to first
  content delta); requests/s; the edge's CPU per request (/proc, user + system). Policies run in a
  rotated order each round; medians over rounds.
- **llama**: two real `llama-server` processes (tests/support/llama_engine.py's build, SmolLM2-135M-Instruct, one
  thread each, one slot, prompt cache on with `--cache-ram`), each behind `ingress bridge openai`, one
  edge a policy in front of both bridges (route `SmolLM2-135M-Instruct`); the engines and bridges are
  started afresh for each policy, so each starts cold. A multi-turn workload (8 conversations x 6 turns,
  4 at a time; --quick 4 x 3, 2 at a time), prompts of ~150-500 tokens growing ~60 a turn; cached tokens
  and TTFT as the engine reports and the client sees them, and the prompt-cache entries the engines'
  logs say they dropped to make room. One set-up per `--llama-cache-ram` value: by default 16 MiB each,
  about half of the conversations' states in play (~27 MiB, see LLAMA_CACHE_RAM_SMALL_MIB), as engines
  whose caches are smaller than the working set run; 256 MiB holds every state (the 2026-12-04 runs').
  `--llama-policies` to run some of the policies only.

Every figure is from this machine's 2 shared vCPUs (bench/README.md): the demos' prefill is a sleep, so
the simulated TTFTs are the cache's effect plus the edge's and client's queueing; only the llama part has
real prefill compute.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

HERE = Path(__file__).resolve().parent

from bench.lib.procs import cpu_seconds, machine_busy  # noqa: E402
from bench.lib.provenance import code_version, describe  # noqa: E402
from bench.lib.results import niced  # noqa: E402
from bench.lib.rounds import Rounds  # noqa: E402
from bench.lib.servers import Server, free_port, start_all, stop_all  # noqa: E402
from bench.lib.tables import Table, figure  # noqa: E402

PY = sys.executable
POLICIES = ("round_robin", "p2c", "cache_affine")
SHORT = {"round_robin": "rr", "p2c": "p2c", "cache_affine": "affine"}
WORKLOADS = ("multi-turn", "shared-prefix", "unique", "skewed")
MORE_WORKLOADS = ("multi-turn-long",)  # run when asked for (--workloads)
SIM_MODEL = "gpt-4o"
LLAMA_MODEL = "SmolLM2-135M-Instruct"
CACHE_BLOCKS = 256  # per demo endpoint: 128 KiB of prompt (~22k demo tokens); see the notes for why
PREFILL_US = 200.0  # per uncached demo token: a 2,000-token prompt waits 400 ms for its first token
MAX_TOKENS = 6
PER_ENDPOINT = 4  # workers (conversations at a time) per endpoint
DECODE_MS = 30.0  # the demos' pause between streamed tokens: a request holds its endpoint ~200 ms after its prefill
THINK_S = 0.2  # a simulated client's mean pause before each request (a user reading, an agent's tool running)
SAMPLE_S = 0.005
PAUSE_S = 10.0  # between set-ups: the machine's other work gets both cores back for a while
# Each engine's prompt cache in RAM (`--cache-ram`, MiB), one set-up each. SmolLM2-135M's KV cache takes
# 22.5 KiB a token (30 layers x 3 KV heads x 64 dims x K and V x 2 bytes: the engine's log says 12.66 MiB
# for a 576-token prompt). The llama workload keeps 4 conversations going at ~310 prompt tokens a request
# (14,830 over 48 in the 2026-12-04 run; ~150 at the first turn, ~500 at the last): ~4 x 310 x 22.5 KiB =
# 27 MiB of states in play, up to 44 MiB near the ends of the conversations.
LLAMA_CACHE_RAM_SMALL_MIB = 16  # about half of that: one or two states besides the slot's own; it evicts
LLAMA_CACHE_RAM_LARGE_MIB = 256  # every conversation's states fit, whatever the policy
VOCABULARY = (
    "the of and to in is for on that with as by at from this be or are it an was not can will your flight "
    "hotel booking refund seat upgrade baggage lounge visa route fare policy traveller agent check "
    "schedule change cancel delay gate terminal passport insurance meal transfer night city river "
    "mountain coast island museum market train ticket price date morning evening window aisle please "
    "could would should tell explain confirm update status number name address email phone"
)
WORDS = VOCABULARY.split()


# --- workloads ------------------------------------------------------------------------------------


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def tools(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """A tool set: `n` functions with a described parameter each (~250 bytes a tool)."""
    return [{"type": "function", "function": {
        "name": f"tool_{rng.randrange(10**6)}_{i}", "description": text(rng, 20),
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": text(rng, 12)}},
                       "required": ["query"]}}} for i in range(n)]


@dataclass
class Conversation:
    """A conversation's requests, turn by turn: each the whole prompt so far (and its tools and key)."""

    turns: list[list[dict[str, str]]]
    tools: list[dict[str, Any]] | None = None
    key: str | None = None


def multi_turn(rng: random.Random, conversations: int, turns: tuple[int, int], system_words: int = 250,
               user_words: tuple[int, int] = (40, 90), answer_words: tuple[int, int] = (60, 140),
               families: int = 4, keys: Callable[[int], str | None] | None = None) -> list[Conversation]:
    """Conversations behind one of `families` system prompts; turn k+1 is turn k's prompt, an answer, a
    question. `keys(i)`: conversation i's family as its prompt_cache_key (skewed), else None."""
    systems = [text(rng, system_words) for _ in range(families)]
    out = []
    for i in range(conversations):
        family = keys and keys(i)
        system = systems[int(family.rsplit("-", 1)[1]) % families] if family else systems[i % families]
        messages = [{"role": "system", "content": system}]
        requests = []
        for _ in range(rng.randint(*turns)):
            messages.append({"role": "user", "content": text(rng, rng.randint(*user_words))})
            requests.append(list(messages))
            messages.append({"role": "assistant", "content": text(rng, rng.randint(*answer_words))})
        out.append(Conversation(requests, key=family))
    return out


def shared_prefix(rng: random.Random, requests: int, families: int = 4) -> list[Conversation]:
    prompts = [(text(rng, 1000), tools(rng, 8)) for _ in range(families)]
    out = []
    for _ in range(requests):
        system, toolset = prompts[rng.randrange(families)]
        out.append(Conversation([[{"role": "system", "content": system},
                                  {"role": "user", "content": text(rng, rng.randint(20, 60))}]], tools=toolset))
    return out


def unique(rng: random.Random, requests: int) -> list[Conversation]:
    return [Conversation([[{"role": "system", "content": text(rng, 300)},
                           {"role": "user", "content": text(rng, 350)}]]) for _ in range(requests)]


def skewed(rng: random.Random, conversations: int, turns: tuple[int, int]) -> list[Conversation]:
    families = [0 if rng.random() < 0.5 else rng.randint(1, 15) for _ in range(conversations)]
    return multi_turn(rng, conversations, turns, families=16, keys=lambda i: f"family-{families[i]}")


def workload(name: str, endpoints: int, quick: bool) -> tuple[list[Conversation], int]:
    """The workload's conversations (seeded: the same for every policy and run) and its concurrency."""
    rng = random.Random(f"{name}-{endpoints}")
    concurrency = PER_ENDPOINT * endpoints
    turns = (3, 5) if quick else (10, 30)
    if name == "multi-turn":
        return multi_turn(rng, concurrency, turns), concurrency
    if name == "multi-turn-long":  # behind system prompts as long as shared-prefix's (~6 KB: 12 blocks)
        return multi_turn(rng, concurrency, turns, system_words=1000), concurrency
    if name == "skewed":
        return skewed(rng, concurrency, turns), concurrency
    requests = 10 * endpoints if quick else 30 * endpoints
    return (shared_prefix(rng, requests) if name == "shared-prefix" else unique(rng, requests)), concurrency


def tagged(conversations: list[Conversation], tag: str) -> list[Conversation]:
    """The conversations with `tag` opening their first message: blocks no other run has."""
    out = []
    for c in conversations:
        turns = []
        for messages in c.turns:
            first = dict(messages[0], content=f"{tag} {messages[0]['content']}")
            turns.append([first, *messages[1:]])
        out.append(Conversation(turns, c.tools, c.key))
    return out


# --- the client -----------------------------------------------------------------------------------


@dataclass
class Sent:
    rid: str
    body: bytes
    sent: float
    first: float = math.nan
    ended: float = math.nan
    prompt: int = 0
    cached: int = 0
    error: str | None = None


async def stream_one(http: aiohttp.ClientSession, url: str, record: Sent) -> None:
    """POST one streamed chat request; note when its first content delta and its end came, and its usage."""
    try:
        async with http.post(f"{url}/v1/chat/completions", data=record.body,
                             headers={"Content-Type": "application/json", "x-request-id": record.rid}) as r:
            if r.status != 200:
                record.error = f"{r.status}: {(await r.read())[:300]!r}"
                return
            async for line in r.content:
                if not line.startswith(b"data: {"):
                    continue
                chunk = msgspec.json.decode(line[6:])
                if math.isnan(record.first) and any((c.get("delta") or {}).get("content")
                                                    for c in chunk.get("choices") or ()):
                    record.first = time.perf_counter()
                usage = chunk.get("usage")
                if usage:
                    record.prompt = usage["prompt_tokens"]
                    record.cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    except (TimeoutError, aiohttp.ClientError) as exc:
        record.error = repr(exc)
    finally:
        record.ended = time.perf_counter()


async def drive(url: str, model: str, conversations: list[Conversation], concurrency: int, tag: str,
                think_s: float, timeout: float = 300.0) -> tuple[list[Sent], list[float]]:
    """`concurrency` workers, each taking the next conversation and sending its turns one after the other,
    each after a pause (exponential, mean `think_s`: the same pauses for every policy). The requests, and
    when each worker ran out of conversations."""
    todo = iter(enumerate(conversations))
    sent: list[Sent] = []
    done: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as http:
        async def worker() -> None:
            for i, conversation in todo:
                for k, messages in enumerate(conversation.turns):
                    if think_s:
                        await asyncio.sleep(random.Random(i * 1000 + k).expovariate(1 / think_s))
                    fields: dict[str, Any] = {"model": model, "messages": messages, "stream": True,
                                              "stream_options": {"include_usage": True}, "max_tokens": MAX_TOKENS,
                                              "temperature": 0}
                    if conversation.tools:
                        fields["tools"] = conversation.tools
                    if conversation.key:
                        fields["prompt_cache_key"] = conversation.key
                    record = Sent(f"{tag}-{i}-{k}", msgspec.json.encode(fields), time.perf_counter())
                    sent.append(record)
                    await stream_one(http, url, record)
            done.append(time.perf_counter())

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sent, done


# --- what a run's records say ------------------------------------------------------------------------


def access_lines(path: Path, prefix: str) -> dict[str, dict[str, Any]]:
    """The edge's access lines of this run's requests, by request id."""
    out = {}
    with path.open("rb") as f:
        for line in f:
            if prefix.encode() not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == "request" and str(record.get("request_id", "")).startswith(prefix):
                out[record["request_id"]] = record
    return out


def imbalance(sent: list[Sent], upstream: dict[str, str], done: list[float]) -> tuple[float, float, float, int]:
    """Max over mean of the endpoints' requests in flight: the mean and 95th percentile over the samples
    taken while at least three quarters of the workers still had conversations (the steady part of a run,
    not its tail), with a request in flight; max over mean of each endpoint's requests in flight averaged
    over the same samples (how unevenly the run's work was spread, without the moment-to-moment noise of
    a few requests an endpoint: at ~2.5 in flight each, P2C read 1.4-1.7 sample by sample in the
    2026-12-04 runs); and how many samples."""
    steady_until = sorted(done)[len(done) // 4] if done else math.inf
    endpoints = sorted(set(upstream.values()))
    index = {u: i for i, u in enumerate(endpoints)}
    events = sorted([(r.sent, index[upstream[r.rid]], 1) for r in sent if r.rid in upstream]
                    + [(r.ended, index[upstream[r.rid]], -1) for r in sent if r.rid in upstream])
    if not events:
        return math.nan, math.nan, math.nan, 0
    n = len(endpoints)
    counts = [0] * n
    sums = [0] * n
    ratios = []
    t, j = events[0][0], 0
    while j < len(events) and t <= steady_until:
        while j < len(events) and events[j][0] <= t:
            counts[events[j][1]] += events[j][2]
            j += 1
        total = sum(counts)
        if total > 0:
            ratios.append(max(counts) / (total / n))
            sums = [a + b for a, b in zip(sums, counts, strict=True)]
        t += SAMPLE_S
    if not ratios:
        return math.nan, math.nan, math.nan, 0
    ratios.sort()
    return (statistics.fmean(ratios), ratios[int(0.95 * (len(ratios) - 1))], max(sums) / (sum(sums) / n),
            len(ratios))


def errors_of(summary: dict[str, Any]) -> str:
    return f" ERRORS {summary['errors']}" if summary["errors"] else ""


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(sent: list[Sent], access: dict[str, dict[str, Any]], done: list[float], cpu_s: float,
              wall_s: float, others: float) -> dict[str, Any]:
    ok = [r for r in sent if r.error is None]
    errors = Counter((r.error or "")[:80] for r in sent if r.error is not None)
    prompt, cached = sum(r.prompt for r in ok), sum(r.cached for r in ok)
    ttft = [(r.first - r.sent) * 1000 for r in ok if not math.isnan(r.first)]
    upstream = {rid: line["upstream"] for rid, line in access.items() if line.get("upstream")}
    mean_ratio, p95_ratio, of_means, samples = imbalance(ok, upstream, done)
    span = max(r.ended for r in ok) - min(r.sent for r in ok) if ok else math.nan
    ways = Counter(line.get("affinity") for line in access.values() if line.get("affinity"))
    served = Counter(upstream.values())
    return {
        "requests": len(sent), "errors": dict(errors), "prompt_tokens": prompt, "cached_tokens": cached,
        "hit_ratio": cached / prompt if prompt else math.nan,
        "ttft_p50_ms": percentile(ttft, 0.50), "ttft_p99_ms": percentile(ttft, 0.99),
        "ttft_mean_ms": statistics.fmean(ttft) if ttft else math.nan,
        "requests_per_s": len(ok) / span if span else math.nan, "seconds": span,
        "imbalance_mean": mean_ratio, "imbalance_p95": p95_ratio, "imbalance_of_means": of_means,
        "imbalance_samples": samples,
        "served_max_over_mean": (max(served.values()) / (sum(served.values()) / len(served))) if served else math.nan,
        "edge_cpu_us_per_request": cpu_s / len(sent) * 1e6 if sent else math.nan,
        "ways": dict(ways), "wall_s": wall_s, "others_cpu_percent": others,
    }


def oracle_hit_ratio(sent: list[Sent], blocks: int) -> float:
    """The requests, in the order they were sent, through one simulated cache of `blocks` (the endpoints'
    combined capacity) that sees every one: cached over prompt tokens, as the demos count them."""
    from ingress import wire
    from ingress.demo.answer import plan
    from ingress.demo.cache import KvCache, KvCacheSettings
    from ingress.encoding.passport import RequestMeta, compute_passport
    from ingress.encoding.requests import encode_request
    from ingress.oai.codec import decode_chat_request

    cache = KvCache(KvCacheSettings(blocks=blocks, prefill_s_per_token=0.0))
    prompt = cached = 0
    for record in sorted(sent, key=lambda r: r.sent):
        request = decode_chat_request(record.body)
        data = wire.read_request_data(bytes(encode_request(request, record.rid,
                                                           compute_passport(request, RequestMeta(), blocks=True))))
        tokens = plan(data, record.rid).prompt_tokens
        prompt += tokens
        cached += cache.prefill(data, tokens).cached_tokens
    return cached / prompt if prompt else math.nan


def scrape_tokens(url: str) -> dict[str, float]:
    """ingress_upstream_tokens_total by kind, summed over groups."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text_ = r.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text_):
        for s in family.samples:
            if s.name == "ingress_upstream_tokens_total":
                out[s.labels["kind"]] = out.get(s.labels["kind"], 0.0) + s.value
    return out


def others_percent(busy0: tuple[float, float], cpu0: float, busy1: tuple[float, float], cpu1: float,
                   wall: float) -> float:
    """The rest of the machine's CPU over a run, in % of a core (ours: this process and the servers)."""
    cores = (busy1[0] - busy0[0]) / ((busy1[1] - busy0[1]) / (os.cpu_count() or 1) or 1)
    return max(0.0, cores - (cpu1 - cpu0) / wall) * 100


def run_policy(edge: Server, access_log: Path, model: str, conversations: list[Conversation], concurrency: int,
               tag: str, pids: list[int], think_s: float = 0.0) -> tuple[dict[str, Any], list[Sent]]:
    """One policy's run of one workload through its edge."""
    before_tokens = scrape_tokens(edge.url)

    def own() -> float:
        return sum(sum(cpu_seconds(p)) for p in [edge.pid, *pids]) + time.process_time()

    edge_cpu0, ours0, busy0 = sum(cpu_seconds(edge.pid)), own(), machine_busy()
    t0 = time.perf_counter()
    sent, done = asyncio.run(drive(edge.url, model, tagged(conversations, tag), concurrency, tag, think_s))
    wall = time.perf_counter() - t0
    edge_cpu1, ours1, busy1 = sum(cpu_seconds(edge.pid)), own(), machine_busy()
    time.sleep(0.2)  # the last access lines flushed
    access = access_lines(access_log, tag)
    summary = summarize(sent, access, done, edge_cpu1 - edge_cpu0, wall,
                        others_percent(busy0, ours0, busy1, ours1, wall))
    after_tokens = scrape_tokens(edge.url)
    prompt = after_tokens.get("prompt", 0) - before_tokens.get("prompt", 0)
    summary["metrics_hit_ratio"] = (after_tokens.get("cached", 0) - before_tokens.get("cached", 0)) / prompt \
        if prompt else math.nan
    return summary, sent


# --- the set-ups ---------------------------------------------------------------------------------------


def edge_config(path: Path, port: int, model: str, policy: str, urls: list[str], first_byte: float,
                affinity: dict[str, float] | None = None) -> Path:
    """One worker, one group of `urls` balanced by `policy`. A round-robin or P2C group gets a cache-affine
    fallback over the same endpoints, never used (nothing fails), so that its edge computes the passport's
    chain as the cache-affine edge does: every policy's services then see the same chain, and the edges differ
    in their choice alone (what the chain costs is measured apart, in the `choice` part)."""
    endpoints = ", ".join(f'{{ url = "{u}" }}' for u in urls)
    shadow = (f'[groups.shadow]\nendpoints = [{endpoints}]\nbalance = "cache_affine"\n'
              if policy != "cache_affine" else "")
    options = ", ".join(f"{k} = {v}" for k, v in (affinity or {}).items())
    slack = f"affinity = {{ {options} }}\n" if policy == "cache_affine" and options else ""
    path.write_text(f'port = {port}\nworkers = 1\nlog_level = "info"\n'
                    f"[timeouts]\nconnect = 5.0\nfirst_byte = {first_byte}\nidle = {first_byte}\n"
                    f'[groups.main]\nendpoints = [{endpoints}]\nbalance = "{policy}"\n{slack}{shadow}'
                    f'[[routes]]\nmodel = "{model}"\ngroup = "main"\n'
                    + ('fallback = "shadow"\n' if shadow else ""))
    return path


def edges_for(work: Path, name: str, model: str, urls: list[str], first_byte: float,
              affinity: dict[str, float] | None = None, policies: tuple[str, ...] = POLICIES) -> dict[str, Server]:
    out = {}
    for policy in policies:
        port = free_port()
        config = edge_config(work / f"{name}-{policy}.toml", port, model, policy, urls, first_byte, affinity)
        out[policy] = Server(f"edge-{name}-{policy}", [PY, "-m", "ingress", "serve", "--config", str(config)],
                             port, work / f"{name}-{policy}.log", stdout=work / f"{name}-{policy}.access")
    return out


def part_sim(args: argparse.Namespace, work: Path, endpoints: int) -> dict[str, Any]:
    demos = [Server(f"demo{i}", [PY, "-m", "ingress", "demo-upstream", "--port", str(port := free_port()),
                                 "--cache-blocks", str(CACHE_BLOCKS), "--prefill-us-per-token", str(PREFILL_US),
                                 "--delay-ms", str(DECODE_MS),
                                 "--log-level", "warning"], port, work / f"demo{endpoints}-{i}.log")
             for i in range(endpoints)]
    policies = tuple(p for p in POLICIES if p in args.policies)
    edges = edges_for(work, f"sim{endpoints}", SIM_MODEL, [d.url for d in demos], 60.0, affinity_options(args),
                      policies)
    found: dict[str, Any] = {"endpoints": endpoints, "cache_blocks": CACHE_BLOCKS, "prefill_us_per_token": PREFILL_US,
                             "workloads": {}}
    start_all(*demos, *edges.values(), timeout=60.0)
    try:
        pids = [d.pid for d in demos]
        for name in args.workloads:
            conversations, concurrency = workload(name, endpoints, args.quick)
            rounds: Rounds[str] = Rounds(policies, args.rounds, order="rotate",
                                         baseline="p2c" if "p2c" in policies else None)
            oracle: list[float] = []
            for r, order in rounds:
                for policy in order:
                    tag = f"s{endpoints}{name[:2]}{r}{SHORT[policy]}{random.randrange(10**6):06d}"
                    edge = edges[policy]
                    summary, sent = run_policy(edge, edge.stdout or work, SIM_MODEL, conversations, concurrency,
                                               tag, pids, THINK_S)
                    if policy == order[0]:  # the same requests in every policy's run: one replay a round
                        oracle.append(oracle_hit_ratio(sent, endpoints * CACHE_BLOCKS))
                    rounds.add(policy, summary)
                    print(f"  {endpoints:>2} endpoints {name:<13} {policy:<12} hit {summary['hit_ratio']:.3f} "
                          f"imbalance {summary['imbalance_mean']:.2f} (of means {summary['imbalance_of_means']:.2f}) "
                          f"ways {dict(summary['ways'])} p50 {summary['ttft_p50_ms']:.1f} ms "
                          f"{summary['requests_per_s']:.0f} req/s{errors_of(summary)}", flush=True)
            found["workloads"][name] = table_of(rounds, statistics.median(oracle), concurrency,
                                                sum(len(c.turns) for c in conversations), policies)
    finally:
        stop_all(*edges.values(), *demos)
    return found


def affinity_options(args: argparse.Namespace) -> dict[str, float]:
    """The simulated cache-affine groups' `affinity` options the command line sets (the rest: defaults)."""
    return {k: v for k, v in (("load_slack", args.load_slack), ("load_allowance", args.load_allowance),
                              ("prefix_spread", args.prefix_spread)) if v is not None}


FIGURES = ("hit_ratio", "metrics_hit_ratio", "imbalance_mean", "imbalance_p95", "imbalance_of_means",
           "served_max_over_mean", "ttft_p50_ms",
           "ttft_p99_ms", "ttft_mean_ms", "requests_per_s", "edge_cpu_us_per_request", "others_cpu_percent")


def table_of(rounds: Rounds[str], oracle: float, concurrency: int, requests: int,
             policies: tuple[str, ...] = POLICIES) -> dict[str, Any]:
    out: dict[str, Any] = {"oracle_hit_ratio": oracle, "concurrency": concurrency, "requests": requests,
                           "policies": {}}
    for policy in policies:
        runs = rounds.runs(policy)
        figures: dict[str, Any] = {k: rounds.median(policy, k) for k in FIGURES}
        figures["of_oracle"] = figures["hit_ratio"] / oracle if oracle else math.nan
        figures["ways"] = sum((Counter[str](r["ways"]) for r in runs), Counter[str]())
        figures["errors"] = sum((Counter[str](r["errors"]) for r in runs), Counter[str]())
        if policy != "p2c" and "p2c" in policies:
            figures["x_p2c"] = {k: rounds.paired(policy, k, lambda a, b: a / b if b else math.nan).median
                                for k in ("hit_ratio", "ttft_p50_ms", "ttft_p99_ms", "requests_per_s",
                                          "edge_cpu_us_per_request")}
        figures["runs"] = runs
        out["policies"][policy] = figures
    return out


# --- two real engines ---------------------------------------------------------------------------------


@contextmanager
def llama_fleet(work: Path, policy: str, tag: str, cache_ram_mib: int) -> Iterator[tuple[Server, list[int]]]:
    """Two fresh llama-servers, a bridge in front of each, and the policy's edge in front of both."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    import llama_engine

    exe, model = llama_engine.ensure_server(), llama_engine.ensure_model()
    with ExitStack() as stack:
        engines = [stack.enter_context(llama_engine.running_server(
            exe, model, work / f"llama-{tag}-{i}.log", "-c", "8192", "-cram", str(cache_ram_mib)))
            for i in range(2)]
        bridges = [Server(f"bridge{i}", [PY, "-m", "ingress", "bridge", "openai", "--target", target,
                                         "--port", str(port := free_port()), "--log-level", "warning"],
                          port, work / f"bridge-{tag}-{i}.log") for i, target in enumerate(engines)]
        edge = edges_for(work, f"llama-{tag}", LLAMA_MODEL, [b.url for b in bridges], 300.0)[policy]
        start_all(*bridges, edge, timeout=60.0)
        stack.callback(stop_all, edge, *bridges)
        yield edge, [b.pid for b in bridges]


def llama_pids() -> list[int]:
    """This process's llama-server children (tests/support/llama_engine.py starts them)."""
    out = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            ppid = int((cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == os.getpid() and cmdline.read_bytes().split(b"\0")[0].endswith(b"llama-server"):
                out.append(int(cmdline.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def evictions(work: Path, tag: str) -> int:
    """How many prompt-cache entries the engines of a run dropped to make room (their own logs say)."""
    return sum(log.read_text(errors="replace").count("making room for prompt cache entry")
               for log in work.glob(f"llama-{tag}-*.log"))


def part_llama(args: argparse.Namespace, work: Path, cache_ram_mib: int) -> dict[str, Any]:
    conversations_n, turns, concurrency = (4, 3, 2) if args.quick else (8, 6, 4)
    rng = random.Random("llama")
    conversations = multi_turn(rng, conversations_n, (turns, turns), system_words=110, user_words=(15, 30),
                               answer_words=(15, 30), families=conversations_n)
    policies = tuple(p for p in POLICIES if p in args.llama_policies)
    rounds: Rounds[str] = Rounds(policies, 1, order="rotate", baseline="p2c" if "p2c" in policies else None)
    for _, order in rounds:
        for policy in order:
            tag = f"ll{SHORT[policy]}{random.randrange(10**6):06d}"
            with llama_fleet(work, policy, tag, cache_ram_mib) as (edge, bridges):
                summary, _ = run_policy(edge, edge.stdout or work, LLAMA_MODEL, conversations, concurrency, tag,
                                        [*bridges, *llama_pids()])
            summary["evictions"] = evictions(work, tag)
            rounds.add(policy, summary)
            print(f"  llama {policy:<12} cached {summary['cached_tokens']} of {summary['prompt_tokens']} "
                  f"p50 {summary['ttft_p50_ms']:.0f} ms p99 {summary['ttft_p99_ms']:.0f} ms "
                  f"{summary['requests_per_s']:.2f} req/s, engines evicted {summary['evictions']}"
                  f"{errors_of(summary)}", flush=True)
    out = table_of(rounds, math.nan, concurrency, conversations_n * turns, policies)
    for policy in policies:
        for key in ("cached_tokens", "prompt_tokens", "evictions"):
            out["policies"][policy][key] = rounds.median(policy, key)
    out.update(conversations=conversations_n, turns=turns, cache_ram_mib=cache_ram_mib)
    return out


# --- the choice itself ---------------------------------------------------------------------------------


def _timed(fn: Callable[[], object], budget_s: float = 0.05) -> float:
    """CPU µs per call of `fn`: a loop calibrated to ~budget_s of thread CPU time, GC off."""
    n = 1
    while True:
        gc.disable()
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        dt = time.thread_time() - t0
        gc.enable()
        if dt >= budget_s:
            return dt / n * 1e6
        n *= 2 if dt < budget_s / 8 else 4


def passport_costs(rounds: int) -> dict[str, float]:
    """What the chain adds to a request's passport (a cache-affine group's routes only): a 16 KB chat
    request's passport with and without it, µs."""
    from ingress.encoding.passport import RequestMeta, compute_passport
    from ingress.oai.codec import decode_chat_request

    conversation = multi_turn(random.Random("passport"), 1, (30, 30))[0]
    messages = next(m for m in conversation.turns if len(msgspec.json.encode(m)) >= 16 * 1024)
    request = decode_chat_request(msgspec.json.encode({"model": SIM_MODEL, "messages": messages}))
    meta = RequestMeta()
    per: dict[str, list[float]] = {"passport with the chain": [], "passport without": []}
    for _ in range(rounds):
        per["passport with the chain"].append(_timed(lambda: compute_passport(request, meta, blocks=True)))
        per["passport without"].append(_timed(lambda: compute_passport(request, meta, blocks=False)))
    return {k: statistics.median(v) for k, v in per.items()}


def choice_timings(n: int, rng: random.Random, rounds: int) -> dict[str, list[float]]:
    """Each choice's CPU µs per request at `n` endpoints, once a round, in a random order each round."""
    from ingress.routing.affinity import Prefix
    from ingress.routing.balance import RoundRobin, choose
    from ingress.routing.health import EndpointState

    states = [EndpointState(url=f"http://10.0.1.{i}:8000") for i in range(n)]
    for s in states:
        s.in_flight = rng.randint(4, 6)
    affinity = configured()
    for _ in range(2000):  # other conversations the map already holds
        affinity.served(Prefix([rng.getrandbits(64) for _ in range(20)], 1), rng.choice(states).url, 1.0)
    chain = [rng.getrandbits(64) for _ in range(33)]
    later = Prefix(chain, 2)
    affinity.served(Prefix(chain[:30], 2), states[1].url, 2.0)
    counter = iter(range(10**9))
    blocks = list(chain)
    fresh = Prefix(blocks, 1)  # its conversation block (blocks[1]) made new for each call, in place

    def hit() -> None:
        decision = affinity.choose(states, later, 3.0, rng)
        assert decision is not None
        affinity.served(later, decision.endpoint.url, 3.0)

    def new() -> None:
        # A conversation never seen. Not a new Prefix each call: building its 33-block list took ~2 µs,
        # which the passport pays, not the choice (the figures before 2026-12-04's second run included it).
        blocks[1] = next(counter)
        decision = affinity.choose(states, fresh, 3.0, rng)
        assert decision is not None
        affinity.served(fresh, decision.endpoint.url, 3.0)

    long_blocks = list(chain)
    fresh_long = Prefix(long_blocks, 17)  # behind a long shared prefix (17 blocks), as shared-prefix's requests

    def new_long() -> None:
        long_blocks[17] = next(counter)
        decision = affinity.choose(states, fresh_long, 3.0, rng)
        assert decision is not None
        affinity.served(fresh_long, decision.endpoint.url, 3.0)

    robin = RoundRobin()
    candidates = {"cache_affine (hit)": hit, "cache_affine (new conversation)": new,
                  "cache_affine (new, behind a long shared prefix)": new_long,
                  "p2c": lambda: choose(states, 3.0, rng), "round_robin": lambda: robin.choose(states, 3.0)}
    per: dict[str, list[float]] = {k: [] for k in candidates}
    for _ in range(rounds):
        order = list(candidates)
        random.shuffle(order)
        for k in order:
            per[k].append(_timed(candidates[k]))
    return per


def configured() -> Any:
    """A CacheAffinity with the configuration's defaults (`affinity = {}`)."""
    from ingress.routing.affinity import CacheAffinity
    from ingress.settings import Affinity

    a = Affinity()
    return CacheAffinity(a.load_slack, a.max_entries, a.max_age, a.load_allowance, a.prefix_spread)


def part_choice(args: argparse.Namespace) -> dict[str, Any]:
    from ingress.routing.affinity import Prefix

    rng = random.Random(5)
    rounds = 3 if args.quick else 9
    found: dict[str, Any] = {"rounds": rounds, "timings_us": {}}
    for n in (4, 16):
        per = choice_timings(n, rng, rounds)
        found["timings_us"][str(n)] = {k: statistics.median(v) for k, v in per.items()}
        found["timings_us"][str(n)]["ranges"] = {k: [min(v), max(v)] for k, v in per.items()}
    found["passport_us"] = passport_costs(rounds)

    # memory: one map filled far past its cap with 33-block chains
    cap = 65_536  # the default max_entries, which configured() takes
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    affinity = configured()
    peak_entries = 0
    for i in range(cap // 8):  # 8,192 conversations x 32 blocks = 4x the cap
        affinity.served(Prefix([rng.getrandbits(64) for _ in range(33)], 1), f"http://10.0.1.{i % 16}:8000", 1.0)
        peak_entries = max(peak_entries, len(affinity.seen))
    size = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    found["memory"] = {"max_entries": cap, "entries_held": len(affinity.seen), "max_entries_seen": peak_entries,
                       "bytes": size, "peak_bytes": peak, "bytes_per_entry": size / max(1, len(affinity.seen)),
                       "bytes_at_cap_per_entry": peak / cap}
    found["orders"] = bucket_orders(16)
    return found


def bucket_orders(n: int) -> dict[str, float]:
    """The kept rendezvous orders at `n` endpoints: choose() of a request with only a key on its bucket's
    first use and after (µs, each bucket once, GC off, thread CPU), and what a CacheAffinity with every
    bucket's order and an empty prefix map holds (tracemalloc)."""
    from ingress.routing.affinity import BUCKETS, CacheAffinity, Prefix
    from ingress.routing.health import EndpointState

    states = [EndpointState(url=f"http://10.0.1.{i}:8000") for i in range(n)]
    rng = random.Random(1)
    affinity = CacheAffinity(0.25, 1024, 600.0)
    prefixes = [Prefix((), 0, b) for b in range(BUCKETS)]
    affinity.choose(states, prefixes[0], 0.0, rng)  # the members recorded
    gc.disable()
    t0 = time.thread_time()
    for prefix in prefixes[1:]:
        affinity.choose(states, prefix, 0.0, rng)
    first = (time.thread_time() - t0) / (BUCKETS - 1) * 1e6
    t0 = time.thread_time()
    for prefix in prefixes[1:]:
        affinity.choose(states, prefix, 0.0, rng)
    kept = (time.thread_time() - t0) / (BUCKETS - 1) * 1e6
    gc.enable()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    filled = CacheAffinity(0.25, 1024, 600.0)
    for prefix in prefixes:
        filled.choose(states, prefix, 0.0, rng)
    size = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    return {"endpoints": n, "first_use_us": first, "kept_us": kept, "bytes_all_filled": size}


# --- tables ----------------------------------------------------------------------------------------------


def print_choice(found: dict[str, Any]) -> None:
    t = Table(("choice, CPU µs per request", "<48"), ("4 endpoints", ">13"), ("16 endpoints", ">14"))
    print("\n" + t.header())
    for k in found["timings_us"]["4"]:
        if k != "ranges":
            print(t.row(k, figure(found["timings_us"]["4"][k], 2), figure(found["timings_us"]["16"][k], 2)))
    for k, v in found.get("passport_us", {}).items():
        print(t.row(f"{k} (16 KB chat)", figure(v, 1), ""))
    m = found["memory"]
    print(f"prefix map filled with 4x its cap of {m['max_entries']:,} entries: holds {m['entries_held']:,} "
          f"(never more than {m['max_entries_seen']:,}), {m['bytes'] / 2**20:.1f} MiB "
          f"(peak {m['peak_bytes'] / 2**20:.1f} MiB, {m['bytes_at_cap_per_entry']:.0f} bytes per entry of the cap)")
    if "orders" in found:
        o = found["orders"]
        print(f"rendezvous orders at {o['endpoints']} endpoints, choose() of a key-only request: "
              f"{o['first_use_us']:.1f} µs on its bucket's first use, {o['kept_us']:.1f} µs after; "
              f"every bucket's order kept: {o['bytes_all_filled'] / 2**10:.0f} KiB")


def print_policies(title: str, table: dict[str, Any], oracle: bool = True) -> None:
    cols = [("policy", "<14"), ("hit", ">7"), ("of oracle", ">10"), ("imbal", ">7"), ("p95", ">6"), ("of means", ">9"),
            ("TTFT p50", ">10"), ("p99", ">9"), ("req/s", ">8"), ("edge µs/req", ">12"), ("others %", ">9")]
    t = Table(*cols)
    extra = f"; oracle hit ratio {table['oracle_hit_ratio']:.3f}" if oracle else ""
    print(f"\n{title}: {table['requests']} requests, {table['concurrency']} at a time{extra}")
    print(t.header())
    for policy, f in table["policies"].items():
        print(t.row(policy, f"{f['hit_ratio']:.3f}", f"{f['of_oracle']:.2f}" if oracle else "-",
                    f"{f['imbalance_mean']:.2f}", f"{f['imbalance_p95']:.2f}", f"{f['imbalance_of_means']:.2f}",
                    figure(f["ttft_p50_ms"]),
                    figure(f["ttft_p99_ms"]), figure(f["requests_per_s"]), figure(f["edge_cpu_us_per_request"], 0),
                    figure(f["others_cpu_percent"], 0)))


def plot(found: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        print("note: matplotlib is not installed; no plot (pip install matplotlib)")
        return False
    panels = [(f"{s['endpoints']} demo endpoints", s) for s in found.get("sim", [])]
    if "llama" in found:
        panels.append(("2 llama-servers", {"workloads": {"multi-turn": found["llama"]}}))
    fig, axes = plt.subplots(2, len(panels), figsize=(5 * len(panels), 7.5), squeeze=False)
    colors = {"round_robin": "#999999", "p2c": "#4477aa", "cache_affine": "#ee6677"}
    for col, (title, setup) in enumerate(panels):
        names = list(setup["workloads"])
        width = 0.8 / len(POLICIES)
        for row, (key, label) in enumerate((("hit_ratio", "hit ratio (cached / prompt tokens)"),
                                            ("ttft_p50_ms", "TTFT p50, ms"))):
            ax = axes[row][col]
            for k, policy in enumerate(POLICIES):
                values = [setup["workloads"][w]["policies"].get(policy, {}).get(key, math.nan) for w in names]
                ax.bar([i + (k - 1) * width for i in range(len(names))], values, width, label=policy,
                       color=colors[policy])
            if key == "hit_ratio":
                oracle = [setup["workloads"][w].get("oracle_hit_ratio", math.nan) for w in names]
                ax.scatter(range(len(names)), oracle, marker="_", s=600, color="black", label="oracle", zorder=3)
            ax.set_xticks(range(len(names)), names, fontsize=8)
            ax.set_title(f"{title}: {label}", fontsize=9)
            if col == 0 and row == 0:
                ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="half the requests, one round, a smaller llama run")
    parser.add_argument("--rounds", type=int, help="of the simulated runs (default 2; --quick 1)")
    parser.add_argument("--parts", nargs="+", choices=["choice", "sim", "llama"], default=["choice", "sim", "llama"])
    parser.add_argument("--endpoints", nargs="+", type=int, default=[4, 16])
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS + MORE_WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--load-slack", type=float, help="the simulated cache_affine groups' (default: 0.25)")
    parser.add_argument("--load-allowance", type=float, help="the simulated cache_affine groups' (default: the "
                                                               "config's)")
    parser.add_argument("--prefix-spread", type=int, help="the simulated cache_affine groups' (default: the "
                                                            "config's)")
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES),
                        help="of the simulated part (default: all three)")
    parser.add_argument("--llama-cache-ram", nargs="+", type=int, metavar="MIB", default=[LLAMA_CACHE_RAM_SMALL_MIB],
                        help="each llama-server's prompt cache in RAM, one set-up each (default: "
                             f"{LLAMA_CACHE_RAM_SMALL_MIB}, about half of the states in play, so that it evicts; "
                             f"{LLAMA_CACHE_RAM_LARGE_MIB}: every state fits)")
    parser.add_argument("--llama-policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot-only", type=Path, metavar="JSON", help="draw the plot of a saved run, beside it")
    args = parser.parse_args()
    if args.plot_only:
        plot(json.loads(args.plot_only.read_text()), args.plot_only.with_suffix(".png"))
        return
    args.rounds = args.rounds or (1 if args.quick else 2)
    out = args.out or HERE / "results" / ("cache_affinity-quick.json" if args.quick else "cache_affinity.json")
    niced()
    random.seed(1)
    started = time.perf_counter()
    load_before = os.getloadavg()
    print(f"{describe(code_version())}; load average {load_before[0]:.2f}; 2 shared vCPUs, run under nice "
          f"{os.nice(0)}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="ingress-bench-affinity-"))
    found: dict[str, Any] = {}
    if "choice" in args.parts:
        found["choice"] = part_choice(args)
        print_choice(found["choice"])
    if "sim" in args.parts:
        found["sim"] = []
        for n in args.endpoints:
            if found:
                time.sleep(0 if args.quick else PAUSE_S)
            print(f"\nsimulated caches, {n} endpoints ({CACHE_BLOCKS} blocks each, {PREFILL_US:.0f} µs a token)",
                  flush=True)
            found["sim"].append(part_sim(args, work, n))
    if "llama" in args.parts:
        time.sleep(PAUSE_S if found and not args.quick else 0)
        setups = []
        for mib in args.llama_cache_ram:
            print(f"\ntwo llama-servers behind bridges, --cache-ram {mib} MiB each", flush=True)
            setups.append(part_llama(args, work, mib))
        found["llama"], found["llama_more"] = setups[0], setups[1:]  # the first in the plot; all in the tables
    for setup in found.get("sim", []):
        for name, table in setup["workloads"].items():
            print_policies(f"{setup['endpoints']} demo endpoints, {name}", table)
    for setup in [found["llama"], *found.get("llama_more", [])] if "llama" in found else []:
        print_policies(f"2 llama-servers, multi-turn, --cache-ram {setup['cache_ram_mib']} MiB", setup, oracle=False)
        for policy, f in setup["policies"].items():
            print(f"  {policy}: engines' cached tokens {f['cached_tokens']:.0f} of {f['prompt_tokens']:.0f}, "
                  f"prompt-cache entries evicted {f['evictions']:.0f}")
    if "choice" in found:
        print_choice(found["choice"])
    seconds = time.perf_counter() - started
    load_after = os.getloadavg()
    print(f"\n{seconds:.0f} s in all; load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"code": code_version(), "quick": args.quick, "args": {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "load_before": load_before,
        "load_after": load_after, "seconds": seconds, "python": sys.version.split()[0], **found}, indent=1,
        default=lambda o: dict(o) if isinstance(o, Counter) else str(o)) + "\n")
    print(f"wrote {out}")
    if not args.no_plot and plot(found, out.with_suffix(".png")):
        print(f"wrote {out.with_suffix('.png').name} beside it")


if __name__ == "__main__":
    main()
