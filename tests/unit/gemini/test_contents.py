"""gemini.contents: every field the `google-genai` SDK can send is a field of the request's types (its own
pydantic types walked, so a field it adds fails here), and what it sends decodes."""

from __future__ import annotations

import msgspec
import pydantic
import pytest
from gemini_sdk import sdk_body
from google.genai import types

from ingress.gemini import contents as g
from ingress.gemini.contents_codec import decode_generate_content

# The SDK's type for each of ours; GenerateContentConfig's request-level fields are checked apart.
MIRRORS: list[tuple[type[pydantic.BaseModel], type[msgspec.Struct]]] = [
    (types.Content, g.Content), (types.Part, g.Part), (types.Blob, g.Blob), (types.FileData, g.FileData),
    (types.FunctionCall, g.FunctionCall), (types.FunctionResponse, g.FunctionResponse),
    (types.FunctionResponsePart, g.FunctionResponsePart), (types.Tool, g.Tool),
    (types.FunctionDeclaration, g.FunctionDeclaration), (types.ToolConfig, g.ToolConfig),
    (types.FunctionCallingConfig, g.FunctionCallingConfig), (types.ThinkingConfig, g.ThinkingConfig),
    (types.GenerationConfig, g.GenerationConfig), (types.SafetySetting, g.SafetySetting),
]
# GenerateContentConfig's fields that the SDK sends at the request's top level, not in generationConfig.
TOP_LEVEL = {"systemInstruction", "safetySettings", "tools", "toolConfig", "labels", "cachedContent", "serviceTier",
             "store", "continuationToken"}
# What the SDK keeps to itself (the HTTP options, its own function-calling loop) or sends only to Vertex.
SDK_ONLY = {"httpOptions", "shouldReturnHttpResponse", "automaticFunctionCalling", "automaticContinuation",
            "modelArmorConfig", "generationOutputConfig"}


def encode_names(struct: type[msgspec.Struct]) -> set[str]:
    return {f.encode_name for f in msgspec.structs.fields(struct)}


@pytest.mark.parametrize(("sdk", "ours"), MIRRORS, ids=lambda t: t.__name__)
def test_every_field_of_the_sdks_type_is_a_field_here(sdk: type[pydantic.BaseModel],
                                                      ours: type[msgspec.Struct]) -> None:
    sent = {f.alias or name for name, f in sdk.model_fields.items()}
    assert sent - encode_names(ours) == set()


def test_every_field_of_the_sdks_config_is_read_at_its_place() -> None:
    config = {f.alias or name for name, f in types.GenerateContentConfig.model_fields.items()} - SDK_ONLY
    assert config & TOP_LEVEL <= encode_names(g.GenerateContentRequest)
    assert config - TOP_LEVEL - encode_names(g.GenerationConfig) == set()


def test_what_the_sdk_sends_decodes_its_snake_case_keys_included() -> None:
    config = types.GenerateContentConfig(
        system_instruction="Be brief.", temperature=0.5, top_p=0.9, top_k=40, candidate_count=2, seed=7,
        max_output_tokens=256, stop_sequences=["END"], presence_penalty=0.1, frequency_penalty=0.2,
        response_logprobs=True, logprobs=3, response_mime_type="application/json",
        response_json_schema={"type": "object", "properties": {"a_b": {"type": "string"}}},
        thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_budget=8192),
        safety_settings=[types.SafetySetting(category=types.HarmCategory.HARM_CATEGORY_HATE_SPEECH,
                                             threshold=types.HarmBlockThreshold.BLOCK_NONE)],
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(
            name="read_file", description="Reads a file.",
            parameters_json_schema={"type": "object", "properties": {"file_path": {"type": "string"}}})])],
        tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(
            mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=["read_file"])),
        labels={"team": "a"})
    contents = [types.Content(role="user", parts=[types.Part(text="Hi"),
                                                  types.Part.from_bytes(data=b"\x89PNG", mime_type="image/png")])]
    path, body = sdk_body(contents, config)
    assert path.endswith("/models/gemini-2.5-pro:generateContent")
    assert b'"mime_type"' in body and b'"parameters_json_schema"' in body and b'"thinking_budget"' in body
    r = decode_generate_content(body)
    assert r.contents[0].parts[1].inline_data == g.Blob(mime_type="image/png", data="iVBORw==")
    assert r.generation_config is not None and r.generation_config.top_k == 40  # sent as 40.0
    assert r.generation_config.thinking_config == g.ThinkingConfig(include_thoughts=True, thinking_budget=8192)
    assert r.generation_config.candidate_count == 2 and r.generation_config.logprobs == 3
    declaration = r.tools[0].function_declarations[0]  # type: ignore[index]  # decoded above
    # Keys inside opaque JSON are left as sent: a property named in snake_case stays so.
    assert msgspec.json.decode(declaration.parameters_json_schema)["properties"] == {"file_path": {"type": "string"}}
    assert r.system_instruction == g.Content(parts=[g.Part(text="Be brief.")], role="user")
    assert r.labels == {"team": "a"} and r.safety_settings is not None


def test_a_camel_case_body_decodes_in_one_pass() -> None:
    body = (b'{"contents": [{"role": "user", "parts": [{"text": "Hi"}]}],'
            b' "generationConfig": {"thinkingConfig": {"thinkingLevel": "HIGH", "includeThoughts": true}}}')
    r = decode_generate_content(body)
    assert r.generation_config is not None
    assert r.generation_config.thinking_config == g.ThinkingConfig(include_thoughts=True, thinking_level="HIGH")
