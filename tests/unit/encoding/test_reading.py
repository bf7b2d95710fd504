"""A request buffer read back as the client's request (ingress/encoding/reading.py; the chat requests it
reads are round-tripped in tests/property/test_roundtrip.py)."""

from __future__ import annotations

import pytest

from ingress import wire
from ingress.encoding import reading
from ingress.encoding.requests import encode_request
from ingress.oai.codec import decode_chat_request
from unit.encoding.test_requests import PASSPORT


def test_a_chat_request_is_not_read_as_a_text_completion() -> None:
    chat = decode_chat_request(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}')
    with pytest.raises(wire.WireError):
        reading.decode_text_request(bytes(encode_request(chat, "rid", PASSPORT)))
