"""Run the edge with a chosen FlatBuffers encoder, set up as `python -m ingress serve` sets it up.

The product has one encoder, the generated one; the stock `flatbuffers.Builder` (with a pool of
builders) is kept for comparison, and this launcher puts it in the gateway's place. bench/e2e.py starts
both edges of a comparison this way, so that the encoder is the only difference between them.

    python -m bench.lib.edge_launcher --port 8081 --upstream http://127.0.0.1:9000 --model ingress-demo --encoder stock
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

import uvloop
from aiohttp import web

from ingress.edge.appkeys import GATEWAY
from ingress.encoding.stock import encode_request_stock
from ingress.log import configure
from ingress.serve import app as ingress_app
from ingress.settings import Settings
from ingress.wire.stock import BuilderPool


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--model", action="append")
    parser.add_argument("--encoder", choices=("generated", "stock"), default="stock")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args()
    settings = Settings(host=args.host, port=args.port, upstream=args.upstream, models=tuple(args.model or ()),
                        log_level=args.log_level)
    configure(settings.log_level)
    application = ingress_app.create_app(settings)

    async def use_stock_encoder(app: web.Application) -> None:  # after the gateway is built
        app[GATEWAY].encode_request = partial(encode_request_stock, BuilderPool())

    if args.encoder == "stock":
        application.on_startup.append(use_stock_encoder)
    application.on_startup.append(ingress_app.tune_gc)
    web.run_app(application, host=settings.host, port=settings.port, loop=uvloop.new_event_loop(),
                handler_cancellation=True, access_log=None, print=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
