"""structlog, configured once: JSON lines on stdout, per-request context in contextvars.

Every line the process writes is one JSON object on that one stream: the standard library's loggers
(aiohttp's, asyncio's, warnings) are rendered by the same chain. No line ever quotes what a client
sent: exceptions are logged as their type and frames, never their message (aiohttp's parser errors
quote the raw request, keys and prompts included), and another library's message is cut where a
`repr` would begin. The access lines are the exception to "written at once": they are buffered and
written once a loop turn (`access`, `flush`), as nginx buffers its access log.
"""

from __future__ import annotations

import asyncio
import atexit
import codecs
import contextlib
import io
import logging
import re
import select
import sys
import threading
import time
import traceback
from types import TracebackType
from typing import Any, BinaryIO, TextIO, cast

import msgspec
import structlog
from structlog.typing import EventDict, WrappedLogger

_encoder = msgspec.json.Encoder()
_FRAMES = 12  # the innermost frames of a logged exception


def _dumps(obj: Any, default: Any = None, **_: Any) -> str:
    # structlog's JSONRenderer passes `default=`; msgspec calls it `enc_hook`.
    return _encoder.encode(obj).decode() if default is None else msgspec.json.encode(obj, enc_hook=default).decode()


def _exception_of(exc_info: Any) -> BaseException | None:
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple):
        return exc_info[1] if len(exc_info) == 3 else None
    return sys.exc_info()[1] if exc_info else None


def describe_exception(exc: BaseException) -> dict[str, Any]:
    """An exception for a log line: its type and where it was raised, never its message (which may
    quote request bytes); its cause's type too."""
    frames = traceback.extract_tb(exc.__traceback__)[-_FRAMES:]
    fields: dict[str, Any] = {
        "exc_type": f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins."),
        "exc_frames": [f"{f.filename.rsplit('/site-packages/', 1)[-1]}:{f.lineno} {f.name}" for f in frames],
    }
    cause = exc.__cause__ or exc.__context__
    if cause is not None:
        fields["exc_cause"] = type(cause).__qualname__
    return fields


def _safe_exc_info(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """In place of structlog's format_exc_info: the exception without its message."""
    exc = _exception_of(event_dict.pop("exc_info", None))
    if exc is not None:
        event_dict.update(describe_exception(exc))
    event_dict.pop("stack_info", None)
    return event_dict


_REPR = re.compile(r"[\n<(\[{'\"]")


def _foreign(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """A standard-library record: its logger's name, and its message up to the first `repr`, which
    may hold request bytes (asyncio's "Exception in callback ...(b'POST ...')", a future's repr)."""
    record = event_dict.get("_record")
    if record is not None:
        event_dict["logger"] = record.name
    event = str(event_dict.get("event", ""))
    event_dict["event"] = _REPR.split(event, 1)[0].strip()[:200] or "(message withheld)"
    return event_dict


def _chain() -> list[Any]:
    return [structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True),
            _safe_exc_info]


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]  # generic only in typeshed
    """One write a line (workers share stdout); a record that cannot be rendered is dropped with a
    line saying so, not a traceback on stderr as logging.Handler.handleError would print."""

    def handleError(self, record: logging.LogRecord) -> None:
        line = {"event": "a log record could not be rendered", "logger": record.name, "level": "error"}
        with contextlib.suppress(Exception):  # nowhere left to report it
            self.stream.write(_dumps(line) + "\n")
            self.flush()


_handler: _Handler | None = None


def _route_stdlib(stream: TextIO, level: int) -> None:
    """The standard library's loggers through the same renderer, onto the same stream."""
    global _handler
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    _handler = _Handler(stream)
    _handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[_foreign, *_chain()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.JSONRenderer(serializer=_dumps)]))
    root.addHandler(_handler)
    root.setLevel(level)
    logging.getLogger("aiohttp.access").disabled = True  # it quotes request lines (query strings hold keys)
    logging.captureWarnings(True)


def configure(level: str = "info", stream: TextIO | None = None, *, cache: bool = True) -> None:
    """`cache=False` lets a later configure() reach loggers already used (tests reconfigure). The access
    lines still buffered go to the stream they were written for, first."""
    global _stream, _min_level, _binary
    flush()
    _stream, _min_level = stream or sys.stdout, logging.getLevelNamesMapping()[level.upper()]
    _binary = _binary_of(_stream)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *_chain(),
            structlog.processors.JSONRenderer(serializer=_dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_min_level),
        logger_factory=structlog.WriteLoggerFactory(_stream),  # one write per line: workers share stdout
        cache_logger_on_first_use=cache,
    )
    _route_stdlib(_stream, _min_level)


def capture_uncaught() -> None:
    """A serving process's last resorts write JSON lines too: an uncaught exception in the main
    thread or another, and an exception Python could not raise ("Exception ignored in ...")."""
    crash = get_logger("ingress.crash")

    def excepthook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        crash.critical("uncaught exception", **describe_exception(exc.with_traceback(tb)))

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            crash.error("uncaught exception in a thread", thread=getattr(args.thread, "name", None),
                        **describe_exception(args.exc_value))

    def unraisable_hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        crash.error("exception ignored", **(describe_exception(exc) if exc is not None else {}))

    sys.excepthook = excepthook
    threading.excepthook = thread_hook
    sys.unraisablehook = unraisable_hook


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    """A logger of the chain `configure` sets up (structlog's filtering bound logger)."""
    return cast(structlog.typing.FilteringBoundLogger, structlog.get_logger(name))


def _binary_of(stream: TextIO) -> BinaryIO | None:
    """The UTF-8 byte stream under `stream`, if it has one: every writer here writes a whole line and flushes
    it, so nothing waits in the text layer and the access line can skip it (no decode, no encode again)."""
    buffer = getattr(stream, "buffer", None)
    encoding = codecs.lookup(getattr(stream, "encoding", None) or "ascii").name
    return cast(BinaryIO, buffer) if isinstance(buffer, io.BufferedIOBase) and encoding == "utf-8" else None


_stream: TextIO = sys.stdout
_binary: BinaryIO | None = None
_min_level = logging.INFO


_second, _prefix = -1, ""


def timestamp(now_ns: int | None = None) -> str:
    """Now, as structlog's TimeStamper(fmt="iso", utc=True) writes it (`datetime.now(UTC).isoformat()` with
    a Z): the date and time of day formatted once a second, not once a line (a third of the cost)."""
    global _second, _prefix
    second, micro = divmod((time.time_ns() if now_ns is None else now_ns) // 1000, 1_000_000)
    if second != _second:
        _second, _prefix = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_prefix}.{micro:06d}Z" if micro else f"{_prefix}Z"


PIPE_BUF: int = getattr(select, "PIPE_BUF", 512)  # a pipe's writes up to this many bytes are never interleaved
_lines: list[bytes] = []  # the access lines of this loop turn, encoded
_flush_on: asyncio.AbstractEventLoop | None = None  # the loop whose next turn writes them


def access(level: int, fields: dict[str, Any], request_id: str) -> None:
    """The one line each request writes, exactly as the structlog chain above renders it (its keys in
    the same order; tests compare the two), without the chain: at ~10 Python calls a processor, it
    cost the edge ~35 µs of CPU a request, more than decoding and routing the request together.

    On a running loop the line is buffered and the turn's lines written together by `flush` at the
    loop's next turn (one write and flush a turn, not one a request); without a loop it is written at
    once. So an access line may reach the stream a few microseconds after a line another logger wrote
    in the same turn, and a worker killed with SIGKILL loses the lines of its last turn. A drain's end,
    `configure` and the process's exit write what is buffered."""
    global _flush_on
    if level < _min_level:
        return
    fields["event"] = "request"
    fields["request_id"] = request_id
    fields["level"] = logging.getLevelName(level).lower()
    fields["timestamp"] = timestamp()
    _lines.append(_encoder.encode(fields) + b"\n")
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        flush()
        return
    if loop is not _flush_on:  # the turn's first line (or a loop that ended before its turn came)
        loop.call_soon(flush)
        _flush_on = loop


def flush() -> None:
    """Write the buffered access lines: whole lines, in order, in writes of at most PIPE_BUF bytes (workers
    share stdout, often a pipe, where a larger write may interleave with another worker's); a line longer
    than that alone. A failed write raises, as a line's write did before the buffering, and loses the
    lines of that flush; the next line schedules a flush of its own."""
    global _lines, _flush_on
    lines, _lines, _flush_on = _lines, [], None
    chunk: list[bytes] = []
    size = 0
    for line in lines:
        if chunk and size + len(line) > PIPE_BUF:
            _write(b"".join(chunk))
            chunk, size = [], 0
        chunk.append(line)
        size += len(line)
    if chunk:
        _write(b"".join(chunk))


def _write(data: bytes) -> None:
    if _binary is not None:
        _binary.write(data)
        _binary.flush()
    else:
        _stream.write(data.decode())
        _stream.flush()


@atexit.register
def _flush_at_exit() -> None:
    with contextlib.suppress(OSError, ValueError):  # stdout closed or gone: nowhere left to write them
        flush()
