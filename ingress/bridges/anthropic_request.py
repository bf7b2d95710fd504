"""Anthropic's Messages API, the request side (sans-I/O): our chat request → the body of
`POST /v1/messages`.

Every field of the chat request is sent as Anthropic spells it, or refused with `Unsupported` naming it:
`FIELDS` says which, and tests/unit/bridges/test_anthropic.py holds it to the struct. The answers, the event
stream and the errors are `anthropic_answers.py`'s; `anthropic.py` joins the two as the dialect.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ingress.bridges.dialect import Target, Unsupported
from ingress.oai import chat

PATH = "/v1/messages"
COUNT_PATH = "/v1/messages/count_tokens"
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
    "moderation": "refused",
    "prompt_cache_key": "nothing to send: Anthropic keys its cache by the prompt's breakpoints (cache_control)",
    "prompt_cache_retention": "nothing to send: the breakpoints' TTL is Anthropic's",
    "prompt_cache_options": "refused (a part's prompt_cache_breakpoint is cache_control)",
    "verbosity": "refused", "web_search_options": "refused",
}
# What the bridge itself writes: a forwarding route's extra field never replaces one of these.
SENT = frozenset({"model", "max_tokens", "messages", "system", "temperature", "top_p", "stop_sequences", "stream",
                  "tools", "tool_choice", "metadata", "output_config", "service_tier"})
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,(.*)\Z", re.DOTALL)


def _refuse(param: str, what: str) -> Unsupported:
    return Unsupported(param, f"{what} is not supported by this model's provider (Anthropic).")


def _marked(block: dict[str, Any], mark: chat.PromptCacheBreakpoint | None, where: str) -> dict[str, Any]:
    """A part's prompt-cache breakpoint is Anthropic's cache_control on its block: its default TTL (5m), or,
    for OpenAI's longer 30m and 12h, Anthropic's longest, 1h (a breakpoint never makes the request fail)."""
    if mark is not None:
        block["cache_control"] = {"type": "ephemeral"} if mark.ttl is None else {"type": "ephemeral", "ttl": "1h"}
    return block


def _text_block(text: str, mark: chat.PromptCacheBreakpoint | None, where: str) -> list[dict[str, Any]]:
    """A text block, or none for empty text: Anthropic refuses empty (or blank) text blocks."""
    if not text.strip():
        return []
    return [_marked({"type": "text", "text": text}, mark, where)]


def _texts(content: str | list[chat.TextPart], where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return _text_block(content, None, where)
    return [b for j, p in enumerate(content) for b in _text_block(p.text, p.prompt_cache_breakpoint,
                                                                    f"{where}[{j}]")]


def _image(part: chat.ImagePart, where: str) -> dict[str, Any]:
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


def _user_blocks(content: str | list[chat.UserPart], where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return _text_block(content, None, where)
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if isinstance(part, chat.TextPart):
            blocks += _text_block(part.text, part.prompt_cache_breakpoint, at)
        elif isinstance(part, chat.ImagePart):
            blocks.append(_image(part, at))
        elif isinstance(part, chat.FilePart) and part.file.file_data is not None \
                and (data := _DATA_URL.match(part.file.file_data)) is not None and data[1] == "application/pdf":
            blocks.append(_marked({"type": "document", "source": {"type": "base64", "media_type": data[1],
                                                                   "data": data[2]}}, part.prompt_cache_breakpoint, at))
        elif isinstance(part, chat.FilePart):
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


def _message(turns: _Turns, i: int, m: chat.Message) -> None:
    where = f"messages[{i}]"
    if getattr(m, "name", None) is not None and not isinstance(m, chat.FunctionMessage):
        raise _refuse(f"{where}.name", "A message's name")
    if isinstance(m, chat.SystemMessage | chat.DeveloperMessage):
        turns.system += _texts(m.content, f"{where}.content")
    elif isinstance(m, chat.UserMessage):
        turns.add("user", _user_blocks(m.content, f"{where}.content"))
    elif isinstance(m, chat.AssistantMessage):
        turns.add("assistant", _assistant_blocks(turns, i, m))
    elif isinstance(m, chat.ToolMessage):
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


def _assistant_blocks(turns: _Turns, i: int, m: chat.AssistantMessage) -> list[dict[str, Any]]:
    where = f"messages[{i}]"
    if m.audio is not None:
        raise _refuse(f"{where}.audio", "An earlier audio answer")
    blocks: list[dict[str, Any]] = []
    if isinstance(m.content, str):
        blocks += _text_block(m.content, None, f"{where}.content")
    elif m.content is not None:  # an earlier refusal is what the assistant said: text, as the rest
        for j, part in enumerate(m.content):
            text = part.text if isinstance(part, chat.TextPart) else part.refusal
            mark = part.prompt_cache_breakpoint if isinstance(part, chat.TextPart) else None
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


def _tool(j: int, tool: chat.Tool) -> dict[str, Any]:
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


def _tool_choice(r: chat.ChatCompletionRequest) -> dict[str, Any] | None:
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


def _refused_fields(r: chat.ChatCompletionRequest) -> None:
    """Every parameter Anthropic cannot honour, refused by name before anything is sent."""
    checks: list[tuple[str, bool]] = [
        ("n", r.n is not None and r.n > 1), ("logprobs", bool(r.logprobs)),
        ("top_logprobs", r.top_logprobs is not None),
        ("logit_bias", r.logit_bias is not None), ("presence_penalty", r.presence_penalty is not None),
        ("frequency_penalty", r.frequency_penalty is not None), ("seed", r.seed is not None),
        ("metadata", r.metadata is not None), ("store", bool(r.store)), ("audio", r.audio is not None),
        ("modalities", r.modalities is not None and r.modalities != ["text"]),
        ("prediction", r.prediction is not None), ("moderation", r.moderation is not None),
        ("prompt_cache_options", r.prompt_cache_options is not None), ("verbosity", r.verbosity is not None),
        ("web_search_options", r.web_search_options is not None),
        ("temperature", r.temperature is not None and r.temperature > 1.0),
        ("reasoning_effort", r.reasoning_effort is not None and r.reasoning_effort not in EFFORTS),
        ("service_tier", r.service_tier is not None and r.service_tier not in TIERS),
        ("response_format", isinstance(r.response_format, chat.JsonObjectFormat)),
    ]
    for name, refused in checks:
        if refused:
            raise _refuse(name, f"The parameter {name!r} (as given)")


def request_body(r: chat.ChatCompletionRequest, target: Target, extra: bytes | None = None) -> dict[str, Any]:
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
    if isinstance(r.response_format, chat.JsonSchemaResponseFormat):
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


def request_headers(target: Target, version: str | None = None, betas: list[str] | None = None) -> dict[str, str]:
    """The request's headers: the API version (the client's, else ours), its beta flags, the target's own
    headers, and its key (never the client's)."""
    headers = {"content-type": "application/json", "anthropic-version": version or VERSION}
    if betas:
        headers["anthropic-beta"] = ",".join(betas)
    headers.update(target.headers)
    if target.api_key is not None:
        headers["x-api-key"] = target.api_key
    return headers
