"""Anthropic's Messages API request (`POST /v1/messages`), strictly typed (decoded by messages_codec.py).

Every field the `anthropic` SDK can send is a field here (tests/unit/anthropic/test_messages.py walks
the SDK's own types to keep it so). What the edge or a bridge reads is typed and bounded; JSON that
only Anthropic reads (a server tool's versioned settings, `context_management`, `container`, the inside
of a server tool's result) is kept as `msgspec.Raw`, present when `len(raw) > 0`, and nested at most
MAX_NESTING deep. Unknown fields are refused, as Anthropic refuses them; an unknown top-level field is
carried aside instead when the client sent an `anthropic-beta` header. Refusals name the field as
Anthropic does: `messages.0.content.1.source.media_type`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Raw

from ingress.anthropic.blocks import (
    CacheControl,
    CallerKind,
    ContentBlock,
    Count,
    Nonempty,
    Strict,
    SystemBlock,
    TextBlock,
    ToolName,
    Unit,
)
from ingress.oai.chat import INT32_MAX, NO_JSON, ModelName

Effort = Literal["low", "medium", "high", "xhigh", "max"]
ThinkingDisplay = Literal["summarized", "omitted", "updates"]
MIN_THINKING_BUDGET = 1024
# Anthropic's own tools, by their `type`: a family and the date of its version (`web_search_20250305`);
# tool search also without a date.
SERVER_TOOL_FAMILIES = ("advisor", "bash", "browser_toolset", "code_execution", "computer", "computer_toolset",
                        "memory", "text_editor", "tool_search_tool_bm25", "tool_search_tool_regex",
                        "web_fetch", "web_search")
SERVER_TOOL_TYPE = re.compile(rf"(?:{'|'.join(SERVER_TOOL_FAMILIES)})_[0-9]{{8}}"
                          r"|tool_search_tool_(?:bm25|regex)|mcp_toolset")


# --- messages -------------------------------------------------------------------------------------


class _Message(Strict, tag_field="role"):
    pass


class UserMessage(_Message, tag="user"):
    content: str | list[ContentBlock]


class AssistantMessage(_Message, tag="assistant"):
    content: str | list[ContentBlock]


class SystemOutputConfig(Strict):
    effort: Effort | None = None


class SystemMessage(_Message, tag="system"):
    """Instructions given mid-conversation (agent CLIs send them between turns). Without content, it
    sets only its `output_config` (and must then have one)."""

    content: str | list[SystemBlock] | None = None
    clear_at: Literal["next_user_message", "never"] | None = None
    output_config: SystemOutputConfig | None = None


Message = UserMessage | AssistantMessage | SystemMessage

# --- tools and how to use them --------------------------------------------------------------------


class ClientTool(Strict):
    """A tool the client runs (`type` "custom", or left out)."""

    name: ToolName
    input_schema: Raw  # a JSON object, checked to be one
    type: Literal["custom"] | None = None
    description: str | None = None
    cache_control: CacheControl | None = None
    strict: bool | None = None
    input_examples: list[Raw] | None = None  # JSON objects, checked to be
    defer_loading: bool | None = None
    eager_input_streaming: bool | None = None
    allowed_callers: list[CallerKind] | None = None


class ServerTool(msgspec.Struct, omit_defaults=True):
    """One of Anthropic's own tools (`web_search_20250305`, `bash_20250124`, `mcp_toolset`...), kept
    whole: its fields change with its version, and only Anthropic reads them. `name` is None for a
    toolset; `raw` is the tool's whole JSON object, as sent."""

    type: str
    raw: Raw
    name: str | None = None
    cache_control: CacheControl | None = None


Tool = ClientTool | ServerTool



class _Choice(Strict, tag_field="type"):
    pass


class ToolChoiceAuto(_Choice, tag="auto"):
    disable_parallel_tool_use: bool | None = None


class ToolChoiceAny(_Choice, tag="any"):
    disable_parallel_tool_use: bool | None = None


class ToolChoiceTool(_Choice, tag="tool"):
    name: Nonempty
    disable_parallel_tool_use: bool | None = None


class ToolChoiceNone(_Choice, tag="none"):
    pass


ToolChoice = ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone

# --- thinking and output --------------------------------------------------------------------------


class ThinkingBinding(Strict):
    prefix_mismatch_behavior: Literal["error", "drop_block"] | None = None


class _Thinking(Strict, tag_field="type"):
    pass


class ThinkingEnabled(_Thinking, tag="enabled"):
    budget_tokens: Annotated[int, Meta(ge=MIN_THINKING_BUDGET, le=INT32_MAX)]
    display: ThinkingDisplay | None = None
    block_binding: ThinkingBinding | None = None


class ThinkingAdaptive(_Thinking, tag="adaptive"):
    display: ThinkingDisplay | None = None
    block_binding: ThinkingBinding | None = None


class ThinkingDisabled(_Thinking, tag="disabled"):
    pass


class ThinkingBetweenTools(_Thinking, tag="between_tools"):
    pass


ThinkingConfig = ThinkingEnabled | ThinkingAdaptive | ThinkingDisabled | ThinkingBetweenTools


class JsonSchemaFormat(Strict, tag_field="type", tag="json_schema"):
    schema: Raw  # a JSON object, checked to be one


class TaskBudget(Strict, tag_field="type", tag="tokens"):
    total: Count
    remaining: Count | None = None


class OutputConfig(Strict):
    effort: Effort | None = None
    format: JsonSchemaFormat | None = None
    task_budget: TaskBudget | None = None


class Metadata(Strict):
    user_id: Annotated[str, Meta(max_length=512)] | None = None


class Diagnostics(Strict):
    previous_message_id: str | None = None


# --- the request ----------------------------------------------------------------------------------


class MessagesRequest(Strict):
    """`POST /v1/messages`, as the client sent it. Made by decode_messages only: its `tools` are read
    one by one (a client tool has no `type` to tell it from Anthropic's), so no msgspec decoder reads
    this type whole."""

    model: ModelName
    max_tokens: Count  # 0 only fills the prompt cache (Anthropic's "pre-warming")
    messages: Annotated[list[Message], Meta(min_length=1, max_length=100_000)]
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    temperature: Unit | None = None
    top_p: Unit | None = None
    top_k: Count | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    output_config: OutputConfig | None = None
    cache_control: CacheControl | None = None
    speed: Literal["standard", "fast"] | None = None
    inference_geo: str | None = None
    diagnostics: Diagnostics | None = None
    # Only Anthropic reads these: kept as sent, present when len(raw) > 0.
    container: Raw = NO_JSON  # a container's id, or {id, skills}
    context_management: Raw = NO_JSON
    mcp_servers: Raw = NO_JSON
    billing_policy: Raw = NO_JSON
    compaction: Raw = NO_JSON
    fallback_credit_token: Raw = NO_JSON
    fallbacks: Raw = NO_JSON
    thread: Raw = NO_JSON
