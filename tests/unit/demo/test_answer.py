"""The demo's answer rules: it counts prompt tokens without building them (the count is the length of the
token list), and derives logprobs from the token text."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ingress.demo.answer import count_tokens, logprob, tokens

# Every character str.isspace() and the re module's \\s treat as whitespace, and some they do not.
SPACES = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0", "\u1680",
          "\u2000", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u200b", "\ufeff", "\x00"]


@settings(max_examples=500, deadline=None, database=None)
@given(st.lists(st.one_of(st.sampled_from(SPACES), st.text(max_size=5)), max_size=20).map("".join))
def test_count_tokens_is_the_number_of_tokens(text: str) -> None:
    assert count_tokens(text) == len(tokens(text))


def test_count_tokens_by_example() -> None:
    assert [count_tokens(t) for t in ["", " ", "a", " a", "a ", "a b", "  a  b  "]] == [0, 1, 1, 1, 2, 2, 3]


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.one_of(st.sampled_from(SPACES), st.text(max_size=5)), max_size=20).map("".join),
       st.integers(0, 12))
def test_the_first_tokens_are_the_first_of_all_tokens(text: str, limit: int) -> None:
    assert tokens(text, limit) == tokens(text)[:limit]


@settings(max_examples=300, deadline=None, database=None)
@given(st.text(alphabet=[chr(c) for c in range(128)], max_size=60))
def test_ascii_texts_take_the_fast_count(text: str) -> None:
    assert text.isascii()
    assert count_tokens(text) == len(tokens(text))


def test_logprobs_are_derived_from_the_token_alone() -> None:
    lp = logprob(" hello", 3)
    assert lp == logprob(" hello", 3)  # deterministic
    assert (lp.token, lp.bytes) == (" hello", list(b" hello"))
    assert -0.7 <= lp.logprob <= -0.001 and round(lp.logprob, 3) == lp.logprob
    top = lp.top_logprobs or []
    assert [t.token for t in top] == [" hello", " hello·", " hello··"]  # the token itself is the most likely
    assert [t.bytes for t in top] == [list((t.token or "").encode()) for t in top]  # "·" is two bytes in UTF-8
    assert [t.logprob for t in top] == [lp.logprob, round(lp.logprob - 1, 3), round(lp.logprob - 2, 3)]
    assert logprob(" hello", 0).top_logprobs == []
    assert logprob("world", 0).logprob != lp.logprob
