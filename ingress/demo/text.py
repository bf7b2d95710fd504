"""The demo's answer to a legacy text completion, as pure functions over the request.

Each prompt is echoed back as its completion, one word (with its leading space) per token, cut at
`max_tokens` (16 when not sent, OpenAI's default; 0 allowed: only the echo, if asked) with finish
reason "length". A token-id prompt reads as its ids, space-separated (" 1 2 3"). With `echo` the
choice's text begins with the prompt itself. Every prompt gets `n` identical choices, indexed
prompt * n + j. Usage: a text prompt counts its words, a token-id prompt its ids; completion tokens
are the words answered, over all choices. With `logprobs` (logprobs_count) each answered word gets the
demo's deterministic log probability and that many alternatives, as chat's do (answer.py); the echo
has none (the edge refuses `logprobs` with `echo`: the contract carries no prompt logprobs).
"""

from __future__ import annotations

from dataclasses import dataclass

from ingress.demo.answer import count_tokens, logprob, tokens
from ingress.wire import CompletionRequestData, PromptInputData, TokenLogprob

DEFAULT_MAX_TOKENS = 16


@dataclass
class TextPlan:
    """One prompt's answer: the echo (empty unless asked), the words answered, how it finished, and the
    words' logprobs (None: none asked for)."""

    echo: str
    words: list[str]
    finish_reason: str
    prompt_tokens: int
    logprobs: list[TokenLogprob] | None = None


def prompt_text(p: PromptInputData) -> str:
    return p.text if p.text is not None else "".join(f" {t}" for t in p.tokens or ())


def plan_text(req: CompletionRequestData) -> list[TextPlan]:
    limit = req.max_tokens if req.max_tokens_set else DEFAULT_MAX_TOKENS
    plans = []
    for p in req.prompts or ():
        text = prompt_text(p)
        words = tokens(text, limit + 1) or ["(empty)"]  # one more: is the echo cut?
        finish = "length" if len(words) > limit else "stop"
        prompt_tokens = count_tokens(text) if p.text is not None else len(p.tokens or ())
        answered = words[:limit]
        top = req.logprobs_count
        logprobs = [logprob(w, top) for w in answered] if top is not None else None
        plans.append(TextPlan(text if req.echo else "", answered, finish, prompt_tokens, logprobs))
    return plans


def usage_of(plans: list[TextPlan], n: int) -> tuple[int, int]:
    """(prompt tokens, completion tokens) of the whole answer."""
    return sum(p.prompt_tokens for p in plans), sum(len(p.words) for p in plans) * n
