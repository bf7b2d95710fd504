"""Plain-data forms of the answer tables, for internal services that write them and for tests; and the
generated data classes of a request, which a service reads a whole request into and the edge builds one
from (ingress/encoding/requests.py).

Where a table's service-facing form is the table itself, it is the generated data class (one
definition: the schema): `Usage`, `ToolCallDelta`, `TokenLogprob`, `TopLogprob`, `Annotation`,
`PassportData`. The others differ on purpose:
enums as their OpenAI names ("assistant", "stop") instead of numbers, a choice's message flattened
into it, and the fields a service must send required (see `ingress.wire.decode`, `encode`).
"""

from __future__ import annotations

import msgspec

from ingress.wire._generated.encoders import (
    AnnotationData,
    TokenLogprobData,
    ToolCallDeltaData,
    TopLogprobData,
    UsageData,
)
from ingress.wire._generated.encoders import CompletionRequestData as CompletionRequestData
from ingress.wire._generated.encoders import ContentPartData as ContentPartData
from ingress.wire._generated.encoders import FunctionCallData as FunctionCallData
from ingress.wire._generated.encoders import KeyValueData as KeyValueData
from ingress.wire._generated.encoders import MessageData as MessageData
from ingress.wire._generated.encoders import PassportData as PassportData
from ingress.wire._generated.encoders import PromptCacheBreakpointData as PromptCacheBreakpointData
from ingress.wire._generated.encoders import PromptInputData as PromptInputData
from ingress.wire._generated.encoders import ResponseFormatData as ResponseFormatData
from ingress.wire._generated.encoders import ToolCallData as ToolCallData

Usage = UsageData
ToolCallDelta = ToolCallDeltaData
TokenLogprob = TokenLogprobData  # a logprob is a float32 on the wire: 0.1 reads back as 0.10000000149
TopLogprob = TopLogprobData
Annotation = AnnotationData  # type "url_citation" (absent: the same)


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
    logprobs: list[TokenLogprob] | None = None  # None: none asked for; [] asked for, no content tokens
    refusal_logprobs: list[TokenLogprob] | None = None
    annotations: list[Annotation] = []
    reasoning: str | None = None  # the model's reasoning text (vLLM's `reasoning_content`, Anthropic's thinking)
    signature: str | None = None  # the reasoning's signature (Anthropic's thinking block's), opaque
    redacted_thinking: list[str] = []  # reasoning the provider redacted: each block's opaque data, in order
    stop_sequence: str | None = None  # the stop sequence that ended the answer


class Response(msgspec.Struct, kw_only=True):
    id: str
    model: str
    created: int
    choices: list[Choice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
    service_tier: str | None = None


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
    logprobs: list[TokenLogprob] | None = None  # this delta's content tokens
    refusal_logprobs: list[TokenLogprob] | None = None
    service_tier: str | None = None
    reasoning: str | None = None  # this delta's reasoning text, never part of `content`
    signature: str | None = None  # the signature of the reasoning streamed so far, which is then whole
    redacted_thinking: list[str] = []  # redacted reasoning blocks, each whole: their opaque data
    stop_sequence: str | None = None  # the stop sequence that ended the answer, with its finish_reason


class ErrorInfo(msgspec.Struct, kw_only=True):
    status: int
    message: str
    type: str = "server_error"
    code: str | None = None
    param: str | None = None
    # Seconds, for the service's HTTP answer's Retry-After header: not in the Error table (a framed
    # error inside a stream has no header to carry it), so a decoded ErrorInfo never has it.
    retry_after: int | None = None
