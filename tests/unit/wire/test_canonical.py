"""A request's canonical bytes (ingress/wire/canonical.py): what only one exchange carries is left out,
everything the service is asked is kept, and which requests are deterministic."""

from __future__ import annotations

import json
from typing import Any

from ingress.encoding.embeddings import encode_embedding_request
from ingress.encoding.requests import encode_messages_request, encode_request, encode_text_request
from ingress.oai.codec import decode_chat_request
from ingress.oai.completions import decode_text_request
from ingress.oai.embeddings import decode_embedding_request
from ingress.wire.canonical import canonical, deterministic
from ingress.wire.passport import Passport

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}], "temperature": 0}


def chat(**changes: Any) -> bytes:
    return json.dumps({**CHAT, **changes}).encode()


def encoded(body: bytes, request_id: str = "r1", passport: Passport | None = None, model: str = "gpt-4o") -> bytes:
    return bytes(encode_request(decode_chat_request(body), request_id, passport or Passport(), "openai", model))


def test_the_request_id_passport_and_stream_flags_are_left_out() -> None:
    one = canonical(encoded(chat()))
    other = canonical(encoded(chat(stream=True, stream_options={"include_usage": True, "include_obfuscation": False}),
                              "another-request", Passport(tenant_id="t", key_id="k", prompt_tokens_estimate=99,
                                                          traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01")))
    assert one == other
    assert one.deterministic


def test_whatever_the_service_is_asked_is_kept() -> None:
    base = canonical(encoded(chat())).data
    for changed in (chat(messages=[{"role": "user", "content": "hello!"}]), chat(max_tokens=5), chat(seed=1),
                    chat(user="u"), chat(tools=[{"type": "function", "function": {"name": "f"}}]),
                    chat(temperature=0.0, top_p=0.5), chat(metadata={"a": "b"})):
        assert canonical(encoded(changed)).data != base
    assert canonical(encoded(chat(), model="gpt-4o-2024-08-06")).data != base  # the upstream model's name


def test_deterministic_means_temperature_zero_sent_or_a_seed() -> None:
    unset = dict(CHAT)
    del unset["temperature"]
    for body, expected in ((chat(), True), (chat(seed=7, temperature=1), True), (chat(seed=0), True),
                           (chat(temperature=0.2), False), (json.dumps(unset).encode(), False)):  # the default is 1
        assert canonical(encoded(body)).deterministic is expected
        assert deterministic(encoded(body)) is expected


def test_a_legacy_completion_and_embeddings() -> None:
    def text(**changes: Any) -> bytes:
        request = decode_text_request(json.dumps({"model": "m", "prompt": "hi", "temperature": 0, **changes}).encode())
        return bytes(encode_text_request(request, "r", Passport(), "openai", "m"))

    assert canonical(text()) == canonical(text(stream=True))
    assert canonical(text()).data != canonical(text(prompt="ho")).data

    def embedding(**changes: Any) -> bytes:
        request = decode_embedding_request(json.dumps({"model": "e", "input": ["a"], **changes}).encode())
        return bytes(encode_embedding_request(request, "r", Passport(), "openai", "e"))

    assert canonical(embedding()) == canonical(embedding(encoding_format="base64"))  # only how vectors travel
    assert canonical(embedding()).data != canonical(embedding(input=["b"])).data
    assert canonical(embedding()).deterministic


def test_a_messages_request_carried_whole_is_kept_but_for_its_stream_member() -> None:
    request = decode_chat_request(chat())

    def messages(body: dict[str, Any]) -> bytes:
        return bytes(encode_messages_request(request, "r", Passport(), "anthropic", "claude",
                                             anthropic_json=json.dumps(body), anthropic_version="2023-06-01"))

    sent = {"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": "hello"}]}
    assert canonical(messages(sent)) == canonical(messages({**sent, "stream": True}))
    assert canonical(messages(sent)).data != canonical(messages({**sent, "thinking": {"type": "disabled"}})).data
