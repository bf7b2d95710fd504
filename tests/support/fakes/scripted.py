"""A scripted tool-calling model, in two dialects: OpenAI's chat completions (`POST /v1/chat/completions`,
what `ingress bridge openai` calls) and Anthropic's Messages (`POST /v1/messages`, what `ingress bridge
anthropic` calls), each whole or streamed.

Its script, per conversation, whatever the agent: while the last message is not a tool's result, answer with
one call to the agent's shell tool (found by name among the tools offered: Claude Code's `Bash`, opencode's
`bash`, Codex's `exec_command`, Gemini CLI's `run_shell_command`), running `command`; once a tool's result is
the last message, answer "DONE: <the result's last line>" (the command's output: Codex's result opens with
lines of its own, "Chunk ID: ...", "Process exited with code 0", "Output:"; Gemini CLI's is a JSON object, its
`output` the shell's report, which `tool_results` unwraps). A request that offers no shell tool (a title, a
summary) gets a short text. Every answer carries usage.

    model = ScriptedModel(command="printf hi > proof.txt && cat proof.txt")
    async with model.running() as url:       # a bridge's target: f"{url}/v1" (openai) or url (anthropic)
        ...
    model.received[1].body["messages"][-1]   # every request, as JSON, with its path and headers
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from ingress.serve.app import serve_app

# Each agent's shell tool, by the name it offers, and the argument that holds the command.
SHELL_TOOLS = {"Bash": "command", "bash": "command", "exec_command": "cmd", "shell": "command",
               "run_shell_command": "command"}
DONE = "DONE: "
ASIDE = "Noted."  # the answer to a request without a shell tool (a session's title, a summary)
OUTPUT_TOKENS = 7
REASONING_BLOB = "gAAAAB-openai-sealed-"  # the Responses dialect's own encrypted_content, numbered by answer


@dataclass(frozen=True)
class Received:
    path: str
    headers: CIMultiDict[str]
    body: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """What the script answers: a call to `tool` with `arguments`, or `text`."""

    text: str = ""
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class ScriptedModel:
    command: str  # what the shell tool is asked to run
    # The prompt tokens its n-th answer reports (from 0), given that request's body; None: a rough count.
    # (A large count makes an agent compact its context.)
    prompt_tokens: Callable[[int, dict[str, Any]], int] | None = None
    received: list[Received] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)  # what it answered, in order
    _cache: PromptCache = field(default_factory=lambda: PromptCache())
    _ids: Iterator[int] = field(default_factory=itertools.count)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_post("/v1/responses", self._responses)
        return app

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        async with serve_app(self.app(), "127.0.0.1", 0) as url:
            yield url

    def tool_results(self) -> list[str]:
        """The tool results the agents sent back, in the order they came."""
        return [result for r in self.received if (result := _last_tool_result(r.path, r.body)) is not None]

    # --- the script ----------------------------------------------------------------------------------

    def _reply(self, tools: dict[str, dict[str, Any]], tool_result: str | None) -> Reply:
        if tool_result is not None:
            reply = Reply(text=DONE + last_line(tool_result))
        elif shell := next((name for name in tools if name in SHELL_TOOLS), None):
            reply = Reply(tool=shell, arguments=_arguments(tools[shell], SHELL_TOOLS[shell], self.command))
        else:
            reply = Reply(text=ASIDE)
        self.replies.append(reply)
        return reply

    def _prompt(self, body: dict[str, Any]) -> int:
        """The prompt tokens the answer to the request just replied to reports."""
        if self.prompt_tokens is None:
            return _tokens(body)
        return self.prompt_tokens(len(self.replies) - 1, body)

    async def _record(self, request: web.Request) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(await request.read())
        self.received.append(Received(request.path, CIMultiDict(request.headers), body))
        return body

    # --- OpenAI's chat completions -------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        tools = {t["function"]["name"]: t["function"].get("parameters") or {}
                 for t in body.get("tools") or () if t.get("type") == "function"}
        reply = self._reply(tools, _last_tool_result(request.path, body))
        model, prompt = body.get("model", "scripted"), self._prompt(body)
        call_id = f"call_scripted_{next(self._ids)}"
        usage = {"prompt_tokens": prompt, "completion_tokens": OUTPUT_TOKENS, "total_tokens": prompt + OUTPUT_TOKENS}
        finish = "tool_calls" if reply.tool else "stop"
        arguments = json.dumps(reply.arguments)
        call = {"id": call_id, "type": "function", "function": {"name": reply.tool, "arguments": arguments}}
        head = {"id": f"chatcmpl-{call_id}", "created": 1767225600, "model": model}
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
            if reply.tool:
                message["tool_calls"] = [call]
            return web.json_response({**head, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": message, "finish_reason": finish}]})
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if reply.tool:  # the arguments in two pieces, as engines stream them
            half = len(arguments) // 2
            deltas += [{"tool_calls": [{"index": 0, **call, "function": {"name": reply.tool,
                                                                         "arguments": arguments[:half]}}]},
                       {"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]}]
        else:
            deltas += [{"content": reply.text}]
        chunks = [{"index": 0, "delta": delta, "finish_reason": None} for delta in deltas]
        events = [{**head, "object": "chat.completion.chunk", "choices": [choice]} for choice in chunks]
        events.append({**head, "object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        return await _sse(request, [f"data: {json.dumps(e)}\n\n" for e in events] + ["data: [DONE]\n\n"])

    # --- Anthropic's Messages ------------------------------------------------------------------------

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        tools = {t["name"]: t.get("input_schema") or {} for t in body.get("tools") or () if "name" in t}
        reply = self._reply(tools, _last_tool_result(request.path, body))
        n = next(self._ids)
        usage = {**self._cache.read(body, self._prompt(body)), "output_tokens": OUTPUT_TOKENS}
        block: dict[str, Any] = ({"type": "tool_use", "id": f"toolu_scripted_{n}", "name": reply.tool,
                                  "input": reply.arguments} if reply.tool else {"type": "text", "text": reply.text})
        stop = "tool_use" if reply.tool else "end_turn"
        message = {"id": f"msg_scripted_{n}", "type": "message", "role": "assistant",
                   "model": body.get("model", "scripted"), "content": [block], "stop_reason": stop,
                   "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            return web.json_response(message, headers={"request-id": f"req_scripted_{n}"})
        start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
        if reply.tool:
            opening = {**block, "input": {}}
            arguments = json.dumps(reply.arguments)
            half = len(arguments) // 2
            deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in (arguments[:half],
                                                                                         arguments[half:])]
        else:
            opening = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": reply.text}]
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": opening}),
            ("ping", {"type": "ping"}),
            *[("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": d}) for d in deltas],
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": OUTPUT_TOKENS}}),
            ("message_stop", {"type": "message_stop"}),
        ]
        return await _sse(request, [f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events],
                          {"request-id": f"req_scripted_{n}"})

    # --- OpenAI's Responses API (what a route that sends Responses requests whole reaches) ------------

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        """As OpenAI answers with a reasoning model: a reasoning item (a summary, and OpenAI's own sealed
        reasoning, `REASONING_BLOB`) before the call or the text."""
        body = await self._record(request)
        tools = {t["name"]: t.get("parameters") or {} for t in body.get("tools") or () if t.get("type") == "function"}
        items = body.get("input") if isinstance(body.get("input"), list) else []
        last = items[-1] if items else {}
        result = _text(last.get("output")) if last.get("type") == "function_call_output" else None
        reply = self._reply(tools, result)
        n = next(self._ids)
        prompt = self._prompt(body)
        reasoning = {"type": "reasoning", "id": f"rs_scripted_{n}", "encrypted_content": f"{REASONING_BLOB}{n}",
                     "summary": [{"type": "summary_text", "text": "Thinking it over."}]}
        if reply.tool:
            answer: dict[str, Any] = {"type": "function_call", "id": f"fc_scripted_{n}", "status": "completed",
                                      "call_id": f"call_scripted_{n}", "name": reply.tool,
                                      "arguments": json.dumps(reply.arguments)}
        else:
            answer = {"type": "message", "id": f"msg_scripted_{n}", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": reply.text, "annotations": []}]}
        usage = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": OUTPUT_TOKENS,
                 "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": prompt + OUTPUT_TOKENS}
        response = {"id": f"resp_scripted_{n}", "object": "response", "created_at": 1767225600, "status": "completed",
                    "model": body.get("model", "scripted"), "output": [reasoning, answer], "usage": usage}
        if not body.get("stream"):
            return web.json_response(response)
        started = {**response, "status": "in_progress", "output": [], "usage": None}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": started},
            {"type": "response.output_item.added", "output_index": 0, "item": {**reasoning, "summary": []}},
            {"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "Thinking it over."},
            {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
        ]
        if reply.tool:
            events += [{"type": "response.output_item.added", "output_index": 1, "item": {**answer, "arguments": ""}},
                       {"type": "response.function_call_arguments.delta", "output_index": 1,
                        "delta": answer["arguments"]},
                       {"type": "response.output_item.done", "output_index": 1, "item": answer}]
        else:
            events += [{"type": "response.output_item.added", "output_index": 1, "item": {**answer, "content": []}},
                       {"type": "response.output_text.delta", "output_index": 1, "delta": reply.text},
                       {"type": "response.output_item.done", "output_index": 1, "item": answer}]
        events.append({"type": "response.completed", "response": response})
        return await _sse(request, [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events])

    async def _count_tokens(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        return web.json_response({"input_tokens": _tokens(body)})


class PromptCache:
    """Anthropic's prompt cache, as its Messages API answers it: a prompt is cached only up to an explicit
    `cache_control` breakpoint (tools, then system, then messages, block by block); a later prompt reads
    the longest cached prefix that ends at one of its breakpoints or up to 20 blocks before one, and writes
    the prefixes its breakpoints end. Usage splits the prompt's tokens into `input_tokens`,
    `cache_read_input_tokens` and `cache_creation_input_tokens`."""

    LOOKBACK = 20

    def __init__(self) -> None:
        self._stored: set[str] = set()

    def read(self, body: dict[str, Any], tokens: int) -> dict[str, int]:
        blocks = [*(body.get("tools") or ()), *_blocks(body.get("system")),
                  *(b for m in body.get("messages") or () for b in _blocks(m.get("content")))]
        marks = [i for i, b in enumerate(blocks) if isinstance(b, dict) and b.get("cache_control")]
        sizes = [len(json.dumps(b)) for b in blocks]
        total = sum(sizes) or 1

        def prefix(end: int) -> str:
            return json.dumps([{k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b
                               for b in blocks[:end + 1]])

        def share(end: int) -> int:  # the prompt's tokens up to block `end`, in proportion to its bytes
            return tokens * sum(sizes[:end + 1]) // total

        hit = max((p for m in marks for p in range(m, max(-1, m - self.LOOKBACK), -1) if prefix(p) in self._stored),
                  default=-1)
        read = share(hit) if hit >= 0 else 0
        written = max(0, share(marks[-1]) - read) if marks else 0
        self._stored.update(prefix(m) for m in marks)
        return {"input_tokens": tokens - read - written, "cache_read_input_tokens": read,
                "cache_creation_input_tokens": written}


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or ())


def last_line(text: str) -> str:
    """The last line of a tool's result that is not blank."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _arguments(schema: dict[str, Any], key: str, command: str) -> dict[str, Any]:
    """The shell tool's arguments: the command, and a short string for any other required string
    (opencode's `bash` requires a `description`)."""
    properties = schema.get("properties") or {}
    arguments: dict[str, Any] = {key: command}
    for name in schema.get("required") or ():
        if name != key and (properties.get(name) or {}).get("type") == "string":
            arguments[name] = "Writes the proof file"
    return arguments


def _last_tool_result(path: str, body: dict[str, Any]) -> str | None:
    """The text of the tool result that ends the conversation, or None when it ends otherwise."""
    messages = body.get("messages") or []
    if not messages:
        return None
    last = messages[-1]
    if path.endswith("/chat/completions"):
        return _unwrapped(_text(last.get("content"))) if last.get("role") == "tool" else None
    if last.get("role") != "user" or not isinstance(last.get("content"), list):
        return None
    results = [block for block in last["content"] if block.get("type") == "tool_result"]
    return _unwrapped(_text(results[-1].get("content"))) if results else None


_GEMINI_REPORT = ("<untrusted_context>", "</untrusted_context>", "Process Group PGID:")


def _unwrapped(result: str) -> str:
    """A tool's result as its command printed it. Gemini CLI's function response reaches the service as the
    JSON of its `response`: `{"output": "<untrusted_context>\\nOutput: <the output>\\nProcess Group PGID:
    ...\\n</untrusted_context>"}`; any other result is left as it is."""
    try:
        value = json.loads(result)
    except ValueError:
        return result
    if not isinstance(value, dict) or not isinstance(value.get("output"), str):
        return result
    lines = [line for line in value["output"].splitlines() if not line.startswith(_GEMINI_REPORT)]
    return "\n".join(line.removeprefix("Output: ") for line in lines)


def _text(content: Any) -> str:
    """A message's or a tool result's text: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or () if isinstance(part, dict))


def _tokens(body: dict[str, Any]) -> int:
    """A prompt's tokens, roughly (four bytes a token): the agents only need a number."""
    return max(1, len(json.dumps(body.get("messages") or body.get("input") or [])) // 4)


async def _sse(request: web.Request, events: list[str], headers: dict[str, str] | None = None) -> web.StreamResponse:
    out = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                      **(headers or {})})
    await out.prepare(request)
    for event in events:
        await out.write(event.encode())
    await out.write_eof()
    return out
