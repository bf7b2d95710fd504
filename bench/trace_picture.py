"""One traced request, drawn as a waterfall from the spans a real OTLP/HTTP receiver got: the picture in
docs/tracing.md.

    .venv/bin/python -m bench trace_picture [--demo]

The edge (a key and [tenancy], so admission is in the trace; [tracing] to a receiver on loopback) in front
of llama-server serving SmolLM2-135M (tests/support/llama_engine.py: built once per machine) through `ingress bridge
openai` in its own process, also tracing; one chat completion, streamed. `--demo`: the edge's demo service
instead of the engine (no bridge span). Prints the waterfall and each span's attributes.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))

import openai  # noqa: E402
from otlp_receiver import OtlpReceiver, Span  # noqa: E402

from bench.lib.servers import free_port  # noqa: E402
from ingress.serve.app import create_app, serve_app  # noqa: E402
from ingress.settings import Settings, Timeouts, Tracing  # noqa: E402
from ingress.tenancy.keys import new_key  # noqa: E402
from ingress.tenancy.settings import Key, Limits, Tenancy, Tenant  # noqa: E402

WIDTH = 48
KEY, KEY_ID, KEY_HASH = new_key()


def waterfall(spans: list[Span]) -> list[str]:
    """Each span under its parent, its bar placed on the root's time line."""
    root = next(s for s in spans if not s.parent_id or s.parent_id not in {x.span_id for x in spans})
    t0, total = root.start_ns, max(root.end_ns - root.start_ns, 1)
    lines: list[str] = []

    def draw(span: Span, depth: int) -> None:
        start = round((span.start_ns - t0) / total * WIDTH)
        length = max(1, round((span.end_ns - span.start_ns) / total * WIDTH))
        bar = " " * start + "█" * min(length, WIDTH - start)
        label = f"{'  ' * depth}{span.name}"
        service = "" if span.service == root.service else f"  [{span.service}]"
        lines.append(f"{label:<26}|{bar:<{WIDTH}}| {(span.end_ns - span.start_ns) / 1e6:8.2f} ms{service}")
        for child in sorted((s for s in spans if s.parent_id == span.span_id), key=lambda s: s.start_ns):
            draw(child, depth + 1)

    draw(root, 0)
    return lines


async def run(demo: bool) -> None:
    receiver = OtlpReceiver()
    tenancy = Tenancy(keys=(Key(id=KEY_ID, tenant="acme", hash=KEY_HASH, models=("*",), limits=Limits(rpm=600)),),
                      tenants={"acme": Tenant()})
    async with AsyncExitStack() as stack:
        traces = await stack.enter_async_context(receiver.running())
        tracing = Tracing(endpoint=traces, flush_interval=0.1)
        sync = stack.enter_context(ExitStack())
        if demo:
            settings = Settings(tenancy=tenancy, tracing=tracing, workers=1)
            model = "ingress-demo"
        else:
            import llama_engine

            log = Path(tempfile.mkdtemp(prefix="trace-picture-")) / "llama-server.log"
            engine = sync.enter_context(llama_engine.running_server(
                llama_engine.ensure_server(), llama_engine.ensure_model(), log))
            port = free_port()
            bridge = subprocess.Popen([sys.executable, "-m", "ingress", "bridge", "openai", "--target", engine,
                                       "--port", str(port), "--log-level", "warning", "--trace-endpoint", traces])
            sync.callback(bridge.wait, 10)
            sync.callback(bridge.terminate)
            await asyncio.sleep(1.5)  # the bridge's start
            settings = Settings(upstream=f"http://127.0.0.1:{port}", tenancy=tenancy, tracing=tracing, workers=1,
                                timeouts=Timeouts(first_byte=60.0, idle=60.0))
            model = "smollm2"
        edge = await stack.enter_async_context(serve_app(create_app(settings), "127.0.0.1", 0))
        async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key=KEY, max_retries=0, timeout=60) as client:
            stream = await client.chat.completions.create(
                model=model, stream=True, max_tokens=24, stream_options={"include_usage": True},
                messages=[{"role": "user", "content": "What is the capital of France? Answer in one sentence."}])
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        wanted = 4 if demo else 5
        spans = await receiver.wait_for(lambda spans: len(spans) >= wanted, f"{wanted} spans", timeout=30)
    print(f"answer: {text!r}\n")
    print("\n".join(waterfall(spans)))
    print()
    for span in spans:
        print(span.name, span.kind, {k: v for k, v in sorted(span.attributes.items())})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", action="store_true", help="the demo service instead of llama-server")
    asyncio.run(run(parser.parse_args().demo))


if __name__ == "__main__":
    main()
