"""Translate a model service's answers into Anthropic's Messages shape (sans-I/O): a CompletionResponse into
the `message` object, CompletionChunk frames into the events of Anthropic's stream.

Only the first choice (index 0) is rendered: a Messages request asks for one answer, and Anthropic's shape
has room for no other (the other choices' frames still count for their sequence, usage and end). Its
blocks come as Anthropic orders them: thinking, then redacted thinking, text, and each tool call a
`tool_use` block. The answer's id and model are the edge's (`id`, `model`), never the service's.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET

from ingress.anthropic import answers as msg
from ingress.anthropic.answers import (
    ContentBlockDelta,
    ContentBlockStart,
    ContentBlockStop,
    Event,
    StopReason,
    TextDelta,
)
from ingress.errors import IngressError, UpstreamProtocolError
from ingress.translate.body import next_in_order
from ingress.wire import types as wire_types
from ingress.wire.answer import content_delta, decode_frame

# The contract's finish reasons → Anthropic's stop reasons. A content filter's stop is what Anthropic
# calls a refusal. A plain stop is refined by `_stop_reason`.
STOP_REASONS: dict[str, StopReason] = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                                       "content_filter": "refusal", "pause_turn": "pause_turn",
                                       "refusal": "refusal"}
_TIERS: dict[str, msg.ServiceTier] = {"priority": "priority", "batch": "batch"}


def _stop_reason(finish: str | None, stop_sequence: str | None, tools: bool, refused: bool) -> StopReason:
    """A stop (or none named) that a stop sequence made is `stop_sequence`; one that made tool calls is
    `tool_use`, whatever the engine named it (some say "stop"), since a client's tool loop keys on it; one
    that answered a refusal is `refusal`."""
    if finish is not None and finish != "stop":
        return STOP_REASONS.get(finish, "end_turn")
    if stop_sequence is not None:
        return "stop_sequence"
    return "tool_use" if tools else "refusal" if refused else "end_turn"


def _tier(tier: str | None) -> msg.ServiceTier:
    """Anthropic's tiers: OpenAI's "default", "auto", "flex"... served at the standard one."""
    return _TIERS.get(tier or "", "standard")


def _server_tools(u: wire_types.Usage) -> msg.ServerToolUse | msgspec.UnsetType:
    if not (u.web_search_requests or u.web_fetch_requests):
        return UNSET
    return msg.ServerToolUse(web_search_requests=u.web_search_requests, web_fetch_requests=u.web_fetch_requests)


def translate_usage(u: wire_types.Usage | None, service_tier: str | None) -> msg.Usage:
    """Anthropic's `input_tokens` leaves out the prompt's tokens read from a cache (`cached_tokens`) and
    written to one (`cache_write_tokens`), never below 0. No usage: zeros (the edge counts apart)."""
    if u is None:
        return msg.Usage(input_tokens=0, output_tokens=0, service_tier=_tier(service_tier))
    return msg.Usage(input_tokens=max(0, u.prompt_tokens - u.cached_tokens - u.cache_write_tokens),
                     cache_creation_input_tokens=u.cache_write_tokens, cache_read_input_tokens=u.cached_tokens,
                     output_tokens=u.completion_tokens, server_tool_use=_server_tools(u),
                     service_tier=_tier(service_tier))


_object = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _input(call: wire_types.FunctionCall, n: int) -> msgspec.Raw:
    """A call's arguments as the JSON object they are (none: `{}`), kept as the model wrote them.
    Anthropic's `input` is an object: arguments that are not one cannot be answered in its shape."""
    if not call.arguments.strip():
        return msg.EMPTY_INPUT
    try:
        _object.decode(call.arguments)
    except msgspec.DecodeError as exc:
        raise UpstreamProtocolError(
            f"The model service's tool call {n} has arguments that are not a JSON object.") from exc
    return msgspec.Raw(call.arguments.encode())


def _call_id(call_id: str | None, message_id: str, n: int) -> str:
    return call_id or f"toolu_{message_id}_{n}"


def _citation(a: wire_types.Annotation, text: str) -> msg.Citation:
    return msg.WebSearchCitation(cited_text=text[a.start_index:a.end_index], url=a.url or "", title=a.title)


def message_from_response(r: wire_types.Response, *, id: str, model: str) -> msg.Message:
    """A whole answer: its first choice (the one a Messages request asks for) as one message. Its text and
    refusal are one text block, with the citations of its annotations."""
    choice = next((c for c in r.choices if c.index == 0), r.choices[0] if r.choices else wire_types.Choice())
    blocks: list[msg.ContentBlock] = []
    if choice.reasoning or choice.signature:
        blocks.append(msg.ThinkingBlock(thinking=choice.reasoning or "", signature=choice.signature or ""))
    blocks += [msg.RedactedThinkingBlock(data=d) for d in choice.redacted_thinking]
    text = (choice.content or "") + (choice.refusal or "")
    if text:
        citations = [_citation(a, text) for a in choice.annotations]
        blocks.append(msg.TextBlock(text=text, citations=citations or UNSET))
    blocks += [msg.ToolUseBlock(id=_call_id(c.id, id, n), name=c.name, input=_input(c, n))
               for n, c in enumerate(choice.tool_calls)]
    reason = _stop_reason(choice.finish_reason, choice.stop_sequence, bool(choice.tool_calls), bool(choice.refusal))
    return msg.Message(id=id, model=model, content=blocks, stop_reason=reason,
                       stop_sequence=choice.stop_sequence if reason == "stop_sequence" else None,
                       usage=translate_usage(r.usage, r.service_tier))


def error_event(exc: IngressError, *, request_id: str | None = None) -> Event:
    """The `error` event that ends a stream that failed after it began (no message_stop follows)."""
    return msg.error_envelope(exc, request_id=request_id)


_TEXT, _THINKING, _TOOL = "text", "thinking", "tool_use"


class MessagesStreamTranslator:
    """Per-request stream state: frames in, Anthropic's events out, exactly its grammar. One message_start
    at the first frame; each block at its own index, counted from 0, started, its deltas, stopped before
    the next starts (a change of kind, or a new tool call, closes the open block); at the final frame,
    message_delta (the stop reason and the cumulative usage) and message_stop; nothing after.

    A frame's parts are read in the order reasoning, signature (which signs the reasoning so far: its
    block is then stopped), redacted thinking (each a block started and stopped), content and refusal
    (text), tool call deltas. A tool call's block starts at its first arguments (or when it closes), so
    that an id and a name sent in pieces before them still start it whole; a call that comes back after
    another began is a protocol error, since a stopped block cannot take more."""

    def __init__(self, *, id: str, model: str, input_tokens: int, verify: bool = True) -> None:
        self.id = id
        self.model = model
        self.input_tokens = input_tokens  # the edge's count, for message_start when the service sent none
        self.done = False
        self.usage: wire_types.Usage | None = None
        self.output: list[str] = []  # text, thinking and tool input streamed: counted when no usage comes
        self.served_model: str | None = None  # the service's name for its model (the client is told `model`)
        self._verify = verify
        self._next_sequence = 0
        self._started = False
        self._blocks = 0  # blocks started so far: the next block's index
        self._open: str | None = None  # the open block's kind, at index self._blocks - 1
        self._call: int | None = None  # the tool call (the service's index) of the open or pending block
        self._pending: list[str] | None = None  # that call's id and name, while its block waits to start
        self._calls: set[int] = set()
        self._finish: str | None = None
        self._stop_sequence: str | None = None
        self._refused = False

    def read_frame(self, frame: bytes) -> list[Event]:
        """One whole frame (size prefix included) → its events; an Error frame is raised as decode_frame
        raises it. A token of text, nearly every frame, is read in place (`content_delta`): no decode."""
        delta = content_delta(frame)
        if delta is None or self.done or delta[0] != self._next_sequence:
            return self.feed(decode_frame(frame, verify_frame=self._verify))
        self._next_sequence += 1
        events: list[Event] = [] if self._started else [self._start(None, None)]
        if delta[1] == 0 and delta[2]:
            self._text(delta[2], events)
        return events

    def feed(self, chunk: wire_types.Chunk) -> list[Event]:
        """A decoded frame → its events."""
        self._next_sequence = next_in_order(self.done, self._next_sequence, chunk)
        if not self.served_model:
            self.served_model = chunk.model
        events: list[Event] = [] if self._started else [self._start(chunk.usage, chunk.service_tier)]
        if chunk.choice_index == 0:
            self._choice(chunk, events)
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.done:
            self.done = True
            self._end(events)
        return events

    @property
    def finish_reasons(self) -> list[str]:
        """The answer's finish reason, in the contract's words (a Messages answer is its first choice)."""
        return [self._finish] if self._finish is not None else []

    def finish(self) -> None:
        """At the end of the upstream body: a stream without its final frame was cut short."""
        if not self.done:
            raise UpstreamProtocolError("The model service stream ended before it was complete.")

    def begin(self) -> list[Event]:
        """message_start now, if it has not gone yet: once the client's answer has begun (the service's
        head came, or a ping is due while it is silent), Anthropic's stream opens with it, before any
        ping. Its usage is the edge's count of the prompt; the service's comes in message_delta."""
        return [] if self._started else [self._start(None, None)]

    # --- the parts of a frame

    def _start(self, usage: wire_types.Usage | None, service_tier: str | None) -> Event:
        self._started = True
        counted = translate_usage(usage, service_tier) if usage is not None else msg.Usage(
            input_tokens=self.input_tokens, output_tokens=0, service_tier=_tier(service_tier))
        return msg.MessageStart(message=msg.Message(id=self.id, model=self.model, content=[], stop_reason=None,
                                                    stop_sequence=None, usage=counted))

    def _choice(self, chunk: wire_types.Chunk, events: list[Event]) -> None:
        if chunk.reasoning:
            self.output.append(chunk.reasoning)
            self._open_block(_THINKING, events)
            events.append(ContentBlockDelta(index=self._blocks - 1,
                                            delta=msg.ThinkingDelta(thinking=chunk.reasoning)))
        if chunk.signature:
            self._open_block(_THINKING, events)
            events.append(ContentBlockDelta(index=self._blocks - 1,
                                            delta=msg.SignatureDelta(signature=chunk.signature)))
            self._close(events)
        for data in chunk.redacted_thinking:
            self._close(events)
            events.append(ContentBlockStart(index=self._blocks, content_block=msg.RedactedThinkingBlock(data=data)))
            events.append(ContentBlockStop(index=self._blocks))
            self._blocks += 1
        if chunk.content:
            self._text(chunk.content, events)
        if chunk.refusal:
            self._refused = True
            self._text(chunk.refusal, events)
        for call in chunk.tool_calls:
            self._tool_delta(call, events)
        if chunk.finish_reason is not None:
            self._finish = chunk.finish_reason
        if chunk.stop_sequence is not None:
            self._stop_sequence = chunk.stop_sequence

    def _text(self, text: str, events: list[Event]) -> None:
        self.output.append(text)
        if self._open != _TEXT:  # nearly always open: no call
            self._open_block(_TEXT, events)
        events.append(ContentBlockDelta(index=self._blocks - 1, delta=TextDelta(text=text)))

    def _tool_delta(self, d: wire_types.ToolCallDelta, events: list[Event]) -> None:
        if d.index != self._call:
            if d.index in self._calls:
                raise UpstreamProtocolError(
                    f"The model service's tool call {d.index} went on after tool call {self._call} began.")
            self._close(events)
            self._calls.add(d.index)
            self._call, self._pending = d.index, [d.id or "", d.name or ""]
        elif self._pending is not None:
            self._pending[0] = self._pending[0] or d.id or ""
            self._pending[1] += d.name or ""
        elif d.name:
            raise UpstreamProtocolError(f"The model service's tool call {d.index} named its tool after its input.")
        if d.arguments:
            self.output.append(d.arguments)
            self._start_call(events)
            events.append(ContentBlockDelta(index=self._blocks - 1,
                                            delta=msg.InputJsonDelta(partial_json=d.arguments)))

    def _start_call(self, events: list[Event]) -> None:
        if self._pending is None:
            return
        (call_id, name), self._pending = self._pending, None
        assert self._call is not None  # a pending block is a call's
        block = msg.ToolUseBlock(id=_call_id(call_id, self.id, self._call), name=name)
        events.append(ContentBlockStart(index=self._blocks, content_block=block))
        self._blocks += 1
        self._open = _TOOL

    def _open_block(self, kind: str, events: list[Event]) -> None:
        """Make a text or thinking block the open one."""
        if self._open == kind:
            return
        self._close(events)
        block: msg.ContentBlock = msg.TextBlock(text="") if kind == _TEXT else msg.ThinkingBlock(thinking="",
                                                                                                  signature="")
        events.append(ContentBlockStart(index=self._blocks, content_block=block))
        self._blocks += 1
        self._open = kind

    def _close(self, events: list[Event]) -> None:
        """Stop the open block (a tool call's that never started, started first)."""
        self._start_call(events)
        if self._open is not None:
            events.append(ContentBlockStop(index=self._blocks - 1))
            self._open = None
        self._call = None

    def _end(self, events: list[Event]) -> None:
        self._close(events)
        reason = _stop_reason(self._finish, self._stop_sequence, bool(self._calls), self._refused)
        u = self.usage
        usage = msg.DeltaUsage(output_tokens=0) if u is None else msg.DeltaUsage(
            input_tokens=max(0, u.prompt_tokens - u.cached_tokens - u.cache_write_tokens),
            cache_creation_input_tokens=u.cache_write_tokens, cache_read_input_tokens=u.cached_tokens,
            output_tokens=u.completion_tokens, server_tool_use=_server_tools(u))
        stop_sequence = self._stop_sequence if reason == "stop_sequence" else None
        events.append(msg.MessageDelta(delta=msg.MessageDeltaBody(stop_reason=reason, stop_sequence=stop_sequence),
                                       usage=usage))
        events.append(msg.MessageStop())
