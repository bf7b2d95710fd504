"""OpenAI's own Responses API answers, streamed and whole, made into our chunks and answers
(ingress/bridges/responses_answers.py)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ingress.bridges.dialect import EngineFailed
from ingress.bridges.openai import ResponsesCall
from ingress.bridges.responses_answers import ResponsesStream
from unit.bridges.test_openai import EngineRequestStub, text_of, whole_calls

RESPONSE_EVENTS: list[dict[str, Any]] = [
    {"type": "response.created", "response": {"id": "resp_1", "created_at": 7, "model": "gpt-5", "output": []}},
    {"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1"}},
    {"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "plan"},
    {"type": "response.output_item.done", "output_index": 0,
     "item": {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA-sealed"}},
    {"type": "response.output_item.added", "output_index": 1,
     "item": {"type": "function_call", "call_id": "call_1", "name": "spawn_agent", "namespace": "multi_agent_v1",
              "arguments": ""}},
    {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '{"a":'},
    {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "1}"},
    {"type": "response.completed", "response": {
        "id": "resp_1", "status": "completed", "output": [],
        "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 64}, "output_tokens": 9,
                  "output_tokens_details": {"reasoning_tokens": 4}, "total_tokens": 109}}},
]
RESPONSES_SSE = b"".join(f"event: {e['type']}\ndata: {msgspec.json.encode(e).decode()}\n\n".encode()
                         for e in RESPONSE_EVENTS)


@pytest.mark.parametrize("size", [len(RESPONSES_SSE), 7])
def test_openais_responses_stream_becomes_our_chunks(size: int) -> None:
    stream = ResponsesStream(created=1)
    chunks = [c for i in range(0, len(RESPONSES_SSE), size) for c in stream.feed(RESPONSES_SSE[i:i + size])]
    chunks += stream.finish()
    assert [c.sequence for c in chunks] == list(range(len(chunks)))
    assert (chunks[0].id, chunks[0].model, chunks[0].role) == ("resp_1", "gpt-5", "assistant")
    assert text_of(chunks, "reasoning") == "plan" and [c.signature for c in chunks if c.signature] == ["gAAAA-sealed"]
    assert whole_calls(chunks) == {0: ("call_1", "multi_agent_v1__spawn_agent", '{"a":1}')}
    last = chunks[-1]
    assert last.done and last.finish_reason == "tool_calls" and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.cached_tokens, last.usage.reasoning_tokens) == (100, 64, 4)


def test_openais_whole_response_and_its_failures() -> None:
    body = msgspec.json.encode({"id": "resp_2", "created_at": 7, "model": "gpt-5", "status": "completed", "output": [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "why"}], "encrypted_content": "gAAAA"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "message", "content": [{"type": "output_text", "text": "Lisbon is sunny.", "annotations": [
            {"type": "url_citation", "start_index": 0, "end_index": 6, "title": "t", "url": "https://x"}]}]}],
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}})
    answer = ResponsesCall(EngineRequestStub, created=1).answer(body)
    [choice] = answer.choices
    assert (choice.content, choice.reasoning, choice.signature, choice.finish_reason) == (
        "Lisbon is sunny.", "why", "gAAAA", "stop")
    assert [(a.start_index, a.end_index, a.url) for a in choice.annotations] == [(0, 6, "https://x")]
    with pytest.raises(EngineFailed) as failed:
        ResponsesCall(EngineRequestStub, created=1).answer(msgspec.json.encode(
            {"status": "failed", "error": {"code": "server_error", "message": "boom"}}))
    assert failed.value.info.code == "server_error"
    cut = ResponsesStream(created=1)
    cut.feed(RESPONSES_SSE[:200])
    with pytest.raises(EngineFailed):
        cut.finish()
