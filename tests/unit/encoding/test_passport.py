"""ingress/encoding/passport.py: the passport the edge computes once per request from the client's request and
headers: a key id and never the key, the prefix hash, the token estimate, the trace context."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
from bad_embeddings import embeddings_body
from bad_requests import body

from ingress.encoding.passport import (
    RequestMeta,
    compute_embedding_passport,
    compute_passport,
    compute_prompts_passport,
)
from ingress.encoding.requests import encode_request
from ingress.oai.chat import ChatCompletionRequest
from ingress.oai.codec import decode_chat_request
from ingress.oai.embeddings import decode_embedding_request
from ingress.tokens import TokenCounter, counter_for
from ingress.wire import read_request
from ingress.wire.passport import new_traceparent, valid_traceparent
from ingress.wire.prefix import PREFIX_BYTES
from unit.tokens.test_chat import JARGON

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


def test_header_facts_pass_through() -> None:
    meta = RequestMeta(tenant_id="org-1", priority=7, timeout_ms=250)
    passport = compute_passport(chat(user("hi")), meta, now=1_700_000_000.5)
    assert (passport.tenant_id, passport.priority, passport.deadline_unix_ms) == ("org-1", 7, 1_700_000_000_750)
    assert compute_passport(chat(user("hi")), RequestMeta(), now=1_700_000_000.5).deadline_unix_ms == 0


@pytest.mark.parametrize("name", ["x-session-id", "X-Session-Id"])
def test_a_routes_affinity_header_is_found_whatever_its_case(name: str) -> None:
    meta = RequestMeta(affinity_headers=(("x-session-id", "s-1"), ("x-tenant-session", "t-2")))

    assert meta.header(name) == "s-1"
    assert (meta.header("x-other"), meta.header(None)) == (None, None)


def test_the_passport_carries_the_count() -> None:
    request = decode_chat_request(json.dumps({"model": "gpt-4o", "messages": JARGON}).encode())
    counter: TokenCounter = counter_for("gpt-4o")
    assert compute_passport(request, RequestMeta(), counter=counter).prompt_tokens_estimate == 124
    assert compute_passport(request, RequestMeta()).prompt_tokens_estimate == -(-sum(
        len(m["content"]) for m in JARGON) // 4)  # no counter: characters / 4, as before
    prompts: list[str | list[int]] = ["hello world", [1, 2, 3]]
    assert compute_prompts_passport(prompts, RequestMeta(), counter=counter).prompt_tokens_estimate == 2 + 3


def test_an_embedding_requests_passport_estimates_texts_and_counts_token_ids() -> None:
    meta = RequestMeta(api_key="sk-1", tenant_id="t-1")
    texts = compute_embedding_passport(decode_embedding_request(embeddings_body(input=["abcd" * 3, "ab"])), meta)
    tokens = compute_embedding_passport(decode_embedding_request(embeddings_body(input=[[1, 2], [3]])), meta)
    assert (texts.prompt_tokens_estimate, tokens.prompt_tokens_estimate) == (4, 3)
    assert texts.tenant_id == "t-1" and texts.key_id and texts.traceparent
    again = compute_embedding_passport(decode_embedding_request(embeddings_body(input=["abcd" * 3, "ab"])), meta)
    assert again.prefix_hash == texts.prefix_hash != tokens.prefix_hash
