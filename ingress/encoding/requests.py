"""An OpenAI chat or text completion request encoded as a CompletionRequest: one mapping (OpenAI's structs
→ the schema's data classes, ingress/wire/types.py), then the generated encoder (ingress/wire/encode.py)."""

from __future__ import annotations

import msgspec

from ingress.oai import chat
from ingress.oai.completions import TextCompletionRequest
from ingress.wire.encode import PROVIDERS, ROLES, encode_request_data
from ingress.wire.types import (
    CompletionRequestData,
    ContentPartData,
    FunctionCallData,
    KeyValueData,
    MessageData,
    PassportData,
    PromptCacheBreakpointData,
    PromptInputData,
    ResponseFormatData,
    ToolCallData,
)

DEFAULT_TEMPERATURE = 1.0

_json = msgspec.json.Encoder()


def _breakpoint(b: chat.PromptCacheBreakpoint | None) -> PromptCacheBreakpointData | None:
    return None if b is None else PromptCacheBreakpointData(mode=b.mode, ttl=b.ttl)


def _part(part: chat.ContentPart) -> ContentPartData:
    kind = str(part.__struct_config__.tag)
    if isinstance(part, chat.RefusalPart):
        return ContentPartData(type=kind, text=part.refusal)
    mark = _breakpoint(part.prompt_cache_breakpoint)
    if isinstance(part, chat.TextPart):
        return ContentPartData(type=kind, text=part.text, prompt_cache_breakpoint=mark)
    inner: msgspec.Struct = (
        part.image_url if isinstance(part, chat.ImagePart)
        else part.input_audio if isinstance(part, chat.AudioPart)
        else part.file
    )
    return ContentPartData(type=kind, payload_json=_json.encode(inner).decode(), prompt_cache_breakpoint=mark)


_ROLE_OF: dict[type, int] = {
    chat.SystemMessage: ROLES["system"], chat.UserMessage: ROLES["user"], chat.AssistantMessage: ROLES["assistant"],
    chat.ToolMessage: ROLES["tool"], chat.DeveloperMessage: ROLES["developer"], chat.FunctionMessage: ROLES["function"],
}


_ASSISTANT, _TOOL = ROLES["assistant"], ROLES["tool"]


def _call(c: chat.ToolCallIn) -> FunctionCallData:
    if c.custom is not None:
        return FunctionCallData(id=c.id, type=c.type, name=c.custom.name, arguments=c.custom.input)
    f = c.function
    assert f is not None  # the codec checked that the call has the object its type names
    return FunctionCallData(id=c.id, type=c.type, name=f.name, arguments=f.arguments)


def _message(m: chat.Message) -> MessageData:
    # Dispatch on the exact class, once: this runs for every message of every request.
    cls = type(m)
    content = m.content
    text = parts = None
    if isinstance(content, str):
        text = content
    elif content is not None:
        parts = [_part(p) for p in content]
    if cls is chat.AssistantMessage:
        assert isinstance(m, chat.AssistantMessage)
        calls = None if m.tool_calls is None else [_call(c) for c in m.tool_calls]
        legacy = m.function_call
        return MessageData(
            role=_ASSISTANT, content=text, parts=parts, name=m.name, tool_calls=calls, refusal=m.refusal,
            audio_id=m.audio.id if m.audio is not None else None,
            function_call=None if legacy is None else FunctionCallData(name=legacy.name,
                                                                           arguments=legacy.arguments),
            reasoning=m.reasoning_content)
    if cls is chat.ToolMessage:
        assert isinstance(m, chat.ToolMessage)
        return MessageData(role=_TOOL, content=text, parts=parts, tool_call_id=m.tool_call_id)
    # system, developer, user: all named
    return MessageData(role=_ROLE_OF[cls], content=text, parts=parts, name=m.name)  # type: ignore[union-attr]  # the tool message returned above


def _tool(tool: chat.Tool) -> ToolCallData:
    if (c := tool.custom) is not None:
        return ToolCallData(name=c.name, description=c.description, type=tool.type,
                                format_json=_json.encode(c.format).decode() if c.format is not None else None)
    f = tool.function
    assert f is not None  # the codec checked that the tool has the object its type names
    return ToolCallData(name=f.name, arguments_json=bytes(f.parameters).decode() if len(f.parameters) else None,
                            description=f.description, type=tool.type, strict=f.strict)


def _legacy_function(f: chat.LegacyFunction) -> ToolCallData:
    return ToolCallData(name=f.name, arguments_json=bytes(f.parameters).decode() if len(f.parameters) else None,
                            description=f.description, type="function")


def _tools(request: chat.ChatCompletionRequest) -> list[ToolCallData] | None:
    if request.functions:
        return [_legacy_function(f) for f in request.functions]
    return [_tool(t) for t in request.tools] if request.tools else None


def _tool_choice(request: chat.ChatCompletionRequest) -> str | None:
    """`tool_choice` as JSON text; a legacy `function_call` travels as the tool_choice it means."""
    choice: object = request.tool_choice
    legacy = request.function_call
    if legacy is not None:
        choice = legacy if isinstance(legacy, str) else chat.NamedToolChoice(function=legacy)
    return None if choice is None else _json.encode(choice).decode()


def _opaque(value: msgspec.Struct | None) -> str | None:
    return None if value is None else _json.encode(value).decode()


def _response_format(rf: chat.ResponseFormat) -> ResponseFormatData:
    schema = _json.encode(rf.json_schema).decode() if isinstance(rf, chat.JsonSchemaResponseFormat) else None
    return ResponseFormatData(type=str(rf.__struct_config__.tag), json_schema_json=schema)


def message_text(message: chat.Message) -> str:
    """The text of a message: its string content, or its text parts joined."""
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") for part in content)


def system_prompt_of(request: chat.ChatCompletionRequest) -> str | None:
    texts = [message_text(m) for m in request.messages if type(m) in _SYSTEM]
    return "\n\n".join(texts) if texts else None


_SYSTEM = (chat.SystemMessage, chat.DeveloperMessage)


def user_prompt_of(request: chat.ChatCompletionRequest) -> str | None:
    for m in reversed(request.messages):
        if isinstance(m, chat.UserMessage):
            return message_text(m)
    return None


def request_data(
    request: chat.ChatCompletionRequest, request_id: str, passport: PassportData, provider: str = "openai",
    model_name: str | None = None, extra_json: str | None = None,
) -> CompletionRequestData:
    """`model_name` replaces the requested name (a route's alias resolved to the upstream's name);
    `extra_json` is a JSON object of the fields that are not OpenAI's, for a route that forwards them."""
    stop, options = request.stop, request.stream_options
    return CompletionRequestData(
        request_id=request_id,
        provider=PROVIDERS[provider],
        model_name=model_name or request.model,
        system_prompt=system_prompt_of(request),
        user_prompt=user_prompt_of(request),
        # The original prefix fields carry effective values, so readers of that schema see a usable request.
        max_tokens=request.max_tokens or request.max_completion_tokens or 0,
        temperature=DEFAULT_TEMPERATURE if request.temperature is None else request.temperature,
        tools=_tools(request),
        messages=[_message(m) for m in request.messages],
        tool_choice_json=_tool_choice(request),
        top_p=request.top_p,
        n=request.n,
        stop=[stop] if isinstance(stop, str) else stop,
        seed=request.seed,
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        max_completion_tokens=request.max_completion_tokens,
        response_format=_response_format(request.response_format) if request.response_format else None,
        logit_bias=[(int(k), v) for k, v in request.logit_bias.items()] if request.logit_bias is not None else None,
        user=request.user,
        stream=bool(request.stream),
        include_usage=bool(options and options.include_usage),
        metadata=[KeyValueData(key=k, value=v) for k, v in request.metadata.items()]
        if request.metadata is not None else None,
        passport=passport,
        temperature_set=request.temperature is not None,
        max_tokens_set=request.max_tokens is not None,
        parallel_tool_calls=request.parallel_tool_calls,
        logprobs=request.logprobs,
        top_logprobs=request.top_logprobs,
        reasoning_effort=request.reasoning_effort,
        service_tier=request.service_tier,
        include_obfuscation=options.include_obfuscation if options is not None else None,
        audio_json=_opaque(request.audio),
        modalities=list[str](request.modalities) if request.modalities is not None else None,
        prediction_json=_opaque(request.prediction),
        prompt_cache_key=request.prompt_cache_key,
        prompt_cache_retention=request.prompt_cache_retention,
        safety_identifier=request.safety_identifier,
        store=request.store,
        verbosity=request.verbosity,
        web_search_options_json=_opaque(request.web_search_options),
        moderation_json=_opaque(request.moderation),
        prompt_cache_options_json=_opaque(request.prompt_cache_options),
        legacy_functions=request.legacy_functions,
        extra_json=extra_json,
    )


def _prompt(value: str | list[int]) -> PromptInputData:
    return PromptInputData(text=value) if isinstance(value, str) else PromptInputData(tokens=value)


def text_request_data(
    request: TextCompletionRequest, request_id: str, passport: PassportData, provider: str = "openai",
    model_name: str | None = None, extra_json: str | None = None,
) -> CompletionRequestData:
    """A legacy text completion as a CompletionRequest: its prompts, and the sampling fields chat has;
    `extra_json` as for chat (a forwarding route's fields that are not OpenAI's)."""
    stop, options, prompts = request.stop, request.stream_options, request.prompts
    return CompletionRequestData(
        request_id=request_id,
        provider=PROVIDERS[provider],
        model_name=model_name or request.model,
        user_prompt=next((p for p in prompts if isinstance(p, str)), None),
        max_tokens=request.max_tokens or 0,
        temperature=DEFAULT_TEMPERATURE if request.temperature is None else request.temperature,
        top_p=request.top_p,
        n=request.n,
        stop=[stop] if isinstance(stop, str) else stop,
        seed=request.seed,
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        logit_bias=[(int(k), v) for k, v in request.logit_bias.items()] if request.logit_bias is not None else None,
        user=request.user,
        stream=bool(request.stream),
        include_usage=bool(options and options.include_usage),
        passport=passport,
        temperature_set=request.temperature is not None,
        max_tokens_set=request.max_tokens is not None,
        include_obfuscation=options.include_obfuscation if options is not None else None,
        extra_json=extra_json,
        text_completion=True,
        prompts=[_prompt(p) for p in prompts],
        echo=bool(request.echo),
        suffix=request.suffix,
        best_of=request.best_of,
        logprobs_count=request.logprobs,
    )


def encode_request(request: chat.ChatCompletionRequest, request_id: str, passport: PassportData,
                   provider: str = "openai", model_name: str | None = None, extra_json: str | None = None) -> bytearray:
    return encode_request_data(request_data(request, request_id, passport, provider, model_name, extra_json))


def encode_messages_request(request: chat.ChatCompletionRequest, request_id: str, passport: PassportData,
                            provider: str = "openai", model_name: str | None = None, extra_json: str | None = None,
                            *, anthropic_json: str | None = None, anthropic_beta: list[str] | None = None,
                            anthropic_version: str | None = None, responses_json: str | None = None,
                            gemini_json: str | None = None) -> bytearray:
    """A Messages request's chat reading, as `encode_request`; bound for Anthropic, with the client's
    request as sent (`anthropic_json`) and its `anthropic-beta` flags and `anthropic-version`. A Responses
    request bound for OpenAI's own API, the same way: its chat reading, and as sent (`responses_json`); a
    Gemini request bound for Google's API, its chat reading and as sent (`gemini_json`)."""
    data = request_data(request, request_id, passport, provider, model_name, extra_json)
    if anthropic_json is not None:
        data = msgspec.structs.replace(data, anthropic_json=anthropic_json, anthropic_beta=anthropic_beta or None,
                                       anthropic_version=anthropic_version)
    if responses_json is not None:
        data = msgspec.structs.replace(data, responses_json=responses_json)
    if gemini_json is not None:
        data = msgspec.structs.replace(data, gemini_json=gemini_json)
    return encode_request_data(data)


def encode_text_request(request: TextCompletionRequest, request_id: str, passport: PassportData,
                        provider: str = "openai", model_name: str | None = None,
                        extra_json: str | None = None) -> bytearray:
    return encode_request_data(text_request_data(request, request_id, passport, provider, model_name, extra_json))
