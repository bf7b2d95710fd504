"""Decode and validate a chat-completions request body once; encode OpenAI responses and errors."""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import accumulate

import msgspec

from ingress.errors import InvalidRequest
from ingress.oai.chat import (
    INT32_MAX,
    AssistantMessage,
    ChatCompletionRequest,
    JsonSchemaResponseFormat,
    NamedToolChoice,
    Tool,
    ToolCallIn,
)

_request_decoder = msgspec.json.Decoder(ChatCompletionRequest)
_fields_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_model_decoder = msgspec.json.Decoder(str)
_OPENAI_FIELDS = frozenset(ChatCompletionRequest.__struct_fields__)
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


def invalid(detail: str, param: str | None) -> InvalidRequest:
    """A value refused: `Invalid value for 'param': detail.`, the param named (every endpoint's form)."""
    where = f" for '{param}'" if param else ""
    return InvalidRequest(f"Invalid value{where}: {detail.rstrip('.')}.", param=param)


def refusal(exc: msgspec.ValidationError, prefix: str = "") -> InvalidRequest:
    """msgspec's refusal in OpenAI's words: `$.messages[0].content` is `messages[0].content`; a bad key
    or value of a dict (logit_bias, metadata) names the dict. `prefix`: where the refused document sits
    in the request, for a part decoded on its own (`input[3]`)."""
    detail, path = validation_path(exc)
    path = path.removesuffix("[...]")
    where = prefix + ("." + path if path and not path.startswith("[") and prefix else path)
    return invalid(detail, where or None)


NESTED_TOO_DEEPLY = "The request body is nested too deeply."
# Levels of arrays and objects allowed in the JSON the edge keeps opaque (tool schemas, allowed tools,
# Responses items, engine extras). msgspec reads JSON as deep as Python's recursion limit allows (1000
# frames less the caller's stack; past it, its RecursionError is the strict decode's "nested too
# deeply"). Opaque JSON is read again later, deeper in a stack and inside more levels (the token count,
# a bridge's engine request), so it is held well below that, and then what the edge sends on is read
# whole everywhere. No real schema comes near it.
MAX_NESTING = 512
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def unreadable(exc: msgspec.DecodeError | RecursionError) -> InvalidRequest:
    """A body that is not JSON, or is nested too deeply to read."""
    if isinstance(exc, RecursionError):
        return InvalidRequest(NESTED_TOO_DEEPLY, code="invalid_json")
    return InvalidRequest(f"The request body is not valid JSON: {exc}.", code="invalid_json")


def check_nesting(raw: bytes) -> None:
    """JSON msgspec has read (so valid) nested at most MAX_NESTING deep, else the 400 of a body nested
    too deeply. Without recursion: JSON cannot nest deeper than half its length, nor than it has
    brackets (the usual answers, at once); past that, the brackets outside strings (escapes dropped, so
    that every quote left opens or closes one) are summed as they open and close."""
    if len(raw) <= 2 * MAX_NESTING or raw.count(b"[") + raw.count(b"{") <= MAX_NESTING:
        return
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = b"".join(unescaped.split(b'"')[::2]).translate(None, _NOT_BRACKETS)
    if max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > MAX_NESTING:
        raise InvalidRequest(NESTED_TOO_DEEPLY, code="invalid_json") from None  # (raised while msgspec's is handled)


def _refuse(model: str) -> bool:
    return False


def decode_chat_request(body: bytes) -> ChatCompletionRequest:
    """Parse and strictly validate; every failure is an InvalidRequest naming the field path."""
    return decode_chat_request_forwarding(body, _refuse)[0]


def decode_chat_request_forwarding(
    body: bytes, forwards: Callable[[str], bool],
) -> tuple[ChatCompletionRequest, str | None]:
    """As decode_chat_request, but a top-level field that is not OpenAI's is not refused when
    `forwards(model)` says the model's route forwards such fields: they come back as one JSON object
    (text), to travel to the internal service beside the request.

    The common path is decode_chat_request's, one strict decode: only a body refused for an unknown
    top-level field is read a second time, into its top-level fields, to learn its model and split
    the fields that are OpenAI's (decoded strictly again, so their errors are reported as ever) from
    the others. An unknown field nested inside an OpenAI object is refused on every route."""
    try:
        request = _request_decoder.decode(body)
    except msgspec.ValidationError as exc:
        split = split_extras(body, exc, forwards)
        if split is None:
            raise refusal(exc) from None
        openai_body, extra_json = split
        return decode_chat_request(openai_body), extra_json
    except (msgspec.DecodeError, RecursionError) as exc:
        raise unreadable(exc) from None
    _check_semantics(request)
    return request, None


def split_extras(
    body: bytes, exc: msgspec.ValidationError, forwards: Callable[[str], bool],
    openai_fields: frozenset[str] = _OPENAI_FIELDS,
) -> tuple[bytes, str] | None:
    """(the OpenAI fields as a JSON object, the others as one) when `exc` is an unknown top-level field
    and the body's model forwards them; else None, and the error stands. `openai_fields`: the request
    type's own fields (chat's by default)."""
    detail, path = validation_path(exc)
    if not detail.startswith("Object contains unknown field") or "." in path or "[" in path:
        return None
    try:
        fields = _fields_decoder.decode(body)
        model = _model_decoder.decode(fields["model"])
    except (msgspec.DecodeError, KeyError):  # (a ValidationError is a DecodeError)
        return None
    except RecursionError as exc:  # an unknown field nested too deeply to be skipped, on any route
        raise unreadable(exc) from None
    if not forwards(model):
        return None
    ours = {k: v for k, v in fields.items() if k in openai_fields}
    extras = {k: v for k, v in fields.items() if k not in openai_fields}
    for value in extras.values():
        check_nesting(bytes(value))
    return json_encoder.encode(ours), json_encoder.encode(extras).decode()


def _check_json_object(raw: msgspec.Raw, param: str) -> None:
    # msgspec has already checked the syntax of a Raw value; here its kind and depth.
    if len(raw):
        data = bytes(raw)
        if not data.startswith(b"{"):
            raise invalid("expected a JSON object", param)
        check_nesting(data)


_KINDS = ("function", "custom", "allowed_tools")


def _wrong_kind(value: Tool | ToolCallIn | NamedToolChoice) -> str | None:
    """The key that is missing for the object's `type`, or given beside it (`{"type": "custom",
    "function": ...}`); None when all is well. Cheap then: it runs for every tool and tool call."""
    kind = value.type
    for other in _KINDS:
        if other != kind and getattr(value, other, None) is not None:
            return other
    return kind if getattr(value, kind) is None else None


def _kind_error(value: Tool | ToolCallIn | NamedToolChoice, wrong: str, param: str) -> InvalidRequest:
    kind = value.type
    detail = f"type '{kind}' needs '{kind}'" if wrong == kind else f"'{wrong}' is not allowed with type '{kind}'"
    return invalid(detail, f"{param}.{wrong}")


def _check_tools(request: ChatCompletionRequest) -> None:
    """Tools and tool choices name their kind; legacy functions are not mixed with tools."""
    for i, tool in enumerate(request.tools or ()):
        if (wrong := _wrong_kind(tool)) is not None:
            raise _kind_error(tool, wrong, f"tools[{i}]")
        if tool.function is not None:
            _check_json_object(tool.function.parameters, f"tools[{i}].function.parameters")
    for i, function in enumerate(request.functions or ()):
        _check_json_object(function.parameters, f"functions[{i}].parameters")
    if request.functions is not None and (request.tools is not None or request.tool_choice is not None):
        raise invalid("functions is the legacy form of tools: send one of them", "functions")
    if request.function_call is not None and (request.tool_choice is not None or request.tools is not None):
        raise invalid("function_call is the legacy form of tool_choice: send one of them", "function_call")
    choice = request.tool_choice
    if isinstance(choice, NamedToolChoice):
        if (wrong := _wrong_kind(choice)) is not None:
            raise _kind_error(choice, wrong, "tool_choice")
        for i, allowed in enumerate(choice.allowed_tools.tools if choice.allowed_tools is not None else ()):
            _check_json_object(allowed, f"tool_choice.allowed_tools.tools[{i}]")
        named = choice.function or choice.custom
        if named is not None:
            offered = {(t.type, named_tool.name) for t in request.tools or ()
                       if (named_tool := t.function or t.custom) is not None}
            if (choice.type, named.name) not in offered:
                raise invalid(f"tool_choice names a {choice.type} tool that is not in tools",
                               f"tool_choice.{choice.type}.name")
    legacy = request.function_call
    if legacy is not None and not isinstance(legacy, str) and \
            legacy.name not in {f.name for f in request.functions or ()}:
        raise invalid("function_call names a function that is not in functions", "function_call.name")


def _check_assistant(message: AssistantMessage, i: int) -> None:
    for j, call in enumerate(message.tool_calls or ()):
        if (wrong := _wrong_kind(call)) is not None:
            raise _kind_error(call, wrong, f"messages[{i}].tool_calls[{j}]")
    if message.content is None and not message.tool_calls and message.function_call is None \
            and message.audio is None:
        raise invalid("an assistant message needs content, tool_calls, function_call or audio",
                       f"messages[{i}].content")


def _check_semantics(request: ChatCompletionRequest) -> None:
    """Cross-field rules a type cannot express."""
    if request.tools is not None or request.tool_choice is not None or request.functions is not None \
            or request.function_call is not None:
        _check_tools(request)
    if isinstance(request.response_format, JsonSchemaResponseFormat):
        _check_json_object(request.response_format.json_schema.schema, "response_format.json_schema.schema")
    for token in request.logit_bias or ():
        if int(token) > INT32_MAX:
            raise invalid("token ids must fit in 32 bits", f"logit_bias.{token}")
    for i, message in enumerate(request.messages):
        if type(message) is AssistantMessage and (message.tool_calls or message.content is None):
            _check_assistant(message, i)
    if request.stream_options is not None and not request.stream:
        raise invalid("stream_options is only allowed when stream is true", "stream_options")
