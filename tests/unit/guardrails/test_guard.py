"""ingress/guardrails/guard.py: which messages are read (scope, messages), what a redacted request keeps, the
block error's shape, and a bad rule refused at configuration load, naming it."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from guardrail_texts import AWS, CARD, OPENAI, TERMS, chat, guard, redacted, user

from ingress.errors import InvalidRequest, PromptBlocked
from ingress.guardrails import Guard, Guardrails, Pattern, Pii, Secrets, check_guardrails, compile_guardrails
from ingress.oai.chat import AssistantMessage, ChatCompletionRequest
from ingress.oai.codec import decode_chat_request

# --------------------------------------------------------------------- which messages are read

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


def test_secrets_and_pii_with_no_actions_given() -> None:
    assert guard(secrets={}).rules[0] == "secrets.private_key"  # secrets default to block
    assert guard(pii={}).rules == ()  # each PII detector is off until given an action
    assert Secrets().action == "block" and Pii().card is None
