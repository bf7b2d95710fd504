"""The prefix hash chain: the same prefix gives the same leading hashes, and any change gives different
hashes from its block on, for any text, any place the first user message ends, and any conversation."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingress.encoding.prefix import chat_text
from ingress.oai.codec import decode_chat_request
from ingress.wire.prefix import BLOCK_BYTES, LIMIT_BYTES, block_ends, chain

SETTINGS = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def texts(draw: st.DrawFn) -> tuple[bytes, int]:
    """Canonical text (a few blocks long) and where its first user message ends (0: it has none)."""
    size = draw(st.integers(0, 5 * BLOCK_BYTES))
    text = draw(st.binary(min_size=size, max_size=size))
    first_turn_end = draw(st.one_of(st.just(0), st.integers(0, size)))
    return text, first_turn_end


@SETTINGS
@given(texts(), st.data())
def test_a_change_changes_every_hash_from_its_block_on_and_none_before(drawn: tuple[bytes, int],
                                                                         data: st.DataObject) -> None:
    text, first_turn_end = drawn
    if not text:
        return
    at = data.draw(st.integers(0, len(text) - 1), label="at")
    changed = text[:at] + bytes([text[at] ^ data.draw(st.integers(1, 255), label="flip")]) + text[at + 1:]
    ends = block_ends(len(text), first_turn_end)

    _, before, _ = chain(text, first_turn_end)
    _, after, _ = chain(changed, first_turn_end)

    assert [a == b for a, b in zip(before, after, strict=True)] == [end <= at for end in ends]


@SETTINGS
@given(texts(), st.binary(max_size=3 * BLOCK_BYTES))
def test_a_longer_text_keeps_every_hash_of_the_shorter_but_its_short_last_block(drawn: tuple[bytes, int],
                                                                                 more: bytes) -> None:
    text, first_turn_end = drawn
    _, shorter, conversation = chain(text, first_turn_end)
    _, longer, same_conversation = chain(text + more, first_turn_end)

    kept = [i for i, end in enumerate(block_ends(len(text), first_turn_end))
            if end in block_ends(len(text + more), first_turn_end)]
    assert all(shorter[i] == longer[i] for i in kept)
    assert len(kept) >= len(shorter) - 1
    if first_turn_end:
        assert conversation == same_conversation and shorter[conversation] == longer[conversation]


words = st.text(st.sampled_from("abcdefgh é🚀\n"), max_size=300)
message = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, words),
    st.builds(lambda t: {"role": "assistant", "content": t}, words),
    st.builds(lambda t: {"role": "user", "content": [{"type": "text", "text": t}]}, words),
    st.builds(lambda t, i: {"role": "tool", "tool_call_id": f"call_{i}", "content": t}, words, st.integers(0, 9)),
)


def _request(messages: list[dict[str, Any]]) -> Any:
    return decode_chat_request(msgspec.json.encode({"model": "m", "messages": messages}))


@SETTINGS
@given(st.lists(st.builds(lambda t: {"role": "system", "content": t}, words), max_size=2),
       st.lists(message, min_size=1, max_size=12), st.lists(message, min_size=1, max_size=6))
def test_a_conversation_that_goes_on_extends_its_text_and_keeps_its_conversation_block(
        opening: list[dict[str, Any]], turns: list[dict[str, Any]], later: list[dict[str, Any]]) -> None:
    before = chat_text(_request(opening + turns), LIMIT_BYTES, True)
    after = chat_text(_request(opening + turns + later), LIMIT_BYTES, True)

    assert after[0].startswith(before[0])
    if before[1]:
        assert after[1] == before[1]  # the first user message ends at the same place
        assert chain(*before)[1][chain(*before)[2]] == chain(*after)[1][chain(*after)[2]]
