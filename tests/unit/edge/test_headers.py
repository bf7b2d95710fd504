"""ingress/edge/headers.py: the caller's request id kept when well formed, x-ingress-served-by as an RFC 8941
dictionary with its strings quoted and escaped, and Server-Timing's marks for the stages done so far."""

from __future__ import annotations

import re

import pytest

from ingress.edge.headers import request_id_of, served_by, server_timing
from ingress.exchange import Exchange


@pytest.mark.parametrize("kept", ["abc", "req_01.x:y-z", "A" * 128])
def test_a_well_formed_request_id_is_kept(kept: str) -> None:
    assert request_id_of(kept) == kept


@pytest.mark.parametrize("made", [None, "", "has space", "a\nb", "é", "A" * 129, 'quote"d'])
def test_anything_else_is_replaced_by_a_fresh_id(made: str | None) -> None:
    fresh = request_id_of(made)
    assert re.fullmatch(r"[0-9a-f]{32}", fresh) and fresh != request_id_of(made)


def test_served_by_names_the_route_and_model_and_the_variant_when_split() -> None:
    exchange = Exchange("r")
    assert served_by(exchange) is None  # nothing served it
    exchange.attempts.served_by = ("claude", "claude-sonnet-4-5")
    assert served_by(exchange) == 'route="claude", model="claude-sonnet-4-5"'
    exchange.routed.variant = "canary"
    assert served_by(exchange) == 'route="claude", model="claude-sonnet-4-5", variant="canary"'


@pytest.mark.parametrize(("name", "quoted"), [
    ('say "hi"', 'say \\"hi\\"'),
    ("back\\slash", "back\\\\slash"),
    ("café", "caf?"),  # printable ASCII only
    ("tab\there", "tab?here"),
    ("new\nline", "new?line"),
])
def test_served_by_strings_are_quoted_and_escaped(name: str, quoted: str) -> None:
    exchange = Exchange("r")
    exchange.attempts.served_by = (name, "m")
    exchange.routed.variant = name
    assert served_by(exchange) == f'route="{quoted}", model="m", variant="{quoted}"'


def marks(header: str) -> dict[str, float]:
    return {m["name"]: float(m["dur"]) for m in re.finditer(r"(?P<name>\w+);dur=(?P<dur>[\d.]+)", header)}


def test_server_timing_has_the_stages_done_so_far_in_milliseconds() -> None:
    exchange = Exchange("req-1", started=10.0)
    assert server_timing(exchange) == 'request;desc="req-1"'  # nothing done yet
    exchange.paced, exchange.routed.decoded, exchange.routed.encoded = 10.001, 10.003, 10.004
    assert marks(server_timing(exchange)) == pytest.approx({"pacing": 1.0, "decode": 2.0, "encode": 1.0})

    exchange.admitted.at = 10.010
    exchange.attempts.sent, exchange.attempts.head = 10.011, 10.111
    header = server_timing(exchange, now=10.2)
    assert marks(header) == pytest.approx({"pacing": 1.0, "decode": 2.0, "encode": 1.0, "admit": 6.0,
                                           "upstream": 100.0, "translate": 89.0, "total": 200.0})
    assert header.endswith('request;desc="req-1"')
    assert [part.split(";")[0] for part in header.split(", ")] == ["pacing", "decode", "encode", "admit", "upstream",
                                                                   "translate", "total", "request"]
    exchange.answer.done = 10.15  # a body read to its end: upstream lasts until then
    assert marks(server_timing(exchange, now=10.2))["upstream"] == pytest.approx(139.0)


def test_an_unpaced_request_decodes_from_its_start() -> None:
    exchange = Exchange("r", started=5.0)
    exchange.routed.decoded = 5.002
    assert marks(server_timing(exchange)) == pytest.approx({"decode": 2.0})
