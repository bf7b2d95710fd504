"""A Responses request read as the chat request it amounts to (`as_chat`), so every internal service and
bridge serves it unchanged.

Input items become chat messages in order: `instructions` first as a system message; message items by
their role; consecutive `function_call` / `custom_tool_call` items as one assistant message's tool calls
(joined to the assistant message just before them); their outputs as tool messages. The annotations and
logprobs of earlier output text are the model's own metadata, not input: they are not sent back to it.
A `namespace` tool's tools are offered flat, each named `<namespace>__<name>`, and so are earlier calls of
them. An earlier reasoning item's text (its `content`, or what the edge sealed in its
`encrypted_content`) goes back to the model as its assistant turn's `reasoning_content`; a provider's own
sealed reasoning is not sent (`Call.hints` names it). A `compaction` item the edge sealed is the summary
it holds, as a user message; a request ending in a `compaction_trigger` asks the model for that summary.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from msgspec import Raw

from ingress.oai.chat import (
    NO_JSON,
    AssistantMessage,
    ChatCompletionRequest,
    CustomCallIn,
    CustomDef,
    CustomGrammarFormat,
    DeveloperMessage,
    FilePart,
    FileRef,
    FunctionCallIn,
    FunctionDef,
    Grammar,
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
    AdditionalToolsItem,
    AllowedToolsChoice,
    Call,
    CompactionItem,
    CompactionTrigger,
    ConfigurationUpdate,
    CustomChoice,
    CustomTool,
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionChoice,
    FunctionTool,
    GrammarFormat,
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
from ingress.oai.sealing import PREFIX, Kind, Sealed

_named_decoder = msgspec.json.Decoder(NamedTool)
# Unseal(kind, blob, param): what the edge sealed in `blob` (None: not its own); InvalidRequest if it does not open.
Unseal = Callable[[Kind, str, str], Sealed | None]

COMPACT = ("Write a summary of this conversation so far, for the same task to be carried on from it without "
           "the conversation itself: the user's goal and constraints, what has been done and found (files, "
           "commands and their results, decisions and why), what failed, and what remains to be done next. "
           "Answer with the summary alone.")
COMPACTED = "A summary of the conversation before this point, which it replaces:\n\n"


def _no_seals(kind: Kind, blob: str, param: str) -> Sealed | None:
    return None


def as_chat(call: Call, unseal: Unseal = _no_seals) -> ChatCompletionRequest:
    """The chat request this Responses request amounts to (decoded and checked: it is valid); `unseal`
    opens what the edge sealed (reasoning, compactions)."""
    r = call.request
    messages: list[Message] = [SystemMessage(content=r.instructions)] if r.instructions is not None else []
    reasoning: list[str] = []  # the reasoning of the assistant turn that comes next
    effort = r.reasoning.effort if r.reasoning is not None else None
    for i, item in enumerate(call.items):
        if isinstance(item, AdditionalToolsItem):
            continue  # its tools are the call's (responses_codec)
        if isinstance(item, ConfigurationUpdate):
            if item.reasoning is not None and item.reasoning.effort is not None:
                effort = item.reasoning.effort  # the effort from here on: the last one is the answer's
        elif isinstance(item, ReasoningItem):
            reasoning += _reasoning(item, f"input[{i}].encrypted_content", unseal)
        elif isinstance(item, CompactionItem):
            sealed = unseal("compaction", item.encrypted_content, f"input[{i}].encrypted_content")
            if sealed is None:
                raise invalid("a compaction item holds a summary this edge sealed: this one was not",
                              f"input[{i}].encrypted_content")
            messages.append(UserMessage(content=COMPACTED + sealed.text))
        elif isinstance(item, CompactionTrigger):
            messages.append(UserMessage(content=COMPACT))
        else:
            _append(messages, item)
            last = messages[-1]
            if reasoning and isinstance(last, AssistantMessage):
                last.reasoning_content = "\n\n".join([*filter(None, [last.reasoning_content]), *reasoning])
                reasoning = []
    if not messages:
        raise invalid("the input holds no message", "input")
    compacting = call.compacting
    logprobs = call.logprobs
    return ChatCompletionRequest(
        model=r.model,
        messages=messages,
        logprobs=True if logprobs else None,
        top_logprobs=r.top_logprobs if logprobs else None,
        max_completion_tokens=r.max_output_tokens,
        metadata=r.metadata,
        parallel_tool_calls=r.parallel_tool_calls,
        reasoning_effort=effort,
        response_format=_format(r.text),
        service_tier=r.service_tier,
        stream=True if r.stream or r.background else None,  # a background response is streamed inside the edge
        # The Responses stream always ends with usage: it is asked of the service whatever the client says.
        stream_options=StreamOptions(include_usage=True) if r.stream or r.background else None,
        temperature=r.temperature,
        tool_choice=None if compacting else _tool_choice(r.tool_choice),
        tools=None if compacting else [tool for t in call.tools for tool in _tools(t)] or None,
        top_p=r.top_p,
        user=r.user,
        moderation=r.moderation,
        prompt_cache_key=r.prompt_cache_key,
        prompt_cache_options=_cache_options(r.prompt_cache_options),
        prompt_cache_retention=r.prompt_cache_retention,
        safety_identifier=r.safety_identifier,
        verbosity=r.text.verbosity if r.text is not None else None,
    )


_body = msgspec.json.Decoder(dict[str, Raw])
_encoder = msgspec.json.Encoder()


def as_sent(call: Call, body: bytes, unseal: Unseal = _no_seals) -> tuple[str, bool]:
    """The request as its client sent it, for OpenAI's own /v1/responses, and whether anything was left out:
    every field and item as it came (client_metadata, built-in tools, OpenAI's own sealed reasoning), but
    what the edge sealed, which OpenAI cannot open: a compaction as the summary it holds (a user message), a
    reasoning item not at all (its text stays the edge's). A background response is the edge's to run:
    OpenAI is asked for its stream, as for any request the edge runs in the background."""
    background = bool(call.request.background)
    if isinstance(call.request.input, str) and not call.carried and call.conversation is None and not background:
        return body.decode(), False
    fields = _body.decode(body)
    if background:
        fields.pop("background", None)
        fields["stream"] = Raw(b"true")
    items: list[Raw | dict[str, str]] = []
    left_out = False
    # A continued conversation goes whole: OpenAI knows nothing of the edge's stored responses and conversations.
    fields.pop("previous_response_id", None)
    fields.pop("conversation", None)
    carried = call.items[:call.carried]
    own = call.items[call.carried:]
    sent: list[Raw] = ([Raw(_encoder.encode({"role": "user", "content": call.request.input}))]
                       if isinstance(call.request.input, str) else call.request.input)
    pairs = [*((Raw(_encoder.encode(item)), item) for item in carried), *zip(sent, own, strict=True)]
    for i, (raw, item) in enumerate(pairs):
        if isinstance(item, ReasoningItem) and (item.encrypted_content or "").startswith(PREFIX):
            left_out = True
        elif isinstance(item, CompactionItem) and item.encrypted_content.startswith(PREFIX):
            sealed = unseal("compaction", item.encrypted_content, f"input[{i}].encrypted_content")
            items.append({"role": "user", "content": COMPACTED + (sealed.text if sealed is not None else "")})
        else:
            items.append(raw)
    fields["input"] = Raw(_encoder.encode(items))
    return _encoder.encode(fields).decode(), left_out


def _reasoning(item: ReasoningItem, param: str, unseal: Unseal) -> list[str]:
    """An earlier reasoning item's text: what the edge sealed, else its `content` (a provider's own sealed
    reasoning and a summary alone are not the model's reasoning: not sent)."""
    if item.encrypted_content is not None:
        sealed = unseal("reasoning", item.encrypted_content, param)
        if sealed is not None:
            return [sealed.text] if sealed.text else []
    return [part.text for part in item.content or () if part.text]


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
    assert isinstance(item, FunctionCallOutputItem | CustomToolCallOutputItem)  # the others are as_chat's
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
    f = t.format
    chat_format = (CustomGrammarFormat(grammar=Grammar(definition=f.definition, syntax=f.syntax))
                   if isinstance(f, GrammarFormat) else f)
    return Tool(type="custom", custom=CustomDef(name=name, description=t.description, format=chat_format))


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
