"""Translate a model service's answers into Google's Gemini shape (sans-I/O): a CompletionResponse into a
`GenerateContentResponse`, CompletionChunk frames into the events of Google's stream, each a partial
GenerateContentResponse.

Every choice is a candidate at its index (a request asks for several with `candidateCount`). A candidate's
parts come as Gemini orders them: the thoughts (only when the request asked for them, `includeThoughts`),
text (a refusal's too: Google has no other place for it), then each tool call a `functionCall` part with its
`args` as an object. The reasoning's signature, when it is base64 as Google's clients read it, signs the
first part after the thoughts, as Gemini attaches it. The answer's id and model are the edge's (`id`,
`model`), never the service's.
"""

from __future__ import annotations

import binascii
from base64 import b64decode
from dataclasses import dataclass, field

import msgspec
from msgspec import UNSET, UnsetType

from ingress.errors import IngressError, UpstreamProtocolError
from ingress.gemini import answers as gm
from ingress.gemini.answers import FinishReason, GenerateContentResponse
from ingress.translate.body import next_in_order
from ingress.wire import types as wire_types
from ingress.wire.answer import content_delta, decode_frame

# The contract's finish reasons → Google's. Tool calls end a turn as STOP in Gemini (its clients look for
# function calls in the parts); a content filter's stop, and a refusal, are SAFETY.
FINISH_REASONS: dict[str, FinishReason] = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP",
                                           "function_call": "STOP", "content_filter": "SAFETY", "refusal": "SAFETY",
                                           "pause_turn": "OTHER"}


def finish_reason(finish: str | None) -> FinishReason:
    """None (the service named none) is a plain stop; a reason Google has no name for is OTHER."""
    return "STOP" if finish is None else FINISH_REASONS.get(finish, "OTHER")


def usage_metadata(u: wire_types.Usage | None) -> gm.UsageMetadata:
    """Google counts the thoughts apart from the candidates; the contract counts them in completion_tokens.
    No usage: zeros (the edge counts apart)."""
    if u is None:
        return gm.UsageMetadata(prompt_token_count=0, candidates_token_count=0, total_token_count=0)
    thoughts = min(u.reasoning_tokens, u.completion_tokens)
    return gm.UsageMetadata(prompt_token_count=u.prompt_tokens, candidates_token_count=u.completion_tokens - thoughts,
                            total_token_count=u.prompt_tokens + u.completion_tokens,
                            cached_content_token_count=u.cached_tokens or UNSET, thoughts_token_count=thoughts or UNSET)


_object = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _args(arguments: str, n: int) -> msgspec.Raw:
    """A call's arguments as the JSON object they are (none: `{}`), kept as the model wrote them. Google's
    `args` is an object: arguments that are not one cannot be answered in its shape."""
    if not arguments.strip():
        return gm.EMPTY_ARGS
    try:
        _object.decode(arguments)
    except msgspec.DecodeError as exc:
        raise UpstreamProtocolError(
            f"The model service's tool call {n} has arguments that are not a JSON object.") from exc
    return msgspec.Raw(arguments.encode())


def _call_id(call_id: str | None, response_id: str, n: int) -> str:
    return call_id or f"call_{response_id}_{n}"


def signature(sig: str | None) -> str | UnsetType:
    """A signature Google's clients can hold (base64: they read it as bytes), else none."""
    if not sig:
        return UNSET
    try:
        b64decode(sig, validate=True)
    except (binascii.Error, ValueError):
        return UNSET
    return sig


def _logprobs(tokens: list[wire_types.TokenLogprob] | None) -> tuple[float | UnsetType, gm.LogprobsResult | UnsetType]:
    if not tokens:
        return UNSET, UNSET
    chosen = [gm.LogprobsCandidate(token=t.token or "", log_probability=t.logprob) for t in tokens]
    top = [gm.TopCandidates(candidates=[gm.LogprobsCandidate(token=c.token or "", log_probability=c.logprob)
                                        for c in t.top_logprobs or ()]) for t in tokens]
    result = gm.LogprobsResult(chosen_candidates=chosen,
                               top_candidates=top if any(t.candidates for t in top) else UNSET)
    return sum(t.logprob for t in tokens) / len(tokens), result


def _signed(parts: list[gm.Part], sig: str | UnsetType) -> list[gm.Part]:
    """`parts` with the signature on the first part that is not a thought (a part of its own if none is)."""
    if sig is UNSET:
        return parts
    for n, part in enumerate(parts):
        if part.thought is UNSET:
            parts[n] = msgspec.structs.replace(part, thought_signature=sig)
            return parts
    return [*parts, gm.Part(text="", thought_signature=sig)]


def candidate(c: wire_types.Choice, *, id: str, include_thoughts: bool) -> gm.Candidate:
    parts: list[gm.Part] = []
    if include_thoughts and c.reasoning:
        parts.append(gm.Part(text=c.reasoning, thought=True))
    text = (c.content or "") + (c.refusal or "")
    if text:
        parts.append(gm.Part(text=text))
    parts += [gm.Part(function_call=gm.FunctionCall(name=call.name, args=_args(call.arguments, n),
                                                    id=_call_id(call.id, id, n)))
              for n, call in enumerate(c.tool_calls)]
    parts = _signed(parts, signature(c.signature))
    average, logprobs = _logprobs(c.logprobs)
    return gm.Candidate(content=gm.Content(parts=parts), finish_reason=finish_reason(c.finish_reason), index=c.index,
                        avg_logprobs=average, logprobs_result=logprobs)


def response_from_answer(r: wire_types.Response, *, id: str, model: str,
                         include_thoughts: bool = False) -> GenerateContentResponse:
    """A whole answer: each choice a candidate. `include_thoughts`: the request's `includeThoughts`."""
    return GenerateContentResponse(candidates=[candidate(c, id=id, include_thoughts=include_thoughts)
                                               for c in r.choices],
                                   usage_metadata=usage_metadata(r.usage), model_version=model, response_id=id)


def error_event(exc: IngressError) -> gm.ErrorEnvelope:
    """The last event of a stream that failed after it began: Google's SDKs raise it."""
    return gm.error_envelope(exc)


@dataclass
class _Choice:
    """One candidate's state in a stream: the tool call whose arguments are still coming, a signature waiting
    for the part it signs, how it finished."""

    call: int | None = None
    pending: list[str] | None = None  # the call's id, name and arguments so far
    calls: set[int] = field(default_factory=set)
    signature: str | UnsetType = UNSET
    finish: str | None = None


class GeminiStreamTranslator:
    """Per-request stream state: frames in, Google's events out, each a GenerateContentResponse holding what
    the frame added: thoughts, text, and each function call once its arguments are whole (at the next call,
    text or end of its candidate), since Google's `args` is an object. At the final frame, one event with each
    candidate's finish reason and the usage; nothing after."""

    def __init__(self, *, id: str, model: str, include_thoughts: bool = False, verify: bool = True) -> None:
        self.id = id
        self.model = model
        self.include_thoughts = include_thoughts
        self.done = False
        self.usage: wire_types.Usage | None = None
        self.output: list[str] = []  # text, thoughts and tool arguments streamed: counted when no usage comes
        self.served_model: str | None = None
        self._verify = verify
        self._next_sequence = 0
        self._choices: dict[int, _Choice] = {}

    @property
    def finish_reasons(self) -> list[str]:
        """Each candidate's finish reason, in the contract's words, in candidate order."""
        return [c.finish for _, c in sorted(self._choices.items()) if c.finish is not None]

    def read_frame(self, frame: bytes) -> list[GenerateContentResponse]:
        """One whole frame (size prefix included) → its events; an Error frame is raised as decode_frame
        raises it. A token of text, nearly every frame, is read in place (`content_delta`): no decode."""
        delta = content_delta(frame)
        if delta is None or self.done or delta[0] != self._next_sequence:
            return self.feed(decode_frame(frame, verify_frame=self._verify))
        self._next_sequence += 1
        _, index, content = delta
        if not content:
            return []
        self.output.append(content)
        state = self._choices.setdefault(index, _Choice())
        return [self._event(index, [*self._flush(state), self._sign(state, gm.Part(text=content))])]

    def feed(self, chunk: wire_types.Chunk) -> list[GenerateContentResponse]:
        """A decoded frame → its events."""
        self._next_sequence = next_in_order(self.done, self._next_sequence, chunk)
        if not self.served_model:
            self.served_model = chunk.model
        state = self._choices.setdefault(chunk.choice_index, _Choice())
        parts = self._parts(chunk, state)
        events = [self._event(chunk.choice_index, parts)] if parts else []
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.done:
            self.done = True
            events.append(self._end())
        return events

    def finish(self) -> None:
        """At the end of the upstream body: a stream without its final frame was cut short."""
        if not self.done:
            raise UpstreamProtocolError("The model service stream ended before it was complete.")

    # --- the parts of a frame

    def _parts(self, chunk: wire_types.Chunk, state: _Choice) -> list[gm.Part]:
        parts: list[gm.Part] = []
        if chunk.reasoning:
            self.output.append(chunk.reasoning)
            if self.include_thoughts:
                parts.append(gm.Part(text=chunk.reasoning, thought=True))
        if chunk.signature:
            state.signature = signature(chunk.signature)
        text = (chunk.content or "") + (chunk.refusal or "")
        if text:
            self.output.append(text)
            parts += self._flush(state)
            parts.append(self._sign(state, gm.Part(text=text)))
        for d in chunk.tool_calls:
            if d.arguments:
                self.output.append(d.arguments)
            if d.index != state.call:
                if d.index in state.calls:
                    raise UpstreamProtocolError(
                        f"The model service's tool call {d.index} went on after tool call {state.call} began.")
                parts += self._flush(state)
                state.calls.add(d.index)
                state.call, state.pending = d.index, [d.id or "", d.name or "", d.arguments or ""]
            elif state.pending is not None:
                state.pending[0] = state.pending[0] or d.id or ""
                state.pending[1] += d.name or ""
                state.pending[2] += d.arguments or ""
        if chunk.finish_reason is not None:
            state.finish = chunk.finish_reason
            parts += self._flush(state)
        return parts

    def _flush(self, state: _Choice) -> list[gm.Part]:
        """The pending call, its arguments whole, as a functionCall part (none pending: nothing)."""
        if state.pending is None or state.call is None:
            return []
        (call_id, name, arguments), state.pending = state.pending, None
        call = gm.FunctionCall(name=name, args=_args(arguments, state.call), id=_call_id(call_id, self.id, state.call))
        return [self._sign(state, gm.Part(function_call=call))]

    @staticmethod
    def _sign(state: _Choice, part: gm.Part) -> gm.Part:
        if state.signature is UNSET:
            return part
        sig, state.signature = state.signature, UNSET
        return msgspec.structs.replace(part, thought_signature=sig)

    def _event(self, index: int, parts: list[gm.Part]) -> GenerateContentResponse:
        return GenerateContentResponse(candidates=[gm.Candidate(content=gm.Content(parts=parts), index=index)],
                                       model_version=self.model, response_id=self.id)

    def _end(self) -> GenerateContentResponse:
        """Each candidate's last word (its pending call, a signature nothing took, its finish reason) and the
        usage."""
        candidates = []
        for index, state in sorted(self._choices.items()) or [(0, _Choice())]:
            parts = self._flush(state)
            if state.signature is not UNSET:
                parts.append(self._sign(state, gm.Part(text="")))
            candidates.append(gm.Candidate(content=gm.Content(parts=parts) if parts else UNSET,
                                           finish_reason=finish_reason(state.finish), index=index))
        return GenerateContentResponse(candidates=candidates, usage_metadata=usage_metadata(self.usage),
                                       model_version=self.model, response_id=self.id)
