"""gemini.contents_to_chat: a GenerateContentRequest read as the chat request it amounts to. What has a neutral
meaning maps onto chat's fields; processing hints are named as not sent; features only Google serves are
refused naming the field by its proto path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from gemini_sdk import sdk_body
from google.genai import types

from ingress.errors import InvalidRequest
from ingress.gemini.contents_codec import decode_generate_content
from ingress.gemini.contents_to_chat import Read, as_chat
from ingress.oai import chat

HI = [{"role": "user", "parts": [{"text": "Hi"}]}]


def read(stream: bool = False, for_gemini: bool = False, **fields: Any) -> Read:
    body = {"contents": HI, **fields}
    return as_chat(decode_generate_content(msgspec.json.encode(body)), "gemini-x", stream=stream,
                   for_gemini=for_gemini)


def as_json(request: chat.ChatCompletionRequest) -> dict[str, Any]:
    return msgspec.json.decode(msgspec.json.encode(request))  # type: ignore[no-any-return]  # a JSON object


def test_a_two_turn_function_calling_conversation_from_the_sdk_reads_as_chat_messages() -> None:
    weather = types.FunctionDeclaration(name="get_weather", description="The weather in a city.",
                                        parameters=types.Schema(type=types.Type.OBJECT, required=["city"], properties={
                                            "city": types.Schema(type=types.Type.STRING)}))
    config = types.GenerateContentConfig(system_instruction="You are terse.",
                                         tools=[types.Tool(function_declarations=[weather])])
    contents = [
        types.Content(role="user", parts=[types.Part(text="Weather in Paris and Oslo?")]),
        types.Content(role="model", parts=[
            types.Part(text="Checking the weather.", thought=True),
            types.Part(function_call=types.FunctionCall(name="get_weather", args={"city": "Paris"}),
                       thought_signature=b"sig"),
            types.Part(function_call=types.FunctionCall(name="get_weather", args={"city": "Oslo"}))]),
        types.Content(role="user", parts=[
            types.Part.from_function_response(name="get_weather", response={"output": "rain"}),
            types.Part.from_function_response(name="get_weather", response={"output": "snow"})]),
        types.Content(role="model", parts=[types.Part(text="Rain in Paris, snow in Oslo.")]),
        types.Content(role="user", parts=[types.Part(text="And Rome?")]),
    ]
    _, body = sdk_body(contents, config)
    got = as_chat(decode_generate_content(body), "gemini-2.5-pro")
    assert as_json(got.request) == {"model": "gemini-2.5-pro", "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "reasoning_content": "Checking the weather.", "tool_calls": [
            {"id": "call_1_1", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_1_2", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "content": '{"output": "rain"}', "tool_call_id": "call_1_1"},
        {"role": "tool", "content": '{"output": "snow"}', "tool_call_id": "call_1_2"},
        {"role": "assistant", "content": "Rain in Paris, snow in Oslo."},
        {"role": "user", "content": "And Rome?"},
    ], "tools": [{"function": {"name": "get_weather", "description": "The weather in a city.", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]}
    assert got.dropped == ["thought_signature"]  # arguments and responses are kept as the SDK wrote them


def test_function_responses_answer_calls_by_id_and_come_before_the_rest_of_their_turn() -> None:
    got = read(contents=[
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"functionCall": {"id": "a", "name": "f", "args": {}}},
                                    {"functionCall": {"id": "b", "name": "f"}}]},
        {"role": "user", "parts": [{"text": "both done"},
                                   {"functionResponse": {"id": "b", "name": "f", "response": {"n": 2}}},
                                   {"functionResponse": {"id": "a", "name": "f", "response": {"n": 1}}}]}])
    messages = as_json(got.request)["messages"]
    assert messages[1]["tool_calls"][1] == {"id": "b", "function": {"name": "f", "arguments": "{}"}}
    assert messages[2:] == [{"role": "tool", "content": '{"n":2}', "tool_call_id": "b"},
                            {"role": "tool", "content": '{"n":1}', "tool_call_id": "a"},
                            {"role": "user", "content": "both done"}]


def test_a_function_response_without_its_call_is_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        read(contents=[{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}])
    assert caught.value.param == "contents[0].parts[0].function_response.name"


def test_generation_config_maps_to_its_chat_fields_and_top_k_comes_back_apart() -> None:
    got = read(stream=True, generationConfig={
        "temperature": 0.4, "topP": 0.9, "topK": 64, "candidateCount": 2, "maxOutputTokens": 100,
        "stopSequences": ["END"], "seed": 5, "presencePenalty": 0.5, "frequencyPenalty": -0.5,
        "responseLogprobs": True, "logprobs": 4, "thinkingConfig": {"thinkingBudget": 8192, "includeThoughts": True}},
        serviceTier="flex")
    assert as_json(got.request) == {
        "model": "gemini-x", "messages": [{"role": "user", "content": "Hi"}], "frequency_penalty": -0.5,
        "logprobs": True, "top_logprobs": 4, "max_completion_tokens": 100, "n": 2, "presence_penalty": 0.5,
        "reasoning_effort": "medium", "seed": 5, "service_tier": "flex", "stop": ["END"], "stream": True,
        "stream_options": {"include_usage": True}, "temperature": 0.4, "top_p": 0.9}
    assert (got.top_k, got.include_thoughts) == (64, True)


@pytest.mark.parametrize(("thinking", "effort"), [
    ({"thinkingLevel": "LOW"}, "low"), ({"thinkingLevel": "HIGH", "thinkingBudget": 10}, "high"),
    ({"thinkingBudget": 0}, "none"), ({"thinkingBudget": -1}, None), ({"thinkingBudget": 1024}, "low"),
    ({"thinkingBudget": 16384}, "high"), ({"includeThoughts": True}, None)])
def test_thinking_reads_as_a_reasoning_effort(thinking: dict[str, Any], effort: str | None) -> None:
    assert read(generationConfig={"thinkingConfig": thinking}).request.reasoning_effort == effort


@pytest.mark.parametrize(("config", "expected"), [
    ({"mode": "AUTO"}, "auto"), ({"mode": "NONE"}, "none"), ({"mode": "ANY"}, "required"),
    ({"mode": "ANY", "allowedFunctionNames": ["f", "g"]}, "required"),
    ({"mode": "ANY", "allowedFunctionNames": ["g"]}, {"function": {"name": "g"}}),
    ({"mode": "VALIDATED"}, "auto")])
def test_function_calling_config_reads_as_a_tool_choice(config: dict[str, Any], expected: object) -> None:
    got = as_json(read(tools=[{"functionDeclarations": [{"name": "f"}, {"name": "g"}]}],
                       toolConfig={"functionCallingConfig": config}).request)
    assert got["tool_choice"] == expected
    assert all(t["function"].get("strict") is (True if config["mode"] == "VALIDATED" else None)
               for t in got["tools"])


def test_a_subset_of_several_functions_is_chats_allowed_tools() -> None:
    got = as_json(read(tools=[{"functionDeclarations": [{"name": "f"}, {"name": "g"}, {"name": "h"}]}],
                       toolConfig={"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f", "h"]}})
                  .request)
    assert got["tool_choice"] == {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "h"}}]}}


@pytest.mark.parametrize(("config", "expected"), [
    ({"responseMimeType": "application/json"}, {"type": "json_object"}),
    ({"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}},
     {"type": "json_schema", "json_schema": {"name": "response", "schema": {"type": "object"}, "strict": True}}),
    ({"responseMimeType": "application/json", "responseSchema": {"type": "ARRAY", "items": {"type": "STRING"}}},
     {"type": "json_schema", "json_schema": {"name": "response", "schema": {"type": "array",
                                                                            "items": {"type": "string"}},
                                             "strict": True}}),
    ({"responseMimeType": "text/plain"}, None)])
def test_structured_output_reads_as_a_response_format(config: dict[str, Any], expected: object) -> None:
    assert as_json(read(generationConfig=config).request).get("response_format") == expected


def test_user_media_becomes_chat_parts() -> None:
    got = read(contents=[{"role": "user", "parts": [
        {"text": "Look:"}, {"inlineData": {"mimeType": "image/png", "data": "iVBORw=="}},
        {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}},
        {"inlineData": {"mimeType": "audio/mpeg", "data": "SUQz"}},
        {"inlineData": {"mimeType": "text/plain", "data": "aGVsbG8="}},
        {"fileData": {"fileUri": "https://example.com/cat.jpg"}},
        {"fileData": {"fileUri": "https://example.com/photo", "mimeType": "image/webp"}}]}])
    assert as_json(got.request)["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "Look:"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "document.pdf"}},
        {"type": "input_audio", "input_audio": {"data": "SUQz", "format": "mp3"}}, {"type": "text", "text": "hello"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/photo"}}]}]


@pytest.mark.parametrize(("fields", "param"), [
    ({"contents": [{"parts": [{"fileData": {"fileUri": "gs://bucket/a.png", "mimeType": "image/png"}}]}]},
     "contents[0].parts[0].file_data.file_uri"),
    ({"contents": [{"parts": [{"fileData": {"fileUri": "https://generativelanguage.googleapis.com/v1beta/files/x",
                                            "mimeType": "image/png"}}]}]}, "contents[0].parts[0].file_data.file_uri"),
    ({"contents": [{"parts": [{"fileData": {"fileUri": "https://example.com/report.pdf"}}]}]},
     "contents[0].parts[0].file_data.file_uri"),
    ({"contents": [{"parts": [{"inlineData": {"mimeType": "video/mp4", "data": "AA=="}}]}]},
     "contents[0].parts[0].inline_data.mime_type"),
    ({"contents": [{"role": "model", "parts": [{"executableCode": {"language": "PYTHON", "code": "1"}}]}]},
     "contents[0].parts[0].executable_code"),
    ({"tools": [{"googleSearch": {}}]}, "tools[0].google_search"),
    ({"tools": [{"functionDeclarations": [{"name": "f"}]}, {"codeExecution": {}}]}, "tools[1].code_execution"),
    ({"cachedContent": "cachedContents/abc"}, "cached_content"),
    ({"generationConfig": {"responseModalities": ["TEXT", "IMAGE"]}}, "generation_config.response_modalities"),
    ({"generationConfig": {"speechConfig": {"voiceConfig": {}}}}, "generation_config.speech_config"),
    ({"generationConfig": {"responseMimeType": "text/x.enum", "responseSchema": {"type": "STRING"}}},
     "generation_config.response_mime_type"),
])
def test_features_only_google_serves_are_refused_naming_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        read(**fields)
    assert caught.value.param == param and caught.value.status == 400
    assert "only by Google's Gemini API" in caught.value.message
    assert param in read(for_gemini=True, **fields).unread  # bound for Google, it travels whole


def test_processing_hints_are_named_as_not_sent() -> None:
    got = read(safetySettings=[{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
               labels={"a": "b"}, generationConfig={"mediaResolution": "MEDIA_RESOLUTION_LOW"},
               tools=[{"functionDeclarations": [{"name": "f", "behavior": "BLOCKING",
                                                 "response": {"type": "STRING"}}]}])
    assert got.dropped == ["safety_settings", "labels", "generation_config.media_resolution",
                           "function_declarations.response", "function_declarations.behavior"]
    assert read(for_gemini=True, labels={"a": "b"}).dropped == []


GEMINI_CLI = Path(__file__).resolve().parents[2] / "fixtures" / "gemini_cli"


def test_gemini_clis_turns_read_as_chat_with_its_signature_named_and_top_k_apart() -> None:
    """Gemini CLI 0.61.0's first two turns (tests/fixtures/gemini_cli/): its system instruction first, its 15
    functions with their `parametersJsonSchema` as sent, `topK` apart for a route that forwards extras, its
    thoughts asked for; then its call (with the placeholder thought signature it adds) and the shell's
    function response, answering the call by its id."""
    first_body = (GEMINI_CLI / "first_turn.json").read_bytes()
    first = as_chat(decode_generate_content(first_body), "gemini-x", stream=True)
    sent = json.loads(first_body)
    assert isinstance(first.request.messages[0], chat.SystemMessage)
    functions = [t.function for t in first.request.tools or () if t.function is not None]
    assert [f.name for f in functions] == [f["name"] for f in sent["tools"][0]["functionDeclarations"]]
    shell = next(f for f in functions if f.name == "run_shell_command")
    declared = next(f for f in sent["tools"][0]["functionDeclarations"] if f["name"] == "run_shell_command")
    assert json.loads(bytes(shell.parameters)) == declared["parametersJsonSchema"]
    assert (first.top_k, first.include_thoughts, first.dropped) == (64, True, [])
    assert (first.request.temperature, first.request.top_p, first.request.reasoning_effort) == (1, 0.95, None)

    second = as_chat(decode_generate_content((GEMINI_CLI / "second_turn.json").read_bytes()), "gemini-x")
    *_, asked, called, answered = second.request.messages
    assert isinstance(asked, chat.UserMessage) and isinstance(called, chat.AssistantMessage)
    assert isinstance(answered, chat.ToolMessage)
    [call] = called.tool_calls or []
    assert call.function is not None
    assert (call.id, call.function.name, answered.tool_call_id) == ("call_scripted_0", "run_shell_command",
                                                                    "call_scripted_0")
    assert json.loads(answered.content)["output"].startswith("<untrusted_context>\nOutput: hello from gemini")  # type: ignore[arg-type]  # a string here
    assert second.dropped == ["thought_signature"]
