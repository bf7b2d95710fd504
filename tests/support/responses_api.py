"""Responses API requests and chat chunks for the unit tests of ingress/oai/responses_codec.py,
responses_to_chat.py, ingress/translate/responses.py and responses_events.py: a request by its fields,
streamed chunks, a sealer, and what a well-formed event stream is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET

from ingress.oai import chat_answers
from ingress.oai.responses import Call
from ingress.oai.responses_answers import ResponseEvent
from ingress.oai.responses_codec import decode_responses_request
from ingress.oai.sealing import Kind, Sealed, Sealer, new_key


def call(**fields: Any) -> Call:
    return decode_responses_request(msgspec.json.encode({"model": "m", "input": "hi", **fields}))


def chunk(content: str | None = None, *, refusal: str | None = None,
          tools: list[chat_answers.ToolCallDeltaOut] | None = None,
          finish: str | None = None) -> chat_answers.ChatCompletionChunk:
    delta = chat_answers.DeltaOut(content=content if content is not None else UNSET,
                                  refusal=refusal if refusal is not None else UNSET, tool_calls=tools or UNSET)
    choice = chat_answers.ChunkChoiceOut(index=0, delta=delta, finish_reason=finish)
    return chat_answers.ChatCompletionChunk(id="x", created=1, model="m", choices=[choice])


def tool(index: int, arguments: str, *, id: str | None = None,
         name: str | None = None) -> chat_answers.ToolCallDeltaOut:
    function = chat_answers.FunctionDeltaOut(name=name if name is not None else UNSET, arguments=arguments)
    return chat_answers.ToolCallDeltaOut(index=index, id=id if id is not None else UNSET,
                                         type="function" if id is not None else UNSET, function=function)


def check_well_formed(events: list[Any]) -> None:
    """What the SDK's accumulator insists on: numbered in order, an item added before its deltas and
    done after them, one lifecycle id, and the last event a whole response."""
    assert [e.sequence_number for e in events] == list(range(len(events)))
    open_items: set[int] = set()
    for e in events:
        if e.type == "response.output_item.added":
            assert e.output_index not in open_items
            open_items.add(e.output_index)
        elif e.type == "response.output_item.done":
            open_items.remove(e.output_index)
        elif hasattr(e, "output_index"):
            assert e.output_index in open_items, e
    assert not open_items
    assert {e.response.id for e in events if isinstance(e, ResponseEvent)} == {"resp_r"}


CODEX_FIRST_TURN = Path(__file__).resolve().parents[1] / "fixtures" / "codex" / "first_turn.json"


SEALER = Sealer([("k1", new_key())])


def seal(kind: Kind, text: str, own: str | None = None) -> str:
    return SEALER.seal(kind, Sealed(text=text, provider="self_hosted", model="qwen3"))


def thinking(text: str) -> chat_answers.ChatCompletionChunk:
    delta = chat_answers.DeltaOut(reasoning_content=text)
    return chat_answers.ChatCompletionChunk(id="x", created=1, model="m",
                                            choices=[chat_answers.ChunkChoiceOut(index=0, delta=delta)])


CODEX_LIKE = {"reasoning": {"summary": "auto"}, "include": ["reasoning.encrypted_content"], "store": False}


WEATHER_TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
