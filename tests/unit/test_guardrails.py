"""ingress/guardrails/: each detector table-driven (hits, near misses, what a redaction writes), blocked
terms, the operator's patterns, which messages are read (scope, messages), the block error's shape,
configuration errors, and RE2 against a pattern that would make Python's `re` backtrack for ever.

Key-shaped strings are assembled here from pieces, so no file of the repository holds one whole.
"""

from __future__ import annotations

import re
import time
from typing import Any

import msgspec
import pytest

from ingress.errors import InvalidRequest, PromptBlocked
from ingress.guardrails import Guard, Guardrails, Pattern, Pii, Secrets, check_guardrails, compile_guardrails
from ingress.guardrails.detectors import luhn
from ingress.oai.chat import AssistantMessage, ChatCompletionRequest
from ingress.oai.codec import decode_chat_request

ALNUM = "A1b2C3d4E5f6G7h8I9j0"  # 20 characters of a key's alphabet, repeated to length

# ------------------------------------------------------------------------------------------- helpers


def guard(**fields: Any) -> Guard:
    return compile_guardrails(msgspec.convert(fields, Guardrails))


def chat(*messages: dict[str, Any], **fields: Any) -> ChatCompletionRequest:
    return decode_chat_request(msgspec.json.encode({"model": "m", "messages": list(messages), **fields}))


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def key(prefix: str, length: int, alphabet: str = ALNUM) -> str:
    return prefix + (alphabet * (length // len(alphabet) + 1))[:length]


def blocked_by(g: Guard, text: str) -> str | None:
    """The rule that blocks `text`, or None."""
    try:
        g.texts([text], 1)
    except PromptBlocked as exc:
        return exc.rule
    return None


def redacted(g: Guard, text: str) -> str:
    [out] = g.texts([text], 1)
    assert isinstance(out, str)
    return out


# --------------------------------------------------------------------------------- the detectors

OPENAI = key("sk-proj-", 48)
ANTHROPIC = key("sk-ant-api03-", 40)
AWS = "AKIA" + "IOSFODNN7EXAMPLE"  # AWS's documentation example
GITHUB = key("ghp_", 36)
GITHUB_FINE = key("github_pat_", 22) + "_" + key("", 59)
SLACK = "xoxb-" + "123456789012-1234567890123-" + key("", 24)
GOOGLE = key("AIza", 35, "Sy0-_aB9")
STRIPE = key("sk_" + "live_", 24)
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7" * 2
PEM = f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----"
RSA_PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"

SECRET_HITS = [
    (f"my key is {OPENAI}, thanks", "secrets.openai_key", "my key is [REDACTED:openai_key], thanks"),
    (f"old style {key('sk-', 48)}", "secrets.openai_key", "old style [REDACTED:openai_key]"),
    (f"use {ANTHROPIC} here", "secrets.anthropic_key", "use [REDACTED:anthropic_key] here"),
    (f"aws_access_key_id={AWS}", "secrets.aws_access_key", "aws_access_key_id=[REDACTED:aws_access_key]"),
    (f"token {GITHUB}.", "secrets.github_token", "token [REDACTED:github_token]."),
    (f"token {GITHUB_FINE}", "secrets.github_token", "token [REDACTED:github_token]"),
    (f"SLACK_TOKEN={SLACK}", "secrets.slack_token", "SLACK_TOKEN=[REDACTED:slack_token]"),
    ("hook https://hooks.slack.com/services/T0123ABCD/B0123ABCD/" + key("", 24) + " ok",
     "secrets.slack_token", "hook [REDACTED:slack_token] ok"),
    (f"key={GOOGLE}&q=1", "secrets.google_api_key", "key=[REDACTED:google_api_key]&q=1"),
    (f"stripe {STRIPE}", "secrets.stripe_key", "stripe [REDACTED:stripe_key]"),
    (f"here:\n{PEM}\nbye", "secrets.private_key", "here:\n[REDACTED:private_key]\nbye"),
    (f"{RSA_PEM}", "secrets.private_key", "[REDACTED:private_key]"),
    # Pasted into a JSON string (tool arguments): newlines spelt \n.
    ('{"key": "' + PEM.replace("\n", "\\n") + '"}', "secrets.private_key", '{"key": "[REDACTED:private_key]"}'),
    # A key cut short by the end of the paste: redacted to the end.
    (f"oops {PEM[:120]}", "secrets.private_key", "oops [REDACTED:private_key]"),
]

SECRET_NEAR_MISSES = [
    "sk-learn is a library; the risk-assessment-framework-for-teams is long",
    key("sk-", 19),  # one character short
    "sk-" + "abcdefghijklmnopqrstuvwxyz",  # letters only: a word, not a random key
    "AKIA" + "IOSFODNN7EXAMPL",  # 15 after the prefix
    "AKIA" + "IOSFODNN7EXAMPLEX",  # 17
    "akia" + "iosfodnn7example",  # lower case
    key("ghp_", 35),
    key("ghp_", 37),
    "xoxo-hugs and kisses",
    "xoxb-12-ab",
    key("AIza", 34, "Sy0-_aB9"),
    key("AIza", 36, "Sy0-_aB9"),
    "sk_live_short",
    "-----BEGIN PUBLIC KEY-----\n" + PEM_BODY + "\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\n" + PEM_BODY + "\n-----END CERTIFICATE-----",
    "a file that starts with -----BEGIN PRIVATE KEY----- holds a key",  # no key body follows
]

PII_HITS = [
    ("email", "write to john.doe@example.com today", "write to [REDACTED:email] today"),
    ("email", "a.b+tag@mail.sub.example.co.uk", "[REDACTED:email]"),
    ("email", "<x_y%z@ex-ample.io>", "<[REDACTED:email]>"),
    ("phone", "call +1 (555) 123-4567 now", "call [REDACTED:phone] now"),
    ("phone", "+44 20 7946 0958", "[REDACTED:phone]"),
    ("phone", "+33 1 23 45 67 89.", "[REDACTED:phone]."),
    ("phone", "+4915112345678", "[REDACTED:phone]"),
    ("phone", "office: (555) 123-4567", "office: [REDACTED:phone]"),
    ("phone", "555-123-4567 or 555.123.4567", "[REDACTED:phone] or [REDACTED:phone]"),
    ("phone", "toll free 1-800-555-0199", "toll free [REDACTED:phone]"),
    ("card", "visa 4111 1111 1111 1111 exp 12/27", "visa [REDACTED:card] exp 12/27"),
    ("card", "4111-1111-1111-1111", "[REDACTED:card]"),
    ("card", "mc 5555555555554444.", "mc [REDACTED:card]."),
    ("card", "amex 378282246310005", "amex [REDACTED:card]"),
    ("card", "amex 3782 822463 10005", "amex [REDACTED:card]"),
    ("card", "discover 6011111111111117", "discover [REDACTED:card]"),
    ("card", "4111111111111111 then 5555-5555-5555-4444", "[REDACTED:card] then [REDACTED:card]"),
]

PII_NEAR_MISSES = [
    ("email", "john@localhost and @handle and user@domain.c and john.doe(at)example.com"),
    ("email", "user@-example.com"),
    ("email", "an @ sign alone, a@b"),
    ("phone", "555-1234"),  # a local number alone
    ("phone", "on 2024-01-15 at 10:30"),
    ("phone", "ssn-like 123-45-6789"),
    ("phone", "version 1.2.3, +1 point, +12.5%"),
    ("phone", "host 192.168.100.1000"),  # three dotted groups inside a longer dotted number
    ("phone", "pi is 3.141.592.6535"),
    ("phone", "555-123-4567-89"),
    ("phone", "+1 5"),
    ("phone", "+1234567890123456789"),  # more than E.164's 15 digits
    ("card", "4111 1111 1111 1112"),  # the Luhn check fails
    ("card", "41111111111111111111"),  # 20 digits
    ("card", "4111 1111 1111 1111 2222"),  # inside a longer grouped number
    ("card", "1111 4111 1111 1111 1111"),
    ("card", "0000000000000000"),  # passes Luhn, but no issuer's number begins with 0
    ("card", "order 1234567890123452"),  # passes Luhn, begins with 1
    ("card", "4111 1111-1111 1111"),  # separators of two kinds
    ("card", "x4111111111111111"),  # inside a word
    ("card", "4111 1111 1111"),  # too short
]


@pytest.mark.parametrize(("text", "rule", "expected"), SECRET_HITS)
def test_a_secret_is_found_and_blocked_or_redacted(text: str, rule: str, expected: str) -> None:
    assert blocked_by(guard(secrets={"action": "block"}), text) == rule
    assert redacted(guard(secrets={"action": "redact"}), text) == expected


@pytest.mark.parametrize("text", SECRET_NEAR_MISSES)
def test_a_near_miss_of_a_secret_is_left_alone(text: str) -> None:
    prompts: list[str | list[int]] = [text]
    assert guard(secrets={"action": "redact"}).texts(prompts, 1) is prompts
    assert blocked_by(guard(secrets={"action": "block"}), text) is None


@pytest.mark.parametrize(("kind", "text", "expected"), PII_HITS)
def test_personal_data_is_found_and_blocked_or_redacted(kind: str, text: str, expected: str) -> None:
    assert redacted(guard(pii={kind: "redact"}), text) == expected
    assert blocked_by(guard(pii={kind: "block"}), text) == f"pii.{kind}"


@pytest.mark.parametrize(("kind", "text"), PII_NEAR_MISSES)
def test_a_near_miss_of_personal_data_is_left_alone(kind: str, text: str) -> None:
    prompts: list[str | list[int]] = [text]
    assert guard(pii={kind: "redact"}).texts(prompts, 1) is prompts


@pytest.mark.parametrize(("digits", "valid"), [
    ("4111111111111111", True), ("4111111111111112", False), ("79927398713", True), ("79927398710", False),
    ("378282246310005", True), ("0", True), ("18", True), ("19", False)])
def test_luhn(digits: str, valid: bool) -> None:
    assert luhn(digits.encode()) is valid


def test_detectors_off_unless_asked() -> None:
    text = f"john.doe@example.com 4111 1111 1111 1111 {AWS}"
    prompts: list[str | list[int]] = [text]
    assert guard(pii={"email": "redact"}).texts(prompts, 1) == [f"[REDACTED:email] 4111 1111 1111 1111 {AWS}"]
    assert guard(max_prompt_tokens=10).texts(prompts, 1) is prompts


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


# ---------------------------------------------------------------------------------- blocked terms

TERMS = ["project zeus", "internal only", "c++", "Straße"]
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


# --------------------------------------------------------------------- which messages are read

CARD = "4111 1111 1111 1111"


def _history() -> ChatCompletionRequest:
    return chat(
        {"role": "system", "content": f"system {CARD}"},
        user(f"first {CARD}"),
        {"role": "assistant", "content": f"assistant {CARD}", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "pay", "arguments": f'{{"card": "{CARD}"}}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": f"tool {CARD}"},
        user([{"type": "text", "text": "last"}, {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
              {"type": "text", "text": f"part {CARD}"}]),
        {"role": "assistant", "content": [{"type": "refusal", "refusal": f"refusal {CARD}"}]},
    )


def _contents(request: ChatCompletionRequest) -> list[str]:
    return [msgspec.json.encode(m).decode() for m in request.messages]


@pytest.mark.parametrize(("scope", "messages", "changed"), [
    ("user", "last", [4]),
    ("user", "all", [1, 4]),
    ("all", "last", [5]),
    ("all", "all", [0, 1, 2, 3, 4, 5]),
])
def test_scope_and_messages_choose_what_is_read(scope: str, messages: str, changed: list[int]) -> None:
    request = _history()
    out = guard(scope=scope, messages=messages, pii={"card": "redact"}).chat(request, 1)
    for i, (before, after) in enumerate(zip(request.messages, out.messages, strict=True)):
        if i in changed:
            text = msgspec.json.encode(after).decode()
            assert CARD not in text and "[REDACTED:card]" in text
        else:
            assert after is before  # shared, not copied
    with pytest.raises(PromptBlocked) as blocked:
        guard(scope=scope, messages=messages, pii={"card": "block"}).chat(request, 1)
    assert blocked.value.param == "messages"


def test_a_redacted_request_keeps_everything_else() -> None:
    request = _history()
    out = guard(scope="all", messages="all", pii={"card": "redact"}).chat(request, 1)
    assert out is not request and out.model == request.model
    assistant = out.messages[2]
    assert isinstance(assistant, AssistantMessage) and assistant.tool_calls is not None
    call = assistant.tool_calls[0]
    assert call.id == "c1" and call.function is not None and call.function.name == "pay"
    assert call.function.arguments == '{"card": "[REDACTED:card]"}'
    parts = out.messages[4].content
    assert isinstance(parts, list)
    assert parts[0] is request.messages[4].content[0]  # type: ignore[index]  # an unchanged part is shared
    assert parts[1] is request.messages[4].content[1]  # type: ignore[index]  # the image, never read
    assert parts[2].text == "part [REDACTED:card]"  # type: ignore[union-attr]  # a text part
    assert decode_chat_request(msgspec.json.encode(out)) == out  # still a valid request


def test_nothing_found_gives_back_the_same_request() -> None:
    request = chat({"role": "system", "content": "be brief"}, user("hello there"))
    g = guard(scope="all", messages="all", blocked_terms=TERMS, secrets={}, pii={"email": "redact", "card": "block"},
              patterns=[{"name": "ticket-id", "regex": r"TCK-\d{6}"}])
    assert g.chat(request, 5) is request


def test_with_scope_user_other_roles_are_not_read() -> None:
    request = chat({"role": "system", "content": "project zeus"},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "c", "function": {"name": "f", "arguments": '{"a": "project zeus"}'}}]},
                   {"role": "tool", "tool_call_id": "c", "content": "project zeus"}, user("hi"))
    assert guard(blocked_terms=TERMS, messages="all").chat(request, 1) is request
    assert blocked_by_chat(guard(blocked_terms=TERMS, scope="all", messages="all"), request) == "blocked_terms"


def blocked_by_chat(g: Guard, request: ChatCompletionRequest) -> str | None:
    try:
        g.chat(request, 1)
    except PromptBlocked as exc:
        return exc.rule
    return None


@pytest.mark.parametrize("message", [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "custom", "custom": {"name": "sh", "input": "echo project zeus"}}]},
    {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": '{"q": "project zeus"}'}},
    {"role": "assistant", "content": "ok", "refusal": "no: project zeus"},
    {"role": "function", "name": "f", "content": "project zeus"},
    {"role": "developer", "content": [{"type": "text", "text": "project zeus"}]},
])
def test_scope_all_reads_every_kind_of_message_text(message: dict[str, Any]) -> None:
    request = chat(message)
    assert blocked_by_chat(guard(blocked_terms=TERMS, scope="all"), request) == "blocked_terms"
    assert guard(blocked_terms=TERMS).chat(request, 1) is request  # no user message: nothing read


def test_texts_reads_every_prompt_and_passes_token_ids() -> None:
    g = guard(pii={"email": "redact"}, messages="last")
    prompts: list[str | list[int]] = ["a@example.com first", [1, 2, 3], "no hit", "last b@example.com"]
    out = g.texts(prompts, 1)
    assert out == ["[REDACTED:email] first", [1, 2, 3], "no hit", "last [REDACTED:email]"]
    assert out[1] is prompts[1] and out[2] is prompts[2] and prompts[0] == "a@example.com first"
    with pytest.raises(PromptBlocked) as blocked:
        guard(pii={"email": "block"}).texts(prompts, 1, "input")
    assert blocked.value.param == "input"


# ----------------------------------------------------------------------------- the block itself


def test_max_prompt_tokens_blocks_above_the_limit_and_names_it() -> None:
    g = guard(max_prompt_tokens=100)
    request = chat(user("hi"))
    assert g.chat(request, 100) is request
    with pytest.raises(PromptBlocked) as blocked:
        g.chat(request, 101)
    error = blocked.value
    assert (error.status, error.code, error.param) == (400, "prompt_blocked", "messages")
    assert error.rule == "max_prompt_tokens"
    assert "101" in error.message and "100" in error.message and "max_prompt_tokens" in error.message
    with pytest.raises(PromptBlocked) as blocked:
        g.texts(["hi"], 101, "prompt")
    assert blocked.value.param == "prompt"


SECRET_TEXTS = {
    "blocked_terms": "about Project Zeus",
    "patterns.ticket-id": "TCK-123456",
    "secrets.aws_access_key": AWS,
    "secrets.openai_key": OPENAI,
    "pii.card": CARD,
    "pii.email": "john.doe@example.com",
}


@pytest.mark.parametrize(("rule", "text"), SECRET_TEXTS.items())
def test_the_block_error_names_the_rule_never_the_text(rule: str, text: str) -> None:
    g = guard(blocked_terms=TERMS, secrets={}, pii={"email": "block", "card": "block"},
              patterns=[{"name": "ticket-id", "regex": r"TCK-\d{6}"}])
    with pytest.raises(PromptBlocked) as blocked:
        g.chat(chat(user(f"please {text} thanks")), 1)
    error = blocked.value
    assert isinstance(error, InvalidRequest) and error.rule == rule
    body = error.body()
    assert body == {"error": {"message": f"The prompt was blocked by the guardrail rule '{rule}'.",
                              "type": "invalid_request_error", "param": "messages", "code": "prompt_blocked"}}
    rendered = msgspec.json.encode(body).decode() + repr(error) + str(error.args)
    assert text.casefold() not in rendered.casefold() and "zeus" not in rendered.casefold()
    assert error.__cause__ is None and error.__suppress_context__  # the internal verdict is not chained
    with pytest.raises(AttributeError):
        error.rule = "other"  # errors are immutable


# --------------------------------------------------------------------------- configuration errors


@pytest.mark.parametrize(("fields", "message"), [
    ({"patterns": [{"name": "ok", "regex": "a"}, {"name": "look", "regex": "(?=x)y"}]},
     "patterns[1].regex: RE2 cannot compile pattern 'look': invalid perl operator: (?="),
    ({"patterns": [{"name": "back", "regex": r"(a)\1"}]},
     "patterns[0].regex: RE2 cannot compile pattern 'back': invalid escape sequence: \\1"),
    ({"patterns": [{"name": "open", "regex": "(a"}]},
     "patterns[0].regex: RE2 cannot compile pattern 'open': missing )"),
    ({"patterns": [{"name": "big", "regex": "((a{100}){100}){100}"}]},
     "patterns[0].regex: RE2 cannot compile pattern 'big': invalid repetition size: {100}"),
    ({"patterns": [{"name": "huge", "regex": r"\pL{1000}"}]},
     "patterns[0].regex: RE2 cannot compile pattern 'huge': pattern too large - compile failed"),
    ({"patterns": [{"name": "byte", "regex": r"caf\C\C"}]},
     "patterns[0].regex: pattern 'byte' uses \\C (any byte), which can match half of a character"),
    ({"patterns": [{"name": "empty", "regex": "x*"}]},
     "patterns[0].regex: pattern 'empty' matches the empty string"),
    ({"patterns": [{"name": "t", "regex": "a"}, {"name": "t", "regex": "b"}]},
     "patterns[1].name: 't' is already the name of patterns[0]"),
    ({"pii": {"email": "redact"}, "patterns": [{"name": "r", "regex": "REDACTED"}]},
     "patterns[0].regex: pattern 'r' matches [REDACTED:email], the placeholder a redaction writes"),
    ({"blocked_terms": ["ok", " \n "]}, "blocked_terms[1]: a term needs a character other than whitespace"),
])
def test_a_bad_rule_is_a_value_error_naming_it(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as error:
        check_guardrails(msgspec.convert(fields, Guardrails))
    assert str(error.value).startswith(message)


def test_an_escaped_backslash_before_c_is_no_any_byte() -> None:
    g = guard(patterns=[{"name": "path", "regex": r"C:\\Config", "action": "redact"}])
    assert redacted(g, r"open C:\Config now") == "open [REDACTED:path] now"


def test_guardrails_built_in_code_are_checked_as_decoded_ones() -> None:
    bad = Guardrails(patterns=(Pattern(name="has space", regex="a"),))
    with pytest.raises(ValueError, match=r"^patterns\[0\]\.name: Expected `str` matching regex"):
        compile_guardrails(bad)
    with pytest.raises(ValueError, match=r"^max_prompt_tokens: Expected `int` >= 1"):
        compile_guardrails(Guardrails(max_prompt_tokens=0))


@pytest.mark.parametrize(("toml", "error"), [
    ('scope = "everything"', "Invalid enum value 'everything' - at `$.scope`"),
    ("max_prompt_tokens = 0", "Expected `int` >= 1"),
    ("[secrets]\naction = \"warn\"", "Invalid enum value 'warn' - at `$.secrets.action`"),
    ("[[patterns]]\nname = \"a.b\"\nregex = \"x\"", "Expected `str` matching regex"),
    ("blocked_term = [\"x\"]", "Object contains unknown field `blocked_term`"),
])
def test_the_toml_shape_is_strict(toml: str, error: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=re.escape(error)):
        msgspec.toml.decode(toml, type=Guardrails)


def test_the_documented_shape_decodes_and_compiles() -> None:
    toml = """
max_prompt_tokens = 32000
scope = "user"
messages = "last"
blocked_terms = ["project zeus", "internal only"]
[[patterns]]
name = "ticket-id"
regex = 'TCK-\\d{6}'
action = "block"
[secrets]
action = "block"
[pii]
email = "redact"
phone = "redact"
card = "block"
"""
    g = compile_guardrails(msgspec.toml.decode(toml, type=Guardrails))
    assert g.rules == ("max_prompt_tokens", "blocked_terms", "secrets.private_key", "secrets.anthropic_key",
                       "secrets.openai_key", "secrets.aws_access_key", "secrets.github_token",
                       "secrets.slack_token", "secrets.google_api_key", "secrets.stripe_key", "pii.email",
                       "pii.phone", "pii.card", "patterns.ticket-id")
    assert redacted(g, "mail a@example.com") == "mail [REDACTED:email]"
    assert blocked_by(g, "TCK-000001") == "patterns.ticket-id"


def test_secrets_and_pii_with_no_actions_given() -> None:
    assert guard(secrets={}).rules[0] == "secrets.private_key"  # secrets default to block
    assert guard(pii={}).rules == ()  # each PII detector is off until given an action
    assert Secrets().action == "block" and Pii().card is None


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
