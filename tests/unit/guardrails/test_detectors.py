"""ingress/guardrails/detectors.py: each detector table-driven (hits, near misses, what a redaction writes),
the Luhn check, and every detector off unless asked."""

from __future__ import annotations

import pytest
from guardrail_texts import (
    ANTHROPIC,
    AWS,
    GITHUB,
    GITHUB_FINE,
    GOOGLE,
    OPENAI,
    PEM,
    PEM_BODY,
    RSA_PEM,
    SLACK,
    STRIPE,
    blocked_by,
    guard,
    key,
    redacted,
)

from ingress.guardrails.detectors import luhn

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
