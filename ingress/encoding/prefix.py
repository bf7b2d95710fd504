"""A prompt's canonical bytes, as an engine caches it: what the passport's prefix hashes cover (the hashes
and the limits: ingress/wire/prefix.py).

The chat template puts the system prompt first, the tools with it, then the messages in order; so does the
canonical text here: the opening system and developer messages, the tools (as JSON), the other messages,
each message as its role, name, text, other parts and tool calls between control characters (0x1F, 0x1D,
0x1E). Processing hints such as cache breakpoints are left out: a client moves them from turn to turn and
the engine never sees them. Two prompts that start with the same messages and tools start with the same
bytes. Stable across processes and releases: tests/unit/wire/test_prefix.py pins the bytes.
"""

from __future__ import annotations

import struct

import msgspec

from ingress.oai.chat import (
    AssistantMessage,
    AudioPart,
    ChatCompletionRequest,
    DeveloperMessage,
    FilePart,
    FunctionMessage,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolMessage,
    UserMessage,
)
from ingress.wire.prefix import FIRST_TURN_BYTES

_SYSTEM = (SystemMessage, DeveloperMessage)
_ROLE = {SystemMessage: "system", DeveloperMessage: "developer", UserMessage: "user", AssistantMessage: "assistant",
         ToolMessage: "tool", FunctionMessage: "function"}
_tools_json = msgspec.json.Encoder().encode


def _message_bytes(m: Message, budget: int) -> bytes:
    """A message's canonical bytes: role, name, content (text; other parts by what they carry), calls;
    each string cut to `budget` characters (the caller cuts the bytes)."""
    content = m.content
    name = None if isinstance(m, ToolMessage) else m.name
    calls = isinstance(m, AssistantMessage) and (m.tool_calls or m.function_call or m.refusal or m.audio)
    if type(content) is str and not name and not calls and not isinstance(m, ToolMessage):
        return f"{_ROLE[type(m)]}\x1f{content[:budget]}\x1e".encode()  # most messages: a role and a string
    out = [_ROLE[type(m)]]
    if name:
        out += ("\x1d", name)
    out.append("\x1f")
    if isinstance(content, str):
        out.append(content[:budget])
    elif content is not None:
        for part in content:
            if isinstance(part, TextPart):
                out.append(part.text[:budget])
            elif isinstance(part, ImagePart):
                out += ("\x1dimage\x1f", part.image_url.url[:budget])
            elif isinstance(part, AudioPart):
                out += ("\x1daudio\x1f", part.input_audio.data[:budget])
            elif isinstance(part, FilePart):
                out += ("\x1dfile\x1f", (part.file.file_id or part.file.file_data or "")[:budget])
            else:
                out.append(part.refusal[:budget])
    if isinstance(m, AssistantMessage):
        for call in m.tool_calls or ():
            if call.function is not None:
                out += ("\x1dcall\x1f", call.function.name, "\x1f", call.function.arguments[:budget])
            elif call.custom is not None:
                out += ("\x1dcall\x1f", call.custom.name, "\x1f", call.custom.input[:budget])
        if m.function_call is not None:
            out += ("\x1dcall\x1f", m.function_call.name, "\x1f", m.function_call.arguments[:budget])
        if m.refusal:
            out += ("\x1drefusal\x1f", m.refusal[:budget])
        if m.audio is not None:
            out += ("\x1daudio\x1f", m.audio.id)
    elif isinstance(m, ToolMessage):
        out += ("\x1d", m.tool_call_id)
    out.append("\x1e")
    return "".join(out).encode()


def chat_text(request: ChatCompletionRequest, limit: int, first_turn: bool) -> tuple[bytes, int]:
    """The canonical text of a chat request's prompt, its first `limit` bytes; with `first_turn`, run on to
    the first user message (at most FIRST_TURN_BYTES past `limit`). And where that message ends (0: none)."""
    messages = request.messages
    opening = 0
    while opening < len(messages) and isinstance(messages[opening], _SYSTEM):
        opening += 1
    out: list[bytes] = []
    size = end = 0
    for m in messages[:opening]:
        if size >= limit:
            break
        out.append(_message_bytes(m, limit - size)[:limit - size])
        size += len(out[-1])
    tools = request.tools or request.functions
    if tools and size < limit:
        piece = b"\x1dtools\x1f" + _tools_json(tools) + b"\x1e"
        out.append(piece[:limit - size])
        size += len(out[-1])
    for m in messages[opening:]:
        room = limit - size
        if not end and type(m) is UserMessage and (first_turn or room > 0):
            budget = max(room, 0) + (FIRST_TURN_BYTES if first_turn else 0)
            out.append(_message_bytes(m, budget)[:budget])
            size += len(out[-1])
            end = size
        elif room > 0:
            out.append(_message_bytes(m, room)[:room])
            size += len(out[-1])
        elif end or not first_turn:
            break
    return b"".join(out), end


def prompts_text(prompts: list[str | list[int]], limit: int) -> bytes:
    """The canonical text of legacy prompts or embeddings inputs, its first `limit` bytes: each text as
    UTF-8, each list of token ids as little-endian uint32s, each followed by a separator."""
    out: list[bytes] = []
    size = 0
    for value in prompts:
        if size >= limit:
            break
        room = limit - size
        if isinstance(value, str):
            piece = value[:room].encode()[:room]
        else:
            ids = value[:-(-room // 4)]
            piece = struct.pack(f"<{len(ids)}I", *ids)
        out.append(piece + b"\x1e")
        size += len(out[-1])
    return b"".join(out)[:limit]
