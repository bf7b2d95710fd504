"""A service's answer from one shape to the other, in the contract's terms (sans-I/O): a whole
`CompletionResponse` as the frames a stream of it would be, and a stream's frames as the whole answer.

The response cache stores an answer as it came and serves it either way (ingress/cache): each output is
what a service could have sent, so the edge reads it exactly as it reads a live answer, through the same
verifier and translators, in any dialect.

    response_frames(buf)  -> bytes   frames: per choice, its reasoning (with its signature and redacted
                                     reasoning), its content (with its logprobs), its refusal (with its
                                     logprobs), its tool calls, its finish; then the usage on the final frame
    stream_response(body) -> bytes   one CompletionResponse: each choice's deltas joined, in order
    complete_stream(body) -> bool    the body is a whole stream: well-formed chunk frames, numbered from 0,
                                     the last (only the last) final, no Error frame

A stream frame has no annotations (url citations), so a whole answer's are not in its frames; every other
field goes across both ways.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ingress.wire import identifiers
from ingress.wire import types as wire_types
from ingress.wire.answer import content_delta, decode_answer, decode_frame
from ingress.wire.encode import encode_chunk_frame, encode_response
from ingress.wire.framing import MAX_FRAME, FrameDecoder, FrameError
from ingress.wire.types import Chunk, ToolCallDelta


def response_frames(buf: bytes) -> bytes:
    """A CompletionResponse buffer as the frames of the same answer streamed; it is verified first, and
    anything else raises (an Error buffer as the error it stands for)."""
    r = decode_answer(buf)
    chunks: list[Chunk] = []

    def add(**fields: object) -> None:
        head = {} if chunks else {"id": r.id, "model": r.model, "created": r.created,
                                  "system_fingerprint": r.system_fingerprint, "service_tier": r.service_tier}
        chunks.append(Chunk(sequence=len(chunks), **head, **fields))  # type: ignore[arg-type]  # the fields are Chunk's

    for c in r.choices:
        add(choice_index=c.index, role="assistant", reasoning=c.reasoning, signature=c.signature,
            redacted_thinking=c.redacted_thinking)
        if c.content is not None or c.logprobs is not None:
            add(choice_index=c.index, content=c.content, logprobs=c.logprobs)
        if c.refusal is not None or c.refusal_logprobs is not None:
            add(choice_index=c.index, refusal=c.refusal, refusal_logprobs=c.refusal_logprobs)
        if c.tool_calls:
            add(choice_index=c.index, tool_calls=[
                ToolCallDelta(index=n, id=t.id, type=t.type, name=t.name, arguments=t.arguments)
                for n, t in enumerate(c.tool_calls)])
        add(choice_index=c.index, finish_reason=c.finish_reason, stop_sequence=c.stop_sequence)
    add(usage=r.usage, done=True)
    return b"".join(bytes(encode_chunk_frame(chunk)) for chunk in chunks)


@dataclass
class _Call:
    id: str | None = None
    type: str | None = None
    name: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Choice:
    """One choice's deltas, gathered."""

    content: list[str] | None = None
    refusal: list[str] | None = None
    reasoning: list[str] | None = None
    signature: str | None = None
    redacted: list[str] = field(default_factory=list)
    logprobs: list[wire_types.TokenLogprob] | None = None
    refusal_logprobs: list[wire_types.TokenLogprob] | None = None
    calls: dict[int, _Call] = field(default_factory=dict)
    finish_reason: str | None = None
    stop_sequence: str | None = None

    def add(self, k: Chunk) -> None:
        if k.content is not None:
            self.text(k.content)
        if k.refusal is not None:
            self.refusal = [*(self.refusal or ()), k.refusal]
        if k.reasoning is not None:
            if self.reasoning is None:
                self.reasoning = []
            self.reasoning.append(k.reasoning)
        self.signature = k.signature if k.signature is not None else self.signature
        self.redacted += k.redacted_thinking
        if k.logprobs is not None:
            self.logprobs = [*(self.logprobs or ()), *k.logprobs]
        if k.refusal_logprobs is not None:
            self.refusal_logprobs = [*(self.refusal_logprobs or ()), *k.refusal_logprobs]
        for d in k.tool_calls:
            call = self.calls.setdefault(d.index, _Call())
            call.id = call.id or d.id
            call.type = call.type or d.type
            if d.name:
                call.name.append(d.name)
            if d.arguments:
                call.arguments.append(d.arguments)
        self.finish_reason = k.finish_reason or self.finish_reason
        self.stop_sequence = k.stop_sequence if k.stop_sequence is not None else self.stop_sequence

    def text(self, content: str) -> None:
        if self.content is None:
            self.content = []
        self.content.append(content)

    def whole(self, index: int) -> wire_types.Choice:
        calls = [wire_types.FunctionCall(id=c.id or "", type=c.type or "function", name="".join(c.name),
                                         arguments="".join(c.arguments)) for _, c in sorted(self.calls.items())]
        content = None if self.content is None else "".join(self.content)
        if content == "" and (calls or self.refusal is not None):  # a stream's empty opening delta, no text
            content = None
        return wire_types.Choice(
            index=index, content=content, tool_calls=calls,
            refusal=None if self.refusal is None else "".join(self.refusal), finish_reason=self.finish_reason,
            logprobs=self.logprobs, refusal_logprobs=self.refusal_logprobs,
            reasoning=None if self.reasoning is None else "".join(self.reasoning), signature=self.signature,
            redacted_thinking=self.redacted, stop_sequence=self.stop_sequence)


Delta = tuple[int, int, str]  # (sequence, choice index, content): a token's frame, read in place


def stream_chunks(body: bytes) -> list[Chunk | Delta]:
    """The frames of a whole stream (`complete_stream`), verified and read: a token's frame in place (as
    the stream translators read it, `content_delta`), any other decoded; ValueError if it is not a whole
    stream (an IngressError if a frame does not verify, or is an Error)."""
    frames = FrameDecoder(MAX_FRAME)
    try:
        found = list(frames.feed(body))
        frames.finish()
    except FrameError as exc:
        raise ValueError(str(exc)) from None
    if not found:
        raise ValueError("no frames")
    last = len(found) - 1
    read: list[Chunk | Delta] = []
    for n, frame in enumerate(found):
        delta = content_delta(frame)
        if delta is not None:  # never the final frame: its `done` is false
            if delta[0] != n or n == last:
                raise ValueError(f"frame {n} is out of order, or the stream has no final frame")
            read.append(delta)
            continue
        if identifiers.identifier_of(frame, 4) != identifiers.CHUNK:
            raise ValueError(f"frame {n} is not a chunk")
        chunk = decode_frame(frame)  # verified: what a store gives back is read as warily as a service's
        if chunk.sequence != n or chunk.done != (n == last):
            raise ValueError(f"frame {n} is out of order, or the stream's end is not its last frame")
        read.append(chunk)
    return read


def complete_stream(body: bytes) -> bool:
    """Whether `body` is a whole, successful stream (frames the edge verified as they came)."""
    try:
        stream_chunks(body)
    except Exception:  # anything unreadable is not a stream to keep
        return False
    return True


def stream_response(body: bytes) -> bytes:
    """A whole stream's frames as one CompletionResponse buffer: the same answer, whole."""
    choices: dict[int, _Choice] = {}
    r = wire_types.Response(id="", model="", created=0, choices=[])
    for k in stream_chunks(body):
        if type(k) is tuple:  # a token's content, nothing else
            choices.setdefault(k[1], _Choice()).text(k[2])
            continue
        assert isinstance(k, Chunk)
        r.id = r.id or k.id or ""
        r.model = r.model or k.model or ""
        r.created = r.created or k.created or 0
        if k.system_fingerprint is not None:
            r.system_fingerprint = k.system_fingerprint
        if k.service_tier is not None:
            r.service_tier = k.service_tier
        r.usage = k.usage if k.usage is not None else r.usage
        if (k.role is not None or k.content is not None or k.refusal is not None or k.reasoning is not None
                or k.signature is not None or k.redacted_thinking or k.tool_calls or k.finish_reason is not None
                or k.logprobs is not None or k.refusal_logprobs is not None or k.stop_sequence is not None):
            choices.setdefault(k.choice_index, _Choice()).add(k)
    r.choices = [c.whole(index) for index, c in sorted(choices.items())]
    return bytes(encode_response(r))
