"""Command line: `ingress serve` (the edge), `ingress bridge DIALECT` (a bridge to an engine, alone, e.g.
as a sidecar beside it), `ingress keys new` (a virtual key) and `ingress demo-upstream` (the demo
internal service)."""

from __future__ import annotations

import argparse
import sys
import typing

from aiohttp import web

from ingress.log import capture_uncaught, configure, get_logger
from ingress.settings import LogLevel, Settings


def _settings(args: argparse.Namespace) -> Settings:
    """The config file if given, else defaults; command-line flags given explicitly override either."""
    from ingress.config import ConfigError, load_config, override

    overrides = {k: v for k, v in {
        "host": args.host, "port": args.port, "unix": args.unix, "upstream": args.upstream,
        "models": tuple(args.model) if args.model else None, "log_level": args.log_level,
        "gc_threshold0": args.gc_threshold0, "gc_threshold1": args.gc_threshold1,
        "gc_freeze": False if args.no_gc_freeze else None,
        "workers": args.workers,
    }.items() if v is not None}
    try:
        base = load_config(args.config) if args.config else Settings()
        return override(base, overrides) if overrides else base
    except ConfigError as exc:
        raise SystemExit(f"ingress: {exc}") from None


def _serve(args: argparse.Namespace) -> int:
    from ingress.bridges import CredentialsError, target_of
    from ingress.routing.table import RouteTable
    from ingress.serve.app import sealer
    from ingress.serve.server import serve, workers_of

    settings = _settings(args)
    groups, _ = settings.resolved()
    for name, group in groups.items():
        for j, endpoint in enumerate(group.endpoints):
            if endpoint.bridge is not None:
                try:
                    target_of(endpoint.bridge)  # credentials read now: a missing key stops the start, named
                except CredentialsError as exc:
                    raise SystemExit(f"ingress: groups.{name}.endpoints[{j}].bridge: {exc}") from None
    try:
        sealer(settings)  # the sealing keys read now (or, without [sealing], one made): a bad one stops the start
    except ValueError as exc:
        raise SystemExit(f"ingress: {exc}") from None
    configure(settings.log_level)
    capture_uncaught()
    groups, routes = settings.resolved()
    listen = f"unix:{settings.unix}" if settings.unix else f"http://{settings.host}:{settings.port}"
    get_logger("ingress").info("starting", listen=listen, workers=workers_of(settings),
                               groups={n: [e.url for e in g.endpoints] for n, g in groups.items()},
                               models=RouteTable(routes).listed_models())
    return serve(settings)


def _check_config(args: argparse.Namespace) -> int:
    from ingress.config import ConfigError, load_config
    from ingress.routing.table import RouteTable

    try:
        settings = load_config(args.file)
    except ConfigError as exc:
        print(f"ingress: {exc}", file=sys.stderr)
        return 1
    groups, routes = settings.resolved()
    print(f"{args.file}: ok — {len(groups)} groups, {sum(len(g.endpoints) for g in groups.values())} endpoints, "
          f"{len(routes)} routes; models: {', '.join(RouteTable(routes).listed_models()) or '(patterns only)'}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ingress.demo.cache import KvCacheSettings
    from ingress.demo.service import create_demo_app
    from ingress.serve.server import event_loop

    if args.cache_blocks < 0 or args.prefill_us_per_token < 0:
        print("ingress: --cache-blocks and --prefill-us-per-token may not be negative", file=sys.stderr)
        return 2
    kv_cache = KvCacheSettings(blocks=args.cache_blocks, prefill_s_per_token=args.prefill_us_per_token / 1e6)
    configure(args.log_level)
    capture_uncaught()
    listen = f"unix:{args.unix}" if args.unix else f"http://{args.host}:{args.port}"
    get_logger("ingress.demo").info("starting", listen=listen)
    where = {"path": args.unix} if args.unix else {"host": args.host, "port": args.port}
    web.run_app(create_demo_app(args.delay_ms / 1000, kv_cache), **where, loop=event_loop(),
                handler_cancellation=True, access_log=None, print=None)
    return 0


def _bridge(args: argparse.Namespace) -> int:
    from ingress.bridges import CredentialsError, dialect_key, load_dialect
    from ingress.bridges.dialect import Target
    from ingress.bridges.service import create_bridge_app
    from ingress.config import ConfigError, bridge_config, tracing_config
    from ingress.serve.server import event_loop
    from ingress.tracing import Tracer

    try:
        config = bridge_config({k: v for k, v in {
            "dialect": args.dialect, "target": args.target, "model": args.model, "api_key_env": args.api_key_env,
            "api_key_file": args.api_key_file, "max_tokens": args.max_tokens}.items() if v is not None})
        target = Target(url=config.target, model=config.model, max_tokens=config.max_tokens,
                        api_key=dialect_key(config.dialect, config.api_key_env, config.api_key_file))
        tracing = tracing_config(args.trace_endpoint, args.trace_sample_ratio, "ingress-bridge")
    except (ConfigError, CredentialsError) as exc:
        raise SystemExit(f"ingress bridge: {exc}") from None
    configure(args.log_level)
    capture_uncaught()
    listen = f"unix:{args.unix}" if args.unix else f"http://{args.host}:{args.port}"
    get_logger("ingress.bridge").info("starting", dialect=args.dialect, listen=listen, target=config.target)
    where = {"path": args.unix} if args.unix else {"host": args.host, "port": args.port}
    tracer = Tracer(tracing) if tracing is not None else None
    app = create_bridge_app(load_dialect(args.dialect), target, config.timeouts, tracer=tracer)
    try:
        web.run_app(app, **where, loop=event_loop(), handler_cancellation=True, access_log=None, print=None)
    finally:
        if tracer is not None:
            tracer.flush()  # the spans still queued, before the process ends
    return 0


def _name(value: str) -> str:
    import re

    if not re.fullmatch(r"[A-Za-z0-9._:-]{1,64}", value):
        raise argparse.ArgumentTypeError("a tenant is 1 to 64 letters, digits or . _ : -")
    return value


def _model(value: str) -> str:
    if not value or not value.isprintable() or '"' in value or "\\" in value:
        raise argparse.ArgumentTypeError("printable, without quotes or backslashes")
    return value


def _keys_new(args: argparse.Namespace) -> int:
    """Print a new key once, and the configuration entry that holds only its hash."""
    from ingress.tenancy.keys import new_key

    key, key_id, digest = new_key()
    if args.admin is not None:
        print(f"# The admin key, shown this once (it is kept nowhere):\n#   {key}\n# Its entry, for the config:\n"
              f'[[admin.keys]]\nid = "{key_id}"\nhash = "{digest}"\nrole = "{args.admin}"')
        return 0
    if args.tenant is None:
        raise SystemExit("ingress keys new: --tenant is required (or --admin ROLE, for an admin key)")
    models = ", ".join(f'"{m}"' for m in (args.model or ["*"]))
    name = f'\nname = "{args.name}"' if args.name else ""
    print(f"# The key, shown this once (it is kept nowhere; give it to its owner):\n#   {key}\n"
          f"# Its entry, for [tenancy] in the config or the keys file (add limits = {{ rpm = ..., tpm = ... }}):\n"
          f'[[{"keys" if args.keys_file else "tenancy.keys"}]]\nid = "{key_id}"\ntenant = "{args.tenant}"\n'
          f'hash = "{digest}"\nmodels = [{models}]{name}')
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ingress", description="Edge proxy for LLM traffic.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the edge (with the demo service embedded unless --upstream)")
    serve.add_argument("--config", help="a TOML configuration file (see README)")
    serve.add_argument("--host", help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default 8080)")
    serve.add_argument("--unix", help="listen on this Unix socket path instead (sidecar mode)")
    serve.add_argument("--upstream", help="base URL of the internal service: http://host:port or unix:/path")
    serve.add_argument("--model", action="append", help="a served model name (repeat); default: any")
    serve.add_argument("--workers", type=int, help="worker processes sharing the listener (default: one per CPU)")
    serve.add_argument("--log-level", choices=typing.get_args(LogLevel))
    serve.add_argument("--gc-threshold0", type=int, help="young-generation GC threshold (default 2000)")
    serve.add_argument("--gc-threshold1", type=int,
                       help="young collections per middle-generation collection (default 100)")
    serve.add_argument("--no-gc-freeze", action="store_true", help="do not gc.freeze() start-up objects")
    serve.set_defaults(run=_serve)
    check = sub.add_parser("check-config", help="validate a configuration file without serving")
    check.add_argument("file")
    check.set_defaults(run=_check_config)
    bridge = sub.add_parser("bridge", help="serve our contract in front of an engine's or provider's API")
    bridge.add_argument("dialect", choices=["openai", "anthropic", "gemini"],
                        help="openai: any OpenAI-compatible engine (vLLM, SGLang, llama.cpp, TGI, Ollama, OpenAI); "
                             "anthropic: Anthropic's Messages API; gemini: Google's Gemini API (its key from "
                             "GEMINI_API_KEY or GOOGLE_API_KEY unless --api-key-env/--api-key-file names one)")
    bridge.add_argument("--target", required=True, help="the engine's base URL, e.g. http://127.0.0.1:8000")
    bridge.add_argument("--model", help="the model name to send when the request's route names none")
    bridge.add_argument("--api-key-env", help="the environment variable holding the engine's API key")
    bridge.add_argument("--api-key-file", help="a file holding the engine's API key")
    bridge.add_argument("--max-tokens", type=int, help="max_tokens when a request gives none (Anthropic needs one)")
    bridge.add_argument("--host", default="127.0.0.1")
    bridge.add_argument("--port", type=int, default=9000)
    bridge.add_argument("--unix", help="listen on this Unix socket path instead")
    bridge.add_argument("--log-level", default="info", choices=typing.get_args(LogLevel))
    bridge.add_argument("--trace-endpoint", help="an OTLP/HTTP collector's traces URL: each call to the engine "
                        "a span, the child of the edge's (e.g. http://127.0.0.1:4318/v1/traces)")
    bridge.add_argument("--trace-sample-ratio", type=float, help="of traces the edge did not start (default 1.0)")
    bridge.set_defaults(run=_bridge)
    keys = sub.add_parser("keys", help="virtual keys for [tenancy]")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    new = keys_sub.add_parser("new", help="make a key: print it once, and its configuration entry")
    new.add_argument("--tenant", type=_name, help="the tenant the key belongs to")
    new.add_argument("--admin", choices=("admin", "viewer"), help="an admin API key of this role ([[admin.keys]])")
    new.add_argument("--model", action="append", type=_model,
                     help="a model name or glob it may use (repeat; default *)")
    new.add_argument("--name", type=_model, help="a description, for people")
    new.add_argument("--keys-file", action="store_true", help="print the entry for a keys file ([[keys]])")
    new.set_defaults(run=_keys_new)
    demo = sub.add_parser("demo-upstream", help="run the demo internal service alone")
    demo.add_argument("--host", default="127.0.0.1")
    demo.add_argument("--port", type=int, default=9000)
    demo.add_argument("--unix", help="listen on this Unix socket path instead")
    demo.add_argument("--delay-ms", type=float, default=0.0, help="pause between streamed tokens")
    demo.add_argument("--cache-blocks", type=int, default=0,
                      help="simulate an engine's prefix cache of this many prompt blocks (LRU; 0: none): "
                           "answers report cached_tokens")
    demo.add_argument("--prefill-us-per-token", type=float, default=0.0,
                      help="the first token waits this long for each prompt token not read from the cache")
    demo.add_argument("--log-level", default="info", choices=typing.get_args(LogLevel))
    demo.set_defaults(run=_demo)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
