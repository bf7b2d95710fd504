"""Readers generated from the original LLMGateway schema still read the requests we write.

The reader is generated with flatc at test time and run in a child interpreter whose only
`LLMGateway` package is the generated one, so nothing of ours can stand in for it.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codegen.flatc import FlatcError, run_flatc
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.requests import encode_request
from ingress.oai.codec import decode_chat_request

REPO = Path(__file__).resolve().parents[2]
ARTICLE = REPO / "tests" / "fixtures" / "article_llm_gateway.fbs"
SCHEMA = REPO / "schema" / "llm_gateway.fbs"

READER = """
import json, sys
import LLMGateway
from LLMGateway.CompletionRequest import CompletionRequest

def s(value):
    return None if value is None else value.decode()

read = {}
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        r = CompletionRequest.GetRootAs(f.read(), 0)
    read[path] = {
        "request_id": s(r.RequestId()), "provider": r.Provider(), "model_name": s(r.ModelName()),
        "system_prompt": s(r.SystemPrompt()), "user_prompt": s(r.UserPrompt()), "max_tokens": r.MaxTokens(),
        "temperature": r.Temperature(),
        "tools": [[s(r.Tools(i).Name()), s(r.Tools(i).ArgumentsJson())] for i in range(r.ToolsLength())],
    }
print(json.dumps({"package": LLMGateway.__file__, "read": read}))
"""

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def tool(name: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


# (request, provider, what the article's reader must see)
CASES: dict[str, tuple[dict[str, Any], str, dict[str, Any]]] = {
    "full": (
        {
            "model": "claude-3-5-sonnet",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "developer",
                 "content": [{"type": "text", "text": "answer in "}, {"type": "text", "text": "French"}]},
                {"role": "user", "content": "weather in Zürich?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "14 °C"},
                {"role": "user", "content": "and tomorrow? 🌧"},
            ],
            "max_tokens": 256,
            "temperature": 0.7,
            "tools": [tool("get_weather", WEATHER), tool("noop")],
        },
        "anthropic",
        {"provider": 1, "model_name": "claude-3-5-sonnet", "system_prompt": "be brief\n\nanswer in French",
         "user_prompt": "and tomorrow? 🌧", "max_tokens": 256, "temperature": 0.7,
         "tools": [["get_weather", WEATHER], ["noop", None]]},
    ),
    "defaults": (
        {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]},
        "openai",
        {"provider": 0, "model_name": "gpt-4o-mini", "system_prompt": None, "user_prompt": "hello",
         "max_tokens": 0, "temperature": 1.0, "tools": []},
    ),
    "max-completion-tokens": (
        {"model": "llama-3", "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}],
         "max_completion_tokens": 99, "temperature": 0},
        "self_hosted",
        {"provider": 2, "model_name": "llama-3", "system_prompt": "x", "user_prompt": "y", "max_tokens": 99,
         "temperature": 0.0, "tools": []},
    ),
    "user-parts-then-assistant": (
        {"model": "m", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "look at "},
                                         {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
                                         {"type": "text", "text": "this"}]},
            {"role": "assistant", "content": "a cat"}],
         "max_tokens": 2**31 - 1, "temperature": 2.0},
        "openai",
        {"provider": 0, "model_name": "m", "system_prompt": None, "user_prompt": "look at this",
         "max_tokens": 2**31 - 1, "temperature": 2.0, "tools": []},
    ),
    "no-user-message": (
        {"model": "m", "messages": [{"role": "system", "content": ""}, {"role": "developer", "content": "日本語"}],
         "temperature": 0.1},
        "openai",
        {"provider": 0, "model_name": "m", "system_prompt": "\n\n日本語", "user_prompt": None, "max_tokens": 0,
         "temperature": 0.1, "tools": []},
    ),
    "long-prompt": (
        {"model": "m", "messages": [{"role": "user", "content": "é" * 200_000}]},
        "openai",
        {"provider": 0, "model_name": "m", "system_prompt": None, "user_prompt": "é" * 200_000, "max_tokens": 0,
         "temperature": 1.0, "tools": []},
    ),
}


def float32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


@pytest.fixture(scope="module")
def read_by_article(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every case encoded by us, then read by a reader generated from the article's schema."""
    work = tmp_path_factory.mktemp("article")
    generated = work / "generated"
    run_flatc("--python", "-o", generated, ARTICLE)
    paths = {}
    for name, (request, provider, _) in CASES.items():
        decoded = decode_chat_request(json.dumps(request).encode())
        buf = encode_request(decoded, f"req-{name}", compute_passport(decoded, RequestMeta()), provider)
        paths[name] = work / f"{name}.bin"
        paths[name].write_bytes(buf)
    env = {**os.environ, "PYTHONPATH": str(generated)}
    proc = subprocess.run([sys.executable, "-c", READER, *map(str, paths.values())], env=env, cwd=work,
                          capture_output=True, text=True, check=False, timeout=30)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert Path(out["package"]).is_relative_to(generated)
    return {name: out["read"][str(path)] for name, path in paths.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_article_reader_reads_our_request(read_by_article: dict[str, dict[str, Any]], name: str) -> None:
    _, _, expected = CASES[name]
    read = read_by_article[name]
    tools = [[tool_name, None if args is None else json.loads(args)] for tool_name, args in read.pop("tools")]
    assert tools == expected["tools"]
    assert read == {**{k: v for k, v in expected.items() if k != "tools"}, "request_id": f"req-{name}",
                    "temperature": float32(expected["temperature"])}


def test_our_schema_is_an_evolution_of_the_article_schema() -> None:
    run_flatc("--conform", ARTICLE, SCHEMA)  # raises FlatcError on a removed, retyped or moved field
    with pytest.raises(FlatcError, match="conform"):  # and the check has teeth: not the other way round
        run_flatc("--conform", SCHEMA, ARTICLE)
