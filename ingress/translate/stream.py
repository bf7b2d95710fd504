"""Translate a stream of CompletionChunk frames into OpenAI chat.completion.chunk objects (sans-I/O).

The fast path of a streamed token, all here: its frame is read in place (`content_delta`) into a `Delta`
of the stream's `Head`, and its JSON is the head's template for its choice around its content, encoded
alone (`Head.template`); the edge's SSE writer only frames those bytes as an event."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
from msgspec import UNSET, UnsetType

from ingress.errors import UpstreamProtocolError
from ingress.oai import chat_answers
from ingress.translate.body import next_in_order
from ingress.translate.completion import translate_finish, translate_logprobs, translate_usage
from ingress.wire import types as wire_types
from ingress.wire.answer import content_delta, decode_frame

_json = msgspec.json.Encoder()
_MARK = b'"\\u0000"'  # a Delta's content in its template: "\x00", as JSON encodes it


@dataclass(frozen=True, slots=True)
class Head:
    """The fields every chunk of a stream repeats, as they stand; a new Head when one of them changes."""

    id: str
    model: str
    created: int
    system_fingerprint: str | None
    service_tier: str | None
    include_usage: bool
    _templates: dict[int, tuple[bytes, bytes] | None] = field(default_factory=dict, init=False, repr=False,
                                                              compare=False)

    def template(self, index: int) -> tuple[bytes, bytes] | None:
        """A Delta's chunk JSON at choice `index`, cut where its content goes: the bytes before and after
        it, made once per choice. None for a head whose own fields hold a NUL (the cut would be ambiguous):
        its Deltas are encoded whole."""
        try:
            return self._templates[index]
        except KeyError:
            parts = _json.encode(Delta(self, index, "\x00").chunk()).split(_MARK)
            made = self._templates[index] = (parts[0], parts[1]) if len(parts) == 2 else None
            return made


@dataclass(frozen=True, slots=True)
class Delta:
    """A chat.completion.chunk that carries a token's content at one choice and nothing else, its other
    fields `head`'s: what nearly every frame becomes. `chunk()` is the general object it stands for; the edge
    renders it from the head's template (edge/sse.py), encoding only the content."""

    head: Head
    index: int
    content: str

    def chunk(self) -> chat_answers.ChatCompletionChunk:
        h = self.head
        return chat_answers.ChatCompletionChunk(
            id=h.id, created=h.created, model=h.model,
            choices=[chat_answers.ChunkChoiceOut(index=self.index, delta=chat_answers.DeltaOut(content=self.content))],
            system_fingerprint=h.system_fingerprint if h.system_fingerprint is not None else UNSET,
            service_tier=h.service_tier if h.service_tier is not None else UNSET,
            usage=None if h.include_usage else UNSET,  # "usage": null on every chunk but the last
        )


class StreamTranslator:
    """Per-request stream state: ids seen on the first chunk, sequence order, completion, usage.
    `legacy_functions`: the request used `functions`; tool call deltas go out as `function_call`."""

    def __init__(self, *, id: str, model: str, created: int, include_usage: bool, verify: bool = True,
                 legacy_functions: bool = False) -> None:
        self.id = id
        self.model = model
        self.created = created
        self.include_usage = include_usage
        self.usage: wire_types.Usage | None = None
        self.output: list[str] = []  # text, reasoning and tool arguments streamed: counted when no usage comes
        self.done = False
        self.system_fingerprint: str | None = None
        self.service_tier: str | None = None
        self.served_model: str | None = None  # the service's name for its model, as its first chunk that had one
        self.finish_reasons: list[str] = []  # each choice's, as its last chunk said (never a token read in place)
        self._next_sequence = 0
        self._verify = verify
        self._legacy = legacy_functions
        self._head: Head | None = None  # made at the first Delta, dropped when a chunk may change it
        # The provider's own opaque signature of the reasoning streamed so far (OpenAI's encrypted_content,
        # Anthropic's thinking signature): no chat chunk carries it; a Responses answer gives it back.
        self.signature: str | None = None

    def feed_frame(self, frame: bytes) -> list[chat_answers.ChatCompletionChunk]:
        """One whole frame (size prefix included): a chunk → zero or more OpenAI chunks; an Error → raised.
        Verifying and decoding the frame is `ingress.wire.answer.decode_frame`'s."""
        return [c.chunk() if isinstance(c, Delta) else c for c in self.read_frame(frame)]

    def read_frame(self, frame: bytes) -> list[chat_answers.ChatCompletionChunk | Delta]:
        """As `feed_frame`, but a token's delta, nearly every frame, is read in place (`content_delta`)
        into the Delta of the chunk `feed` would make of it, for the edge to render from a template."""
        delta = content_delta(frame)
        if delta is None or self.done or delta[0] != self._next_sequence:
            return list(self.feed(decode_frame(frame, verify_frame=self._verify)))
        _, index, content = delta
        self._next_sequence += 1
        if content:
            self.output.append(content)
        head = self._head
        if head is None:
            head = self._head = Head(self.id, self.model, self.created, self.system_fingerprint, self.service_tier,
                                     self.include_usage)
        return [Delta(head, index, content)]

    def feed(self, chunk: wire_types.Chunk) -> list[chat_answers.ChatCompletionChunk]:
        self._next_sequence = next_in_order(self.done, self._next_sequence, chunk)
        self._head = None
        self.id = chunk.id or self.id
        self.model = chunk.model or self.model
        if not self.served_model:  # the first chunk that names it (the head's; a token's read in place never does)
            self.served_model = chunk.model
        self.created = chunk.created or self.created
        self.system_fingerprint = chunk.system_fingerprint or self.system_fingerprint
        self.service_tier = chunk.service_tier or self.service_tier
        self.done = chunk.done
        result = []
        calls = chunk.tool_calls
        if chunk.content:
            self.output.append(chunk.content)
        if chunk.reasoning:
            self.output.append(chunk.reasoning)
        if chunk.signature:
            self.signature = chunk.signature
        if calls:
            self.output += [d.arguments for d in calls if d.arguments]
        legacy = _function_delta(calls) if self._legacy and calls else UNSET
        delta = chat_answers.DeltaOut(
            role=chunk.role if chunk.role is not None else UNSET,
            content=chunk.content if chunk.content is not None else UNSET,
            refusal=chunk.refusal if chunk.refusal is not None else UNSET,
            tool_calls=[_tool_delta(d) for d in calls] if calls and not self._legacy else UNSET,
            function_call=legacy,
            reasoning_content=chunk.reasoning if chunk.reasoning is not None else UNSET,
        )
        logprobs = translate_logprobs(chunk.logprobs, chunk.refusal_logprobs)
        if chunk.finish_reason is not None:
            self.finish_reasons.append(chunk.finish_reason)
        if delta != _EMPTY_DELTA or chunk.finish_reason is not None or logprobs is not None:
            finish = translate_finish(chunk.finish_reason, self._legacy)
            choice = chat_answers.ChunkChoiceOut(index=chunk.choice_index, delta=delta, finish_reason=finish,
                                                 logprobs=logprobs)
            result.append(self._wrap([choice], usage=None))
        if chunk.usage is not None:
            self.usage = chunk.usage
            if self.include_usage:
                result.append(self._wrap([], usage=translate_usage(chunk.usage)))
        return result

    def _wrap(self, choices: list[chat_answers.ChunkChoiceOut],
              usage: chat_answers.UsageOut | None) -> chat_answers.ChatCompletionChunk:
        return chat_answers.ChatCompletionChunk(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=choices,
            system_fingerprint=self.system_fingerprint if self.system_fingerprint is not None else UNSET,
            service_tier=self.service_tier if self.service_tier is not None else UNSET,
            # With include_usage OpenAI writes "usage": null on every chunk but the last.
            usage=usage if self.include_usage else UNSET,
        )

    def finish(self) -> None:
        """At the end of the upstream body: a stream without its final frame was cut short."""
        if not self.done:
            raise UpstreamProtocolError("The model service stream ended before it was complete.")


_EMPTY_DELTA = chat_answers.DeltaOut()


def _tool_delta(d: wire_types.ToolCallDelta) -> chat_answers.ToolCallDeltaOut:
    function = chat_answers.FunctionDeltaOut(
        name=d.name if d.name is not None else UNSET,
        arguments=d.arguments if d.arguments is not None else UNSET,
    )
    return chat_answers.ToolCallDeltaOut(
        index=d.index,
        id=d.id if d.id is not None else UNSET,
        type=d.type if d.type is not None else UNSET,
        function=function if function != _EMPTY_FUNCTION else UNSET,
    )


_EMPTY_FUNCTION = chat_answers.FunctionDeltaOut()


def _function_delta(deltas: list[wire_types.ToolCallDelta]) -> chat_answers.FunctionDeltaOut | UnsetType:
    """The legacy shape holds one call: the deltas of the first (index 0); any other is not sent."""
    first = [d for d in deltas if d.index == 0]
    names = [d.name for d in first if d.name is not None]
    arguments = [d.arguments for d in first if d.arguments is not None]
    if not names and not arguments:
        return UNSET
    return chat_answers.FunctionDeltaOut(name="".join(names) if names else UNSET,
                                         arguments="".join(arguments) if arguments else UNSET)
