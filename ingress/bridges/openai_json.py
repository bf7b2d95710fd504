"""An OpenAI-compatible engine's JSON, read leniently (sans-I/O): its chat.completion, text_completion and
their chunks as it sends them (every field optional, unknown fields ignored), its errors in any engine's
shape, and what its fields say in the contract's terms (usage, finish reasons, logprobs, tool calls,
reasoning). Read by the dialect's answers (openai_answers.py) and embeddings (openai_embeddings.py)."""

from __future__ import annotations

from typing import Protocol, TypeVar

import msgspec

from ingress.bridges.dialect import UINT32_MAX, EngineFailed, count
from ingress.bridges.failures import engine_error, protocol_error
from ingress.wire import types as wire_types

NO_JSON = msgspec.Raw()  # a field that was absent (a Raw cannot be in a union with None)
FINISH = {"stop": "stop", "eos": "stop", "eos_token": "stop", "stop_sequence": "stop", "end_turn": "stop",
           "length": "length", "max_tokens": "length", "model_length": "length",
           "tool_calls": "tool_calls", "function_call": "tool_calls", "content_filter": "content_filter"}


class Lenient(msgspec.Struct):
    """Unknown fields ignored (msgspec's default); every field optional."""


class Function(Lenient):
    name: str | None = None
    arguments: msgspec.Raw = NO_JSON  # a JSON string, or (Ollama) the arguments' object itself


class ToolCall(Lenient):
    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: Function | None = None


class Top(Lenient):
    token: str | None = None
    logprob: float | None = None
    bytes: list[int] | None = None


class Token(Top):
    top_logprobs: list[Top] | None = None


class Logprobs(Lenient):
    content: list[Token] | None = None
    refusal: list[Token] | None = None
    # a legacy text completion's shape
    tokens: list[str] | None = None
    token_logprobs: list[float | None] | None = None
    top_logprobs: list[dict[str, float] | None] | None = None


class Message(Lenient):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] | ToolCall | None = None
    function_call: Function | None = None
    refusal: str | None = None


class Choice(Lenient):
    index: int = 0
    message: Message | None = None
    delta: Message | None = None
    text: str | None = None  # a text completion's
    finish_reason: str | None = None
    logprobs: Logprobs | None = None


class PromptDetails(Lenient):
    cached_tokens: int | None = None
    audio_tokens: int | None = None


class CompletionDetails(Lenient):
    reasoning_tokens: int | None = None
    audio_tokens: int | None = None
    accepted_prediction_tokens: int | None = None
    rejected_prediction_tokens: int | None = None


class EngineUsage(Lenient):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: PromptDetails | None = None
    completion_tokens_details: CompletionDetails | None = None


class Timings(Lenient):
    cache_n: int | None = None  # llama.cpp: the prompt's tokens its cache served


class EngineAnswer(Lenient):
    """A chat.completion, text_completion or one chunk of either; or an error in any engine's shape."""

    id: str | None = None
    object: str | None = None
    created: int | None = None
    model: str | None = None
    choices: list[Choice] | None = None
    usage: EngineUsage | None = None
    timings: Timings | None = None
    system_fingerprint: str | None = None
    service_tier: str | None = None
    error: msgspec.Raw = NO_JSON  # any shape: failures.py reads it
    message: str | None = None  # vLLM's old flat error: {"object": "error", "message", "type", "code"}


_answer = msgspec.json.Decoder(EngineAnswer, strict=False)
_text = msgspec.json.Decoder(str)
_any = msgspec.json.Decoder()


def usage_of(u: EngineUsage | None, timings: Timings | None = None) -> wire_types.Usage | None:
    if u is None:
        return None
    p, c = u.prompt_tokens_details or PromptDetails(), u.completion_tokens_details or CompletionDetails()
    cached = p.cached_tokens if p.cached_tokens is not None else (timings.cache_n if timings else None)
    prompt, completion = count(u.prompt_tokens), count(u.completion_tokens)
    return wire_types.Usage(
        prompt_tokens=prompt, completion_tokens=completion,
        total_tokens=count(u.total_tokens) or min(prompt + completion, UINT32_MAX),
        cached_tokens=count(cached), prompt_audio_tokens=count(p.audio_tokens),
        reasoning_tokens=count(c.reasoning_tokens), completion_audio_tokens=count(c.audio_tokens),
        accepted_prediction_tokens=count(c.accepted_prediction_tokens),
        rejected_prediction_tokens=count(c.rejected_prediction_tokens),
    )


def finish_of(reason: str | None) -> str | None:
    return None if reason is None else FINISH.get(reason, "stop")


def tokens_of(tokens: list[Token] | None) -> list[wire_types.TokenLogprob] | None:
    if tokens is None:
        return None
    return [wire_types.TokenLogprob(token=t.token or "", logprob=t.logprob or 0.0, bytes=t.bytes,
                                    top_logprobs=[wire_types.TopLogprob(token=x.token or "", logprob=x.logprob or 0.0,
                                                                        bytes=x.bytes)
                                                  for x in t.top_logprobs or ()])
            for t in tokens]


def legacy_tokens(lp: Logprobs) -> list[wire_types.TokenLogprob]:
    """A text completion's parallel lists, as tokens with their alternatives."""
    values, tops = lp.token_logprobs or [], lp.top_logprobs or []
    result = []
    for i, token in enumerate(lp.tokens or ()):
        top = tops[i] if i < len(tops) else None
        value = values[i] if i < len(values) else None
        alternatives = [wire_types.TopLogprob(token=k, logprob=v) for k, v in (top or {}).items()]
        result.append(wire_types.TokenLogprob(token=token, logprob=value or 0.0, top_logprobs=alternatives))
    return result


TokenList = list[wire_types.TokenLogprob] | None


def content_logprobs(lp: Logprobs | None, text: bool) -> tuple[TokenList, TokenList]:
    if lp is None:
        return None, None
    if text:
        return legacy_tokens(lp), None
    return tokens_of(lp.content), tokens_of(lp.refusal)


def arguments_of(raw: msgspec.Raw | None) -> str | None:
    """`function.arguments` as its text: a JSON string's value, or an object serialized (Ollama)."""
    data = bytes(raw) if raw is not None else b""
    if not data or data == b"null":
        return None
    if data.startswith(b'"'):
        return _text.decode(data)
    return msgspec.json.encode(_any.decode(data)).decode()


def reasoning_of(m: Message) -> str | None:
    return m.reasoning_content or m.reasoning or None


def calls_of(m: Message) -> list[ToolCall]:
    calls = m.tool_calls
    if calls is None:
        calls = []
    elif isinstance(calls, ToolCall):
        calls = [calls]  # TGI streams each delta's call as one object
    if m.function_call is not None:  # the legacy shape: one call
        calls = [*calls, ToolCall(index=len(calls), function=m.function_call)]
    return calls


class Refusable(Protocol):
    """An engine's answer that may be its error instead, in any engine's shape."""

    object: str | None
    error: msgspec.Raw


A = TypeVar("A", bound=Refusable)


def engine_answer(decoder: msgspec.json.Decoder[A], body: bytes) -> A:
    """An engine's JSON answer (a whole one, or one event's data) as `decoder` reads it: one it cannot read is
    a protocol error, and an error in the engine's own shape (answered with a 200, or as an event) is that
    error, as failures.py maps it."""
    try:
        answer = decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise EngineFailed(protocol_error(f"The engine answered something unreadable: {exc}.")) from None
    if (len(answer.error) and bytes(answer.error) != b"null") or answer.object == "error":
        raise EngineFailed(engine_error(None, {}, body))
    return answer


def read_engine(body: bytes) -> EngineAnswer:
    return engine_answer(_answer, body)
