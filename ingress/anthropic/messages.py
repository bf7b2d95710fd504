"""Anthropic's Messages API request (`POST /v1/messages`), strictly typed, and its decoder.

Every field the `anthropic` SDK can send is a field here (tests/unit/test_anthropic_messages.py walks
the SDK's own types to keep it so). What the edge or a bridge reads is typed and bounded; JSON that
only Anthropic reads (a server tool's versioned settings, `context_management`, `container`, the inside
of a server tool's result) is kept as `msgspec.Raw`, present when `len(raw) > 0`, and nested at most
MAX_NESTING deep. Unknown fields are refused, as Anthropic refuses them; an unknown top-level field is
carried aside instead when the client sent an `anthropic-beta` header. Refusals name the field as
Anthropic does: `messages.0.content.1.source.media_type`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Raw

from ingress.anthropic.blocks import (
    CacheControl,
    CallerKind,
    CompactionBlock,
    ContentBlock,
    Count,
    FallbackBlock,
    McpToolListingBlock,
    McpToolUseBlock,
    Nonempty,
    ServerToolResult,
    ServerToolUseBlock,
    Strict,
    SystemBlock,
    TextBlock,
    ToolAdditionBlock,
    ToolDefinition,
    ToolName,
    ToolRemovalBlock,
    ToolUseBlock,
    Unit,
)
from ingress.errors import InvalidRequest
from ingress.oai.chat import INT32_MAX, NO_JSON, ModelName
from ingress.oai.codec import MAX_NESTING, check_nesting, unreadable, validation_path

Effort = Literal["low", "medium", "high", "xhigh", "max"]
ThinkingDisplay = Literal["summarized", "omitted", "updates"]
MIN_THINKING_BUDGET = 1024
# Anthropic's own tools, by their `type`: a family and the date of its version (`web_search_20250305`);
# tool search also without a date.
SERVER_TOOL_FAMILIES = ("advisor", "bash", "browser_toolset", "code_execution", "computer", "computer_toolset",
                        "memory", "text_editor", "tool_search_tool_bm25", "tool_search_tool_regex",
                        "web_fetch", "web_search")
_SERVER_TOOL = re.compile(rf"(?:{'|'.join(SERVER_TOOL_FAMILIES)})_[0-9]{{8}}"
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


class _ToolHead(msgspec.Struct):
    """What a server tool shares with every other (read leniently: its other fields are its own)."""

    type: str | None = None
    name: str | None = None
    cache_control: CacheControl | None = None


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


class _WireRequest(MessagesRequest):
    """The request as msgspec reads it: the tools as raw JSON, each read on its own afterwards."""

    tools: list[Raw] | None = None  # type: ignore[assignment]  # read into list[Tool] by decode_messages


_RAW_FIELDS = ("container", "context_management", "mcp_servers", "billing_policy", "compaction",
               "fallback_credit_token", "fallbacks", "thread")
_REQUEST_FIELDS = frozenset(MessagesRequest.__struct_fields__)
_request_decoder = msgspec.json.Decoder(_WireRequest)
_client_tool_decoder = msgspec.json.Decoder(ClientTool)
_tool_head_decoder = msgspec.json.Decoder(_ToolHead)
_fields_decoder = msgspec.json.Decoder(dict[str, Raw])
_encoder = msgspec.json.Encoder()

# --- decoding -------------------------------------------------------------------------------------

_INDEX = re.compile(r"\[(\d+)\]")
_DETAILS = {"Object contains unknown field": "Extra inputs are not permitted",
            "Object missing required field": "Field required"}


def _refused(detail: str, param: str | None) -> InvalidRequest:
    return InvalidRequest(f"{param}: {detail}" if param else detail, param=param)


def _refusal(exc: msgspec.ValidationError, prefix: str = "") -> InvalidRequest:
    """msgspec's refusal in Anthropic's words: `$.messages[0].content[1].type` is
    `messages.0.content.1.type`. `prefix`: where the refused document sits (`tools.3`)."""
    detail, path = validation_path(exc)
    path = _INDEX.sub(r".\1", path.replace("[...]", "")).lstrip(".")
    param = ".".join(p for p in (prefix, path) if p) or None
    for start, said in _DETAILS.items():
        if detail.startswith(start):
            detail = said
    return _refused(detail, param)


def decode_messages(body: bytes, *, beta: bool = False) -> tuple[MessagesRequest, dict[str, Raw]]:
    """Read and check a Messages request; every failure is an InvalidRequest naming the field.

    With `beta` (the client sent `anthropic-beta`), a top-level field this module does not know is not
    refused: it comes back in the dict, as sent, to be carried to Anthropic. The common path is one
    strict decode; only a body refused for such a field is read again, split into its known fields
    (decoded strictly again, so their errors read as ever) and the others."""
    extras: dict[str, Raw] = {}
    try:
        wire = _request_decoder.decode(body)
    except msgspec.ValidationError as exc:
        if not beta or (split := _split(body, exc)) is None:
            raise _refusal(exc) from None
        known, extras = split
        wire = _decode_known(known)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise unreadable(exc) from None
    tools = None if wire.tools is None else [_tool(raw, i) for i, raw in enumerate(wire.tools)]
    fields = msgspec.structs.asdict(wire)
    fields["tools"] = tools
    request = MessagesRequest(**fields)
    _check(request, beta)
    return request, extras


def _decode_known(known: bytes) -> _WireRequest:
    try:
        return _request_decoder.decode(known)
    except msgspec.ValidationError as exc:
        raise _refusal(exc) from None


def _split(body: bytes, exc: msgspec.ValidationError) -> tuple[bytes, dict[str, Raw]] | None:
    """(the known top-level fields as a JSON object, the others) when `exc` refuses an unknown
    top-level field; else None, and the refusal stands."""
    detail, path = validation_path(exc)
    if not detail.startswith("Object contains unknown field") or "." in path or "[" in path:
        return None
    try:
        fields = _fields_decoder.decode(body)
    except msgspec.DecodeError:  # (a ValidationError is a DecodeError)
        return None
    except RecursionError as exc:
        raise unreadable(exc) from None
    extras = {k: v for k, v in fields.items() if k not in _REQUEST_FIELDS}
    for value in extras.values():
        _check_depth(value)
    return _encoder.encode({k: v for k, v in fields.items() if k in _REQUEST_FIELDS}), extras


def _tool(raw: Raw, i: int) -> Tool:
    """A client tool, or one of Anthropic's told by its `type`. A client tool is read at once (the
    common case); only a tool it does not fit is read again, leniently, for its type."""
    try:
        return _client_tool_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        refusal = _refusal(exc, f"tools.{i}")
    try:
        head = _tool_head_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise _refusal(exc, f"tools.{i}") from None
    if head.type is None or head.type == "custom":
        raise refusal
    if not _SERVER_TOOL.fullmatch(head.type):
        raise _refused(f"Unknown tool type '{head.type}'", f"tools.{i}.type")
    return ServerTool(type=head.type, raw=raw, name=head.name, cache_control=head.cache_control)


# --- checks a type cannot express -----------------------------------------------------------------


def _check(request: MessagesRequest, beta: bool) -> None:
    thinking = request.thinking
    # With interleaved thinking (a beta), the budget spans a whole turn and may pass max_tokens.
    if type(thinking) is ThinkingEnabled and not beta and thinking.budget_tokens >= request.max_tokens:
        raise _refused("budget_tokens must be less than max_tokens", "thinking.budget_tokens")
    if request.tools is not None or request.tool_choice is not None:
        _check_tools(request)
    if request.output_config is not None and request.output_config.format is not None:
        _check_object(request.output_config.format.schema, "output_config.format.schema")
    for name in _RAW_FIELDS:
        _check_depth(getattr(request, name))
    for i, message in enumerate(request.messages):
        content = message.content
        if type(content) is list:
            for j, block in enumerate(content):
                check = _OPAQUE.get(type(block))
                if check is not None and (where := check(block)) is not None:
                    raise _refused(_NOT_AN_OBJECT, f"messages.{i}.content.{j}.{where}")
        elif content is None and type(message) is SystemMessage and message.output_config is None:
            raise _refused("Field required", f"messages.{i}.content")


def _check_tools(request: MessagesRequest) -> None:
    """Tool names are unique; a named tool choice names one of them, when all are known: a toolset's
    or an MCP server's tools are not named in the request."""
    names: set[str] = set()
    complete = len(request.mcp_servers) == 0
    for i, tool in enumerate(request.tools or ()):
        if type(tool) is ClientTool:
            _check_object(tool.input_schema, f"tools.{i}.input_schema")
            for j, example in enumerate(tool.input_examples or ()):
                _check_object(example, f"tools.{i}.input_examples.{j}")
        elif type(tool) is ServerTool:
            _check_depth(tool.raw)
        if tool.name is None:
            complete = False
        elif tool.name in names:
            raise _refused(f"Tool names must be unique: '{tool.name}' is given twice", f"tools.{i}.name")
        else:
            names.add(tool.name)
    choice = request.tool_choice
    if type(choice) is ToolChoiceTool and complete and choice.name not in names:
        raise _refused(f"Tool '{choice.name}' is not in tools", "tool_choice.name")


_NOT_AN_OBJECT = "Input should be a JSON object"
_OPEN = ord("{")


def _check_depth(raw: Raw) -> None:
    if len(raw) > 2 * MAX_NESTING:  # no shorter JSON nests deeper (check_nesting's first test, without a copy)
        check_nesting(bytes(raw))


def _is_object(raw: Raw) -> bool:
    """Opaque JSON that must be an object is one; refused outright when nested too deeply."""
    if memoryview(raw)[0] != _OPEN:  # (a Raw msgspec has read holds a whole value: never empty)
        return False
    _check_depth(raw)
    return True


def _check_object(raw: Raw, param: str) -> None:
    if not _is_object(raw):
        raise _refused(_NOT_AN_OBJECT, param)


# The blocks that hold opaque JSON, each checked by a function that returns where in the block a JSON
# object is not one (None when all is well); the param is spelled out only then.


def _input(block: ToolUseBlock | ServerToolUseBlock | McpToolUseBlock) -> str | None:
    return None if _is_object(block.input) else "input"


def _server_tool_result(block: ServerToolResult) -> None:
    _check_depth(block.content)


def _tool_change(block: ToolAdditionBlock | ToolRemovalBlock) -> str | None:
    tool = block.tool
    return "tool.definition" if type(tool) is ToolDefinition and not _is_object(tool.definition) else None


def _compaction(block: CompactionBlock) -> str | None:
    for j, change in enumerate(block.tool_changes or ()):
        if (where := _tool_change(change)) is not None:
            return f"tool_changes.{j}.{where}"
    return None


def _tool_listing(block: McpToolListingBlock) -> str | None:
    for j, tool in enumerate(block.tools):
        if not _is_object(tool.input_schema):
            return f"tools.{j}.input_schema"
    return None


def _fallback(block: FallbackBlock) -> None:
    _check_depth(block.trigger)


# Every other block is passed over at once.
_OPAQUE: dict[type, Callable[[Any], str | None]] = {
    ToolUseBlock: _input, ServerToolUseBlock: _input, McpToolUseBlock: _input,
    ToolAdditionBlock: _tool_change, CompactionBlock: _compaction, McpToolListingBlock: _tool_listing,
    FallbackBlock: _fallback, **dict.fromkeys(ServerToolResult.__subclasses__(), _server_tool_result),
}
