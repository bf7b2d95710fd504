"""ingress/tokens/chat.py: a chat request's and its tools' counts equal the OpenAI cookbook's formulas."""

from __future__ import annotations

import json
from typing import Any

import pytest
import tiktoken

from ingress.oai.codec import decode_chat_request
from ingress.tokens import MAX_EXACT_COUNT_BYTES, TokenCounter, counter_for, estimate
from ingress.tokens.chat import OTHER, count_chat
from ingress.tokens.engines import vocabulary, vocabulary_of


def cookbook_messages(messages: list[dict[str, str]], encoding: tiktoken.Encoding) -> int:
    """num_tokens_from_messages (How_to_count_tokens_with_tiktoken): every value of every message."""
    total = 0
    for message in messages:
        total += 3
        for key, value in message.items():
            total += len(encoding.encode(value))
            if key == "name":
                total += 1
    return total + 3


def cookbook_tools(tools: list[dict[str, Any]], encoding: tiktoken.Encoding, func_init: int) -> int:
    """num_tokens_for_tools, with its constants for gpt-4o (func_init 7) and gpt-4 (10)."""
    total = 0
    for tool in tools:
        total += func_init
        function = tool["function"]
        total += len(encoding.encode(function["name"] + ":" + function["description"].removesuffix(".")))
        properties = function["parameters"]["properties"]
        if properties:
            total += 3
            for key, prop in properties.items():
                total += 3
                if "enum" in prop:
                    total += -3 + sum(3 + len(encoding.encode(item)) for item in prop["enum"])
                total += len(encoding.encode(f"{key}:{prop['type']}:{prop['description'].removesuffix('.')}"))
    return total + 12 if tools else total


JARGON = [  # the cookbook's example: OpenAI answered 124 prompt tokens on gpt-4o, 129 on gpt-4
    {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon "
                                  "into plain English."},
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
    {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch "
                                                          "base on opportunities for increased leverage."},
    {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to "
                                                               "do better."},
    {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client "
                                "deliverable."},
]
WEATHER = [  # and its tools example: 101 on gpt-4o, 105 on gpt-4
    {"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]
WEATHER_TOOLS = [{"type": "function", "function": {
    "name": "get_current_weather", "description": "Get the current weather in a given location",
    "parameters": {"type": "object", "required": ["location"], "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
        "unit": {"type": "string", "description": "The unit of temperature to return",
                 "enum": ["celsius", "fahrenheit"]}}}}}]
MORE_TOOLS = [*WEATHER_TOOLS, {"type": "function", "function": {
    "name": "book_table", "description": "Book a table at a restaurant.",
    "parameters": {"type": "object", "properties": {
        "restaurant": {"type": "string", "description": "Its name."},
        "seats": {"type": "integer", "description": "How many"},
        "time": {"type": "string", "description": "When", "enum": ["18:00", "19:30", "21:00"]}}}}},
    {"type": "function", "function": {"name": "ping", "description": "No parameters.",
                                      "parameters": {"type": "object", "properties": {}}}}]
TABLE = [
    ("jargon", JARGON, [], {"gpt-4o": 124, "gpt-4": 129}),
    ("weather with tools", WEATHER, WEATHER_TOOLS, {"gpt-4o": 101, "gpt-4": 105}),
    ("one user message", [{"role": "user", "content": "hello there"}], [], {}),
    ("developer and names", [{"role": "developer", "content": "Answer in French."},
                             {"role": "user", "name": "ann", "content": "Bonjour, ça va ? 😀"},
                             {"role": "assistant", "name": "bot", "content": "Très bien, merci !"},
                             {"role": "user", "content": "東京の天気は？"}], [], {}),  # noqa: RUF001  # Japanese
    ("a tool's answer", [{"role": "user", "content": "weather?"},
                         {"role": "tool", "tool_call_id": "call_abc123", "content": "{\"temp\": 21}"}], MORE_TOOLS, {}),
    ("empty content", [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}], [], {}),
]


@pytest.mark.parametrize(("model", "func_init"), [("gpt-4o", 7), ("gpt-4o-mini", 7), ("gpt-4", 10),
                                                  ("gpt-3.5-turbo", 10), ("gpt-5", 7)])
@pytest.mark.parametrize(("what", "messages", "tools", "answered"), TABLE, ids=[row[0] for row in TABLE])
def test_chat_counts_are_the_cookbook_s(tiktoken_encodings: dict[str, tiktoken.Encoding], model: str, func_init: int,
                                        what: str, messages: list[dict[str, str]], tools: list[dict[str, Any]],
                                        answered: dict[str, int]) -> None:
    encoding = tiktoken_encodings[vocabulary_of(model) or ""]
    body: dict[str, Any] = {"model": model, "messages": messages} | ({"tools": tools} if tools else {})
    counted = counter_for(model).chat(decode_chat_request(json.dumps(body).encode()))
    assert counted == cookbook_messages(messages, encoding) + cookbook_tools(tools, encoding, func_init)
    if model in answered:  # what OpenAI's API answered, as the cookbook shows
        assert counted == answered[model]


@pytest.mark.parametrize(("what", "messages", "tools", "answered"), TABLE, ids=[row[0] for row in TABLE])
def test_the_remembered_estimate_counts_as_the_plain_one(what: str, messages: list[dict[str, str]],
                                                         tools: list[dict[str, Any]], answered: dict[str, int]) -> None:
    """A model without a tokenizer remembers short texts' and tool definitions' estimates: the count is
    the formula's on every text, the first time and every time after, and a changed schema is counted anew."""
    body: dict[str, Any] = {"model": "some-model", "messages": messages} | ({"tools": tools} if tools else {})
    request = decode_chat_request(json.dumps(body).encode())
    plain = count_chat(request, estimate, OTHER)
    counter = TokenCounter("estimate", None, OTHER, MAX_EXACT_COUNT_BYTES)
    assert [counter.chat(request) for _ in range(3)] == [plain] * 3
    if tools:
        changed = json.loads(json.dumps(tools))
        changed[0]["function"]["parameters"]["properties"]["extra"] = {"type": "string", "description": "x" * 40}
        other = decode_chat_request(json.dumps(body | {"tools": changed}).encode())
        assert counter.chat(other) == count_chat(other, estimate, OTHER) > plain


def chat_tokens(model: str, messages: list[dict[str, Any]]) -> int:
    return counter_for(model).chat(decode_chat_request(json.dumps({"model": model, "messages": messages}).encode()))


def test_text_parts_tool_calls_and_refusals_count_their_texts() -> None:
    o200k = vocabulary("o200k")
    parts = [{"type": "text", "text": "Look at this: "}, {"type": "text", "text": "twice."}]
    texts = o200k.count("Look at this: ") + o200k.count("twice.")
    assert chat_tokens("gpt-4o", [{"role": "user", "content": parts}]) == 3 + o200k.count("user") + texts + 3
    call = {"id": "call_1", "type": "function", "function": {"name": "get_current_weather",
                                                             "arguments": "{\"location\": \"Paris\"}"}}
    calls = chat_tokens("gpt-4o", [{"role": "assistant", "tool_calls": [call], "refusal": "No."}])
    assert calls == 3 + o200k.count("assistant") + o200k.count("get_current_weather") + \
        o200k.count("{\"location\": \"Paris\"}") + 3 + o200k.count("No.") + 3
