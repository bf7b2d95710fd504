"""Read FlatBuffers from bytes: zero-copy request views, and answers as plain data."""

from __future__ import annotations

import struct
from typing import Any, TypeVar

import msgspec

from ingress.oai import models as oai
from ingress.oai.completions import TextCompletionRequest
from ingress.wire import identifiers
from ingress.wire import types as wt
from ingress.wire._generated import encoders as gen
from ingress.wire._generated import enums, readers
from ingress.wire._generated.LLMGateway.CompletionRequest import CompletionRequest
from ingress.wire._generated.LLMGateway.Message import Message

ROLE_NAMES = enums.ROLE_NAMES
FINISH_NAMES = enums.FINISH_REASON_NAMES
PROVIDER_NAMES = enums.MODEL_PROVIDER_NAMES
T = TypeVar("T")


class WireError(ValueError):
    """A buffer is not of the expected type or cannot be read."""


def _expect(buf: bytes, identifier: bytes) -> None:
    if identifiers.identifier_of(buf) != identifier:
        raise WireError(f"expected a {identifier.decode()} buffer, got {identifiers.identifier_of(buf)!r}")


def _s(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def read_request(buf: bytes) -> CompletionRequest:
    """A zero-copy view of a CompletionRequest; fields are read from `buf` when accessed."""
    _expect(buf, identifiers.REQUEST)
    return CompletionRequest.GetRootAs(buf, 0)


def read_request_data(buf: bytes) -> gen.CompletionRequestData:
    """A verified CompletionRequest, every field read (for services that use the whole request)."""
    _expect(buf, identifiers.REQUEST)
    return readers.read_CompletionRequest(buf)


def _call(c: gen.FunctionCallData) -> wt.FunctionCall:
    return wt.FunctionCall(id=c.id or "", name=c.name or "", arguments=c.arguments or "", type=c.type or "function")


def _bad(what: str, value: int) -> str:
    raise WireError(f"unknown {what} {value}")


def _enum(names: tuple[str | None, ...], value: int, what: str) -> str | None:
    return names[value] if 0 <= value < len(names) else _bad(what, value)


def _choice(c: gen.ChoiceData) -> wt.Choice:
    m = c.message
    return wt.Choice(
        index=c.index,
        content=m.content if m else None,
        tool_calls=[_call(t) for t in m.tool_calls] if m and m.tool_calls else [],
        refusal=m.refusal if m else None,
        finish_reason=_enum(FINISH_NAMES, c.finish_reason, "finish_reason"),
        logprobs=c.logprobs, refusal_logprobs=c.refusal_logprobs, annotations=c.annotations or [],
        reasoning=c.reasoning,
    )


# The answers are read with the generated readers (readers.py): a verified buffer's fields come out in
# one struct call each, about ten times faster than through the flatbuffers runtime's accessors.


def decode_response(buf: bytes) -> wt.Response:
    """A verified CompletionResponse buffer."""
    _expect(buf, identifiers.RESPONSE)
    r = readers.read_CompletionResponse(buf)
    return wt.Response(id=r.id or "", model=r.model or "", created=r.created,
                       choices=[_choice(c) for c in r.choices] if r.choices else [],
                       usage=r.usage, system_fingerprint=r.system_fingerprint, service_tier=r.service_tier)


def decode_chunk(buf: bytes) -> wt.Chunk:
    """A verified chunk frame's buffer (size prefix already stripped)."""
    _expect(buf, identifiers.CHUNK)
    k = readers.read_CompletionChunk(buf)
    role = k.role
    return wt.Chunk(
        sequence=k.sequence, choice_index=k.choice_index, id=k.id, model=k.model, created=k.created or None,
        role=None if role is None else _enum(ROLE_NAMES, role, "role"), content=k.content,
        tool_calls=k.tool_calls or [],
        refusal=k.refusal, finish_reason=_enum(FINISH_NAMES, k.finish_reason, "finish_reason"),
        usage=k.usage, system_fingerprint=k.system_fingerprint, done=k.done,
        logprobs=k.logprobs, refusal_logprobs=k.refusal_logprobs, service_tier=k.service_tier,
        reasoning=k.reasoning,
    )


def decode_error(buf: bytes) -> wt.ErrorInfo:
    """A verified Error buffer (size prefix already stripped)."""
    _expect(buf, identifiers.ERROR)
    e = readers.read_Error(buf)
    return wt.ErrorInfo(status=e.status, message=e.message or "", type=e.type or "", code=e.code, param=e.param)


# --- a request back to OpenAI's shape (for services that want it, and for round-trip tests) -------


def shortest_float32(value: float) -> float:
    """The shortest decimal that reads back as the same float32 (0.699999988 -> 0.7)."""
    packed = struct.pack("<f", value)
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        if struct.pack("<f", candidate) == packed:
            return candidate
    return value


def _raw(text: bytes | None) -> msgspec.Raw:
    return msgspec.Raw(text) if text else oai.NO_JSON


_PART_TYPES: dict[str, type] = {"image_url": oai.ImageUrl, "input_audio": oai.InputAudio, "file": oai.FileRef}


_PART_CLASSES: dict[str, Any] = {"image_url": oai.ImagePart, "input_audio": oai.AudioPart, "file": oai.FilePart}


def _content(m: Message) -> str | list[oai.ContentPart] | None:
    if m.PartsIsNone():
        return _s(m.Content())
    parts: list[oai.ContentPart] = []
    for i in range(m.PartsLength()):
        p = m.Parts(i)
        kind = _s(p.Type())
        b = p.PromptCacheBreakpoint()
        ttl: Any = _s(b.Ttl()) if b is not None else None  # a Literal, checked when the request was encoded
        mark = None if b is None else oai.PromptCacheBreakpoint(mode="explicit", ttl=ttl)
        if kind == "text":
            parts.append(oai.TextPart(text=_s(p.Text()) or "", prompt_cache_breakpoint=mark))
        elif kind == "refusal":
            parts.append(oai.RefusalPart(refusal=_s(p.Text()) or ""))
        elif kind in _PART_TYPES:
            inner: Any = msgspec.json.decode(p.PayloadJson() or b"{}", type=_PART_TYPES[kind])
            parts.append(_PART_CLASSES[kind](inner, prompt_cache_breakpoint=mark))
        else:
            raise WireError(f"unknown content part type {kind!r}")
    return parts


def _tool_call(c: Any) -> oai.ToolCallIn:
    call_id, name, arguments = _s(c.Id()) or "", _s(c.Name()) or "", _s(c.Arguments()) or ""
    if c.Type() == b"custom":
        return oai.ToolCallIn(id=call_id, type="custom", custom=oai.CustomCallIn(name=name, input=arguments))
    return oai.ToolCallIn(id=call_id, function=oai.FunctionCallIn(name=name, arguments=arguments))


def _message(m: Message) -> oai.Message:
    role = _enum(ROLE_NAMES, m.Role(), "role")
    # Any: the parts' kinds were validated for this role when the request was encoded.
    content: Any = _content(m)
    name = _s(m.Name())
    if role == "assistant":
        calls = None if m.ToolCallsIsNone() else [_tool_call(m.ToolCalls(j)) for j in range(m.ToolCallsLength())]
        audio_id, legacy = _s(m.AudioId()), m.FunctionCall()
        return oai.AssistantMessage(
            content=content, name=name, tool_calls=calls, refusal=_s(m.Refusal()),
            audio=oai.AudioRef(id=audio_id) if audio_id is not None else None,
            function_call=None if legacy is None else oai.FunctionCallIn(
                name=_s(legacy.Name()) or "", arguments=_s(legacy.Arguments()) or ""))
    if role == "function":
        return oai.FunctionMessage(content=content, name=name or "")
    if role == "tool":
        return oai.ToolMessage(content=content, tool_call_id=_s(m.ToolCallId()) or "")
    if role == "system":
        return oai.SystemMessage(content=content, name=name)
    if role == "developer":
        return oai.DeveloperMessage(content=content, name=name)
    return oai.UserMessage(content=content, name=name)


_tool_choice: msgspec.json.Decoder[oai.ToolChoice] = msgspec.json.Decoder(oai.ToolChoice)
_schema_format = msgspec.json.Decoder(oai.JsonSchemaFormat)
_custom_format: msgspec.json.Decoder[oai.CustomTextFormat | oai.CustomGrammarFormat] = msgspec.json.Decoder(
    oai.CustomTextFormat | oai.CustomGrammarFormat)


def _opaque(text: bytes | None, decoder: msgspec.json.Decoder[T]) -> T | None:
    return None if text is None else decoder.decode(text)


_audio = msgspec.json.Decoder(oai.AudioOutput)
_prediction = msgspec.json.Decoder(oai.Prediction)
_web_search = msgspec.json.Decoder(oai.WebSearchOptions)
_moderation = msgspec.json.Decoder(oai.Moderation)
_cache_options = msgspec.json.Decoder(oai.PromptCacheOptions)


def _tool(t: Any) -> oai.Tool:
    if t.Type() == b"custom":
        fmt = t.FormatJson()
        return oai.Tool(type="custom", custom=oai.CustomDef(
            name=_s(t.Name()) or "", description=_s(t.Description()),
            format=_custom_format.decode(fmt) if fmt is not None else None))
    return oai.Tool(function=oai.FunctionDef(
        name=_s(t.Name()) or "", description=_s(t.Description()), parameters=_raw(t.ArgumentsJson()),
        strict=t.Strict()))


def _stream_options(r: CompletionRequest) -> oai.StreamOptions | None:
    usage, obfuscation = r.IncludeUsage(), r.IncludeObfuscation()
    if not usage and obfuscation is None:
        return None
    return oai.StreamOptions(include_usage=True if usage else None, include_obfuscation=obfuscation)


def decode_request(buf: bytes) -> oai.ChatCompletionRequest:
    """Everything a CompletionRequest carries, in OpenAI's request shape."""
    r = read_request(buf)
    tools = None if r.ToolsIsNone() else [_tool(r.Tools(i)) for i in range(r.ToolsLength())]
    response_format: oai.ResponseFormat | None = None
    if (rf := r.ResponseFormat()) is not None:
        kind = _s(rf.Type())
        if kind == "json_schema":
            response_format = oai.JsonSchemaResponseFormat(_schema_format.decode(rf.JsonSchemaJson() or b"{}"))
        elif kind == "json_object":
            response_format = oai.JsonObjectFormat()
        else:
            response_format = oai.TextFormat()
    logit_bias = None
    if not r.LogitBiasIsNone():
        logit_bias = {str(r.LogitBias(i).TokenId()): r.LogitBias(i).Bias() for i in range(r.LogitBiasLength())}
    metadata = None
    if not r.MetadataIsNone():
        metadata = {_s(r.Metadata(i).Key()) or "": _s(r.Metadata(i).Value()) or "" for i in range(r.MetadataLength())}
    max_completion = r.MaxCompletionTokens()
    stream = r.Stream()
    return oai.ChatCompletionRequest(
        model=_s(r.ModelName()) or "",
        messages=[_message(r.Messages(i)) for i in range(r.MessagesLength())],
        frequency_penalty=r.FrequencyPenalty(),
        logit_bias=logit_bias,
        logprobs=r.Logprobs(),
        top_logprobs=r.TopLogprobs(),
        max_tokens=r.MaxTokens() if r.MaxTokensSet() else None,
        max_completion_tokens=max_completion,
        metadata=metadata,
        n=r.N(),
        parallel_tool_calls=r.ParallelToolCalls(),
        presence_penalty=r.PresencePenalty(),
        reasoning_effort=_s(r.ReasoningEffort()),
        response_format=response_format,
        seed=r.Seed(),
        service_tier=_s(r.ServiceTier()),
        stop=None if r.StopIsNone() else [_s(r.Stop(i)) or "" for i in range(r.StopLength())],
        stream=True if stream else None,
        stream_options=_stream_options(r),
        temperature=shortest_float32(r.Temperature()) if r.TemperatureSet() else None,
        tool_choice=_tool_choice.decode(r.ToolChoiceJson()) if r.ToolChoiceJson() is not None else None,
        tools=tools,
        top_p=r.TopP(),
        user=_s(r.User()),
        # A legacy functions/function_call request comes back as the tools/tool_choice it travels as;
        # `LegacyFunctions()` on the buffer tells that it was one.
        audio=_opaque(r.AudioJson(), _audio),
        modalities=None if r.ModalitiesIsNone() else [_s(r.Modalities(i)) for i in range(r.ModalitiesLength())],  # type: ignore[misc]  # Literals, checked at the edge
        moderation=_opaque(r.ModerationJson(), _moderation),
        prediction=_opaque(r.PredictionJson(), _prediction),
        prompt_cache_key=_s(r.PromptCacheKey()),
        prompt_cache_options=_opaque(r.PromptCacheOptionsJson(), _cache_options),
        prompt_cache_retention=_s(r.PromptCacheRetention()),  # type: ignore[arg-type]  # a Literal, checked at the edge
        safety_identifier=_s(r.SafetyIdentifier()),
        store=r.Store(),
        verbosity=_s(r.Verbosity()),  # type: ignore[arg-type]  # a Literal, checked at the edge
        web_search_options=_opaque(r.WebSearchOptionsJson(), _web_search),
    )


def decode_text_request(buf: bytes) -> TextCompletionRequest:
    """A legacy text completion's CompletionRequest (`TextCompletion()` set) in OpenAI's request shape."""
    r = read_request(buf)
    if not r.TextCompletion():
        raise WireError("not a text completion request")
    prompts: list[Any] = []
    for i in range(r.PromptsLength()):
        p = r.Prompts(i)
        prompts.append(_s(p.Text()) if p.TokensIsNone() else [p.Tokens(j) for j in range(p.TokensLength())])
    logit_bias = None
    if not r.LogitBiasIsNone():
        logit_bias = {str(r.LogitBias(i).TokenId()): r.LogitBias(i).Bias() for i in range(r.LogitBiasLength())}
    return TextCompletionRequest(
        model=_s(r.ModelName()) or "",
        prompt=prompts,
        best_of=r.BestOf(),
        echo=True if r.Echo() else None,
        frequency_penalty=r.FrequencyPenalty(),
        logit_bias=logit_bias,
        logprobs=r.LogprobsCount(),
        max_tokens=r.MaxTokens() if r.MaxTokensSet() else None,
        n=r.N(),
        presence_penalty=r.PresencePenalty(),
        seed=r.Seed(),
        stop=None if r.StopIsNone() else [_s(r.Stop(i)) or "" for i in range(r.StopLength())],
        stream=True if r.Stream() else None,
        stream_options=_stream_options(r),
        suffix=_s(r.Suffix()),
        temperature=shortest_float32(r.Temperature()) if r.TemperatureSet() else None,
        top_p=r.TopP(),
        user=_s(r.User()),
    )
