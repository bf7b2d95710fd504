"""What the guardrails tests (tests/unit/guardrails/) share: a Guard built from a table, requests, the
rule a text is blocked by or what it is redacted to, and key-shaped strings assembled from pieces, so no
file of the repository holds one whole."""

from __future__ import annotations

from typing import Any

import msgspec

from ingress.errors import PromptBlocked
from ingress.guardrails import Guard, Guardrails, compile_guardrails
from ingress.oai.chat import ChatCompletionRequest
from ingress.oai.codec import decode_chat_request

ALNUM = "A1b2C3d4E5f6G7h8I9j0"  # 20 characters of a key's alphabet, repeated to length


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


# Key-shaped strings (the detectors' hits), assembled from pieces.
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


# Blocked terms, and a card number that passes the Luhn check.
TERMS = ["project zeus", "internal only", "c++", "Straße"]
CARD = "4111 1111 1111 1111"
