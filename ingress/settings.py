"""Configuration, read once at start-up into frozen typed settings and passed down.

A TOML file (`serve --config FILE`, `check-config FILE`) decodes into `Settings`; the command-line
shorthand (`--upstream URL --model NAME`) builds the same thing with one group and one route each.
"""

from __future__ import annotations

import os
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from ingress.admin.settings import Admin
from ingress.cache.settings import CacheSettings, RouteCache
from ingress.state.settings import ResponsesSettings
from ingress.tenancy.settings import Tenancy

DEMO_MODEL = "ingress-demo"
DEMO_GROUP = "demo"
DEFAULT_GROUP = "default"
EMBEDDED = "embedded:"  # the endpoint URL of the demo service started beside the edge

Seconds = Annotated[float, Meta(gt=0, le=86_400)]
Count = Annotated[int, Meta(ge=0, le=1_000_000)]
# A FlatBuffers buffer is smaller than 2 GiB; a request is encoded from a body of about its size, and
# the decoded body is held beside it, so a body is held to half that.
BufferBytes = Annotated[int, Meta(ge=1024, le=2**31 - 1)]
BodyBytes = Annotated[int, Meta(ge=1024, le=2**30)]
EndpointUrl = Annotated[str, Meta(pattern=r"^(https?://[^\s/]+/?\Z|unix:/\S+\Z|embedded:\Z)")]
LogLevel = Literal["debug", "info", "warning", "error", "critical"]
EnvName = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*\Z")]
HeaderName = Annotated[str, Meta(pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}\Z")]


class _Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Unknown keys are errors: a misspelt setting must not be silently ignored."""


class Timeouts(_Config, frozen=True):
    """Upstream timeouts in seconds. No total by default: long generations must not be cut."""

    connect: Seconds = 5.0
    first_byte: Seconds = 600.0  # until the response head; a non-streamed answer may take minutes
    idle: Seconds = 300.0  # between two reads of a streamed body
    total: Seconds | None = None
    heartbeat: Seconds = 15.0  # SSE comment while a stream waits for its first token


BridgeTarget = Annotated[str, Meta(pattern=r"^https?://[^\s/]+(/[!-~]*)?\Z")]


class Bridge(_Config, frozen=True):
    """An engine or provider reached through a bridge the edge runs in-process (as `ingress bridge` runs
    one beside an engine): our contract to it, the dialect's API from it to `target`. Credentials come
    from the environment or a file, read at start-up, never from a request."""

    dialect: Literal["openai", "anthropic", "gemini"]
    target: BridgeTarget  # the engine's base URL; the dialect adds /v1/...
    model: Annotated[str, Meta(min_length=1, max_length=256)] | None = None  # sent when the route names none
    api_key_env: Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*\Z")] | None = None
    api_key_file: Annotated[str, Meta(min_length=1)] | None = None
    max_tokens: Annotated[int, Meta(ge=1, le=2**31 - 1)] = 4096  # for providers that require it (Anthropic)
    timeouts: Timeouts = Timeouts()  # the bridge's own deadlines to the engine


class Endpoint(_Config, frozen=True):
    """An internal service by `url`, or an engine by `bridge` (then `url` is the in-process bridge's)."""

    url: EndpointUrl | None = None  # one of url and bridge (config.py checks)
    bridge: Bridge | None = None
    weight: Annotated[int, Meta(ge=1, le=1000)] = 1
    max_in_flight: Count = 0  # 0: no limit of its own
    keepalive: Seconds = 4.0  # an idle connection to it is closed after this: keep it below the service's own


class HealthCheck(_Config, frozen=True):
    """Active checks: GET `path` on every endpoint each `interval`."""

    path: Annotated[str, Meta(pattern=r"^/[!-~]*\Z")] = "/healthz"  # printable ASCII: it goes in a request line
    interval: Seconds = 5.0
    timeout: Seconds = 1.0


class Ejection(_Config, frozen=True):
    """Passive health: `failures` in a row eject an endpoint for `base`, doubling up to `max`."""

    failures: Annotated[int, Meta(ge=1, le=1000)] = 3
    base: Seconds = 5.0
    max: Seconds = 300.0


class Affinity(_Config, frozen=True):
    """A cache-affine group's choice (docs/routing.md): how far above the mean load an endpoint may be and
    still take a request its cache prefers, over how many endpoints a long shared prefix's conversations
    go first, and what each worker remembers of where prefixes went."""

    load_slack: Annotated[float, Meta(ge=0, le=10)] = 0.25  # within (1 + load_slack) x the mean outstanding
    # ... or at most load_allowance requests above the other endpoints' mean: at low load, where the relative
    # bound allows one request above the mean, an endpoint may still take its conversations back.
    load_allowance: Annotated[float, Meta(ge=0, le=1000)] = 2.0
    # Conversations behind one long shared prefix (4 KiB or more before the first user message: a system
    # prompt, tools) hashed over this many endpoints of the prefix's own order first, so that it is
    # prefilled on a few, not all (the load bound spreads the rest further down that order). 0, the default:
    # over all, so that every replica agrees on each conversation's endpoint however loaded the few would be.
    prefix_spread: Annotated[int, Meta(ge=0, le=10_000)] = 0
    # Blocks remembered (each ~100 bytes): size it to what the engines' caches hold together, in blocks of
    # 512 bytes of prompt (~128 tokens); remembering more than they keep sends requests to evicted prefixes.
    max_entries: Annotated[int, Meta(ge=64, le=10_000_000)] = 65_536
    max_age: Seconds = 600.0  # a prefix last served longer ago is taken to be evicted


class Group(_Config, frozen=True):
    endpoints: Annotated[list[Endpoint], Meta(min_length=1)]
    max_in_flight: Count = 0  # 0: no limit
    max_queue: Count = 0  # requests waiting for a free slot; beyond it, 503 at once
    queue_timeout: Seconds = 5.0
    health_check: HealthCheck | None = None
    ejection: Ejection = Ejection()
    # "p2c": power of two choices on outstanding requests. "cache_affine": where the prompt's prefix was
    # last served, within a load bound, else where rendezvous hashing puts its conversation (docs/routing.md).
    # "round_robin": each endpoint in turn, by weight, blind to load.
    balance: Literal["p2c", "cache_affine", "round_robin"] = "p2c"
    affinity: Affinity | None = None  # cache_affine's settings (default: Affinity())


ErrorClass = Literal["unavailable", "5xx", "timeout", "rate_limited", "context_length", "content_filter"]
RouteName = Annotated[str, Meta(min_length=1, max_length=256)]


class Share(_Config, frozen=True):
    """One variant of a split: the route that serves it and its weight (a share of the split's total)."""

    route: RouteName
    weight: Annotated[int, Meta(ge=0, le=1_000_000)]


class Route(_Config, frozen=True):
    """One of `model` (exact), `prefix` or `glob` selects the requests; aliases are more exact names. A route
    with only a `name` is reached from other routes alone (as a fallback or a split's variant)."""

    group: str
    name: RouteName | None = None  # what fallbacks and splits call it (default: its model, prefix or glob)
    model: str | None = None
    prefix: str | None = None
    glob: str | None = None
    aliases: list[str] = []
    upstream_model: str | None = None  # the name sent upstream (default: `model`, or the name asked for)
    provider: Literal["openai", "anthropic", "self_hosted", "gemini"] = "openai"
    fallback: str | None = None  # a group tried when `group` is unavailable or fails before the first byte
    # Routes tried in order, each with its own group and upstream model, when an attempt fails in one of
    # the classes of `fallback_on`, before the client was sent anything (docs/routing.md, "Fallback chains").
    fallbacks: list[RouteName] = []
    fallback_on: tuple[ErrorClass, ...] = ("unavailable",)
    # The longest prompt (in the edge's count of its tokens) the route's model takes: as a fallback, the
    # route is skipped up front for a longer one.
    max_context: Annotated[int, Meta(ge=1, le=2**31 - 1)] | None = None
    # Weighted shares of the route's requests served by other routes (or itself), sticky by `split_by`:
    # the API key, the request's `user` or `safety_identifier`, or the value of the header `split_header`.
    split: list[Share] = []
    split_by: Literal["key", "user", "safety_identifier", "header"] = "key"
    split_header: HeaderName | None = None
    timeouts: Timeouts | None = None
    # Top-level request fields that are not OpenAI's (an engine's top_k, min_p, guided_json...): refused
    # with a 400 naming the field, or forwarded to the internal service as one JSON object (extra_json).
    extra_fields: Literal["refuse", "forward"] = "refuse"
    # The client's own `Authorization: Bearer` key travels to the internal service (a bridge then calls
    # the provider with it instead of its own key): for providers whose callers bring their own keys.
    # Off by default: a client's credential goes nowhere but the edge.
    forward_authorization: bool = False
    # The exact response cache (ingress/cache, docs/routing.md): `{ttl, scope, backend}`; None: none.
    cache: RouteCache | None = None
    # What counts the prompt's tokens (ingress/tokens): "o200k", "cl100k" or a tokenizer.json path;
    # None: chosen from the upstream model's name (OpenAI's models), else an upper-bound estimate.
    tokenizer: Annotated[str, Meta(min_length=1)] | None = None
    # Who answers a Messages request's count_tokens (a Gemini request's countTokens): the edge's tokenizer, or
    # (provider = "anthropic" or "gemini" only) the provider itself, asked through the route's bridge.
    count_tokens: Literal["edge", "provider"] = "edge"
    # With [tracing]: the request's span carries the prompt (as sent, after the guardrails' redaction) and the
    # answer's text (gen_ai.input.messages, gen_ai.output.messages). Off: no span holds a request's text.
    trace_content: bool = False
    # A cache-affine group's explicit affinity key: this request header's value (e.g. "x-session-id"), when
    # sent, keys the choice instead of the prompt's hash, before the request's own `prompt_cache_key`.
    affinity_header: HeaderName | None = None
    # OpenAI's built-in tools in a Responses request (`web_search`, `file_search`, `code_interpreter`...),
    # which the route's service cannot run: left out of what the model is offered, named in the access line
    # as hints not sent ("omit"), or refused with a 400 naming the tool ("refuse").
    hosted_tools: Literal["omit", "refuse"] = "omit"
    # A Responses request travels as the chat request it amounts to ("as_chat"), or also whole, as its client
    # sent it, for the OpenAI bridge to send on to /v1/responses ("whole": a route to OpenAI's own API, where
    # client_metadata, the built-in tools and OpenAI's own sealed reasoning go on as they came).
    responses: Literal["as_chat", "whole"] = "as_chat"
    # On a route to Anthropic (provider = "anthropic"), a chat or Responses request that places no prompt-cache
    # breakpoint of its own gets the edge's (pipeline/turns.py), so that Anthropic caches its prompt at all.
    auto_cache_breakpoints: bool = True
    # System and developer messages after the conversation's first other message, which many engines' chat
    # templates refuse: delivered as user text in a `<system>` tag ("fold", ingress/pipeline/turns.py) or
    # as sent ("keep"). None: "fold" on a "self_hosted" route, "keep" on the others.
    late_system: Literal["fold", "keep"] | None = None


class Retry(_Config, frozen=True):
    """Retries of requests that never reached an endpoint, bounded by a budget (no retry storms)."""

    attempts: Annotated[int, Meta(ge=0, le=5)] = 2
    budget_ratio: Annotated[float, Meta(ge=0, le=1)] = 0.2  # retries at most this share of requests
    budget_min_per_s: Annotated[float, Meta(ge=0, le=1000)] = 3.0  # plus this many a second


class DrainTiming(_Config, frozen=True):
    """On SIGTERM: readiness turns false at once; after `delay` the listener closes; requests and
    streams still running get until `deadline` more, then an error (in-band for streams)."""

    delay: Annotated[float, Meta(ge=0, le=3600)] = 5.0
    deadline: Seconds = 30.0


class Client(_Config, frozen=True):
    """Client connections: deadlines for reading a request, and how many connections a worker holds.

    nginx's defaults are the anchors (client_header_timeout and client_body_timeout 60 s,
    keepalive_timeout 75 s: longer than the 60 s idle timeout of the common load balancers, so the
    balancer, which knows, is the one to close an idle connection); and send_timeout 60 s for a client
    that stops reading a stream, which would otherwise hold its generation and its endpoint's slot for
    ever. Beyond `max_connections` a worker
    stops accepting: new connections wait in the shared listen backlog, where another worker with
    room takes them, rather than being accepted only to be closed."""

    header_timeout: Seconds = 60.0  # from a request's first byte until its whole head has arrived
    body_timeout: Seconds = 60.0  # between two reads of a request body; then 408 request_timeout
    keepalive_timeout: Seconds = 75.0  # a connection with no request in progress is closed after this
    write_timeout: Seconds = 60.0  # how long one write of an answer may wait for a client that stopped reading
    max_connections: Annotated[int, Meta(ge=1, le=1_000_000)] = 1024  # per worker


class Overload(_Config, frozen=True):
    """A worker's in-flight limit, tuned as it runs (ingress/edge/concurrency.py): past saturation, requests
    admitted only queue behind each other on the worker's event loop, so requests beyond the limit wait in
    arrival order, costing nothing until admitted, and after `max_wait_ms` get 503 with Retry-After.
    A stream holds its place until its head is sent. Off unless enabled."""

    enabled: bool = False
    min_limit: Annotated[int, Meta(ge=1, le=100_000)] = 8
    max_limit: Annotated[int, Meta(ge=1, le=100_000)] = 1024
    initial_limit: Annotated[int, Meta(ge=1, le=100_000)] = 32
    # Requests waiting on the worker's own work (not on the upstream) the limit is tuned to keep
    target_queue: Annotated[float, Meta(ge=0.5, le=10_000)] = 32.0
    max_wait_ms: Annotated[float, Meta(ge=0, le=600_000)] = 1000.0  # 0: refused at once at the limit

    def __post_init__(self) -> None:  # msgspec reports it as this section's validation error
        if not self.min_limit <= self.initial_limit <= self.max_limit:
            raise ValueError("the limits need min_limit <= initial_limit <= max_limit")


class Tracing(_Config, frozen=True):
    """OpenTelemetry spans of the requests served, exported over OTLP/HTTP (ingress/tracing/); without
    this section nothing of it runs. The collector's auth headers come from the environment, never the file."""

    endpoint: BridgeTarget  # the collector's traces URL, e.g. http://otel-collector:4318/v1/traces
    sample_ratio: Annotated[float, Meta(ge=0, le=1)] = 1.0  # of new traces; a caller's sampled flag is followed
    service_name: Annotated[str, Meta(min_length=1, max_length=256)] = "ingress"
    headers_env: dict[HeaderName, EnvName] = {}  # header name -> the environment variable holding its value
    max_queue: Annotated[int, Meta(ge=1, le=1_000_000)] = 4096  # spans awaiting export; past it dropped, counted
    max_batch: Annotated[int, Meta(ge=1, le=100_000)] = 512  # spans a request to the collector
    flush_interval: Seconds = 1.0  # a batch is sent at least this often
    export_timeout: Seconds = 5.0  # one request to the collector (its retries included)


class SealKey(_Config, frozen=True):
    """A key that seals what the edge gives clients to send back (reasoning, compactions): 32 bytes in
    base64 in the environment variable `key_env`, named by `id` in every blob it seals."""

    id: Annotated[str, Meta(pattern=r"^[A-Za-z0-9._-]{1,32}\Z")]
    key_env: EnvName


class Sealing(_Config, frozen=True):
    """The sealing keys: the first seals, every one opens (add the new key first, drop the old one once no
    client holds what it sealed). Every replica needs the same keys."""

    keys: Annotated[list[SealKey], Meta(min_length=1, max_length=16)]


class Settings(_Config, frozen=True):
    host: Annotated[str, Meta(pattern=r"^[A-Za-z0-9._:%-]{1,253}\Z")] = "127.0.0.1"  # a name or an address
    port: Annotated[int, Meta(ge=0, le=65535)] = 8080
    unix: str | None = None  # listen on this Unix socket path instead of host:port
    upstream: EndpointUrl | None = None  # shorthand: one group of one endpoint
    models: tuple[str, ...] = ()  # shorthand: the served model names (empty: any)
    groups: dict[str, Group] = {}
    routes: tuple[Route, ...] = ()
    retry: Retry = Retry()
    drain: DrainTiming = DrainTiming()
    client: Client = Client()
    overload: Overload = Overload()  # the in-flight limit per worker (off by default)
    workers: Annotated[int, Meta(ge=0, le=512)] = 0  # processes sharing the listener; 0: one per CPU
    max_body_bytes: BodyBytes = 8 * 1024 * 1024
    max_answer_bytes: BufferBytes = 64 * 1024 * 1024
    max_frame_bytes: BufferBytes = 16 * 1024 * 1024
    # A request's texts counted exactly up to this many bytes, estimated past it (ingress/tokens): ~4 ms
    max_exact_count_bytes: Annotated[int, Meta(ge=0, le=2**30)] = 32 * 1024
    timeouts: Timeouts = Timeouts()
    tenancy: Tenancy | None = None  # keys, limits and budgets; without it the edge is open to any caller
    tracing: Tracing | None = None  # OpenTelemetry spans; without it none are made
    admin: Admin | None = None  # the admin API on a listener of its own (ingress/admin, docs/admin.md)
    cache: CacheSettings = CacheSettings()  # what the routes' response caches share
    responses: ResponsesSettings = ResponsesSettings()  # what `store: true` keeps, and where (ingress/state)
    # The keys of what the edge seals for clients (ingress/oai/sealing.py); without them, a key made at
    # start and shared by this edge's workers, so that what it sealed opens only until it restarts.
    sealing: Sealing | None = None
    verify_answers: bool = True  # verify every upstream buffer before reading it
    # New requests' starts get at most this much of one turn of the event loop while others wait for the
    # next turns, so a burst of them does not hold the chunks of streams already flowing (ingress/edge/pacing.py).
    # 0: no pacing.
    start_pacing_ms: Annotated[float, Meta(ge=0, le=1_000)] = 2.0
    # The least a turn's budget goes down to as it is shared among the streams being written past 64: a turn
    # spent on starts delays every stream's next chunk (bench/notes/chunks.md, "512 streams: starts and ends
    # paced by the streams waiting").
    start_pacing_streaming_ms: Annotated[float, Meta(ge=0, le=1_000)] = 0.25
    log_level: LogLevel = "info"
    gc_freeze: bool = True  # gc.freeze() once started (bench/gc_pauses.py measures the effect)
    # A young collection's pause grows with the objects alive in the young generation: at 2,000 a
    # collection takes ~0.7 ms at 256 streams, where at 10,000 it took 4-6 ms (bench/notes/chunks.md,
    # "GC thresholds for many streams").
    gc_threshold0: Annotated[int, Meta(ge=1, le=1_000_000)] = 2_000
    # Young collections between two of the middle generation's, each of which scans everything the young
    # ones kept alive since (8-20 ms at 256 streams): one per ~200,000 objects kept, as 10,000 x 10 was.
    gc_threshold1: Annotated[int, Meta(ge=1, le=1_000_000)] = 100

    def worker_count(self) -> int:
        return self.workers or os.cpu_count() or 1

    def resolved(self) -> tuple[dict[str, Group], tuple[Route, ...]]:
        """The groups and routes to serve: the configured ones, or those the shorthand implies."""
        if self.groups:
            return self.groups, self.routes
        if self.upstream is not None:
            groups = {DEFAULT_GROUP: Group(endpoints=[Endpoint(url=self.upstream)])}
            routes = tuple(Route(model=m, group=DEFAULT_GROUP) for m in self.models) or (
                Route(glob="*", group=DEFAULT_GROUP),)
            return groups, routes
        groups = {DEMO_GROUP: Group(endpoints=[Endpoint(url=EMBEDDED)])}
        names = self.models or (DEMO_MODEL,)
        return groups, tuple(Route(model=m, group=DEMO_GROUP) for m in names)
