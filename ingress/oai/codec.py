"""Decode and validate a chat-completions request body once; encode OpenAI responses and errors."""

from __future__ import annotations

import re

import msgspec

from ingress.errors import InvalidRequest
from ingress.oai.models import INT32_MAX, AssistantMessage, ChatCompletionRequest, JsonSchemaResponseFormat

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


def _check_semantics(request: ChatCompletionRequest) -> None:
    """Cross-field rules a type cannot express."""
    for i, tool in enumerate(request.tools or ()):
        _check_json_object(tool.function.parameters, f"tools[{i}].function.parameters")
    if isinstance(request.response_format, JsonSchemaResponseFormat):
        _check_json_object(request.response_format.json_schema.schema, "response_format.json_schema.schema")
    for token in request.logit_bias or ():
        if int(token) > INT32_MAX:
            raise _invalid("token ids must fit in 32 bits", f"logit_bias.{token}")
    for i, message in enumerate(request.messages):
        if isinstance(message, AssistantMessage) and message.content is None and not message.tool_calls:
            raise _invalid("an assistant message needs content or tool_calls", f"messages[{i}].content")
    if request.stream_options is not None and not request.stream:
        raise _invalid("stream_options is only allowed when stream is true", "stream_options")
    if request.tool_choice is not None and not isinstance(request.tool_choice, str):
        offered = {tool.function.name for tool in request.tools or ()}
        if request.tool_choice.function.name not in offered:
            raise _invalid("tool_choice names a function that is not in tools", "tool_choice.function.name")
