"""Decode and check a Responses API request body once (`POST /v1/responses`): the request, then each
input item and tool by its `type`, into a `Call` (its types: `ingress.oai.responses`).

A Responses request travels as the chat request it amounts to
(`ingress.oai.responses_to_chat`), and its answer is translated back (`ingress.translate.responses`).
What needs a store the edge has not or OpenAI's own hosted tools is refused, named:

- `prompt` (stored templates), `item_reference` input items, `file_id` images;
  `previous_response_id` and `conversation` unless the edge found the response or conversation they
  name (ingress/state: its items come in as `prior`).
- `truncation: "auto"`, `context_management`, and the other parameters named in `_REFUSED_WHY`: nothing
  behind the edge does them.

What only OpenAI's servers act on is accepted and named in `Call.hints` (the access line's `dropped`, and
`ingress_hints_not_sent_total`), never refused: `client_metadata` (an agent's session and turn ids), the
agents' own bookkeeping on input messages, `reasoning.context` and `reasoning.mode`. OpenAI's built-in
tools (`web_search`, `file_search`, `code_interpreter`...) are kept in `Call.hosted`, for the route to
leave out (named) or refuse (its `hosted_tools`). A `namespace` tool's tools are offered flat, named
`<namespace>__<name>` (`Call.namespaced` maps them back). Reasoning items are read (`reasoning_items`).

Whether the answer is kept (`store`) is the edge's to decide (`Call.kept`). Every `include` value is
accepted: `message.output_text.logprobs` asks for logprobs, `reasoning.encrypted_content` the reasoning
items' sealed text; the others name parts of output items the edge never produces (hosted tool
results), so they add nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import Raw

from ingress.errors import InvalidRequest
from ingress.oai import sealing
from ingress.oai.codec import check_nesting, invalid, refusal, split_extras, unreadable
from ingress.oai.responses import (
    AdditionalToolsItem,
    AllowedToolsChoice,
    Call,
    CompactionItem,
    CompactionTrigger,
    ConfigurationUpdate,
    CustomChoice,
    CustomTool,
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionChoice,
    FunctionTool,
    HostedTool,
    InputFile,
    InputImage,
    InputText,
    Item,
    JsonSchemaText,
    MessageItem,
    NamedTool,
    NamespaceTool,
    OutputRefusal,
    OutputText,
    Part,
    ReasoningItem,
    ResponsesRequest,
    ToolDef,
    is_set,
)

# The input items and tools the edge takes, by their `type`.
_ITEM_TYPES: dict[str, type[Item]] = {
    "message": MessageItem, "function_call": FunctionCallItem, "function_call_output": FunctionCallOutputItem,
    "custom_tool_call": CustomToolCallItem, "custom_tool_call_output": CustomToolCallOutputItem,
    "reasoning": ReasoningItem, "compaction": CompactionItem, "compaction_trigger": CompactionTrigger,
    "additional_tools": AdditionalToolsItem, "configuration_update": ConfigurationUpdate,
}
_TOOL_TYPES: dict[str, type[ToolDef]] = {"function": FunctionTool, "custom": CustomTool, "namespace": NamespaceTool}
# OpenAI's built-in tools, which its own servers run or only its own models are trained to call.
HOSTED_TOOLS = frozenset({
    "web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11", "file_search",
    "code_interpreter", "image_generation", "computer_use_preview", "computer", "mcp", "local_shell", "shell",
    "apply_patch", "tool_search",
})
NAMESPACE_SEPARATOR = "__"
# A tool's options for OpenAI's programmatic tool calling and tool search: refused when set.
_TOOL_OPTIONS = ("async", "defer_loading", "allowed_callers", "output_schema")
# The request's parameters that need what the edge has not, refused by name.
_REFUSED_WHY = {
    "conversation": "the edge keeps no conversations: send the whole input",
    "prompt": "the edge keeps no prompt templates: send the instructions and input",
    "context_management": "the edge keeps no context to compact",
    "background_options": "the edge has no options for its background responses",
    "access_programs": "no access program applies behind this edge",
    "image": "image context compression is not available behind this edge",
}


# --- decoding -------------------------------------------------------------------------------------


_decoder = msgspec.json.Decoder(ResponsesRequest)
_OPENAI_FIELDS = frozenset(ResponsesRequest.__struct_fields__)
_kind_decoder = msgspec.json.Decoder(dict[str, Any])


class _Kind(msgspec.Struct):
    """An item's or tool's `type` alone (UNSET when left out): its other fields skipped, not built."""

    type: Any = msgspec.UNSET


_kind_only = msgspec.json.Decoder(_Kind)
_item_decoders = {name: msgspec.json.Decoder(t) for name, t in _ITEM_TYPES.items()}
_tool_decoders = {name: msgspec.json.Decoder(t) for name, t in _TOOL_TYPES.items()}
_named_decoder = msgspec.json.Decoder(NamedTool)


def _unsupported(param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"'{param}' is not supported: {why}.", param=param, code="unsupported_parameter")


def _one(raw: Raw, decoders: dict[str, msgspec.json.Decoder[Any]], default: str | None, param: str,
         what: str, offered: str) -> Any:
    """One item or tool, decoded by its `type` (`default` when it is left out); opaque until now, so
    its depth is checked first."""
    check_nesting(bytes(raw))
    kind = _kind_only.decode(raw).type
    left_out = kind is msgspec.UNSET
    if left_out:
        kind = default
    if not isinstance(kind, str):
        raise invalid(f"{what} needs a string 'type'", f"{param}.type")
    decoder = decoders.get(kind)
    if decoder is None:
        raise _unsupported(f"{param}.type", f"{what} of type '{kind[:64]}' are not available behind this edge "
                                            f"({offered})")
    if left_out:
        raw = Raw(_with_type(_kind_decoder.decode(raw), kind))
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise refusal(exc, param) from None


def decode_items(raws: list[Raw], param: str) -> list[Item]:
    """Input items on their own (a conversation's, `POST /v1/conversations`), each checked as in a request."""
    return [_one(raw, _item_decoders, "message", f"{param}[{i}]", "input items",
                 "messages, function and custom tool calls and their outputs") for i, raw in enumerate(raws)]


def _with_type(fields: dict[str, Any], kind: str) -> bytes:
    return msgspec.json.encode({"type": kind, **fields})


def _without_options(fields: dict[str, Any], param: str) -> dict[str, Any]:
    """A tool's fields less its options for OpenAI's programmatic tool calling and tool search, refused by
    name when they ask for something (their defaults are accepted, and mean nothing here)."""
    for option in _TOOL_OPTIONS:
        if option in fields:
            if fields[option] not in (None, False, ["direct"]):
                raise _unsupported(f"{param}.{option}", "OpenAI's programmatic tool calling and tool search are "
                                                        "not available behind this edge")
            del fields[option]
    return fields


def _tool_def(raw: Raw, param: str) -> ToolDef | HostedTool:
    """A tool (a namespace's tools each checked as one), or one of OpenAI's built-in tools, by its type.
    Decoded at once as its type says; only a tool that does not decode so (one with options, or a mistake
    to name) is read field by field."""
    check_nesting(bytes(raw))
    kind = _kind_only.decode(raw).type
    if isinstance(kind, str) and kind in HOSTED_TOOLS:
        return HostedTool(kind, param)
    decoder = _tool_decoders.get(kind) if isinstance(kind, str) else None
    if decoder is not None:
        try:
            return decoder.decode(raw)
        except msgspec.ValidationError:
            pass
    fields = _without_options(_kind_decoder.decode(raw), param)
    if kind == "namespace" and isinstance(fields.get("tools"), list):
        fields["tools"] = [_without_options(t, f"{param}.tools[{j}]") if isinstance(t, dict) else t
                           for j, t in enumerate(fields["tools"])]
    return _one(Raw(msgspec.json.encode(fields)), _tool_decoders, None, param, "tools",  # type: ignore[no-any-return]  # _tool_decoders decode only ToolDefs
                "function, custom and namespace tools, and OpenAI's built-in tools")


def flat_name(namespace: str, name: str) -> str:
    """A namespaced tool's name as offered to a model that has no namespaces: `<namespace>__<name>`, within
    the 64 characters a function name may have (a longer one ends in a digest of the whole)."""
    flat = f"{namespace}{NAMESPACE_SEPARATOR}{name}"
    if len(flat) <= 64:
        return flat
    return f"{flat[:55]}_{hashlib.sha256(flat.encode()).hexdigest()[:8]}"


def _tools(raws: list[tuple[str, Raw]]) -> tuple[list[ToolDef], list[HostedTool], dict[str, tuple[str, str]]]:
    """The tools, OpenAI's built-in ones apart, and each namespaced tool's flat name → (namespace, name);
    a flat name that is already a tool's is refused."""
    tools: list[ToolDef] = []
    hosted: list[HostedTool] = []
    functions: list[tuple[str, FunctionTool]] = []
    flat: dict[str, tuple[str, str, str]] = {}
    for at, raw in raws:
        tool = _tool_def(raw, at)
        if isinstance(tool, HostedTool):
            hosted.append(tool)
            continue
        tools.append(tool)
        if isinstance(tool, FunctionTool):
            functions.append((at, tool))
        elif isinstance(tool, NamespaceTool):
            for j, inner in enumerate(tool.tools):
                param = f"{at}.tools[{j}]"
                if isinstance(inner, FunctionTool):
                    functions.append((param, inner))
                name = flat_name(tool.name, inner.name)
                if name in flat:
                    raise invalid(f"the namespaced tool '{tool.name}.{inner.name}' is offered as '{name}', "
                                  "as another one is", f"{param}.name")
                flat[name] = (tool.name, inner.name, param)
    for param, function in functions:
        _check_json_object(function.parameters, f"{param}.parameters")
    for t in tools:
        if not isinstance(t, NamespaceTool) and t.name in flat:
            raise invalid(f"the namespaced tool '{flat[t.name][0]}.{flat[t.name][1]}' would be offered as "
                          f"'{t.name}', which names another tool", f"{flat[t.name][2]}.name")
    return tools, hosted, {name: (ns, inner) for name, (ns, inner, _) in flat.items()}


def decode_responses_request(body: bytes) -> Call:
    """Parse and strictly validate; every failure is an InvalidRequest naming the parameter."""
    return decode_responses_request_forwarding(body, _refuse)[0]


def _refuse(model: str) -> bool:
    return False


def decode_responses_request_forwarding(body: bytes, forwards: Callable[[str], bool],
                                        prior: list[Item] | None = None) -> tuple[Call, str | None]:
    """As decode_responses_request; the top-level fields that are not OpenAI's come back as one JSON
    object when the model's route forwards them (as for chat: codec.decode_chat_request_forwarding).
    `prior`: the conversation of the response `previous_response_id` names, as the edge's store gave it
    (its items come before the request's own); without it, `previous_response_id` is refused."""
    try:
        request = _decoder.decode(body)
    except msgspec.ValidationError as exc:
        split = split_extras(body, exc, forwards, _OPENAI_FIELDS)
        if split is None:
            raise refusal(exc) from None
        return decode_responses_request_forwarding(split[0], _refuse, prior)[0], split[1]
    except (msgspec.DecodeError, RecursionError) as exc:
        raise unreadable(exc) from None
    _check_refused(request, prior is not None)
    items: list[Item]
    if isinstance(request.input, str):
        items = [MessageItem(role="user", content=request.input)]
    else:
        items = [_one(raw, _item_decoders, "message", f"input[{i}]", "input items",
                      "messages, function and custom tool calls and their outputs")
                 for i, raw in enumerate(request.input)]
    # The tools: the request's, and those its items offer along the way (Codex's `additional_tools`).
    tools, hosted, namespaced = _tools(
        [(f"tools[{i}]", raw) for i, raw in enumerate(request.tools or ())]
        + [(f"input[{i}].tools[{j}]", raw) for i, item in enumerate(items) if isinstance(item, AdditionalToolsItem)
           for j, raw in enumerate(item.tools)])
    call = Call(request, items, tools, hosted, namespaced, _hints(request, items))
    _check(call)
    if prior:
        call = msgspec.structs.replace(call, items=[*prior, *items], carried=len(prior))
    return call, None


def _hints(r: ResponsesRequest, items: list[Item]) -> list[str]:
    """What the request asks of OpenAI's servers alone, by name (never refused, never sent elsewhere)."""
    hints = []
    if is_set(r.client_metadata):
        hints.append("client_metadata")
    if r.reasoning is not None:
        hints += [f"reasoning.{name}" for name in ("context", "mode") if getattr(r.reasoning, name) is not None]
    if any(is_set(item.internal_chat_message_metadata_passthrough) for item in items):
        hints.append("input.internal_chat_message_metadata_passthrough")
    if any(isinstance(item, ReasoningItem) and not item.content
           and not (item.encrypted_content or "").startswith(sealing.PREFIX) for item in items):
        hints.append("input.reasoning")  # a provider's own sealed reasoning, or a summary only: not sent
    return hints


def _check_refused(r: ResponsesRequest, continued: bool) -> None:
    if r.previous_response_id is not None and not continued:
        raise InvalidRequest(
            f"Previous response with id '{r.previous_response_id[:64]}' not found: this edge keeps no responses; "
            "send the whole conversation as input.", param="previous_response_id", code="previous_response_not_found")
    for name, why in _REFUSED_WHY.items():
        if is_set(getattr(r, name)) and not (continued and name == "conversation"):
            raise _unsupported(name, why)
    if r.truncation == "auto":
        raise _unsupported("truncation", "the edge does not know the model's context window to truncate to")
    options = r.prompt_cache_options
    if options is not None and options.prewarm:
        raise _unsupported("prompt_cache_options.prewarm", "a request without an answer is not sent on")
    if options is not None and options.comparison_response_id is not None:
        raise _unsupported("prompt_cache_options.comparison_response_id", "the edge keeps no responses")


def _check_json_object(raw: Raw, param: str) -> None:
    if is_set(raw):
        data = bytes(raw)
        if not data.startswith(b"{"):
            raise invalid("expected a JSON object", param)
        check_nesting(data)


def _check(call: Call) -> None:
    """What the types cannot say: tool options, named tool choices, parts that need a store."""
    r = call.request
    _check_json_object(r.client_metadata, "client_metadata")
    offered = {(t.__struct_config__.tag, t.name) for t in call.tools}
    choice = r.tool_choice
    if isinstance(choice, FunctionChoice | CustomChoice) and (choice.__struct_config__.tag, choice.name) not in offered:
        raise invalid(f"tool_choice names a {choice.__struct_config__.tag} tool that is not in tools",
                       "tool_choice.name")
    if isinstance(choice, AllowedToolsChoice):
        for i, raw in enumerate(choice.tools):
            try:
                named = _named_decoder.decode(raw)
            except msgspec.ValidationError as exc:
                raise refusal(exc, f"tool_choice.tools[{i}]") from None
            if (named.type, named.name) not in offered:
                raise invalid(f"names a {named.type} tool that is not in tools", f"tool_choice.tools[{i}]")
    if r.text is not None and isinstance(r.text.format, JsonSchemaText):
        _check_json_object(r.text.format.schema, "text.format.schema")
    for i, item in enumerate(call.items):
        if isinstance(item, CompactionTrigger) and i != len(call.items) - 1:
            raise invalid("a compaction_trigger is the last input item", f"input[{i}].type")
        if isinstance(item, MessageItem) and not isinstance(item.content, str):
            for j, part in enumerate(item.content):
                _check_part(item.role, part, f"input[{i}].content[{j}]")
        elif isinstance(item, FunctionCallOutputItem | CustomToolCallOutputItem) and not isinstance(item.output, str):
            for j, part in enumerate(item.output):
                if not isinstance(part, InputText):
                    raise _unsupported(f"input[{i}].output[{j}].type", "a tool's output travels as text only")


_PARTS_OF = {
    "user": (InputText, InputImage, InputFile),
    "assistant": (InputText, OutputText, OutputRefusal),
    "system": (InputText,),
    "developer": (InputText,),
}


def _check_part(role: str, part: Part, param: str) -> None:
    if not isinstance(part, _PARTS_OF[role]):
        raise invalid(f"a {role} message cannot hold {part.__struct_config__.tag} content", f"{param}.type")
    if isinstance(part, InputImage):
        if part.file_id is not None:
            raise _unsupported(f"{param}.file_id", "the edge keeps no files: send the image as image_url")
        if part.image_url is None:
            raise invalid("an input_image needs image_url", f"{param}.image_url")
    if isinstance(part, InputFile):
        if part.file_url is not None:
            raise _unsupported(f"{param}.file_url", "send the file as file_data or file_id")
        if part.detail is not None:
            raise _unsupported(f"{param}.detail", "a file's detail level is not carried to the model")
        if part.file_data is None and part.file_id is None:
            raise invalid("an input_file needs file_data or file_id", param)
