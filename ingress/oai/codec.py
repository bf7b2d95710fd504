"""Decode and validate a chat-completions request body once; encode OpenAI responses and errors."""

from __future__ import annotations

import re

import msgspec

from ingress.errors import InvalidRequest
from ingress.oai.models import (
    INT32_MAX,
    AssistantMessage,
    ChatCompletionRequest,
    JsonSchemaResponseFormat,
    NamedToolChoice,
    Tool,
    ToolCallIn,
)

_request_decoder = msgspec.json.Decoder(ChatCompletionRequest)
json_encoder = msgspec.json.Encoder()

_VALIDATION = re.compile(r"^(?P<detail>.*?)(?: - at `(?:key` in `)?\$(?P<path>[^`]*)`)?\Z", re.DOTALL)
_FIELD = re.compile(r"(?:unknown|required) field `(?P<field>[^`]+)`")


def validation_path(exc: msgspec.ValidationError) -> tuple[str, str]:
    """msgspec's message split into (what is wrong, where): `Expected int - at $.a[0]` gives
    ('Expected int', 'a[0]'); an unknown or missing field is named at the end of the path. A dict's
    entries stay `[...]`, as msgspec reports them, for the caller to name."""
    match = _VALIDATION.match(str(exc))
    assert match is not None  # the pattern matches any string
    detail, path = match["detail"], (match["path"] or "").lstrip(".")
    field = _FIELD.search(detail)
    if field:
        path = f"{path}.{field['field']}" if path else field["field"]
    return detail, path


def _invalid(detail: str, param: str | None) -> InvalidRequest:
    where = f" for '{param}'" if param else ""
    return InvalidRequest(f"Invalid value{where}: {detail.rstrip('.')}.", param=param)


def decode_chat_request(body: bytes) -> ChatCompletionRequest:
    """Parse and strictly validate; every failure is an InvalidRequest naming the field path."""
    try:
        request = _request_decoder.decode(body)
    except msgspec.ValidationError as exc:
        # msgspec's `$.messages[0].content` is OpenAI's `messages[0].content`; a bad key or value of a
        # dict (logit_bias, metadata) names the dict.
        detail, path = validation_path(exc)
        raise _invalid(detail, path.removesuffix("[...]") or None) from None
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}.", code="invalid_json") from None
    except RecursionError:
        raise InvalidRequest("The request body is nested too deeply.", code="invalid_json") from None
    _check_semantics(request)
    return request


def _check_json_object(raw: msgspec.Raw, param: str) -> None:
    # msgspec has already checked the syntax of a Raw value; here only its kind.
    if len(raw) and not bytes(raw).startswith(b"{"):
        raise _invalid("expected a JSON object", param)


def _check_kind(value: Tool | ToolCallIn | NamedToolChoice, param: str) -> None:
    """The object `type` names is there, and no other: `{"type": "custom", "function": ...}` is refused."""
    kinds = ("function", "custom", "allowed_tools")
    given = [kind for kind in kinds if getattr(value, kind, None) is not None]
    if given != [value.type]:
        wrong = next((kind for kind in given if kind != value.type), value.type)
        detail = f"type '{value.type}' needs '{value.type}'" if wrong == value.type else \
            f"'{wrong}' is not allowed with type '{value.type}'"
        raise _invalid(detail, f"{param}.{wrong}")


def _check_tools(request: ChatCompletionRequest) -> None:
    """Tools, tool calls and tool choices name their kind; legacy functions are not mixed with tools."""
    for i, tool in enumerate(request.tools or ()):
        _check_kind(tool, f"tools[{i}]")
        if tool.function is not None:
            _check_json_object(tool.function.parameters, f"tools[{i}].function.parameters")
    for i, function in enumerate(request.functions or ()):
        _check_json_object(function.parameters, f"functions[{i}].parameters")
    for i, message in enumerate(request.messages):
        if isinstance(message, AssistantMessage):
            for j, call in enumerate(message.tool_calls or ()):
                _check_kind(call, f"messages[{i}].tool_calls[{j}]")
    if request.functions is not None and (request.tools is not None or request.tool_choice is not None):
        raise _invalid("functions is the legacy form of tools: send one of them", "functions")
    if request.function_call is not None and (request.tool_choice is not None or request.tools is not None):
        raise _invalid("function_call is the legacy form of tool_choice: send one of them", "function_call")
    choice = request.tool_choice
    if isinstance(choice, NamedToolChoice):
        _check_kind(choice, "tool_choice")
        named = choice.function or choice.custom
        if named is not None:
            offered = {(t.type, named_tool.name) for t in request.tools or ()
                       if (named_tool := t.function or t.custom) is not None}
            if (choice.type, named.name) not in offered:
                raise _invalid(f"tool_choice names a {choice.type} tool that is not in tools",
                               f"tool_choice.{choice.type}.name")
    legacy = request.function_call
    offered_functions = {f.name for f in request.functions or ()}
    if legacy is not None and not isinstance(legacy, str) and legacy.name not in offered_functions:
        raise _invalid("function_call names a function that is not in functions", "function_call.name")


def _check_semantics(request: ChatCompletionRequest) -> None:
    """Cross-field rules a type cannot express."""
    _check_tools(request)
    if isinstance(request.response_format, JsonSchemaResponseFormat):
        _check_json_object(request.response_format.json_schema.schema, "response_format.json_schema.schema")
    for token in request.logit_bias or ():
        if int(token) > INT32_MAX:
            raise _invalid("token ids must fit in 32 bits", f"logit_bias.{token}")
    for i, message in enumerate(request.messages):
        if isinstance(message, AssistantMessage) and message.content is None and not message.tool_calls \
                and message.function_call is None and message.audio is None:
            raise _invalid("an assistant message needs content, tool_calls, function_call or audio",
                           f"messages[{i}].content")
    if request.stream_options is not None and not request.stream:
        raise _invalid("stream_options is only allowed when stream is true", "stream_options")
