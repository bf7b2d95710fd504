"""Plain-data forms of the answer tables, for internal services that write them and for tests; and the
generated data classes a service reads a whole request into."""

from __future__ import annotations

import msgspec

from ingress.wire._generated.encoders import CompletionRequestData as CompletionRequestData
from ingress.wire._generated.encoders import MessageData as MessageData

STOP, LENGTH, TOOL_CALLS, CONTENT_FILTER = "stop", "length", "tool_calls", "content_filter"


class Usage(msgspec.Struct, kw_only=True, omit_defaults=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0


class FunctionCall(msgspec.Struct, kw_only=True):
    id: str
    name: str
    arguments: str
    type: str = "function"


class Choice(msgspec.Struct, kw_only=True):
    index: int = 0
    content: str | None = None
    tool_calls: list[FunctionCall] = []
    refusal: str | None = None
    finish_reason: str | None = None


class Response(msgspec.Struct, kw_only=True):
    id: str
    model: str
    created: int
    choices: list[Choice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class ToolCallDelta(msgspec.Struct, kw_only=True):
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str | None = None
    type: str | None = None


class Chunk(msgspec.Struct, kw_only=True):
    sequence: int
    choice_index: int = 0
    id: str | None = None
    model: str | None = None
    created: int | None = None
    role: str | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] = []
    refusal: str | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    system_fingerprint: str | None = None
    done: bool = False


class ErrorInfo(msgspec.Struct, kw_only=True):
    status: int
    message: str
    type: str = "server_error"
    code: str | None = None
    param: str | None = None
