"""ingress/tokens/cache.py: the CountCache counts each message once, never changes a count, and is bounded."""

from __future__ import annotations

import json
import tracemalloc

import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from ingress.oai.codec import decode_chat_request
from ingress.tokens import MAX_EXACT_COUNT_BYTES, CountCache, TokenCounter
from ingress.tokens.chat import O200K
from ingress.tokens.engines import vocabulary
from unit.tokens.test_chat import cookbook_messages


class CountingEngine:
    """o200k, counting how often it is asked and how many characters it read."""

    slowdown = 1

    def __init__(self) -> None:
        self.calls, self.chars = 0, 0

    def count(self, text: str) -> int:
        self.calls, self.chars = self.calls + 1, self.chars + len(text)
        return vocabulary("o200k").count(text)

    def load(self) -> None:
        vocabulary("o200k").load()


def conversation(turns: int) -> list[dict[str, str]]:
    """A chat that grows a turn at a time: its system prompt, then user and assistant messages (English,
    Japanese, an emoji), each over the short texts' length."""
    messages = [{"role": "system", "content": "You are a terse assistant. " * 6}]
    for t in range(turns):
        messages.append({"role": "user", "content": f"Question {t}: how far is the river from the city? " * 3})
        answer = f"回答 {t}: about {t * 7} kilometres 😀, along the road. "
        messages.append({"role": "assistant", "content": answer * 4})
    return messages


def test_a_growing_conversation_counts_as_tiktoken_does_and_only_its_new_turn_is_tokenized(
        tiktoken_encodings: dict[str, tiktoken.Encoding]) -> None:
    engine, cache = CountingEngine(), CountCache()
    counter = TokenCounter("o200k", engine, O200K, MAX_EXACT_COUNT_BYTES, cache)
    for turns in range(1, 9):
        messages = conversation(turns)
        before = engine.calls
        counted = counter.chat(decode_chat_request(json.dumps({"model": "gpt-4o", "messages": messages}).encode()))
        assert counted == cookbook_messages(messages, tiktoken_encodings["o200k"])
        assert engine.calls - before == (3 if turns == 1 else 2) + (3 if turns == 1 else 0)  # new texts; roles once
    assert (cache.misses, cache.hits) == (1 + 2 * 8, sum(2 * t - 1 for t in range(2, 9)))
    assert engine.chars < 2 * sum(len(m["content"]) for m in conversation(8))  # not the 36 turns' sum again


texts_lists = st.lists(st.sampled_from(["", "short", "a sentence of English words. " * 3, "日本語のテキスト。" * 9,
                                        "x" * 300, "don't STOP'S 😶‍🌫️ " * 5, "a\ud800b" * 20]) | st.text(), max_size=8)


@settings(max_examples=200, deadline=None)
@given(texts_lists, texts_lists, st.integers(0, 1200))
def test_the_cache_never_changes_a_count_at_any_byte_limit(first: list[str], second: list[str], limit: int) -> None:
    """The per-request limit cuts at the same byte with the cache as without: a text found in the cache
    spends its bytes all the same, and a text cut by the limit is never remembered as whole."""
    o200k, cache = vocabulary("o200k"), CountCache(entries=4)
    cached = TokenCounter("o200k", o200k, O200K, limit, cache)
    plain = TokenCounter("o200k", o200k, O200K, limit)
    wide = TokenCounter("o200k", o200k, O200K, 10**9, cache)  # the same cache, filled without a limit
    prompts: list[str | list[int]] = [*first, *second]
    wide.texts(list(second))
    assert [cached.texts(prompts) for _ in range(2)] == [plain.texts(prompts)] * 2
    assert cached.texts(list(first)) == plain.texts(list(first))


def test_the_cache_is_bounded_by_its_entries_whatever_the_texts_size() -> None:
    engine, cache = CountingEngine(), CountCache(entries=64)
    texts = [f"{i}: " + "a sentence of English words. " * (2 + i % 50) for i in range(1000)]
    for text in texts:
        assert cache.count(engine, text) == vocabulary("o200k").count(text)
    assert len(cache) == 64 and cache.misses == 1000
    calls = engine.calls
    assert [cache.count(engine, t) for t in texts[-64:]] == [vocabulary("o200k").count(t) for t in texts[-64:]]
    assert engine.calls == calls  # the most recent stayed
    cache.count(engine, texts[0])
    assert engine.calls == calls + 1  # the oldest went


def test_a_cache_entry_holds_a_digest_not_the_text() -> None:
    class Fixed:
        def count(self, text: str) -> int:
            return 12_345

    cache, texts = CountCache(entries=100_000), [f"{i:06d} " + "y" * 2000 for i in range(5_000)]
    tracemalloc.start()
    try:
        for text in texts:
            cache.count(Fixed(), text)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held / len(texts) < 300  # bytes an entry, where each text is 2 KB
