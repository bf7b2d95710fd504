"""One JSON log line per request, with the facts operators need and never prompt text or keys."""

from __future__ import annotations

import asyncio
import datetime
import io
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import structlog
from aiohttp import web
from logcapture import lines
from metric_values import sample_value

from ingress import log
from ingress.log import access, configure
from ingress.serve.app import create_app, serve_app
from ingress.settings import Settings

SECRET_PROMPT = "the launch code is swordfish-7731"
API_KEY = "sk-live-0123456789abcdef"


@pytest.mark.parametrize("stream", [False, True])
async def test_one_line_per_request_without_secrets(log_stream: io.StringIO, stream: bool) -> None:
    body = {"model": "ingress-demo", "messages": [{"role": "user", "content": SECRET_PROMPT}], "stream": stream}
    async with serve_app(create_app(Settings()), "127.0.0.1", 0) as url, aiohttp.ClientSession() as http:
        headers = {"Authorization": f"Bearer {API_KEY}", "x-request-id": "req-log-1"}
        async with http.post(f"{url}/v1/chat/completions", json=body, headers=headers) as response:
            assert response.status == 200
            text = await response.text()
            assert "swordfish" in text  # the demo echoes it: the secret did travel, only not to the log

    raw = log_stream.getvalue()
    assert "swordfish" not in raw
    assert API_KEY not in raw
    requests = [line for line in lines(log_stream) if line["event"] == "request"]
    assert len(requests) == 1
    line = requests[0]
    assert line["request_id"] == "req-log-1"
    assert line["model"] == "ingress-demo"
    assert line["status"] == 200 and line["outcome"] == "ok"
    assert line["stream"] is stream
    assert str(line["upstream"]).startswith("unix:/")  # the embedded demo, on its own Unix socket
    assert isinstance(line["duration_ms"], float) and isinstance(line["ttfb_ms"], float)
    assert 0 < line["ttfb_ms"] <= line["duration_ms"]
    assert line["prompt_tokens"] == len(SECRET_PROMPT.split())
    assert line["completion_tokens"] == len(SECRET_PROMPT.split())


async def test_a_request_is_counted_and_logged_before_its_answer_is_sent(log_stream: io.StringIO) -> None:
    """So a worker that stops the moment after answering leaves no answered request uncounted or unlogged
    (counts folded and lines written by the drain's end; SIGKILL may lose the last second's)."""
    served = ("ingress_requests_total", {"route": "/v1/chat/completions", "model": "ingress-demo", "status": "200"})
    at_send: list[tuple[float, list[str]]] = []

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        logged = [str(line["request_id"]) for line in lines(log_stream) if line["event"] == "request"]
        at_send.append((sample_value(*served) or 0.0, logged))

    app = create_app(Settings())
    app.on_response_prepare.append(on_prepare)
    body = {"model": "ingress-demo", "messages": [{"role": "user", "content": "count me first"}]}
    async with serve_app(app, "127.0.0.1", 0) as url, aiohttp.ClientSession() as http:
        for n in range(2):
            before = sample_value(*served) or 0.0
            async with http.post(f"{url}/v1/chat/completions", json=body, headers={"x-request-id": f"first-{n}"}) as r:
                assert r.status == 200
            counted, logged = at_send[-1]
            assert counted == before + 1
            assert logged[-1] == f"first-{n}"
    assert len(at_send) == 2


async def test_error_lines_carry_the_error_code(log_stream: io.StringIO) -> None:
    async with (
        serve_app(create_app(Settings()), "127.0.0.1", 0) as url, aiohttp.ClientSession() as http,
        http.post(f"{url}/v1/chat/completions", data=b'{"model": 1}') as response,
    ):
        assert response.status == 400
    (line,) = [line for line in lines(log_stream) if line["event"] == "request"]
    assert line["status"] == 400
    assert line["error_code"] == "invalid_request"
    assert line["level"] == "info"


@pytest.mark.parametrize("level", [logging.INFO, logging.WARNING, logging.ERROR])
def test_the_access_line_is_what_structlog_would_write(log_stream: io.StringIO, level: int) -> None:
    fields = {"method": "POST", "path": "/v1/chat/completions", "status": 200, "outcome": "ok",
              "duration_ms": 1.25, "model": "ingress-demo", "stream": False, "upstream": None,
              "error_detail": 'KeyError: "é"'}
    structlog.contextvars.bind_contextvars(request_id="req-1")
    try:
        structlog.get_logger("ingress.edge").log(level, "request", **fields)
    finally:
        structlog.contextvars.unbind_contextvars("request_id")
    access(level, dict(fields), "req-1")
    via_structlog, direct = (json.loads(line) for line in log_stream.getvalue().splitlines())
    for line in (via_structlog, direct):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", str(line.pop("timestamp")))
    assert list(direct.items()) == list(via_structlog.items())


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_the_access_line_keeps_its_place_among_the_other_lines_on_a_byte_stream(encoding: str) -> None:
    """On a UTF-8 text stream over bytes (stdout), the access line goes to the bytes directly; the lines the
    structlog chain and the standard library's loggers write around it stay in order, each whole. A stream of
    another encoding gets the line through its text layer, as any other writer's."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding=encoding, errors="backslashreplace", write_through=False)
    configure("info", stream, cache=False)
    try:
        structlog.get_logger("ingress.edge").info("before")
        access(logging.INFO, {"status": 200, "model": "modèle"}, "r1")
        logging.getLogger("aiohttp.server").warning("between")
        access(logging.WARNING, {"status": 503}, "r2")
        structlog.get_logger("ingress.edge").info("after")
        assert (log._binary is not None) == (encoding == "utf-8")
    finally:
        structlog.reset_defaults()
        configure("info", cache=False)
    stream.flush()
    parsed = [json.loads(line) for line in raw.getvalue().decode(encoding).splitlines()]
    assert [line["event"] for line in parsed] == ["before", "request", "between", "request", "after"]
    assert parsed[1]["model"] == "modèle"
    assert [line.get("request_id") for line in parsed if line["event"] == "request"] == ["r1", "r2"]


def test_the_access_lines_timestamp_is_the_one_structlog_writes() -> None:
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    seconds = [0, 951_782_399, 951_782_400, 1_796_083_199, 1_796_083_200, 4_102_444_799]  # 2000-02-29, a year's end
    for second in seconds:
        for micro in (0, 1, 999_999, 123_456):
            for ns in (0, 999):  # the nanoseconds below a microsecond are dropped, as datetime.now drops them
                now_ns = (second * 1_000_000 + micro) * 1000 + ns
                expected = (epoch + datetime.timedelta(microseconds=now_ns // 1000)).isoformat().replace("+00:00", "Z")
                assert log.timestamp(now_ns) == expected
    before = datetime.datetime.now(datetime.UTC)
    now = datetime.datetime.fromisoformat(log.timestamp())
    assert before - datetime.timedelta(seconds=1) <= now <= datetime.datetime.now(datetime.UTC)


def test_the_access_line_follows_the_configured_level() -> None:
    stream = io.StringIO()
    configure("warning", stream, cache=False)
    try:
        access(logging.INFO, {"status": 200}, "r")
        access(logging.WARNING, {"status": 503}, "r")
    finally:
        structlog.reset_defaults()
    assert [json.loads(line)["status"] for line in stream.getvalue().splitlines()] == [503]


# --- every line is JSON, and none quotes what a client sent -------------------------------------


def test_a_library_logging_an_exception_gets_its_type_not_its_message(log_stream: io.StringIO) -> None:
    try:
        raise ValueError(f"Bad status line: b'Authorization: Bearer {API_KEY}'")
    except ValueError:
        logging.getLogger("aiohttp.server").exception("Error handling request from %s", "127.0.0.1")

    (line,) = lines(log_stream)
    assert API_KEY not in log_stream.getvalue()
    assert line["event"] == "Error handling request from 127.0.0.1"
    assert (line["logger"], line["level"], line["exc_type"]) == ("aiohttp.server", "error", "ValueError")
    assert str(line["exc_frames"][-1]).endswith("test_a_library_logging_an_exception_gets_its_type_not_its_message")


async def test_asyncio_s_reprs_of_callbacks_and_their_arguments_are_cut(log_stream: io.StringIO) -> None:
    def data_received(data: bytes) -> None:
        raise ValueError(data)

    asyncio.get_running_loop().call_soon(data_received, f"POST / HTTP/1.1\r\nAuthorization: {API_KEY}".encode())
    await asyncio.sleep(0)

    raw = log_stream.getvalue()
    assert API_KEY not in raw and "Authorization" not in raw
    (line,) = lines(log_stream)
    assert line["logger"] == "asyncio" and line["exc_type"] == "ValueError"
    assert str(line["event"]).startswith("Exception in callback"), line


def test_our_own_exception_lines_carry_no_message_either(log_stream: io.StringIO) -> None:
    try:
        raise KeyError(SECRET_PROMPT)
    except KeyError:
        structlog.get_logger("ingress.edge").exception("unhandled", path="/v1/chat/completions")

    (line,) = lines(log_stream)
    assert "swordfish" not in log_stream.getvalue()
    assert (line["event"], line["exc_type"], line["path"]) == ("unhandled", "KeyError", "/v1/chat/completions")


def test_a_record_that_cannot_be_formatted_is_a_json_line_too(log_stream: io.StringIO,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    record = logging.makeLogRecord({"name": "somewhere", "msg": "%d items", "args": ("not a number",),
                                    "levelno": logging.ERROR, "levelname": "ERROR"})
    assert log._handler is not None
    log._handler.handle(record)  # the handler alone: pytest's own capture raises on such a record

    assert capsys.readouterr().err == ""
    (line,) = lines(log_stream)
    assert line == {"event": "a log record could not be rendered", "logger": "somewhere", "level": "error"}


# --- the access lines, written once a loop turn -------------------------------------------------


class _Writes(io.RawIOBase):
    """A byte stream that keeps each write it is given, as the pipe under stdout would see them."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.writes.append(bytes(data))
        return len(data)


class _Closed(io.StringIO):
    """A stream whose every write fails, as a write to a pipe nobody reads any more does."""

    def write(self, text: str) -> int:
        raise BrokenPipeError


@pytest.fixture
def writes() -> Iterator[list[bytes]]:
    """The writes the process makes to a UTF-8 stdout over a pipe, each as the pipe receives it."""
    raw = _Writes()
    configure("info", io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8"), cache=False)
    try:
        yield raw.writes
    finally:
        structlog.reset_defaults()
        configure("info", cache=False)


def _request_ids(writes: list[bytes]) -> list[str]:
    return [json.loads(line)["request_id"] for write in writes for line in write.splitlines()]


async def test_a_turn_s_access_lines_are_written_at_its_end_in_whole_lines_of_at_most_pipe_buf(
        writes: list[bytes]) -> None:
    sent = [f"r{n}" for n in range(50)]
    for n, request_id in enumerate(sent):
        access(logging.INFO, {"status": 200, "path": "/v1/chat/completions", "model": "m" * (n * 7 % 90)}, request_id)
    structlog.get_logger("ingress.edge").info("another logger's line")
    assert [json.loads(write)["event"] for write in writes] == ["another logger's line"]  # written at once
    await asyncio.sleep(0)  # the turn ends

    lines_written = writes[1:]
    assert _request_ids(lines_written) == sent
    assert sum(map(len, lines_written)) > 2 * log.PIPE_BUF and len(lines_written) == 3  # not one a line
    for write, after in zip(lines_written, [*lines_written[1:], b""], strict=True):
        assert write.endswith(b"\n") and len(write) <= log.PIPE_BUF
        if after:  # each write as full as whole lines let it be
            assert len(write) + len(after.split(b"\n", 1)[0]) + 1 > log.PIPE_BUF
    await asyncio.sleep(0)
    assert len(writes) == 4  # nothing written twice


async def test_an_access_line_longer_than_pipe_buf_goes_alone(writes: list[bytes]) -> None:
    access(logging.INFO, {"status": 200}, "short-1")
    access(logging.INFO, {"status": 200, "model": "x" * log.PIPE_BUF}, "long")
    access(logging.INFO, {"status": 200}, "short-2")
    await asyncio.sleep(0)
    assert [_request_ids([write]) for write in writes] == [["short-1"], ["long"], ["short-2"]]
    assert len(writes[1]) > log.PIPE_BUF


def test_without_a_running_loop_the_access_line_is_written_at_once(writes: list[bytes]) -> None:
    access(logging.INFO, {"status": 200}, "r1")
    assert _request_ids(writes) == ["r1"]
    access(logging.INFO, {"status": 200}, "r2")
    assert _request_ids(writes) == ["r1", "r2"] and len(writes) == 2


async def test_reconfiguring_writes_the_buffered_lines_to_the_stream_they_were_written_for(
        writes: list[bytes]) -> None:
    access(logging.INFO, {"status": 200}, "before")
    later = io.StringIO()
    configure("info", later, cache=False)
    access(logging.INFO, {"status": 200}, "after")
    await asyncio.sleep(0)
    assert _request_ids(writes) == ["before"]
    assert [json.loads(line)["request_id"] for line in later.getvalue().splitlines()] == ["after"]


def test_lines_left_by_a_loop_that_stopped_before_its_next_turn_are_written_with_the_next() -> None:
    stream = io.StringIO()
    configure("info", stream, cache=False)
    try:
        loop = asyncio.new_event_loop()
        loop.call_soon(access, logging.INFO, {"status": 200}, "last-turn")
        loop.call_soon(loop.stop)
        loop.run_forever()  # stopped: the flush it was given never runs
        loop.close()
        assert stream.getvalue() == ""

        async def next_loop() -> None:
            access(logging.INFO, {"status": 200}, "next-loop")
            assert stream.getvalue() == ""  # buffered: on this loop, for its next turn
            await asyncio.sleep(0)

        asyncio.run(next_loop())
    finally:
        structlog.reset_defaults()
    assert [json.loads(line)["request_id"] for line in stream.getvalue().splitlines()] == ["last-turn", "next-loop"]


def test_lines_buffered_when_the_process_exits_are_written() -> None:
    script = ("import asyncio, logging; from ingress.log import access, configure; configure()\n"
              "loop = asyncio.new_event_loop(); loop.call_soon(access, logging.INFO, {'status': 200}, 'at-exit')\n"
              "loop.call_soon(loop.stop); loop.run_forever()\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True, timeout=30).stdout
    assert [json.loads(line)["request_id"] for line in out.splitlines()] == ["at-exit"]


async def test_a_failed_write_loses_its_turn_s_lines_only() -> None:
    """As a line's failed write did before the buffering: it raises (here into the loop's exception
    handler, which the loop survives), that turn's lines are lost, and the next turn's are written."""
    loop = asyncio.get_running_loop()
    raised: list[BaseException | None] = []
    loop.set_exception_handler(lambda _, context: raised.append(context.get("exception")))
    configure("info", _Closed(), cache=False)
    fixed = io.StringIO()
    try:
        access(logging.INFO, {"status": 200}, "lost")
        await asyncio.sleep(0)
        assert [type(exc) for exc in raised] == [BrokenPipeError]
        configure("info", fixed, cache=False)
        access(logging.INFO, {"status": 200}, "kept")
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
        structlog.reset_defaults()
    assert [json.loads(line)["request_id"] for line in fixed.getvalue().splitlines()] == ["kept"]
    assert len(raised) == 1
