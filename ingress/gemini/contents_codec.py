"""A `GenerateContentRequest`'s strict decoder: the body read into `contents.GenerateContentRequest`, the checks a
type cannot express, and every refusal in Google's words, naming the field as Google does, by its proto path
(`contents[0].parts[1].inline_data.mime_type`).

Google's parser reads a field by its JSON name (`inlineData`) or its proto name (`inline_data`), numbers
given as strings, and integers written as floats (`"topK": 40.0`, as the Python SDK sends it): so does this
one. The common path is one decode; only a body that names a field in snake_case is read a second time,
its keys respelled where the type says a key is a field name (never inside opaque JSON: a schema's property
names, a function's arguments).
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec
import msgspec.inspect as mi
from msgspec import Raw

from ingress.errors import InvalidRequest
from ingress.gemini.contents import PART_DATA, Content, GenerateContentRequest, Part
from ingress.oai.codec import MAX_NESTING, check_nesting, unreadable, validation_path

_decoder = msgspec.json.Decoder(GenerateContentRequest, strict=False)
_any = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()
_TYPE = mi.type_info(GenerateContentRequest)
T = TypeVar("T")

# --- refusals -------------------------------------------------------------------------------------

_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])([A-Z])")
_UNKNOWN = "Object contains unknown field"
_MISSING = "Object missing required field"


def proto_path(json_path: str) -> str:
    """A field's path as Google names it in errors: `generationConfig.topK` is `generation_config.top_k`."""
    return _CAMEL_HUMP.sub(lambda m: "_" + m[1].lower(), json_path)


def refused(message: str, param: str | None) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def invalid(param: str, detail: str) -> InvalidRequest:
    return refused(f"Invalid value at '{param}': {detail}", param)


def _refusal(exc: msgspec.ValidationError, message: str) -> InvalidRequest:
    """The decoder's refusal in Google's words; `message` names the request's type, as Google's errors do."""
    detail, path = validation_path(exc)
    param = proto_path(path.replace("[...]", ""))
    parent, _, name = param.rpartition(".")
    if detail.startswith(_UNKNOWN):
        raw_name = path.rpartition(".")[2]
        where = f" at '{parent}'" if parent else ""
        return refused(f'Invalid JSON payload received. Unknown name "{raw_name}"{where}: Cannot find field.', param)
    if detail.startswith(_MISSING):
        return refused(f"* {message}.{param}: {name} is not specified", param)
    return invalid(param, detail)


# --- decoding -------------------------------------------------------------------------------------


def decode_generate_content(body: bytes) -> GenerateContentRequest:
    """Read and check a GenerateContentRequest; every failure is an InvalidRequest naming the field."""
    request = decode_google(body, _decoder, _TYPE, "GenerateContentRequest")
    check(request)
    return request


def decode_google(body: bytes, decoder: msgspec.json.Decoder[T], t: mi.Type, message: str) -> T:
    """A body of Google's API read by `decoder` (of type `t`, Google's `message`), as Google's parser reads
    it: its fields by JSON or proto name; every failure an InvalidRequest naming the field."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        detail, path = validation_path(exc)
        if not detail.startswith(_UNKNOWN) or "_" not in path.rpartition(".")[2]:
            raise _refusal(exc, message) from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise unreadable(exc) from None
    try:  # a field named in snake_case: read again, respelled
        return decoder.decode(_encoder.encode(respell(_any.decode(body), t)))
    except msgspec.ValidationError as exc:
        raise _refusal(exc, message) from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise unreadable(exc) from None


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def respell(value: Any, t: mi.Type) -> Any:
    """JSON as Python values, each key that is a field's proto name (`mime_type`) given its JSON name
    (`mimeType`), by the type `t` that reads it; opaque JSON (Raw) is left as it is."""
    if isinstance(t, mi.Metadata):
        return respell(value, t.type)
    if isinstance(t, mi.StructType) and isinstance(value, dict):
        fields = {f.encode_name: f.type for f in t.fields}
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = key if key in fields else _camel(key)
            if name not in fields or name in out:
                out[key] = item  # refused by the decode that follows, as sent
            else:
                out[name] = respell(item, fields[name])
        return out
    if isinstance(t, mi.ListType) and isinstance(value, list):
        return [respell(item, t.item_type) for item in value]
    if isinstance(t, mi.DictType) and isinstance(value, dict):
        return {key: respell(item, t.value_type) for key, item in value.items()}
    if isinstance(t, mi.UnionType):
        for option in t.types:
            if isinstance(option, mi.StructType | mi.ListType | mi.DictType | mi.Metadata):
                return respell(value, option)
    return value


# --- checks a type cannot express -----------------------------------------------------------------

_OPEN = ord("{")
_JSON = ("application/json", "text/x.enum")


def _check_depth(raw: Raw) -> None:
    if len(raw) > 2 * MAX_NESTING:  # no shorter JSON nests deeper (check_nesting's first test, without a copy)
        check_nesting(bytes(raw))


def _check_object(raw: Raw, param: str) -> None:
    """Opaque JSON the edge passes on that must be an object is one (absent: passed)."""
    if len(raw) == 0:
        return
    if memoryview(raw)[0] != _OPEN:
        raise invalid(param, "Starting an object on a scalar field")
    _check_depth(raw)


def check(r: GenerateContentRequest) -> None:
    for i, content in enumerate(r.contents):
        _check_content(content, f"contents[{i}]")
    if r.system_instruction is not None:
        _check_content(r.system_instruction, "system_instruction")
    names = _check_tools(r)
    choice = r.tool_config.function_calling_config if r.tool_config is not None else None
    if choice is not None and choice.allowed_function_names:
        param = "tool_config.function_calling_config.allowed_function_names"
        if choice.mode not in ("ANY", "VALIDATED"):
            raise refused(f"* GenerateContentRequest.{param}: allowed_function_names should only be set when the "
                          "Mode is ANY or VALIDATED.", param)
        for j, name in enumerate(choice.allowed_function_names):
            if name not in names:
                raise refused(f"* GenerateContentRequest.{param}[{j}]: '{name}' is not a declared function.",
                              f"{param}[{j}]")
    config = r.generation_config
    if config is not None:
        if len(config.response_schema) and len(config.response_json_schema):
            raise refused("* GenerateContentRequest.generation_config.response_json_schema: only one of "
                          "response_schema and response_json_schema may be set.",
                          "generation_config.response_json_schema")
        _check_object(config.response_schema, "generation_config.response_schema")
        _check_object(config.response_json_schema, "generation_config.response_json_schema")
        if (len(config.response_schema) or len(config.response_json_schema)) and config.response_mime_type not in _JSON:
            raise refused("* GenerateContentRequest.generation_config.response_mime_type: a response schema needs "
                          "response_mime_type application/json.", "generation_config.response_mime_type")


def _check_content(content: Content, where: str) -> None:
    if not content.parts:
        raise refused(f"* GenerateContentRequest.{where}.parts: contents.parts must not be empty.", f"{where}.parts")
    for j, part in enumerate(content.parts):
        _check_part(part, f"{where}.parts[{j}]")


def _check_part(part: Part, where: str) -> None:
    kinds = [name for name in PART_DATA if present(getattr(part, name))]
    if len(kinds) > 1:
        raise refused(f"Invalid JSON payload received. Oneof field 'data' is already set. Cannot set "
                      f"'{_camel(kinds[1])}' at '{where}'", f"{where}.{kinds[1]}")
    if not kinds and part.thought_signature is None:
        raise refused(f"* GenerateContentRequest.{where}.data: required oneof field 'data' must have one "
                      "initialized field", f"{where}.data")
    if part.function_call is not None:
        _check_object(part.function_call.args, f"{where}.function_call.args")
    elif part.function_response is not None:
        _check_object(part.function_response.response, f"{where}.function_response.response")
    for name in ("executable_code", "code_execution_result", "tool_call", "tool_response"):
        _check_depth(getattr(part, name))


def present(value: object) -> bool:
    """A part's field is set: not None, and opaque JSON not empty."""
    return value is not None and (not isinstance(value, Raw) or len(value) > 0)


def _check_tools(r: GenerateContentRequest) -> set[str]:
    """Function names are unique; each declaration's schemas are objects, one form each. The names."""
    names: set[str] = set()
    for i, tool in enumerate(r.tools or ()):
        for j, f in enumerate(tool.function_declarations or ()):
            where = f"tools[{i}].function_declarations[{j}]"
            if f.name in names:
                raise refused(f"* GenerateContentRequest.{where}.name: Duplicate function declaration found: "
                              f"{f.name}", f"{where}.name")
            names.add(f.name)
            if len(f.parameters) and len(f.parameters_json_schema):
                raise refused(f"* GenerateContentRequest.{where}.parameters_json_schema: only one of parameters "
                              "and parameters_json_schema may be set.", f"{where}.parameters_json_schema")
            for field in ("parameters", "parameters_json_schema", "response", "response_json_schema"):
                _check_object(getattr(f, field), f"{where}.{field}")
    return names
