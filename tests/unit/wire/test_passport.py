"""ingress/wire/passport.py: the passport read in place from a request buffer, and the checks on the trace
context and key id it carries on every internal hop."""

from __future__ import annotations

import pytest

from ingress.encoding.embeddings import encode_embedding_request
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.requests import encode_request
from ingress.oai.embeddings import decode_embedding_request
from ingress.wire import read_request
from ingress.wire.passport import (
    MAX_READ_BLOCKS,
    Passport,
    key_id_of,
    model_name,
    prefix_at,
    valid_traceparent,
    valid_tracestate,
)
from unit.encoding.test_passport import API_KEY, TRACEPARENT, chat, user


@pytest.mark.parametrize("api_key", [None, ""])
def test_no_api_key_no_key_id(api_key: str | None) -> None:
    assert key_id_of(api_key) is None


def test_key_id_is_stable_and_distinct_per_key() -> None:
    assert key_id_of(API_KEY) == key_id_of(API_KEY) != key_id_of(API_KEY + "x")


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent id
        TRACEPARENT.upper(),
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        TRACEPARENT[:-1],
        TRACEPARENT + "0",
        " " + TRACEPARENT,
    ],
)
def test_invalid_traceparent_is_refused(value: str | None) -> None:
    assert valid_traceparent(value) is None


def test_traceparent_with_trailing_newline_is_refused() -> None:
    # HTTP header values cannot carry a newline, but valid_traceparent is also the check for other callers,
    # and the value is forwarded as a header on the next hop.
    assert valid_traceparent(TRACEPARENT + "\n") is None


def test_passport_travels_in_the_request_buffer() -> None:
    passport = Passport(tenant_id="t", key_id="k", prompt_tokens_estimate=2**32 - 1, prefix_hash=2**64 - 1,
                        priority=127, deadline_unix_ms=2**63 - 1, traceparent=TRACEPARENT, tracestate="s=1")
    view = read_request(bytes(encode_request(chat(user("hi")), "req-1", passport))).Passport()
    assert (view.TenantId(), view.KeyId(), view.Traceparent(), view.Tracestate()) == (
        b"t", b"k", TRACEPARENT.encode(), b"s=1")
    assert (view.PromptTokensEstimate(), view.PrefixHash(), view.Priority(), view.DeadlineUnixMs()) == (
        2**32 - 1, 2**64 - 1, 127, 2**63 - 1)


@pytest.mark.parametrize(("value", "kept"), [
    ("vendor=a:b", True), ("a=1,b=2", True), ("x" * 512, True),
    ("x" * 513, False), ("", False), ("v=é", False), ("v=1\r\nx: y", False), ("v=\x00", False), (None, False),
])
def test_only_a_well_formed_tracestate_is_forwarded(value: str | None, kept: bool) -> None:
    assert valid_tracestate(value) == (value if kept else None)


def test_a_buffers_prefix_chain_is_read_in_place() -> None:
    request = chat({"role": "system", "content": "be brief " * 100}, user("hello"))
    with_chain = compute_passport(request, RequestMeta(), blocks=True)
    assert with_chain.prefix_blocks is not None and len(with_chain.prefix_blocks) == 2

    assert prefix_at(bytes(encode_request(request, "r", with_chain))) == (tuple(with_chain.prefix_blocks), 1)
    assert prefix_at(bytes(encode_request(request, "r", compute_passport(request, RequestMeta())))) == ((), 0)
    assert prefix_at(bytes(encode_request(request, "r", Passport(prefix_blocks=[], conversation_block=5)))) == (
        (), 5)


def test_a_buffers_model_name_is_read_in_place_whichever_request_it_is() -> None:
    chat_buf = bytes(encode_request(chat(user("hi")), "r", Passport(), "openai", "Qwen/Qwen3-8B"))
    embedding = decode_embedding_request(b'{"model": "text-embedding-3-small", "input": "hi"}')
    embedding_buf = bytes(encode_embedding_request(embedding, "r", Passport(), "openai", "BAAI/bge-m3"))
    assert (model_name(chat_buf), model_name(embedding_buf)) == ("Qwen/Qwen3-8B", "BAAI/bge-m3")
    assert model_name(b"\x00" * 16) == ""  # neither


def test_a_clients_long_chain_is_read_only_so_far() -> None:
    passport = Passport(prefix_blocks=list(range(MAX_READ_BLOCKS + 10)), conversation_block=3)

    blocks, conversation_block = prefix_at(bytes(encode_request(chat(user("hi")), "r", passport)))

    assert (blocks, conversation_block) == (tuple(range(MAX_READ_BLOCKS)), 3)
