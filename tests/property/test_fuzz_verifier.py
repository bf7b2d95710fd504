"""Mutants of valid buffers: the generated verifier judges each exactly as FlatBuffers' C++ Verifier.

Mutations: bit flips, bytes set to 0x00/0xFF/0x7F/0x80 or anything, structural words (root offset,
soffsets, vtable entries, uoffsets, lengths) set to boundary values, truncation, insertion, deletion.
For every mutant: strict=False agrees with C++; strict=True accepts only what C++ accepts, and what it
accepts the generated readers read exactly as flatc's accessors do; no
exception but VerifyError escapes, none of them a wrapped internal error; and the work done stays
within the bounds the buffer's size sets (counted, not timed).

tests/fixtures/fuzz_corpus/ keeps mutants worth replaying, with their verdicts in MANIFEST.tsv; it was
made, and can be remade after a deliberate change, with `python tests/property/test_fuzz_verifier.py`.
A longer run than the tests make: `python tests/property/test_fuzz_verifier.py --campaign SECONDS --seed N`.
"""

from __future__ import annotations

import random
import re
import struct
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

if __name__ == "__main__":  # run as a script: make the test helpers importable as pytest does
    tests = Path(__file__).resolve().parents[1]
    sys.path[:0] = [str(tests.parent), str(tests), str(tests / "support")]

from cxx_oracle import CxxVerifier
from flatc_reference import flatc_read, same
from unit.wire.test_verify import ROOTS, TABLES, Valid, deref, u16, u32, valid_buffers, vtable_of

from ingress.wire import verifier_runtime
from ingress.wire._generated import readers
from ingress.wire._generated import verifier as gv

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "fuzz_corpus"
MANIFEST = CORPUS / "MANIFEST.tsv"
SEEDS = valid_buffers()
T = TypeVar("T")

SETTINGS = settings(
    max_examples=1500,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- where the structure is: the words worth setting to boundary values ----------------------------


def landmarks(seed: Valid) -> tuple[tuple[int, int], ...]:
    """(position, width) of every structural word of a valid buffer, and of every scalar field."""
    buf, start = seed.data, 4 if seed.size_prefixed else 0
    marks: list[tuple[int, int]] = [(start, 4)]
    if seed.size_prefixed:
        marks.append((0, 4))
    seen: set[int] = set()

    def table(t: int, name: str) -> None:
        if t in seen:
            return
        seen.add(t)
        vt = vtable_of(buf, t)
        vsize = u16(buf, vt)
        marks.extend([(t, 4), (vt, 2), (vt + 2, 2)])
        for f in TABLES[name].fields:
            entry = vt + 4 + 2 * f.slot
            if entry >= vt + vsize or not u16(buf, entry):
                continue
            marks.append((entry, 2))
            at = t + u16(buf, entry)
            if f.kind == "scalar":
                marks.append((at, 1))
                continue
            marks.append((at, 4))
            target = deref(buf, at)
            if f.kind == "table":
                table(target, f.type)
                continue
            marks.append((target, 4))  # a string's or vector's length
            if f.kind == "vector" and f.element_kind in ("string", "table"):
                for i in range(u32(buf, target)):
                    element = target + 4 + 4 * i
                    marks.append((element, 4))
                    if f.element_kind == "table":
                        table(deref(buf, element), f.type)
                    else:
                        marks.append((deref(buf, element), 4))

    table(deref(buf, start), ROOTS[seed.kind])
    return tuple(sorted(set(marks)))


LANDMARKS = {seed.name: landmarks(seed) for seed in SEEDS}
INTERESTING_BYTES = (0x00, 0xFF, 0x7F, 0x80)


def boundaries(old: int, at: int, size: int, width: int) -> list[int]:
    """Values for the word at `at` that sit on some check's edge, whatever the word means."""
    top = (1 << (8 * width)) - 1
    edges = [0, 1, 2, 3, 4, 6, 8, top, top >> 1, (top >> 1) + 1, old + 1, old - 1, old + 2, old - 2, old + 4,
             old - 4, old + 8, -old, size - at, size - at - 1, size - at - 4, size - at + 1, size, size // 2]
    return [value & top for value in edges]


# --- one mutation engine, driven by Hypothesis or by a seeded Random --------------------------------


class Chooser(Protocol):
    def integer(self, lo: int, hi: int) -> int: ...

    def pick(self, options: Sequence[T]) -> T: ...


class _Drawn:
    def __init__(self, data: st.DataObject) -> None:
        self._data = data

    def integer(self, lo: int, hi: int) -> int:
        return self._data.draw(st.integers(lo, hi))

    def pick(self, options: Sequence[T]) -> T:
        return self._data.draw(st.sampled_from(options))


class _Seeded:
    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self._rng.randint(lo, hi)

    def pick(self, options: Sequence[T]) -> T:
        return self._rng.choice(options)


OPERATIONS = ("flip", "byte", "word", "word", "word", "truncate", "insert", "delete")


def mutate(seed: Valid, choose: Chooser) -> tuple[bytes, list[str]]:
    """The seed's bytes after one to three mutations, and what they were."""
    buf = bytearray(seed.data)
    steps: list[str] = []
    for _ in range(choose.integer(1, 3)):
        n = len(buf)
        if n == 0:
            break
        op = choose.pick(OPERATIONS)
        if op == "flip":
            at, bit = choose.integer(0, n - 1), choose.integer(0, 7)
            buf[at] ^= 1 << bit
            steps.append(f"flip bit {bit} of byte {at}")
        elif op == "byte":
            at = choose.integer(0, n - 1)
            value = choose.pick(INTERESTING_BYTES) if choose.integer(0, 3) else choose.integer(0, 255)
            buf[at] = value
            steps.append(f"byte {at} = {value:#x}")
        elif op == "word":
            at, width = choose.pick(LANDMARKS[seed.name])
            if at + width > n:
                continue
            old = int.from_bytes(buf[at : at + width], "little")
            value = choose.pick(boundaries(old, at, n, width))
            buf[at : at + width] = value.to_bytes(width, "little")
            steps.append(f"{width}-byte word at {at}: {old:#x} -> {value:#x}")
        elif op == "truncate":
            keep = choose.integer(0, n - 1)
            del buf[keep:]
            steps.append(f"truncate to {keep}")
        elif op == "insert":
            at = choose.integer(0, n)
            data = choose.pick((b"\0", b"\0" * 4, b"\xff", b"\0" * 8, b"\x80\0\0\0", b"abc"))
            buf[at:at] = data
            steps.append(f"insert {data!r} at {at}")
        else:
            at, count = choose.integer(0, n - 1), choose.integer(1, 8)
            del buf[at : at + count]
            steps.append(f"delete {count} at {at}")
    if seed.size_prefixed and len(buf) >= 4 and choose.integer(0, 1):
        struct.pack_into("<I", buf, 0, len(buf) - 4)  # keep the frame whole: judge the damage inside it
        steps.append("size prefix fixed up")
    return bytes(buf), steps


# --- the verdicts --------------------------------------------------------------------------------


def judge(kind: str, data: bytes, size_prefixed: bool, *,
          strict: bool) -> tuple[str | None, verifier_runtime.Verifier]:
    verifier = verifier_runtime.Verifier(data, strict=strict)
    try:
        verifier.verify(*gv.ROOTS[ROOTS[kind]], size_prefixed=size_prefixed)
    except verifier_runtime.VerifyError as exc:
        assert not str(exc).startswith("unverifiable"), exc  # a read escaped its bounds check
        return str(exc), verifier
    return None, verifier


def check(cxx: bool | None, kind: str, data: bytes, size_prefixed: bool,
          context: object) -> tuple[str | None, str | None]:
    """Every property a mutant must keep; `cxx` is the C++ verdict (None when it is not known)."""
    compat, loose = judge(kind, data, size_prefixed, strict=False)
    strict, tight = judge(kind, data, size_prefixed, strict=True)
    if cxx is not None:
        assert (compat is None) is cxx, (compat, context)
    assert strict is None or compat is not None or strict.endswith("(strict)"), (strict, compat, context)
    assert compat is None or strict is not None, (compat, context)
    # Work: each table or vector walked took an offset to reach. Strict mode follows at most a
    # quarter of the buffer's length in offsets and decodes at most its length in string bytes
    # (before refusing: plus the vector or string that overran). Only crafted overlapping vectors
    # make strict=False follow more offsets than the buffer has bytes (see tests/unit/wire/test_verify.py).
    n = len(data)
    for verifier in (loose, tight):
        assert verifier.walked <= verifier.refs <= n, context
    assert tight.refs <= n // 2 and tight.decoded <= 2 * n, context
    if strict is None:
        assert tight.refs <= n // 4 and tight.decoded <= n, context
        # What the verifier passes, the generated reader reads exactly as flatc's accessors do.
        body = data[4:] if size_prefixed else data
        assert same(getattr(readers, f"read_{ROOTS[kind]}")(body), flatc_read(ROOTS[kind], body)), context
    return compat, strict


@pytest.mark.cxx
@SETTINGS
@given(data=st.data())
def test_mutants_are_judged_like_the_cxx_verifier(cxx_verifier: CxxVerifier, data: st.DataObject) -> None:
    choose = _Drawn(data)
    seed = choose.pick(SEEDS)
    mutant, steps = mutate(seed, choose)
    cxx = cxx_verifier.verify(seed.kind, mutant, seed.size_prefixed)
    check(cxx, seed.kind, mutant, seed.size_prefixed, (seed.name, steps))


@settings(max_examples=300, deadline=None, database=None)
@given(data=st.binary(max_size=256), kind=st.sampled_from(sorted(ROOTS)), size_prefixed=st.booleans())
def test_random_bytes_raise_only_verify_errors(data: bytes, kind: str, size_prefixed: bool) -> None:
    check(None, kind, data, size_prefixed, data)


# --- the checked-in corpus -------------------------------------------------------------------------


def _manifest() -> list[tuple[str, str, bool, bool, bool]]:
    rows = []
    for line in MANIFEST.read_text().splitlines()[1:]:
        name, kind, framing, cxx, strict, _ = line.split("\t", 5)
        rows.append((name, kind, framing == "prefixed", cxx == "accept", strict == "accept"))
    return rows


CORPUS_ROWS = _manifest() if MANIFEST.exists() else []


def test_the_corpus_is_all_there() -> None:
    assert len(CORPUS_ROWS) >= 50
    assert sorted(p.name for p in CORPUS.glob("*.bin")) == sorted(row[0] for row in CORPUS_ROWS)


@pytest.mark.parametrize(("name", "kind", "size_prefixed", "cxx", "strict"), CORPUS_ROWS,
                         ids=[r[0] for r in CORPUS_ROWS])
def test_corpus_verdicts_hold(name: str, kind: str, size_prefixed: bool, cxx: bool, strict: bool) -> None:
    """The recorded C++ verdicts, without the oracle: the corpus also guards machines without g++."""
    data = (CORPUS / name).read_bytes()
    _, strict_message = check(cxx, kind, data, size_prefixed, name)
    assert (strict_message is None) is strict, strict_message


@pytest.mark.cxx
def test_corpus_verdicts_are_the_cxx_verifiers(cxx_verifier: CxxVerifier) -> None:
    for name, kind, size_prefixed, cxx, _ in CORPUS_ROWS:
        assert cxx_verifier.verify(kind, (CORPUS / name).read_bytes(), size_prefixed) is cxx, name


def _shape(message: str | None) -> str:
    """The check a verdict names, without table, field, positions or bytes: "accept", "offset misaligned"."""
    if message is None:
        return "accept"
    check = message if message.startswith("file identifier") else message.split(": ", 1)[-1]
    return " ".join(re.sub(r"b(['\"]).*?\1|\d+", " ", check).split())


def _crafted() -> dict[str, tuple[str, bytes | bytearray, bool]]:
    """Shapes no mutation of a builder's buffer reaches: DAGs at the table limit, short vtables,
    overlapping strings, misaligned struct elements, a frame whose prefix was stripped."""
    from unit.wire import test_verify as tv

    return {
        "dag-at-the-table-limit": ("request", tv.dag_request(999, 1000), False),
        "dag-one-table-over": ("request", tv.dag_request(1000, 999), False),
        "vtable-0-bytes": ("error", tv.short_vtable(0), False),
        "vtable-2-bytes": ("error", tv.short_vtable(2), False),
        "vtable-4-bytes-table-0-bytes": ("error", tv.short_vtable(4), False),
        "strings-overlap": ("request", tv.overlapping_stop(100), False),
        "struct-elements-misaligned": ("request", tv.struct_vector_at(4), False),
        "frame-with-its-prefix-stripped": ("chunk", tv.CHUNK_FRAME[4:], False),
    }


def regenerate(rounds: int = 40_000, rng_seed: int = 20260101) -> None:
    """Rewrite the corpus: one mutant for each pair of verdict shapes (compat, strict) seen, two
    accepted ones per root and framing, and the crafted buffers."""
    from cxx_oracle import build_oracle

    rng = _Seeded(random.Random(rng_seed))
    chosen: dict[tuple[str, ...], list[tuple[str, bytes, bool]]] = {}
    with CxxVerifier(build_oracle()) as cxx_verifier:
        for _ in range(rounds):
            seed = rng.pick(SEEDS)
            mutant, steps = mutate(seed, rng)
            if len(mutant) > 4096:
                continue
            cxx = cxx_verifier.verify(seed.kind, mutant, seed.size_prefixed)
            compat, strict = check(cxx, seed.kind, mutant, seed.size_prefixed, steps)
            key: tuple[str, ...] = (_shape(compat), _shape(strict))
            if compat is None:
                key += (seed.kind, str(seed.size_prefixed))
            found = chosen.setdefault(key, [])
            if len(found) < (2 if compat is None else 1) and all(m != mutant for _, m, _ in found):
                found.append((seed.kind, mutant, seed.size_prefixed))
        entries = [(f"{kind}-{'prefixed' if prefixed else 'plain'}-{number:03d}", kind, data, prefixed)
                   for number, (kind, data, prefixed) in enumerate(m for _, found in sorted(chosen.items())
                                                                     for m in found)]
        entries += [(f"crafted-{name}", kind, bytes(data), prefixed)
                    for name, (kind, data, prefixed) in _crafted().items()]
        for old in CORPUS.glob("*.bin"):
            old.unlink()
        CORPUS.mkdir(parents=True, exist_ok=True)
        lines = ["file\troot\tframing\tcxx\tstrict\tstrict verdict"]
        for stem, kind, data, prefixed in entries:
            (CORPUS / f"{stem}.bin").write_bytes(data)
            cxx = cxx_verifier.verify(kind, data, prefixed)
            strict, _ = judge(kind, data, prefixed, strict=True)
            lines.append("\t".join([f"{stem}.bin", kind, "prefixed" if prefixed else "plain",
                                    "accept" if cxx else "reject", "accept" if strict is None else "reject",
                                    strict or ""]))
    MANIFEST.write_text("\n".join(lines) + "\n")
    print(f"{len(entries)} buffers written to {CORPUS}")


def campaign(seconds: float, rng_seed: int, keep: Path) -> int:
    """Mutants for `seconds`, each checked as the tests check them against the C++ Verifier; a mutant
    that breaks a property is written to `keep`. Also reports the slowest judgement (both modes)."""
    import time

    from cxx_oracle import build_oracle

    rng = _Seeded(random.Random(rng_seed))
    count, failures, slowest, end = 0, 0, 0.0, time.monotonic() + seconds
    with CxxVerifier(build_oracle()) as cxx_verifier:
        while time.monotonic() < end and failures < 10:
            seed = rng.pick(SEEDS)
            mutant, steps = mutate(seed, rng)
            cxx = cxx_verifier.verify(seed.kind, mutant, seed.size_prefixed)
            started = time.perf_counter()
            for strict in (False, True):
                judge(seed.kind, mutant, seed.size_prefixed, strict=strict)
            slowest = max(slowest, time.perf_counter() - started)
            count += 1
            try:
                check(cxx, seed.kind, mutant, seed.size_prefixed, (seed.name, steps))
            except AssertionError as exc:
                failures += 1
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"{seed.kind}-{rng_seed}-{count}.bin").write_bytes(mutant)
                print(f"FAILED {seed.name} {steps}: {exc}"[:1000], flush=True)
    print(f"seed {rng_seed}: {count:,} mutants in {seconds:.0f} s, {failures} failed; "
          f"slowest judgement (both modes) {slowest * 1000:.2f} ms")
    return 1 if failures else 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Rewrite the corpus, or run a fuzzing campaign.")
    parser.add_argument("--campaign", type=float, metavar="SECONDS", help="fuzz for this long instead")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, default=Path("fuzz-failures"), help="where failing mutants go")
    args = parser.parse_args()
    if args.campaign is None:
        regenerate()
    else:
        sys.exit(campaign(args.campaign, args.seed, args.keep))
