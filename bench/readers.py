"""Reading buffers: the generated readers (ingress/wire/_generated/readers.py) against flatc's own
Python accessors, side by side.

    python -m bench readers [--rounds 60]

Three readers of each buffer:
- "flatc, by hand": calls to flatc's accessors written out field by field into the wire types, as
  ingress.wire.decode read answers before the generated readers (kept here as the baseline);
- "flatc, from schema": tests/support/flatc_reference.py, the oracle the tests hold the generated readers to,
  which finds the accessors by name (getattr) and so costs more than the hand-written calls;
- "generated": ingress.wire.decode as the edge reads now (generated reader, then the wire types);
  for the request, the generated reader alone.
Beside them, "verify": the generated verifier (strict, as the edge runs it before reading) on the same
buffer as it arrives (the chunk with its size prefix).
Candidates run in a fresh random order every round; the clock is the thread's CPU time, and the
figure is the median over rounds of µs per read. The answers are what the demo service writes.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))

from flatc_reference import flatc_read  # noqa: E402

from bench.lib.payloads import chat_request  # noqa: E402
from bench.lib.provenance import code_version, describe  # noqa: E402
from bench.lib.rounds import Rounds  # noqa: E402
from ingress import wire  # noqa: E402
from ingress.encoding.passport import RequestMeta, compute_passport  # noqa: E402
from ingress.encoding.requests import encode_request  # noqa: E402
from ingress.oai.codec import decode_chat_request  # noqa: E402
from ingress.wire import decode, verify  # noqa: E402
from ingress.wire import types as wt  # noqa: E402
from ingress.wire._generated import readers  # noqa: E402
from ingress.wire._generated.LLMGateway.CompletionChunk import CompletionChunk  # noqa: E402
from ingress.wire._generated.LLMGateway.CompletionResponse import CompletionResponse  # noqa: E402

RESULTS = HERE / "results" / "readers.json"


def _s(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def _usage(u: object) -> wt.Usage | None:
    if u is None:
        return None
    return wt.Usage(prompt_tokens=u.PromptTokens(), completion_tokens=u.CompletionTokens(),  # type: ignore[attr-defined]
                    total_tokens=u.TotalTokens(), cached_tokens=u.CachedTokens(),  # type: ignore[attr-defined]
                    reasoning_tokens=u.ReasoningTokens())  # type: ignore[attr-defined]


def response_by_hand(buf: bytes) -> wt.Response:
    r = CompletionResponse.GetRootAs(buf, 0)
    choices = []
    for i in range(r.ChoicesLength()):
        c = r.Choices(i)
        m = c.Message()
        calls = [m.ToolCalls(j) for j in range(m.ToolCallsLength())] if m else []
        choices.append(wt.Choice(
            index=c.Index(), content=_s(m.Content()) if m else None, refusal=_s(m.Refusal()) if m else None,
            tool_calls=[wt.FunctionCall(id=_s(t.Id()) or "", name=_s(t.Name()) or "", arguments=_s(t.Arguments()) or "",
                                        type=_s(t.Type()) or "function") for t in calls],
            finish_reason=decode.FINISH_NAMES[c.FinishReason()]))
    return wt.Response(id=_s(r.Id()) or "", model=_s(r.Model()) or "", created=r.Created(), choices=choices,
                       usage=_usage(r.Usage()), system_fingerprint=_s(r.SystemFingerprint()))


def chunk_by_hand(buf: bytes) -> wt.Chunk:
    k = CompletionChunk.GetRootAs(buf, 0)
    role = k.Role()
    deltas = [k.ToolCalls(i) for i in range(k.ToolCallsLength())]
    return wt.Chunk(
        sequence=k.Sequence(), choice_index=k.ChoiceIndex(), id=_s(k.Id()), model=_s(k.Model()),
        created=k.Created() or None, role=None if role is None else decode.ROLE_NAMES[role], content=_s(k.Content()),
        tool_calls=[wt.ToolCallDelta(index=d.Index(), id=_s(d.Id()), type=_s(d.Type()), name=_s(d.Name()),
                                     arguments=_s(d.Arguments())) for d in deltas],
        refusal=_s(k.Refusal()), finish_reason=decode.FINISH_NAMES[k.FinishReason()], usage=_usage(k.Usage()),
        system_fingerprint=_s(k.SystemFingerprint()), done=k.Done())


BY_HAND = {"CompletionResponse": response_by_hand, "CompletionChunk": chunk_by_hand}
GENERATED = {"CompletionResponse": decode.decode_response, "CompletionChunk": decode.decode_chunk,
             "CompletionRequest": readers.read_CompletionRequest}
VERIFY: dict[str, Callable[[bytes], None]] = {
    "CompletionResponse": verify.verify_response, "CompletionChunk": lambda frame: verify.verify_chunk(frame),
    "CompletionRequest": verify.verify_request}
READERS = ("flatc, by hand", "flatc, from schema", "generated", "verify")


def buffers() -> dict[str, tuple[str, bytes, bytes]]:
    """name -> (root table, buffer, the buffer as it arrives: a chunk with its size prefix)."""
    request = decode_chat_request(chat_request(16 * 1024))
    words = " ".join(["word"] * 64)
    response = wire.Response(id="chatcmpl-1", model="ingress-demo", created=1, usage=wire.Usage(
        prompt_tokens=3000, completion_tokens=64, total_tokens=3064), choices=[
        wire.Choice(index=0, content=words, finish_reason="length")])
    chunk = wire.Chunk(sequence=7, choice_index=0, content=" word")
    answer = bytes(wire.write_response(response))
    frame = bytes(wire.write_chunk(chunk))
    body = bytes(encode_request(request, "req-1", compute_passport(request, RequestMeta())))
    return {
        "CompletionResponse (64 words, usage)": ("CompletionResponse", answer, answer),
        "CompletionChunk (one delta)": ("CompletionChunk", frame[4:], frame),
        "CompletionRequest (16 KB chat)": ("CompletionRequest", body, body),
    }


def per_op(fn: Callable[[], object], loops: int) -> float:
    start = time.thread_time()
    for _ in range(loops):
        fn()
    return (time.thread_time() - start) / loops * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    candidates: dict[tuple[str, str], tuple[Callable[[], object], int]] = {}
    for name, (root, buf, arrived) in buffers().items():
        # The same data from every reader, or the timing means nothing.
        assert getattr(readers, f"read_{root}")(buf) == flatc_read(root, buf), name
        fns: dict[str, Callable[[], object]] = {"flatc, from schema": lambda r=root, b=buf: flatc_read(r, b),
                                                "generated": lambda g=GENERATED[root], b=buf: g(b),
                                                "verify": lambda v=VERIFY[root], b=arrived: v(b)}
        if root in BY_HAND:
            assert BY_HAND[root](buf) == GENERATED[root](buf), name
            fns["flatc, by hand"] = lambda h=BY_HAND[root], b=buf: h(b)
        for reader, fn in fns.items():
            loops = max(1, int(0.005 / (per_op(fn, 20) / 1e6)))  # ~5 ms a round
            candidates[(name, reader)] = (fn, loops)
    timed = Rounds(candidates, args.rounds, order="shuffle")  # a fresh random order each round
    gc.disable()
    try:
        timed.collect(lambda key: {"us": per_op(*candidates[key])})
    finally:
        gc.enable()
    print(describe(code_version()))
    head = f"{'buffer, µs per read':<38}" + "".join(f"{r:>20}" for r in READERS) + f"{'by hand / generated':>21}"
    print(head + "\n" + "-" * len(head))
    out: dict[str, dict[str, float]] = {}
    for name in buffers():
        us = out[name] = {r: timed.median((name, r), "us") for r in READERS if (name, r) in candidates}
        ratio = f"{us['flatc, by hand'] / us['generated']:.1f}x" if "flatc, by hand" in us else "-"
        print(f"{name:<38}" + "".join(f"{us[r]:>20.2f}" if r in us else f"{'-':>20}" for r in READERS) + f"{ratio:>21}")
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps({"code": code_version(), "rounds": args.rounds, "results": out}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
