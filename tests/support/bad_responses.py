"""Responses API request bodies the edge must refuse, shared by the codec and the HTTP tests.

Each row is a raw body, the OpenAI error `param` it must be refused with (None for errors of the body
as a whole) and the error `code`, as in bad_requests.py. What needs a store or OpenAI's hosted tools is
`unsupported_parameter`, named; malformed values are `invalid_request`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from bad_requests import JSON, MISSING, Bad, body_level, deep, spliced

from ingress.oai.codec import MAX_NESTING
from ingress.oai.responses import MAX_ITEMS

UNSUPPORTED = "unsupported_parameter"
WEATHER = {"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def responses_body(**fields: Any) -> bytes:
    """A minimal valid Responses request with `fields` set (or removed, given MISSING)."""
    doc: dict[str, Any] = {"model": "ingress-demo", "input": "hello"}
    doc.update(fields)
    return json.dumps({k: v for k, v in doc.items() if v is not MISSING}).encode()


def user(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(parts)}]


def row(param: str, code: str = "invalid_request", **fields: Any) -> Any:
    shown = json.dumps(fields, default=lambda _: "MISSING")[:60]
    return pytest.param(Bad(responses_body(**fields), param, code), id=f"{param}:{shown}")


BAD_RESPONSES = [
    # Input items are read one by one after the body (so that each is decoded by its type): a 5,000-deep
    # item is refused as JSON nested too deeply, before any item is decoded.
    *[p for p in body_level(responses_body, "input") if p.id != "input-nested-5000-deep"],
    pytest.param(Bad(responses_body(input="@").replace(b'"@"', b"[" * 5000 + b"]" * 5000), None, JSON),
                 id="input-nested-5000-deep"),
    # An unknown field too deep to skip, and opaque JSON (items, tools) past MAX_NESTING levels.
    pytest.param(Bad(spliced("x", deep(100_000), responses_body), None, JSON), id="unknown-field-nested-100000-deep"),
    pytest.param(Bad(responses_body(tools=[{**WEATHER, "parameters": {"p": "@"}}])
                     .replace(b'"@"', deep(MAX_NESTING).encode()), None, JSON),
                 id="tool-parameters-nested-one-level-too-deep"),
    pytest.param(Bad(responses_body(input=[{"type": "function_call_output", "call_id": "c", "output": "@"}])
                     .replace(b'"@"', deep(MAX_NESTING).encode()), None, JSON),
                 id="input-item-nested-one-level-too-deep"),
    # What the edge cannot keep, or nothing behind it does: refused by name.
    pytest.param(Bad(responses_body(previous_response_id="resp_1"), "previous_response_id",
                     "previous_response_not_found"), id="previous_response_id"),
    row("prompt", UNSUPPORTED, prompt={"id": "pmpt_1"}),
    row("background_options", UNSUPPORTED, background_options={"completion_window": "2h"}),
    row("context_management", UNSUPPORTED, context_management=[{"type": "compaction"}]),
    row("access_programs", UNSUPPORTED, access_programs={"cyber": "standard"}),
    row("image", UNSUPPORTED, image={"context_compression": "auto"}),
    row("truncation", UNSUPPORTED, truncation="auto"),
    row("prompt_cache_options.prewarm", UNSUPPORTED, prompt_cache_options={"prewarm": True}),
    row("prompt_cache_options.comparison_response_id", UNSUPPORTED,
        prompt_cache_options={"comparison_response_id": "resp_1"}),
    row("tools[0].defer_loading", UNSUPPORTED, tools=[{**WEATHER, "defer_loading": True}]),
    row("tools[0].async", UNSUPPORTED, tools=[{**WEATHER, "async": True}]),
    row("tools[0].allowed_callers", UNSUPPORTED, tools=[{**WEATHER, "allowed_callers": ["programmatic"]}]),
    row("tools[0].output_schema", UNSUPPORTED, tools=[{**WEATHER, "output_schema": {"type": "object"}}]),
    row("input[0].type", UNSUPPORTED, input=[{"type": "item_reference", "id": "msg_1"}]),
    row("input[1].type", UNSUPPORTED, input=[{"role": "user", "content": "x"},
                                             {"type": "web_search_call", "id": "w", "status": "completed"}]),
    row("input[0].content[0].file_id", UNSUPPORTED, input=user({"type": "input_image", "file_id": "file_1"})),
    row("input[0].content[0].file_url", UNSUPPORTED, input=user({"type": "input_file", "file_url": "https://x"})),
    row("input[0].content[0].detail", UNSUPPORTED,
        input=user({"type": "input_file", "file_data": "x", "detail": "low"})),
    row("input[1].output[0].type", UNSUPPORTED, input=[
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image", "image_url": "https://x"}]}]),
    row("tool_choice.type", tool_choice={"type": "web_search_preview"}),
    row("tools[0].type", UNSUPPORTED, tools=[{"type": "web_searcher"}]),  # not one of OpenAI's built-in tools
    row("tools[0].tools[0].defer_loading", UNSUPPORTED,
        tools=[{"type": "namespace", "name": "ns", "tools": [{**WEATHER, "defer_loading": True}]}]),
    # Unknown fields, at the top and nested: typos keep the 400 naming them.
    row("temprature", temprature=1),
    row("messages", messages=[{"role": "user", "content": "hi"}]),
    row("input[0].colour", input=[{"role": "user", "content": "x", "colour": 1}]),
    row("input[0].content[0].txt", input=user({"type": "input_text", "txt": "a"})),
    row("text.format.x", text={"format": {"type": "text", "x": 1}}),
    # Missing or mistyped values.
    row("model", model=MISSING),
    row("input", input=MISSING),
    row("model", model=""),
    row("input", input=[]),
    row("input", input=7),
    row("input", input=None),
    row("input", input=[{"role": "user", "content": "x"}] * (MAX_ITEMS + 1)),
    row("input[0].role", input=[{"role": "tool", "content": "x"}]),
    row("input[0].content", input=[{"role": "user"}]),
    row("input[0].type", input=[{"type": 7, "role": "user", "content": "x"}]),
    row("input[0].arguments", input=[{"type": "function_call", "call_id": "c", "name": "f"}]),
    row("input[0].call_id", input=[{"type": "function_call", "call_id": "", "name": "f", "arguments": "{}"}]),
    row("input[0].name", input=[{"type": "function_call", "call_id": "c", "name": "bad name!", "arguments": "{}"}]),
    row("input[0].output", input=[{"type": "function_call_output", "call_id": "c", "output": 5}]),
    row("input[0].caller.type", input=[{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}",
                                        "caller": {"type": "program"}}]),
    row("input[0].content[0].type", input=[{"role": "system", "content": [{"type": "input_image",
                                                                             "image_url": "https://x"}]}]),
    row("input[0].content[0].type", input=[{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}]),
    row("input[0].content[0].image_url", input=user({"type": "input_image"})),
    row("input[0].content[0]", input=user({"type": "input_file", "filename": "a.pdf"})),
    row("instructions", instructions=["a"]),
    row("tools[0].parameters", tools=[{**WEATHER, "parameters": [1]}]),
    row("tools[0].name", tools=[{**WEATHER, "name": ""}]),
    row("tools[0].type", tools=[{"name": "f"}]),
    row("tools", tools=[WEATHER] * 129),
    row("tool_choice.name", tools=[WEATHER], tool_choice={"type": "function", "name": "nope"}),
    row("tool_choice.tools[0]", tools=[WEATHER], tool_choice={"type": "allowed_tools", "mode": "auto",
                                                              "tools": [{"type": "function", "name": "nope"}]}),
    row("tool_choice", tool_choice="sometimes"),
    row("text.format.schema", text={"format": {"type": "json_schema", "name": "x", "schema": "no"}}),
    row("text.format.name", text={"format": {"type": "json_schema", "schema": {}}}),
    row("text.verbosity", text={"verbosity": "loud"}),
    row("reasoning.summary", reasoning={"summary": "sometimes"}),
    row("client_metadata", client_metadata=["session"]),
    row("input[0].summary[0].type", input=[{"type": "reasoning", "summary": [{"type": "text", "text": "x"}]}]),
    row("input[0].encrypted_content", input=[{"type": "reasoning", "summary": [], "encrypted_content": 5}]),
    row("input[0].namespace", input=[{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}",
                                      "namespace": "bad name!"}]),
    row("tools[0].tools[0].parameters", tools=[{"type": "namespace", "name": "ns", "tools": [{**WEATHER,
                                                                                             "parameters": [1]}]}]),
    row("tools[0].tools[1].name", tools=[{"type": "namespace", "name": "ns", "tools": [WEATHER, WEATHER]}]),
    row("tools[1].tools[0].name", tools=[{**WEATHER, "name": "ns__get_weather"},
                                         {"type": "namespace", "name": "ns", "tools": [WEATHER]}]),
    row("tools[0].tools", tools=[{"type": "namespace", "name": "ns", "tools": [WEATHER] * 129}]),
    row("include[0]", include=["everything"]),
    row("metadata", metadata={f"k{i}": "v" for i in range(17)}),
    row("stream", stream="yes"),
    row("store", store="no"),
    row("stream_options.include_usage", stream=True, stream_options={"include_usage": True}),
    # Bounds, as OpenAI documents them.
    row("max_output_tokens", max_output_tokens=0),
    row("max_output_tokens", max_output_tokens=2**31),
    row("max_tool_calls", max_tool_calls=0),
    row("temperature", temperature=2.5),
    row("top_p", top_p=-0.1),
    row("top_logprobs", top_logprobs=21),
    row("user", user="u" * 257),
    row("safety_identifier", safety_identifier="s" * 129),
]
