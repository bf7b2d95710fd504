"""Prompt guardrails: what a key's or a tenant's prompts may hold, checked before admission (a blocked
prompt consumes no quota). Sans-I/O: plain functions on decoded requests.

The operator writes a `Guardrails` table (under a key or a tenant), compiled once at configuration load
by `compile_guardrails` (a bad rule is a ValueError naming its key; `check_guardrails` for check-config):

    max_prompt_tokens = 32000    # more: blocked, the limit named
    scope = "user"               # "user": user messages only; "all": every message (system, developer,
                                 #   assistant with its tool calls' names and arguments, tool results)
    messages = "last"            # "last": the last message in scope; "all": the whole history
    blocked_terms = ["project zeus", "internal only"]   # case-insensitive, whole words, any spacing

    [[patterns]]                 # the operator's own rules, in RE2 syntax (no lookarounds, no backreferences)
    name = "ticket-id"           # letters, digits, - and _: reported as patterns.ticket-id
    regex = 'TCK-\\d{6}'
    action = "block"             # or "redact"

    [secrets]                    # API keys (OpenAI, Anthropic, AWS, GitHub, Slack, Google, Stripe), PEM private keys
    action = "block"             # or "redact"

    [pii]                        # each detector off unless given an action
    email = "redact"
    phone = "redact"             # international (+ and a country code) and North American forms
    card = "block"               # 13-19 digits, or the printed layouts, that pass the Luhn check

Then, per request, with the prompt's token count:

- `Guard.chat(request, prompt_tokens)` gives back the request itself when nothing matched (no copy), a
  copy with each redacted text replaced (`msgspec.structs.replace`, the other messages shared), or raises
  `PromptBlocked` (400 `prompt_blocked`, `param` "messages"). Text is message content (a string or its
  text parts); with scope "all" also an assistant's refusal, tool calls' and legacy function calls'
  names and arguments, custom tools' input, and tool and function results. Images, audio and files are
  not read; nor are participants' `name`s, tool definitions, `response_format` or `prediction`.
- `Guard.texts(prompts, prompt_tokens, param)` does the same for a legacy completion's prompts or an
  embeddings request's inputs, each a whole text (`messages` does not apply); token-id prompts pass.

A block names its rule (`max_prompt_tokens`, `blocked_terms`, `patterns.NAME`, `secrets.openai_key`,
`pii.card`...), never the text that matched. A redaction writes `[REDACTED:LABEL]` (`email`, `phone`,
`card`, `openai_key`..., or the pattern's name) in place of the hit, and its output is scanned again,
so it never holds a hit of its own rules (a text still changing after three rounds is blocked). Block
rules are applied before any redaction.

Blocked terms: one Aho-Corasick pass over the casefolded text, whatever their number; a term must stand
as whole words (a letter, digit or `_` on neither side of it), and the words of a phrase may be parted
by any whitespace. Patterns and detectors: RE2 on the text's UTF-8 bytes (linear time: no pattern can
backtrack), all rules in one pass first, rule by rule only where some rule has a candidate.
"""

from ingress.guardrails.config import Guardrails, Pattern, Pii, Secrets
from ingress.guardrails.guard import Guard, check_guardrails, compile_guardrails

__all__ = ["Guard", "Guardrails", "Pattern", "Pii", "Secrets", "check_guardrails", "compile_guardrails"]
