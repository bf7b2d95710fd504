"""gemini.schema: Google's OpenAPI-subset Schema read as the JSON Schema chat carries."""

from __future__ import annotations

import msgspec

from ingress.gemini.schema import json_schema


def test_types_nullable_counts_and_ordering_become_json_schemas() -> None:
    openapi = {"type": "OBJECT", "propertyOrdering": ["b", "a"], "required": ["a"],
               "properties": {"a": {"type": "STRING", "enum": ["x", "y"], "nullable": True},
                              "b": {"type": "ARRAY", "items": {"type": "INTEGER", "format": "int32"},
                                    "maxItems": "3", "min_items": 1},
                              "type": {"anyOf": [{"type": "NUMBER"}, {"type": "BOOLEAN"}], "nullable": True,
                                       "example": 1}}}
    got = msgspec.json.decode(json_schema(msgspec.Raw(msgspec.json.encode(openapi))))
    assert got == {"type": "object", "required": ["a"],
                   "properties": {"a": {"type": ["string", "null"], "enum": ["x", "y"]},
                                  "b": {"type": "array", "items": {"type": "integer", "format": "int32"},
                                        "maxItems": 3, "minItems": 1},
                                  "type": {"anyOf": [{"type": "number"}, {"type": "boolean"}, {"type": "null"}],
                                           "examples": [1]}}}


def test_a_json_schema_already_passes_unchanged_in_meaning() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string", "description": "the query"}}}
    assert msgspec.json.decode(json_schema(msgspec.Raw(msgspec.json.encode(schema)))) == schema
