"""A key's or a tenant's guardrails, compiled once: `Guard.chat` and `Guard.texts` check a request's
prompt and give it back unchanged, give back a redacted copy, or raise PromptBlocked."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from msgspec.structs import replace

from ingress.errors import PromptBlocked
from ingress.guardrails.config import Guardrails
from ingress.guardrails.detectors import PII, SECRETS
from ingress.guardrails.scanner import (
    BLOCKED_TERMS,
    Blocked,
    Rule,
    Scanner,
    Terms,
    compile_regex,
    fold_term,
    placeholder,
)
from ingress.oai.chat import (
    AssistantMessage,
    ChatCompletionRequest,
    CustomCallIn,
    FunctionCallIn,
    FunctionMessage,
    Message,
    RefusalPart,
    TextPart,
    ToolCallIn,
    UserMessage,
)
from ingress.oai.codec import validation_path

MAX_PROMPT_TOKENS = "max_prompt_tokens"


class Guard:
    """The compiled rules of one Guardrails; stateless, shared by every request that carries them."""

    def __init__(self, guardrails: Guardrails, scanner: Scanner | None, rules: tuple[str, ...]) -> None:
        self._max_tokens = guardrails.max_prompt_tokens
        self.counts_tokens = self._max_tokens is not None  # its max_prompt_tokens needs the prompt's exact count
        self._every_role = guardrails.scope == "all"
        self._history = guardrails.messages == "all"
        self._scanner = scanner
        self.rules = rules  # every rule's name, as PromptBlocked.rule reports it: a bounded set, for metrics

    def chat(self, request: ChatCompletionRequest, prompt_tokens: int) -> ChatCompletionRequest:
        """`request` itself when nothing matched; a copy with the hits redacted; or PromptBlocked
        (param `messages`)."""
        self._check_tokens(prompt_tokens, "messages")
        if self._scanner is None:
            return request
        messages = request.messages
        chosen = [i for i, m in enumerate(messages) if self._every_role or isinstance(m, UserMessage)]
        changed: dict[int, Message] = {}
        try:
            for i in chosen if self._history else chosen[-1:]:
                message = self._message(messages[i])
                if message is not messages[i]:
                    changed[i] = message
        except Blocked as hit:
            raise PromptBlocked(hit.rule, param="messages") from None
        if not changed:
            return request
        return replace(request, messages=[changed.get(i, m) for i, m in enumerate(messages)])

    def texts(self, prompts: list[str | list[int]], prompt_tokens: int,
              param: str = "prompt") -> list[str | list[int]]:
        """A legacy completion's prompts or an embeddings request's inputs (each one a whole text, so
        `messages` does not apply): `prompts` itself when nothing matched, else a new list. Token-id
        lists pass unread: the edge holds no tokenizer to read them with."""
        self._check_tokens(prompt_tokens, param)
        if self._scanner is None:
            return prompts
        out: list[str | list[int]] | None = None
        try:
            for i, prompt in enumerate(prompts):
                if isinstance(prompt, str) and (text := self._scanner.scan(prompt)) is not prompt:
                    out = out if out is not None else list(prompts)
                    out[i] = text
        except Blocked as hit:
            raise PromptBlocked(hit.rule, param=param) from None
        return prompts if out is None else out

    def _check_tokens(self, prompt_tokens: int, param: str) -> None:
        if self._max_tokens is not None and prompt_tokens > self._max_tokens:
            raise PromptBlocked(MAX_PROMPT_TOKENS, param=param, message=(
                f"The prompt has {prompt_tokens} tokens, more than the {self._max_tokens} allowed "
                f"(guardrail rule '{MAX_PROMPT_TOKENS}')."))

    # --- the text of each kind of message ---------------------------------------------------------

    def _message(self, m: Message) -> Message:
        if isinstance(m, AssistantMessage):
            content = self._content(m.content)
            refusal = self._optional(m.refusal)
            calls = self._calls(m.tool_calls)
            legacy = self._function(m.function_call)
            if content is m.content and refusal is m.refusal and calls is m.tool_calls and legacy is m.function_call:
                return m
            return replace(m, content=content, refusal=refusal, tool_calls=calls, function_call=legacy)
        if isinstance(m, FunctionMessage):
            text, name = self._optional(m.content), self._text(m.name)
            return m if text is m.content and name is m.name else replace(m, content=text, name=name)
        content = self._content(m.content)  # system, developer, user, tool
        return m if content is m.content else replace(m, content=content)

    def _text(self, text: str) -> str:
        assert self._scanner is not None
        return self._scanner.scan(text)

    def _optional(self, text: str | None) -> str | None:
        return None if text is None else self._text(text)

    def _content(self, content: str | Sequence[object] | None) -> str | Sequence[object] | None:
        """A message's content: a string, or parts (each struct's own type, kept by `replace`)."""
        if content is None or isinstance(content, str):
            return self._optional(content)
        out: list[object] | None = None
        for j, part in enumerate(content):
            new = self._part(part)
            if new is not part:
                out = out if out is not None else list(content)
                out[j] = new
        return content if out is None else out

    def _part(self, part: object) -> object:
        """Text parts; refusals are an assistant's, read only with scope "all". Images, audio and
        files are not text."""
        if isinstance(part, TextPart):
            text = self._text(part.text)
            return part if text is part.text else replace(part, text=text)
        if isinstance(part, RefusalPart):
            text = self._text(part.refusal)
            return part if text is part.refusal else replace(part, refusal=text)
        return part

    def _calls(self, calls: list[ToolCallIn] | None) -> list[ToolCallIn] | None:
        if calls is None:
            return None
        out: list[ToolCallIn] | None = None
        for j, call in enumerate(calls):
            function, custom = self._function(call.function), self._custom(call.custom)
            if function is not call.function or custom is not call.custom:
                out = out if out is not None else list(calls)
                out[j] = replace(call, function=function, custom=custom)
        return calls if out is None else out

    def _function(self, call: FunctionCallIn | None) -> FunctionCallIn | None:
        if call is None:
            return None
        name, arguments = self._text(call.name), self._text(call.arguments)
        return call if name is call.name and arguments is call.arguments else FunctionCallIn(name, arguments)

    def _custom(self, call: CustomCallIn | None) -> CustomCallIn | None:
        if call is None:
            return None
        name, text = self._text(call.name), self._text(call.input)
        return call if name is call.name and text is call.input else CustomCallIn(name, text)


def compile_guardrails(guardrails: Guardrails) -> Guard:
    """Checked and compiled once, at configuration load. A bad rule raises ValueError naming it by its
    key below the guardrails table (`patterns[2].regex: ...`)."""
    try:  # a Guardrails built in code has had no decoding to check its fields
        guardrails = msgspec.convert(msgspec.to_builtins(guardrails), Guardrails)
    except msgspec.ValidationError as exc:
        detail, path = validation_path(exc)
        raise ValueError(f"{path or '(guardrails)'}: {detail}") from None
    names: list[str] = []
    terms = None
    if guardrails.blocked_terms:
        for i, term in enumerate(guardrails.blocked_terms):
            if not fold_term(term):
                raise ValueError(f"blocked_terms[{i}]: a term needs a character other than whitespace")
        terms = Terms(guardrails.blocked_terms)
        names.append(BLOCKED_TERMS)
    builtin = _builtin_rules(guardrails)
    rules = builtin + _pattern_rules(guardrails, builtin)
    names += [rule.name for rule in rules]
    if guardrails.max_prompt_tokens is not None:
        names.insert(0, MAX_PROMPT_TOKENS)
    scanner = Scanner(terms, rules) if terms is not None or rules else None
    return Guard(guardrails, scanner, tuple(names))


def check_guardrails(guardrails: Guardrails) -> None:
    """For `check-config`: raises ValueError naming the first bad rule, as compile_guardrails does."""
    compile_guardrails(guardrails)


def _builtin_rules(guardrails: Guardrails) -> list[Rule]:
    rules = []
    if guardrails.secrets is not None:
        action = guardrails.secrets.action
        rules += [Rule(d.name, d.label, d.regex, compile_regex(d.regex), action, d.verify) for d in SECRETS]
    if guardrails.pii is not None:
        for kind, d in PII.items():
            if (action := getattr(guardrails.pii, kind)) is not None:
                rules.append(Rule(d.name, d.label, d.regex, compile_regex(d.regex), action, d.verify))
    return rules


def _pattern_rules(guardrails: Guardrails, builtin: list[Rule]) -> list[Rule]:
    """The operator's patterns. Refused: one RE2 cannot compile (lookarounds, backreferences...), one
    that matches the empty string (it would match every prompt) or uses `\\C`, one that matches a
    placeholder (it would find the redactions' own output), and a name given twice."""
    rules: list[Rule] = []
    seen: dict[str, int] = {}
    for i, p in enumerate(guardrails.patterns):
        if p.name in seen:
            raise ValueError(f"patterns[{i}].name: {p.name!r} is already the name of patterns[{seen[p.name]}]")
        seen[p.name] = i
        source = p.regex.encode()
        try:
            regex = compile_regex(source)
        except ValueError as exc:
            raise ValueError(f"patterns[{i}].regex: RE2 cannot compile pattern {p.name!r}: {exc}") from None
        if _any_byte(p.regex):
            raise ValueError(f"patterns[{i}].regex: pattern {p.name!r} uses \\C (any byte), which can match half "
                             "of a character")
        if regex.search(b"") is not None:
            raise ValueError(f"patterns[{i}].regex: pattern {p.name!r} matches the empty string, so every prompt")
        rules.append(Rule(f"patterns.{p.name}", p.name, source, regex, p.action))
    redacting = [r.label for r in builtin + rules if r.action == "redact"]
    for i, rule in enumerate(rules):
        for label in redacting:
            if rule.regex.search(placeholder(label)) is not None:
                raise ValueError(f"patterns[{i}].regex: pattern {rule.label!r} matches "
                                 f"{placeholder(label).decode()}, the placeholder a redaction writes")
    return rules


def _any_byte(regex: str) -> bool:
    """Whether the pattern says `\\C`: one byte, which in UTF-8 text may be a piece of a character (a
    redaction that cut one would leave bytes that are not text)."""
    escaped = False
    for char in regex:
        if escaped and char == "C":
            return True
        escaped = not escaped and char == "\\"
    return False
