"""ingress/encoding/requests.py: a message's text, as the passport and the prefix read it, and a legacy text
completion's buffer read back (the chat buffers it encodes are round-tripped in
tests/property/test_roundtrip.py)."""

from __future__ import annotations

import msgspec
import pytest
from bad_completions import completions_body

from ingress import wire
from ingress.encoding import reading
from ingress.encoding.requests import encode_text_request, message_text
from ingress.oai.chat import AssistantMessage, ImagePart, ImageUrl, Message, RefusalPart, TextPart, UserMessage
from ingress.oai.completions import decode_text_request
from ingress.wire.passport import Passport

PASSPORT = Passport(tenant_id="t", key_id="k", prompt_tokens_estimate=3, prefix_hash=7, traceparent="tp")


@pytest.mark.parametrize(
    ("message", "text"),
    [
        pytest.param(UserMessage(content="plain"), "plain", id="string"),
        pytest.param(UserMessage(content=[TextPart("a"), ImagePart(ImageUrl("u")),
                                          TextPart("b")]), "ab", id="parts"),
        pytest.param(AssistantMessage(content=None, tool_calls=[]), "", id="none"),
        pytest.param(AssistantMessage(content=[RefusalPart("no"), TextPart("yes")]), "yes",
                     id="refusal-part-ignored"),
    ],
)
def test_message_text(message: Message, text: str) -> None:
    assert message_text(message) == text


def test_the_request_travels_as_a_text_completion_and_reads_back() -> None:
    request = decode_text_request(completions_body(prompt=[[5, 6], [7]], echo=True, max_tokens=0, best_of=3, n=3,
                                                   suffix="s", stop=["x"], temperature=0.7))
    buf = bytes(encode_text_request(request, "rid", PASSPORT, "self_hosted", "served-name"))
    wire.verify_request(buf)
    view = wire.read_request(buf)
    assert view.TextCompletion() and not view.LegacyFunctions() and view.MessagesLength() == 0
    assert view.ModelName() == b"served-name" and view.UserPrompt() is None
    data = wire.read_request_data(buf)
    assert [p.tokens for p in data.prompts or ()] == [[5, 6], [7]]
    assert (data.echo, data.suffix, data.best_of, data.logprobs_count) == (True, "s", 3, None)
    assert (data.max_tokens, data.max_tokens_set, data.temperature_set) == (0, True, True)
    back = reading.decode_text_request(buf)
    assert back == msgspec.structs.replace(request, model="served-name")
    for logprobs in (0, 5):  # without echo (see oai/test_completions.py)
        asked = decode_text_request(completions_body(logprobs=logprobs))
        assert wire.read_request_data(bytes(encode_text_request(asked, "rid", PASSPORT))).logprobs_count == logprobs
