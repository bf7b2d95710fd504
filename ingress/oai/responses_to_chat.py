"""A Responses request read as the chat request it amounts to (`as_chat`), so every internal service and
bridge serves it unchanged.

Input items become chat messages in order: `instructions` first as a system message; message items by
their role; consecutive `function_call` / `custom_tool_call` items as one assistant message's tool calls
(joined to the assistant message just before them); their outputs as tool messages. The annotations and
logprobs of earlier output text are the model's own metadata, not input: they are not sent back to it.
A `namespace` tool's tools are offered flat, each named `<namespace>__<name>`, and so are earlier calls of
them; reasoning items are not sent (`Call.hints` names them).
"""

from __future__ import annotations

import msgspec
from msgspec import Raw

from ingress.oai.chat import (
    NO_JSON,
    AssistantMessage,
    ChatCompletionRequest,
    CustomCallIn,
    CustomDef,
    DeveloperMessage,
    FilePart,
    FileRef,
    FunctionCallIn,
    FunctionDef,
    ImagePart,
    ImageUrl,
    JsonSchemaFormat,
    JsonSchemaResponseFormat,
    Message,
    NamedFunction,
    NamedToolChoice,
    ResponseFormat,
    StreamOptions,
    SystemMessage,
    TextPart,
    Tool,
    ToolCallIn,
    ToolChoice,
    ToolMessage,
    UserMessage,
    UserPart,
)
from ingress.oai.chat import AllowedTools as ChatAllowedTools
from ingress.oai.chat import PromptCacheOptions as ChatCacheOptions
from ingress.oai.codec import invalid
from ingress.oai.responses import (
    AllowedToolsChoice,
    Call,
    CustomChoice,
    CustomTool,
    CustomToolCallItem,
    FunctionCallItem,
    FunctionChoice,
    FunctionTool,
    InputFile,
    InputImage,
    InputText,
    Item,
    JsonSchemaText,
    MessageItem,
    NamedTool,
    NamespaceTool,
    OutputRefusal,
    OutputText,
    Part,
    PromptCacheOptions,
    ReasoningItem,
    ResponsesToolChoice,
    TextConfig,
    ToolDef,
    is_set,
)
from ingress.oai.responses_codec import flat_name

_named_decoder = msgspec.json.Decoder(NamedTool)


def as_chat(call: Call) -> ChatCompletionRequest:
    """The chat request this Responses request amounts to (decoded and checked: it is valid)."""
    r = call.request
    messages: list[Message] = [SystemMessage(content=r.instructions)] if r.instructions is not None else []
    for item in call.items:
        _append(messages, item)
    if not messages:
        raise invalid("the input holds no message", "input")
    logprobs = call.logprobs
    return ChatCompletionRequest(
        model=r.model,
        messages=messages,
        logprobs=True if logprobs else None,
        top_logprobs=r.top_logprobs if logprobs else None,
        max_completion_tokens=r.max_output_tokens,
        metadata=r.metadata,
        parallel_tool_calls=r.parallel_tool_calls,
        reasoning_effort=r.reasoning.effort if r.reasoning is not None else None,
        response_format=_format(r.text),
        service_tier=r.service_tier,
        stream=True if r.stream else None,
        # The Responses stream always ends with usage: it is asked of the service whatever the client says.
        stream_options=StreamOptions(include_usage=True) if r.stream else None,
        temperature=r.temperature,
        tool_choice=_tool_choice(r.tool_choice),
        tools=[tool for t in call.tools for tool in _tools(t)] or None,
        top_p=r.top_p,
        user=r.user,
        moderation=r.moderation,
        prompt_cache_key=r.prompt_cache_key,
        prompt_cache_options=_cache_options(r.prompt_cache_options),
        prompt_cache_retention=r.prompt_cache_retention,
        safety_identifier=r.safety_identifier,
        verbosity=r.text.verbosity if r.text is not None else None,
    )


def _text(parts: list[Part]) -> list[TextPart]:
    return [TextPart(text=p.text, prompt_cache_breakpoint=p.prompt_cache_breakpoint) for p in parts
            if isinstance(p, InputText)]


def _user_part(p: Part) -> UserPart:
    if isinstance(p, InputImage):
        assert p.image_url is not None  # checked
        return ImagePart(image_url=ImageUrl(url=p.image_url, detail=p.detail),
                         prompt_cache_breakpoint=p.prompt_cache_breakpoint)
    if isinstance(p, InputFile):
        return FilePart(file=FileRef(file_data=p.file_data, file_id=p.file_id, filename=p.filename),
                        prompt_cache_breakpoint=p.prompt_cache_breakpoint)
    assert isinstance(p, InputText)  # checked
    return TextPart(text=p.text, prompt_cache_breakpoint=p.prompt_cache_breakpoint)


def _message(item: MessageItem) -> Message:
    content = item.content
    if item.role == "user":
        return UserMessage(content=content if isinstance(content, str) else [_user_part(p) for p in content])
    if item.role == "assistant":
        if isinstance(content, str):
            return AssistantMessage(content=content)
        text = "".join(p.text for p in content if isinstance(p, InputText | OutputText))
        refusals = [p.refusal for p in content if isinstance(p, OutputRefusal)]
        has_text = any(isinstance(p, InputText | OutputText) for p in content)
        return AssistantMessage(content=text if has_text or not refusals else None,
                                refusal="".join(refusals) if refusals else None)
    kind = SystemMessage if item.role == "system" else DeveloperMessage
    return kind(content=content if isinstance(content, str) else _text(content))


def _append(messages: list[Message], item: Item) -> None:
    if isinstance(item, MessageItem):
        messages.append(_message(item))
        return
    if isinstance(item, ReasoningItem):
        return
    if isinstance(item, FunctionCallItem | CustomToolCallItem):
        name = item.name if item.namespace is None else flat_name(item.namespace, item.name)
        if isinstance(item, FunctionCallItem):
            call = ToolCallIn(id=item.call_id, function=FunctionCallIn(name=name, arguments=item.arguments))
        else:
            call = ToolCallIn(id=item.call_id, type="custom", custom=CustomCallIn(name=name, input=item.input))
        last = messages[-1] if messages else None
        if isinstance(last, AssistantMessage) and last.function_call is None:
            last.tool_calls = [*(last.tool_calls or ()), call]
        else:
            messages.append(AssistantMessage(tool_calls=[call]))
        return
    output = item.output
    messages.append(ToolMessage(content=output if isinstance(output, str) else _text(list(output)),
                                tool_call_id=item.call_id))


def _tools(t: ToolDef) -> list[Tool]:
    """A tool as chat offers it; a namespace's tools each as one, named flat."""
    if isinstance(t, NamespaceTool):
        return [_tool(inner, flat_name(t.name, inner.name)) for inner in t.tools]
    return [_tool(t, t.name)]


def _tool(t: FunctionTool | CustomTool, name: str) -> Tool:
    if isinstance(t, FunctionTool):
        parameters = t.parameters if is_set(t.parameters) else NO_JSON
        return Tool(function=FunctionDef(name=name, description=t.description, parameters=parameters,
                                         strict=t.strict))
    return Tool(type="custom", custom=CustomDef(name=name, description=t.description, format=t.format))


def _tool_choice(choice: ResponsesToolChoice | None) -> ToolChoice | None:
    if choice is None or isinstance(choice, str):
        return choice
    if isinstance(choice, FunctionChoice):
        return NamedToolChoice(function=NamedFunction(name=choice.name))
    if isinstance(choice, CustomChoice):
        return NamedToolChoice(type="custom", custom=NamedFunction(name=choice.name))
    assert isinstance(choice, AllowedToolsChoice)
    tools = [Raw(_chat_named(_named_decoder.decode(raw))) for raw in choice.tools]
    return NamedToolChoice(type="allowed_tools", allowed_tools=ChatAllowedTools(mode=choice.mode, tools=tools))


def _chat_named(named: NamedTool) -> bytes:
    return msgspec.json.encode({"type": named.type, named.type: {"name": named.name}})


def _format(text: TextConfig | None) -> ResponseFormat | None:
    f = text.format if text is not None else None
    if isinstance(f, JsonSchemaText):
        return JsonSchemaResponseFormat(json_schema=JsonSchemaFormat(
            name=f.name, description=f.description, schema=f.schema if is_set(f.schema) else NO_JSON,
            strict=f.strict))
    return f


def _cache_options(options: PromptCacheOptions | None) -> ChatCacheOptions | None:
    if options is None:
        return None
    return ChatCacheOptions(mode=options.mode, ttl=options.ttl)  # type: ignore[arg-type]  # "12h" travels as text
