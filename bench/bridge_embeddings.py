"""What a bridged embeddings request costs beside a bridged chat request: CPU per request of the edge and of
the OpenAI bridge, side by side in one run.

    nice -n 5 .venv/bin/python -m bench bridge_embeddings [--quick] [--rounds 4] [--seconds 3] [--connections 8]
        -> results/bridge_embeddings.json (~4 min; --quick ~1.5 min, results/bridge_embeddings-quick.json)

The engine is a zero-delay OpenAI-compatible mock in its own process (`--serve-mock`, mockhttp.py): POST
/v1/embeddings is answered with a fixed list in base64 (what the bridge asks for) of as many vectors as the
request has inputs (counted by a bytes search of its `input` array, no JSON parsing), of the model's
dimension: 1,536 floats for text-embedding-3-small, 1,024 for BAAI/bge-m3, each vector fixed random floats
of unit length; any other POST with a fixed chat.completion of 64 words. Every answer is bytes made at
start-up.

Two model families, each as its chat and its embeddings model: OpenAI's (gpt-4o-mini, text-embedding-3-small)
and open weights (llama-3.1-8b-instruct, BAAI/bge-m3). Four requests, the same texts (16 of 64 words,
bench/lib/payloads.py's vocabulary) in each, sent with a key as the openai SDK sends them:

- chat: one user message of the 16 texts, max_tokens 64 (the mock's 64 words come back);
- embed x1: one text, `encoding_format: "base64"` (the SDK's default): a query's embedding;
- embed x16: the 16 texts, base64: a batch of documents' chunks;
- embed x16 float: the same, `encoding_format: "float"`: the edge writes 16 vectors as JSON numbers.

Two paths: **sidecar** (wrk → `ingress serve` → `ingress bridge openai`, its own process → mock: the edge's
and the bridge's CPU apart) and **in-process** (wrk → `ingress serve` whose endpoint is a `bridge`: the
bridge's CPU is the edge's). The edge has peers.py's `[tenancy]`: a key with rpm and tpm limits never
reached, so the OpenAI names' texts are counted exactly (o200k for gpt-4o-mini, cl100k for
text-embedding-3-small) and the open names' estimated, as a deployment with limits counts them. wrk -t1 at
`--connections`, `--seconds` a run; CPU per request of each of our processes (user + system, /proc). A round
runs every (path, model) cell, the four requests back to back in each, their order alternating from cell to
cell and round to round; a request's ratio to chat is taken within its round, the median of the rounds'
ratios reported with their range. A first round of 1 s runs warms every path and is not kept. Before
anything is timed each path answers each request correctly (the mock's words; its vectors at float32 in
either format, with its usage). Then the bridge's sans-I/O stages for each request are timed in this
process (budget.py's timer), as bridge.py does for chat.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import random
import statistics
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent

from bench.lib.payloads import OPEN_MODEL, words  # noqa: E402
from bench.lib.provenance import code_version, describe  # noqa: E402
from bench.lib.results import result_path, write_result  # noqa: E402
from bench.lib.rounds import Rounds  # noqa: E402
from bench.lib.servers import Server, free_port, serving  # noqa: E402
from bench.lib.tables import Table, figure  # noqa: E402
from bench.lib.wrk import SCRIPT, Wrk, ensure_wrk  # noqa: E402

PY = sys.executable
FAMILIES = {"openai": ("gpt-4o-mini", "text-embedding-3-small"), "open": (OPEN_MODEL, "BAAI/bge-m3")}
DIMENSIONS = {"text-embedding-3-small": 1536, "BAAI/bge-m3": 1024}
KINDS = ("chat", "embed1", "embed16", "embed16f")
LABELS = {"chat": "chat", "embed1": "embed x1", "embed16": "embed x16", "embed16f": "embed x16 float"}
PATHS = ("sidecar", "inproc")
PATH_LABELS = {"sidecar": "edge + bridge sidecar", "inproc": "edge + in-process bridge"}
TEXTS = [words(64, seed=100 + i) for i in range(16)]
DELTAS = 64
TOKENS_PER_INPUT = 80  # the mock's usage: what an engine would count for a 64-word text
Cell = tuple[str, str]  # (path, family)


# --- the requests and the mock's answers -------------------------------------------------------------


def body(kind: str, family: str) -> bytes:
    chat_model, embed_model = FAMILIES[family]
    if kind == "chat":
        return msgspec.json.encode({"model": chat_model, "max_tokens": DELTAS,
                                    "messages": [{"role": "user", "content": "\n\n".join(TEXTS)}]})
    inputs = TEXTS[:1] if kind == "embed1" else TEXTS
    return msgspec.json.encode({"model": embed_model, "input": inputs,
                                "encoding_format": "float" if kind == "embed16f" else "base64"})


def mock_vectors(dimension: int, count: int = len(TEXTS)) -> list[list[float]]:
    """The mock's vectors: fixed random floats of unit length, at float32."""
    rng = random.Random(dimension)
    vectors = []
    for _ in range(count):
        raw = [rng.gauss(0.0, 1.0) for _ in range(dimension)]
        norm = sum(x * x for x in raw) ** 0.5
        vectors.append(array("f", [x / norm for x in raw]).tolist())
    return vectors


def _embeddings_answer(model: str, count: int) -> bytes:
    data = [{"object": "embedding", "index": i, "embedding": base64.b64encode(array("f", v).tobytes()).decode()}
            for i, v in enumerate(mock_vectors(DIMENSIONS[model])[:count])]
    usage = {"prompt_tokens": TOKENS_PER_INPUT * count, "total_tokens": TOKENS_PER_INPUT * count}
    return msgspec.json.encode({"object": "list", "data": data, "model": model, "usage": usage})


def _chat_answer() -> bytes:
    usage = {"prompt_tokens": 16 * TOKENS_PER_INPUT, "completion_tokens": DELTAS,
             "total_tokens": 16 * TOKENS_PER_INPUT + DELTAS}
    return msgspec.json.encode({"id": "chatcmpl-mock", "object": "chat.completion", "created": 1, "model": "mock",
                                "choices": [{"index": 0, "message": {"role": "assistant", "content": words(DELTAS, 3)},
                                             "finish_reason": "stop"}], "usage": usage})


def serve_mock(port: int) -> None:
    from bench.lib.mockhttp import Requests, response, serve

    ctype = b"application/json"
    chat = response(ctype, _chat_answer())
    embeddings = {(model.encode(), n): response(ctype, _embeddings_answer(model, n))
                  for model in DIMENSIONS for n in range(1, len(TEXTS) + 1)}
    models = [model.encode() for model in DIMENSIONS]

    class Mock(Requests):
        def answer(self, head: bytes, start: int, end: int) -> None:
            if not head.startswith(b"post /v1/embeddings"):
                self.transport.write(chat)
                return
            buffer = self.buffer
            model = next(m for m in models if buffer.find(m, start, end) >= 0)
            first = buffer.find(b'"input":[', start, end)  # the texts hold no quote, comma or bracket
            inputs = buffer.count(b'","', first, buffer.find(b"]", first, end)) + 1
            self.transport.write(embeddings[(model, inputs)])

    serve(Mock, port)


# --- checking each path ------------------------------------------------------------------------------


def check(port: int, kind: str, family: str, key: str) -> int:
    """The answer is the mock's: its words, or its vectors at float32 in the format asked, with its usage."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        path = "/v1/chat/completions" if kind == "chat" else "/v1/embeddings"
        conn.request("POST", path, body(kind, family), {"Content-Type": "application/json",
                                                         "Authorization": f"Bearer {key}"})
        r = conn.getresponse()
        data = r.read()
    finally:
        conn.close()
    if r.status != 200:
        raise SystemExit(f"{kind} {family}: {r.status}: {data[:800]!r}")
    doc = json.loads(data)
    if kind == "chat":
        ok = doc["choices"][0]["message"]["content"] == words(DELTAS, 3)
    else:
        count = 1 if kind == "embed1" else len(TEXTS)
        got = [array("f", base64.b64decode(item["embedding"])).tolist() if isinstance(item["embedding"], str)
               else array("f", item["embedding"]).tolist() for item in doc["data"]]
        ok = (got == mock_vectors(DIMENSIONS[FAMILIES[family][1]])[:count]
              and isinstance(doc["data"][0]["embedding"], list) == (kind == "embed16f")
              and doc["usage"] == {"prompt_tokens": TOKENS_PER_INPUT * count, "total_tokens": TOKENS_PER_INPUT * count})
    if not ok:
        raise SystemExit(f"{kind} {family}: not the mock's answer: {data[:800]!r}")
    return len(data)


# --- where the bridge's CPU goes ---------------------------------------------------------------------


def bridge_stages(min_s: float = 0.1) -> dict[str, dict[str, float]]:
    """The bridge's sans-I/O stages for each request, timed in this process (thread CPU µs): verify the buffer
    the edge sends, build the engine's request, read the engine's answer and write ours."""
    from bench.lib.budget import cpu_us
    from ingress import wire
    from ingress.bridges.dialect import Target
    from ingress.bridges.openai import DIALECT
    from ingress.bridges.service import MAX_REQUEST
    from ingress.encoding.embeddings import encode_embedding_request
    from ingress.encoding.requests import encode_request
    from ingress.oai.codec import decode_chat_request
    from ingress.oai.embeddings import decode_embedding_request
    from ingress.wire.passport import Passport
    from ingress.wire.verify import verify_embedding_request

    target = Target(url="http://127.0.0.1:9")
    out: dict[str, dict[str, float]] = {}
    for family, (_, embed_model) in FAMILIES.items():
        for kind in KINDS:
            if kind == "chat":
                buf = bytes(encode_request(decode_chat_request(body(kind, family)), "req-1", Passport()))
                call: Any = DIALECT.build(buf, target)
                answer = _chat_answer()
                stages = {"verify": lambda b=buf: wire.verify_request(b, max_size=MAX_REQUEST),
                          "build": lambda b=buf: DIALECT.build(b, target),
                          "answer+write": lambda c=call, a=answer: wire.write_response(c.answer(a))}
            else:
                request = decode_embedding_request(body(kind, family))
                buf = bytes(encode_embedding_request(request, "req-1", Passport()))
                call = DIALECT.embed(buf, target)
                answer = _embeddings_answer(embed_model, len(request.inputs))
                stages = {"verify": lambda b=buf: verify_embedding_request(b, max_size=MAX_REQUEST),
                          "build": lambda b=buf: DIALECT.embed(b, target),
                          "answer+write": lambda c=call, a=answer: wire.write_embeddings(c.answer(a))}
            out[f"{family}/{kind}"] = {name: cpu_us(fn, min_s) for name, fn in stages.items()}
    return out


# --- the run -----------------------------------------------------------------------------------------


def _edge_config(path: Path, port: int, endpoint: str, section: str) -> None:
    routes = "".join(f'\n[[routes]]\nmodel = "{model}"\ngroup = "engine"\n'
                     for models in FAMILIES.values() for model in models)
    path.write_text(f"port = {port}\nworkers = 1\n\n[groups.engine]\nendpoints = [{endpoint}]\n{routes}{section}")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from bench.peers import key_section  # the edge's [tenancy], as peers.py, agent_turn.py and model_names.py set it

    started, load_before = time.perf_counter(), os.getloadavg()
    code = code_version()  # the code the edges start with
    work = Path(tempfile.mkdtemp(prefix="ingress-bench-bridge-embeddings-"))
    files = {}
    for family in FAMILIES:
        for kind in KINDS:
            files[(kind, family)] = work / f"{kind}-{family}.json"
            files[(kind, family)].write_bytes(body(kind, family))
    section, key, _ = key_section()
    ports = {name: free_port() for name in ("mock", "bridge", "sidecar", "inproc")}
    mock_url = f"http://127.0.0.1:{ports['mock']}"
    _edge_config(work / "sidecar.toml", ports["sidecar"], f'{{ url = "http://127.0.0.1:{ports["bridge"]}" }}', section)
    _edge_config(work / "inproc.toml", ports["inproc"],
                 f'{{ bridge = {{ dialect = "openai", target = "{mock_url}" }} }}', section)
    argv = {
        "mock": [PY, "-m", "bench.bridge_embeddings", "--serve-mock", str(ports["mock"])],
        "bridge": [PY, "-m", "ingress", "bridge", "openai", "--target", mock_url, "--port", str(ports["bridge"])],
        "sidecar": [PY, "-m", "ingress", "serve", "--config", str(work / "sidecar.toml")],
        "inproc": [PY, "-m", "ingress", "serve", "--config", str(work / "inproc.toml")],
    }
    servers = {name: Server(name, cmd, ports[name], work / f"{name}.log") for name, cmd in argv.items()}
    watched = {"sidecar": ("sidecar", "bridge", "mock"), "inproc": ("inproc", "mock")}
    wrk = Wrk(ensure_wrk(), work / "post.lua")
    wrk.script.write_text(SCRIPT + f'wrk.headers["Authorization"] = "Bearer {key}"\n')
    cells: list[Cell] = [(path, family) for path in PATHS for family in FAMILIES]
    rounds: Rounds[str] = Rounds(KINDS, args.rounds, order="alternate", baseline="chat", warmup=True)
    with serving(*servers.values()):
        pid = {name: s.pid for name, s in servers.items()}
        answer_bytes = {f"{path}/{family}/{kind}": check(servers[path].port, kind, family, key)
                        for path in PATHS for family in FAMILIES for kind in KINDS}
        print(f"{describe(code)}; load average {load_before[0]:.2f}; nice {os.nice(0)}; every path answers every "
              "request with the mock's words or vectors", flush=True)
        for r, _ in rounds:
            for i, cell in enumerate(cells if r % 2 == 0 else cells[::-1]):
                path, family = cell
                for kind in rounds.order_of(r + i):
                    url = servers[path].url + ("/v1/chat/completions" if kind == "chat" else "/v1/embeddings")
                    result = wrk.run(url, files[(kind, family)], "application/json", args.connections,
                                     1 if r < 0 else args.seconds, watch={p: pid[p] for p in watched[path]})
                    if result["errors"]:
                        raise SystemExit(f"{path} {family} {kind}: errors {result['errors']}")
                    if r >= 0:
                        cpu = result["cpu_us_per_request"]
                        rounds.add(kind, {"edge_us": cpu[path], "bridge_us": cpu.get("bridge"),
                                          "ours_us": cpu[path] + cpu.get("bridge", 0.0), "mock_us": cpu["mock"],
                                          "requests": result["requests"], "rps": result["rps"],
                                          "p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"],
                                          "others_cpu_percent": result["others_cpu_percent"]}, cell)
            print(f"round {r + 1}/{args.rounds} done ({time.perf_counter() - started:.0f} s)" if r >= 0 else "warmed",
                  flush=True)

    table = []
    for cell in cells:
        path, family = cell
        for kind in KINDS:
            ratio = rounds.ratio(kind, "ours_us", cell=cell)
            runs = rounds.runs(kind, cell)
            bridge = rounds.median(kind, "bridge_us", cell) if path == "sidecar" else None
            table.append({"path": path, "family": family, "model": FAMILIES[family][kind != "chat"], "kind": kind,
                          "requests": sum(int(run["requests"]) for run in runs),
                          "edge_us": rounds.median(kind, "edge_us", cell), "bridge_us": bridge,
                          "ours_us": rounds.median(kind, "ours_us", cell),
                          "mock_us": rounds.median(kind, "mock_us", cell),
                          "ratio": ratio.median, "ratio_range": [ratio.low, ratio.high],
                          "rps": rounds.median(kind, "rps", cell), "p50_ms": rounds.median(kind, "p50_ms", cell),
                          "p99_ms": rounds.median(kind, "p99_ms", cell),
                          "request_bytes": files[(kind, family)].stat().st_size,
                          "answer_bytes": answer_bytes[f"{path}/{family}/{kind}"]})
    others = [run["others_cpu_percent"] for cell in cells for kind in KINDS for run in rounds.runs(kind, cell)]
    stages = bridge_stages()
    return {
        "meta": {"code": code, "families": FAMILIES, "dimensions": DIMENSIONS, "texts": len(TEXTS),
                 "rounds": args.rounds, "seconds": args.seconds, "connections": args.connections, "nice": os.nice(0),
                 "cpus": os.cpu_count(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
                 "others_cpu_percent_median": statistics.median(others),
                 "others_cpu_percent_range": [min(others), max(others)],
                 "commands": {k: " ".join(s.argv).replace(PY, "python") for k, s in servers.items()},
                 "wall_s": round(time.perf_counter() - started, 1)},
        "table": table,
        "bridge_stages_us": stages,
        "runs": {f"{path}/{family}/{kind}": rounds.runs(kind, (path, family))
                 for path, family in cells for kind in KINDS},
    }


def print_table(result: dict[str, Any]) -> None:
    meta = result["meta"]
    print(f"\n{describe(meta['code'])}; one worker; a key with rpm and tpm limits never reached; medians over "
          f"{meta['rounds']} interleaved rounds of {meta['seconds']} s runs (wrk -t1 -c{meta['connections']}); the "
          f"rest of the machine at {meta['others_cpu_percent_median']:.0f}% of a core (median; "
          f"{meta['others_cpu_percent_range'][0]:.0f}-{meta['others_cpu_percent_range'][1]:.0f}); load average "
          f"{meta['load_average_before'][0]:.2f} before, {meta['load_average_after'][0]:.2f} after")
    print(f"{meta['texts']} texts of 64 words: chat = all of them in one message, max_tokens {DELTAS}; embed x1 = one, "
          "base64; embed x16 = all, base64 (the SDK's default), or float; vectors of "
          + ", ".join(f"{d:,} floats ({m})" for m, d in meta["dimensions"].items()))
    table = Table(("path", "<26"), ("model", "<24"), ("request", "<17"), ("requests", ">10"), ("edge µs", ">9"),
                  ("bridge µs", ">11"), ("ours µs/req", ">13"), ("/chat", ">7"), ("rounds", ">11"), ("p50 ms", ">8"),
                  ("answer B", ">10"))
    print(table.header())
    for row in result["table"]:
        chat = row["kind"] == "chat"
        lo, hi = row["ratio_range"]
        print(table.row(PATH_LABELS[row["path"]], row["model"], LABELS[row["kind"]], f"{row['requests']:,}",
                        figure(row["edge_us"]), figure(row["bridge_us"]) if row["path"] == "sidecar" else "(in edge)",
                        figure(row["ours_us"]), "" if chat else f"{row['ratio']:.2f}",
                        "" if chat else f"{lo:.2f}-{hi:.2f}", f"{row['p50_ms']:.2f}", f"{row['answer_bytes']:,}"))
    print("ours = edge + bridge (CPU from /proc, user + system); /chat: the request's ours over chat's in the same "
          "round and cell, median of the rounds (their range)")
    stages = result["bridge_stages_us"]
    print("\n== The bridge's sans-I/O stages, timed in this process (thread CPU µs) ==")
    table = Table(("model", "<24"), ("request", "<17"), ("verify", ">9"), ("build", ">9"), ("answer+write", ">14"),
                  ("sum", ">9"))
    print(table.header())
    for key, figures in stages.items():
        family, kind = key.split("/")
        print(table.row(FAMILIES[family][kind != "chat"], LABELS[kind], figure(figures["verify"]),
                        figure(figures["build"]), figure(figures["answer+write"]), figure(sum(figures.values()))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~1.5 min: 2 rounds of 2 s runs")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seconds", type=int)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--serve-mock", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_mock:
        serve_mock(args.serve_mock)
        return
    args.rounds = args.rounds or (2 if args.quick else 4)
    args.seconds = args.seconds or (2 if args.quick else 3)
    out = result_path("bridge_embeddings", args.quick, args.out)
    result = measure(args)
    print_table(result)
    write_result(result, out)


if __name__ == "__main__":
    main()
