"""The guardrails an operator writes in TOML for a key or a tenant: frozen msgspec Structs, decoded once."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

Action = Literal["block", "redact"]
# A rule's name is reported to the client and written into placeholders: no spaces, no dots (built-in
# rules are named `secrets.*` and `pii.*`), nothing a placeholder or a log line would need to escape.
RuleName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")]
Term = Annotated[str, Meta(min_length=1, max_length=256)]
Regex = Annotated[str, Meta(min_length=1, max_length=4096)]


class _Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Unknown keys are errors: a misspelt guardrail must not be silently ignored. (settings.py has its
    own base alike; this package does not import settings, which will import it.)"""


class Pattern(_Config, frozen=True):
    """An operator's own rule: an RE2 regular expression (https://github.com/google/re2/wiki/Syntax),
    matched case-sensitively unless it says `(?i)`; `\\b`, `\\d`, `\\w` are ASCII."""

    name: RuleName
    regex: Regex
    action: Action = "block"


class Secrets(_Config, frozen=True):
    """API-key shapes (OpenAI, Anthropic, AWS, GitHub, Slack, Google, Stripe) and private-key PEM blocks."""

    action: Action = "block"


class Pii(_Config, frozen=True):
    """Personal data: each detector is off unless given an action."""

    email: Action | None = None
    phone: Action | None = None
    card: Action | None = None  # card numbers that pass the Luhn check only


class Guardrails(_Config, frozen=True):
    """What a key's or a tenant's prompts may hold; `ingress.guardrails` documents each field."""

    max_prompt_tokens: Annotated[int, Meta(ge=1, le=2**31 - 1)] | None = None
    scope: Literal["user", "all"] = "user"  # user messages only, or every message (tool calls and results too)
    messages: Literal["last", "all"] = "last"  # the last message in scope, or the whole history
    blocked_terms: Annotated[tuple[Term, ...], Meta(max_length=100_000)] = ()  # case-insensitive, whole words
    patterns: Annotated[tuple[Pattern, ...], Meta(max_length=1000)] = ()
    secrets: Secrets | None = None
    pii: Pii | None = None
