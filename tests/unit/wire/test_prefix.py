"""ingress/wire/prefix.py: where a prompt's blocks end and the chain of their hashes, pinned across releases,
that the passport carries and cache-affine routing compares."""

from __future__ import annotations

import hashlib

import pytest

from ingress.encoding.passport import RequestMeta, compute_passport, compute_prompts_passport
from ingress.encoding.prefix import chat_text, prompts_text
from ingress.wire import prefix
from ingress.wire.prefix import BLOCK_BYTES, LIMIT_BYTES, PREFIX_BYTES, block_ends
from unit.encoding.test_prefix import SYSTEM, TOOLS, assistant, chain_of, chat, system, user

# --- stable across processes and releases: a golden vector ------------------------------------------


def test_the_chain_of_a_conversation_is_pinned() -> None:
    """Replicas of different releases must agree on these numbers; a change here is a breaking one."""
    request = chat(system(), user("Plan a trip to Lyon."), assistant("Three days: old town, food, river."),
                   user("And the fourth day?"), tools=TOOLS)

    text, first_turn_end = chat_text(request, LIMIT_BYTES, True)

    assert text == (f"system\x1f{SYSTEM}\x1e".encode()
                    + b'\x1dtools\x1f[{"function":{"name":"weather","parameters":{"type":"object"}}}]\x1e'
                    + b"user\x1fPlan a trip to Lyon.\x1e"
                    + b"assistant\x1fThree days: old town, food, river.\x1e"
                    + b"user\x1fAnd the fourth day?\x1e")
    assert (len(text), first_turn_end, block_ends(len(text), first_turn_end)) == (986, 916, [512, 916, 986])
    assert chain_of(request) == ([0x3861F508AA0A2670, 0x3A99C5C0E3563F60, 0x8A1B976A10591193], 1)
    # Each hash is the first 8 bytes of SHA-256 of the text up to its block's end, read little-endian.
    assert [int.from_bytes(hashlib.sha256(text[:end]).digest()[:8], "little") for end in (512, 916, 986)] == (
        chain_of(request)[0])


def test_the_chain_of_legacy_prompts_is_pinned() -> None:
    passport = compute_prompts_passport(["Once upon a time", [1, 2, 3]], RequestMeta(), blocks=True)

    assert prompts_text(["Once upon a time", [1, 2, 3]], LIMIT_BYTES) == (
        b"Once upon a time\x1e\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x1e")
    assert (passport.prefix_blocks, passport.conversation_block) == ([0x6A4A809374905C44], 0)


# --- where blocks end ---------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "first_turn_end", "ends"), [
    pytest.param(0, 0, [], id="empty"),
    pytest.param(10, 0, [10], id="one-short-block"),
    pytest.param(BLOCK_BYTES, 0, [BLOCK_BYTES], id="one-whole-block"),
    pytest.param(2 * BLOCK_BYTES + 1, 0, [BLOCK_BYTES, 2 * BLOCK_BYTES, 2 * BLOCK_BYTES + 1],
                 id="blocks-then-a-short-one"),
    pytest.param(700, 600, [512, 600, 700], id="a-block-ends-at-the-first-turn"),
    pytest.param(2000, 600, [512, 600, 1112, 1624, 2000], id="blocks-count-on-from-the-first-turn"),
    pytest.param(1024, 512, [512, 1024], id="the-first-turn-on-a-boundary"),
    pytest.param(600, 600, [512, 600], id="the-first-turn-ends-the-text"),
])
def test_blocks_end_every_block_and_at_the_first_turn(size: int, first_turn_end: int, ends: list[int]) -> None:
    assert block_ends(size, first_turn_end) == ends


# --- the passport ---------------------------------------------------------------------------------


def test_the_prefix_hash_is_the_chains_hash_of_the_first_4_kib() -> None:
    request = chat(system(), user("Plan a trip. " * 600))
    text = chat_text(request, LIMIT_BYTES, True)[0]
    with_chain = compute_passport(request, RequestMeta(), blocks=True)
    without = compute_passport(request, RequestMeta())

    assert with_chain.prefix_hash == without.prefix_hash == prefix.prefix_hash(text)
    assert with_chain.prefix_hash == int.from_bytes(hashlib.sha256(text[:PREFIX_BYTES]).digest()[:8], "little")
    assert (without.prefix_blocks, without.conversation_block) == (None, 0)  # the chain only where it is read


def test_a_prompt_without_a_user_message_names_its_conversation_by_its_first_block() -> None:
    blocks, index = chain_of(chat(system("x" * 3000)))

    assert index == 0
    assert len(blocks) == -(-len("system\x1f" + "x" * 3000 + "\x1e") // BLOCK_BYTES)
