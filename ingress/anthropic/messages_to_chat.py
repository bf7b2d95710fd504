"""A Messages request read as the chat request it amounts to (`as_chat`), so every internal service and
bridge serves it through the one contract.

What has a neutral meaning maps onto chat's fields:

- `system` (a string or text blocks) and a `system` message mid-conversation: system messages, in order;
- `user` text, images (base64 or URL), documents (a PDF as a file part; plain text and content as text,
  after the document's title and context): user parts;
- `tool_result` blocks: tool messages, before the rest of their user turn (`is_error` as a leading
  `Error: ` text part);
- `assistant` text and `tool_use` blocks: the assistant message's content and tool calls;
- `cache_control` on a block: the part's `prompt_cache_breakpoint` (a 1h TTL is Anthropic's own);
- client `tools`, `tool_choice` (auto, any → required, tool → named, none), `disable_parallel_tool_use`:
  tools, tool_choice, `parallel_tool_calls: false`;
- `temperature`, `top_p`, `stop_sequences` → `stop`, `max_tokens`, `stream` (with usage asked for),
  `metadata.user_id` → `user`, `service_tier` (auto → auto, standard_only → default);
- `output_config.effort` (max → xhigh), else a `thinking` budget: `reasoning_effort` low below 4,096
  tokens, medium below 16,384, high above; adaptive or disabled thinking leaves the service's default;
- `output_config.format` (a JSON schema): `response_format` json_schema, strict.

Processing hints shape only how Anthropic's servers work; off Anthropic they have no meaning and are not
sent, and `Read.dropped` names each (the edge counts them and puts them in the access line):
`cache_control` TTLs and the request's own `cache_control`, `context_management`, thinking `display`,
earlier thinking blocks and their signatures, `speed`, `inference_geo`, `diagnostics`, `top_k` (unless
the route forwards engine extras). Features that change the answer, which only Anthropic can serve (its
server tools, `mcp_servers`, `container`, citations, search results, files by id, ...), are refused
naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from ingress.anthropic import blocks
from ingress.anthropic import messages as m
from ingress.errors import InvalidRequest
from ingress.oai.chat import (
    AssistantMessage,
    ChatCompletionRequest,
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
    PromptCacheBreakpoint,
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

_BREAKPOINT = PromptCacheBreakpoint(mode="explicit")
_EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "xhigh"}
_TIERS = {"auto": "auto", "standard_only": "default"}
_encoder = msgspec.json.Encoder()


def _refuse(param: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"{param}: {what} is served only by Anthropic's API, not by the service behind this "
                          "model.", param=param)


@dataclass
class Read:
    """What a Messages request amounts to: its chat request, the processing hints not sent (by name,
    for the metric and the access line), and `top_k` for a route that forwards engine extras. Read for
    Anthropic (`as_chat(..., for_anthropic=True)`), nothing is refused or dropped: the request travels
    whole beside its reading, and `unread` names what the reading leaves out (the features only
    Anthropic serves)."""

    request: ChatCompletionRequest
    dropped: list[str] = field(default_factory=list)
    top_k: int | None = None
    unread: list[str] = field(default_factory=list)


class _Reader:
    def __init__(self, for_anthropic: bool) -> None:
        self.dropped: list[str] = []
        self.unread: list[str] = []
        self._for_anthropic = for_anthropic

    def hint(self, name: str) -> None:
        if not self._for_anthropic and name not in self.dropped:
            self.dropped.append(name)

    def feature(self, param: str, what: str) -> None:
        """A feature only Anthropic serves, at `param`: refused, unless the request goes to Anthropic
        whole; the caller then reads on without it."""
        if not self._for_anthropic:
            raise _refuse(param, what)
        self.unread.append(param)

    def mark(self, cache: blocks.CacheControl | None) -> PromptCacheBreakpoint | None:
        if cache is None:
            return None
        if cache.ttl == "1h":
            self.hint("cache_control.ttl")
        return _BREAKPOINT

    def text(self, block: blocks.TextBlock, where: str) -> TextPart:
        if block.citations:
            self.feature(f"{where}.citations", "Citations")
        return TextPart(text=block.text, prompt_cache_breakpoint=self.mark(block.cache_control))

    def system(self, content: str | list[Any], where: str) -> SystemMessage:
        if isinstance(content, str):
            return SystemMessage(content=content)
        parts = []
        for j, block in enumerate(content):
            if isinstance(block, blocks.TextBlock):
                parts.append(self.text(block, f"{where}.{j}"))
            else:
                self.feature(f"{where}.{j}.type", f"A '{block_type(block)}' block")
        return SystemMessage(content=parts)

    def image(self, block: blocks.ImageBlock, where: str) -> list[UserPart]:
        source = block.source
        if isinstance(source, blocks.Base64Image):
            url = f"data:{source.media_type};base64,{source.data}"
        elif isinstance(source, blocks.UrlSource):
            url = source.url
        else:
            self.feature(f"{where}.source.type", "An image given by file id")
            return []
        if block.transformations is not None:
            self.feature(f"{where}.transformations", "Image transformations")
        return [ImagePart(image_url=ImageUrl(url=url), prompt_cache_breakpoint=self.mark(block.cache_control))]

    def document(self, block: blocks.DocumentBlock, where: str) -> list[UserPart]:
        if block.citations is not None and block.citations.enabled:
            self.feature(f"{where}.citations", "Citations")
        mark, source = self.mark(block.cache_control), block.source
        heading = "\n\n".join(t for t in (block.title, block.context) if t)
        if isinstance(source, blocks.Base64Pdf):
            parts: list[UserPart] = [FilePart(file=FileRef(file_data=f"data:application/pdf;base64,{source.data}",
                                                           filename=block.title or "document.pdf"),
                                              prompt_cache_breakpoint=mark)]
        elif isinstance(source, blocks.PlainText):
            parts = [TextPart(text=source.data, prompt_cache_breakpoint=mark)]
        elif isinstance(source, blocks.ContentSource):
            parts = self.user_parts(source.content, f"{where}.source.content")
        else:
            self.feature(f"{where}.source.type", f"A document given by {source_type(source)}")
            return []
        return [TextPart(text=heading), *parts] if heading else parts

    def user_parts(self, content: str | list[Any], where: str) -> list[UserPart]:
        if isinstance(content, str):
            return [TextPart(text=content)]
        return [part for j, block in enumerate(content) for part in self.part(block, f"{where}.{j}")]

    def part(self, block: Any, where: str) -> list[UserPart]:
        """A user block other than a tool result: text, an image, a document."""
        if isinstance(block, blocks.TextBlock):
            return [self.text(block, where)]
        if isinstance(block, blocks.ImageBlock):
            return self.image(block, where)
        if isinstance(block, blocks.DocumentBlock):
            return self.document(block, where)
        self.feature(f"{where}.type", f"A '{block_type(block)}' block")
        return []

    def tool_result(self, block: blocks.ToolResultBlock, where: str) -> ToolMessage:
        if block.cache_control is not None:
            self.hint("cache_control")  # a tool message has no breakpoint of its own
        content = block.content
        texts: list[TextPart] = []
        if isinstance(content, str):
            texts = [TextPart(text=content)]
        elif content is not None:
            for j, part in enumerate(content):
                if isinstance(part, blocks.TextBlock):
                    texts.append(self.text(part, f"{where}.content.{j}"))
                else:
                    self.feature(f"{where}.content.{j}.type", f"A '{block_type(part)}' block in a tool result")
        if block.is_error:
            texts.insert(0, TextPart(text="Error: "))
        return ToolMessage(content=texts if len(texts) != 1 else texts[0].text, tool_call_id=block.tool_use_id)

    def user(self, message: m.UserMessage, where: str) -> list[Message]:
        if isinstance(message.content, str):
            return [UserMessage(content=message.content)]
        results: list[Message] = []  # tool results first: they answer the turn before
        parts: list[UserPart] = []
        for j, block in enumerate(message.content):
            if isinstance(block, blocks.ToolResultBlock):
                results.append(self.tool_result(block, f"{where}.content.{j}"))
            else:
                parts += self.part(block, f"{where}.content.{j}")
        if parts:
            results.append(UserMessage(content=parts))
        return results

    def assistant(self, message: m.AssistantMessage, where: str) -> AssistantMessage:
        if isinstance(message.content, str):
            return AssistantMessage(content=message.content)
        texts: list[str] = []
        calls: list[ToolCallIn] = []
        for j, block in enumerate(message.content):
            if isinstance(block, blocks.TextBlock):
                if block.citations:
                    self.hint("citations")  # the model's own earlier citations: metadata, not input
                texts.append(block.text)
            elif isinstance(block, blocks.ToolUseBlock):
                calls.append(ToolCallIn(id=block.id, function=FunctionCallIn(name=block.name,
                                                                             arguments=bytes(block.input).decode())))
            elif isinstance(block, blocks.ThinkingBlock | blocks.RedactedThinkingBlock):
                self.hint("thinking")  # earlier reasoning and its signature: only Anthropic reads it back
            else:
                self.feature(f"{where}.content.{j}.type", f"A '{block_type(block)}' block")
        return AssistantMessage(content="".join(texts) if texts or not calls else None, tool_calls=calls or None)

    def tools(self, tools: list[m.Tool]) -> list[Tool]:
        out = []
        for i, tool in enumerate(tools):
            if not isinstance(tool, m.ClientTool):
                self.feature(f"tools.{i}.type", f"The server tool '{tool.type}'")
                continue
            if tool.cache_control is not None:
                self.hint("cache_control")  # a tool definition has no breakpoint in chat
            for name in ("input_examples", "defer_loading", "eager_input_streaming", "allowed_callers"):
                if getattr(tool, name) is not None:
                    self.hint(f"tools.{name}")
            out.append(Tool(function=FunctionDef(name=tool.name, description=tool.description,
                                                 parameters=tool.input_schema, strict=tool.strict)))
        return out


def tool_choice(choice: m.ToolChoice | None) -> tuple[ToolChoice | None, bool | None]:
    """Messages' tool_choice as chat's, and `parallel_tool_calls` (False when parallel use is disabled)."""
    if choice is None:
        return None, None
    if isinstance(choice, m.ToolChoiceNone):
        return "none", None
    parallel = False if choice.disable_parallel_tool_use else None
    if isinstance(choice, m.ToolChoiceAuto):
        return "auto", parallel
    if isinstance(choice, m.ToolChoiceAny):
        return "required", parallel
    assert isinstance(choice, m.ToolChoiceTool), choice
    return NamedToolChoice(function=NamedFunction(name=choice.name)), parallel


def reasoning_effort(r: m.MessagesRequest) -> str | None:
    """`output_config.effort`, else a thinking budget's order of magnitude; None: the service's default."""
    if r.output_config is not None and r.output_config.effort is not None:
        return _EFFORT[r.output_config.effort]
    thinking = r.thinking
    if isinstance(thinking, m.ThinkingEnabled):
        budget = thinking.budget_tokens
        return "low" if budget < 4096 else "medium" if budget < 16384 else "high"
    return None


def block_type(block: object) -> str:
    return str(type(block).__struct_config__.tag)  # type: ignore[attr-defined]  # every block is a tagged Struct


def source_type(source: object) -> str:
    return f"a '{type(source).__struct_config__.tag}' source"  # type: ignore[attr-defined]  # tagged Structs


# Top-level fields only Anthropic serves: refused off Anthropic (they change the answer).
_FEATURES = ("container", "mcp_servers", "fallbacks", "fallback_credit_token", "thread", "billing_policy",
             "compaction")
# Top-level processing hints: not sent off Anthropic.
_HINTS = ("cache_control", "context_management", "speed", "inference_geo", "diagnostics")


def as_chat(r: m.MessagesRequest, *, for_anthropic: bool = False) -> Read:
    """The chat request a Messages request amounts to; a feature only Anthropic serves is refused, unless
    the request goes to Anthropic whole (`for_anthropic`): then its reading leaves the feature out."""
    reader = _Reader(for_anthropic)
    for name in _FEATURES:
        value = getattr(r, name)
        if value is not None and (not isinstance(value, msgspec.Raw) or len(value)):
            reader.feature(name, f"'{name}'")
    for name in _HINTS:
        value = getattr(r, name)
        if value is not None and (not isinstance(value, msgspec.Raw) or len(value)):
            reader.hint(name)
    if r.output_config is not None and r.output_config.task_budget is not None:
        reader.hint("output_config.task_budget")
    if r.thinking is not None and getattr(r.thinking, "display", None) is not None:
        reader.hint("thinking.display")
    messages: list[Message] = []
    if r.system is not None:
        messages.append(reader.system(r.system, "system"))
    for i, message in enumerate(r.messages):
        where = f"messages.{i}"
        if isinstance(message, m.UserMessage):
            messages += reader.user(message, where)
        elif isinstance(message, m.AssistantMessage):
            messages.append(reader.assistant(message, where))
        else:
            assert isinstance(message, m.SystemMessage), message
            if message.clear_at is not None or message.output_config is not None:
                reader.hint("messages.system")
            if message.content is not None:
                messages.append(reader.system(message.content, f"{where}.content"))
    choice, parallel = tool_choice(r.tool_choice)
    response_format = None
    if r.output_config is not None and r.output_config.format is not None:
        response_format = JsonSchemaResponseFormat(json_schema=JsonSchemaFormat(
            name="output", schema=r.output_config.format.schema, strict=True))
    chat = ChatCompletionRequest(
        model=r.model, messages=messages, max_tokens=r.max_tokens,
        temperature=r.temperature, top_p=r.top_p, stop=r.stop_sequences, stream=r.stream,
        stream_options=StreamOptions(include_usage=True) if r.stream else None,
        tools=reader.tools(r.tools) or None if r.tools else None, tool_choice=choice, parallel_tool_calls=parallel,
        user=r.metadata.user_id if r.metadata is not None else None,
        service_tier=_TIERS[r.service_tier] if r.service_tier is not None else None,
        reasoning_effort=reasoning_effort(r), response_format=response_format,
    )
    return Read(chat, reader.dropped, r.top_k, reader.unread)
