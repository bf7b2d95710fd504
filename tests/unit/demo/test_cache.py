"""The demo's simulated prefix cache: the LRU of blocks, the chain it reads (the passport's, else its own),
the cached tokens it reports and the prefill wait it adds."""

from __future__ import annotations

from typing import Any

import aiohttp
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingress import wire
from ingress.demo import service
from ingress.demo.answer import plan
from ingress.demo.cache import BlockCache, KvCache, KvCacheSettings, Layout, cached_tokens, prompt_chain, prompt_layout
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.prefix import chat_text
from ingress.encoding.requests import encode_request
from ingress.oai.codec import decode_chat_request
from ingress.serve.app import serve_app
from ingress.wire.prefix import BLOCK_BYTES

SYSTEM = "You are the support agent of a travel company. Follow every rule below. " * 40  # ~2.9 KB: 6 blocks


def request(messages: list[dict[str, Any]], *, blocks: bool = True) -> wire.CompletionRequestData:
    """A chat request as the demo reads it, its passport made by the edge's code (with the chain or not)."""
    chat = decode_chat_request(msgspec.json.encode({"model": "m", "messages": messages}))
    passport = compute_passport(chat, RequestMeta(), blocks=blocks)
    return wire.read_request_data(bytes(encode_request(chat, "req-1", passport)))


def conversation(turns: int, topic: str = "My flight to Lyon was cancelled.") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": topic}]
    for turn in range(1, turns):
        messages += [{"role": "assistant", "content": f"Answer {turn}: " + "words " * 60},
                     {"role": "user", "content": f"And then {turn}?"}]
    return messages


def prompt_tokens(req: wire.CompletionRequestData) -> int:
    return plan(req, "req-1").prompt_tokens


# --- the LRU ------------------------------------------------------------------------------------------------

def test_only_the_leading_blocks_held_count() -> None:
    cache = BlockCache(100)
    cache.store([1, 2, 3])
    assert cache.leading([1, 2, 3, 4]) == 3
    assert cache.leading([1, 9, 3]) == 1  # a later block without the one before it is no use
    assert cache.leading([9, 1, 2]) == 0


def test_the_least_recently_used_go_first_and_a_prompts_tail_before_its_head() -> None:
    cache = BlockCache(4)
    cache.store([1, 2, 3, 4])
    cache.store([5, 6])  # evicts 4 and 3, the first prompt's tail
    assert (len(cache), cache.leading([1, 2, 3, 4])) == (4, 2)
    cache.store([1, 2])  # served again: now 6, then 5, are the oldest
    cache.store([7])
    assert 6 not in cache and 5 in cache and cache.leading([1, 2]) == 2


@given(st.integers(1, 20), st.lists(st.lists(st.integers(0, 50), max_size=12, unique=True), max_size=30))
def test_the_cache_never_holds_more_than_its_capacity(capacity: int, chains: list[list[int]]) -> None:
    cache = BlockCache(capacity)
    for chain in chains:
        cache.store(chain)
        assert len(cache) <= capacity
        assert cache.leading(chain) == min(len(chain), capacity)  # a chain just stored: its head at least


# --- cached tokens and the prefill wait ----------------------------------------------------------------------

# Two messages: 1024 bytes of 90 tokens, then 1024 of 10 (blocks of 512 bytes end at 512, 1024, 1536, 2048).
TWO = Layout(b"x" * 2048, 0, [1024, 2048], [90, 100])


@pytest.mark.parametrize(("held", "expected"), [
    (0, 0),  # nothing held
    (1, 45),  # half the first message: half its tokens
    (2, 90),  # the whole first message
    (3, 95),
    (4, 99),  # all of it: all but the last token, which an engine always computes
    (9, 99),  # a passport's longer chain covers no more than the prompt
])
def test_cached_tokens_are_the_tokens_the_held_blocks_cover(held: int, expected: int) -> None:
    assert cached_tokens(100, TWO, held) == expected


def test_a_conversations_later_turns_read_its_earlier_ones_and_wait_less() -> None:
    kv = KvCache(KvCacheSettings(blocks=1000, prefill_s_per_token=0.001))
    first = request(conversation(1))
    fresh = kv.prefill(first, prompt_tokens(first))
    assert fresh.cached_tokens == 0 and fresh.delay_s == pytest.approx(0.001 * prompt_tokens(first))

    previous = prompt_tokens(first)
    for turns in (2, 3, 4):
        later = request(conversation(turns))
        total = prompt_tokens(later)
        prefill = kv.prefill(later, total)
        assert 0.5 * total < prefill.cached_tokens < total  # most of it: the turns before,
        assert prefill.cached_tokens <= previous  # never more than they had
        previous = total
        assert prefill.delay_s == pytest.approx(0.001 * (total - prefill.cached_tokens))

    other = request(conversation(2, topic="Where is my bag?"))  # the same system prompt: its blocks only
    shared = kv.prefill(other, prompt_tokens(other))
    assert 0 < shared.cached_tokens < 0.9 * prompt_tokens(other)


def test_a_cache_too_small_for_a_prompt_keeps_its_head() -> None:
    kv = KvCache(KvCacheSettings(blocks=3))
    req = request(conversation(4))
    kv.prefill(req, prompt_tokens(req))
    assert 0 < kv.prefill(req, prompt_tokens(req)).cached_tokens < prompt_tokens(req) // 2


def test_with_the_cache_off_nothing_is_cached_and_every_token_waits() -> None:
    kv = KvCache(KvCacheSettings(blocks=0, prefill_s_per_token=0.002))
    req = request(conversation(2))
    for _ in range(2):
        prefill = kv.prefill(req, prompt_tokens(req))
        assert prefill.cached_tokens == 0 and prefill.delay_s == pytest.approx(0.002 * prompt_tokens(req))


# --- the chain: the passport's first ---------------------------------------------------------------------------

def test_the_passports_chain_is_read_and_the_demos_own_only_past_its_end() -> None:
    req = request(conversation(3))
    assert req.passport is not None and req.passport.prefix_blocks
    chain = prompt_chain(req, prompt_layout(req))
    given = list(req.passport.prefix_blocks)
    assert chain[:len(given)] == given
    assert len(chain) >= len(given)


def test_past_the_passports_end_the_demo_hashes_the_rest_itself() -> None:
    long = [*conversation(2), {"role": "assistant", "content": "x " * 12_000}, {"role": "user", "content": "ok?"}]
    changed = [*long[:-1], {"role": "user", "content": "no?"}]
    one, two = request(long), request(changed)
    assert one.passport is not None and two.passport is not None
    assert one.passport.prefix_blocks == two.passport.prefix_blocks  # the edge hashed their first 16 KiB only
    chains = [prompt_chain(r, prompt_layout(r)) for r in (one, two)]
    assert len(chains[0]) > len(one.passport.prefix_blocks or ()) + 20
    assert chains[0][:-1] == chains[1][:-1] and chains[0][-1] != chains[1][-1]  # they part at the last block


def test_without_a_chain_in_the_passport_the_demo_hashes_the_prompt_itself() -> None:
    kv = KvCache(KvCacheSettings(blocks=1000))
    first, second = request(conversation(1), blocks=False), request(conversation(3), blocks=False)
    assert first.passport is None or not first.passport.prefix_blocks
    kv.prefill(first, prompt_tokens(first))
    assert kv.prefill(second, prompt_tokens(second)).cached_tokens > len(SYSTEM) // BLOCK_BYTES


def test_a_legacy_prompts_text_is_its_own_layout() -> None:
    req = wire.CompletionRequestData(text_completion=True, prompts=[wire.PromptInputData(text="abc de"),
                                                                     wire.PromptInputData(tokens=[1, 2])])
    assert prompt_layout(req) == Layout(b"abc de\x1e\x01\x00\x00\x00\x02\x00\x00\x00\x1e", 0, [7, 16], [2, 4])


def test_a_chat_prompts_layout_counts_the_tokens_the_demo_bills() -> None:
    req = request([{"role": "system", "content": "be brief"}, {"role": "user", "content": "one two three"},
                   {"role": "assistant", "content": "four"}, {"role": "user", "content": "five six"}])
    layout = prompt_layout(req)
    assert layout.tokens == [2, 5, 6, 8] and layout.tokens[-1] == prompt_tokens(req)
    assert layout.first_turn_end == layout.ends[1] and layout.ends[-1] == len(layout.text)
    assert layout.tokens_before(layout.ends[1]) == 5 and layout.tokens_before(0) == 0


def test_a_plain_chats_layout_is_the_edges_byte_for_byte_so_the_passports_blocks_end_where_the_demos_do() -> None:
    messages = conversation(4)
    chat = decode_chat_request(msgspec.json.encode({"model": "m", "messages": messages}))
    layout = prompt_layout(request(messages))
    assert (layout.text, layout.first_turn_end) == chat_text(chat, 1 << 20, True)


# --- the service: the usage it answers and the wait before its first token ------------------------------------

async def test_the_service_answers_a_whole_answer_and_a_stream_with_the_cached_tokens() -> None:
    """(The wait before the first token is KvCache.prefill's delay_s, tested above: not timed here.)"""
    settings = KvCacheSettings(blocks=100, prefill_s_per_token=0.000001)
    chat = decode_chat_request(msgspec.json.encode({"model": "m", "messages": conversation(2)}))
    passport = compute_passport(chat, RequestMeta(), blocks=True)
    body = bytes(encode_request(chat, "req-1", passport))
    streamed = bytes(encode_request(msgspec.structs.replace(chat, stream=True), "req-2", passport))
    async with serve_app(service.create_demo_app(kv_cache=settings), "127.0.0.1", 0) as url, \
            aiohttp.ClientSession() as http:
        async with http.post(url + wire.COMPLETE_PATH, data=body) as response:
            first = wire.decode_response(await response.read()).usage
        async with http.post(url + wire.COMPLETE_PATH, data=streamed) as response:
            frames = list(wire.FrameDecoder().feed(await response.read()))
    usage = wire.decode_chunk(frames[-1][4:]).usage  # a frame's size prefix stripped
    assert first is not None and usage is not None
    assert first.cached_tokens == 0 and 0 < usage.cached_tokens < usage.prompt_tokens == first.prompt_tokens
