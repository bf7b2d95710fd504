"""Command line: `ingress serve` (the edge) and `ingress demo-upstream` (the demo internal service)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from aiohttp import web

from ingress.log import configure, get_logger
from ingress.settings import Settings


def _loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # uvloop does not build on every platform; asyncio's loop still works
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _serve(args: argparse.Namespace) -> int:
    from ingress.app import create_app, tune_gc

    settings = Settings(host=args.host, port=args.port, upstream=args.upstream, models=tuple(args.model or ()),
                        log_level=args.log_level, encoder=args.encoder, gc_freeze=not args.no_gc_freeze,
                        gc_threshold0=args.gc_threshold0)
    configure(settings.log_level)
    upstream = settings.upstream or "embedded demo service"
    get_logger("ingress").info("starting", listen=f"http://{settings.host}:{settings.port}", upstream=upstream,
                               models=list(settings.served_models()))
    app = create_app(settings)
    app.on_startup.append(tune_gc)  # after the cleanup contexts: everything built at start-up is frozen
    web.run_app(app, host=settings.host, port=settings.port, loop=_loop(),
                handler_cancellation=True, access_log=None, print=None)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ingress.demo.service import create_demo_app

    configure(args.log_level)
    get_logger("ingress.demo").info("starting", listen=f"http://{args.host}:{args.port}")
    web.run_app(create_demo_app(args.delay_ms / 1000), host=args.host, port=args.port, loop=_loop(),
                handler_cancellation=True, access_log=None, print=None)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ingress", description="Edge proxy for LLM traffic.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the edge (with the demo service embedded unless --upstream)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--upstream", help="base URL of the internal service, e.g. http://10.0.0.5:9000")
    serve.add_argument("--model", action="append", help="a served model name (repeat); default: any")
    serve.add_argument("--log-level", default="info")
    serve.add_argument("--encoder", choices=("generated", "stock"), default="generated",
                       help="FlatBuffers encoder: the generated one, or the stock Builder (for comparison)")
    serve.add_argument("--gc-threshold0", type=int, default=Settings().gc_threshold0,
                       help="young-generation GC threshold")
    serve.add_argument("--no-gc-freeze", action="store_true", help="do not gc.freeze() start-up objects")
    serve.set_defaults(run=_serve)
    demo = sub.add_parser("demo-upstream", help="run the demo internal service alone")
    demo.add_argument("--host", default="127.0.0.1")
    demo.add_argument("--port", type=int, default=9000)
    demo.add_argument("--delay-ms", type=float, default=0.0, help="pause between streamed tokens")
    demo.add_argument("--log-level", default="info")
    demo.set_defaults(run=_demo)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
