"""A CompletionRequest read back into OpenAI's request shape: for a bridge or a service that wants it, and
for the round-trip tests of the edge's encoding (ingress/encoding/requests.py)."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from ingress.oai import chat
from ingress.oai.completions import TextCompletionRequest
from ingress.wire.decode import ROLE_NAMES, WireError, read_request_data, shortest_float32
from ingress.wire.types import CompletionRequestData, FunctionCallData, MessageData, ToolCallData

T = TypeVar("T")


def _role(value: int) -> str | None:
    if 0 <= value < len(ROLE_NAMES):
        return ROLE_NAMES[value]
    raise WireError(f"unknown role {value}")


def _raw(text: str | bytes | None) -> msgspec.Raw:
    return msgspec.Raw(text) if text else chat.NO_JSON


_PART_TYPES: dict[str, type] = {"image_url": chat.ImageUrl, "input_audio": chat.InputAudio, "file": chat.FileRef}


_PART_CLASSES: dict[str, Any] = {"image_url": chat.ImagePart, "input_audio": chat.AudioPart, "file": chat.FilePart}


def _content(m: MessageData) -> str | list[chat.ContentPart] | None:
    if m.parts is None:
        return m.content
    parts: list[chat.ContentPart] = []
    for p in m.parts:
        kind = p.type
        b = p.prompt_cache_breakpoint
        ttl: Any = b.ttl if b is not None else None  # a Literal, checked when the request was encoded
        mark = None if b is None else chat.PromptCacheBreakpoint(mode="explicit", ttl=ttl)
        if kind == "text":
            parts.append(chat.TextPart(text=p.text or "", prompt_cache_breakpoint=mark))
        elif kind == "refusal":
            parts.append(chat.RefusalPart(refusal=p.text or ""))
        elif kind in _PART_TYPES:
            inner: Any = msgspec.json.decode(p.payload_json or b"{}", type=_PART_TYPES[kind])
            parts.append(_PART_CLASSES[kind](inner, prompt_cache_breakpoint=mark))
        else:
            raise WireError(f"unknown content part type {kind!r}")
    return parts


def _tool_call(c: FunctionCallData) -> chat.ToolCallIn:
    call_id, name, arguments = c.id or "", c.name or "", c.arguments or ""
    if c.type == "custom":
        return chat.ToolCallIn(id=call_id, type="custom", custom=chat.CustomCallIn(name=name, input=arguments))
    return chat.ToolCallIn(id=call_id, function=chat.FunctionCallIn(name=name, arguments=arguments))


def _message(m: MessageData) -> chat.Message:
    role = _role(m.role)
    # Any: the parts' kinds were validated for this role when the request was encoded.
    content: Any = _content(m)
    name = m.name
    if role == "assistant":
        calls = None if m.tool_calls is None else [_tool_call(c) for c in m.tool_calls]
        legacy = m.function_call
        return chat.AssistantMessage(
            content=content, name=name, tool_calls=calls, refusal=m.refusal,
            audio=chat.AudioRef(id=m.audio_id) if m.audio_id is not None else None,
            function_call=None if legacy is None else chat.FunctionCallIn(
                name=legacy.name or "", arguments=legacy.arguments or ""),
            reasoning_content=m.reasoning)
    if role == "function":
        return chat.FunctionMessage(content=content, name=name or "")
    if role == "tool":
        return chat.ToolMessage(content=content, tool_call_id=m.tool_call_id or "")
    if role == "system":
        return chat.SystemMessage(content=content, name=name)
    if role == "developer":
        return chat.DeveloperMessage(content=content, name=name)
    return chat.UserMessage(content=content, name=name)


_tool_choice: msgspec.json.Decoder[chat.ToolChoice] = msgspec.json.Decoder(chat.ToolChoice)
_schema_format = msgspec.json.Decoder(chat.JsonSchemaFormat)
_custom_format: msgspec.json.Decoder[chat.CustomTextFormat | chat.CustomGrammarFormat] = msgspec.json.Decoder(
    chat.CustomTextFormat | chat.CustomGrammarFormat)


def _opaque(text: str | bytes | None, decoder: msgspec.json.Decoder[T]) -> T | None:
    return None if text is None else decoder.decode(text)


_audio = msgspec.json.Decoder(chat.AudioOutput)
_prediction = msgspec.json.Decoder(chat.Prediction)
_web_search = msgspec.json.Decoder(chat.WebSearchOptions)
_moderation = msgspec.json.Decoder(chat.Moderation)
_cache_options = msgspec.json.Decoder(chat.PromptCacheOptions)


def _tool(t: ToolCallData) -> chat.Tool:
    if t.type == "custom":
        return chat.Tool(type="custom", custom=chat.CustomDef(
            name=t.name or "", description=t.description,
            format=_custom_format.decode(t.format_json) if t.format_json is not None else None))
    return chat.Tool(function=chat.FunctionDef(
        name=t.name or "", description=t.description, parameters=_raw(t.arguments_json), strict=t.strict))


def _stream_options(r: CompletionRequestData) -> chat.StreamOptions | None:
    if not r.include_usage and r.include_obfuscation is None:
        return None
    return chat.StreamOptions(include_usage=True if r.include_usage else None,
                              include_obfuscation=r.include_obfuscation)


def _logit_bias(r: CompletionRequestData) -> dict[str, float] | None:
    return None if r.logit_bias is None else {str(token): float(bias) for token, bias in r.logit_bias}  # type: ignore[arg-type]  # (int, float) pairs


# Read with the generated reader (every field at once, ~9x faster than flatc's accessors one by one: a
# bridge reads each request this way).


def decode_request(buf: bytes) -> chat.ChatCompletionRequest:
    """Everything a CompletionRequest carries, in OpenAI's request shape."""
    r = read_request_data(buf)
    response_format: chat.ResponseFormat | None = None
    if (rf := r.response_format) is not None:
        if rf.type == "json_schema":
            response_format = chat.JsonSchemaResponseFormat(_schema_format.decode(rf.json_schema_json or b"{}"))
        elif rf.type == "json_object":
            response_format = chat.JsonObjectFormat()
        else:
            response_format = chat.TextFormat()
    metadata = None if r.metadata is None else {kv.key or "": kv.value or "" for kv in r.metadata}
    return chat.ChatCompletionRequest(
        model=r.model_name or "",
        messages=[_message(m) for m in r.messages or ()],
        frequency_penalty=r.frequency_penalty,
        logit_bias=_logit_bias(r),
        logprobs=r.logprobs,
        top_logprobs=r.top_logprobs,
        max_tokens=r.max_tokens if r.max_tokens_set else None,
        max_completion_tokens=r.max_completion_tokens,
        metadata=metadata,
        n=r.n,
        parallel_tool_calls=r.parallel_tool_calls,
        presence_penalty=r.presence_penalty,
        reasoning_effort=r.reasoning_effort,
        response_format=response_format,
        seed=r.seed,
        service_tier=r.service_tier,
        stop=r.stop,
        stream=True if r.stream else None,
        stream_options=_stream_options(r),
        temperature=shortest_float32(r.temperature) if r.temperature_set else None,
        tool_choice=_tool_choice.decode(r.tool_choice_json) if r.tool_choice_json is not None else None,
        tools=None if r.tools is None else [_tool(t) for t in r.tools],
        top_p=r.top_p,
        user=r.user,
        # A legacy functions/function_call request comes back as the tools/tool_choice it travels as;
        # `legacy_functions` on the buffer tells that it was one.
        audio=_opaque(r.audio_json, _audio),
        modalities=r.modalities,  # type: ignore[arg-type]  # Literals, checked at the edge
        moderation=_opaque(r.moderation_json, _moderation),
        prediction=_opaque(r.prediction_json, _prediction),
        prompt_cache_key=r.prompt_cache_key,
        prompt_cache_options=_opaque(r.prompt_cache_options_json, _cache_options),
        prompt_cache_retention=r.prompt_cache_retention,  # type: ignore[arg-type]  # a Literal, checked at the edge
        safety_identifier=r.safety_identifier,
        store=r.store,
        verbosity=r.verbosity,  # type: ignore[arg-type]  # a Literal, checked at the edge
        web_search_options=_opaque(r.web_search_options_json, _web_search),
    )


def decode_text_request(buf: bytes) -> TextCompletionRequest:
    """A legacy text completion's CompletionRequest (`text_completion` set) in OpenAI's request shape."""
    r = read_request_data(buf)
    if not r.text_completion:
        raise WireError("not a text completion request")
    prompts: list[Any] = [p.text if p.tokens is None else p.tokens for p in r.prompts or ()]
    return TextCompletionRequest(
        model=r.model_name or "",
        prompt=prompts,
        best_of=r.best_of,
        echo=True if r.echo else None,
        frequency_penalty=r.frequency_penalty,
        logit_bias=_logit_bias(r),
        logprobs=r.logprobs_count,
        max_tokens=r.max_tokens if r.max_tokens_set else None,
        n=r.n,
        presence_penalty=r.presence_penalty,
        seed=r.seed,
        stop=r.stop,
        stream=True if r.stream else None,
        stream_options=_stream_options(r),
        suffix=r.suffix,
        temperature=shortest_float32(r.temperature) if r.temperature_set else None,
        top_p=r.top_p,
        user=r.user,
    )
