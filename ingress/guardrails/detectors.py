"""The built-in detectors: secret shapes and personal data, as RE2 patterns on UTF-8 bytes, each with a
check of its candidates (the Luhn sum for cards, the digits of a phone number, what surrounds a key).

A pattern finds candidates; `verify(data, start, end)` decides whether one is a hit, from the candidate
and the bytes around it. Near misses stay quiet: a key one character short or long, a 16-digit number
that fails the Luhn check, a number inside a longer run of digit groups, a date, an IP address, an
address without a domain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Verify = Callable[[bytes, int, int], bool]

_DIGITS = b"0123456789"
_KEY_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_SEPARATORS = frozenset(b" .-")
_PLUS, _SPACE, _DASH = ord("+"), ord(" "), ord("-")
# A digit doubled, then its digits summed (Luhn), as a bytes.translate table over ASCII digits.
_DOUBLED = bytes.maketrans(_DIGITS, bytes([0, 2, 4, 6, 8, 1, 3, 5, 7, 9]))

# Each check below runs once per candidate, and text made of near misses holds one every few bytes:
# they are written with bytes methods (C loops), not loops in Python, to keep such text cheap.


@dataclass(frozen=True, slots=True)
class Detector:
    """A built-in rule: `name` is what a block reports (`secrets.aws_access_key`), `label` what a
    redaction writes (`[REDACTED:aws_access_key]`)."""

    name: str
    label: str
    regex: bytes
    verify: Verify | None = None


def _digit_count(candidate: bytes) -> int:
    return len(candidate) - len(candidate.translate(None, _DIGITS))


def _ends_a_key(data: bytes, start: int, end: int) -> bool:
    """The candidate is the whole token: no key character follows it (RE2's `\\b` cannot say so after `-`)."""
    return end == len(data) or data[end] not in _KEY_BYTES


def _at_least(length: int) -> Verify:
    def long_enough(data: bytes, start: int, end: int) -> bool:
        return end - start >= length

    return long_enough


def luhn(digits: bytes) -> bool:
    """The Luhn checksum of ASCII digits: what every payment card number satisfies."""
    kept, doubled = digits[-1::-2], digits[-2::-2]
    return (sum(kept) - 48 * len(kept) + sum(doubled.translate(_DOUBLED))) % 10 == 0


def _group_around(data: bytes, start: int, end: int, sep: int, width: int) -> bool:
    """A group of `width` digits joined by `sep` just before `start` or just after `end`: the candidate
    is part of a longer grouped number (an account or order number), not a number of its own."""
    before = data[max(0, start - width - 1):start]
    if len(before) == width + 1 and before[-1] == sep and before[:-1].isdigit():
        return True
    after = data[end:end + width + 1]
    return len(after) == width + 1 and after[0] == sep and after[1:].isdigit()


def _card(data: bytes, start: int, end: int) -> bool:
    candidate = data[start:end]
    sep = _SPACE if b" " in candidate else _DASH if b"-" in candidate else None
    if sep is not None and _group_around(data, start, end, sep, 4):
        return False
    return luhn(candidate.translate(None, b" -"))


def _after_number(data: bytes, start: int) -> bool:
    """A digit, or a digit then a separator, just before `start`: the candidate continues a number."""
    return start > 0 and (data[start - 1] in _DIGITS
                          or (start > 1 and data[start - 1] in _SEPARATORS and data[start - 2] in _DIGITS))


def _before_number(data: bytes, end: int) -> bool:
    return end < len(data) and (data[end] in _DIGITS
                                or (end + 1 < len(data) and data[end] in _SEPARATORS and data[end + 1] in _DIGITS))


def _phone(data: bytes, start: int, end: int) -> bool:
    if _after_number(data, start) or _before_number(data, end):
        return False  # a dotted version, an IP address, a longer number
    if data[start] == _PLUS:
        return 8 <= _digit_count(data[start:end]) <= 15  # E.164: a country code and at most 15 digits in all
    return True


_KEY = rb"[A-Za-z0-9_-]"
_CARD_LAYOUTS = rb"[2-6]\d{3}(?: \d{4}){3}|[2-6]\d{3}(?:-\d{4}){3}|3\d{3} \d{6} \d{4,5}|3\d{3}-\d{6}-\d{4,5}"
_PEM_LABEL = rb"(?:[A-Z0-9]+ )*PRIVATE KEY"

SECRETS: tuple[Detector, ...] = (
    # The header, then a body (base64, or an encrypted key's Proc-Type line), up to the END line or the
    # end of the text; `\n` spelt out too, as a key pasted into a JSON string (tool arguments) is.
    Detector("secrets.private_key", "private_key",
             rb"-----BEGIN " + _PEM_LABEL + rb"-----(?:\s|\\[nr])+(?:Proc-Type:|[A-Za-z0-9+/]{40})"
             rb"(?s:.*?)(?:-----END " + _PEM_LABEL + rb"-----|\z)"),
    Detector("secrets.anthropic_key", "anthropic_key", rb"\bsk-ant-(?:api|admin)\d\d-" + _KEY + rb"{20,}"),
    # A random key has a digit (a hyphenated word that begins with sk- has none): asked of RE2, so such
    # words cost nothing; 20 key characters at least after `sk-`.
    Detector("secrets.openai_key", "openai_key",
             rb"\bsk-(?:proj-|svcacct-|admin-)?" + _KEY + rb"*\d" + _KEY + rb"*", _at_least(23)),
    Detector("secrets.aws_access_key", "aws_access_key", rb"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"),
    Detector("secrets.github_token", "github_token",
             rb"\b(?:gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59})\b"),
    Detector("secrets.slack_token", "slack_token",
             rb"\bxox[abposre]-[0-9]+-[0-9A-Za-z-]{8,}|\bxapp-\d-[A-Z0-9]+-\d+-[a-f0-9]{16,}"
             rb"|https://hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]{16,}",
             _ends_a_key),
    Detector("secrets.google_api_key", "google_api_key", rb"\bAIza" + _KEY + rb"{35}", _ends_a_key),
    Detector("secrets.stripe_key", "stripe_key", rb"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{24,}\b"),
)

PII: dict[str, Detector] = {
    "email": Detector("pii.email", "email",
                      rb"[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                      rb"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.[A-Za-z]{2,63}\b"),
    # International (+ and a country code, groups of digits) or North American ((555) 123-4567,
    # 555-123-4567, 1-800-555-0199); a local number alone (555-1234) is too like any other number.
    "phone": Detector("pii.phone", "phone",
                      rb"\+[1-9]\d{0,2}(?:[ .-]?(?:\(\d{1,4}\)|\d{1,5})){1,6}\b"
                      rb"|(?:\b1[ .-])?(?:\(\d{3}\) ?|\b\d{3}[ .-])\d{3}[ .-]\d{4}\b",
                      _phone),
    # 13 to 19 digits in a row, or the printed layouts (4-4-4-4; 4-6-5 and 4-6-4 for Amex and Diners)
    # with one kind of separator; issuers' numbers begin with 2 to 6.
    "card": Detector("pii.card", "card", rb"\b(?:[2-6]\d{12,18}|" + _CARD_LAYOUTS + rb")\b", _card),
}
