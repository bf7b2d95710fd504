"""Anthropic's Messages API, the answer side (sans-I/O): its message, event stream (`MessagesStream`) and
errors → our types, as Anthropic documents them (docs.anthropic.com, "Streaming Messages" and "Errors").
The request's body is `anthropic_request.py`'s; `anthropic.py` joins the two as the dialect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from ingress.bridges.dialect import EngineFailed, keeping
from ingress.bridges.eventstream import Event, EventStreamError, EventStreamParser
from ingress.bridges.failures import clients_key_refused, scrub
from ingress.oai import chat
from ingress.wire import types as wire_types

# An answer's stop_reason → our finish reason; anything else is "stop". A stop_sequence's sequence travels
# in the answer's `stop_sequence`.
FINISH = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "pause_turn", "max_tokens": "length",
          "model_context_window_exceeded": "length", "tool_use": "tool_calls", "refusal": "refusal"}

# --- answers ---------------------------------------------------------------------------------------


class _ServerToolUse(msgspec.Struct):
    web_search_requests: int = 0
    web_fetch_requests: int = 0


class _Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    output_tokens_details: dict[str, Any] | None = None
    server_tool_use: _ServerToolUse | None = None


class _Block(msgspec.Struct):
    type: str
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None  # a thinking block's
    data: str | None = None  # a redacted_thinking block's
    id: str | None = None
    name: str | None = None
    input: msgspec.Raw = chat.NO_JSON  # a tool_use block's input object, as sent; empty when absent


class _Message(msgspec.Struct):
    id: str = ""
    model: str = ""
    content: list[_Block] = []
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: _Usage | None = None


class _Delta(msgspec.Struct):
    type: str | None = None
    text: str | None = None
    partial_json: str | None = None
    thinking: str | None = None
    signature: str | None = None
    stop_reason: str | None = None
    stop_sequence: str | None = None


class _ErrorObject(msgspec.Struct):
    type: str = ""
    message: str = ""


class _Event(msgspec.Struct):
    type: str = ""
    message: _Message | None = None
    index: int | None = None
    content_block: _Block | None = None
    delta: _Delta | None = None
    usage: _Usage | None = None
    error: _ErrorObject | None = None


_message_decoder = msgspec.json.Decoder(_Message)
_event_decoder = msgspec.json.Decoder(_Event)


def _merge(into: _Usage, new: _Usage | None) -> None:
    """A message_delta's counts are cumulative: each one given replaces the one before."""
    if new is None:
        return
    for name in _Usage.__struct_fields__:
        if (value := getattr(new, name)) is not None:
            setattr(into, name, value)


def _usage(u: _Usage) -> wire_types.Usage:
    prompt = (u.input_tokens or 0) + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)
    completion = u.output_tokens or 0
    thinking = (u.output_tokens_details or {}).get("thinking_tokens")
    tools = u.server_tool_use or _ServerToolUse()
    return wire_types.Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                            cached_tokens=u.cache_read_input_tokens or 0,
                            cache_write_tokens=u.cache_creation_input_tokens or 0,
                            reasoning_tokens=thinking if isinstance(thinking, int) and thinking >= 0 else 0,
                            web_search_requests=tools.web_search_requests, web_fetch_requests=tools.web_fetch_requests)


def _broken(what: str) -> EngineFailed:
    return EngineFailed(wire_types.ErrorInfo(status=502, type="server_error", code="upstream_protocol_error",
                                             message=f"Anthropic's answer is unreadable: {what}."))


def decode_answer(body: bytes, created: int) -> wire_types.Response:
    """A whole Messages API answer as one choice: text joined, tool_use blocks as tool calls, thinking
    as reasoning (never content) with the last thinking block's signature (one reasoning holds one),
    redacted_thinking blocks' data in order."""
    try:
        m = _message_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise _broken(str(exc)) from None
    texts = [b.text for b in m.content if b.type == "text" and b.text]
    thinking = [b.thinking for b in m.content if b.type == "thinking" and b.thinking]
    calls = [wire_types.FunctionCall(id=b.id or f"toolu_{j}", name=b.name or "",
                                     arguments=bytes(b.input).decode() if len(b.input) else "{}")
             for j, b in enumerate(m.content) if b.type == "tool_use"]
    signatures = [b.signature for b in m.content if b.type == "thinking" and b.signature]
    redacted = [b.data for b in m.content if b.type == "redacted_thinking" and b.data]
    content = "".join(texts) if texts or not calls else None
    choice = wire_types.Choice(index=0, content=content, tool_calls=calls, reasoning="".join(thinking) or None,
                               signature=signatures[-1] if signatures else None, redacted_thinking=redacted,
                               stop_sequence=m.stop_sequence,
                               finish_reason=FINISH.get(m.stop_reason or "end_turn", "stop"))
    return wire_types.Response(id=m.id, model=m.model, created=created, choices=[choice],
                               usage=_usage(m.usage) if m.usage is not None else None)


# --- the event stream ------------------------------------------------------------------------------

class MessagesStream:
    """One streamed answer: Anthropic's server-sent events in, any split of the bytes; our chunks out.
    Blocks are keyed by the event's index; tool_use blocks become tool calls numbered 0..n-1 (id and
    name first, then the argument fragments). Pings and unknown events or deltas change nothing."""

    def __init__(self, created: int) -> None:
        self._created = created
        self._events = EventStreamParser()
        self._sequence = 0
        self._blocks: dict[int, tuple[str, int]] = {}  # event index → (block type, tool call number)
        self._arguments_sent: dict[int, bool] = {}
        self._start_input: dict[int, str] = {}
        self._calls = 0
        self._usage = _Usage()
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None
        self._started = False
        self.done = False

    def feed(self, data: bytes) -> list[wire_types.Chunk]:
        out: list[wire_types.Chunk] = []
        with keeping(out):
            events = self._parse(self._events.feed, data)
            for event in events:
                self._dispatch(None if event.type == "message" else event.type, event.data, out)
        return out

    def finish(self) -> list[wire_types.Chunk]:
        out: list[wire_types.Chunk] = []
        with keeping(out):
            for event in self._parse(lambda _: self._events.finish(), b""):  # an event whose blank line never came
                self._dispatch(None if event.type == "message" else event.type, event.data, out)
        if not self.done:
            raise EngineFailed(wire_types.ErrorInfo(status=502, type="server_error", code="upstream_unavailable",
                                                    message="Anthropic's stream ended before message_stop."))
        return out

    @staticmethod
    def _parse(parse: Callable[[bytes], list[Event]], data: bytes) -> list[Event]:
        try:
            return parse(data)
        except EventStreamError as exc:
            raise _broken(str(exc)) from None

    def _chunk(self, out: list[wire_types.Chunk], **fields: Any) -> None:
        out.append(wire_types.Chunk(sequence=self._sequence, **fields))
        self._sequence += 1

    def _dispatch(self, name: str | None, data: bytes, out: list[wire_types.Chunk]) -> None:
        if self.done or name == "ping":
            return
        try:
            e = _event_decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise _broken(f"event {name!r}: {exc}") from None
        kind = name or e.type
        if kind == "error":
            err = e.error or _ErrorObject()
            raise EngineFailed(_by_type(err.type, err.message))
        if kind == "message_start" and e.message is not None and not self._started:
            self._started = True
            _merge(self._usage, e.message.usage)
            self._chunk(out, id=e.message.id or None, model=e.message.model or None, created=self._created,
                        role="assistant", content="")
            return
        if kind in ("content_block_start", "content_block_delta", "content_block_stop", "message_delta",
                    "message_stop") and not self._started:
            raise _broken(f"{kind} before message_start")
        if kind == "content_block_start" and e.index is not None and e.content_block is not None:
            self._start(e.index, e.content_block, out)
        elif kind == "content_block_delta" and e.index is not None and e.delta is not None:
            self._delta(e.index, e.delta, out)
        elif kind == "content_block_stop" and e.index is not None:
            self._stop(e.index, out)
        elif kind == "message_delta":
            if e.delta is not None and e.delta.stop_reason is not None:
                self._stop_reason = e.delta.stop_reason
            if e.delta is not None and e.delta.stop_sequence is not None:
                self._stop_sequence = e.delta.stop_sequence
            _merge(self._usage, e.usage)
        elif kind == "message_stop":
            self.done = True
            self._chunk(out, finish_reason=FINISH.get(self._stop_reason or "end_turn", "stop"),
                        stop_sequence=self._stop_sequence, usage=_usage(self._usage), done=True)

    def _start(self, index: int, block: _Block, out: list[wire_types.Chunk]) -> None:
        if block.type != "tool_use":
            self._blocks[index] = (block.type, -1)
            if block.type == "text" and block.text:
                self._chunk(out, content=block.text)
            elif block.type == "thinking" and (block.thinking or block.signature):
                self._chunk(out, reasoning=block.thinking or None, signature=block.signature or None)
            elif block.type == "redacted_thinking" and block.data:
                self._chunk(out, redacted_thinking=[block.data])  # a redacted block comes whole
            return
        number = self._calls
        self._calls += 1
        self._blocks[index] = ("tool_use", number)
        self._arguments_sent[index] = False
        start = bytes(block.input).decode()
        self._start_input[index] = start if start.strip() not in ("", "{}") else "{}"
        self._chunk(out, tool_calls=[wire_types.ToolCallDelta(index=number, id=block.id or f"toolu_{number}",
                                                              type="function", name=block.name or "", arguments="")])

    def _delta(self, index: int, delta: _Delta, out: list[wire_types.Chunk]) -> None:
        if index not in self._blocks:
            raise _broken(f"a delta for block {index}, which never started")
        kind, number = self._blocks[index]
        if delta.type == "text_delta" and kind == "text" and delta.text:
            self._chunk(out, content=delta.text)
        elif delta.type == "thinking_delta" and kind == "thinking" and delta.thinking:
            self._chunk(out, reasoning=delta.thinking)
        elif delta.type == "signature_delta" and kind == "thinking" and delta.signature:
            self._chunk(out, signature=delta.signature)  # the signature of the block's reasoning, now whole
        elif delta.type == "input_json_delta" and kind == "tool_use" and delta.partial_json:
            self._arguments_sent[index] = True
            self._chunk(out, tool_calls=[wire_types.ToolCallDelta(index=number, arguments=delta.partial_json)])
        # citations_delta and any newer delta: nothing of ours to carry

    def _stop(self, index: int, out: list[wire_types.Chunk]) -> None:
        kind, number = self._blocks.get(index, ("", -1))
        if kind == "tool_use" and not self._arguments_sent.get(index, True):
            # a call whose input came whole in its start (or empty): its arguments are still a JSON object
            self._arguments_sent[index] = True
            self._chunk(out, tool_calls=[wire_types.ToolCallDelta(index=number, arguments=self._start_input[index])])


# --- errors ------------------------------------------------------------------------------------------

# Anthropic's error types (docs.anthropic.com, "Errors") → our status, type, code. Our own credentials or
# account refused is the bridge's problem, never the client's: 502.
_BY_TYPE: dict[str, tuple[int, str, str]] = {
    "invalid_request_error": (400, "invalid_request_error", "invalid_request"),
    "authentication_error": (502, "server_error", "upstream_auth_failed"),
    "permission_error": (502, "server_error", "upstream_auth_failed"),
    "billing_error": (502, "server_error", "upstream_auth_failed"),
    "not_found_error": (404, "invalid_request_error", "not_found"),
    "request_too_large": (413, "invalid_request_error", "request_too_large"),
    "rate_limit_error": (429, "rate_limit_error", "rate_limit_exceeded"),
    "api_error": (502, "server_error", "upstream_error"),
    "timeout_error": (504, "server_error", "upstream_timeout"),
    "overloaded_error": (503, "server_error", "upstream_overloaded"),
}
_BY_STATUS = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
              403: "permission_error", 404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
              500: "api_error", 504: "timeout_error", 529: "overloaded_error"}
OVERLOADED_RETRY_AFTER = 1  # seconds: an overloaded Anthropic asks for a wait; when it names none, a short one


def _by_type(kind: str, message: str, status: int | None = None) -> wire_types.ErrorInfo:
    default = (status, "invalid_request_error", "invalid_request") if status is not None and status < 500 \
        else (502, "server_error", "upstream_error")
    code_status, type_, code = _BY_TYPE.get(kind, default)
    said = scrub(message) or kind or "no reason given"
    if code == "upstream_auth_failed":
        text = f"Anthropic refused the bridge's credentials or account ({said}); the client's key is not the problem."
    elif code_status < 500:
        text = f"Anthropic refused the request: {said}"
    else:
        text = f"Anthropic failed: {said}"
    # Overloaded, as a 529 or as an `error` event in a stream, asks the client to wait: the wait it named
    # (a 529's Retry-After, set by `error`), else a short one. An event names none.
    wait = OVERLOADED_RETRY_AFTER if code == "upstream_overloaded" else None
    return wire_types.ErrorInfo(status=code_status, type=type_, code=code, message=text, retry_after=wait)


def decode_error(status: int, body: bytes, *, clients_key: bool = False) -> wire_types.ErrorInfo:
    """An Anthropic refusal (`{"type": "error", "error": {"type", "message"}}`) by its HTTP status; a body
    that is not Anthropic's shape (a proxy's page) is described by the status alone. `clients_key`: the
    key was the client's own, whose refusal (401, 403, or 402 for its account's billing) is its own."""
    kind, message = _BY_STATUS.get(status, ""), ""
    try:
        e = _event_decoder.decode(body)
        if e.error is not None:
            message = e.error.message
    except msgspec.DecodeError:
        pass
    if status in (401, 403, 402) and clients_key:
        said = scrub(message) or f"HTTP {status}"
        return clients_key_refused(status, f"Anthropic refused the key sent with the request: {said}",
                                   kind=_BY_STATUS[status])
    if status in (401, 403, 402):
        kind = _BY_STATUS[status]
    elif 400 <= status < 500 and kind not in _BY_TYPE:
        kind = ""  # an other 4xx: the same status
    return _by_type(kind, message or f"HTTP {status}", status if 400 <= status < 500 else None)
