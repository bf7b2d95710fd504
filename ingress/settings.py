"""Configuration, read once at start-up into frozen typed settings and passed down."""

from __future__ import annotations

from typing import Literal

import msgspec

DEMO_MODEL = "ingress-demo"


class Timeouts(msgspec.Struct, frozen=True, kw_only=True):
    """Upstream timeouts in seconds. There is no total timeout: long generations must not be cut."""

    connect: float = 5.0
    first_byte: float = 600.0  # until the response head; a non-streamed answer may take minutes
    idle: float = 300.0  # between two reads of a streamed body


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    host: str = "127.0.0.1"
    port: int = 8080
    upstream: str | None = None  # None: start the embedded demo service and use it
    models: tuple[str, ...] = ()  # served models; empty: any model name is forwarded
    max_body_bytes: int = 8 * 1024 * 1024
    max_answer_bytes: int = 64 * 1024 * 1024
    max_frame_bytes: int = 16 * 1024 * 1024
    timeouts: Timeouts = Timeouts()
    builder_pool_size: int = 64
    verify_answers: bool = True  # verify every upstream buffer before reading it
    encoder: Literal["generated", "stock"] = "generated"  # stock: flatbuffers.Builder, for comparison
    log_level: str = "info"
    gc_freeze: bool = True  # gc.freeze() once started (bench/gc_pauses.py measures the effect)
    gc_threshold0: int = 10_000  # above the in-flight working set: bench/gc_pauses.py measured no collections

    def served_models(self) -> tuple[str, ...]:
        if self.models:
            return self.models
        return (DEMO_MODEL,) if self.upstream is None else ()
