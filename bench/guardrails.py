"""What guardrails cost per request, and RE2 against Python's `re` on a pattern that backtracks.

    python -m bench guardrails [--rounds 30]    (~1 min)  -> results/guardrails.json

The guard is the documented one (ingress/guardrails/__init__.py): max_prompt_tokens, 12 blocked terms,
two patterns, every secret detector (block), email and phone (redact), card (block). It reads every
message of the request (scope "all", messages "all") unless the row says "user / last" (the defaults:
the last user message only). The requests are bench/lib/payloads.py's 11-message chats (a system prompt,
then user and assistant turns, words from a small vocabulary): nothing in them is a hit, so the rows
without "hits" give back the same request. Beside them: decoding the same body (`decode_chat_request`),
the stage before, for scale; the 1 MB rows split into the guard's passes; and adversarial prompts, each
the worst its detector meets (every candidate checked, and failed).

Clock: the thread's CPU time; each candidate calibrated to ~20 ms a round, candidates in a fresh random
order every round, GC off; the figure is the median over rounds, in µs per check.

The last table: `(a+)+$` on 'a' * n + '!' (no match: the engine must try every way to split the a's).
RE2 answers in time linear in n; Python's `re` doubles with each extra 'a', so n = 50,000 is out of its
reach (2^50000 tries) and the table shows it only up to n = 24.

Figures (commit 78ec1fa, 2 vCPUs shared with other work, load average ~1.2, 30 rounds), µs per check:

| request | guard | decode | guard / decode |
|---|---:|---:|---:|
| 16 KB, 11 messages (read whole) | 141 | 17.7 | 8.0x |
| 16 KB, 11 messages, user / last | 15.7 | | |
| 16 KB, 11 messages, hits every 200 words (redacted) | 960 | | |
| 1 MB, 11 messages (read whole) | 5,783 | 426 | 13.6x |
| 1 MB, 11 messages, user / last | 472 | | |
| 1 MB, 11 messages, hits every 200 words (redacted) | 35,495 | | |
| 1 MB: blocked terms alone / RE2 rules alone | 3,166 / 2,458 | | |
| 1 MB 'zeuszeus...' (a term inside one long word) | 2,888 | | |
| 1 MB of cards failing Luhn | 291,618 | | |
| 1 MB of '1.222.333.4444 ' (phone near misses) | 278,139 | | |
| 1 MB of 'a@b.' / of 'sk-' + 30 letters | 2,442 / 2,274 | | |

Near misses that RE2 cannot tell from a hit (a card number's Luhn sum, what stands around a phone
number) cost ~4 µs each, most of it the RE2 call that finds the candidate: ~0.3 s for a megabyte made of
nothing else. `max_prompt_tokens`, checked first, bounds how much such text a guard reads.

| 'a' * n + '!' | `(a+)+$` RE2 | `(a+)+$` re | `(a+)+b` RE2 | `(a+)+b` re |
|---:|---:|---:|---:|---:|
| 16 | 1.4 | 6,398 | 1.6 | 6,198 |
| 20 | 1.4 | 95,802 | 1.7 | 101,770 |
| 24 | 1.5 | 1,788,639 | 1.5 | 1,770,735 |
| 50,000 | 1.5 | (2^50000 tries) | 131 | |
| 1,000,000 | 1.4 | | 2,479 | |
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

HERE = Path(__file__).resolve().parent

from bench.lib.payloads import chat_request  # noqa: E402
from bench.lib.provenance import code_version, describe  # noqa: E402
from bench.lib.rounds import Rounds  # noqa: E402
from ingress.errors import PromptBlocked  # noqa: E402
from ingress.guardrails import Guard, Guardrails, compile_guardrails  # noqa: E402
from ingress.guardrails.scanner import compile_regex  # noqa: E402
from ingress.oai.chat import ChatCompletionRequest  # noqa: E402
from ingress.oai.codec import decode_chat_request  # noqa: E402

RESULTS = HERE / "results" / "guardrails.json"
TERMS = ["project zeus", "project apollo", "internal only", "do not share", "codename falcon", "confidential",
         "restricted", "top secret", "acme merger", "q3 forecast", "layoffs", "salary band"]
CONFIG = {
    "max_prompt_tokens": 1_000_000, "blocked_terms": TERMS,
    "patterns": [{"name": "ticket-id", "regex": r"TCK-\d{6}"}, {"name": "customer", "regex": r"(?i)cust-[0-9a-f]{8}"}],
    "secrets": {"action": "block"}, "pii": {"email": "redact", "phone": "redact", "card": "block"},
}


def _guard(**changes: object) -> Guard:
    return compile_guardrails(msgspec.convert({**CONFIG, "scope": "all", "messages": "all", **changes}, Guardrails))


def _with_hits(body: bytes, every: int) -> ChatCompletionRequest:
    """The request with an email and a phone number every `every` words of each message: redacted."""
    request = decode_chat_request(body)
    messages = []
    for m in request.messages:
        words = str(m.content).split(" ")
        for i in range(0, len(words), every):
            words[i] = "mail jane.roe@example.com or call +1 (555) 123-4567"
        messages.append(msgspec.structs.replace(m, content=" ".join(words)))
    return msgspec.structs.replace(request, messages=messages)


def _user(text: str) -> ChatCompletionRequest:
    return decode_chat_request(msgspec.json.encode({"model": "m", "messages": [{"role": "user", "content": text}]}))


def _checks() -> dict[str, tuple[Callable[[], object], Callable[[], object] | None]]:
    """name -> (the guard's check, decoding the same body, when there is one)."""
    every, default = _guard(), _guard(scope="user", messages="last")
    out: dict[str, tuple[Callable[[], object], Callable[[], object] | None]] = {}
    for size, label in ((16 * 1024, "16 KB"), (1024 * 1024, "1 MB")):
        body = chat_request(size)
        request = decode_chat_request(body)
        assert every.chat(request, 1) is request  # nothing to find: the same object back
        out[f"{label}, 11 messages"] = (lambda g=every, r=request: g.chat(r, 1),
                                        lambda b=body: decode_chat_request(b))
        out[f"{label}, 11 messages, user / last"] = (lambda g=default, r=request: g.chat(r, 1), None)
        hits = _with_hits(body, 200)
        assert every.chat(hits, 1) is not hits
        out[f"{label}, 11 messages, hits every 200 words"] = (lambda g=every, r=hits: g.chat(r, 1), None)
    big = decode_chat_request(chat_request(1024 * 1024))
    text = str(big.messages[1].content)
    terms_only, rules_only = _guard(secrets=None, pii=None, patterns=[]), _guard(blocked_terms=[])
    out["1 MB: blocked terms alone"] = (lambda g=terms_only, r=big: g.chat(r, 1), None)
    out["1 MB: RE2 rules alone"] = (lambda g=rules_only, r=big: g.chat(r, 1), None)
    out["95 KB message: casefold alone"] = (lambda t=text: t.casefold(), None)
    one_mb = 1024 * 1024
    adversarial = {
        "1 MB 'zeuszeus...': a term inside one long word": ("zeus" * (one_mb // 4), {"blocked_terms": ["zeus"]}),
        "1 MB of cards failing Luhn": ("4111 1111 1111 1112 " * (one_mb // 20), {"pii": {"card": "block"}}),
        "1 MB of '1.222.333.4444 ' (phone near misses)": ("1.222.333.4444 " * (one_mb // 15),
                                                          {"pii": {"phone": "block"}}),
        "1 MB of 'a@b.' (email near misses)": ("a@b." * (one_mb // 4), {"pii": {"email": "block"}}),
        "1 MB of 'sk-' + 30 letters (key near misses)": (("sk-" + "abcdefghij" * 3 + " ") * (one_mb // 34),
                                                         {"secrets": {}}),
    }
    for name, (prompt, config) in adversarial.items():
        g = compile_guardrails(msgspec.convert(config, Guardrails))
        request = _user(prompt)
        assert g.chat(request, 1) is request, name  # every candidate refused
        out[name] = (lambda g=g, r=request: g.chat(r, 1), None)
    return out


def _per_op(fn: Callable[[], object], loops: int) -> float:
    start = time.thread_time()
    for _ in range(loops):
        fn()
    return (time.thread_time() - start) / loops * 1e6


def _loops(fn: Callable[[], object]) -> int:
    return max(1, int(0.02 / (_per_op(fn, 1) / 1e6)))


def measure(rounds: int) -> dict[str, dict[str, float | None]]:
    checks = _checks()
    candidates: dict[tuple[str, str], tuple[Callable[[], object], int]] = {}
    for name, (check, decode) in checks.items():
        candidates[(name, "guard")] = (check, _loops(check))
        if decode is not None:
            candidates[(name, "decode")] = (decode, _loops(decode))
    timed = Rounds(candidates, rounds, order="shuffle")  # a fresh random order each round
    gc.disable()
    try:
        timed.collect(lambda key: {"us": _per_op(*candidates[key])})
    finally:
        gc.enable()
    out: dict[str, dict[str, float | None]] = {}
    for name, (_, decode) in checks.items():
        guard_us = timed.median((name, "guard"), "us")
        decode_us = timed.median((name, "decode"), "us") if decode is not None else None
        out[name] = {"guard_us": guard_us, "decode_us": decode_us}
    return out


def redos(python_max: int = 24) -> dict[str, dict[str, dict[str, float]]]:
    """µs per search of a backtracking pattern on 'a' * n + '!': RE2 (compiled as the guard compiles)
    and Python's re. `(a+)+$` is anchored at the end, which RE2 reads backwards from the end (so it is
    done at the '!'); `(a+)+b` makes RE2 read all n characters forwards."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for pattern in ("(a+)+$", "(a+)+b"):
        rx2, rx = compile_regex(pattern.encode()), re.compile(pattern)
        rows = out[pattern] = {}
        for n in (16, 18, 20, 22, python_max, 50_000, 1_000_000):
            text = "a" * n + "!"
            data = text.encode()
            loops = max(1, int(0.02 / max(1e-7, _timed(lambda d=data, r=rx2: r.search(d)))))
            row = {"re2_us": _per_op(lambda d=data, r=rx2: r.search(d), loops)}
            if n <= python_max:
                row["python_re_us"] = _per_op(lambda t=text, r=rx: r.search(t), 1)
            rows[str(n)] = row
    return out


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    try:  # a block is part of what is measured nowhere: every row above passes or redacts
        results = measure(args.rounds)
    except PromptBlocked as exc:
        raise SystemExit(f"a benchmark prompt was blocked by {exc.rule}: fix the bench") from None
    backtracking = redos()
    print(describe(code_version()))
    head = f"{'request, µs per check':<50}{'guard':>12}{'decode':>12}{'guard / decode':>16}"
    print(head + "\n" + "-" * len(head))
    for name, row in results.items():
        g, d = row["guard_us"], row["decode_us"]
        assert g is not None
        print(f"{name:<50}{g:>12.1f}" + (f"{d:>12.1f}{g / d:>15.2f}x" if d else f"{'-':>12}{'-':>16}"))
    for pattern, rows in backtracking.items():
        print(f"\n{pattern + ' on a*n + !, µs per search':<36}{'RE2':>12}{'Python re':>14}")
        for n, row in rows.items():
            py = f"{row['python_re_us']:>14.0f}" if "python_re_us" in row else f"{'(2^n tries)':>14}"
            print(f"{'n = ' + n:<36}{row['re2_us']:>12.1f}{py}")
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps({"code": code_version(), "rounds": args.rounds, "results": results,
                                    "redos": backtracking}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
