"""OpenAI's Responses API request (`POST /v1/responses`): its types, strictly decoded and checked.

The edge is stateless: a Responses request travels as the chat request it amounts to
(`ingress.oai.responses_to_chat`), and its answer is translated back (`ingress.translate.responses`).
What needs a store or OpenAI's own hosted tools is refused, named:

- `previous_response_id`, `conversation`, `prompt` (stored templates), `background`, `item_reference`
  input items, `file_id` images: the edge keeps nothing between requests.
- hosted tools (`web_search`, `file_search`, `mcp`...), `truncation: "auto"`, reasoning summaries,
  `context_management`, and the other parameters named in `_REFUSED`: nothing behind the edge does them.

`store: true` is accepted and nothing is kept (the answer says `store: false`). Every `include` value is
accepted: `message.output_text.logprobs` asks for logprobs; the others name parts of output items the
edge never produces (hosted tool results, reasoning items), so they add nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Raw

from ingress.errors import InvalidRequest
from ingress.oai.chat import (
    INT32_MAX,
    NO_JSON,
    CustomGrammarFormat,
    CustomTextFormat,
    FunctionName,
    JsonObjectFormat,
    MetadataKey,
    MetadataValue,
    ModelName,
    Moderation,
    PromptCacheBreakpoint,
    ShortText,
    Temperature,
    TextFormat,
    TokenLimit,
    TopLogprobs,
    TopP,
)
from ingress.oai.codec import check_nesting, invalid, refusal, split_extras, unreadable

MAX_ITEMS = 2048  # input items; a conversation longer than this is not one a gateway should pass on


class _Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Unknown fields are refused, as OpenAI does, rather than silently dropped."""


# --- content parts --------------------------------------------------------------------------------


class _Part(_Strict, tag_field="type"):
    pass


class InputText(_Part, tag="input_text"):
    text: str
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class InputImage(_Part, tag="input_image"):
    image_url: Annotated[str, Meta(min_length=1)] | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high", "original"] | None = None
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class InputFile(_Part, tag="input_file"):
    file_data: str | None = None
    file_id: str | None = None
    filename: str | None = None
    file_url: str | None = None
    detail: Literal["auto", "low", "high"] | None = None
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class OutputText(_Part, tag="output_text"):
    text: str
    annotations: list[Raw] | None = None  # the model's own metadata: not sent back to it
    logprobs: list[Raw] | None = None


class OutputRefusal(_Part, tag="refusal"):
    refusal: str


Part = InputText | InputImage | InputFile | OutputText | OutputRefusal
InputPart = InputText | InputImage | InputFile


# --- input items ----------------------------------------------------------------------------------


class _Item(_Strict, tag_field="type"):
    pass


class MessageItem(_Item, tag="message"):
    """An input message (`type` may be left out), or an earlier answer's output message."""

    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Part]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: None = None  # OpenAI's commentary / final-answer marks: only on OpenAI's own answers


class DirectCaller(_Strict, tag_field="type", tag="direct"):
    """Who made a tool call: the model itself (programmatic callers are OpenAI's hosted code)."""


CallId = Annotated[str, Meta(min_length=1, max_length=256)]


class FunctionCallItem(_Item, tag="function_call"):
    call_id: CallId
    name: FunctionName
    arguments: str
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    caller: DirectCaller | None = None
    # OpenAI's tool namespaces and asynchronous calls: accepted only as their defaults, as the SDK writes them.
    namespace: None = None
    async_: Literal[False] | None = msgspec.field(default=None, name="async")


class FunctionCallOutputItem(_Item, tag="function_call_output"):
    call_id: CallId
    output: str | list[InputPart]
    id: str | None = None
    name: str | None = None  # the call's own name: the call id already says which call it answers
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    caller: DirectCaller | None = None
    namespace: None = None


class CustomToolCallItem(_Item, tag="custom_tool_call"):
    call_id: CallId
    name: FunctionName
    input: str
    id: str | None = None
    caller: DirectCaller | None = None
    namespace: None = None
    async_: Literal[False] | None = msgspec.field(default=None, name="async")


class CustomToolCallOutputItem(_Item, tag="custom_tool_call_output"):
    call_id: CallId
    output: str | list[InputPart]
    id: str | None = None
    caller: DirectCaller | None = None


Item = MessageItem | FunctionCallItem | FunctionCallOutputItem | CustomToolCallItem | CustomToolCallOutputItem
_ITEM_TYPES: dict[str, type[Item]] = {
    "message": MessageItem, "function_call": FunctionCallItem, "function_call_output": FunctionCallOutputItem,
    "custom_tool_call": CustomToolCallItem, "custom_tool_call_output": CustomToolCallOutputItem,
}

# --- tools, tool choice, formats ------------------------------------------------------------------


class FunctionTool(_Strict, tag_field="type", tag="function"):
    name: FunctionName
    description: str | None = None
    parameters: Raw = NO_JSON  # opaque JSON object (or null), checked to be one
    strict: bool | None = None


class CustomTool(_Strict, tag_field="type", tag="custom"):
    name: FunctionName
    description: str | None = None
    format: CustomTextFormat | CustomGrammarFormat | None = None


ToolDef = FunctionTool | CustomTool
_TOOL_TYPES: dict[str, type[ToolDef]] = {"function": FunctionTool, "custom": CustomTool}
# A tool's options for OpenAI's programmatic tool calling and tool search: refused when set.
_TOOL_OPTIONS = ("async", "defer_loading", "allowed_callers", "output_schema")


class _Choice(_Strict, tag_field="type"):
    pass


class FunctionChoice(_Choice, tag="function"):
    name: FunctionName


class CustomChoice(_Choice, tag="custom"):
    name: FunctionName


class AllowedToolsChoice(_Choice, tag="allowed_tools"):
    mode: Literal["auto", "required"]
    tools: Annotated[list[Raw], Meta(max_length=128)]  # {"type": "function", "name": ...}, as in `tools`


ResponsesToolChoice = Literal["none", "auto", "required"] | FunctionChoice | CustomChoice | AllowedToolsChoice


class NamedTool(_Strict):
    type: Literal["function", "custom"]
    name: FunctionName


class JsonSchemaText(_Strict, tag_field="type", tag="json_schema"):
    name: FunctionName
    schema: Raw = NO_JSON
    description: str | None = None
    strict: bool | None = None


class TextConfig(_Strict):
    format: TextFormat | JsonObjectFormat | JsonSchemaText | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(_Strict):
    effort: Annotated[str, Meta(min_length=1, max_length=32)] | None = None
    # Summaries of a model's reasoning, and how much of it to keep: nothing behind the edge returns any.
    summary: str | None = None
    generate_summary: str | None = None
    context: str | None = None
    mode: str | None = None


class PromptCacheOptions(_Strict):
    mode: Literal["implicit", "explicit"] | None = None
    ttl: Literal["30m", "12h"] | None = None
    prewarm: bool | None = None  # refused when true: a cache warmed by a request with no answer
    comparison_response_id: str | None = None  # refused: a stored response


class ResponsesStreamOptions(_Strict):
    include_obfuscation: bool | None = None  # accepted; the edge adds no obfuscation padding, as for chat


Include = Literal[
    "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
    "message.input_image.image_url", "computer_call_output.output.image_url", "code_interpreter_call.outputs",
    "reasoning.encrypted_content", "message.output_text.logprobs",
]


# --- the request ----------------------------------------------------------------------------------


class ResponsesRequest(_Strict):
    model: ModelName
    input: str | Annotated[list[Raw], Meta(min_length=1, max_length=MAX_ITEMS)]
    instructions: str | None = None
    include: Annotated[list[Include], Meta(max_length=16)] | None = None
    max_output_tokens: TokenLimit | None = None
    max_tool_calls: Annotated[int, Meta(ge=1, le=INT32_MAX)] | None = None  # hosted tools only: none here
    metadata: Annotated[dict[MetadataKey, MetadataValue], Meta(max_length=16)] | None = None
    moderation: Moderation | None = None
    parallel_tool_calls: bool | None = None
    prompt_cache_key: ShortText | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    reasoning: ReasoningConfig | None = None
    safety_identifier: Annotated[str, Meta(max_length=128)] | None = None
    service_tier: Annotated[str, Meta(min_length=1, max_length=32)] | None = None
    store: bool | None = None
    stream: bool | None = None
    stream_options: ResponsesStreamOptions | None = None
    temperature: Temperature | None = None
    text: TextConfig | None = None
    tool_choice: ResponsesToolChoice | None = None
    tools: Annotated[list[Raw], Meta(max_length=128)] | None = None
    top_logprobs: TopLogprobs | None = None
    top_p: TopP | None = None
    truncation: Literal["auto", "disabled"] | None = None
    user: ShortText | None = None
    background: bool | None = None
    # Declared so that they are refused by name (`_REFUSED`), never taken for typos.
    previous_response_id: str | None = None
    conversation: Raw = NO_JSON
    prompt: Raw = NO_JSON
    context_management: Raw = NO_JSON
    background_options: Raw = NO_JSON
    access_programs: Raw = NO_JSON
    image: Raw = NO_JSON


_REFUSED_WHY = {
    "conversation": "the edge keeps no conversations: send the whole input",
    "prompt": "the edge keeps no prompt templates: send the instructions and input",
    "context_management": "the edge keeps no context to compact",
    "background_options": "the edge runs no background responses",
    "access_programs": "no access program applies behind this edge",
    "image": "image context compression is not available behind this edge",
}


class Call(msgspec.Struct, frozen=True):
    """A decoded Responses request with its input items and tools decoded one by one."""

    request: ResponsesRequest
    items: list[Item]
    tools: list[ToolDef]

    @property
    def logprobs(self) -> bool:
        r = self.request
        return "message.output_text.logprobs" in (r.include or ()) or bool(r.top_logprobs)


# --- decoding -------------------------------------------------------------------------------------


_decoder = msgspec.json.Decoder(ResponsesRequest)
_OPENAI_FIELDS = frozenset(ResponsesRequest.__struct_fields__)
_kind_decoder = msgspec.json.Decoder(dict[str, Any])
_item_decoders = {name: msgspec.json.Decoder(t) for name, t in _ITEM_TYPES.items()}
_tool_decoders = {name: msgspec.json.Decoder(t) for name, t in _TOOL_TYPES.items()}
_named_decoder = msgspec.json.Decoder(NamedTool)


def _unsupported(param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"'{param}' is not supported: {why}.", param=param, code="unsupported_parameter")


def is_set(raw: Raw) -> bool:
    return len(raw) > 0 and bytes(raw) != b"null"


def _one(raw: Raw, decoders: dict[str, msgspec.json.Decoder[Any]], default: str | None, param: str,
         what: str, offered: str) -> Any:
    """One item or tool, decoded by its `type` (`default` when it is left out); opaque until now, so
    its depth is checked first."""
    check_nesting(bytes(raw))
    fields = _kind_decoder.decode(raw)
    kind = fields.get("type", default)
    if not isinstance(kind, str):
        raise invalid(f"{what} needs a string 'type'", f"{param}.type")
    decoder = decoders.get(kind)
    if decoder is None:
        raise _unsupported(f"{param}.type", f"{what} of type '{kind[:64]}' are not available behind this edge "
                                            f"({offered})")
    if default is not None and "type" not in fields:
        raw = Raw(_with_type(fields, kind))
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise refusal(exc, param) from None


def _with_type(fields: dict[str, Any], kind: str) -> bytes:
    return msgspec.json.encode({"type": kind, **fields})


def _tool_def(raw: Raw, param: str) -> ToolDef:
    """A tool; its options for OpenAI's programmatic tool calling and tool search are refused by name
    when they ask for something (their defaults are accepted, and mean nothing here)."""
    check_nesting(bytes(raw))
    fields = _kind_decoder.decode(raw)
    for option in _TOOL_OPTIONS:
        if option in fields:
            if fields[option] not in (None, False, ["direct"]):
                raise _unsupported(f"{param}.{option}", "OpenAI's programmatic tool calling and tool search are "
                                                        "not available behind this edge")
            del fields[option]
    return _one(Raw(msgspec.json.encode(fields)), _tool_decoders, None, param, "tools",  # type: ignore[no-any-return]  # _tool_decoders decode only these two
                "function and custom tools")


def decode_responses_request(body: bytes) -> Call:
    """Parse and strictly validate; every failure is an InvalidRequest naming the parameter."""
    return decode_responses_request_forwarding(body, _refuse)[0]


def _refuse(model: str) -> bool:
    return False


def decode_responses_request_forwarding(body: bytes, forwards: Callable[[str], bool]) -> tuple[Call, str | None]:
    """As decode_responses_request; the top-level fields that are not OpenAI's come back as one JSON
    object when the model's route forwards them (as for chat: codec.decode_chat_request_forwarding)."""
    try:
        request = _decoder.decode(body)
    except msgspec.ValidationError as exc:
        split = split_extras(body, exc, forwards, _OPENAI_FIELDS)
        if split is None:
            raise refusal(exc) from None
        return decode_responses_request(split[0]), split[1]
    except (msgspec.DecodeError, RecursionError) as exc:
        raise unreadable(exc) from None
    _check_refused(request)
    items: list[Item]
    if isinstance(request.input, str):
        items = [MessageItem(role="user", content=request.input)]
    else:
        items = [_one(raw, _item_decoders, "message", f"input[{i}]", "input items",
                      "messages, function and custom tool calls and their outputs")
                 for i, raw in enumerate(request.input)]
    tools = [_tool_def(raw, f"tools[{i}]") for i, raw in enumerate(request.tools or ())]
    call = Call(request, items, tools)
    _check(call)
    return call, None


def _check_refused(r: ResponsesRequest) -> None:
    if r.previous_response_id is not None:
        raise InvalidRequest(
            f"Previous response with id '{r.previous_response_id[:64]}' not found: this edge keeps no responses; "
            "send the whole conversation as input.", param="previous_response_id", code="previous_response_not_found")
    for name, why in _REFUSED_WHY.items():
        if is_set(getattr(r, name)):
            raise _unsupported(name, why)
    if r.background:
        raise _unsupported("background", "the edge keeps no responses to poll: send it without background")
    if r.truncation == "auto":
        raise _unsupported("truncation", "the edge does not know the model's context window to truncate to")
    for name in ("summary", "generate_summary", "context", "mode"):
        if r.reasoning is not None and getattr(r.reasoning, name) is not None:
            raise _unsupported(f"reasoning.{name}", "answers behind this edge carry no reasoning items")
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
    for i, tool in enumerate(call.tools):
        if isinstance(tool, FunctionTool):
            _check_json_object(tool.parameters, f"tools[{i}].parameters")
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
