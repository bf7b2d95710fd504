"""ingress.tokens: a request's counter, exact while its byte budget lasts and the estimate after, so a huge
body costs a bounded time; `exact=False` runs no tokenizer."""

from __future__ import annotations

import json
import time

import pytest

from ingress.oai.codec import decode_chat_request
from ingress.tokens import MAX_EXACT_COUNT_BYTES, CountCache, TokenCounter, counter_for, estimate
from ingress.tokens.chat import O200K, count_chat
from ingress.tokens.engines import estimate_bytes, vocabulary
from unit.tokens.test_cache import CountingEngine, conversation


def test_texts_count_strings_and_token_id_lists() -> None:
    counter = counter_for("text-embedding-3-small")
    assert counter.texts(["hello world", [1, 2, 3], "", [7]]) == vocabulary("cl100k").count("hello world") + 4
    assert counter_for("some-model").texts([[5] * 100, "abc"]) == 100 + estimate("abc")


# --- bounded cost -------------------------------------------------------------------------------------

ADVERSARIAL = {  # bench/tokens.py measured each count, with the default limit, in thread CPU time
    "1M-char word": ("".join("abcdefghijklmnopqrstuvwxyz"[i * 7 % 26] for i in range(1_000_000)), 0.0072),
    "2 MB random Unicode": ("".join(chr(0x4E00 + i * 7919 % 20000) for i in range(700_000)), 0.0088),
    "2 MB one character": ("x" * 2_097_152, 0.0019),
}


@pytest.mark.parametrize("what", sorted(ADVERSARIAL))
def test_a_huge_body_is_counted_in_bounded_time(what: str) -> None:
    text, measured = ADVERSARIAL[what]
    counter = counter_for("gpt-4o")
    start = time.thread_time()
    counted = counter.text(text)
    spent = time.thread_time() - start
    assert spent < 3 * max(measured, 0.005), f"{spent * 1000:.1f} ms"  # 3x what was measured (5 ms at least)
    data = text.encode()
    head = data[:MAX_EXACT_COUNT_BYTES].decode("utf-8", "ignore")
    assert counted == vocabulary("o200k").count(head) + estimate_bytes(data[MAX_EXACT_COUNT_BYTES:])


def test_past_the_limit_texts_fall_back_to_the_estimate() -> None:
    small, big = "short and exact. " * 10, "a sentence of English words. " * 4000
    o200k = vocabulary("o200k")
    counter = counter_for("gpt-4o", max_exact_bytes=1000)
    assert counter.texts([small, big, small]) == o200k.count(small) + o200k.count(big[:1000 - len(small)]) + \
        estimate(big[1000 - len(small):]) + estimate(small)
    assert counter_for("gpt-4o", max_exact_bytes=0).text(big) == estimate(big)
    assert counter_for("gpt-4o").text(big) != estimate(big)  # below the default limit's reach: mostly exact
    request = decode_chat_request(json.dumps({"model": "gpt-4o", "messages": [
        {"role": "user", "content": big}, {"role": "user", "content": small}]}).encode())
    assert counter_for("gpt-4o", max_exact_bytes=0).chat(request) == 3 + 2 * (3 + estimate("user")) + \
        estimate(big) + estimate(small)


def test_the_estimate_alone_runs_no_tokenizer() -> None:
    engine = CountingEngine()
    counter = TokenCounter("o200k", engine, O200K, MAX_EXACT_COUNT_BYTES, CountCache())
    messages = conversation(3)
    request = decode_chat_request(json.dumps({"model": "gpt-4o", "messages": messages}).encode())
    estimated = counter.chat(request, exact=False)
    assert estimated == count_chat(request, estimate, O200K) >= counter.chat(request)  # the format's overhead
    assert counter.texts(["hello world", [1, 2]], exact=False) == estimate("hello world") + 2
    assert counter.text("hello world", exact=False) == estimate("hello world")
    engine.calls = 0
    counter.chat(request, exact=False)
    assert engine.calls == 0
