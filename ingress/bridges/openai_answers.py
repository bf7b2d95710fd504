"""The OpenAI-compatible dialect's answers (sans-I/O): an engine's chat.completion or text_completion,
whole (`read_answer`) or streamed (`OpenAIStream`), read leniently: what an engine omits (ids,
`created`, usage) is filled in or left out, what it adds is ignored. A stream is made into our chunks,
numbered from 0, whatever the engine's shape:

- tool calls renumbered 0..n-1 per choice: a delta's call is a continuation of the call open at its
  engine index unless it brings a different id (a second call reusing index 0), or, without ids, a
  different name; an id missing or `""` is generated, stable (`call_<response id>_<choice>_<n>`);
  continuation deltas carry only the index and the arguments (an id or name repeated on every delta,
  as TGI and some vLLM parsers send, is not repeated); `tool_calls` as one object (TGI) or a list;
  `function.arguments` as a JSON object (Ollama's form) serialized to its text;
- `reasoning_content` (vLLM, SGLang, DeepSeek) or `reasoning` (vLLM ≥ 0.10, Ollama, OpenRouter) into
  the chunk's `reasoning`, never into content (an engine that sends both sends the same text: one is used);
- the role once per choice; usage kept from the last chunk that had it (vLLM's continuous_usage_stats
  puts it on every chunk) and sent once, on the final chunk; the finish reason held back to that final
  chunk when nothing follows it;
- `data: {"error": ...}` (OpenAI's and vLLM's shape, vLLM's old flat `{"object": "error", ...}`, TGI's
  `{"error": "...", "error_type": ...}`) or llama.cpp's `error:` line → EngineFailed; a body that ends
  without `data: [DONE]` → EngineFailed in `finish`, never a success; anything after [DONE] is ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

import msgspec

from ingress.bridges.dialect import EngineFailed, EventStreamDecoder
from ingress.bridges.eventstream import Event
from ingress.bridges.failures import engine_error, protocol_error
from ingress.wire import types as wire_types

DONE = b"[DONE]"
UINT32_MAX = 2**32 - 1
NO_JSON = msgspec.Raw()  # a field that was absent (a Raw cannot be in a union with None)
_FINISH = {"stop": "stop", "eos": "stop", "eos_token": "stop", "stop_sequence": "stop", "end_turn": "stop",
           "length": "length", "max_tokens": "length", "model_length": "length",
           "tool_calls": "tool_calls", "function_call": "tool_calls", "content_filter": "content_filter"}


# --- the engine's JSON, read leniently -----------------------------------------------------------


class _Lenient(msgspec.Struct):
    """Unknown fields ignored (msgspec's default); every field optional."""


class _Function(_Lenient):
    name: str | None = None
    arguments: msgspec.Raw = NO_JSON  # a JSON string, or (Ollama) the arguments' object itself


class _ToolCall(_Lenient):
    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: _Function | None = None


class _Top(_Lenient):
    token: str | None = None
    logprob: float | None = None
    bytes: list[int] | None = None


class _Token(_Top):
    top_logprobs: list[_Top] | None = None


class _Logprobs(_Lenient):
    content: list[_Token] | None = None
    refusal: list[_Token] | None = None
    # a legacy text completion's shape
    tokens: list[str] | None = None
    token_logprobs: list[float | None] | None = None
    top_logprobs: list[dict[str, float] | None] | None = None


class _Message(_Lenient):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCall] | _ToolCall | None = None
    function_call: _Function | None = None
    refusal: str | None = None


class _Choice(_Lenient):
    index: int = 0
    message: _Message | None = None
    delta: _Message | None = None
    text: str | None = None  # a text completion's
    finish_reason: str | None = None
    logprobs: _Logprobs | None = None


class _PromptDetails(_Lenient):
    cached_tokens: int | None = None
    audio_tokens: int | None = None


class _CompletionDetails(_Lenient):
    reasoning_tokens: int | None = None
    audio_tokens: int | None = None
    accepted_prediction_tokens: int | None = None
    rejected_prediction_tokens: int | None = None


class _Usage(_Lenient):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None


class _Timings(_Lenient):
    cache_n: int | None = None  # llama.cpp: the prompt's tokens its cache served


class _Answer(_Lenient):
    """A chat.completion, text_completion or one chunk of either; or an error in any engine's shape."""

    id: str | None = None
    object: str | None = None
    created: int | None = None
    model: str | None = None
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    timings: _Timings | None = None
    system_fingerprint: str | None = None
    service_tier: str | None = None
    error: msgspec.Raw = NO_JSON  # any shape: failures.py reads it
    message: str | None = None  # vLLM's old flat error: {"object": "error", "message", "type", "code"}


_answer = msgspec.json.Decoder(_Answer, strict=False)
_text = msgspec.json.Decoder(str)
_any = msgspec.json.Decoder()


def _count(value: int | None) -> int:
    return 0 if value is None else max(0, min(value, UINT32_MAX))


def _usage(u: _Usage | None, timings: _Timings | None = None) -> wire_types.Usage | None:
    if u is None:
        return None
    p, c = u.prompt_tokens_details or _PromptDetails(), u.completion_tokens_details or _CompletionDetails()
    cached = p.cached_tokens if p.cached_tokens is not None else (timings.cache_n if timings else None)
    prompt, completion = _count(u.prompt_tokens), _count(u.completion_tokens)
    return wire_types.Usage(
        prompt_tokens=prompt, completion_tokens=completion,
        total_tokens=_count(u.total_tokens) or min(prompt + completion, UINT32_MAX),
        cached_tokens=_count(cached), prompt_audio_tokens=_count(p.audio_tokens),
        reasoning_tokens=_count(c.reasoning_tokens), completion_audio_tokens=_count(c.audio_tokens),
        accepted_prediction_tokens=_count(c.accepted_prediction_tokens),
        rejected_prediction_tokens=_count(c.rejected_prediction_tokens),
    )


def _finish(reason: str | None) -> str | None:
    return None if reason is None else _FINISH.get(reason, "stop")


def _tokens(tokens: list[_Token] | None) -> list[wire_types.TokenLogprob] | None:
    if tokens is None:
        return None
    return [wire_types.TokenLogprob(token=t.token or "", logprob=t.logprob or 0.0, bytes=t.bytes,
                                    top_logprobs=[wire_types.TopLogprob(token=x.token or "", logprob=x.logprob or 0.0,
                                                                        bytes=x.bytes)
                                                  for x in t.top_logprobs or ()])
            for t in tokens]


def _legacy_tokens(lp: _Logprobs) -> list[wire_types.TokenLogprob]:
    """A text completion's parallel lists, as tokens with their alternatives."""
    values, tops = lp.token_logprobs or [], lp.top_logprobs or []
    result = []
    for i, token in enumerate(lp.tokens or ()):
        top = tops[i] if i < len(tops) else None
        value = values[i] if i < len(values) else None
        alternatives = [wire_types.TopLogprob(token=k, logprob=v) for k, v in (top or {}).items()]
        result.append(wire_types.TokenLogprob(token=token, logprob=value or 0.0, top_logprobs=alternatives))
    return result


_TokenList = list[wire_types.TokenLogprob] | None


def _content_logprobs(lp: _Logprobs | None, text: bool) -> tuple[_TokenList, _TokenList]:
    if lp is None:
        return None, None
    if text:
        return _legacy_tokens(lp), None
    return _tokens(lp.content), _tokens(lp.refusal)


def _arguments(raw: msgspec.Raw | None) -> str | None:
    """`function.arguments` as its text: a JSON string's value, or an object serialized (Ollama)."""
    data = bytes(raw) if raw is not None else b""
    if not data or data == b"null":
        return None
    if data.startswith(b'"'):
        return _text.decode(data)
    return msgspec.json.encode(_any.decode(data)).decode()


def _reasoning(m: _Message) -> str | None:
    return m.reasoning_content or m.reasoning or None


def _calls_of(m: _Message) -> list[_ToolCall]:
    calls = m.tool_calls
    if calls is None:
        calls = []
    elif isinstance(calls, _ToolCall):
        calls = [calls]  # TGI streams each delta's call as one object
    if m.function_call is not None:  # the legacy shape: one call
        calls = [*calls, _ToolCall(index=len(calls), function=m.function_call)]
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


def _read(body: bytes) -> _Answer:
    return engine_answer(_answer, body)


def read_answer(body: bytes, *, text: bool, fallback_id: str, model: str,
                clock: Callable[[], float]) -> wire_types.Response:
    """A whole answer (chat.completion, or text_completion when `text`), read leniently."""
    a = _read(body)
    rid = a.id or fallback_id
    choices = []
    for c in a.choices or ():
        m = c.message or _Message()
        content, refusal = _content_logprobs(c.logprobs, text)
        calls = [wire_types.FunctionCall(id=t.id or f"call_{rid}_{c.index}_{n}",
                     name=(t.function.name if t.function else None) or "",
                     arguments=_arguments(t.function.arguments if t.function else None) or "")
             for n, t in enumerate(_calls_of(m))]
        choices.append(wire_types.Choice(
        index=c.index, content=c.text if text else m.content, tool_calls=calls,
        refusal=m.refusal, finish_reason=_finish(c.finish_reason), logprobs=content,
        refusal_logprobs=refusal, reasoning=_reasoning(m)))
    return wire_types.Response(id=rid, model=a.model or model, created=a.created or int(clock()),
               choices=choices, usage=_usage(a.usage, a.timings),
               system_fingerprint=a.system_fingerprint, service_tier=a.service_tier)


# --- the stream -----------------------------------------------------------------------------------


class _Call:
    __slots__ = ("id", "name")

    def __init__(self, id: str, name: str | None) -> None:
        self.id = id
        self.name = name


class _ChoiceState:
    __slots__ = ("calls", "open", "started")

    def __init__(self) -> None:
        self.started = False
        self.calls: list[_Call] = []
        self.open: dict[int, int] = {}  # the engine's tool call index → ours


class OpenAIStream(EventStreamDecoder):
    """One streamed answer: SSE bytes in any split → our numbered chunks (see the module's docstring)."""

    def __init__(self, *, fallback_id: str, text: bool = False) -> None:
        super().__init__()
        self._text = text
        self._fallback_id = fallback_id
        self._id: str | None = None
        self._model: str | None = None
        self._created: int | None = None
        self._fingerprint: str | None = None
        self._tier: str | None = None
        self._usage: wire_types.Usage | None = None
        self._choices: dict[int, _ChoiceState] = {}
        self._sequence = 0
        self._held: wire_types.Chunk | None = None  # a finish reason, kept for the final chunk if nothing follows

    def _event(self, event: Event, out: list[wire_types.Chunk]) -> None:
        if event.type == "error":
            raise EngineFailed(engine_error(None, {}, event.data))
        if event.type != "message":
            return  # a named event no OpenAI-compatible engine sends for chunks: ignored
        if event.data.strip() == DONE:
            self._end(out)
            return
        if not event.data.strip():
            return
        answer = _read(event.data)
        self._id = self._id or answer.id or None
        self._model = self._model or answer.model or None
        self._created = self._created or answer.created or None
        if answer.usage is not None:
            self._usage = _usage(answer.usage, answer.timings)
        for choice in answer.choices or ():
            self._choice(choice, out, answer)

    def _choice(self, c: _Choice, out: list[wire_types.Chunk], answer: _Answer) -> None:
        state = self._choices.setdefault(c.index, _ChoiceState())
        m = c.delta or c.message or _Message()
        content = c.text if self._text else m.content
        calls = self._tool_deltas(c.index, state, _calls_of(m)) if not self._text else []
        logprobs, refusal_logprobs = _content_logprobs(c.logprobs, self._text)
        finish = _finish(c.finish_reason)
        reasoning, refusal = _reasoning(m), m.refusal or None
        first = not state.started and not self._text
        if not (content or reasoning or refusal or calls or finish or logprobs or refusal_logprobs or first):
            return
        state.started = True
        chunk = wire_types.Chunk(sequence=0, choice_index=c.index, role="assistant" if first else None,
                                 content=content if content or (first and content == "") else None,
                                 reasoning=reasoning, refusal=refusal, tool_calls=calls, finish_reason=finish,
                                 logprobs=logprobs, refusal_logprobs=refusal_logprobs)
        fingerprint, tier = answer.system_fingerprint or None, answer.service_tier or None
        if fingerprint != self._fingerprint:
            self._fingerprint = chunk.system_fingerprint = fingerprint
        if tier != self._tier:
            self._tier = chunk.service_tier = tier
        self._emit(chunk, out)

    def _tool_deltas(self, choice: int, state: _ChoiceState, calls: list[_ToolCall]) -> list[wire_types.ToolCallDelta]:
        deltas = []
        for position, t in enumerate(calls):
            key = t.index if t.index is not None else position
            engine_id = t.id or None
            name = (t.function.name if t.function else None) or None
            arguments = _arguments(t.function.arguments if t.function else None)
            ours = state.open.get(key)
            current = state.calls[ours] if ours is not None else None
            if current is None or (engine_id is not None and engine_id != current.id) or (
                    engine_id is None and name is not None and current.name is not None and name != current.name):
                ours = len(state.calls)
                call = _Call(engine_id or f"call_{self._response_id()}_{choice}_{ours}", name)
                state.calls.append(call)
                state.open[key] = ours
                kind = t.type if t.type in ("function", "custom") else "function"
                deltas.append(wire_types.ToolCallDelta(index=ours, id=call.id, type=kind, name=name,
                                                       arguments=arguments or ""))
                continue
            assert ours is not None
            late_name = name if current.name is None and name is not None else None
            if late_name is not None:
                current.name = late_name
            if arguments or late_name:
                deltas.append(wire_types.ToolCallDelta(index=ours, name=late_name, arguments=arguments or None))
        return deltas

    def _response_id(self) -> str:
        return self._id or self._fallback_id

    def _emit(self, chunk: wire_types.Chunk, out: list[wire_types.Chunk]) -> None:
        if self._held is not None:
            self._number(self._held, out)
            self._held = None
        if chunk.finish_reason is not None:
            self._held = chunk
        else:
            self._number(chunk, out)

    def _number(self, chunk: wire_types.Chunk, out: list[wire_types.Chunk]) -> None:
        chunk.sequence = self._sequence
        if self._sequence == 0:
            chunk.id, chunk.model, chunk.created = self._response_id(), self._model, self._created
        self._sequence += 1
        out.append(chunk)

    def _end(self, out: list[wire_types.Chunk]) -> None:
        final = self._held or wire_types.Chunk(sequence=0, choice_index=0)
        self._held = None
        final.done = True
        final.usage = self._usage
        self._number(final, out)
        self._done = True
