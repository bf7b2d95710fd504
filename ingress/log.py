"""structlog, configured once: JSON lines on stdout, per-request context in contextvars."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import msgspec
import structlog

_encoder = msgspec.json.Encoder()


def _dumps(obj: Any, default: Any = None, **_: Any) -> str:
    # structlog's JSONRenderer passes `default=`; msgspec calls it `enc_hook`.
    return _encoder.encode(obj).decode() if default is None else msgspec.json.encode(obj, enc_hook=default).decode()


def configure(level: str = "info", stream: TextIO | None = None, *, cache: bool = True) -> None:
    """`cache=False` lets a later configure() reach loggers already used (tests reconfigure)."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.WriteLoggerFactory(stream or sys.stdout),  # one write per line: workers share stdout
        cache_logger_on_first_use=cache,
    )


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
