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

from ingress.bridges.dialect import EngineFailed, EventStreamDecoder
from ingress.bridges.eventstream import Event
from ingress.bridges.failures import engine_error
from ingress.bridges.openai_json import (
    Choice,
    EngineAnswer,
    Message,
    ToolCall,
    arguments_of,
    calls_of,
    content_logprobs,
    finish_of,
    read_engine,
    reasoning_of,
    usage_of,
)
from ingress.wire import types as wire_types

DONE = b"[DONE]"


def read_answer(body: bytes, *, text: bool, fallback_id: str, model: str,
                clock: Callable[[], float]) -> wire_types.Response:
    """A whole answer (chat.completion, or text_completion when `text`), read leniently."""
    a = read_engine(body)
    rid = a.id or fallback_id
    choices = []
    for c in a.choices or ():
        m = c.message or Message()
        content, refusal = content_logprobs(c.logprobs, text)
        calls = [wire_types.FunctionCall(id=t.id or f"call_{rid}_{c.index}_{n}",
                     name=(t.function.name if t.function else None) or "",
                     arguments=arguments_of(t.function.arguments if t.function else None) or "")
             for n, t in enumerate(calls_of(m))]
        choices.append(wire_types.Choice(
        index=c.index, content=c.text if text else m.content, tool_calls=calls,
        refusal=m.refusal, finish_reason=finish_of(c.finish_reason), logprobs=content,
        refusal_logprobs=refusal, reasoning=reasoning_of(m)))
    return wire_types.Response(id=rid, model=a.model or model, created=a.created or int(clock()),
               choices=choices, usage=usage_of(a.usage, a.timings),
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
        answer = read_engine(event.data)
        self._id = self._id or answer.id or None
        self._model = self._model or answer.model or None
        self._created = self._created or answer.created or None
        if answer.usage is not None:
            self._usage = usage_of(answer.usage, answer.timings)
        for choice in answer.choices or ():
            self._choice(choice, out, answer)

    def _choice(self, c: Choice, out: list[wire_types.Chunk], answer: EngineAnswer) -> None:
        state = self._choices.setdefault(c.index, _ChoiceState())
        m = c.delta or c.message or Message()
        content = c.text if self._text else m.content
        calls = self._tool_deltas(c.index, state, calls_of(m)) if not self._text else []
        logprobs, refusal_logprobs = content_logprobs(c.logprobs, self._text)
        finish = finish_of(c.finish_reason)
        reasoning, refusal = reasoning_of(m), m.refusal or None
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

    def _tool_deltas(self, choice: int, state: _ChoiceState, calls: list[ToolCall]) -> list[wire_types.ToolCallDelta]:
        deltas = []
        for position, t in enumerate(calls):
            key = t.index if t.index is not None else position
            engine_id = t.id or None
            name = (t.function.name if t.function else None) or None
            arguments = arguments_of(t.function.arguments if t.function else None)
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
