"""ingress/routing/split.py: the variant a key falls on, table-driven: fixed across processes, by weight."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ingress.routing.split import choose

SHARES = (("stable", 95), ("canary", 5))
REPO = Path(__file__).resolve().parents[3]


def test_the_same_key_gets_the_same_variant_in_another_process() -> None:
    keys = [f"user-{i}".encode() for i in range(200)]
    here = [choose(k, SHARES) for k in keys]
    code = ("from ingress.routing.split import choose\n"
            f"print(','.join(choose(f'user-{{i}}'.encode(), {SHARES!r}) for i in range(200)))")
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO)}, cwd=REPO).stdout.strip().split(",")

    assert here == there


@pytest.mark.parametrize(("shares", "expected"), [
    ((("only", 1),), {"only"}),
    ((("a", 1), ("never", 0)), {"a"}),
    ((("never", 0), ("b", 3)), {"b"}),
    ((("a", 1), ("b", 1)), {"a", "b"}),
])
def test_a_weight_of_zero_is_never_chosen(shares: tuple[tuple[str, int], ...], expected: set[str]) -> None:
    assert {choose(f"k{i}".encode(), shares) for i in range(400)} == expected


def test_raising_a_canarys_weight_moves_keys_only_onto_the_canary() -> None:
    keys = [f"key-{i}".encode() for i in range(2000)]
    before = {k: choose(k, (("stable", 99), ("canary", 1))) for k in keys}
    after = {k: choose(k, (("stable", 90), ("canary", 10))) for k in keys}

    moved = [k for k in keys if before[k] != after[k]]
    assert moved and all(before[k] == "stable" and after[k] == "canary" for k in moved)


def test_adding_a_variant_moves_no_key_between_the_others() -> None:
    keys = [f"key-{i}".encode() for i in range(2000)]
    before = {k: choose(k, (("a", 1), ("b", 1))) for k in keys}
    after = {k: choose(k, (("a", 1), ("b", 1), ("c", 1))) for k in keys}

    assert all(after[k] in (before[k], "c") for k in keys)
