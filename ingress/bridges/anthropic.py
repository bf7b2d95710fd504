"""Anthropic's Messages API as a bridge dialect: our request → `POST /v1/messages`, its answers, events
and errors → our types (sans-I/O).

The request side walks every field of the chat request: each is sent as Anthropic spells it, or refused
with `Unsupported` naming it (`FIELDS` says which, and tests/unit/test_anthropic.py holds it to the
struct). The answer side reads the message, or its event stream (`MessagesStream`), as Anthropic
documents them (docs.anthropic.com, "Streaming Messages" and "Errors").
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ingress import wire
from ingress.bridges.dialect import Dialect, EngineFailed, EngineRequest, Target, Unsupported, keeping, under
from ingress.bridges.eventstream import Event, EventStreamError, EventStreamParser
from ingress.bridges.failures import retry_after, scrub
from ingress.oai import models as oai
from ingress.wire import types as wt

PATH = "/v1/messages"
VERSION = "2023-06-01"
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
EFFORTS = frozenset({"low", "medium", "high", "xhigh"})  # reasoning_effort values output_config.effort has
TIERS = {"auto": "auto", "default": "standard_only"}  # OpenAI's service_tier → Anthropic's

# Every field of the chat request, and what becomes of it (a test holds this to the struct's fields).
FIELDS = {
    "model": "model (the route's name for it, else the target's)",
    "messages": "system (system and developer, in order) and messages (turns merged, tool results first)",
    "max_tokens": "max_tokens (else the target's default: Anthropic requires one)",
    "max_completion_tokens": "max_tokens, before max_tokens",
    "temperature": "temperature (Anthropic's range is 0-1: above 1 refused)",
    "top_p": "top_p",
    "stop": "stop_sequences",
    "stream": "stream",
    "stream_options": "nothing to send: Anthropic always counts usage; the edge shows it when asked",
    "tools": "tools, each with its whole JSON schema (custom tools refused)",
    "tool_choice": "tool_choice: auto/required/none/named → auto/any/none/tool (allowed_tools refused)",
    "parallel_tool_calls": "false → tool_choice.disable_parallel_tool_use",
    "functions": "travels as tools", "function_call": "travels as tool_choice",
    "user": "metadata.user_id", "safety_identifier": "metadata.user_id (one of the two, or both equal)",
    "response_format": "json_schema → output_config.format; text: nothing to send; json_object refused",
    "reasoning_effort": "output_config.effort (low, medium, high, xhigh; others refused)",
    "service_tier": "service_tier: auto → auto, default → standard_only (others refused)",
    "n": "refused above 1", "logprobs": "refused when true", "top_logprobs": "refused",
    "logit_bias": "refused", "presence_penalty": "refused", "frequency_penalty": "refused", "seed": "refused",
    "metadata": "refused (Anthropic's metadata holds only user_id)", "store": "refused when true",
    "audio": "refused", "modalities": "refused unless text only", "prediction": "refused",
    "moderation": "refused", "prompt_cache_key": "refused", "prompt_cache_retention": "refused",
    "prompt_cache_options": "refused (a part's prompt_cache_breakpoint is cache_control)",
    "verbosity": "refused", "web_search_options": "refused",
}
# What the bridge itself writes: a forwarding route's extra field never replaces one of these.
SENT = frozenset({"model", "max_tokens", "messages", "system", "temperature", "top_p", "stop_sequences", "stream",
                  "tools", "tool_choice", "metadata", "output_config", "service_tier"})
# An answer's stop_reason → our finish reason; anything else is "stop".
FINISH = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "max_tokens": "length",
          "model_context_window_exceeded": "length", "tool_use": "tool_calls", "refusal": "content_filter"}

_json = msgspec.json.Encoder()
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,(.*)\Z", re.DOTALL)


def _refuse(param: str, what: str) -> Unsupported:
    return Unsupported(param, f"{what} is not supported by this model's provider (Anthropic).")


def _marked(block: dict[str, Any], mark: oai.PromptCacheBreakpoint | None, where: str) -> dict[str, Any]:
    """A part's prompt-cache breakpoint is Anthropic's cache_control on its block (whose TTL is 5m)."""
    if mark is not None:
        if mark.ttl is not None:
            raise _refuse(f"{where}.prompt_cache_breakpoint.ttl", "A prompt cache TTL of 30m or 12h")
        block["cache_control"] = {"type": "ephemeral"}
    return block


def _text_block(text: str, mark: oai.PromptCacheBreakpoint | None, where: str) -> list[dict[str, Any]]:
    """A text block, or none for empty text: Anthropic refuses empty (or blank) text blocks."""
    if not text.strip():
        return []
    return [_marked({"type": "text", "text": text}, mark, where)]


def _texts(content: str | list[oai.TextPart], where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return _text_block(content, None, where)
    return [b for j, p in enumerate(content) for b in _text_block(p.text, p.prompt_cache_breakpoint,
                                                                    f"{where}[{j}]")]


def _image(part: oai.ImagePart, where: str) -> dict[str, Any]:
    url = part.image_url.url
    if part.image_url.detail not in (None, "auto"):
        raise _refuse(f"{where}.image_url.detail", "An image's detail (Anthropic chooses its own resolution)")
    if (data := _DATA_URL.match(url)) is not None:
        if data[1] not in IMAGE_TYPES:
            raise _refuse(f"{where}.image_url.url", f"An image of type {data[1]}")
        source: dict[str, Any] = {"type": "base64", "media_type": data[1], "data": data[2]}
    elif url.startswith(("https://", "http://")):
        source = {"type": "url", "url": url}
    else:
        raise _refuse(f"{where}.image_url.url", "An image that is neither a base64 data: URL nor an http(s) URL")
    return _marked({"type": "image", "source": source}, part.prompt_cache_breakpoint, where)


def _user_blocks(content: str | list[oai.UserPart], where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return _text_block(content, None, where)
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if isinstance(part, oai.TextPart):
            blocks += _text_block(part.text, part.prompt_cache_breakpoint, at)
        elif isinstance(part, oai.ImagePart):
            blocks.append(_image(part, at))
        elif isinstance(part, oai.FilePart) and part.file.file_data is not None \
                and (data := _DATA_URL.match(part.file.file_data)) is not None and data[1] == "application/pdf":
            blocks.append(_marked({"type": "document", "source": {"type": "base64", "media_type": data[1],
                                                                   "data": data[2]}}, part.prompt_cache_breakpoint, at))
        elif isinstance(part, oai.FilePart):
            raise _refuse(at, "A file other than a PDF given as a base64 data: URL")
        else:
            raise _refuse(at, "Audio input")
    return blocks


def _arguments(text: str, where: str) -> Any:
    try:
        value = msgspec.json.decode(text or "{}")
    except msgspec.DecodeError:
        value = None
    if not isinstance(value, dict):
        raise Unsupported(where, "A tool call's arguments must be a JSON object to be sent to Anthropic.")
    return value


@dataclass
class _Turns:
    """The conversation as Anthropic takes it: system apart, turns alternating (same-role turns merged;
    in a user turn, tool results first)."""

    system: list[dict[str, Any]] = field(default_factory=list)
    turns: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    legacy_calls: dict[str, list[str]] = field(default_factory=dict)  # function name → ids of its calls

    def add(self, role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if self.turns and self.turns[-1][0] == role:
            self.turns[-1][1].extend(blocks)
        else:
            self.turns.append((role, blocks))

    def messages(self) -> list[dict[str, Any]]:
        out = []
        for role, blocks in self.turns:
            if role == "user":
                blocks = sorted(blocks, key=lambda b: b["type"] != "tool_result")  # stable: results first
            out.append({"role": role, "content": blocks})
        return out


def _message(turns: _Turns, i: int, m: oai.Message) -> None:
    where = f"messages[{i}]"
    if getattr(m, "name", None) is not None and not isinstance(m, oai.FunctionMessage):
        raise _refuse(f"{where}.name", "A message's name")
    if isinstance(m, oai.SystemMessage | oai.DeveloperMessage):
        turns.system += _texts(m.content, f"{where}.content")
    elif isinstance(m, oai.UserMessage):
        turns.add("user", _user_blocks(m.content, f"{where}.content"))
    elif isinstance(m, oai.AssistantMessage):
        turns.add("assistant", _assistant_blocks(turns, i, m))
    elif isinstance(m, oai.ToolMessage):
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id}
        if texts := _texts(m.content, f"{where}.content"):
            result["content"] = texts
        turns.add("user", [result])
    else:  # the legacy function message: the result of the last call of that name
        ids = turns.legacy_calls.get(m.name)
        if not ids:
            raise Unsupported(f"{where}.name", f"No function_call of {m.name!r} comes before this result.")
        result = {"type": "tool_result", "tool_use_id": ids.pop()}
        if texts := _text_block(m.content or "", None, f"{where}.content"):
            result["content"] = texts
        turns.add("user", [result])


def _assistant_blocks(turns: _Turns, i: int, m: oai.AssistantMessage) -> list[dict[str, Any]]:
    where = f"messages[{i}]"
    if m.audio is not None:
        raise _refuse(f"{where}.audio", "An earlier audio answer")
    blocks: list[dict[str, Any]] = []
    if isinstance(m.content, str):
        blocks += _text_block(m.content, None, f"{where}.content")
    elif m.content is not None:  # an earlier refusal is what the assistant said: text, as the rest
        for j, part in enumerate(m.content):
            text = part.text if isinstance(part, oai.TextPart) else part.refusal
            mark = part.prompt_cache_breakpoint if isinstance(part, oai.TextPart) else None
            blocks += _text_block(text, mark, f"{where}.content[{j}]")
    if m.refusal is not None:
        blocks += _text_block(m.refusal, None, f"{where}.refusal")
    for j, call in enumerate(m.tool_calls or ()):
        if call.function is None:
            raise _refuse(f"{where}.tool_calls[{j}].type", "A custom tool's call")
        blocks.append({"type": "tool_use", "id": call.id, "name": call.function.name,
                       "input": _arguments(call.function.arguments, f"{where}.tool_calls[{j}].function.arguments")})
    if (legacy := m.function_call) is not None:  # no id in the legacy shape: one is made for its result
        call_id = f"call_legacy_{i}"
        turns.legacy_calls.setdefault(legacy.name, []).append(call_id)
        blocks.append({"type": "tool_use", "id": call_id, "name": legacy.name,
                       "input": _arguments(legacy.arguments, f"{where}.function_call.arguments")})
    return blocks


def _tool(j: int, tool: oai.Tool) -> dict[str, Any]:
    if tool.function is None:
        raise _refuse(f"tools[{j}].type", "A custom tool")
    f = tool.function
    schema: dict[str, Any] = msgspec.json.decode(f.parameters) if len(f.parameters) else dict(EMPTY_SCHEMA)
    if schema.keys() & {"anyOf", "oneOf", "allOf"}:
        raise Unsupported(f"tools[{j}].function.parameters",
                          "Anthropic needs a tool's parameters to be one object schema, not anyOf/oneOf/allOf "
                          "at the top level.")
    if schema.setdefault("type", "object") != "object":
        raise Unsupported(f"tools[{j}].function.parameters", "Anthropic needs a tool's parameters to be an object.")
    out: dict[str, Any] = {"name": f.name, "input_schema": schema}
    if f.description is not None:
        out["description"] = f.description
    if f.strict is not None:
        out["strict"] = f.strict
    return out


def _tool_choice(r: oai.ChatCompletionRequest) -> dict[str, Any] | None:
    choice = r.tool_choice
    if not r.tools and choice in (None, "auto", "none"):
        return None  # nothing to choose from
    if choice is None or choice == "auto":
        out: dict[str, Any] = {"type": "auto"}
    elif choice == "required":
        out = {"type": "any"}
    elif choice == "none":
        return {"type": "none"}  # no tool, so nothing to run in parallel
    elif choice.function is not None:
        out = {"type": "tool", "name": choice.function.name}
    else:
        raise _refuse("tool_choice.type", f"A tool choice of type {choice.type}")
    if r.parallel_tool_calls is False:
        out["disable_parallel_tool_use"] = True
    return None if out == {"type": "auto"} and choice is None else out


def _refused_fields(r: oai.ChatCompletionRequest) -> None:
    """Every parameter Anthropic cannot honour, refused by name before anything is sent."""
    checks: list[tuple[str, bool]] = [
        ("n", r.n is not None and r.n > 1), ("logprobs", bool(r.logprobs)),
        ("top_logprobs", r.top_logprobs is not None),
        ("logit_bias", r.logit_bias is not None), ("presence_penalty", r.presence_penalty is not None),
        ("frequency_penalty", r.frequency_penalty is not None), ("seed", r.seed is not None),
        ("metadata", r.metadata is not None), ("store", bool(r.store)), ("audio", r.audio is not None),
        ("modalities", r.modalities is not None and r.modalities != ["text"]),
        ("prediction", r.prediction is not None), ("moderation", r.moderation is not None),
        ("prompt_cache_key", r.prompt_cache_key is not None),
        ("prompt_cache_retention", r.prompt_cache_retention is not None),
        ("prompt_cache_options", r.prompt_cache_options is not None), ("verbosity", r.verbosity is not None),
        ("web_search_options", r.web_search_options is not None),
        ("temperature", r.temperature is not None and r.temperature > 1.0),
        ("reasoning_effort", r.reasoning_effort is not None and r.reasoning_effort not in EFFORTS),
        ("service_tier", r.service_tier is not None and r.service_tier not in TIERS),
        ("response_format", isinstance(r.response_format, oai.JsonObjectFormat)),
    ]
    for name, refused in checks:
        if refused:
            raise _refuse(name, f"The parameter {name!r} (as given)")


def request_body(r: oai.ChatCompletionRequest, target: Target, extra: bytes | None = None) -> dict[str, Any]:
    """The Messages API request for a chat request (`extra`: a forwarding route's fields, a JSON object)."""
    _refused_fields(r)
    model = r.model or target.model
    if not model:
        raise Unsupported("model", "The bridge has no model name to send to Anthropic.")
    turns = _Turns()
    for i, m in enumerate(r.messages):
        _message(turns, i, m)
    messages = turns.messages()
    if not messages:
        raise Unsupported("messages", "Anthropic needs at least one message that is not empty or a system message.")
    body: dict[str, Any] = {"model": model, "max_tokens": r.max_completion_tokens or r.max_tokens or target.max_tokens,
                            "messages": messages}
    if turns.system:
        body["system"] = turns.system
    if r.temperature is not None:
        body["temperature"] = r.temperature
    if r.top_p is not None:
        body["top_p"] = r.top_p
    if r.stop is not None:
        body["stop_sequences"] = [r.stop] if isinstance(r.stop, str) else r.stop
    if r.stream:
        body["stream"] = True
    if r.tools:
        body["tools"] = [_tool(j, t) for j, t in enumerate(r.tools)]
    if (choice := _tool_choice(r)) is not None:
        body["tool_choice"] = choice
    if r.user is not None and r.safety_identifier is not None and r.user != r.safety_identifier:
        raise Unsupported("safety_identifier", "Anthropic takes one user id: user and safety_identifier differ.")
    if (user := r.safety_identifier or r.user) is not None:
        body["metadata"] = {"user_id": user}
    config: dict[str, Any] = {}
    if isinstance(r.response_format, oai.JsonSchemaResponseFormat):
        schema = r.response_format.json_schema.schema
        config["format"] = {"type": "json_schema",
                            "schema": msgspec.json.decode(schema) if len(schema) else dict(EMPTY_SCHEMA)}
    if r.reasoning_effort is not None:
        config["effort"] = r.reasoning_effort
    if config:
        body["output_config"] = config
    if r.service_tier is not None:
        body["service_tier"] = TIERS[r.service_tier]
    if extra:
        extras: dict[str, Any] = msgspec.json.decode(extra)
        if clash := sorted(extras.keys() & (body.keys() | SENT)):
            raise Unsupported(clash[0], f"The extra field {clash[0]!r} would replace what the bridge sends.")
        body.update(extras)
    return body


# --- answers ---------------------------------------------------------------------------------------


class _Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    output_tokens_details: dict[str, Any] | None = None


class _Block(msgspec.Struct):
    type: str
    text: str | None = None
    thinking: str | None = None
    id: str | None = None
    name: str | None = None
    input: msgspec.Raw = oai.NO_JSON  # a tool_use block's input object, as sent; empty when absent


class _Message(msgspec.Struct):
    id: str = ""
    model: str = ""
    content: list[_Block] = []
    stop_reason: str | None = None
    usage: _Usage | None = None


class _Delta(msgspec.Struct):
    type: str | None = None
    text: str | None = None
    partial_json: str | None = None
    thinking: str | None = None
    stop_reason: str | None = None


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


def _usage(u: _Usage) -> wt.Usage:
    prompt = (u.input_tokens or 0) + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)
    completion = u.output_tokens or 0
    thinking = (u.output_tokens_details or {}).get("thinking_tokens")
    return wt.Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                    cached_tokens=u.cache_read_input_tokens or 0, cache_write_tokens=u.cache_creation_input_tokens or 0,
                    reasoning_tokens=thinking if isinstance(thinking, int) and thinking >= 0 else 0)


def _broken(what: str) -> EngineFailed:
    return EngineFailed(wt.ErrorInfo(status=502, type="server_error", code="upstream_protocol_error",
                                     message=f"Anthropic's answer is unreadable: {what}."))


def decode_answer(body: bytes, created: int) -> wt.Response:
    """A whole Messages API answer as one choice: text joined, tool_use blocks as tool calls, thinking
    as reasoning (never content)."""
    try:
        m = _message_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise _broken(str(exc)) from None
    texts = [b.text for b in m.content if b.type == "text" and b.text]
    thinking = [b.thinking for b in m.content if b.type == "thinking" and b.thinking]
    calls = [wt.FunctionCall(id=b.id or f"toolu_{j}", name=b.name or "",
                             arguments=bytes(b.input).decode() if len(b.input) else "{}")
             for j, b in enumerate(m.content) if b.type == "tool_use"]
    content = "".join(texts) if texts or not calls else None
    choice = wt.Choice(index=0, content=content, tool_calls=calls, reasoning="".join(thinking) or None,
                       finish_reason=FINISH.get(m.stop_reason or "end_turn", "stop"))
    return wt.Response(id=m.id, model=m.model, created=created, choices=[choice],
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
        self._started = False
        self.done = False

    def feed(self, data: bytes) -> list[wt.Chunk]:
        out: list[wt.Chunk] = []
        with keeping(out):
            events = self._parse(self._events.feed, data)
            for event in events:
                self._dispatch(None if event.type == "message" else event.type, event.data, out)
        return out

    def finish(self) -> list[wt.Chunk]:
        out: list[wt.Chunk] = []
        with keeping(out):
            for event in self._parse(lambda _: self._events.finish(), b""):  # an event whose blank line never came
                self._dispatch(None if event.type == "message" else event.type, event.data, out)
        if not self.done:
            raise EngineFailed(wt.ErrorInfo(status=502, type="server_error", code="upstream_unavailable",
                                            message="Anthropic's stream ended before message_stop."))
        return out

    @staticmethod
    def _parse(parse: Callable[[bytes], list[Event]], data: bytes) -> list[Event]:
        try:
            return parse(data)
        except EventStreamError as exc:
            raise _broken(str(exc)) from None

    def _chunk(self, out: list[wt.Chunk], **fields: Any) -> None:
        out.append(wt.Chunk(sequence=self._sequence, **fields))
        self._sequence += 1

    def _dispatch(self, name: str | None, data: bytes, out: list[wt.Chunk]) -> None:
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
            _merge(self._usage, e.usage)
        elif kind == "message_stop":
            self.done = True
            self._chunk(out, finish_reason=FINISH.get(self._stop_reason or "end_turn", "stop"),
                        usage=_usage(self._usage), done=True)

    def _start(self, index: int, block: _Block, out: list[wt.Chunk]) -> None:
        if block.type != "tool_use":
            self._blocks[index] = (block.type, -1)
            if block.type == "text" and block.text:
                self._chunk(out, content=block.text)
            elif block.type == "thinking" and block.thinking:
                self._chunk(out, reasoning=block.thinking)
            return
        number = self._calls
        self._calls += 1
        self._blocks[index] = ("tool_use", number)
        self._arguments_sent[index] = False
        start = bytes(block.input).decode()
        self._start_input[index] = start if start.strip() not in ("", "{}") else "{}"
        self._chunk(out, tool_calls=[wt.ToolCallDelta(index=number, id=block.id or f"toolu_{number}",
                                                      type="function", name=block.name or "", arguments="")])

    def _delta(self, index: int, delta: _Delta, out: list[wt.Chunk]) -> None:
        if index not in self._blocks:
            raise _broken(f"a delta for block {index}, which never started")
        kind, number = self._blocks[index]
        if delta.type == "text_delta" and kind == "text" and delta.text:
            self._chunk(out, content=delta.text)
        elif delta.type == "thinking_delta" and kind == "thinking" and delta.thinking:
            self._chunk(out, reasoning=delta.thinking)
        elif delta.type == "input_json_delta" and kind == "tool_use" and delta.partial_json:
            self._arguments_sent[index] = True
            self._chunk(out, tool_calls=[wt.ToolCallDelta(index=number, arguments=delta.partial_json)])
        # signature_delta, citations_delta and any newer delta: nothing of ours to carry

    def _stop(self, index: int, out: list[wt.Chunk]) -> None:
        kind, number = self._blocks.get(index, ("", -1))
        if kind == "tool_use" and not self._arguments_sent.get(index, True):
            # a call whose input came whole in its start (or empty): its arguments are still a JSON object
            self._arguments_sent[index] = True
            self._chunk(out, tool_calls=[wt.ToolCallDelta(index=number, arguments=self._start_input[index])])


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
OVERLOADED_RETRY_AFTER = 1  # seconds: Anthropic's 529 asks for a wait; when it names none, a short one


def _by_type(kind: str, message: str, status: int | None = None) -> wt.ErrorInfo:
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
    return wt.ErrorInfo(status=code_status, type=type_, code=code, message=text)


def decode_error(status: int, body: bytes) -> wt.ErrorInfo:
    """An Anthropic refusal (`{"type": "error", "error": {"type", "message"}}`) by its HTTP status; a body
    that is not Anthropic's shape (a proxy's page) is described by the status alone."""
    kind, message = _BY_STATUS.get(status, ""), ""
    try:
        e = _event_decoder.decode(body)
        if e.error is not None:
            message = e.error.message
    except msgspec.DecodeError:
        pass
    if status in (401, 403, 402):
        kind = _BY_STATUS[status]
    elif 400 <= status < 500 and kind not in _BY_TYPE:
        kind = ""  # an other 4xx: the same status
    return _by_type(kind, message or f"HTTP {status}", status if 400 <= status < 500 else None)


# --- the dialect -------------------------------------------------------------------------------------


@dataclass
class MessagesCall:
    request: EngineRequest
    created: int

    def answer(self, body: bytes) -> wt.Response:
        return decode_answer(body, self.created)

    def stream(self) -> MessagesStream:
        return MessagesStream(self.created)


class AnthropicDialect:
    """`clock` gives an answer's `created` (Anthropic's answers carry none): the time it was asked."""

    name = "anthropic"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    def build(self, buf: bytes, target: Target) -> MessagesCall:
        view = wire.read_request(buf)
        if view.TextCompletion():
            raise Unsupported("prompt", "Anthropic's Messages API has no text completions: use chat completions.")
        request = wire.decode_request(buf)
        body = request_body(request, target, view.ExtraJson())
        headers = {"content-type": "application/json", "anthropic-version": VERSION, **target.headers}
        if target.api_key is not None:
            headers["x-api-key"] = target.api_key
        return MessagesCall(EngineRequest(path=under(target, PATH), headers=headers, body=_json.encode(body),
                                          stream=bool(request.stream)), created=int(self._clock()))

    def error(self, status: int, headers: Mapping[str, str], body: bytes) -> wt.ErrorInfo:
        info = decode_error(status, body)
        wait = retry_after(headers)
        if wait is None and info.status == 503:
            wait = OVERLOADED_RETRY_AFTER  # an overloaded Anthropic that named no wait: a short one, not none
        info.retry_after = wait
        return info


DIALECT: Dialect = AnthropicDialect()  # typed: mypy holds the class to the protocol
