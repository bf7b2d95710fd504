"""Google's Gemini API, the answer side (sans-I/O): its `GenerateContentResponse`, its stream of them
(`GeminiStream`, server-sent events with `alt=sse`) and its errors → our types, as Google documents them
(ai.google.dev, "Generating content" and "Troubleshooting"). The request's body is `gemini_request.py`'s;
`gemini.py` joins the two as the dialect.

A candidate is a choice at its index: its text parts its content, its thought parts (`thought: true`) its
reasoning, its functionCall parts tool calls (arguments the `args` object as JSON text, ids Google's or the
bridge's, each carrying its part's thought signature: gemini_request.py), and the first thought signature
of its parts the reasoning's. Google's stream has no end marker: the body's end is the answer's end, whole
when a candidate finished (a `finishReason`), cut short otherwise.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import Any

import msgspec

from ingress.bridges.dialect import EngineFailed, keeping
from ingress.bridges.eventstream import EventStreamError, EventStreamParser
from ingress.bridges.failures import MAX_RETRY_AFTER, clients_key_refused, engine_error, protocol_error, scrub
from ingress.bridges.gemini_request import GENERATED, signed_id
from ingress.wire import types as wire_types

# A candidate's finishReason → ours; those that are the model failing are errors (MALFORMED_FUNCTION_CALL...).
FINISH = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter", "RECITATION": "content_filter",
          "BLOCKLIST": "content_filter", "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
          "IMAGE_SAFETY": "content_filter", "IMAGE_PROHIBITED_CONTENT": "content_filter",
          "IMAGE_RECITATION": "content_filter", "LANGUAGE": "content_filter", "OTHER": "stop",
          "FINISH_REASON_UNSPECIFIED": "stop"}
FAILED = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS",
                    "MISSING_THOUGHT_SIGNATURE", "MALFORMED_RESPONSE", "NO_IMAGE", "IMAGE_OTHER"})


class _FunctionCall(msgspec.Struct, rename="camel"):
    name: str = ""
    args: msgspec.Raw = msgspec.Raw(b"{}")
    id: str | None = None


class _Part(msgspec.Struct, rename="camel"):
    text: str | None = None
    thought: bool | None = None
    thought_signature: str | None = None
    function_call: _FunctionCall | None = None


class _Content(msgspec.Struct):
    parts: list[_Part] = []


class _Candidate(msgspec.Struct, rename="camel"):
    content: _Content | None = None
    finish_reason: str | None = None
    index: int = 0


class _Usage(msgspec.Struct, rename="camel"):
    prompt_token_count: int = 0
    candidates_token_count: int = 0
    thoughts_token_count: int = 0
    cached_content_token_count: int = 0
    tool_use_prompt_token_count: int = 0
    total_token_count: int | None = None


class _Feedback(msgspec.Struct, rename="camel"):
    block_reason: str | None = None


class _Status(msgspec.Struct):
    code: int | None = None
    message: str = ""
    status: str = ""
    details: list[dict[str, Any]] = []


class _Answer(msgspec.Struct, rename="camel"):
    candidates: list[_Candidate] = []
    usage_metadata: _Usage | None = None
    model_version: str = ""
    response_id: str = ""
    prompt_feedback: _Feedback | None = None
    error: _Status | None = None  # an error event inside a stream


class _Count(msgspec.Struct, rename="camel"):
    total_tokens: int


_answer = msgspec.json.Decoder(_Answer)
_count = msgspec.json.Decoder(_Count)


def _broken(what: str) -> EngineFailed:
    return EngineFailed(protocol_error(f"Gemini's answer is unreadable: {what}."))


def usage(u: _Usage) -> wire_types.Usage:
    """Google counts the thoughts apart from the candidates; our completion tokens hold both."""
    prompt = u.prompt_token_count + u.tool_use_prompt_token_count
    completion = u.candidates_token_count + u.thoughts_token_count
    return wire_types.Usage(prompt_tokens=prompt, completion_tokens=completion,
                            total_tokens=u.total_token_count or prompt + completion,
                            cached_tokens=u.cached_content_token_count, reasoning_tokens=u.thoughts_token_count)


def _finish(reason: str | None, calls: bool) -> str:
    if reason in FAILED:
        raise EngineFailed(wire_types.ErrorInfo(status=502, type="server_error", code="upstream_error",
                                                message=f"Gemini could not complete its answer ({reason})."))
    finish = FINISH.get(reason or "STOP", "stop")
    return "tool_calls" if calls and finish == "stop" else finish


class CallIds:
    """A stream's (or an answer's) tool call ids: Google's own, else the bridge's (GENERATED), unique."""

    def __init__(self, response_id: str = "") -> None:
        self._stem = f"{GENERATED}{response_id or secrets.token_hex(6)}_"
        self._n = 0

    def __call__(self, call: _FunctionCall, signature: str | None) -> str:
        base = call.id or f"{self._stem}{self._n}"
        self._n += 1
        return signed_id(base, signature)


def decode_answer(body: bytes, created: int) -> wire_types.Response:
    """A whole generateContent answer: each candidate a choice at its index."""
    try:
        a = _answer.decode(body)
    except msgspec.DecodeError as exc:
        raise _broken(str(exc)) from None
    ids = CallIds(a.response_id)
    choices = []
    for c in a.candidates:
        parts = c.content.parts if c.content is not None else []
        texts = [p.text for p in parts if p.text and not p.thought and p.function_call is None]
        thoughts = [p.text for p in parts if p.text and p.thought]
        calls = [wire_types.FunctionCall(id=ids(p.function_call, p.thought_signature), name=p.function_call.name,
                                         arguments=bytes(p.function_call.args).decode())
                 for p in parts if p.function_call is not None]
        signature = next((p.thought_signature for p in parts if p.thought_signature), None)
        choices.append(wire_types.Choice(index=c.index, content="".join(texts) if texts or not calls else None,
                                         tool_calls=calls, reasoning="".join(thoughts) or None, signature=signature,
                                         finish_reason=_finish(c.finish_reason, bool(calls))))
    if not choices and a.prompt_feedback is not None and a.prompt_feedback.block_reason:
        choices = [wire_types.Choice(index=0, content=None, finish_reason="content_filter")]  # the prompt was blocked
    return wire_types.Response(id=a.response_id, model=a.model_version, created=created, choices=choices,
                               usage=usage(a.usage_metadata) if a.usage_metadata is not None else None)


def decode_count(body: bytes, model: str, created: int) -> wire_types.Response:
    """countTokens' answer as our contract's CompletionResponse: no choices, the count as its usage."""
    try:
        counted = _count.decode(body).total_tokens
    except msgspec.DecodeError as exc:
        raise _broken(f"its count: {exc}") from None
    return wire_types.Response(id="", model=model, created=created, choices=[],
                               usage=wire_types.Usage(prompt_tokens=counted, total_tokens=counted))


# --- the event stream ------------------------------------------------------------------------------

class _Progress(msgspec.Struct):
    calls: int = 0
    signed: bool = False
    finish: str | None = None


class GeminiStream:
    """One streamed answer (`alt=sse`): each event a partial GenerateContentResponse, read in any split; our
    chunks out. Usage is the last event's (Google's counts are running totals); the body's end is the end."""

    def __init__(self, created: int) -> None:
        self._created = created
        self._events = EventStreamParser()
        self._sequence = 0
        self._started = False
        self._candidates: dict[int, _Progress] = {}
        self._usage: _Usage | None = None
        self._ids: CallIds | None = None
        self.done = False

    def feed(self, data: bytes) -> list[wire_types.Chunk]:
        out: list[wire_types.Chunk] = []
        with keeping(out):
            try:
                events = self._events.feed(data)
            except EventStreamError as exc:
                raise _broken(str(exc)) from None
            for event in events:
                self._event(event.data, out)
        return out

    def finish(self) -> list[wire_types.Chunk]:
        out: list[wire_types.Chunk] = []
        with keeping(out):
            try:
                events = self._events.finish()
            except EventStreamError as exc:
                raise _broken(str(exc)) from None
            for event in events:
                self._event(event.data, out)
            finished = [(n, c) for n, c in sorted(self._candidates.items()) if c.finish is not None]
            if not finished:
                raise EngineFailed(wire_types.ErrorInfo(status=502, type="server_error", code="upstream_unavailable",
                                                        message="Gemini's stream ended before it was complete."))
            for k, (n, c) in enumerate(finished):
                last = k == len(finished) - 1
                self._chunk(out, choice_index=n, finish_reason=c.finish, done=last,
                            usage=usage(self._usage) if last and self._usage is not None else None)
        self.done = True
        return out

    def _chunk(self, out: list[wire_types.Chunk], **fields: Any) -> None:
        out.append(wire_types.Chunk(sequence=self._sequence, **fields))
        self._sequence += 1

    def _event(self, data: bytes, out: list[wire_types.Chunk]) -> None:
        if self.done or not data.strip():
            return
        try:
            a = _answer.decode(data)
        except msgspec.DecodeError as exc:
            raise _broken(f"an event: {exc}") from None
        if a.error is not None:
            raise EngineFailed(status_error(a.error.code, a.error))
        if not self._started:
            self._started = True
            self._ids = CallIds(a.response_id)
            self._chunk(out, id=a.response_id or None, model=a.model_version or None, created=self._created,
                        role="assistant", content="")
        if a.usage_metadata is not None:
            self._usage = a.usage_metadata
        if not a.candidates and a.prompt_feedback is not None and a.prompt_feedback.block_reason:
            self._candidates.setdefault(0, _Progress()).finish = "content_filter"
        for c in a.candidates:
            self._candidate(c, out)

    def _candidate(self, c: _Candidate, out: list[wire_types.Chunk]) -> None:
        state = self._candidates.setdefault(c.index, _Progress())
        assert self._ids is not None
        for p in c.content.parts if c.content is not None else ():
            signature = p.thought_signature if p.thought_signature and not state.signed else None
            state.signed = state.signed or signature is not None
            if p.function_call is not None:
                call = wire_types.ToolCallDelta(index=state.calls, id=self._ids(p.function_call, p.thought_signature),
                                                type="function", name=p.function_call.name,
                                                arguments=bytes(p.function_call.args).decode())
                state.calls += 1
                self._chunk(out, choice_index=c.index, tool_calls=[call], signature=signature)
            elif p.thought and (p.text or signature):
                self._chunk(out, choice_index=c.index, reasoning=p.text or None, signature=signature)
            elif p.text or signature:
                self._chunk(out, choice_index=c.index, content=p.text or None, signature=signature)
        if c.finish_reason is not None:
            state.finish = _finish(c.finish_reason, state.calls > 0)


# --- errors ------------------------------------------------------------------------------------------

# google.rpc status names → our status, type, code. Our own key or project refused is the bridge's problem,
# never the client's: 502.
_BY_STATUS: dict[str, tuple[int, str, str]] = {
    "INVALID_ARGUMENT": (400, "invalid_request_error", "invalid_request"),
    "FAILED_PRECONDITION": (400, "invalid_request_error", "failed_precondition"),
    "OUT_OF_RANGE": (400, "invalid_request_error", "invalid_request"),
    "UNAUTHENTICATED": (502, "server_error", "upstream_auth_failed"),
    "PERMISSION_DENIED": (502, "server_error", "upstream_auth_failed"),
    "NOT_FOUND": (404, "invalid_request_error", "not_found"),
    "RESOURCE_EXHAUSTED": (429, "rate_limit_error", "rate_limit_exceeded"),
    "INTERNAL": (502, "server_error", "upstream_error"),
    "UNAVAILABLE": (503, "server_error", "upstream_overloaded"),
    "DEADLINE_EXCEEDED": (504, "server_error", "upstream_timeout"),
}
_KEY_REFUSED = frozenset({"API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED", "SERVICE_DISABLED",
                          "ACCESS_TOKEN_TYPE_UNSUPPORTED", "CONSUMER_SUSPENDED"})
_SECONDS = re.compile(r"(\d+(?:\.\d+)?)s\Z")
_any = msgspec.json.Decoder()


def _retry_delay(details: list[dict[str, Any]]) -> int | None:
    """google.rpc.RetryInfo's `retryDelay` ("37s", "1.5s"), in whole seconds, bounded."""
    for detail in details:
        delay = detail.get("retryDelay") if str(detail.get("@type", "")).endswith("RetryInfo") else None
        if isinstance(delay, str) and (seconds := _SECONDS.match(delay)) is not None:
            return min(MAX_RETRY_AFTER, -int(-float(seconds[1]) // 1))
    return None


def _reasons(details: list[dict[str, Any]]) -> set[str]:
    return {str(d.get("reason")) for d in details if str(d.get("@type", "")).endswith("ErrorInfo")}


def status_error(http_status: int | None, e: _Status, *, clients_key: bool = False) -> wire_types.ErrorInfo:
    """Google's status (`{"code", "message", "status", "details"}`) as ours."""
    status = e.status or {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                          404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE",
                          504: "DEADLINE_EXCEEDED"}.get(http_status or e.code or 500, "INTERNAL")
    said = scrub(e.message) or status
    key_refused = status in ("UNAUTHENTICATED", "PERMISSION_DENIED") or bool(_reasons(e.details) & _KEY_REFUSED)
    if key_refused and clients_key:
        return clients_key_refused(401 if status != "PERMISSION_DENIED" else 403,
                                   f"Google refused the key sent with the request: {said}")
    if key_refused:
        return wire_types.ErrorInfo(status=502, type="server_error", code="upstream_auth_failed",
                                    message=f"Google refused the bridge's key or project ({said}); the client's key "
                                            "is not the problem.")
    code_status, kind, code = _BY_STATUS.get(status, (502, "server_error", "upstream_error"))
    text = f"Gemini refused the request: {said}" if code_status < 500 else f"Gemini failed: {said}"
    wait = _retry_delay(e.details) if code_status in (429, 503) else None
    return wire_types.ErrorInfo(status=code_status, type=kind, code=code, message=text, retry_after=wait)


def decode_error(status: int, headers: Mapping[str, str], body: bytes, *,
                 clients_key: bool = False) -> wire_types.ErrorInfo:
    """A refusal in Google's envelope (`{"error": {...}}`, or a list of one, as its JSON streams send it) by its
    status; a body that is not Google's (a proxy's page) as failures.py reads any engine's."""
    google: _Status | None = None
    try:
        doc = _any.decode(body)
        if isinstance(doc, list) and doc:
            doc = doc[0]
        if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
            google = msgspec.convert(doc["error"], _Status)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        google = None
    if google is None or not (google.status or google.message):
        return engine_error(status, headers, body, clients_key=clients_key)
    return status_error(status, google, clients_key=clients_key)
