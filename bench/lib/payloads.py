"""Deterministic OpenAI chat requests of an exact JSON size, shared by the benchmarks."""

from __future__ import annotations

import random
from typing import Any

import msgspec

MODEL = "ingress-demo"  # the demo's own name: the prompt is counted by the estimate
# Real names, which edges count differently: an OpenAI-family one has its prompt counted with o200k where a
# limit charges it (ingress/tokens), an open-weights one by the estimate. bench/model_names.py compares them.
OPENAI_MODEL = "gpt-4o"
OPEN_MODEL = "llama-3.1-8b-instruct"
SIZES = {"1KB": 1024, "16KB": 16 * 1024, "128KB": 128 * 1024, "1MB": 1024 * 1024}

# ASCII only, so a character is a byte and JSON needs no escapes: the body is exactly `size` bytes.
VOCABULARY = ["the", "model", "service", "reads", "fields", "it", "needs", "in", "place", "without", "parsing", "json",
               "or", "allocating", "per", "field", "while", "the", "edge", "validates", "every", "request", "once",
               "and", "encodes", "it", "into", "a", "flatbuffer", "for", "the", "internal", "hop", "latency",
               "throughput", "stream", "token", "prompt", "tenant", "routing", "cache", "prefix", "passport", "schema",
               "builder", "buffer", "answer", "question", "summary", "report", "weather", "city", "river", "mountain",
               "engine", "signal", "network", "packet", "frame"]

TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}


def words(count: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(VOCABULARY) for _ in range(count))


def _text(length: int, rng: random.Random) -> str:
    out: list[str] = []
    total = -1  # the length of " ".join(out)
    while total < length:
        word = rng.choice(VOCABULARY)
        out.append(word)
        total += len(word) + 1
    return " ".join(out)[:length]


def chat_request(size: int, *, stream: bool = False, max_tokens: int | None = None, seed: int = 1,
                 model: str = MODEL) -> bytes:
    """An 11-message request (a system prompt, then user/assistant turns) with one tool, `size` bytes long
    whatever `model` is: a longer name leaves each message a byte or two less of the same words."""
    roles = ["system"] + ["user", "assistant"] * 5
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": role, "content": ""} for role in roles],
        "tools": [TOOL],
        "temperature": 0.7,
    }
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if stream:
        body["stream"] = True
    free = size - len(msgspec.json.encode(body))
    if free < len(roles):
        raise ValueError(f"{size} bytes is too small for an 11-message request")
    rng = random.Random(seed)
    share, extra = divmod(free, len(roles))
    for i, message in enumerate(body["messages"]):
        message["content"] = _text(share + (extra if i == len(roles) - 1 else 0), rng)
    encoded = msgspec.json.encode(body)
    assert len(encoded) == size, (len(encoded), size)
    return encoded


def stream_request(word_count: int, model: str = MODEL) -> bytes:
    """One user message of `word_count` words: the demo service echoes it as that many deltas."""
    return msgspec.json.encode({
        "model": model,
        "messages": [{"role": "user", "content": words(word_count)}],
        "stream": True,
    })


def messages_request(size: int, *, stream: bool = False, max_tokens: int = 64, seed: int = 1,
                     model: str = MODEL) -> bytes:
    """`chat_request(size, ...)` sent to Anthropic's Messages API: the same system prompt (as `system`), turns
    and tool (as a client tool), temperature and max_tokens (which Messages requires). The edge reads it as
    that chat request, with usage asked for when streamed (a Messages stream always reports it). A few bytes
    shorter than `size`: Messages spells the system prompt and the tool more briefly."""
    chat = msgspec.json.decode(chat_request(size, stream=stream, max_tokens=max_tokens, seed=seed, model=model))
    system, *turns = chat["messages"]
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "system": system["content"],
        "messages": turns,
        "tools": [{"name": t["function"]["name"], "description": t["function"]["description"],
                   "input_schema": t["function"]["parameters"]} for t in chat["tools"]],
        "temperature": chat["temperature"],
    }
    if stream:
        body["stream"] = True
    return msgspec.json.encode(body)
