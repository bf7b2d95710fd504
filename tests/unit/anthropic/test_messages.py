"""ingress.anthropic.messages: the Messages API request's types, held to the installed `anthropic` SDK.

One request sets every field of every Struct (a walk over the decoded request checks that it does)
and comes back whole when encoded again. The SDK's own request types (`MessageCreateParams*`, plain and
beta, every TypedDict and answer model nested in them) are walked beside our Structs: each key must be
a field of ours, each Literal value one we accept, and where we hold JSON raw the walk stops, at a place
listed here with its reason. How a body is read and refused is tests/unit/anthropic/test_messages_codec.py's.
"""

from __future__ import annotations

import collections.abc
import json
import os
import types
import typing
from typing import IO, Any

import msgspec
import pydantic
import pytest
import typing_extensions
from anthropic.types import message_create_params as sdk
from anthropic.types.beta import message_create_params as beta_sdk

from ingress.anthropic import blocks
from ingress.anthropic import messages as m
from ingress.anthropic.messages_codec import decode_messages

CACHE = {"type": "ephemeral"}
CACHE_1H = {"type": "ephemeral", "ttl": "1h"}
DIRECT = {"type": "direct"}
TEXT = {"type": "text", "text": "The sky is blue."}
IMAGE = {"type": "image", "source": {"type": "url", "url": "https://example.com/sky.png"}}
PDF = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQ="}}
SEARCH_RESULT = {"type": "search_result", "content": [TEXT], "source": "https://example.com/sky", "title": "Sky"}
WEATHER = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
DEFINITION = {"name": "lookup", "description": "Look a word up.", "input_schema": {"type": "object"}}


# --- one request setting every field --------------------------------------------------------------

CITATIONS = [
    {"type": "char_location", "cited_text": "blue", "document_index": 0, "document_title": "Sky",
     "start_char_index": 12, "end_char_index": 16, "file_id": "file_011"},
    {"type": "page_location", "cited_text": "blue", "document_index": 1, "document_title": "Atlas",
     "start_page_number": 3, "end_page_number": 4, "file_id": "file_012"},
    {"type": "content_block_location", "cited_text": "blue", "document_index": 2, "document_title": "Notes",
     "start_block_index": 0, "end_block_index": 1, "file_id": "file_013"},
    {"type": "web_search_result_location", "cited_text": "blue", "encrypted_index": "Eo8BCioI",
     "title": "Why is the sky blue?", "url": "https://example.com/why"},
    {"type": "search_result_location", "cited_text": "blue", "search_result_index": 0,
     "source": "https://example.com/sky", "start_block_index": 0, "end_block_index": 0, "title": "Sky"},
]
USER_BLOCKS = [
    {"type": "text", "text": "Look at these.", "cache_control": CACHE_1H, "citations": CITATIONS},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
     "cache_control": CACHE, "transformations": {"oversized_image": "downsize"}},
    IMAGE,
    {"type": "image", "source": {"type": "file", "file_id": "file_021"}},
    {**PDF, "cache_control": CACHE, "citations": {"enabled": True}, "context": "From the atlas.", "title": "Atlas"},
    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Plain words."}},
    {"type": "document", "source": {"type": "content", "content": [TEXT, IMAGE]}},
    {"type": "document", "source": {"type": "content", "content": "One string."}},
    {"type": "document", "source": {"type": "url", "url": "https://example.com/atlas.pdf"}},
    {"type": "document", "source": {"type": "file", "file_id": "file_022"}},
    {**SEARCH_RESULT, "cache_control": CACHE, "citations": {"enabled": True}},
    {"type": "container_upload", "file_id": "file_023", "cache_control": CACHE},
]
ADDITION = {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": DEFINITION},
            "cache_control": CACHE}
REMOVAL = {"type": "tool_removal", "tool": {"type": "mcp_toolset_reference", "server_name": "docs"},
           "cache_control": CACHE}
ASSISTANT_BLOCKS = [
    {"type": "thinking", "thinking": "The user wants the weather.", "signature": "EqQBCkYIBxgCKkA"},
    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
    {"type": "text", "text": "Let me check."},
    {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}, "cache_control": CACHE,
     "caller": DIRECT, "toolset_name": "weather"},
    {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": "sky"},
     "cache_control": CACHE, "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_00"}},
    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "cache_control": CACHE, "caller": DIRECT,
     "content": [{"type": "web_search_result", "url": "https://example.com/why", "title": "Why",
                  "encrypted_content": "EqgfCioIAR", "page_age": "2 days ago"}]},
    {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_02", "cache_control": CACHE, "caller": DIRECT,
     "content": {"type": "web_fetch_tool_result_error", "error_code": "url_not_accessible"}},
    {"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_03", "cache_control": CACHE,
     "content": {"type": "code_execution_result", "stdout": "4\n", "stderr": "", "return_code": 0, "content": []}},
    {"type": "bash_code_execution_tool_result", "tool_use_id": "srvtoolu_04", "cache_control": CACHE,
     "content": {"type": "bash_code_execution_result", "stdout": "", "stderr": "", "return_code": 0,
                 "content": [{"type": "bash_code_execution_output", "file_id": "file_031"}]}},
    {"type": "text_editor_code_execution_tool_result", "tool_use_id": "srvtoolu_05", "cache_control": CACHE,
     "content": {"type": "text_editor_code_execution_create_result", "is_file_update": False}},
    {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_06", "cache_control": CACHE,
     "content": {"type": "tool_search_tool_search_result",
                 "tool_references": [{"type": "tool_reference", "tool_name": "get_weather"}]}},
    {"type": "advisor_tool_result", "tool_use_id": "srvtoolu_07", "cache_control": CACHE,
     "content": {"type": "advisor_result", "text": "Looks right.", "stop_reason": "end_turn"}},
    {"type": "mcp_tool_use", "id": "mcptoolu_01", "name": "search", "server_name": "docs", "input": {"q": "sky"},
     "cache_control": CACHE},
    {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_01", "content": [TEXT], "is_error": False,
     "cache_control": CACHE},
    {"type": "compaction", "content": "We talked about the sky.", "encrypted_content": "Ep0CCkYIBx",
     "signature": "EqQBCkYI", "tool_changes": [ADDITION, REMOVAL], "cache_control": CACHE},
    {"type": "mcp_tool_listing", "mcp_server_name": "docs",
     "tools": [{"name": "search", "input_schema": {"type": "object"}, "description": "Search the docs."}]},
    {"type": "fallback", "from": {"model": "claude-opus-4-6"}, "to": {"model": "claude-sonnet-4-6"},
     "trigger": {"type": "refusal", "category": "cyber"}},
]
TOOL_RESULT = {
    "type": "tool_result", "tool_use_id": "toolu_01", "is_error": False, "cache_control": CACHE,
    "toolset_name": "weather",
    "content": [TEXT, IMAGE, SEARCH_RESULT, PDF, {"type": "tool_reference", "tool_name": "get_weather",
                                                   "cache_control": CACHE},
                {"type": "browser_state", "cache_control": CACHE,
                 "tabs": [{"tab_id": "1", "title": "Sky", "url": "https://example.com/sky", "active": True}],
                 "state_changes": [{"type": "tab_opened", "tab_id": "2"},
                                   {"type": "download_started", "download_id": "d1", "url": "https://x/a.csv"},
                                   {"type": "download_completed", "download_id": "d1", "url": "https://x/a.csv",
                                    "path": "/downloads/a.csv", "size_bytes": 2048},
                                   {"type": "download_failed", "download_id": "d2", "url": "https://x/b.csv",
                                    "error": "network"}]}],
}
CLIENT_TOOL = {
    **WEATHER, "type": "custom", "description": "The weather in a city.", "cache_control": CACHE, "strict": True,
    "input_examples": [{"city": "Paris"}], "defer_loading": False, "eager_input_streaming": True,
    "allowed_callers": ["direct", "code_execution_20250825"],
}
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5, "cache_control": CACHE,
              "allowed_domains": ["example.com"], "user_location": {"type": "approximate", "city": "Paris"}}
MCP_TOOLSET = {"type": "mcp_toolset", "mcp_server_name": "docs", "default_config": {"enabled": True}}
EVERYTHING: dict[str, Any] = {
    "model": "claude-opus-4-6",
    "max_tokens": 8192,
    "system": [{"type": "text", "text": "Be brief.", "cache_control": CACHE}],
    "messages": [
        {"role": "user", "content": USER_BLOCKS},
        {"role": "assistant", "content": ASSISTANT_BLOCKS},
        {"role": "user", "content": [TOOL_RESULT, {"type": "tool_result", "tool_use_id": "toolu_02",
                                                   "content": "Sunny."}]},
        {"role": "system", "content": [
            {"type": "text", "text": "Answer in French from now on."}, ADDITION,
            {"type": "tool_addition", "tool": {"type": "mcp_tool_reference", "name": "search", "server_name": "docs"}},
            REMOVAL, {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "lookup"}}],
         "clear_at": "next_user_message", "output_config": {"effort": "low"}},
        {"role": "user", "content": "Go on."},
        {"role": "assistant", "content": "Bien"},
    ],
    "tools": [CLIENT_TOOL, WEB_SEARCH, MCP_TOOLSET],
    "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    "thinking": {"type": "enabled", "budget_tokens": 2048, "display": "summarized",
                 "block_binding": {"prefix_mismatch_behavior": "drop_block"}},
    "temperature": 1.0,
    "top_p": 0.9,
    "top_k": 40,
    "stop_sequences": ["\n\nHuman:"],
    "stream": True,
    "metadata": {"user_id": "user-4f2a"},
    "service_tier": "standard_only",
    "output_config": {"effort": "high", "format": {"type": "json_schema", "schema": {"type": "object"}},
                      "task_budget": {"type": "tokens", "total": 100000, "remaining": 40000}},
    "cache_control": {"type": "ephemeral", "ttl": "5m"},
    "speed": "fast",
    "inference_geo": "us",
    "diagnostics": {"previous_message_id": "msg_01"},
    "container": {"id": "container_01", "skills": [{"skill_id": "pptx", "type": "anthropic", "version": "latest"}]},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "mcp_servers": [{"type": "url", "name": "docs", "url": "https://mcp.example.com/sse"}],
    "billing_policy": {"type": "billing_policy", "bill_to": "self"},
    "compaction": {"type": "summarize", "instructions": "Keep the numbers."},
    "fallback_credit_token": "fct_01",
    "fallbacks": [{"model": "claude-sonnet-4-6"}],
    "thread": {"type": "create"},
}
# The other members of the request's tagged unions, each in a request of its own.
VARIANTS: list[dict[str, Any]] = [
    {"thinking": {"type": "adaptive", "display": "omitted", "block_binding": {"prefix_mismatch_behavior": "error"}},
     "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
    {"thinking": {"type": "disabled"}, "tool_choice": {"type": "any", "disable_parallel_tool_use": False}},
    {"thinking": {"type": "between_tools"}, "tool_choice": {"type": "none"}},
]


def _encode(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def _decode(doc: dict[str, Any], beta: bool = False) -> m.MessagesRequest:
    request, extras = decode_messages(_encode(doc), beta=beta)
    assert extras == {}
    return request


def _set_fields(value: Any, found: set[tuple[type, str]]) -> None:
    """Every (Struct, field) in a decoded value whose field holds something other than its default."""
    if isinstance(value, list):
        for item in value:
            _set_fields(item, found)
    elif isinstance(value, msgspec.Struct):
        for field in msgspec.structs.fields(value):
            got = getattr(value, field.name)
            default = field.default
            if not (got is default or (isinstance(got, msgspec.Raw) and len(got) == 0)):
                found.add((type(value), field.name))
                _set_fields(got, found)


def _struct_types(tp: Any, found: set[type]) -> None:
    """Every Struct type reachable from `tp`."""
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct) and tp not in found:
        found.add(tp)
        for field in msgspec.structs.fields(tp):
            _struct_types(field.type, found)
    for arg in typing.get_args(tp):
        _struct_types(arg, found)


def test_one_request_sets_every_field_of_every_struct() -> None:
    found: set[tuple[type, str]] = set()
    for doc in [EVERYTHING, *({**EVERYTHING, **variant} for variant in VARIANTS)]:
        _set_fields(_decode(doc), found)
    types_: set[type] = set()
    _struct_types(m.MessagesRequest, types_)
    every = {(kind, f.name) for kind in types_ for f in msgspec.structs.fields(kind)}
    assert every - found == set(), "fields no test request sets"


def test_every_value_is_kept() -> None:
    request = _decode(EVERYTHING)
    # Encoded again, the request is what was sent: tagged unions keep their tags, raw JSON its bytes.
    # (Tools apart: Anthropic's own are held whole, below.)
    again = json.loads(msgspec.json.encode(msgspec.structs.replace(request, tools=None)))
    assert again == {k: v for k, v in EVERYTHING.items() if k != "tools"}
    client, web_search, toolset = request.tools or []
    assert isinstance(client, m.ClientTool)
    assert json.loads(msgspec.json.encode(client)) == CLIENT_TOOL
    assert isinstance(web_search, m.ServerTool)
    assert (web_search.type, web_search.name, web_search.cache_control) == \
        ("web_search_20250305", "web_search", blocks.CacheControl())
    assert json.loads(bytes(web_search.raw)) == WEB_SEARCH
    assert isinstance(toolset, m.ServerTool)
    assert (toolset.type, toolset.name, json.loads(bytes(toolset.raw))) == ("mcp_toolset", None, MCP_TOOLSET)


@pytest.mark.parametrize(("read", "expected"), [
    pytest.param(lambda r: r.max_tokens, 8192, id="max_tokens"),
    pytest.param(lambda r: [type(x).__name__ for x in r.messages],
                 ["UserMessage", "AssistantMessage", "UserMessage", "SystemMessage", "UserMessage",
                  "AssistantMessage"], id="roles"),
    pytest.param(lambda r: r.messages[0].content[1].source, blocks.Base64Image("image/png", "iVBORw0KGgo="),
                 id="base64-image"),
    pytest.param(lambda r: r.messages[0].content[0].citations[1].end_page_number, 4, id="citation"),
    pytest.param(lambda r: r.messages[0].content[4].source, blocks.Base64Pdf("application/pdf", "JVBERi0xLjQ="),
                 id="pdf"),
    pytest.param(lambda r: r.messages[0].content[5].source, blocks.PlainText("text/plain", "Plain words."),
                 id="plain-text"),
    pytest.param(lambda r: r.messages[0].content[4].title, "Atlas", id="document-title"),
    pytest.param(lambda r: r.messages[1].content[0], blocks.ThinkingBlock("The user wants the weather.",
                                                                   "EqQBCkYIBxgCKkA"), id="thinking"),
    pytest.param(lambda r: r.messages[1].content[1].data, "EmwKAhgBEgy3va3pzix", id="redacted-thinking"),
    pytest.param(lambda r: json.loads(bytes(r.messages[1].content[3].input)), {"city": "Paris"}, id="tool-input"),
    pytest.param(lambda r: r.messages[1].content[4].caller,
                 blocks.Caller("code_execution_20250825", "srvtoolu_00"), id="caller"),
    pytest.param(lambda r: json.loads(bytes(r.messages[1].content[5].content))[0]["page_age"], "2 days ago",
                 id="server-tool-result"),
    pytest.param(lambda r: r.messages[1].content[-1].from_, blocks.FallbackModel("claude-opus-4-6"),
                 id="fallback-from"),
    pytest.param(lambda r: (r.messages[2].content[0].is_error, r.messages[2].content[1].content), (False, "Sunny."),
                 id="tool-results"),
    pytest.param(lambda r: r.messages[2].content[0].content[5].tabs[0].active, True, id="browser-state"),
    pytest.param(lambda r: (r.messages[3].clear_at, r.messages[3].output_config),
                 ("next_user_message", m.SystemOutputConfig("low")), id="system-message"),
    pytest.param(lambda r: r.system, [blocks.TextBlock("Be brief.", cache_control=blocks.CacheControl())], id="system"),
    pytest.param(lambda r: r.thinking, m.ThinkingEnabled(2048, "summarized", m.ThinkingBinding("drop_block")),
                 id="thinking-config"),
    pytest.param(lambda r: r.tool_choice, m.ToolChoiceTool("get_weather", True), id="tool-choice"),
    pytest.param(lambda r: (r.temperature, r.top_p, r.top_k, r.stop_sequences, r.stream),
                 (1.0, 0.9, 40, ["\n\nHuman:"], True), id="sampling"),
    pytest.param(lambda r: (r.metadata, r.service_tier), (m.Metadata("user-4f2a"), "standard_only"),
                 id="metadata-and-tier"),
    pytest.param(lambda r: r.output_config.task_budget, m.TaskBudget(100000, 40000), id="task-budget"),
    pytest.param(lambda r: r.cache_control, blocks.CacheControl("5m"), id="request-cache-control"),
    pytest.param(lambda r: json.loads(bytes(r.context_management)), EVERYTHING["context_management"],
                 id="context-management"),
    pytest.param(lambda r: json.loads(bytes(r.container))["id"], "container_01", id="container"),
    pytest.param(lambda r: json.loads(bytes(r.mcp_servers))[0]["name"], "docs", id="mcp-servers"),
])
def test_a_field_reads_back(read: Any, expected: Any) -> None:
    assert read(_decode(EVERYTHING)) == expected


def test_absent_raw_fields_are_empty_and_a_string_content_stays_a_string() -> None:
    request = _decode({"model": "claude-opus-4-6", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "Hi"}], "system": "Be brief."})
    assert request.messages == [m.UserMessage("Hi")] and request.system == "Be brief."
    assert all(len(getattr(request, name)) == 0 for name in ("container", "context_management", "mcp_servers"))
    assert request.tools is None and request.thinking is None


# --- the SDK's types, walked beside ours ----------------------------------------------------------

# Keys of the SDK's create() that never travel in the body.
NOT_IN_BODY = {
    "betas": "sent by the SDK as the anthropic-beta header",
    "user_profile_id": "sent by the SDK as the anthropic-user-profile-id header",
    "workspace_id": "sent by the SDK as the anthropic-workspace-id header",
}
# Where we keep the JSON as sent (msgspec.Raw) rather than read it, and why.
HELD_RAW = {
    "MessagesRequest.container": "Anthropic's container for code execution: an id, or one with skills",
    "MessagesRequest.context_management": "what Anthropic clears from the context, and when",
    "MessagesRequest.mcp_servers": "MCP servers Anthropic connects to itself",
    "MessagesRequest.billing_policy": "who Anthropic bills",
    "MessagesRequest.compaction": "how Anthropic summarizes a long conversation",
    "MessagesRequest.fallback_credit_token": "a token from Anthropic's earlier refusal",
    "MessagesRequest.fallbacks": "the models Anthropic may fall back to",
    "MessagesRequest.thread": "conversation state Anthropic holds",
    "JsonSchemaFormat.schema": "a JSON schema the answer must follow (checked to be an object)",
    "ClientTool.input_schema": "a JSON schema (checked to be an object)",
    "ClientTool.input_examples": "examples of a tool's input (checked to be objects)",
    "ToolUseBlock.input": "a tool's input, as the model wrote it (checked to be an object)",
    "ServerToolUseBlock.input": "the input of one of Anthropic's tools (checked to be an object)",
    "McpToolUseBlock.input": "an MCP tool's input (checked to be an object)",
    "McpTool.input_schema": "an MCP tool's JSON schema (checked to be an object)",
    "ToolDefinition.definition": "a tool added mid-conversation, as `tools` holds one (checked to be an object)",
    "FallbackBlock.trigger": "why Anthropic moved to a fallback model",
    **{f"{kind.__name__}.content": "the result of one of Anthropic's tools, as it answered"
       for kind in (blocks.WebSearchToolResultBlock, blocks.WebFetchToolResultBlock,
                    blocks.CodeExecutionToolResultBlock, blocks.BashCodeExecutionToolResultBlock,
                    blocks.TextEditorCodeExecutionToolResultBlock, blocks.ToolSearchToolResultBlock,
                    blocks.AdvisorToolResultBlock)},
}
WRAPPERS = {typing_extensions.Required, typing_extensions.NotRequired, typing.Required, typing.NotRequired,
            typing.Annotated, typing_extensions.Annotated}
LISTS = {list, collections.abc.Iterable, collections.abc.Sequence}
PRIMITIVES = {str, int, float, bool}


def _members(tp: Any) -> list[Any]:
    """A type's union members (None left out), unwrapped from Required, Annotated and the like."""
    while typing.get_origin(tp) in WRAPPERS:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [x for arg in typing.get_args(tp) if arg is not type(None) for x in _members(arg)]
    return [tp]


def _is_object(tp: Any) -> bool:
    return typing_extensions.is_typeddict(tp) or (isinstance(tp, type) and issubclass(tp, pydantic.BaseModel))


def _keys(tp: Any) -> dict[str, Any]:
    """An SDK object's keys as sent (a model's aliases: `from` for `from_`) and their types."""
    if typing_extensions.is_typeddict(tp):
        return typing.get_type_hints(tp, include_extras=True)
    return {(f.alias or name): f.annotation for name, f in tp.model_fields.items()}


def _required(tp: Any) -> set[str]:
    hints = typing.get_type_hints(tp, include_extras=True)
    return {k for k, v in hints.items() if typing.get_origin(v) in (typing.Required, typing_extensions.Required)}


def _tags(tp: Any, tag_field: str) -> tuple[Any, ...]:
    """The values an SDK object's tag (`type`, `role`) may take."""
    kind = _keys(tp).get(tag_field)
    values = [] if kind is None else [x for x in _members(kind) if typing.get_origin(x) is typing.Literal]
    return tuple(v for x in values for v in typing.get_args(x))


def _is_list(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    return origin in LISTS or getattr(origin, "__name__", "") == "SequenceNotStr"


class Walk:
    """The SDK's types and ours, side by side, from the request down."""

    def __init__(self) -> None:
        self.seen: set[tuple[Any, Any]] = set()
        self.sdk_types: set[str] = set()
        self.missing: list[str] = []
        self.raw: set[str] = set()
        self.server_tools: set[str] = set()

    def pair(self, theirs: Any, ours: Any, where: str) -> None:
        options = _members(ours)
        if msgspec.Raw in options:
            return
        for tp in _members(theirs):
            origin = typing.get_origin(tp)
            if _is_object(tp):
                self.object(tp, options, where)
            elif _is_list(tp):
                lists = [o for o in options if typing.get_origin(o) is list]
                assert len(lists) == 1, f"{where}: the SDK sends a list, we take {ours}"
                self.pair(typing.get_args(tp)[0], typing.get_args(lists[0])[0], f"{where}[]")
            elif origin is typing.Literal:
                for value in typing.get_args(tp):
                    try:
                        msgspec.convert(value, ours)
                    except msgspec.ValidationError as exc:
                        pytest.fail(f"{where}: the SDK may send {value!r}, we refuse it: {exc}")
            elif tp in PRIMITIVES:
                kinds = {typing.get_origin(o) or o for o in options}
                assert tp in kinds or (tp is int and float in kinds), f"{where}: the SDK sends {tp}, we take {ours}"
            elif origin is IO or tp is os.PathLike:
                pass  # a file the SDK reads and sends as base64 text
            else:
                pytest.fail(f"{where}: the SDK sends {tp!r}, which only raw JSON could hold; we take {ours}")

    def object(self, theirs: Any, options: list[Any], where: str) -> None:
        structs = [o for o in options if isinstance(o, type) and issubclass(o, msgspec.Struct)]
        assert structs, f"{where}: the SDK sends an object ({theirs.__name__}), we take {options}"
        tags = _tags(theirs, structs[0].__struct_config__.tag_field or "type")
        if m.ServerTool in structs:
            if set(tags) - {"custom"}:  # one of Anthropic's tools: kept whole, known by its type
                for tag in tags:
                    assert m.SERVER_TOOL_TYPE.fullmatch(tag), f"{where}: the tool type {tag!r} is not known"
                    self.server_tools.add(tag)
                return
            structs = [m.ClientTool]
        if len(structs) > 1:
            structs = [s for s in structs if s.__struct_config__.tag in tags]
            assert len(structs) == 1, f"{where}: no one Struct of ours for {theirs.__name__} (type {tags})"
        ours = structs[0]
        if (theirs, ours) in self.seen:
            return
        self.seen.add((theirs, ours))
        self.sdk_types.add(theirs.__name__)
        config = ours.__struct_config__
        if config.tag_field is not None:
            assert set(tags) <= {config.tag}, f"{where}: {ours.__name__} is tagged {config.tag!r}, not {tags}"
        fields = {f.encode_name: f for f in msgspec.structs.fields(ours)}
        for key, tp in _keys(theirs).items():
            if key == config.tag_field:
                continue
            if key not in fields:
                if not (ours is m.MessagesRequest and key in NOT_IN_BODY):
                    self.missing.append(f"{where}.{key} ({theirs.__name__} → {ours.__name__})")
                continue
            field = fields[key]
            if msgspec.Raw in _members(field.type) or any(typing.get_args(o) == (msgspec.Raw,)
                                                           for o in _members(field.type)):
                self.raw.add(f"{ours.__name__}.{field.name}")
            self.pair(tp, field.type, f"{where}.{key}")
        if typing_extensions.is_typeddict(theirs):
            # A field we require, the SDK must too: else we refuse what it may send.
            ours_required = {f.encode_name for f in msgspec.structs.fields(ours)
                             if f.default is msgspec.NODEFAULT and f.default_factory is msgspec.NODEFAULT}
            assert ours_required <= _required(theirs), f"{where}: {ours.__name__} requires more than the SDK"


@pytest.fixture(scope="module")
def walk() -> Walk:
    walk = Walk()
    for where, root in (("messages", sdk.MessageCreateParamsNonStreaming),
                        ("messages", sdk.MessageCreateParamsStreaming),
                        ("beta.messages", beta_sdk.MessageCreateParamsNonStreaming),
                        ("beta.messages", beta_sdk.MessageCreateParamsStreaming)):
        walk.object(root, [m.MessagesRequest], where)
    return walk


def test_every_key_the_sdk_sends_is_a_field_of_ours(walk: Walk) -> None:
    assert walk.missing == []


def test_what_we_hold_raw_is_listed_with_its_reason(walk: Walk) -> None:
    assert walk.raw == set(HELD_RAW)


def test_the_walk_reaches_the_nested_types(walk: Walk) -> None:
    # A guard on the walk itself: were the SDK's layout to change so that it stopped descending, the
    # tests above would pass on the top-level keys alone.
    for name in ("CitationSearchResultLocationParam", "BetaCitationCharLocation", "ImageTransformationsParam",
                 "ContentBlockSourceParam", "BrowserStateTabEntryParam", "BetaRequestMCPToolResultBlockParam",
                 "BetaToolChangeMCPToolsetReferenceParam", "BetaCompactionBlock", "BetaFallbackInfoParam",
                 "BetaMCPToolParamParam", "BetaSystemMessageParam", "BetaThinkingBlockBindingParam",
                 "BetaTokenTaskBudgetParam", "ThinkingConfigBetweenToolsParam", "ToolChoiceNoneParam",
                 "DiagnosticsParam", "ServerToolCaller20260120Param", "ToolParam"):
        assert name in walk.sdk_types, name
    assert {"web_search_20250305", "web_fetch_20260318", "bash_20241022", "text_editor_20250728",
            "code_execution_20260521", "computer_20251124", "computer_toolset_20260801", "browser_toolset_20260801",
            "memory_20250818", "advisor_20260301", "tool_search_tool_bm25", "tool_search_tool_regex_20251119",
            "mcp_toolset"} <= walk.server_tools
    assert len(walk.sdk_types) > 100
