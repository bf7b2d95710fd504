"""Google's OpenAPI-subset `Schema` (a function's `parameters`, `responseSchema`) as the JSON Schema chat's tools
and response formats carry.

The two differ in spelling more than in meaning: types are upper-case (`"OBJECT"`), `nullable` stands for a
union with null, integers may be strings (proto JSON's int64), a key may be a proto name (`max_items`), and
`propertyOrdering` orders only Google's output. Everything else is JSON Schema's keyword of the same name.
"""

from __future__ import annotations

from typing import Any

import msgspec

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()
_COUNTS = frozenset({"maxItems", "minItems", "maxLength", "minLength", "maxProperties", "minProperties"})
_DROPPED = frozenset({"propertyOrdering"})  # Google's own ordering of the properties it writes


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _convert(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    nullable = False
    for key, value in schema.items():
        name = _camel(key)
        if name in _DROPPED:
            continue
        if name == "type" and isinstance(value, str):
            kind = value.lower()
            if kind != "type_unspecified":
                out["type"] = kind
        elif name == "nullable":
            nullable = value is True
        elif name == "properties" and isinstance(value, dict):
            out["properties"] = {prop: _convert(sub) for prop, sub in value.items()}
        elif name == "items":
            out["items"] = _convert(value)
        elif name == "anyOf" and isinstance(value, list):
            out["anyOf"] = [_convert(sub) for sub in value]
        elif name in _COUNTS and isinstance(value, str) and value.isdigit():
            out[name] = int(value)
        elif name == "example":
            out["examples"] = [value]
        else:
            out[name] = value
    if nullable:
        declared = out.get("type")
        if isinstance(declared, str):
            out["type"] = [declared, "null"]
        elif "anyOf" in out:
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    return out


def json_schema(openapi: msgspec.Raw) -> msgspec.Raw:
    """Google's Schema (a JSON object the decoder has read) as JSON Schema."""
    return msgspec.Raw(_encoder.encode(_convert(_decoder.decode(openapi))))
