"""ingress/guardrails/config.py: the operator's table is strict, and the documented one decodes and compiles."""

from __future__ import annotations

import re

import msgspec
import pytest
from guardrail_texts import blocked_by, redacted

from ingress.guardrails import Guardrails, compile_guardrails


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
