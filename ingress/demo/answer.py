"""The demo's rules, as pure functions over a request view: what to answer, and its honest usage.

- Tools offered and tool_choice not "none", and either tool_choice names a tool / is "required", or
  the last user message contains an offered tool's name: the answer is a call to that tool (the first
  one named, in the order offered), with arguments built from its parameters schema: each property gets
  the user's text if it is a string, 0 for numbers, false for booleans, null otherwise.
- The last message is a tool result: "Tool <call id> returned: <content>".
- Otherwise: the last user message, echoed.
Tokens are whitespace-delimited words (with their leading space); a max_tokens limit cuts the echo
and finishes with "length". Usage counts the same tokens over every message's text (`count_tokens`
counts what `tokens` would return without building the list: it runs over every prompt byte).

With `logprobs` asked for, every answered token gets a log probability derived from its text alone
(`logprob`), and `top_logprobs` alternatives: the token itself first, then the token followed by one,
two... "·" (non-ASCII on purpose: their `bytes` are multi-byte), each 1.0 less likely than the last.
Deterministic, not a distribution: a demo has no model to measure.
"""

from __future__ import annotations

import itertools
import json
import re
import zlib
from dataclasses import dataclass

from ingress.wire import ROLES, CompletionRequestData, MessageData, TokenLogprob, TopLogprob

_TOKEN = re.compile(r"\s*\S+|\s+")
ROLE_TOOL = ROLES["tool"]
ROLE_USER = ROLES["user"]


def tokens(text: str, limit: int | None = None) -> list[str]:
    """The tokens of `text`, or only its first `limit` (the rest is not scanned)."""
    if limit is None:
        return _TOKEN.findall(text)
    return [m.group() for m in itertools.islice(_TOKEN.finditer(text), limit)]


# ASCII whitespace as str.isspace() sees it (the re module's \s agrees) becomes a space, anything else "x".
_SPACE_OR_X = bytes(32 if chr(b).isspace() else 120 for b in range(128)) + b"x" * 128


def count_tokens(text: str) -> int:
    """len(tokens(text)): one token per run of non-space, plus one for trailing space.

    An ASCII text is counted in C without a string per word: every byte becomes a space or an "x",
    and words are the " x" pairs (and a leading "x"): about 8x faster than len(text.split()) on prompts.
    """
    if not text:
        return 0
    if text.isascii():
        marks = text.encode().translate(_SPACE_OR_X)
        words = marks.count(b" x") + (marks[0] == 120)
        return words + (marks[-1] == 32)
    return len(text.split()) + (1 if text[-1].isspace() else 0)


def _logprob_of(token: str) -> float:
    """In [-0.7, -0.001], three decimals (so a float32 reads back as the same decimal)."""
    return -(1 + zlib.crc32(token.encode()) % 700) / 1000


def logprob(token: str, top: int) -> TokenLogprob:
    """The demo's log probability of an answered token, with `top` alternatives (see the docstring)."""
    value = _logprob_of(token)
    alternatives = [token + "·" * k for k in range(top)]
    return TokenLogprob(token=token, logprob=value, bytes=list(token.encode()), top_logprobs=[
        TopLogprob(token=t, logprob=round(value - k, 3), bytes=list(t.encode())) for k, t in enumerate(alternatives)])


@dataclass
class ToolCallPlan:
    id: str
    name: str
    arguments: str


@dataclass
class Plan:
    text_tokens: list[str]
    tool_call: ToolCallPlan | None
    finish_reason: str
    prompt_tokens: int

    @property
    def completion_tokens(self) -> int:
        return len(self.text_tokens) + (len(tokens(self.tool_call.arguments)) if self.tool_call else 0)


def message_text(m: MessageData) -> str:
    """A message's text: its content, or its text parts'."""
    content: str | None = m.content
    if content is not None:
        return content
    return "".join(p.text or "" for p in m.parts or ())


def _arguments(schema_json: str | None, user_text: str) -> str:
    try:
        schema = json.loads(schema_json or "{}")
    except ValueError:
        schema = {}
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    fill: dict[object, object] = {"string": user_text, "number": 0, "integer": 0, "boolean": False}
    args = {name: fill.get(spec.get("type") if isinstance(spec, dict) else None) for name, spec in props.items()}
    return json.dumps(args, separators=(",", ":"), ensure_ascii=False)


def _chosen_tool(req: CompletionRequestData, user_text: str) -> int | None:
    if not req.tools:
        return None
    choice = json.loads(req.tool_choice_json or '"auto"')
    names = [t.name or "" for t in req.tools]
    if choice == "none":
        return None
    if isinstance(choice, dict):
        wanted = choice.get("function", {}).get("name")
        return names.index(wanted) if wanted in names else None
    for i, name in enumerate(names):
        if name and name in user_text:
            return i
    return 0 if choice == "required" else None


def plan(req: CompletionRequestData, request_id: str) -> Plan:
    messages = req.messages or []
    prompt_tokens = sum(count_tokens(message_text(m)) for m in messages)
    user_text = next((message_text(m) for m in reversed(messages) if m.role == ROLE_USER), "")
    last = messages[-1] if messages else None
    if last is not None and last.role == ROLE_TOOL:
        reply = f"Tool {last.tool_call_id or ''} returned: {message_text(last)}"
        return Plan(tokens(reply), None, "stop", prompt_tokens)
    tool = _chosen_tool(req, user_text)
    if tool is not None:
        t = (req.tools or [])[tool]
        call = ToolCallPlan(f"call_{request_id[:24]}", t.name or "", _arguments(t.arguments_json, user_text))
        return Plan([], call, "tool_calls", prompt_tokens)
    limit = req.max_tokens
    words = tokens(user_text, limit + 1 if limit else None) or ["(empty)"]  # one more: is the echo cut?
    if limit and len(words) > limit:
        return Plan(words[:limit], None, "length", prompt_tokens)
    return Plan(words, None, "stop", prompt_tokens)
