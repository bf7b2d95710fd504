"""Golden buffers: the bytes of one CompletionRequest, Response, Chunk and Error per released schema.

Each release of `schema/baseline/llm_gateway.fbs` gets a directory `tests/fixtures/golden/<version>/`
holding the buffers the encoder wrote for the messages below, what today's readers must read from
them (`*.json`), and the sha256 of the schema they were built at (`SCHEMA_SHA256`). They are written
once, when the release is made, and never rewritten:

    .venv/bin/python tests/support/golden_buffers.py 0.1.0      # refuses to overwrite an existing version

tests/unit/test_golden_buffers.py checks that today's readers read every version's bytes, that
today's encoder still writes the latest version's bytes exactly, and the C++ Verifier accepts them all.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from ingress import wire
from ingress.encoding.reading import decode_request
from ingress.encoding.requests import encode_request
from ingress.oai.codec import decode_chat_request
from ingress.wire import decode
from ingress.wire.passport import Passport

REPO = Path(__file__).resolve().parents[2]
BASELINE = REPO / "schema" / "baseline" / "llm_gateway.fbs"
GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"

# A request with every field the edge carries set, non-ASCII text included.
REQUEST_JSON = {
    "model": "gpt-4o",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": [{"type": "text", "text": "Quel temps fait-il à Paris ? 🌧"},
                                     {"type": "image_url", "image_url": {"url": "https://example.com/p.png",
                                                                         "detail": "low"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12 °C, pluie"},
        {"role": "user", "content": "Et demain ?", "name": "amélie"},
    ],
    "tools": [{"type": "function", "function": {
        "name": "weather", "description": "The weather in a city.", "strict": True,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "tool_choice": {"type": "function", "function": {"name": "weather"}},
    "parallel_tool_calls": False,
    "temperature": 0.25,
    "top_p": 0.9,
    "n": 2,
    "stop": ["\n\n", "FIN"],
    "seed": -42,
    "presence_penalty": 0.5,
    "frequency_penalty": -0.5,
    "max_tokens": 256,
    "max_completion_tokens": 300,
    "response_format": {"type": "json_schema", "json_schema": {"name": "forecast", "strict": True,
                                                              "schema": {"type": "object"}}},
    "logit_bias": {"50256": -100, "7": 5},
    "user": "user-1234",
    "metadata": {"team": "météo", "ticket": "T-1"},
    "logprobs": True,
    "top_logprobs": 3,
    "reasoning_effort": "low",
    "service_tier": "default",
    "stream": True,
    "stream_options": {"include_usage": True},
}
REQUEST_ID = "golden-0001"
PASSPORT = Passport(tenant_id="tenant-a", key_id="k_5f2c", prompt_tokens_estimate=321,
                    prefix_hash=0xFEDCBA9876543210, priority=7, deadline_unix_ms=1767225600123,
                    traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", tracestate="vendor=x")
PROVIDER, UPSTREAM_MODEL = "anthropic", "claude-upstream"

RESPONSE = wire.Response(
    id="chatcmpl-golden", model="gpt-4o", created=1767225600, system_fingerprint="fp_golden",
    choices=[
        wire.Choice(index=0, content="Demain : soleil ☀", finish_reason="stop"),
        wire.Choice(index=1, tool_calls=[wire.FunctionCall(id="call_2", name="weather", arguments='{"city":"Lyon"}')],
                    finish_reason="tool_calls"),
        wire.Choice(index=2, refusal="Je ne peux pas.", finish_reason="content_filter"),
    ],
    usage=wire.Usage(prompt_tokens=120, completion_tokens=30, total_tokens=150, cached_tokens=64, reasoning_tokens=8),
)
CHUNK = wire.Chunk(
    sequence=3, choice_index=1, id="chatcmpl-golden", model="gpt-4o", created=1767225600, role="assistant",
    content="sol", tool_calls=[wire.ToolCallDelta(index=0, id="call_3", name="weather", arguments='{"ci',
                                                  type="function")],
    finish_reason="length", usage=wire.Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3),
    system_fingerprint="fp_golden", done=True,
)
ERROR = wire.ErrorInfo(status=429, message="Trop de requêtes.", type="rate_limit_error",
                       code="rate_limit_exceeded", param="model")


def buffers() -> dict[str, bytes]:
    """What today's encoder writes for the messages above (the chunk as a size-prefixed frame)."""
    request = decode_chat_request(json.dumps(REQUEST_JSON).encode())
    return {
        "request": bytes(encode_request(request, REQUEST_ID, PASSPORT, PROVIDER, UPSTREAM_MODEL)),
        "response": bytes(wire.write_response(RESPONSE)),
        "chunk": bytes(wire.write_chunk(CHUNK)),
        "error": bytes(wire.write_error(ERROR)),
    }


def _plain(value: object) -> Any:
    return json.loads(msgspec.json.encode(value))  # msgspec.Raw (JSON kept as text) as the JSON it holds


def read(kind: str, data: bytes) -> Any:
    """What today's readers read from a buffer of `kind`, as plain JSON values."""
    if kind == "request":
        return {"openai": _plain(decode_request(data)), "wire": _plain(decode.read_request_data(data))}
    if kind == "response":
        return _plain(decode.decode_response(data))
    if kind == "chunk":
        return _plain(decode.decode_chunk(data[4:]))  # past the frame's size prefix
    return _plain(decode.decode_error(data))


def schema_sha256(path: Path = BASELINE) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def versions() -> list[Path]:
    """The golden directories, oldest first (by version number)."""
    def key(path: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in path.name.split("."))

    return sorted((p for p in GOLDEN.iterdir() if p.is_dir()), key=key)


def write(version: str) -> Path:
    target = GOLDEN / version
    if target.exists():
        raise SystemExit(f"{target} exists: a released version's golden buffers are never rewritten")
    target.mkdir(parents=True)
    for kind, data in buffers().items():
        (target / f"{kind}.bin").write_bytes(data)
        (target / f"{kind}.json").write_text(json.dumps(read(kind, data), indent=1, ensure_ascii=False) + "\n")
    (target / "SCHEMA_SHA256").write_text(schema_sha256() + "\n")
    return target


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    sys.path.insert(0, str(REPO))
    print(write(sys.argv[1]))
