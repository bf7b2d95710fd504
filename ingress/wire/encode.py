"""Encode a validated OpenAI request, and the answer tables, into FlatBuffers with pooled builders."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec
from flatbuffers import Builder

from ingress.oai import models as oai
from ingress.passport import Passport, message_text
from ingress.wire import identifiers
from ingress.wire import types as wt
from ingress.wire._generated.LLMGateway import (
    Choice,
    CompletionChunk,
    CompletionRequest,
    CompletionResponse,
    ContentPart,
    Error,
    FunctionCall,
    KeyValue,
    LogitBias,
)
from ingress.wire._generated.LLMGateway import Message as FbMessage
from ingress.wire._generated.LLMGateway import Passport as FbPassport
from ingress.wire._generated.LLMGateway import ResponseFormat, ToolCall, ToolCallDelta, Usage
from ingress.wire.pool import BuilderPool

T = TypeVar("T")

PROVIDERS = {"openai": 0, "anthropic": 1, "self_hosted": 2}
ROLES = {"system": 0, "user": 1, "assistant": 2, "tool": 3, "developer": 4}
FINISH_REASONS = {None: 0, "stop": 1, "length": 2, "tool_calls": 3, "content_filter": 4}
DEFAULT_TEMPERATURE = 1.0

_json = msgspec.json.Encoder()


def _str(b: Builder, value: str | None) -> int:
    return b.CreateString(value) if value is not None else 0


def _table_vector(b: Builder, start: Callable[[Builder, int], None], offsets: Sequence[int]) -> int:
    start(b, len(offsets))
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return int(b.EndVector())


def _strings(b: Builder, start: Callable[[Builder, int], None], values: Sequence[str]) -> int:
    return _table_vector(b, start, [b.CreateString(v) for v in values])


# --- request --------------------------------------------------------------------------------------


def _part(b: Builder, part: oai.ContentPart) -> int:
    kind = part.__struct_config__.tag
    assert isinstance(kind, str)
    text = payload = 0
    if isinstance(part, oai.TextPart):
        text = b.CreateString(part.text)
    elif isinstance(part, oai.RefusalPart):
        text = b.CreateString(part.refusal)
    else:
        inner = part.image_url if isinstance(part, oai.ImagePart) else (
            part.input_audio if isinstance(part, oai.AudioPart) else part.file
        )
        payload = b.CreateString(_json.encode(inner).decode())
    type_ = b.CreateSharedString(kind)
    ContentPart.Start(b)
    ContentPart.AddType(b, type_)
    if text:
        ContentPart.AddText(b, text)
    if payload:
        ContentPart.AddPayloadJson(b, payload)
    return int(ContentPart.End(b))


def _function_call(b: Builder, id_: str | None, name: str, arguments: str, type_: str = "function") -> int:
    id_off, type_off = _str(b, id_), b.CreateSharedString(type_)
    name_off, args_off = b.CreateString(name), b.CreateString(arguments)
    FunctionCall.Start(b)
    if id_off:
        FunctionCall.AddId(b, id_off)
    FunctionCall.AddType(b, type_off)
    FunctionCall.AddName(b, name_off)
    FunctionCall.AddArguments(b, args_off)
    return int(FunctionCall.End(b))


def _message(b: Builder, m: oai.Message) -> int:
    content = parts = tool_calls = refusal = 0
    if isinstance(m.content, str):
        content = b.CreateString(m.content)
    elif m.content is not None:
        parts = _table_vector(b, FbMessage.StartPartsVector, [_part(b, p) for p in m.content])
    name = _str(b, getattr(m, "name", None))
    tool_call_id = _str(b, m.tool_call_id) if isinstance(m, oai.ToolMessage) else 0
    if isinstance(m, oai.AssistantMessage):
        refusal = _str(b, m.refusal)
        if m.tool_calls is not None:
            calls = [_function_call(b, c.id, c.function.name, c.function.arguments, c.type) for c in m.tool_calls]
            tool_calls = _table_vector(b, FbMessage.StartToolCallsVector, calls)
    FbMessage.Start(b)
    FbMessage.AddRole(b, ROLES[m.__struct_config__.tag])  # type: ignore[index]  # tags are the role strings
    for add, off in (
        (FbMessage.AddContent, content),
        (FbMessage.AddParts, parts),
        (FbMessage.AddName, name),
        (FbMessage.AddToolCalls, tool_calls),
        (FbMessage.AddToolCallId, tool_call_id),
        (FbMessage.AddRefusal, refusal),
    ):
        if off:
            add(b, off)
    return int(FbMessage.End(b))


def _tool(b: Builder, tool: oai.Tool) -> int:
    f = tool.function
    name = b.CreateString(f.name)
    params = b.CreateString(bytes(f.parameters).decode()) if len(f.parameters) else 0
    description = _str(b, f.description)
    type_ = b.CreateSharedString(tool.type)
    ToolCall.Start(b)
    ToolCall.AddName(b, name)
    if params:
        ToolCall.AddArgumentsJson(b, params)
    if description:
        ToolCall.AddDescription(b, description)
    ToolCall.AddType(b, type_)
    if f.strict is not None:
        ToolCall.AddStrict(b, f.strict)
    return int(ToolCall.End(b))


def _response_format(b: Builder, rf: oai.ResponseFormat) -> int:
    schema = 0
    if isinstance(rf, oai.JsonSchemaResponseFormat):
        schema = b.CreateString(_json.encode(rf.json_schema).decode())
    type_ = b.CreateString(str(rf.__struct_config__.tag))
    ResponseFormat.Start(b)
    ResponseFormat.AddType(b, type_)
    if schema:
        ResponseFormat.AddJsonSchemaJson(b, schema)
    return int(ResponseFormat.End(b))


def _passport(b: Builder, p: Passport) -> int:
    tenant, key = _str(b, p.tenant_id), _str(b, p.key_id)
    parent, state = _str(b, p.traceparent), _str(b, p.tracestate)
    FbPassport.Start(b)
    if tenant:
        FbPassport.AddTenantId(b, tenant)
    if key:
        FbPassport.AddKeyId(b, key)
    FbPassport.AddPromptTokensEstimate(b, p.prompt_tokens_estimate)
    FbPassport.AddPrefixHash(b, p.prefix_hash)
    FbPassport.AddPriority(b, p.priority)
    FbPassport.AddDeadlineUnixMs(b, p.deadline_unix_ms)
    if parent:
        FbPassport.AddTraceparent(b, parent)
    if state:
        FbPassport.AddTracestate(b, state)
    return int(FbPassport.End(b))


def system_prompt_of(request: oai.ChatCompletionRequest) -> str | None:
    texts = [message_text(m) for m in request.messages if isinstance(m, (oai.SystemMessage, oai.DeveloperMessage))]
    return "\n\n".join(texts) if texts else None


def user_prompt_of(request: oai.ChatCompletionRequest) -> str | None:
    for m in reversed(request.messages):
        if isinstance(m, oai.UserMessage):
            return message_text(m)
    return None


def _stop_list(stop: str | list[str] | None) -> list[str]:
    return [stop] if isinstance(stop, str) else list(stop or ())


def build_request(
    b: Builder, request: oai.ChatCompletionRequest, request_id: str, passport: Passport, provider: str = "openai"
) -> None:
    """Write `request` into a cleared builder and finish it with the request identifier."""
    R = CompletionRequest
    request_id_off = b.CreateString(request_id)
    model = b.CreateString(request.model)
    system, user = _str(b, system_prompt_of(request)), _str(b, user_prompt_of(request))
    tools = _table_vector(b, R.StartToolsVector, [_tool(b, t) for t in request.tools]) if request.tools else 0
    messages = _table_vector(b, R.StartMessagesVector, [_message(b, m) for m in request.messages])
    tool_choice = b.CreateString(_json.encode(request.tool_choice).decode()) if request.tool_choice is not None else 0
    stop = _strings(b, R.StartStopVector, _stop_list(request.stop)) if request.stop is not None else 0
    response_format = _response_format(b, request.response_format) if request.response_format else 0
    logit_bias = 0
    if request.logit_bias is not None:
        R.StartLogitBiasVector(b, len(request.logit_bias))
        for token, bias in reversed(request.logit_bias.items()):
            LogitBias.CreateLogitBias(b, int(token), bias)
        logit_bias = b.EndVector()
    user_off = _str(b, request.user)
    metadata = 0
    if request.metadata is not None:
        pairs = []
        for key, value in request.metadata.items():
            k, v = b.CreateString(key), b.CreateString(value)
            KeyValue.Start(b)
            KeyValue.AddKey(b, k)
            KeyValue.AddValue(b, v)
            pairs.append(KeyValue.End(b))
        metadata = _table_vector(b, R.StartMetadataVector, pairs)
    passport_off = _passport(b, passport)
    effort, tier = _str(b, request.reasoning_effort), _str(b, request.service_tier)

    R.Start(b)
    R.AddRequestId(b, request_id_off)
    R.AddProvider(b, PROVIDERS[provider])
    R.AddModelName(b, model)
    if system:
        R.AddSystemPrompt(b, system)
    if user:
        R.AddUserPrompt(b, user)
    # The original prefix fields carry effective values, so readers of that schema see a usable request.
    R.AddMaxTokens(b, request.max_tokens or request.max_completion_tokens or 0)
    R.AddTemperature(b, DEFAULT_TEMPERATURE if request.temperature is None else request.temperature)
    R.AddTemperatureSet(b, request.temperature is not None)
    R.AddMaxTokensSet(b, request.max_tokens is not None)
    for add, off in (
        (R.AddTools, tools),
        (R.AddMessages, messages),
        (R.AddToolChoiceJson, tool_choice),
        (R.AddStop, stop),
        (R.AddResponseFormat, response_format),
        (R.AddLogitBias, logit_bias),
        (R.AddUser, user_off),
        (R.AddMetadata, metadata),
        (R.AddPassport, passport_off),
        (R.AddReasoningEffort, effort),
        (R.AddServiceTier, tier),
    ):
        if off:
            add(b, off)
    optional: tuple[tuple[Callable[[Builder, Any], None], object], ...] = (
        (R.AddTopP, request.top_p),
        (R.AddN, request.n),
        (R.AddSeed, request.seed),
        (R.AddPresencePenalty, request.presence_penalty),
        (R.AddFrequencyPenalty, request.frequency_penalty),
        (R.AddMaxCompletionTokens, request.max_completion_tokens),
        (R.AddParallelToolCalls, request.parallel_tool_calls),
        (R.AddLogprobs, request.logprobs),
        (R.AddTopLogprobs, request.top_logprobs),
    )
    for add_opt, opt in optional:
        if opt is not None:
            add_opt(b, opt)
    R.AddStream(b, bool(request.stream))
    R.AddIncludeUsage(b, bool(request.stream_options and request.stream_options.include_usage))
    b.Finish(R.End(b), file_identifier=identifiers.REQUEST)


def encode_request(
    pool: BuilderPool, request: oai.ChatCompletionRequest, request_id: str, passport: Passport, provider: str = "openai"
) -> bytes:
    with pool.builder() as b:
        build_request(b, request, request_id, passport, provider)
        return bytes(b.Output())


# --- answers --------------------------------------------------------------------------------------


def _usage(b: Builder, u: wt.Usage) -> int:
    Usage.Start(b)
    Usage.AddPromptTokens(b, u.prompt_tokens)
    Usage.AddCompletionTokens(b, u.completion_tokens)
    Usage.AddTotalTokens(b, u.total_tokens)
    Usage.AddCachedTokens(b, u.cached_tokens)
    Usage.AddReasoningTokens(b, u.reasoning_tokens)
    return int(Usage.End(b))


def _choice(b: Builder, c: wt.Choice) -> int:
    content, refusal = _str(b, c.content), _str(b, c.refusal)
    calls = [_function_call(b, t.id, t.name, t.arguments, t.type) for t in c.tool_calls]
    tool_calls = _table_vector(b, FbMessage.StartToolCallsVector, calls) if calls else 0
    FbMessage.Start(b)
    FbMessage.AddRole(b, ROLES["assistant"])
    if content:
        FbMessage.AddContent(b, content)
    if tool_calls:
        FbMessage.AddToolCalls(b, tool_calls)
    if refusal:
        FbMessage.AddRefusal(b, refusal)
    message = FbMessage.End(b)
    Choice.Start(b)
    Choice.AddIndex(b, c.index)
    Choice.AddMessage(b, message)
    Choice.AddFinishReason(b, FINISH_REASONS[c.finish_reason])
    return int(Choice.End(b))


def build_response(b: Builder, r: wt.Response) -> None:
    id_, model, fingerprint = b.CreateString(r.id), b.CreateString(r.model), _str(b, r.system_fingerprint)
    choices = _table_vector(b, CompletionResponse.StartChoicesVector, [_choice(b, c) for c in r.choices])
    usage = _usage(b, r.usage) if r.usage is not None else 0
    S = CompletionResponse
    S.Start(b)
    S.AddId(b, id_)
    S.AddModel(b, model)
    S.AddCreated(b, r.created)
    S.AddChoices(b, choices)
    if usage:
        S.AddUsage(b, usage)
    if fingerprint:
        S.AddSystemFingerprint(b, fingerprint)
    b.Finish(S.End(b), file_identifier=identifiers.RESPONSE)


def build_chunk(b: Builder, c: wt.Chunk) -> None:
    id_, model, content = _str(b, c.id), _str(b, c.model), _str(b, c.content)
    refusal, fingerprint = _str(b, c.refusal), _str(b, c.system_fingerprint)
    deltas = []
    for d in c.tool_calls:
        d_id, d_type, d_name, d_args = _str(b, d.id), _str(b, d.type), _str(b, d.name), _str(b, d.arguments)
        ToolCallDelta.Start(b)
        ToolCallDelta.AddIndex(b, d.index)
        for add, off in (
            (ToolCallDelta.AddId, d_id),
            (ToolCallDelta.AddType, d_type),
            (ToolCallDelta.AddName, d_name),
            (ToolCallDelta.AddArguments, d_args),
        ):
            if off:
                add(b, off)
        deltas.append(ToolCallDelta.End(b))
    tool_calls = _table_vector(b, CompletionChunk.StartToolCallsVector, deltas) if deltas else 0
    usage = _usage(b, c.usage) if c.usage is not None else 0
    K = CompletionChunk
    K.Start(b)
    K.AddSequence(b, c.sequence)
    K.AddChoiceIndex(b, c.choice_index)
    if c.created is not None:
        K.AddCreated(b, c.created)
    if c.role is not None:
        K.AddRole(b, ROLES[c.role])
    K.AddFinishReason(b, FINISH_REASONS[c.finish_reason])
    K.AddDone(b, c.done)
    for add, off in (
        (K.AddId, id_),
        (K.AddModel, model),
        (K.AddContent, content),
        (K.AddToolCalls, tool_calls),
        (K.AddUsage, usage),
        (K.AddRefusal, refusal),
        (K.AddSystemFingerprint, fingerprint),
    ):
        if off:
            add(b, off)
    b.FinishSizePrefixed(K.End(b), file_identifier=identifiers.CHUNK)


def build_error(b: Builder, e: wt.ErrorInfo, size_prefixed: bool = False) -> None:
    type_, code, message, param = _str(b, e.type), _str(b, e.code), b.CreateString(e.message), _str(b, e.param)
    Error.Start(b)
    Error.AddStatus(b, e.status)
    Error.AddMessage(b, message)
    for add, off in ((Error.AddType, type_), (Error.AddCode, code), (Error.AddParam, param)):
        if off:
            add(b, off)
    finish = b.FinishSizePrefixed if size_prefixed else b.Finish
    finish(Error.End(b), file_identifier=identifiers.ERROR)


def _build(pool: BuilderPool, build: Callable[[Builder, T], None], value: T) -> bytes:
    with pool.builder() as b:
        build(b, value)
        return bytes(b.Output())


def encode_response(pool: BuilderPool, response: wt.Response) -> bytes:
    """One CompletionResponse buffer."""
    return _build(pool, build_response, response)


def encode_chunk_frame(pool: BuilderPool, chunk: wt.Chunk) -> bytes:
    """One size-prefixed CompletionChunk frame."""
    return _build(pool, build_chunk, chunk)


def encode_error(pool: BuilderPool, error: wt.ErrorInfo, *, framed: bool = False) -> bytes:
    """An Error buffer, alone or as a size-prefixed stream frame."""
    with pool.builder() as b:
        build_error(b, error, size_prefixed=framed)
        return bytes(b.Output())
