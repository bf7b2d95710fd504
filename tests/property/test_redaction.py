"""Guardrails under Hypothesis: text without hits comes back as the same object; a redaction never
leaves a hit its rules detect (scanning the output again finds nothing); a blocked term blocks as a
whole word in any case and spacing, and never inside a longer word."""

from __future__ import annotations

import string
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from ingress.errors import PromptBlocked
from ingress.guardrails import Guard, Guardrails, compile_guardrails
from ingress.guardrails.scanner import Terms
from ingress.oai.codec import decode_chat_request

SETTINGS = settings(max_examples=150, deadline=None, database=None)


def _guard(**fields: Any) -> Guard:
    return compile_guardrails(msgspec.convert(fields, Guardrails))


EVERY_DETECTOR: dict[str, Any] = {"secrets": {"action": "redact"}, "pii": {"email": "redact", "phone": "redact",
                                                                            "card": "redact"},
                                  "patterns": [{"name": "ticket", "regex": r"TCK-\d{6}", "action": "redact"}]}
REDACTING = _guard(**EVERY_DETECTOR)
BLOCKING = _guard(blocked_terms=["zeus", "project apollo"], secrets={},
                  pii={"email": "block", "phone": "block", "card": "block"},
                  patterns=[{"name": "ticket", "regex": r"TCK-\d{6}"}], scope="all", messages="all")

# No digit, no ASCII capital, none of @ + - _: nothing any rule looks for can be spelt; no z either,
# so no blocked term. Any other letter, mark, space or symbol, from any script.
_CLEAN = st.characters(blacklist_categories=["Cs"],
                       blacklist_characters=string.digits + string.ascii_uppercase + "@+-_zZ")
clean_text = st.text(_CLEAN, max_size=200)

HITS = ["john.doe@example.com", "x_y%z@ex-ample.io", "+1 (555) 123-4567", "+44 20 7946 0958", "555-123-4567",
        "4111 1111 1111 1111", "5555555555554444", "378282246310005", "TCK-123456",
        "AKIA" + "IOSFODNN7EXAMPLE", "ghp_" + "A1b2C3d4E5" * 3 + "F6g7H8", "sk-" + "proj-" + "A1b2C3d4E5" * 4,
        "AIza" + "Sy0-_aB9" * 4 + "xyz",
        "-----BEGIN PRIVATE KEY-----\n" + "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
        + "\n-----END PRIVATE KEY-----"]

# Text made of the pieces the detectors look for, and the pieces around them, in any order.
_NUMBERISH = st.lists(st.sampled_from([*"0123456789 -.+()@:/", "ab", "sk-", "AKIA", "TCK-", ".com", "x"]),
                      max_size=80).map("".join)


@SETTINGS
@given(clean_text)
def test_text_without_hits_is_given_back_unchanged(text: str) -> None:
    prompts: list[str | list[int]] = [text]
    assert REDACTING.texts(prompts, 1) is prompts
    assert BLOCKING.texts(prompts, 1) is prompts


@SETTINGS
@given(st.lists(clean_text, min_size=1, max_size=6))
def test_a_request_without_hits_is_the_same_object(texts: list[str]) -> None:
    roles = ["system", "user", "assistant", "user", "tool", "user"]
    messages = [{"role": r, "content": t, **({"tool_call_id": "c"} if r == "tool" else {})}
                for r, t in zip(roles, texts, strict=False)]
    request = decode_chat_request(msgspec.json.encode({"model": "m", "messages": messages}))
    assert BLOCKING.chat(request, 1) is request


@SETTINGS
@given(st.lists(st.one_of(clean_text, st.sampled_from(HITS)), min_size=1, max_size=8))
def test_every_hit_set_apart_is_redacted_and_nothing_is_left(pieces: list[str]) -> None:
    text = " ; ".join(pieces)
    [out] = REDACTING.texts([text], 1)
    assert isinstance(out, str)
    hits = [p for p in pieces if p in HITS]
    assert out.count("[REDACTED:") == len(hits)
    assert not any(hit in out for hit in hits)
    assert REDACTING.texts([out], 1) == [out]  # scanned again: nothing left to redact


@settings(max_examples=400, deadline=None, database=None)
@given(_NUMBERISH)
def test_redaction_output_holds_no_hit_of_its_own_rules(text: str) -> None:
    try:
        [out] = REDACTING.texts([text], 1)
    except PromptBlocked:  # a redaction that kept making new hits: refused, never passed on
        return
    prompts: list[str | list[int]] = [out]
    assert REDACTING.texts(prompts, 1) is prompts


def _casings(data: st.DataObject, word: str) -> str:
    upper = data.draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    return "".join(c.upper() if u else c for c, u in zip(word, upper, strict=True))


@SETTINGS
@given(st.data(), clean_text, clean_text)
def test_a_term_blocks_as_a_whole_word_only(data: st.DataObject, before: str, after: str) -> None:
    space = data.draw(st.sampled_from([" ", "\n", "\t", "  ", "\u00a0", " \r\n "]))
    term = data.draw(st.sampled_from(["zeus", f"project{space}apollo"]))
    term = _casings(data, term)
    try:
        BLOCKING.texts([f"{before} {term} {after}"], 1)
        raise AssertionError("not blocked")
    except PromptBlocked as exc:
        assert exc.rule == "blocked_terms"
    glued = data.draw(st.sampled_from(["a", "é", "_", "9", "ж"]))
    inside: list[str | list[int]] = [f"{before} {glued}{term} {after}", f"{before} {term}{glued} {after}"]
    assert BLOCKING.texts(inside, 1) is inside


_TERMS = ["zeus", "project apollo", "c++", "straße", "жук", "ﬁle"]
WITH_PREFILTER = Terms(_TERMS)
AUTOMATON_ALONE = Terms(_TERMS)
AUTOMATON_ALONE._prefilter = None  # as with more terms than RE2 compiles
_TERM_PIECES = st.sampled_from(["zeus", "ZEUS", "Zeus", "project", "apollo", "PROJECT", "c", "++", "C++", "strasse",
                                "STRASSE", "straße", "ß", "жук", "ЖУК", "file", "ﬁle", "FILE", "é", "_", "9", "a",
                                " ", "  ", "\n", "\t", "\u00a0", "\u2003", "\x1c", ".", "-", "(", ")"])


@settings(max_examples=500, deadline=None, database=None)
@given(st.lists(st.one_of(_TERM_PIECES, st.text(max_size=3)), max_size=30).map("".join))
def test_the_terms_prefilter_never_hides_a_term_the_automaton_finds(text: str) -> None:
    """RE2 runs first only to skip text; with it or without it, the automaton's verdict is the same."""
    assert WITH_PREFILTER._prefilter is not None
    assert WITH_PREFILTER.found(text) == AUTOMATON_ALONE.found(text)
