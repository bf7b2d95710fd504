"""gemini.contents_codec: every refusal is a 400 naming the field by its proto path, in Google's words; both
spellings of a field are read; opaque JSON is checked to be the object it must be."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ingress.errors import InvalidRequest
from ingress.gemini.contents_codec import decode_generate_content, proto_path

HI = [{"role": "user", "parts": [{"text": "Hi"}]}]


def refusal(body: dict[str, Any] | bytes) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode_generate_content(body if isinstance(body, bytes) else msgspec.json.encode(body))
    assert caught.value.status == 400
    return caught.value


@pytest.mark.parametrize(("body", "param", "message"), [
    ({"contents": HI, "foo": 1}, "foo", 'Invalid JSON payload received. Unknown name "foo": Cannot find field.'),
    ({"contents": HI, "generationConfig": {"thinkingConfig": {"budget": 1}}},
     "generation_config.thinking_config.budget",
     'Invalid JSON payload received. Unknown name "budget" at \'generation_config.thinking_config\': Cannot find '
     "field."),
    ({"contents": HI, "generation_config": {"thinking_config": {"thinking_budgets": 1}}},
     "generation_config.thinking_config.thinking_budgets", None),
    ({"generationConfig": {}}, "contents", "* GenerateContentRequest.contents: contents is not specified"),
    ({"contents": []}, "contents", None),
    ({"contents": HI, "generationConfig": {"temperature": 3}}, "generation_config.temperature", None),
    ({"contents": HI, "generationConfig": {"topK": 0}}, "generation_config.top_k", None),
    ({"contents": HI, "generationConfig": {"thinkingConfig": {"thinkingLevel": "VAST"}}},
     "generation_config.thinking_config.thinking_level", None),
    ({"contents": HI, "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}},
     "tool_config.function_calling_config.mode", None),
    ({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]}, "contents[0].role", None),
    ({"contents": [{"role": "user", "parts": []}]}, "contents[0].parts",
     "* GenerateContentRequest.contents[0].parts: contents.parts must not be empty."),
    ({"contents": [{"parts": [{}]}]}, "contents[0].parts[0].data",
     "* GenerateContentRequest.contents[0].parts[0].data: required oneof field 'data' must have one initialized "
     "field"),
    ({"contents": [{"parts": [{"text": "a", "inlineData": {"mimeType": "image/png", "data": ""}}]}]},
     "contents[0].parts[0].inline_data",
     "Invalid JSON payload received. Oneof field 'data' is already set. Cannot set 'inlineData' at "
     "'contents[0].parts[0]'"),
    ({"contents": [{"parts": [{"inlineData": {"data": "AA=="}}]}]}, "contents[0].parts[0].inline_data.mime_type",
     "* GenerateContentRequest.contents[0].parts[0].inline_data.mime_type: mime_type is not specified"),
    ({"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "args": [1]}}]}]},
     "contents[0].parts[0].function_call.args",
     "Invalid value at 'contents[0].parts[0].function_call.args': Starting an object on a scalar field"),
    ({"contents": [{"parts": [{"functionResponse": {"name": "f", "response": "done"}}]}]},
     "contents[0].parts[0].function_response.response", None),
    ({"contents": HI, "tools": [{"functionDeclarations": [{"name": "f"}, {"name": "f"}]}]},
     "tools[0].function_declarations[1].name", None),
    ({"contents": HI, "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "OBJECT"},
                                                           "parametersJsonSchema": {"type": "object"}}]}]},
     "tools[0].function_declarations[0].parameters_json_schema", None),
    ({"contents": HI, "tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": True}]}]},
     "tools[0].function_declarations[0].parameters_json_schema", None),
    ({"contents": HI, "tools": [{"functionDeclarations": [{"name": "f"}]}],
      "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["g"]}}},
     "tool_config.function_calling_config.allowed_function_names[0]", None),
    ({"contents": HI, "tools": [{"functionDeclarations": [{"name": "f"}]}],
      "toolConfig": {"functionCallingConfig": {"mode": "AUTO", "allowedFunctionNames": ["f"]}}},
     "tool_config.function_calling_config.allowed_function_names", None),
    ({"contents": HI, "generationConfig": {"responseSchema": {"type": "OBJECT"}}},
     "generation_config.response_mime_type", None),
    ({"contents": HI, "generationConfig": {"responseMimeType": "application/json", "responseSchema": {},
                                           "responseJsonSchema": {}}},
     "generation_config.response_json_schema", None),
])
def test_a_refusal_names_the_field_by_its_proto_path(body: dict[str, Any], param: str, message: str | None) -> None:
    refused = refusal(body)
    assert refused.param == param
    assert param.rpartition(".")[0] in refused.message  # the field, or (unknown) the object it is not in
    if message is not None:
        assert refused.message == message


def test_a_body_that_is_not_json_is_refused_as_such() -> None:
    assert refusal(b'{"contents": [').code == "invalid_json"


def test_numbers_as_strings_and_integral_floats_are_read_as_googles_parser_reads_them() -> None:
    r = decode_generate_content(msgspec.json.encode(
        {"contents": HI, "generationConfig": {"maxOutputTokens": "512", "topK": 40.0, "seed": "-3"}}))
    assert r.generation_config is not None
    assert (r.generation_config.max_output_tokens, r.generation_config.top_k, r.generation_config.seed) == (512, 40, -3)


def test_a_part_with_only_a_thought_signature_is_kept() -> None:
    r = decode_generate_content(msgspec.json.encode(
        {"contents": [*HI, {"role": "model", "parts": [{"text": "ok"}, {"thoughtSignature": "c2ln"}]}]}))
    assert r.contents[1].parts[1].thought_signature == "c2ln"


def test_a_key_spelled_both_ways_is_refused_as_sent() -> None:
    refused = refusal({"contents": HI, "generationConfig": {"topK": 1, "top_k": 2}})
    assert refused.param == "generation_config.top_k"


def test_proto_paths_are_snake_case() -> None:
    assert proto_path("contents[2].parts[0].inlineData.mimeType") == "contents[2].parts[0].inline_data.mime_type"
