"""ingress/encoding/requests.py: a message's text, as the passport and the prefix read it (the buffers it
encodes are round-tripped in tests/property/test_roundtrip.py)."""

from __future__ import annotations

import pytest

from ingress.encoding.requests import message_text
from ingress.oai.chat import (
    AssistantMessage,
    ImagePart,
    ImageUrl,
    Message,
    RefusalPart,
    TextPart,
    UserMessage,
)


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
