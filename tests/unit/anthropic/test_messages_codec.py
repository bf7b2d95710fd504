"""ingress.anthropic.messages_codec: a Messages API body read strictly. The first turn of an agentic coding
CLI (tests/fixtures/anthropic/agent_first_turn.json) is read whole; bad bodies are refused with Anthropic's
dotted `param` and message; under a beta header unknown top-level fields are carried aside; JSON nested
too deeply, or no JSON at all, is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ingress.anthropic import blocks
from ingress.anthropic import messages as m
from ingress.anthropic.messages_codec import decode_messages
from ingress.errors import InvalidRequest
from ingress.oai.codec import MAX_NESTING, NESTED_TOO_DEEPLY
from unit.anthropic.test_messages import MCP_TOOLSET, PDF, TEXT, WEATHER, WEB_SEARCH

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "anthropic" / "agent_first_turn.json"


# --- one request setting every field --------------------------------------------------------------


def _encode(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def _decode(doc: dict[str, Any], beta: bool = False) -> m.MessagesRequest:
    request, extras = decode_messages(_encode(doc), beta=beta)
    assert extras == {}
    return request


# --- the first turn of an agentic coding CLI ------------------------------------------------------


def test_an_agent_clis_first_turn() -> None:
    doc = json.loads(FIXTURE.read_bytes())
    request, extras = decode_messages(FIXTURE.read_bytes(), beta=True)
    assert extras == {}
    assert [type(x).__name__ for x in request.messages] == ["UserMessage", "SystemMessage", "UserMessage"]
    assert request.messages[1].content == doc["messages"][1]["content"]
    assert isinstance(request.system, list)
    assert [b.cache_control for b in request.system] == [blocks.CacheControl(), blocks.CacheControl("1h")]
    tools = request.tools or []
    assert len(tools) >= 12 and all(isinstance(t, m.ClientTool) for t in tools)
    assert [t.name for t in tools] == [t["name"] for t in doc["tools"]]
    assert [json.loads(bytes(t.input_schema)) for t in tools if isinstance(t, m.ClientTool)] == \
        [t["input_schema"] for t in doc["tools"]]
    assert request.thinking == m.ThinkingAdaptive()
    assert json.loads(bytes(request.context_management)) == doc["context_management"]
    assert request.output_config == m.OutputConfig(effort="high")
    assert request.metadata == m.Metadata(doc["metadata"]["user_id"])
    assert (request.model, request.max_tokens, request.stream) == ("claude-sonnet-4-6", 32000, True)


def test_the_agent_turn_is_read_the_same_without_the_beta_header() -> None:
    assert decode_messages(FIXTURE.read_bytes())[0] == decode_messages(FIXTURE.read_bytes(), beta=True)[0]


# --- refusals -------------------------------------------------------------------------------------

USER = {"role": "user", "content": "Hi"}
MISSING = object()  # a field value meaning "leave the field out"


def body(**fields: Any) -> dict[str, Any]:
    """A minimal valid request with `fields` set (or removed, given MISSING)."""
    doc: dict[str, Any] = {"model": "claude-opus-4-6", "max_tokens": 4096, "messages": [USER]}
    doc.update(fields)
    return {k: v for k, v in doc.items() if v is not MISSING}


def user(*blocks: Any) -> dict[str, Any]:
    return body(messages=[{"role": "user", "content": list(blocks)}])


def image(media_type: str) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": "AAAA"}}


def document(source: dict[str, Any]) -> dict[str, Any]:
    return {"type": "document", "source": source}


def tool_use(value: Any) -> dict[str, Any]:
    return body(messages=[USER, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": value}]}])


def nested(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def refused(doc: dict[str, Any] | bytes, beta: bool = False) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        decode_messages(doc if isinstance(doc, bytes) else _encode(doc), beta=beta)
    assert info.value.status == 400
    return info.value


@pytest.mark.parametrize(("doc", "param"), [
    # the request's own fields
    pytest.param(body(max_tokens=MISSING), "max_tokens", id="max_tokens-missing"),
    pytest.param(body(max_tokens="1024"), "max_tokens", id="max_tokens-string"),
    pytest.param(body(max_tokens=-1), "max_tokens", id="max_tokens-negative"),
    pytest.param(body(max_tokens=2**31), "max_tokens", id="max_tokens-past-int32"),
    pytest.param(body(model=MISSING), "model", id="model-missing"),
    pytest.param(body(model=""), "model", id="model-empty"),
    pytest.param(body(messages=[]), "messages", id="messages-empty"),
    pytest.param(body(messages="Hi"), "messages", id="messages-string"),
    pytest.param(body(temperature=1.5), "temperature", id="temperature-above-1"),
    pytest.param(body(temperature=-0.1), "temperature", id="temperature-below-0"),
    pytest.param(body(top_p=1.01), "top_p", id="top_p"),
    pytest.param(body(top_k=-1), "top_k", id="top_k"),
    pytest.param(body(stop_sequences="\n\nHuman:"), "stop_sequences", id="stop_sequences-string"),
    pytest.param(body(stream="yes"), "stream", id="stream"),
    pytest.param(body(service_tier="priority"), "service_tier", id="service_tier"),
    pytest.param(body(metadata={"user_id": "u" * 513}), "metadata.user_id", id="user_id-too-long"),
    pytest.param(body(system=[{"type": "text", "text": ""}]), "system.0.text", id="text-empty"),
    pytest.param(body(system=7), "system", id="system-number"),
    pytest.param(body(system=[{"type": "image", "source": {"type": "url", "url": "https://x"}}]), "system.0.type",
                 id="system-image"),
    pytest.param(body(temprature=0.5), "temprature", id="unknown-top-level"),
    # messages
    pytest.param(body(messages=[{"role": "tool", "content": "Hi"}]), "messages.0.role", id="role-tool"),
    pytest.param(body(messages=[{"content": "Hi"}]), "messages.0.role", id="role-missing"),
    pytest.param(body(messages=[USER, {"role": "assistant"}]), "messages.1.content", id="content-missing"),
    pytest.param(body(messages=[{"role": "user", "content": 5}]), "messages.0.content", id="content-number"),
    pytest.param(body(messages=[{**USER, "name": "ann"}]), "messages.0.name", id="unknown-in-message"),
    pytest.param(body(messages=[{"role": "system", "content": [image("image/png")]}]), "messages.0.content.0.type",
                 id="image-in-system-message"),
    pytest.param(body(messages=[{"role": "system", "content": "x", "clear_at": "now"}]), "messages.0.clear_at",
                 id="clear_at"),
    # blocks
    pytest.param(user({"type": "video", "url": "x"}), "messages.0.content.0.type", id="unknown-block"),
    pytest.param(user({"text": "Hi"}), "messages.0.content.0.type", id="block-untyped"),
    pytest.param(user({"type": "text"}), "messages.0.content.0.text", id="text-missing"),
    pytest.param(user({**TEXT, "bold": True}), "messages.0.content.0.bold", id="unknown-in-block"),
    pytest.param(user(TEXT, image("image/bmp")), "messages.0.content.1.source.media_type", id="image-bmp"),
    pytest.param(user(image("application/pdf")), "messages.0.content.0.source.media_type", id="image-pdf"),
    pytest.param(user({"type": "image", "source": {"type": "base64", "media_type": "image/png"}}),
                 "messages.0.content.0.source.data", id="image-data-missing"),
    pytest.param(user({"type": "image", "source": {"type": "url", "url": "https://x", "detail": "high"}}),
                 "messages.0.content.0.source.detail", id="unknown-in-source"),
    pytest.param(user({"type": "image", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}),
                 "messages.0.content.0.source.type", id="image-text-source"),
    pytest.param(user(document({"type": "base64", "media_type": "image/png", "data": "AAAA"})),
                 "messages.0.content.0.source.media_type", id="document-base64-png"),
    pytest.param(user(document({"type": "text", "media_type": "text/markdown", "data": "# x"})),
                 "messages.0.content.0.source.media_type", id="document-text-markdown"),
    pytest.param(user(document({"type": "content", "content": [PDF]})),
                 "messages.0.content.0.source.content.0.type", id="document-in-content-source"),
    pytest.param(user({**TEXT, "citations": [{"type": "char_location", "cited_text": "x"}]}),
                 "messages.0.content.0.citations.0.document_index", id="citation-incomplete"),
    pytest.param(user({**TEXT, "cache_control": {"type": "ephemeral", "ttl": "10m"}}),
                 "messages.0.content.0.cache_control.ttl", id="ttl-10m"),
    pytest.param(user({**TEXT, "cache_control": {"type": "persistent"}}),
                 "messages.0.content.0.cache_control.type", id="cache_control-type"),
    pytest.param(body(system=[{**TEXT, "cache_control": {"type": "ephemeral", "ttl": "1d"}}]),
                 "system.0.cache_control.ttl", id="system-ttl"),
    pytest.param(user({"type": "tool_result", "tool_use_id": "toolu_01", "is_error": "yes"}),
                 "messages.0.content.0.is_error", id="is_error"),
    pytest.param(user({"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "thinking"}]}),
                 "messages.0.content.0.content.0.type", id="thinking-in-tool-result"),
    pytest.param(user({"type": "tool_result", "content": "x"}), "messages.0.content.0.tool_use_id",
                 id="tool_use_id-missing"),
    pytest.param(user({"type": "thinking", "thinking": "hmm"}), "messages.0.content.0.signature",
                 id="signature-missing"),
    pytest.param(tool_use([1, 2]), "messages.1.content.0.input", id="tool-input-array"),
    pytest.param(tool_use("{}"), "messages.1.content.0.input", id="tool-input-string"),
    pytest.param(user({"type": "tool_use", "id": "toolu_01", "name": "x", "input": {}, "caller": {"type": "me"}}),
                 "messages.0.content.0.caller.type", id="caller"),
    pytest.param(body(messages=[{"role": "system", "content": [
        {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": []}}]}]),
        "messages.0.content.0.tool.definition", id="tool-definition-array"),
    # tools and tool_choice
    pytest.param(body(tools=[{"name": "get_weather"}]), "tools.0.input_schema", id="input_schema-missing"),
    pytest.param(body(tools=[{**WEATHER, "input_schema": "object"}]), "tools.0.input_schema",
                 id="input_schema-string"),
    pytest.param(body(tools=[{**WEATHER, "name": "get weather"}]), "tools.0.name", id="tool-name-space"),
    pytest.param(body(tools=[{**WEATHER, "parameters": {}}]), "tools.0.parameters", id="unknown-in-tool"),
    pytest.param(body(tools=[{**WEATHER, "type": "custom", "parameters": {}}]), "tools.0.parameters",
                 id="unknown-in-custom-tool"),
    pytest.param(body(tools=[WEATHER, {**WEATHER, "cache_control": {"type": "ephemeral", "ttl": "2h"}}]),
                 "tools.1.cache_control.ttl", id="tool-ttl"),
    pytest.param(body(tools=[{**WEB_SEARCH, "cache_control": {"type": "ephemeral", "ttl": "2h"}}]),
                 "tools.0.cache_control.ttl", id="server-tool-ttl"),
    pytest.param(body(tools=[{**WEATHER, "input_examples": ["Paris"]}]), "tools.0.input_examples.0",
                 id="input-example-string"),
    pytest.param(body(tools=[WEATHER, WEATHER]), "tools.1.name", id="tool-names-twice"),
    pytest.param(body(tools=[{"type": "web_search_2025", "name": "web_search"}]), "tools.0.type",
                 id="server-tool-unknown"),
    pytest.param(body(tools=[{"type": "function", "function": {"name": "x"}}]), "tools.0.type",
                 id="openai-shaped-tool"),
    pytest.param(body(tools=["get_weather"]), "tools.0", id="tool-string"),
    pytest.param(body(tools=[WEATHER], tool_choice={"type": "tool"}), "tool_choice.name", id="tool_choice-no-name"),
    pytest.param(body(tools=[WEATHER], tool_choice={"type": "tool", "name": "get_time"}), "tool_choice.name",
                 id="tool_choice-unknown-tool"),
    pytest.param(body(tool_choice={"type": "tool", "name": "get_weather"}), "tool_choice.name",
                 id="tool_choice-no-tools"),
    pytest.param(body(tools=[WEATHER], tool_choice={"type": "required"}), "tool_choice.type",
                 id="tool_choice-openai"),
    pytest.param(body(tools=[WEATHER], tool_choice={"type": "none", "disable_parallel_tool_use": True}),
                 "tool_choice.disable_parallel_tool_use", id="tool_choice-none-parallel"),
    # thinking and output
    pytest.param(body(thinking={"type": "enabled", "budget_tokens": 1023}), "thinking.budget_tokens",
                 id="budget-below-1024"),
    pytest.param(body(thinking={"type": "enabled", "budget_tokens": 4096}), "thinking.budget_tokens",
                 id="budget-not-below-max_tokens"),
    pytest.param(body(thinking={"type": "enabled"}), "thinking.budget_tokens", id="budget-missing"),
    pytest.param(body(thinking={"type": "adaptive", "budget_tokens": 2048}), "thinking.budget_tokens",
                 id="budget-with-adaptive"),
    pytest.param(body(thinking={"type": "on"}), "thinking.type", id="thinking-type"),
    pytest.param(body(thinking={"type": "adaptive", "display": "full"}), "thinking.display", id="thinking-display"),
    pytest.param(body(output_config={"effort": "extreme"}), "output_config.effort", id="effort"),
    pytest.param(body(output_config={"format": {"type": "json_schema", "schema": True}}), "output_config.format.schema",
                 id="format-schema-not-object"),
    pytest.param(body(output_config={"format": {"type": "json_object"}}), "output_config.format.type",
                 id="format-json_object"),
])
def test_a_bad_request_is_refused_naming_the_field(doc: dict[str, Any], param: str) -> None:
    error = refused(doc)
    assert error.param == param
    assert error.message.startswith(f"{param}: ")


@pytest.mark.parametrize(("doc", "message"), [
    pytest.param(body(temprature=0.5), "temprature: Extra inputs are not permitted", id="unknown"),
    pytest.param(body(max_tokens=MISSING), "max_tokens: Field required", id="missing"),
    pytest.param(user(TEXT, image("image/bmp")),
                 "messages.0.content.1.source.media_type: Invalid enum value 'image/bmp'", id="enum"),
    pytest.param(body(max_tokens="1024"), "max_tokens: Expected `int`, got `str`", id="type"),
])
def test_the_message_reads_as_anthropics(doc: dict[str, Any], message: str) -> None:
    assert refused(doc).message == message


def test_a_system_message_may_set_only_its_output_config() -> None:
    effort = {"role": "system", "output_config": {"effort": "low"}}
    assert _decode(body(messages=[USER, effort])).messages[1] == m.SystemMessage(
        output_config=m.SystemOutputConfig("low"))
    assert refused(body(messages=[USER, {"role": "system"}])).param == "messages.1.content"


def test_max_tokens_0_only_fills_the_cache_and_is_accepted() -> None:
    assert _decode(body(max_tokens=0)).max_tokens == 0


def test_a_tool_choice_is_not_checked_against_tools_we_cannot_name() -> None:
    # A toolset's or an MCP server's tools are named by Anthropic, not in the request.
    choice = {"type": "tool", "name": "search_docs"}
    request = _decode(body(tools=[WEATHER, MCP_TOOLSET], tool_choice=choice))
    assert request.tool_choice == m.ToolChoiceTool("search_docs")
    mcp = [{"type": "url", "name": "docs", "url": "https://mcp.example.com"}]
    assert _decode(body(tools=[WEATHER], mcp_servers=mcp, tool_choice=choice)).tool_choice is not None
    assert _decode(body(tools=[WEB_SEARCH], tool_choice={"type": "tool", "name": "web_search"})).tools


def test_with_interleaved_thinking_the_budget_may_pass_max_tokens() -> None:
    # Under a beta (interleaved thinking), the budget spans a whole turn: Anthropic judges it.
    doc = body(thinking={"type": "enabled", "budget_tokens": 8192})
    assert refused(doc).param == "thinking.budget_tokens"
    request, _ = decode_messages(_encode(doc), beta=True)
    assert request.thinking == m.ThinkingEnabled(8192)


# --- unknown top-level fields under a beta --------------------------------------------------------


def test_with_a_beta_header_unknown_top_level_fields_are_carried_aside() -> None:
    doc = body(temperature=0.5, betas_only={"mode": "x", "n": [1, 2]}, another=3)
    assert refused(doc).param == "betas_only"
    request, extras = decode_messages(_encode(doc), beta=True)
    assert request == _decode(body(temperature=0.5))
    assert {k: json.loads(bytes(v)) for k, v in extras.items()} == {"betas_only": {"mode": "x", "n": [1, 2]},
                                                                   "another": 3}


@pytest.mark.parametrize(("doc", "param"), [
    pytest.param(body(messages=[{**USER, "name": "ann"}], extra=1), "messages.0.name", id="in-a-message"),
    pytest.param(body(extra=1, metadata={"user": "ann"}), "metadata.user", id="after-an-unknown-top-level-field"),
    pytest.param(body(extra=1, max_tokens=MISSING), "max_tokens", id="a-known-field-still-required"),
    pytest.param(body(extra=1, tools=[{**WEATHER, "parameters": {}}]), "tools.0.parameters", id="in-a-tool"),
])
def test_with_a_beta_header_nested_unknown_fields_are_still_refused(doc: dict[str, Any], param: str) -> None:
    assert refused(doc, beta=True).param == param


# --- nesting --------------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", [
    pytest.param(body(tools=[{**WEATHER, "input_schema": nested(MAX_NESTING + 1)}]), id="tool-schema"),
    pytest.param(tool_use(nested(MAX_NESTING + 1)), id="tool-input"),
    pytest.param(body(context_management=nested(MAX_NESTING + 1)), id="raw-field"),
    pytest.param(body(tools=[{**WEB_SEARCH, "user_location": nested(MAX_NESTING + 1)}]), id="server-tool"),
    pytest.param(body(messages=[USER, {"role": "assistant", "content": [
        {"type": "web_search_tool_result", "tool_use_id": "t", "content": [nested(MAX_NESTING)]}]}]),
        id="server-tool-result"),
    pytest.param(body(messages=[{"role": "system", "content": [
        {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": nested(MAX_NESTING + 1)}}]}]),
        id="tool-definition"),
    pytest.param(body(messages=[USER, {"role": "assistant", "content": [
        {"type": "compaction", "tool_changes": [
            {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": nested(MAX_NESTING + 1)}}]}]}]),
        id="compaction"),
])
def test_json_nested_too_deeply_is_refused(doc: dict[str, Any]) -> None:
    error = refused(doc)
    assert (error.message, error.code, error.param) == (NESTED_TOO_DEEPLY, "invalid_json", None)


def test_json_nested_up_to_the_limit_is_accepted() -> None:
    request = _decode(body(tools=[{**WEATHER, "input_schema": nested(MAX_NESTING)}]))
    assert request.tools is not None and len(request.tools) == 1


def test_an_extra_field_nested_too_deeply_is_refused_under_a_beta() -> None:
    assert refused(body(extra=nested(MAX_NESTING + 1)), beta=True).message == NESTED_TOO_DEEPLY


DEEP = b"[" * 100_000 + b"]" * 100_000  # deeper than msgspec reads at all
HEAD = b'{"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": '


@pytest.mark.parametrize(("raw", "beta"), [
    pytest.param(HEAD + b'"Hi"}], "container": ' + DEEP + b"}", False, id="raw-field"),
    pytest.param(HEAD + b'[{"type": "tool_use", "id": "t", "name": "t", "input": ' + DEEP + b"}]}]}", False,
                 id="tool-input"),
    pytest.param(HEAD + b'"Hi"}], "extra": ' + DEEP + b"}", True, id="extra-field"),
])
def test_a_body_too_deep_to_read_is_refused(raw: bytes, beta: bool) -> None:
    error = refused(raw, beta=beta)
    assert (error.message, error.code) == (NESTED_TOO_DEEPLY, "invalid_json")


@pytest.mark.parametrize("raw", [b"", b"{", b'{"model": "m",}', b"\xff"])
def test_a_body_that_is_not_json_is_refused(raw: bytes) -> None:
    assert refused(raw).code == "invalid_json"


def test_a_body_that_is_not_an_object_is_refused() -> None:
    assert refused(b"[]").param is None
