"""An engine's JSON read leniently (ingress/bridges/openai_json.py): what each engine's fields say in the
contract's terms, and an error in any engine's shape."""

from __future__ import annotations

import msgspec
import pytest

from ingress.bridges.dialect import EngineFailed
from ingress.bridges.openai_json import (
    EngineUsage,
    Function,
    Message,
    Timings,
    ToolCall,
    arguments_of,
    calls_of,
    finish_of,
    read_engine,
    reasoning_of,
    usage_of,
)


def test_usage_fills_the_total_and_takes_llama_cpps_cached_tokens_when_openais_are_absent() -> None:
    usage = usage_of(EngineUsage(prompt_tokens=10, completion_tokens=4), Timings(cache_n=6))
    assert usage is not None and (usage.total_tokens, usage.cached_tokens) == (14, 6)
    assert usage_of(None) is None


@pytest.mark.parametrize(("reason", "finish"), [("eos", "stop"), ("end_turn", "stop"), ("max_tokens", "length"),
                                                ("function_call", "tool_calls"), ("content_filter", "content_filter"),
                                                ("something_new", "stop"), (None, None)])
def test_finish_reasons_of_every_engine_are_the_contracts(reason: str | None, finish: str | None) -> None:
    assert finish_of(reason) == finish


def test_arguments_are_text_whether_sent_as_a_string_or_as_ollamas_object() -> None:
    assert arguments_of(msgspec.Raw(b'"{\\"a\\": 1}"')) == '{"a": 1}'
    assert arguments_of(msgspec.Raw(b'{"a": 1}')) == '{"a":1}'
    assert arguments_of(msgspec.Raw(b"null")) is None and arguments_of(None) is None


def test_one_call_object_a_legacy_function_call_and_either_reasoning_field_are_read() -> None:
    tgi = Message(tool_calls=ToolCall(index=0, function=Function(name="f")), function_call=Function(name="g"))
    assert [c.function.name for c in calls_of(tgi) if c.function is not None] == ["f", "g"]
    assert (reasoning_of(Message(reasoning="r")), reasoning_of(Message(reasoning_content="rc", reasoning="r")),
            reasoning_of(Message())) == ("r", "rc", None)


@pytest.mark.parametrize("body", [b'{"error": {"message": "no", "type": "invalid_request_error"}}',
                                  b'{"object": "error", "message": "no", "type": "BadRequestError", "code": 400}',
                                  b"not json"])
def test_an_error_in_any_engines_shape_or_an_unreadable_body_is_the_engines_failure(body: bytes) -> None:
    with pytest.raises(EngineFailed):
        read_engine(body)


def test_a_well_formed_answer_is_read_with_unknown_fields_ignored() -> None:
    answer = read_engine(b'{"id": "x", "choices": [{"index": 0, "message": {"content": "hi"}}], "new_field": 1}')
    assert answer.id == "x" and answer.choices is not None and answer.choices[0].message is not None
    assert answer.choices[0].message.content == "hi"
