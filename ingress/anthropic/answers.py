"""Anthropic's Messages API answer as the edge writes it: the `message` object, the events of its stream,
the error envelope, and the error type and status each of our errors is answered with."""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from ingress.errors import IngressError, Overloaded, ShuttingDown, UpstreamAnswered


class _Out(msgspec.Struct, kw_only=True, gc=False):
    """UNSET fields are left out; None fields are written as null, as Anthropic does. `type` comes first.
    Trees without cycles: not tracked by the garbage collector."""


# --- content blocks --------------------------------------------------------------------------------


class WebSearchCitation(_Out, kw_only=True):
    """A url citation of the contract (`Annotation`): Anthropic's nearest, a web search result's."""

    type: Literal["web_search_result_location"] = "web_search_result_location"
    cited_text: str
    url: str
    title: str | None
    encrypted_index: str = ""  # Anthropic's handle on its own search index: a service has none to give


Citation = WebSearchCitation


class TextBlock(_Out, kw_only=True):
    type: Literal["text"] = "text"
    text: str
    citations: list[Citation] | UnsetType = UNSET


class ThinkingBlock(_Out, kw_only=True):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str  # opaque; "" when the service signed nothing


class RedactedThinkingBlock(_Out, kw_only=True):
    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


EMPTY_INPUT = msgspec.Raw(b"{}")


class ToolUseBlock(_Out, kw_only=True):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: msgspec.Raw = EMPTY_INPUT  # a JSON object, as the model wrote it; `{}` at a stream's block start


ContentBlock = TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock


# --- the message -----------------------------------------------------------------------------------

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"]
ServiceTier = Literal["standard", "priority", "batch"]


class ServerToolUse(_Out, kw_only=True):
    web_search_requests: int
    web_fetch_requests: int


class Usage(_Out, kw_only=True):
    """`input_tokens` excludes the prompt's tokens read from or written to a cache: the three add up to
    the prompt."""

    input_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    output_tokens: int
    server_tool_use: ServerToolUse | UnsetType = UNSET  # when the service counted server tools' requests
    service_tier: ServiceTier | UnsetType = UNSET


class Message(_Out, kw_only=True):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ContentBlock]
    stop_reason: StopReason | None  # null only in a stream's message_start
    stop_sequence: str | None
    usage: Usage


# --- stream events ---------------------------------------------------------------------------------


class MessageStart(_Out, kw_only=True):
    type: Literal["message_start"] = "message_start"
    message: Message


class ContentBlockStart(_Out, kw_only=True):
    type: Literal["content_block_start"] = "content_block_start"
    index: int
    content_block: ContentBlock


class TextDelta(_Out, kw_only=True):
    type: Literal["text_delta"] = "text_delta"
    text: str


class InputJsonDelta(_Out, kw_only=True):
    type: Literal["input_json_delta"] = "input_json_delta"
    partial_json: str


class ThinkingDelta(_Out, kw_only=True):
    type: Literal["thinking_delta"] = "thinking_delta"
    thinking: str


class SignatureDelta(_Out, kw_only=True):
    type: Literal["signature_delta"] = "signature_delta"
    signature: str


class CitationsDelta(_Out, kw_only=True):
    type: Literal["citations_delta"] = "citations_delta"
    citation: Citation


BlockDelta = TextDelta | InputJsonDelta | ThinkingDelta | SignatureDelta | CitationsDelta


class ContentBlockDelta(_Out, kw_only=True):
    type: Literal["content_block_delta"] = "content_block_delta"
    index: int
    delta: BlockDelta


class ContentBlockStop(_Out, kw_only=True):
    type: Literal["content_block_stop"] = "content_block_stop"
    index: int


class MessageDeltaBody(_Out, kw_only=True):
    stop_reason: StopReason | None
    stop_sequence: str | None


class DeltaUsage(_Out, kw_only=True):
    """A message_delta's counts, cumulative: each replaces what came before; those left out stand."""

    input_tokens: int | UnsetType = UNSET
    cache_creation_input_tokens: int | UnsetType = UNSET
    cache_read_input_tokens: int | UnsetType = UNSET
    output_tokens: int
    server_tool_use: ServerToolUse | UnsetType = UNSET


class MessageDelta(_Out, kw_only=True):
    type: Literal["message_delta"] = "message_delta"
    delta: MessageDeltaBody
    usage: DeltaUsage


class MessageStop(_Out, kw_only=True):
    type: Literal["message_stop"] = "message_stop"


class Ping(_Out, kw_only=True):
    type: Literal["ping"] = "ping"


# --- errors ----------------------------------------------------------------------------------------

ErrorType = Literal["invalid_request_error", "authentication_error", "permission_error", "not_found_error",
                    "request_too_large", "rate_limit_error", "api_error", "timeout_error", "overloaded_error"]


class ErrorObject(_Out, kw_only=True):
    type: ErrorType
    message: str


class ErrorEnvelope(_Out, kw_only=True):
    """An error answer's body, and the `error` event that ends a stream that failed after it began."""

    type: Literal["error"] = "error"
    error: ErrorObject
    request_id: str | UnsetType = UNSET


Event = (MessageStart | ContentBlockStart | ContentBlockDelta | ContentBlockStop | MessageDelta | MessageStop
         | Ping | ErrorEnvelope)


_BY_STATUS: dict[int, ErrorType] = {400: "invalid_request_error", 401: "authentication_error",
                                    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                                    429: "rate_limit_error"}
OVERLOADED = 529  # Anthropic's status for overloaded_error; its SDK names it OverloadedError
_OVERLOADED_CODES = frozenset({"overloaded", "upstream_overloaded"})


def error_kind(exc: IngressError) -> tuple[ErrorType, int]:
    """The Anthropic error type and HTTP status an error is answered with. The Retry-After header is the
    caller's to write from `exc.retry_after`, as for OpenAI's shape: it keeps its meaning in both.

    - overloaded_error 529: no capacity now, retry later. Ours when every endpoint and the queue are full
      (Overloaded) or this process is draining (ShuttingDown: another will take the retry); a service's
      when it answered 503 or 529, or named itself overloaded (the bridges answer an overloaded provider
      as 503 `upstream_overloaded`).
    - timeout_error 504: Anthropic's own pairing for a request that timed out while processing (the
      service did not answer in time, or answered 504).
    - api_error for every other 5xx, its status kept: 500 is ours, 502 says the model service failed or
      broke the contract, 503 that the limit store could not answer. Anthropic lists api_error with 500
      only, but its SDK treats (and retries) every 5xx alike, while the status is what load balancers,
      retry policies and logs key on: a 502 should not read as the edge's own bug.
    - a 4xx by its status; one Anthropic has no type for (408, 415, 409...) is invalid_request_error with
      its status kept, as Anthropic documents for "other 4XX status codes".
    """
    status = exc.status
    if isinstance(exc, Overloaded | ShuttingDown):
        return "overloaded_error", OVERLOADED
    if isinstance(exc, UpstreamAnswered) and (status in (503, OVERLOADED) or exc.code in _OVERLOADED_CODES
                                              or exc.type == "overloaded_error"):
        return "overloaded_error", OVERLOADED
    if status == 504:
        return "timeout_error", 504
    if status >= 500:
        return "api_error", status
    return _BY_STATUS.get(status, "invalid_request_error"), status


def error_envelope(exc: IngressError, *, request_id: str | None = None) -> ErrorEnvelope:
    """`{"type": "error", "error": {"type", "message"}, "request_id"}`; its status is `error_kind`'s."""
    kind, _ = error_kind(exc)
    return ErrorEnvelope(error=ErrorObject(type=kind, message=exc.message),
                         request_id=request_id if request_id is not None else UNSET)


class TokenCount(_Out, kw_only=True):
    """`POST /v1/messages/count_tokens`'s answer."""

    input_tokens: int
