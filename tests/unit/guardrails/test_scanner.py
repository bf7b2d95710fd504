"""ingress/guardrails/scanner.py: one pass of every rule, block before redaction, a redaction scanned again,
blocked terms as whole words in one automaton, the operator's patterns, and RE2 against a pattern that
would make Python's `re` backtrack for ever."""

from __future__ import annotations

import time

import pytest
from guardrail_texts import TERMS, blocked_by, guard, redacted


def test_block_rules_win_over_redaction_wherever_they_are() -> None:
    g = guard(pii={"email": "redact", "card": "block"})
    assert blocked_by(g, "john.doe@example.com and then 4111 1111 1111 1111") == "pii.card"


def test_overlapping_hits_are_one_redaction() -> None:
    g = guard(pii={"email": "redact"}, patterns=[{"name": "domain", "regex": r"example\.com", "action": "redact"}])
    assert redacted(g, "to john@example.com and example.com") == "to [REDACTED:email] and [REDACTED:domain]"


def test_a_redaction_is_scanned_again_for_hits_it_made() -> None:
    """The email's placeholder and the text after it make a hit of the second pattern that the prompt did
    not hold: redacted in a second round, or blocked when that pattern blocks."""
    redact = guard(pii={"email": "redact"}, patterns=[{"name": "p", "regex": r"l\]\.b", "action": "redact"}])
    assert redacted(redact, "a@b.co.b") == "[REDACTED:emai[REDACTED:p]"
    block = guard(pii={"email": "redact"}, patterns=[{"name": "p", "regex": r"l\]\.b"}])
    assert blocked_by(block, "a@b.co.b") == "patterns.p"
    assert blocked_by(block, "a@b.co") is None


def test_a_redaction_that_never_settles_is_blocked() -> None:
    """Each round's placeholder makes the next round's hit: after three rounds the prompt is refused."""
    g = guard(pii={"email": "redact"}, patterns=[{"name": "p", "regex": r"\][^\[]", "action": "redact"}])
    assert redacted(g, "x@y.co!!") == "[REDACTED:email[REDACTED:p[REDACTED:p]"
    assert blocked_by(g, "x@y.co!!!!!") == "patterns.p"


def test_text_outside_ascii_keeps_its_characters_around_a_redaction() -> None:
    g = guard(pii={"email": "redact"})
    assert redacted(g, "écrivez à jean@exemple.fr — merci 🙂") == "écrivez à [REDACTED:email] — merci 🙂"


TERM_HITS = [
    "we discuss Project Zeus today",
    "PROJECT ZEUS",
    "project\n  zeus",  # any whitespace between a phrase's words
    "project\u00a0zeus",  # no-break space
    "(project zeus)",
    "this is internal only.",
    "I write c++ daily",
    "I write C++.",
    "STRASSE",  # casefolded: ß is ss
    "die strasse",
]
TERM_NEAR_MISSES = [
    "projectzeus",
    "project zeusy",
    "subproject zeus",
    "project_zeus",
    "internal onlyness",
    "cc++",
    "hello world",
]


@pytest.mark.parametrize("text", TERM_HITS)
def test_a_blocked_term_blocks_as_whole_words_in_any_case(text: str) -> None:
    assert blocked_by(guard(blocked_terms=TERMS), text) == "blocked_terms"


@pytest.mark.parametrize("text", TERM_NEAR_MISSES)
def test_a_term_inside_a_longer_word_does_not_block(text: str) -> None:
    prompts: list[str | list[int]] = [text]
    assert guard(blocked_terms=TERMS).texts(prompts, 1) is prompts


def test_many_terms_are_one_automaton() -> None:
    terms = [f"codename{i}" for i in range(20_000)]
    g = guard(blocked_terms=terms)
    assert blocked_by(g, "about codename19999 again") == "blocked_terms"
    assert blocked_by(g, "about codename20000 again") is None


# ------------------------------------------------------------------------------ operator patterns


def test_a_pattern_blocks_or_redacts_under_its_name() -> None:
    block = guard(patterns=[{"name": "ticket-id", "regex": r"TCK-\d{6}"}])
    assert blocked_by(block, "see TCK-123456") == "patterns.ticket-id"
    assert blocked_by(block, "see TCK-12345") is None
    redact = guard(patterns=[{"name": "ticket-id", "regex": r"TCK-\d{6}", "action": "redact"}])
    assert redacted(redact, "TCK-123456 and TCK-654321") == "[REDACTED:ticket-id] and [REDACTED:ticket-id]"


def test_a_pattern_is_case_sensitive_unless_it_says_otherwise() -> None:
    assert blocked_by(guard(patterns=[{"name": "p", "regex": "secret"}]), "SECRET") is None
    assert blocked_by(guard(patterns=[{"name": "p", "regex": "(?i)secret"}]), "SECRET") == "patterns.p"


def test_an_inline_flag_of_one_pattern_does_not_leak_into_another() -> None:
    g = guard(patterns=[{"name": "a", "regex": "(?i)alpha"}, {"name": "b", "regex": "beta"}])
    assert blocked_by(g, "BETA") is None
    assert blocked_by(g, "ALPHA") == "patterns.a"


# ------------------------------------------------------------------------- RE2: linear, always

REDOS = "a" * 50_000 + "!"


@pytest.mark.parametrize("action", ["block", "redact"])
@pytest.mark.parametrize("pattern", ["(a+)+$", "(a+)+b"])
def test_a_redos_shaped_pattern_cannot_stall(pattern: str, action: str) -> None:
    """`(a+)+$` on 50,000 a's and a '!': Python's `re` tries every way to split the a's, 2^50000 of them
    (bench/guardrails.py times it up to 24 a's: it doubles with each). RE2 reads the text once, in well
    under a millisecond here (`(a+)+b` makes it read all of it; `$` lets it start from the end); 2 s is
    headroom for a busy machine, and the test's timeout would name a stall."""
    g = guard(patterns=[{"name": "redos", "regex": pattern, "action": action}])
    prompts: list[str | list[int]] = [REDOS]
    start = time.perf_counter()
    assert g.texts(prompts, 1) is prompts
    assert time.perf_counter() - start < 2.0
    hit = "aaaa" if pattern.endswith("$") else "aaab"
    assert blocked_by(g, hit) == ("patterns.redos" if action == "block" else None)
