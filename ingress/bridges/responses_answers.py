"""OpenAI's Responses API's answers (`POST /v1/responses`, whole or streamed) as ours (sans-I/O), for a
Responses request a route sends whole to OpenAI's own API (`responses = "whole"`).

The answer's output items become one choice: `message` items its content, refusal and url citations;
`function_call` and `custom_tool_call` items its tool calls (a call of a namespaced tool named as the edge
offered it flat, `<namespace>__<name>`, which the edge names back); `reasoning` items its reasoning (their
summary, else their text) and, as its opaque signature, OpenAI's own `encrypted_content`, which the edge
gives the client to send back as it came. Items of OpenAI's built-in tools (`web_search_call`...) have no
form in our answers: their results reach the client in the message they inform. `status` and
`incomplete_details` make the finish reason; `usage` ours, cached and reasoning tokens included.

A stream's events: `response.output_text.delta`, `.refusal.delta`, `.reasoning_summary_text.delta` (or
`.reasoning_text.delta`), `.output_item.added` of a call and its `.function_call_arguments.delta` /
`.custom_tool_call_input.delta`, `.output_item.done` of a reasoning item (its `encrypted_content`), then
`response.completed` / `.incomplete`; `response.failed` and `error` end it as the engine's failure.
"""

from __future__ import annotations

import msgspec

from ingress.bridges.dialect import EngineFailed, EventStreamDecoder
from ingress.bridges.eventstream import Event
from ingress.bridges.failures import protocol_error
from ingress.oai.responses_codec import flat_name
from ingress.wire import types as wire_types


class _Annotation(msgspec.Struct):
    type: str = ""
    start_index: int = 0
    end_index: int = 0
    title: str = ""
    url: str = ""


class _Part(msgspec.Struct):
    type: str = ""
    text: str | None = None
    refusal: str | None = None
    annotations: list[_Annotation] = []


class _Item(msgspec.Struct):
    type: str = ""
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    namespace: str | None = None
    arguments: str | None = None
    input: str | None = None
    content: list[_Part] | None = None
    summary: list[_Part] | None = None
    encrypted_content: str | None = None


class _Details(msgspec.Struct):
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    reason: str | None = None


class _Usage(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    input_tokens_details: _Details | None = None
    output_tokens_details: _Details | None = None


class _Error(msgspec.Struct):
    code: str | None = None
    message: str = ""


class _Response(msgspec.Struct):
    id: str = ""
    created_at: int = 0
    model: str = ""
    status: str = "completed"
    output: list[_Item] = []
    usage: _Usage | None = None
    incomplete_details: _Details | None = None
    error: _Error | None = None
    service_tier: str | None = None


class _Event(msgspec.Struct):
    type: str = ""
    delta: str | None = None
    item: _Item | None = None
    output_index: int = 0
    response: _Response | None = None
    code: str | None = None
    message: str = ""


_response = msgspec.json.Decoder(_Response)
_event = msgspec.json.Decoder(_Event)
_CALLS = ("function_call", "custom_tool_call")
_FINISH = {"max_output_tokens": "length", "content_filter": "content_filter"}


def _usage(u: _Usage | None) -> wire_types.Usage | None:
    if u is None:
        return None
    cached = u.input_tokens_details.cached_tokens if u.input_tokens_details is not None else 0
    reasoning = u.output_tokens_details.reasoning_tokens if u.output_tokens_details is not None else 0
    return wire_types.Usage(prompt_tokens=u.input_tokens, completion_tokens=u.output_tokens,
                            total_tokens=u.total_tokens or u.input_tokens + u.output_tokens,
                            cached_tokens=cached, reasoning_tokens=reasoning)


def _finish(r: _Response, calls: bool) -> str:
    if r.status == "incomplete":
        reason = r.incomplete_details.reason if r.incomplete_details is not None else None
        return _FINISH.get(reason or "", "length")
    return "tool_calls" if calls else "stop"


def _failed(r: _Response | None, code: str | None = None, message: str = "") -> EngineFailed:
    error = r.error if r is not None and r.error is not None else _Error(code=code, message=message)
    return EngineFailed(wire_types.ErrorInfo(status=502, type="server_error", code=error.code or "upstream_failed",
                                             message=error.message or "OpenAI's response failed."))


def _name(item: _Item) -> str:
    name = item.name or ""
    return flat_name(item.namespace, name) if item.namespace else name


def _call(item: _Item) -> wire_types.FunctionCall:
    custom = item.type == "custom_tool_call"
    return wire_types.FunctionCall(id=item.call_id or item.id or "", name=_name(item), type="custom" if custom else
                                   "function", arguments=(item.input if custom else item.arguments) or "")


def _reasoning_text(item: _Item) -> str:
    parts = item.summary or item.content or []
    return "\n\n".join(p.text for p in parts if p.text)


def decode_answer(body: bytes, created: int) -> wire_types.Response:
    """A whole Responses answer as ours."""
    try:
        r = _response.decode(body)
    except msgspec.DecodeError as exc:
        raise EngineFailed(protocol_error(f"OpenAI's response could not be read: {exc}.")) from None
    if r.status == "failed":
        raise _failed(r)
    texts: list[str] = []
    refusals: list[str] = []
    annotations: list[wire_types.Annotation] = []
    reasoning: list[str] = []
    calls: list[wire_types.FunctionCall] = []
    signature = None
    for item in r.output:
        if item.type == "message":
            for part in item.content or ():
                if part.type == "output_text" and part.text is not None:
                    offset = sum(len(t) for t in texts)
                    annotations += [wire_types.Annotation(type="url_citation", start_index=a.start_index + offset,
                                                          end_index=a.end_index + offset, title=a.title, url=a.url)
                                    for a in part.annotations if a.type == "url_citation"]
                    texts.append(part.text)
                elif part.type == "refusal" and part.refusal is not None:
                    refusals.append(part.refusal)
        elif item.type in _CALLS:
            calls.append(_call(item))
        elif item.type == "reasoning":
            reasoning.append(_reasoning_text(item))
            signature = item.encrypted_content or signature
    choice = wire_types.Choice(content="".join(texts) if texts or not refusals else None,
                               refusal="".join(refusals) if refusals else None, tool_calls=calls,
                               finish_reason=_finish(r, bool(calls)), annotations=annotations,
                               reasoning="\n\n".join(reasoning) if reasoning else None, signature=signature)
    return wire_types.Response(id=r.id, model=r.model, created=r.created_at or created, choices=[choice],
                               usage=_usage(r.usage), service_tier=r.service_tier)


class ResponsesStream(EventStreamDecoder):
    """One streamed Responses answer: SSE bytes in any split → our numbered chunks."""

    source = "OpenAI"

    def __init__(self, created: int) -> None:
        super().__init__()
        self._created = created
        self._sequence = 0
        self._calls: dict[int, int] = {}  # output index → our call index

    def _event(self, raw: Event, out: list[wire_types.Chunk]) -> None:
        if not raw.data.strip() or raw.data.strip() == b"[DONE]":
            return
        try:
            e = _event.decode(raw.data)
        except msgspec.DecodeError as exc:
            raise EngineFailed(protocol_error(f"OpenAI's stream held an unreadable event: {exc}.")) from None
        kind = e.type
        if kind == "response.created" and e.response is not None:
            self._emit(out, role="assistant", id=e.response.id, model=e.response.model,
                       created=e.response.created_at or self._created)
        elif kind == "response.output_text.delta" and e.delta:
            self._emit(out, content=e.delta)
        elif kind == "response.refusal.delta" and e.delta:
            self._emit(out, refusal=e.delta)
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta") and e.delta:
            self._emit(out, reasoning=e.delta)
        elif kind == "response.output_item.added" and e.item is not None and e.item.type in _CALLS:
            call = _call(e.item)
            index = self._calls[e.output_index] = len(self._calls)
            self._emit(out, tool_calls=[wire_types.ToolCallDelta(index=index, id=call.id, type=call.type,
                                                                 name=call.name, arguments=call.arguments)])
        elif kind in ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta") \
                and e.delta and e.output_index in self._calls:
            self._emit(out, tool_calls=[wire_types.ToolCallDelta(index=self._calls[e.output_index],
                                                                 arguments=e.delta)])
        elif kind == "response.output_item.done" and e.item is not None and e.item.type == "reasoning" \
                and e.item.encrypted_content:
            self._emit(out, signature=e.item.encrypted_content)
        elif kind in ("response.completed", "response.incomplete") and e.response is not None:
            self._emit(out, finish_reason=_finish(e.response, bool(self._calls)), usage=_usage(e.response.usage),
                       done=True)
            self._done = True
        elif kind == "response.failed":
            raise _failed(e.response)
        elif kind == "error":
            raise _failed(None, e.code, e.message)

    def _emit(self, out: list[wire_types.Chunk], **fields: object) -> None:
        out.append(wire_types.Chunk(sequence=self._sequence, **fields))  # type: ignore[arg-type]  # Chunk's own fields
        self._sequence += 1
