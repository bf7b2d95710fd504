"""Anthropic's Messages API content blocks, strictly typed: what a message, a system prompt or a tool
result holds (text, images, documents, thinking, tool calls and results, Anthropic's server tools' blocks),
their sources, citations and cache breakpoints. The request around them is
`messages.py`'s, its decoder `messages_codec.py`'s."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Raw

from ingress.oai.chat import INT32_MAX, NO_JSON, ModelName

Count = Annotated[int, Meta(ge=0, le=INT32_MAX)]
Unit = Annotated[float, Meta(ge=0.0, le=1.0)]
Nonempty = Annotated[str, Meta(min_length=1)]
# Anthropic's pattern for a client tool's name.
ToolName = Annotated[str, Meta(pattern=r"^[a-zA-Z0-9_-]{1,128}\Z")]
# Who called a tool: the model itself, or a code-execution server tool of a given version.
CallerKind = Annotated[str, Meta(pattern=r"^(?:direct|code_execution_[0-9]{8})\Z")]
ImageMediaType = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]


class Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Unknown fields are refused, as Anthropic does, rather than silently dropped."""


class _Block(Strict, tag_field="type"):
    pass


class CacheControl(Strict, tag_field="type", tag="ephemeral"):
    """A prompt-cache breakpoint: on a system block, a content block, a tool, or the whole request."""

    ttl: Literal["5m", "1h"] | None = None


class Caller(Strict):
    """Who called a tool (`direct`, or a code-execution tool by its id). One struct: the kinds are
    versioned with the code-execution tool."""

    type: CallerKind
    tool_id: str | None = None


class CitationsConfig(Strict):
    enabled: bool | None = None


# --- citations (on text blocks: what Anthropic cited, sent back) ---------------------------------


class _Citation(Strict, tag_field="type"):
    cited_text: str


class CharLocation(_Citation, tag="char_location"):
    document_index: Count
    start_char_index: Count
    end_char_index: Count
    document_title: str | None = None
    file_id: str | None = None  # in Anthropic's answer, so in an answer sent back


class PageLocation(_Citation, tag="page_location"):
    document_index: Count
    start_page_number: Count
    end_page_number: Count
    document_title: str | None = None
    file_id: str | None = None


class ContentBlockLocation(_Citation, tag="content_block_location"):
    document_index: Count
    start_block_index: Count
    end_block_index: Count
    document_title: str | None = None
    file_id: str | None = None


class WebSearchResultLocation(_Citation, tag="web_search_result_location"):
    encrypted_index: str
    url: str
    title: str | None = None


class SearchResultLocation(_Citation, tag="search_result_location"):
    search_result_index: Count
    source: str
    start_block_index: Count
    end_block_index: Count
    title: str | None = None


Citation = CharLocation | PageLocation | ContentBlockLocation | WebSearchResultLocation | SearchResultLocation

# --- sources of images and documents --------------------------------------------------------------


class _Source(Strict, tag_field="type"):
    pass


class Base64Image(_Source, tag="base64"):
    media_type: ImageMediaType
    data: str


class UrlSource(_Source, tag="url"):
    url: Nonempty


class FileSource(_Source, tag="file"):
    """A file uploaded through Anthropic's Files API."""

    file_id: Nonempty


class Base64Pdf(_Source, tag="base64"):
    media_type: Literal["application/pdf"]
    data: str


class PlainText(_Source, tag="text"):
    media_type: Literal["text/plain"]
    data: str


# --- content blocks -------------------------------------------------------------------------------


class TextBlock(_Block, tag="text"):
    text: Nonempty
    cache_control: CacheControl | None = None
    citations: list[Citation] | None = None


class ImageTransformations(Strict):
    oversized_image: Literal["downsize", "error"] | None = None


class ImageBlock(_Block, tag="image"):
    source: Base64Image | UrlSource | FileSource
    cache_control: CacheControl | None = None
    transformations: ImageTransformations | None = None


class ContentSource(_Source, tag="content"):
    """A document given as content blocks, each citable on its own."""

    content: str | list[TextBlock | ImageBlock]


class DocumentBlock(_Block, tag="document"):
    source: Base64Pdf | PlainText | ContentSource | UrlSource | FileSource
    cache_control: CacheControl | None = None
    citations: CitationsConfig | None = None
    context: str | None = None
    title: str | None = None


class SearchResultBlock(_Block, tag="search_result"):
    content: list[TextBlock]
    source: str
    title: str
    cache_control: CacheControl | None = None
    citations: CitationsConfig | None = None


class ThinkingBlock(_Block, tag="thinking"):
    thinking: str
    signature: str


class RedactedThinkingBlock(_Block, tag="redacted_thinking"):
    data: str


class ToolUseBlock(_Block, tag="tool_use"):
    id: Nonempty
    name: Nonempty
    input: Raw  # a JSON object, checked to be one
    cache_control: CacheControl | None = None
    caller: Caller | None = None
    toolset_name: str | None = None


class ToolReferenceBlock(_Block, tag="tool_reference"):
    """A tool found by tool search, in a tool result."""

    tool_name: Nonempty
    cache_control: CacheControl | None = None


class BrowserTab(Strict):
    tab_id: str
    title: str
    url: str
    active: bool | None = None


class _BrowserChange(Strict, tag_field="type"):
    pass


class TabOpened(_BrowserChange, tag="tab_opened"):
    tab_id: str


class DownloadStarted(_BrowserChange, tag="download_started"):
    download_id: str
    url: str


class DownloadCompleted(_BrowserChange, tag="download_completed"):
    download_id: str
    url: str
    path: str | None = None
    size_bytes: Count | None = None


class DownloadFailed(_BrowserChange, tag="download_failed"):
    download_id: str
    url: str
    error: str | None = None


class BrowserStateBlock(_Block, tag="browser_state"):
    """The browser toolset's state, in a tool result."""

    tabs: list[BrowserTab]
    cache_control: CacheControl | None = None
    state_changes: list[TabOpened | DownloadStarted | DownloadCompleted | DownloadFailed] | None = None


ToolResultContent = TextBlock | ImageBlock | SearchResultBlock | DocumentBlock | ToolReferenceBlock | BrowserStateBlock


class ToolResultBlock(_Block, tag="tool_result"):
    tool_use_id: Nonempty
    content: str | list[ToolResultContent] | None = None
    is_error: bool | None = None
    cache_control: CacheControl | None = None
    toolset_name: str | None = None


class ServerToolUseBlock(_Block, tag="server_tool_use"):
    """A call of one of Anthropic's tools, from an earlier answer."""

    id: Nonempty
    name: Nonempty  # web_search, code_execution, ...: the list grows with the tools
    input: Raw  # a JSON object, checked to be one
    cache_control: CacheControl | None = None
    caller: Caller | None = None


class ServerToolResult(_Block):
    """The result of one of Anthropic's tools, from an earlier answer: only Anthropic reads `content`."""

    tool_use_id: Nonempty
    content: Raw
    cache_control: CacheControl | None = None


class WebSearchToolResultBlock(ServerToolResult, tag="web_search_tool_result"):
    caller: Caller | None = None


class WebFetchToolResultBlock(ServerToolResult, tag="web_fetch_tool_result"):
    caller: Caller | None = None


class CodeExecutionToolResultBlock(ServerToolResult, tag="code_execution_tool_result"):
    pass


class BashCodeExecutionToolResultBlock(ServerToolResult, tag="bash_code_execution_tool_result"):
    pass


class TextEditorCodeExecutionToolResultBlock(ServerToolResult, tag="text_editor_code_execution_tool_result"):
    pass


class ToolSearchToolResultBlock(ServerToolResult, tag="tool_search_tool_result"):
    pass


class AdvisorToolResultBlock(ServerToolResult, tag="advisor_tool_result"):
    pass


class ContainerUploadBlock(_Block, tag="container_upload"):
    file_id: Nonempty
    cache_control: CacheControl | None = None


class McpToolUseBlock(_Block, tag="mcp_tool_use"):
    id: Nonempty
    name: Nonempty
    server_name: Nonempty
    input: Raw  # a JSON object, checked to be one
    cache_control: CacheControl | None = None


class McpToolResultBlock(_Block, tag="mcp_tool_result"):
    tool_use_id: Nonempty
    content: str | list[TextBlock] | None = None
    is_error: bool | None = None
    cache_control: CacheControl | None = None


class _ToolChange(Strict, tag_field="type"):
    pass


class ToolChangeReference(_ToolChange, tag="tool_reference"):
    name: Nonempty


class McpToolReference(_ToolChange, tag="mcp_tool_reference"):
    name: Nonempty
    server_name: Nonempty


class McpToolsetReference(_ToolChange, tag="mcp_toolset_reference"):
    server_name: Nonempty


class ToolDefinition(_ToolChange, tag="tool_definition"):
    definition: Raw  # a tool as `tools` holds it: a JSON object, checked to be one


class ToolAdditionBlock(_Block, tag="tool_addition"):
    """A tool added mid-conversation (in a system message, or a compaction's record of it)."""

    tool: ToolChangeReference | McpToolReference | McpToolsetReference | ToolDefinition
    cache_control: CacheControl | None = None


class ToolRemovalBlock(_Block, tag="tool_removal"):
    tool: ToolChangeReference | McpToolReference | McpToolsetReference
    cache_control: CacheControl | None = None


class CompactionBlock(_Block, tag="compaction"):
    """A summary of the conversation so far, from an earlier answer."""

    content: str | None = None
    encrypted_content: str | None = None
    signature: str | None = None
    tool_changes: list[ToolAdditionBlock | ToolRemovalBlock] | None = None
    cache_control: CacheControl | None = None


class McpTool(Strict):
    name: Nonempty
    input_schema: Raw  # a JSON object, checked to be one
    description: str | None = None


class McpToolListingBlock(_Block, tag="mcp_tool_listing"):
    mcp_server_name: Nonempty
    tools: list[McpTool]


class FallbackModel(Strict):
    model: ModelName


class FallbackBlock(_Block, tag="fallback"):
    """Where an earlier answer moved to a fallback model."""

    from_: FallbackModel = msgspec.field(name="from")
    to: FallbackModel
    trigger: Raw = NO_JSON


ContentBlock = (
    TextBlock | ImageBlock | DocumentBlock | SearchResultBlock | ThinkingBlock | RedactedThinkingBlock
    | ToolUseBlock | ToolResultBlock | ServerToolUseBlock | WebSearchToolResultBlock | WebFetchToolResultBlock
    | CodeExecutionToolResultBlock | BashCodeExecutionToolResultBlock | TextEditorCodeExecutionToolResultBlock
    | ToolSearchToolResultBlock | AdvisorToolResultBlock | ContainerUploadBlock | McpToolUseBlock
    | McpToolResultBlock | CompactionBlock | ToolAdditionBlock | ToolRemovalBlock | McpToolListingBlock
    | FallbackBlock
)
SystemBlock = TextBlock | ToolAdditionBlock | ToolRemovalBlock
