"""The Responses API's answer as the edge writes it: the `response` object, its output items, and the
typed events of its stream (each with its `type` first and a `sequence_number`)."""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from ingress.oai.chat import TextFormat
from ingress.oai.chat_answers import TokenLogprobOut
from ingress.oai.responses import ResponsesToolChoice, TextConfig, ToolDef


class _Out(msgspec.Struct, kw_only=True):
    """UNSET fields are left out; None fields are written as null, as OpenAI does."""


# --- output items ---------------------------------------------------------------------------------


# An output text's token logprobs are written as a chat answer's are (token, logprob, bytes, top_logprobs).
LogprobOut = TokenLogprobOut


class DeltaTopLogprob(_Out, kw_only=True):
    token: str
    logprob: float


class DeltaLogprob(_Out, kw_only=True):
    """A streamed delta's token logprob: OpenAI's delta events carry no bytes."""

    token: str
    logprob: float
    top_logprobs: list[DeltaTopLogprob]


class UrlCitationOut(_Out, kw_only=True, tag_field="type", tag="url_citation"):
    start_index: int
    end_index: int
    title: str
    url: str


class OutputTextOut(_Out, kw_only=True, tag_field="type", tag="output_text"):
    text: str
    annotations: list[UrlCitationOut]
    logprobs: list[LogprobOut] = msgspec.field(default_factory=list)  # required: [] when none were asked


class RefusalOut(_Out, kw_only=True, tag_field="type", tag="refusal"):
    refusal: str


Status = Literal["in_progress", "completed", "incomplete"]


class MessageOut(_Out, kw_only=True, tag_field="type", tag="message"):
    id: str
    status: Status
    role: Literal["assistant"] = "assistant"
    content: list[OutputTextOut | RefusalOut]


class FunctionCallOut(_Out, kw_only=True, tag_field="type", tag="function_call"):
    id: str
    call_id: str
    name: str
    arguments: str
    status: Status
    namespace: str | UnsetType = UNSET  # the call of a tool the request offered inside a namespace


class CustomToolCallOut(_Out, kw_only=True, tag_field="type", tag="custom_tool_call"):
    id: str
    call_id: str
    name: str
    input: str
    namespace: str | UnsetType = UNSET


class SummaryTextOut(_Out, kw_only=True, tag_field="type", tag="summary_text"):
    text: str


class ReasoningTextOut(_Out, kw_only=True, tag_field="type", tag="reasoning_text"):
    text: str


class ReasoningItemOut(_Out, kw_only=True, tag_field="type", tag="reasoning"):
    """The model's reasoning: its text as `content` (as open-weights servers answer it), as the summary
    when one was asked (the service's reasoning text stands as its own summary), and sealed by the edge
    in `encrypted_content` when `include` asks for it, for the client to send back."""

    id: str
    summary: list[SummaryTextOut]
    content: list[ReasoningTextOut]
    encrypted_content: str | UnsetType | None = UNSET
    status: Status | UnsetType = UNSET


class CompactionOut(_Out, kw_only=True, tag_field="type", tag="compaction"):
    """A conversation compacted: the model's summary of it, sealed, for the client to send back in its place."""

    id: str
    encrypted_content: str


OutputItem = MessageOut | FunctionCallOut | CustomToolCallOut | ReasoningItemOut | CompactionOut


# --- the response object --------------------------------------------------------------------------


class InputTokensDetails(_Out, kw_only=True):
    cached_tokens: int = 0
    cache_write_tokens: int = 0  # required by OpenAI's reference: 0 when nothing was written


class OutputTokensDetails(_Out, kw_only=True):
    reasoning_tokens: int = 0


class UsageOut(_Out, kw_only=True):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(_Out, kw_only=True):
    reason: Literal["max_output_tokens", "content_filter"]


class ErrorOut(_Out, kw_only=True):
    code: str
    message: str


class ReasoningOut(_Out, kw_only=True):
    effort: str | None = None
    summary: str | None = None


class ConversationRef(_Out, kw_only=True):
    id: str


TEXT = TextConfig(format=TextFormat())  # the default `text`, echoed when the request gave none


class ResponseObject(_Out, kw_only=True):
    """The whole answer, and the snapshot in lifecycle events. The request's own settings are echoed,
    as OpenAI does; `store`: whether the edge keeps it (ingress/state)."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
    error: ErrorOut | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None
    max_output_tokens: int | None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None = None
    reasoning: ReasoningOut
    store: bool = False
    temperature: float | None
    text: TextConfig
    tool_choice: ResponsesToolChoice
    tools: list[ToolDef]
    top_p: float | None
    truncation: Literal["disabled"] = "disabled"
    usage: UsageOut | None = None
    user: str | None
    metadata: dict[str, str]
    background: bool = False
    max_tool_calls: int | None
    top_logprobs: int | None
    service_tier: str | None = None
    conversation: ConversationRef | UnsetType = UNSET  # the conversation it was added to (ingress/state)


# --- stream events --------------------------------------------------------------------------------


class ResponseEvent(_Out, kw_only=True):
    """response.created, .in_progress, .completed, .incomplete, .failed."""

    type: str
    sequence_number: int
    response: ResponseObject


class ItemEvent(_Out, kw_only=True):
    """response.output_item.added and .done."""

    type: str
    sequence_number: int
    output_index: int
    item: OutputItem


class SummaryPartEvent(_Out, kw_only=True):
    """response.reasoning_summary_part.added and .done."""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    summary_index: int
    part: SummaryTextOut


class ReasoningDeltaEvent(_Out, kw_only=True):
    """response.reasoning_summary_text.delta (with `summary_index`) and response.reasoning_text.delta
    (with `content_index`)."""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    summary_index: int | UnsetType = UNSET
    content_index: int | UnsetType = UNSET
    delta: str


class ReasoningDoneEvent(_Out, kw_only=True):
    """response.reasoning_summary_text.done and response.reasoning_text.done."""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    summary_index: int | UnsetType = UNSET
    content_index: int | UnsetType = UNSET
    text: str


class PartEvent(_Out, kw_only=True):
    """response.content_part.added and .done."""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: OutputTextOut | RefusalOut


class TextDeltaEvent(_Out, kw_only=True):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[DeltaLogprob]


class TextDoneEvent(_Out, kw_only=True):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[DeltaLogprob]


class RefusalDeltaEvent(_Out, kw_only=True):
    type: Literal["response.refusal.delta"] = "response.refusal.delta"
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str


class RefusalDoneEvent(_Out, kw_only=True):
    type: Literal["response.refusal.done"] = "response.refusal.done"
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    refusal: str


class ArgumentsDeltaEvent(_Out, kw_only=True):
    """response.function_call_arguments.delta and response.custom_tool_call_input.delta."""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    delta: str


class ArgumentsDoneEvent(_Out, kw_only=True):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    sequence_number: int
    item_id: str
    output_index: int
    name: str
    arguments: str


class CustomInputDoneEvent(_Out, kw_only=True):
    type: Literal["response.custom_tool_call_input.done"] = "response.custom_tool_call_input.done"
    sequence_number: int
    item_id: str
    output_index: int
    input: str


class ErrorEvent(_Out, kw_only=True):
    """A failure once the stream has begun; response.failed follows it."""

    type: Literal["error"] = "error"
    sequence_number: int
    code: str
    message: str
    param: str | None


StreamEvent = (ResponseEvent | ItemEvent | PartEvent | TextDeltaEvent | TextDoneEvent | RefusalDeltaEvent
               | RefusalDoneEvent | ArgumentsDeltaEvent | ArgumentsDoneEvent | CustomInputDoneEvent | ErrorEvent
               | SummaryPartEvent | ReasoningDeltaEvent | ReasoningDoneEvent)
