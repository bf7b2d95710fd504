"""The passport: what the edge computes once per request and carries on every internal hop."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest
from bad_requests import body

from ingress.encoding.embeddings import encode_embedding_request
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.requests import encode_request, message_text
from ingress.oai.chat import (
    AssistantMessage,
    ChatCompletionRequest,
    ImagePart,
    ImageUrl,
    Message,
    RefusalPart,
    TextPart,
    UserMessage,
)
from ingress.oai.codec import decode_chat_request
from ingress.oai.embeddings import decode_embedding_request
from ingress.wire import read_request
from ingress.wire.passport import (
    MAX_READ_BLOCKS,
    Passport,
    key_id_of,
    model_name,
    new_traceparent,
    prefix_at,
    valid_traceparent,
    valid_tracestate,
)
from ingress.wire.prefix import PREFIX_BYTES

API_KEY = "sk-proj-5up3r53cr3tK3yTh4tMu5tN3v3rL34v3Th33dg3"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACEPARENT_SHAPE = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-01$")


def chat(*messages: dict[str, Any], **fields: Any) -> ChatCompletionRequest:
    return decode_chat_request(body(messages=list(messages), **fields))


def user(text: str | list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_api_key_never_reaches_the_buffer() -> None:
    request = chat({"role": "system", "content": "be brief"}, user("hello"))
    passport = compute_passport(request, RequestMeta(api_key=API_KEY, tenant_id="proj-1"))
    buf = bytes(encode_request(request, "req-1", passport))
    for form in (API_KEY, API_KEY[3:], API_KEY[-16:], API_KEY.encode().hex()):
        assert form.encode() not in buf
    assert passport.key_id == hashlib.blake2b(API_KEY.encode(), digest_size=8).hexdigest()
    view = read_request(buf).Passport()
    assert (view.KeyId(), view.TenantId()) == (passport.key_id.encode(), b"proj-1")


@pytest.mark.parametrize("api_key", [None, ""])
def test_no_api_key_no_key_id(api_key: str | None) -> None:
    assert key_id_of(api_key) is None


def test_key_id_is_stable_and_distinct_per_key() -> None:
    assert key_id_of(API_KEY) == key_id_of(API_KEY) != key_id_of(API_KEY + "x")


def test_prefix_hash_is_stable_across_calls() -> None:
    request, meta = chat(user("hello")), RequestMeta()
    hashes = {compute_passport(request, meta).prefix_hash for _ in range(3)}
    hashes.add(compute_passport(chat(user("hello")), RequestMeta(api_key="other", priority=5)).prefix_hash)
    hashes.add(compute_passport(chat(user("hello"), temperature=0.1, seed=3), meta).prefix_hash)
    assert len(hashes) == 1
    assert 0 <= hashes.pop() < 2**64


@pytest.mark.parametrize(
    "other",
    [
        pytest.param([user("hello!")], id="different-text"),
        pytest.param([{"role": "system", "content": "hello"}], id="different-role"),
        pytest.param([user("hel"), user("lo")], id="same-text-split-differently"),
        pytest.param([user("hello"), user("")], id="one-more-message"),
    ],
)
def test_prefix_hash_differs_for_different_prompts(other: list[dict[str, Any]]) -> None:
    meta = RequestMeta()
    assert compute_passport(chat(user("hello")), meta).prefix_hash != compute_passport(chat(*other), meta).prefix_hash


def test_prefix_hash_covers_only_the_leading_bytes() -> None:
    head = "x" * PREFIX_BYTES
    a, b = chat(user(head + "tail one")), chat(user(head + "tail two"))
    assert compute_passport(a, RequestMeta()).prefix_hash == compute_passport(b, RequestMeta()).prefix_hash


@pytest.mark.parametrize(
    ("messages", "chars"),
    [
        pytest.param([{"role": "system", "content": "be brief"}, user("hello")], 8 + 5, id="two-messages"),
        pytest.param([user("")], 0, id="empty-text"),
        pytest.param([user("é🚀")], 2, id="characters-not-bytes"),
        pytest.param([user([{"type": "text", "text": "ab"}, {"type": "image_url", "image_url": {"url": "u"}},
                            {"type": "text", "text": "cd"}])], 4, id="text-parts-only"),
        pytest.param([user("x" * 1_000_001)], 1_000_001, id="long-prompt"),
    ],
)
def test_prompt_token_estimate_is_a_quarter_of_the_characters(messages: list[dict[str, Any]], chars: int) -> None:
    estimate = compute_passport(chat(*messages), RequestMeta()).prompt_tokens_estimate
    assert estimate == -(-chars // 4)


def test_traceparent_is_generated_when_absent() -> None:
    first = compute_passport(chat(user("hi")), RequestMeta()).traceparent
    second = compute_passport(chat(user("hi")), RequestMeta()).traceparent
    assert first is not None and second is not None
    assert TRACEPARENT_SHAPE.match(first) and valid_traceparent(first) == first
    assert first != second
    assert TRACEPARENT_SHAPE.match(new_traceparent())


def test_valid_traceparent_and_tracestate_are_kept() -> None:
    meta = RequestMeta(traceparent=TRACEPARENT, tracestate="vendor=a:b")
    passport = compute_passport(chat(user("hi")), meta)
    assert (passport.traceparent, passport.tracestate) == (TRACEPARENT, "vendor=a:b")


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


def test_header_facts_pass_through() -> None:
    meta = RequestMeta(tenant_id="org-1", priority=7, timeout_ms=250)
    passport = compute_passport(chat(user("hi")), meta, now=1_700_000_000.5)
    assert (passport.tenant_id, passport.priority, passport.deadline_unix_ms) == ("org-1", 7, 1_700_000_000_750)
    assert compute_passport(chat(user("hi")), RequestMeta(), now=1_700_000_000.5).deadline_unix_ms == 0


def test_passport_travels_in_the_request_buffer() -> None:
    passport = Passport(tenant_id="t", key_id="k", prompt_tokens_estimate=2**32 - 1, prefix_hash=2**64 - 1,
                        priority=127, deadline_unix_ms=2**63 - 1, traceparent=TRACEPARENT, tracestate="s=1")
    view = read_request(bytes(encode_request(chat(user("hi")), "req-1", passport))).Passport()
    assert (view.TenantId(), view.KeyId(), view.Traceparent(), view.Tracestate()) == (
        b"t", b"k", TRACEPARENT.encode(), b"s=1")
    assert (view.PromptTokensEstimate(), view.PrefixHash(), view.Priority(), view.DeadlineUnixMs()) == (
        2**32 - 1, 2**64 - 1, 127, 2**63 - 1)


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


@pytest.mark.parametrize("name", ["x-session-id", "X-Session-Id"])
def test_a_routes_affinity_header_is_found_whatever_its_case(name: str) -> None:
    meta = RequestMeta(affinity_headers=(("x-session-id", "s-1"), ("x-tenant-session", "t-2")))

    assert meta.header(name) == "s-1"
    assert (meta.header("x-other"), meta.header(None)) == (None, None)
