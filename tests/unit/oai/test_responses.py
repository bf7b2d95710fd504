"""The Responses API request's types (ingress/oai/responses.py): strict about unknown fields, `is_set` for
the opaque ones, and what a decoded `Call` says of itself."""

from __future__ import annotations

import msgspec
import pytest
from msgspec import Raw
from responses_api import call

from ingress.oai.chat import NO_JSON
from ingress.oai.responses import InputText, ResponsesRequest, is_set


@pytest.mark.parametrize(("raw", "expected"), [(NO_JSON, False), (Raw(b"null"), False), (Raw(b"{}"), True),
                                               (Raw(b"0"), True), (Raw(b'""'), True)])
def test_an_opaque_field_is_set_unless_left_out_or_null(raw: Raw, expected: bool) -> None:
    assert is_set(raw) is expected


def test_a_field_left_out_is_not_set_and_a_given_one_is() -> None:
    request = msgspec.json.decode(b'{"model": "m", "input": "hi", "prompt": null, "client_metadata": {"a": 1}}',
                                  type=ResponsesRequest)
    assert not is_set(request.conversation) and not is_set(request.prompt) and is_set(request.client_metadata)


def test_an_unknown_field_is_refused_not_dropped() -> None:
    with pytest.raises(msgspec.ValidationError, match="unknown field `colour`"):
        msgspec.json.decode(b'{"model": "m", "input": "hi", "colour": "red"}', type=ResponsesRequest)
    with pytest.raises(msgspec.ValidationError, match="unknown field `bold`"):
        msgspec.json.decode(b'{"type": "input_text", "text": "t", "bold": true}', type=InputText)


def test_a_call_is_compacting_only_when_its_last_item_is_the_trigger() -> None:
    assert call(input=[{"role": "user", "content": "q"}, {"type": "compaction_trigger"}]).compacting
    assert not call().compacting  # a bare string input
    assert not call(input=[{"role": "user", "content": "q"}]).compacting


def test_sealed_reasoning_is_asked_by_include() -> None:
    assert call(include=["reasoning.encrypted_content"]).sealed_reasoning
    assert not call(include=["message.output_text.logprobs"]).sealed_reasoning
    assert not call().sealed_reasoning


def test_the_summary_asked_for_by_either_name() -> None:
    assert call(reasoning={"summary": "detailed"}).summary == "detailed"
    assert call(reasoning={"generate_summary": "concise"}).summary == "concise"
    assert call(reasoning={"effort": "low"}).summary is None
    assert call().summary is None


def test_logprobs_by_include_or_top_logprobs() -> None:
    assert call(include=["message.output_text.logprobs"]).logprobs
    assert call(top_logprobs=2).logprobs
    assert not call(top_logprobs=0).logprobs
    assert not call().logprobs
