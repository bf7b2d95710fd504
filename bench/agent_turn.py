"""What a Codex CLI turn costs the edge beside a chat turn of the same content: CPU per request and client
p50, side by side in one run.

    nice -n 5 .venv/bin/python -m bench agent_turn [--quick] [--rounds 8] [--seconds 3] [--connections 8 32]
                                                   [--keyless] [--out FILE]
        -> results/agent_turn.json (~3.5 min; --quick ~1 min, results/agent_turn-quick.json)

The Codex turn is Codex CLI's first request as recorded, tests/fixtures/codex/first_turn.json (~45 KB, a
POST to /v1/responses, streamed: four input messages, two of them developer prompts; seven function tools,
a `namespace` tool of five more, the built-in `web_search`; client_metadata, reasoning, include, store,
prompt_cache_key), sent with Codex's own headers (first_turn.headers.json) and the key. The chat turn is
the chat request the edge reads that body as, made from it here (`decode_responses_request`, `as_chat`,
msgspec): the same four messages with the same texts, the 12 function tools flat with the same schemas
(the namespace's as `multi_agent_v1__<name>`), stream with include_usage, parallel_tool_calls, tool_choice
and prompt_cache_key; sent to /v1/chat/completions with Content-Type and the key alone, as an SDK's chat
client does. Before anything is timed the run checks that the edge's reading of the Responses body is
exactly the chat body's request (the route's default `hosted_tools = "omit"` leaves web_search out), and
that both paths stream the mock's 64 words whole. Both bodies are made for each model name, gpt-4o and
llama-3.1-8b-instruct (only `model` differs).

One edge (`ingress serve`, one worker) routes both names to chunks.py's zero-delay mock at pacing 0 (the
role frame, 64 content frames, finish and usage, in one write). It has peers.py's `[tenancy]`: a key with an
rpm and a tpm limit, never reached, so gpt-4o's prompt is counted exactly (o200k) and llama's estimated, as
bench/model_names.py and bench/messages.py run them (`--keyless`: no [tenancy], both estimated). wrk (one
thread, `--seconds` a run, the stream read to its end) at each of `--connections`; the edge's CPU (its process
tree, user + system, /proc) over a run per request, and wrk's p50. A round runs every (connections, model)
cell, chat and Codex back to back in each, their order alternating from cell to cell and round to round
(A B B A); the ratio is Codex / chat within a round, reported as the median of the rounds' ratios and their
range. A first round of 1 s runs warms every path and is not kept.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent

from bench.chunks import DELTAS  # noqa: E402
from bench.lib.payloads import OPEN_MODEL, OPENAI_MODEL, words  # noqa: E402
from bench.lib.provenance import code_version, describe  # noqa: E402
from bench.lib.results import result_path, write_result  # noqa: E402
from bench.lib.rounds import Rounds  # noqa: E402
from bench.lib.servers import Server, free_port, serving  # noqa: E402
from bench.lib.tables import Table, figure  # noqa: E402
from bench.lib.wrk import SCRIPT, Wrk, ensure_wrk  # noqa: E402

PY = sys.executable
FIXTURES = HERE.parent / "tests" / "fixtures" / "codex"
MODELS = (OPENAI_MODEL, OPEN_MODEL)
KINDS = ("chat", "codex")
LABELS = {"chat": "chat", "codex": "Codex (Responses)"}
PATHS = {"chat": "/v1/chat/completions", "codex": "/v1/responses"}
ANSWER = words(DELTAS, seed=3)  # what chunks.py's mock answers, a word a frame (as bench/messages.py reads it)
Cell = tuple[int, str]  # (connections, model)


# --- the two bodies --------------------------------------------------------------------------------


def codex_body(model: str) -> bytes:
    """Codex CLI's first request as recorded, asking for `model`: compact, as Codex's serde_json writes it (the
    fixture is indented for reading; the same fields in the same order, 41,201 B against its 45,083)."""
    fields = msgspec.json.decode((FIXTURES / "first_turn.json").read_bytes())
    fields["model"] = model
    return msgspec.json.encode(fields)


def chat_body(model: str) -> bytes:
    """The chat request the edge reads Codex's request as: the same messages, tools and stream options."""
    from ingress.oai.responses_codec import decode_responses_request
    from ingress.oai.responses_to_chat import as_chat

    return msgspec.json.encode(as_chat(decode_responses_request(codex_body(model))))


def codex_headers(key: str) -> dict[str, str]:
    """Codex's own headers, and the key as it sends it (Content-Type is the wrk script's)."""
    recorded: dict[str, str] = json.loads((FIXTURES / "first_turn.headers.json").read_text())
    kept = {k: v for k, v in recorded.items() if k.lower() != "content-type"}
    return {**kept, **({"Authorization": f"Bearer {key}"} if key else {})}


def headers(kind: str, key: str) -> dict[str, str]:
    if kind == "codex":
        return codex_headers(key)
    return {"Authorization": f"Bearer {key}"} if key else {}


def lua_headers(sent: dict[str, str]) -> str:
    """The wrk script's lines setting `sent` (Lua long strings: the turn metadata is JSON, full of quotes)."""
    lines = []
    for name, value in sent.items():
        if "]==]" in value or "\n" in value:
            raise ValueError(f"header {name} cannot be written as a Lua long string")
        lines.append(f'wrk.headers["{name}"] = [==[{value}]==]')
    return "\n".join(lines) + "\n"


def check_same_content() -> dict[str, Any]:
    """The chat body carries exactly what the edge reads the Codex body as, the same texts and tool schemas as
    the fixture; what the Codex body holds beyond it is named (what the table's ratio pays for)."""
    from ingress.oai.codec import decode_chat_request
    from ingress.oai.responses_codec import decode_responses_request
    from ingress.oai.responses_to_chat import as_chat

    fixture = msgspec.json.decode((FIXTURES / "first_turn.json").read_bytes())
    texts = [part["text"] for item in fixture["input"] for part in item["content"]]
    schemas = {}
    for tool in fixture["tools"]:
        if tool["type"] == "function":
            schemas[tool["name"]] = tool["parameters"]
        elif tool["type"] == "namespace":
            schemas.update({f"{tool['name']}__{t['name']}": t["parameters"] for t in tool["tools"]})
    for model in MODELS:
        call = decode_responses_request(codex_body(model))
        chat = msgspec.json.decode(chat_body(model))
        if as_chat(call) != decode_chat_request(chat_body(model)):
            raise SystemExit(f"{model}: the edge does not read the Codex body as the chat body")
        sent = [text for m in chat["messages"] for text in
                ([m["content"]] if isinstance(m["content"], str) else [p["text"] for p in m["content"]])]
        got = {t["function"]["name"]: t["function"]["parameters"] for t in chat["tools"]}
        if sent != texts or got != schemas or not chat["stream"] or chat["stream_options"] != {"include_usage": True}:
            raise SystemExit(f"{model}: the chat body's texts, tools or stream options differ from the fixture's")
    call = decode_responses_request(codex_body(OPENAI_MODEL))
    return {"messages": len(fixture["input"]), "texts": len(texts), "function_tools": len(schemas), "hints": call.hints,
            "left_out": [t.type for t in call.hosted],
            "chat_fields": sorted(msgspec.json.decode(chat_body(OPENAI_MODEL))),
            "codex_fields": sorted(fixture)}


# --- checking each path ----------------------------------------------------------------------------


def check_answer(port: int, kind: str, model: str, payload: bytes, key: str) -> int:
    """The mock's 64 words come back whole, streamed in the API's own events, to the end: the answer's bytes."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", PATHS[kind], payload, {"Content-Type": "application/json", **headers(kind, key)})
        r = conn.getresponse()
        data = r.read()
        encoding = r.getheader("Content-Encoding")
    finally:
        conn.close()
    if r.status != 200 or encoding is not None:
        raise SystemExit(f"{kind} {model}: {r.status} ({encoding}): {data[:800]!r}")
    datas = [e.split(b"data: ", 1)[1] for e in data.split(b"\n\n") if b"data: " in e]
    if kind == "chat":
        chunks = [json.loads(d) for d in datas if d != b"[DONE]"]
        deltas = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
        ok = datas[-1] == b"[DONE]" and chunks[-1].get("usage") is not None and b'"error"' not in data
    else:
        events = [json.loads(d) for d in datas]
        deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
        ok = events[-1]["type"] == "response.completed" and events[-1]["response"]["usage"] is not None
        ok = ok and not any(e["type"] in ("error", "response.failed") for e in events)
    deltas = [d for d in deltas if d]
    if not ok or len(deltas) != DELTAS or "".join(deltas).strip() != ANSWER:
        raise SystemExit(f"{kind} {model}: not the mock's answer whole: {data[:800]!r}")
    return len(data)


# --- the run ---------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from bench.peers import key_section  # the edge's [tenancy], as peers.py, model_names.py and messages.py set it

    started, load_before = time.perf_counter(), os.getloadavg()
    code = code_version()  # the code the edge starts with (a commit made during the run is not what ran)
    content = check_same_content()
    work = Path(tempfile.mkdtemp(prefix="ingress-bench-agent-turn-"))
    files = {}
    for model in MODELS:
        for kind, make in (("chat", chat_body), ("codex", codex_body)):
            files[(kind, model)] = work / f"{kind}-{model}.json"
            files[(kind, model)].write_bytes(make(model))
    section, key, _ = ("", "", "") if args.keyless else key_section()
    port = free_port()
    mock = Server("mock", [PY, "-m", "bench.chunks", "--serve-mock", str(port), "0"], port, work / "mock.log")
    port = free_port()
    config = work / "edge.toml"
    config.write_text(f'port = {port}\nworkers = 1\nupstream = "{mock.url}"\n'
                      f'models = ["{OPENAI_MODEL}", "{OPEN_MODEL}"]\n' + section)
    edge = Server("edge", [PY, "-m", "ingress", "serve", "--config", str(config)], port, work / "edge.log")
    binary = ensure_wrk()
    wrks = {}
    for kind in KINDS:
        wrks[kind] = Wrk(binary, work / f"{kind}.lua")
        wrks[kind].script.write_text(SCRIPT + lua_headers(headers(kind, key)))
    cells: list[Cell] = [(c, model) for c in args.connections for model in MODELS]
    rounds: Rounds[str] = Rounds(KINDS, args.rounds, order="alternate", baseline="chat", warmup=True)
    with serving(mock, edge):
        answer_bytes = {f"{kind}/{model}": check_answer(edge.port, kind, model, files[(kind, model)].read_bytes(), key)
                        for model in MODELS for kind in KINDS}
        print(f"{describe(code)}; load average {load_before[0]:.2f}; nice {os.nice(0)}; both paths "
              "stream the mock's words whole; the edge reads the Codex body as the chat body", flush=True)
        for r, _ in rounds:
            for i, cell in enumerate(cells if r % 2 == 0 else cells[::-1]):
                connections, model = cell
                for kind in rounds.order_of(r + i):  # A B B A across cells and rounds
                    result = wrks[kind].run(f"{edge.url}{PATHS[kind]}", files[(kind, model)], "application/json",
                                            connections, 1 if r < 0 else args.seconds, watch={"edge": edge.pid})
                    if result["errors"]:
                        raise SystemExit(f"{kind} {model} c={connections}: errors {result['errors']}")
                    if r >= 0:
                        rounds.add(kind, {"us": result["cpu_us_per_request"]["edge"],
                                          "requests": result["requests"], "rps": result["rps"],
                                          "p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"],
                                          "others_cpu_percent": result["others_cpu_percent"]}, cell)
            print(f"round {r + 1}/{args.rounds} done ({time.perf_counter() - started:.0f} s)" if r >= 0 else "warmed",
                  flush=True)

    table = []
    for cell in cells:
        connections, model = cell
        for kind in KINDS:
            ratio = rounds.ratio(kind, "us", cell=cell)
            p50_ratio = rounds.ratio(kind, "p50_ms", cell=cell)
            table.append({"model": model, "kind": kind, "connections": connections,
                          "requests": sum(int(run["requests"]) for run in rounds.runs(kind, cell)),
                          "cpu_us": rounds.median(kind, "us", cell), "ratio": ratio.median,
                          "ratio_range": [ratio.low, ratio.high], "p50_ms": rounds.median(kind, "p50_ms", cell),
                          "p50_ratio": p50_ratio.median, "p99_ms": rounds.median(kind, "p99_ms", cell),
                          "rps": rounds.median(kind, "rps", cell)})
    others = [run["others_cpu_percent"] for cell in cells for kind in KINDS for run in rounds.runs(kind, cell)]
    return {
        "meta": {"code": code, "models": MODELS, "keyless": args.keyless, "rounds": args.rounds,
                 "seconds": args.seconds, "connections": args.connections, "nice": os.nice(0),
                 "cpus": os.cpu_count(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
                 "others_cpu_percent_median": statistics.median(others),
                 "others_cpu_percent_range": [min(others), max(others)],
                 "body_bytes": {f"{kind}/{model}": files[(kind, model)].stat().st_size
                                for kind in KINDS for model in MODELS},
                 "answer_bytes": answer_bytes, "headers": {kind: sorted(headers(kind, "key")) for kind in KINDS},
                 "content": content, "wall_s": round(time.perf_counter() - started, 1)},
        "table": table,
        "runs": {f"c{c}/{model}/{kind}": rounds.runs(kind, (c, model)) for c, model in cells for kind in KINDS},
    }


def print_table(result: dict[str, Any]) -> None:
    meta = result["meta"]
    sizes = meta["body_bytes"]
    content = meta["content"]
    print(f"\n{describe(meta['code'])}; one worker; "
          + ("no key (both names estimated)" if meta["keyless"] else
             "a key with rpm and tpm limits (never reached: gpt-4o counted exactly, llama estimated)")
          + f"; medians over {meta['rounds']} interleaved rounds of {meta['seconds']} s runs (wrk -t1); the rest "
          f"of the machine at {meta['others_cpu_percent_median']:.0f}% of a core (median; "
          f"{meta['others_cpu_percent_range'][0]:.0f}-{meta['others_cpu_percent_range'][1]:.0f}); load average "
          f"{meta['load_average_before'][0]:.2f} before, {meta['load_average_after'][0]:.2f} after")
    print(f"Codex's first turn, {sizes[f'codex/{OPENAI_MODEL}']:,} B to /v1/responses with its headers, against "
          f"the same {content['messages']} messages and {content['function_tools']} function tools as chat, "
          f"{sizes[f'chat/{OPENAI_MODEL}']:,} B; both streamed ({DELTAS} deltas from a zero-delay mock: "
          f"{meta['answer_bytes'][f'codex/{OPENAI_MODEL}']:,} B of Responses events, "
          f"{meta['answer_bytes'][f'chat/{OPENAI_MODEL}']:,} B of chat chunks); "
          f"left out of the chat turn: {', '.join(content['left_out'])} (omitted by the route), "
          f"{', '.join(content['hints'])} (hints)")
    table = Table(("model", "<24"), ("request", "<19"), ("conns", ">6"), ("requests", ">10"),
                  ("CPU µs/req", ">12"), ("Codex/chat", ">12"), ("rounds", ">12"), ("p50 ms", ">9"),
                  ("p50 ratio", ">11"))
    print(table.header())
    for row in result["table"]:
        codex = row["kind"] == "codex"
        lo, hi = row["ratio_range"]
        print(table.row(row["model"], LABELS[row["kind"]], row["connections"], f"{row['requests']:,}",
                        figure(row["cpu_us"]), f"{row['ratio']:.3f}" if codex else "",
                        f"{lo:.2f}-{hi:.2f}" if codex else "", f"{row['p50_ms']:.2f}",
                        f"{row['p50_ratio']:.3f}" if codex else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~1 min: 2 rounds of 2 s runs")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seconds", type=int)
    parser.add_argument("--connections", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--keyless", action="store_true", help="no [tenancy]: both names' prompts estimated")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.rounds = args.rounds or (2 if args.quick else 8)
    args.seconds = args.seconds or (2 if args.quick else 3)
    out = result_path("agent_turn", args.quick, args.out)
    result = measure(args)
    print_table(result)
    write_result(result, out)


if __name__ == "__main__":
    main()
