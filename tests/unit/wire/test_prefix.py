"""The prompt's canonical bytes and their chain of block hashes: what cache-affine routing compares."""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import msgspec
import pytest

from ingress.anthropic.messages_codec import decode_messages
from ingress.anthropic.messages_to_chat import as_chat as messages_as_chat
from ingress.encoding.passport import RequestMeta, compute_passport, compute_prompts_passport
from ingress.encoding.prefix import chat_text, prompts_text
from ingress.oai.chat import ChatCompletionRequest
from ingress.oai.codec import decode_chat_request
from ingress.wire import prefix
from ingress.wire.prefix import BLOCK_BYTES, FIRST_TURN_BYTES, LIMIT_BYTES, PREFIX_BYTES, block_ends

SYSTEM = "You are a terse assistant. " * 30
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]


def chat(*messages: dict[str, Any], **fields: Any) -> ChatCompletionRequest:
    return decode_chat_request(msgspec.json.encode({"model": "m", "messages": list(messages), **fields}))


def system(text: str = SYSTEM) -> dict[str, Any]:
    return {"role": "system", "content": text}


def user(text: str | list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def chain_of(request: ChatCompletionRequest) -> tuple[list[int], int]:
    passport = compute_passport(request, RequestMeta(), blocks=True)
    assert passport.prefix_blocks is not None
    return passport.prefix_blocks, passport.conversation_block


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


# --- what is hashed -------------------------------------------------------------------------------


def test_each_turn_of_a_conversation_extends_the_last_ones_chain() -> None:
    long_answer = "The old town first, then the food halls and a walk along the river. " * 20
    turns = [[system(), user("Plan a trip to Lyon.")]]
    turns.append([*turns[-1], assistant(long_answer), user("And the fourth day?")])
    turns.append([*turns[-1], assistant(long_answer), user("Thanks.")])
    chains = [chain_of(chat(*messages, tools=TOOLS)) for messages in turns]

    conversation = {blocks[index] for blocks, index in chains}
    assert len(conversation) == 1  # every turn has the same hash where its first user message ends
    assert len({index for _, index in chains}) == 1
    for (shorter, _), (longer, _) in itertools.pairwise(chains):
        assert longer[:len(shorter) - 1] == shorter[:-1]  # the shorter's last block may be short
        assert len(longer) > len(shorter)


def test_conversations_behind_one_system_prompt_have_their_own_hash() -> None:
    one = chain_of(chat(system(), user("Plan a trip to Lyon."), tools=TOOLS))
    other = chain_of(chat(system(), user("Plan a trip to Nice."), tools=TOOLS))

    assert one[1] == other[1] == 1
    assert one[0][0] == other[0][0]  # the shared system prompt's block
    assert one[0][1] != other[0][1]  # each conversation's


def test_conversations_behind_a_system_prompt_longer_than_the_limit_still_differ() -> None:
    preamble = system("A long agent preamble with every rule spelt out. " * 1000)  # ~49 KiB
    first = [preamble, user("Fix the failing test in parser.py")]
    turn_one = chain_of(chat(*first))
    turn_two = chain_of(chat(*first, assistant("Done."), user("Now the docs.")))
    other = chain_of(chat(preamble, user("Add a --verbose flag")))

    blocks, index = turn_one
    assert index == LIMIT_BYTES // BLOCK_BYTES == len(blocks) - 1  # the limit's blocks, then the first turn
    assert turn_two == turn_one  # past the limit, later turns add nothing: the conversation is named
    assert other[0][:index] == blocks[:index] and other[0][index] != blocks[index]


def test_a_long_first_user_message_is_hashed_only_so_far_past_the_limit() -> None:
    head = "x" * (LIMIT_BYTES - 100)
    one = chat_text(chat(user(head + "a" * 2 * FIRST_TURN_BYTES)), LIMIT_BYTES, True)
    other = chat_text(chat(user(head + "a" * 2 * FIRST_TURN_BYTES + "b")), LIMIT_BYTES, True)

    assert one == other
    assert len(one[0]) == one[1] == LIMIT_BYTES + FIRST_TURN_BYTES


@pytest.mark.parametrize("changed", [
    pytest.param([system(SYSTEM + "!"), user("Plan a trip to Lyon.")], id="the-system-prompt"),
    pytest.param([system(), user("Plan a trip to Lyon!")], id="the-first-user-message"),
    pytest.param([{"role": "developer", "content": SYSTEM}, user("Plan a trip to Lyon.")], id="a-role"),
    pytest.param([system(), {"role": "user", "content": "Plan a trip to Lyon.", "name": "ann"}], id="a-name"),
    pytest.param([system(), user([{"type": "text", "text": "Plan a trip to Lyon."},
                                  {"type": "image_url", "image_url": {"url": "https://x/lyon.png"}}])],
                 id="an-image"),
])
def test_what_the_engine_sees_changes_the_chain_from_that_block_on(changed: list[dict[str, Any]]) -> None:
    base = chain_of(chat(system(), user("Plan a trip to Lyon.")))

    assert chain_of(chat(*changed))[0][-1] != base[0][-1]


def test_tools_come_after_the_opening_system_messages_and_change_the_chain() -> None:
    without = chat_text(chat(system("s"), user("u")), LIMIT_BYTES, True)[0]
    with_tools = chat_text(chat(system("s"), user("u"), tools=TOOLS), LIMIT_BYTES, True)[0]

    assert without == b"system\x1fs\x1euser\x1fu\x1e"
    assert with_tools.startswith(b"system\x1fs\x1e\x1dtools\x1f[") and with_tools.endswith(b"]\x1euser\x1fu\x1e")


def test_cache_breakpoints_the_engine_never_sees_leave_the_chain_alone() -> None:
    marked = {"type": "text", "text": "Plan a trip to Lyon.", "prompt_cache_breakpoint": {"mode": "explicit"}}

    assert chain_of(chat(system(), user([marked]))) == chain_of(chat(system(), user("Plan a trip to Lyon.")))


def test_a_messages_request_hashes_as_the_chat_request_it_amounts_to() -> None:
    body = {"model": "claude", "max_tokens": 9, "system": [{"type": "text", "text": SYSTEM,
                                                             "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "Plan a trip to Lyon."}]}
    read = messages_as_chat(decode_messages(msgspec.json.encode(body))[0]).request

    assert chain_of(read) == chain_of(chat(system(), user("Plan a trip to Lyon.")))


def test_tool_calls_and_results_are_part_of_the_prompt() -> None:
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Lyon"}'}}]}
    text = chat_text(chat(user("weather?"), call, {"role": "tool", "tool_call_id": "call_1",
                                                            "content": "sunny"}), LIMIT_BYTES, True)[0]

    assert text == (b'user\x1fweather?\x1eassistant\x1f\x1dcall\x1fweather\x1f{"city":"Lyon"}\x1e'
                    b"tool\x1fsunny\x1dcall_1\x1e")


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
