"""Server-sent events (ingress/bridges/eventstream.py): the standard's line and field rules, in any split."""

from __future__ import annotations

import pytest

from ingress.bridges.eventstream import MAX_EVENT_BYTES, Event, EventStreamError, EventStreamParser


def parse(*pieces: bytes) -> list[Event]:
    parser = EventStreamParser()
    events = [e for p in pieces for e in parser.feed(p)]
    return events + parser.finish()


@pytest.mark.parametrize("body", [
    b"data: a\n\ndata: b\n\n", b"data: a\r\n\r\ndata: b\r\n\r\n", b"data: a\r\rdata: b\r\r",
    b"\xef\xbb\xbfdata: a\n\ndata:b\n\n", b": ping\n\ndata: a\nid: 1\nretry: 5\n\n: comment\ndata: b\n\n",
])
def test_line_endings_comments_and_ignored_fields(body: bytes) -> None:
    assert parse(body) == [Event("message", b"a"), Event("message", b"b")]
    assert parse(*[body[i:i + 1] for i in range(len(body))]) == [Event("message", b"a"), Event("message", b"b")]


def test_a_cr_at_the_end_of_a_feed_waits_for_its_lf() -> None:
    parser = EventStreamParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n\r") == []
    assert parser.feed(b"\n") == [Event("message", b"a")]


def test_multi_line_data_event_names_and_llamacpps_error_line() -> None:
    assert parse(b"event: delta\ndata: {\ndata:  \"a\": 1}\n\n") == [Event("delta", b'{\n "a": 1}')]
    assert parse(b'error: {"code": 500}\n\n') == [Event("error", b'{"code": 500}')]


def test_the_end_of_the_body_dispatches_a_pending_event() -> None:
    assert parse(b"data: [DONE]") == [Event("message", b"[DONE]")]
    assert parse(b"data: x\n") == [Event("message", b"x")]
    assert parse(b"") == []


def test_an_endless_line_is_refused() -> None:
    with pytest.raises(EventStreamError):
        EventStreamParser().feed(b"data: " + b"x" * (MAX_EVENT_BYTES + 1))
