"""A Messages request's strict decoder: the body read into `MessagesRequest` (its tools one by one), the checks
a type cannot express, and every refusal in Anthropic's words, naming the field as Anthropic does
(`messages.0.content.1.source.media_type`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import Raw

from ingress.anthropic.blocks import (
    CacheControl,
    CompactionBlock,
    FallbackBlock,
    McpToolListingBlock,
    McpToolUseBlock,
    ServerToolResult,
    ServerToolUseBlock,
    ToolAdditionBlock,
    ToolDefinition,
    ToolRemovalBlock,
    ToolUseBlock,
)
from ingress.anthropic.messages import (
    SERVER_TOOL_TYPE,
    ClientTool,
    MessagesRequest,
    ServerTool,
    SystemMessage,
    ThinkingEnabled,
    Tool,
    ToolChoiceTool,
)
from ingress.errors import InvalidRequest
from ingress.oai.codec import MAX_NESTING, check_nesting, unreadable, validation_path


class _ToolHead(msgspec.Struct):
    """What a server tool shares with every other (read leniently: its other fields are its own)."""

    type: str | None = None
    name: str | None = None
    cache_control: CacheControl | None = None


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
    if not SERVER_TOOL_TYPE.fullmatch(head.type):
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
