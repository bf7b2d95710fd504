"""What a real model name costs the edge: gpt-4o (o200k counts a prompt a limit charges) against an open-weights
name (the estimate), the same requests, side by side in one run, with a key whose tpm limit is on.

    python -m bench model_names [--code DIR] [--baseline DIR] [--rounds 6] [--seconds 4] [--connections 32]
                                [--cases CASE...] [--out FILE]   -> results/model_names.json

One edge (one worker) routes both names to one internal service: tenancy.py's mock, one fixed
CompletionResponse a request and no work (its own process). The edge's `[tenancy]` is peers.py's: a key
with an rpm and a tpm limit and its tenant's tpm (memory backend), far above anything a run reaches, so
every request is admitted and its prompt counted exactly for gpt-4o. wrk (one thread, one core) sends:

    16 KB, same       the 16 KB, 11-message chat request with a tool (payloads.py), the same body every time
    16 KB, each new   that request with the first 8 characters of every message made unique per request:
                      no message was seen before (the tool definition was)
    multi-turn        conversations of --turns turns: a 1 KB system prompt shared by all, then each request
                      is the previous one plus the service's answer (1.2 KB) and a new user message (300 B),
                      so it grows from 1.3 KB to ~17 KB (mean ~9 KB); conversations never repeat

Rounds alternate which model goes first; within a round each case runs for both names back to back on
the same process, and the table gives medians over rounds of CPU µs per request (the edge's user +
system time over the run, from /proc), requests/s, and the gpt-4o / open-weights ratio of each round's
pair (its median, and the range). `--code DIR` runs another checkout's edge (a `git archive` copy, as
bench/commits.py uses) instead of this tree; `--baseline DIR` adds a second edge of DIR's code, measured
in the same rounds, to show what the same names cost there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import msgspec

HERE = Path(__file__).resolve().parent

from bench.lib.payloads import OPEN_MODEL, OPENAI_MODEL, VOCABULARY, chat_request  # noqa: E402
from bench.lib.provenance import code_version, describe  # noqa: E402
from bench.lib.rounds import Rounds  # noqa: E402
from bench.lib.servers import ROOT, Server, free_port, python_in, start_all, stop_all  # noqa: E402
from bench.lib.tables import Table  # noqa: E402
from bench.lib.wrk import SCRIPT, Wrk, ensure_wrk  # noqa: E402

MODELS = (OPENAI_MODEL, OPEN_MODEL)
CASES = ("16 KB, same", "16 KB, each new", "multi-turn")
MARK = "@" * 8  # where each request's id goes in the 16 KB template

HEADERS = """
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY")
"""

# Each request's messages made new: the 8-character mark replaced by the run's 3 characters and a counter.
EACH_NEW = HEADERS + r"""
local template, run, n = wrk.body, os.getenv("BENCH_RUN"), 0
request = function()
  n = n + 1
  local id = run .. string.format("%05x", n % 0x100000)
  return wrk.format(nil, nil, nil, (template:gsub("@@@@@@@@", id)))
end
"""

# A conversation a request: the system prompt, then each turn adds the previous answer and a new question.
MULTI_TURN = HEADERS + r"""
local model, run, turns = os.getenv("BENCH_MODEL"), os.getenv("BENCH_RUN"), tonumber(os.getenv("BENCH_TURNS"))
local words = {}
for w in os.getenv("BENCH_WORDS"):gmatch("%S+") do words[#words + 1] = w end
math.randomseed(7)
local function text(size)
  local out, length = {}, 0
  while length < size do
    local w = words[math.random(#words)]
    out[#out + 1] = w
    length = length + #w + 1
  end
  return table.concat(out, " ")
end
local system = text(1000)
local questions, answers = {}, {}
for i = 1, 64 do questions[i] = text(300); answers[i] = text(1200) end
local conversation, turn, messages = 0, turns, {}
local function message(role, content)
  messages[#messages + 1] = '{"role":"' .. role .. '","content":"' .. content .. '"}'
end
request = function()
  if turn == turns then
    conversation, turn, messages = conversation + 1, 0, {}
    message("system", system)
  else
    message("assistant", run .. conversation .. "." .. turn .. " " .. answers[(conversation * 7 + turn) % 64 + 1])
  end
  turn = turn + 1
  message("user", run .. conversation .. "." .. turn .. " " .. questions[(conversation * 5 + turn) % 64 + 1])
  local body = '{"model":"' .. model .. '","max_tokens":64,"messages":[' .. table.concat(messages, ",") .. ']}'
  return wrk.format(nil, nil, nil, body)
end
"""


def _commit_of(checkout: Path) -> str:
    if checkout.resolve() == ROOT:
        return describe(code_version())
    stamp = checkout / "COMMIT"
    return stamp.read_text().strip() if stamp.exists() else str(checkout)


def _each_new_template(model: str) -> bytes:
    """The 16 KB request with every message's first 8 characters the mark (its size unchanged)."""
    body = msgspec.json.decode(chat_request(16 * 1024, model=model))
    for m in body["messages"]:
        m["content"] = MARK + m["content"][len(MARK):]
    encoded = msgspec.json.encode(body)
    assert len(encoded) == 16 * 1024
    return encoded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose edge is measured")
    parser.add_argument("--baseline", type=Path, help="another checkout's edge, measured beside it")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES), help="which cases to run")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "model_names.json")
    args = parser.parse_args()

    from bench.peers import key_section  # the edge's [tenancy], as peers.py and commits.py --keys set it

    work = Path(tempfile.mkdtemp(prefix="ingress-models-"))
    bodies = {}
    for model in MODELS:
        bodies[(model, CASES[0])] = work / f"{model}-same.json"
        bodies[(model, CASES[0])].write_bytes(chat_request(16 * 1024, model=model))
        bodies[(model, CASES[1])] = work / f"{model}-new.json"
        bodies[(model, CASES[1])].write_bytes(_each_new_template(model))
        bodies[(model, CASES[2])] = work / f"{model}-turns.json"
        bodies[(model, CASES[2])].write_bytes(b"{}")  # unused: the script makes each body
    scripts = {CASES[0]: SCRIPT + HEADERS, CASES[1]: SCRIPT + EACH_NEW, CASES[2]: SCRIPT + MULTI_TURN}
    cases = [case for case in CASES if case in args.cases]

    mock_port = free_port()
    mock = Server("mock", [sys.executable, "-m", "bench.tenancy", "--serve-mock", str(mock_port), "0"], mock_port,
                  work / "mock.log")
    section, key, _ = key_section()
    checkouts = {"edge": args.code} | ({"baseline": args.baseline} if args.baseline else {})
    edges = {}
    for name, checkout in checkouts.items():
        port = free_port()
        config = work / f"{name}.toml"
        config.write_text(f'port = {port}\nworkers = 1\nupstream = "{mock.url}"\n'
                          f'models = ["{OPENAI_MODEL}", "{OPEN_MODEL}"]\n' + section)
        edges[name] = Server(name, [*python_in(checkout), "-m", "ingress", "serve", "--config", str(config)], port,
                             work / f"{name}.log")
    wrk = Wrk(ensure_wrk(), work / "bench.lua")
    os.environ.update(BENCH_KEY=key, BENCH_TURNS=str(args.turns), BENCH_WORDS=" ".join(sorted(set(VOCABULARY))))
    # the models' order alternates; round -1 warms each edge, each case, each name, and is not kept
    rounds = Rounds(MODELS, args.rounds, order="alternate", baseline=OPEN_MODEL, warmup=True)
    run_id = 0
    try:
        start_all(mock, *edges.values())
        for r, order in rounds:
            for edge_name, edge in edges.items():
                url = f"{edge.url}/v1/chat/completions"
                for case in cases:
                    wrk.script.write_text(scripts[case])
                    for model in order:
                        run_id += 1
                        os.environ.update(BENCH_MODEL=model, BENCH_RUN=f"{run_id:03x}"[-3:])
                        result = wrk.run(url, bodies[(model, case)], "application/json", args.connections,
                                         1 if r < 0 else args.seconds, watch={edge_name: edge.pid})
                        if result["errors"]:
                            raise SystemExit(f"{edge_name} {model} {case}: errors {result['errors']}")
                        if r >= 0:
                            rounds.add(model, {"rps": result["rps"], "p50_ms": result["p50_ms"],
                                               "p99_ms": result["p99_ms"],
                                               "cpu_us": result["cpu_us_per_request"][edge_name],
                                               "others_cpu_percent": result["others_cpu_percent"]}, (edge_name, case))
            print(f"round {r + 1}/{args.rounds} done" if r >= 0 else "warmed", flush=True)
    finally:
        stop_all(*edges.values(), mock)

    versions = {name: _commit_of(checkout) for name, checkout in checkouts.items()}
    print(f"\n{', '.join(f'{n} = {v}' for n, v in versions.items())}; one worker, a key with rpm and tpm limits "
          f"(never reached); wrk -t1 -c{args.connections}; medians over {args.rounds} interleaved rounds of "
          f"{args.seconds} s")
    printed = Table(("case", "<17"), ("edge", "<10"), ("model", "<24"), ("req/s", ">8.0f"), ("p50 ms", ">8.2f"),
                    ("CPU µs/req", ">12.0f"))
    print(printed.header())
    table = []
    for case in cases:
        for edge_name in edges:
            cell = (edge_name, case)
            med = {m: {k: rounds.median(m, k, cell) for k in ("rps", "p50_ms", "p99_ms", "cpu_us")} for m in MODELS}
            for m in MODELS:
                print(printed.row(case, edge_name, m, med[m]["rps"], med[m]["p50_ms"], med[m]["cpu_us"]))
            ratio = rounds.ratio(OPENAI_MODEL, "cpu_us", cell=cell)
            print(printed.row("", edge_name, f"ratio {OPENAI_MODEL} / open", None, None, f"{ratio.median:.3f}")
                  + f"   (rounds {ratio.range()})")
            table.append({"case": case, "edge": edge_name, "code": versions[edge_name], "median": med,
                          "cpu_ratio": ratio.median, "cpu_ratio_range": [ratio.low, ratio.high]})
    runs = {f"{e}/{case}/{m}": rounds.runs(m, (e, case)) for e in edges for case in cases for m in MODELS}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    busy = subprocess.run(["pgrep", "-c", "cc1plus"], capture_output=True, text=True).stdout.strip()
    args.out.write_text(json.dumps({
        "models": MODELS, "cases": cases, "code": versions, "rounds": args.rounds, "seconds": args.seconds,
        "connections": args.connections, "turns": args.turns, "compilers_running_at_end": int(busy or 0),
        "table": table, "runs": runs}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
