"""Deterministic OpenAI chat requests of an exact JSON size, shared by the benchmarks."""

from __future__ import annotations

import random
from typing import Any

import msgspec

MODEL = "ingress-demo"
SIZES = {"1KB": 1024, "16KB": 16 * 1024, "128KB": 128 * 1024, "1MB": 1024 * 1024}

# ASCII only, so a character is a byte and JSON needs no escapes: the body is exactly `size` bytes.
_VOCABULARY = ["the", "model", "service", "reads", "fields", "it", "needs", "in", "place", "without", "parsing", "json",
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
    return " ".join(rng.choice(_VOCABULARY) for _ in range(count))


def _text(length: int, rng: random.Random) -> str:
    out: list[str] = []
    total = -1  # the length of " ".join(out)
    while total < length:
        word = rng.choice(_VOCABULARY)
        out.append(word)
        total += len(word) + 1
    return " ".join(out)[:length]


def chat_request(size: int, *, stream: bool = False, max_tokens: int | None = None, seed: int = 1) -> bytes:
    """An 11-message request (a system prompt, then user/assistant turns) with one tool, `size` bytes long."""
    roles = ["system"] + ["user", "assistant"] * 5
    body: dict[str, Any] = {
        "model": MODEL,
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


def stream_request(word_count: int) -> bytes:
    """One user message of `word_count` words: the demo service echoes it as that many deltas."""
    return msgspec.json.encode({
        "model": MODEL,
        "messages": [{"role": "user", "content": words(word_count)}],
        "stream": True,
    })
