"""bench/lib: the rounds' orders and the figures read from them, the tables, and a server run, awaited and
stopped."""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.lib.budget import side_by_side
from bench.lib.results import RESULTS, result_path, write_result
from bench.lib.rounds import Order, Rounds, Spread, median
from bench.lib.servers import NotReady, Server, free_port, serving
from bench.lib.tables import Table, figure


def _orders(rounds: Rounds[str]) -> list[tuple[int, str]]:
    return [(r, "".join(order)) for r, order in rounds]


@pytest.mark.parametrize(("order", "expected"), [
    ("rotate", ["ABC", "BCA", "CAB", "ABC"]),
    ("alternate", ["ABC", "CBA", "ABC", "CBA"]),
    ("fixed", ["ABC", "ABC", "ABC", "ABC"]),
])
def test_each_round_has_its_order(order: Order, expected: list[str]) -> None:
    assert _orders(Rounds("ABC", 4, order=order)) == list(enumerate(expected))


def test_two_variants_alternating_run_a_b_b_a() -> None:
    flat = [v for _, order in Rounds("AB", 4, order="alternate") for v in order]
    assert "".join(flat) == "ABBA" * 2


def test_a_warm_up_round_comes_first_numbered_minus_one() -> None:
    assert _orders(Rounds("AB", 2, order="alternate", warmup=True)) == [(-1, "BA"), (0, "AB"), (1, "BA")]


def test_shuffled_rounds_shuffle_the_last_order_again() -> None:
    rng, order, expected = random.Random(7), list("ABCDEF"), []
    for _ in range(5):
        rng.shuffle(order)
        expected.append("".join(order))
    got = [order for _, order in _orders(Rounds("ABCDEF", 5, order="shuffle", rng=random.Random(7)))]
    assert got == expected


def _measured() -> Rounds[str]:
    rounds = Rounds(("base", "new"), 3, baseline="base")
    for base, new in ((100.0, 80.0), (200.0, 150.0), (120.0, 132.0)):
        rounds.add("base", {"cpu": base, "nested": {"edge": base}}, cell="c=1")
        rounds.add("new", {"cpu": new, "nested": {"edge": new}}, cell="c=1")
    return rounds


def test_ratios_and_differences_are_taken_within_each_round() -> None:
    rounds = _measured()
    assert rounds.ratio("new", "cpu", cell="c=1") == Spread(0.8, 0.75, 1.1)
    assert rounds.added("new", "cpu", cell="c=1") == Spread(-20.0, -50.0, 12.0)
    assert rounds.median("new", "cpu", cell="c=1") == 132.0  # the ratio of medians would be 1.1


def test_a_figure_is_named_by_a_path_or_a_function() -> None:
    rounds = _measured()
    assert rounds.values("new", ("nested", "edge"), "c=1") == [80.0, 150.0, 132.0]
    assert rounds.values("new", lambda variant, run: run["cpu"] * 2, "c=1") == [160.0, 300.0, 264.0]


def test_another_baseline_may_be_named() -> None:
    assert _measured().ratio("base", "cpu", baseline="new", cell="c=1").median == 1.25


def test_collect_keeps_every_round_but_the_warm_up() -> None:
    calls: list[str] = []

    def measure(variant: str) -> dict[str, float]:
        calls.append(variant)
        return {"n": float(len(calls))}

    rounds = Rounds("AB", 2, order="alternate", warmup=True).collect(measure)
    assert "".join(calls) == "BAABBA"
    assert rounds.values("A", "n") == [3.0, 6.0] and rounds.values("B", "n") == [4.0, 5.0]


def test_nans_are_left_out_of_medians_and_ranges() -> None:
    assert median([1.0, math.nan, 3.0]) == 2.0
    assert math.isnan(median([]))
    assert Spread.of([math.nan, 2.0, 5.0, 3.0]) == Spread(3.0, 2.0, 5.0)
    assert Spread(1.0, 0.5, 1.25).range() == "0.50-1.25"


def test_a_table_prints_as_the_f_strings_did() -> None:
    table = Table(("load", "<16"), ("req/s", ">9.0f"), ("p99 ms", ">9.3f"), ("CPU µs/req", ">12,.0f"))
    header = f"{'load':<16}{'req/s':>9}{'p99 ms':>9}{'CPU µs/req':>12}"
    assert table.header() == header + "\n" + "-" * len(header)
    assert table.row("c=32", 1234.5, 3.21, 12345.6) == f"{'c=32':<16}{1234.5:>9.0f}{3.21:>9.3f}{12345.6:>12,.0f}"
    assert table.row("", "1.030", None, "0.98") == f"{'':<16}{'1.030':>9}{'':>9}{'0.98':>12}"


def test_a_figure_keeps_decimals_under_100() -> None:
    assert [figure(v) for v in (1.234, 99.94, 1234.5, None, math.nan)] == ["1.2", "99.9", "1,234", "-", "-"]
    assert figure(math.nan, 2, missing="") == ""


def test_a_server_is_awaited_and_stopped(tmp_path: Path) -> None:
    port = free_port()
    server = Server("http", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], port,
                    tmp_path / "http.log", health="/", env={"BENCH_UNUSED": "1"})
    with serving(server):
        assert server.proc is not None and server.proc.poll() is None
        assert server.rss_kb() > 0
    assert server.proc.poll() is not None


def test_a_server_that_exits_names_its_log(tmp_path: Path) -> None:
    log = tmp_path / "broken.log"
    server = Server("broken", [sys.executable, "-c", "import sys; sys.exit('no port for me')"], free_port(), log)
    with pytest.raises(NotReady, match=r"broken exited with 1 .*broken\.log, ends:\nno port for me"), server:
        pass


def test_a_server_that_never_answers_is_stopped(tmp_path: Path) -> None:
    server = Server("silent", [sys.executable, "-c", "import time; time.sleep(60)"], free_port(),
                    tmp_path / "silent.log", health=None)
    server.start()
    with pytest.raises(NotReady, match="did not answer port"):
        server.wait_ready(timeout=0.5)
    server.stop()
    assert server.proc is not None and server.proc.poll() is not None


def test_a_result_goes_to_its_benchmarks_file_unless_told_where(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert (result_path("chunks"), result_path("chunks", quick=True)) == (RESULTS / "chunks.json",
                                                                         RESULTS / "chunks-quick.json")
    out = result_path("chunks", out=tmp_path / "deep" / "mine.json")
    write_result({"meta": {"wall_s": 61.6}, "rows": [1.5]}, out)
    assert out.read_text() == '{\n "meta": {\n  "wall_s": 61.6\n },\n "rows": [\n  1.5\n ]\n}\n'
    assert capsys.readouterr().out == f"wrote {out} in 62 s\n"


def test_side_by_side_times_both_calls_of_each_stage_and_their_difference() -> None:
    calls = {"base": 0, "other": 0, "alone": 0}

    def counting(name: str, work: int) -> Callable[[], object]:
        def call() -> object:
            calls[name] += 1
            return sum(range(work))
        return call

    table = side_by_side({"both": (counting("base", 10), counting("other", 5_000)),
                          "only the other": (None, counting("alone", 10))}, ("chat", "gemini"), 3, 0.002)
    assert set(table) == {"both", "only the other"} and "chat" not in table["only the other"]
    both = table["both"]
    assert both["gemini"]["us"] > both["chat"]["us"] and both["difference_us"] > 0  # 500x the work
    low, high = both["difference_range"]
    assert low <= both["difference_us"] <= high
    assert all(calls.values())  # each call ran: warmed, then timed


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_paused_stops_a_process_tree_while_the_block_runs_and_continues_it_after() -> None:
    import subprocess
    import time

    from bench.lib.procs import family, paused

    sleeper = "import time; time.sleep(60)"
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys, time; "
                               f"subprocess.Popen([sys.executable, '-c', {sleeper!r}]); time.sleep(60)"])
    try:
        for _ in range(200):  # its child started
            if len(family(parent.pid)) == 2:
                break
            time.sleep(0.02)
        tree = family(parent.pid)
        assert len(tree) == 2
        with paused([parent.pid]):
            assert [_state(pid) for pid in tree] == ["T", "T"]
        for _ in range(200):  # SIGCONT, like SIGSTOP, is delivered when the process is next scheduled
            if all(_state(pid) in ("S", "R") for pid in tree):
                break
            time.sleep(0.01)
        assert [_state(pid) in ("S", "R") for pid in tree] == [True, True]
    finally:
        for pid in reversed(family(parent.pid)):
            subprocess.run(["kill", "-9", str(pid)], check=False)
        parent.wait()
