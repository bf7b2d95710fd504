"""ingress/encoding/prefix.py: a prompt's canonical bytes, what an engine sees of it in the order it sees it,
which cache-affine routing hashes into its chain."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest

from ingress.anthropic.messages_codec import decode_messages
from ingress.anthropic.messages_to_chat import as_chat as messages_as_chat
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.prefix import chat_text
from ingress.oai.chat import ChatCompletionRequest
from ingress.oai.codec import decode_chat_request
from ingress.wire.prefix import BLOCK_BYTES, FIRST_TURN_BYTES, LIMIT_BYTES

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
