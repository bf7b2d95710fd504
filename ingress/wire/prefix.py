"""The prompt as an engine caches it: its canonical bytes, and the chain of hashes over their blocks.

An engine with prefix caching (vLLM, SGLang, llama.cpp) keeps a prompt's KV cache in blocks of tokens and
reuses the blocks a new prompt starts with. The chat template puts the system prompt first, the tools
with it, then the messages in order; so does the canonical text here: the opening system and developer
messages, the tools (as JSON), the other messages, each message as its role, name, text, other parts and
tool calls between control characters (0x1F, 0x1D, 0x1E). Processing hints such as cache breakpoints are
left out: a client moves them from turn to turn and the engine never sees them. Two prompts that start
with the same messages and tools start with the same bytes, so with the same blocks and hashes.

The chain: the text is cut into blocks of BLOCK_BYTES, and hash i is the first 8 bytes of SHA-256 (read
little-endian) of the text up to the end of block i, so it covers its block and every block before it.
One block also ends where the first user message ends (its index is the passport's conversation_block):
every turn of a conversation has the same hash there, and conversations behind one shared system prompt
have different ones. The last block may be short: every prompt has at least one hash.

Only the first LIMIT_BYTES of the text are hashed (the tail adds cost, and a prefix that long already
names its conversation), except that when the first user message ends past them the text runs on to it:
the first LIMIT_BYTES, then the first user message's bytes beyond them, at most FIRST_TURN_BYTES.

Cost, measured with timeit (process time, best of 9) on this project's shared 2-core test machine: the
passport of a 16 KiB chat prompt with its chain takes ~100-150 µs (the canonical text ~40, the 33 hashes
~60, each a copy of the hash state), and of a 256 KiB prompt the same, since only its first 16 KiB are
read. That is why the chain is computed only for a cache-affine group. Without it, only `prefix_hash` over
the first PREFIX_BYTES: the passport takes ~20 µs at either size (before the chain, 18 and 110 µs: every
message's characters were counted even when its tokens had been). Stable across processes and releases:
tests/unit/test_prefix.py pins the bytes and the hashes.
"""

from __future__ import annotations

import hashlib
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

# vLLM caches blocks of 16 tokens, SGLang a radix tree of tokens, TensorRT-LLM blocks of 64: at ~4 bytes a
# token, 512 bytes (~128 tokens) is a handful of engine blocks, fine enough to tell where two prompts part,
# coarse enough that a 16 KiB prompt has 32 hashes (each a copy of the hash state, ~0.7 µs, and an entry
# in a cache-affine group's map, ~100 bytes).
BLOCK_BYTES = 512
LIMIT_BYTES = 16 * 1024  # of canonical text hashed in blocks: 32 of them (the first user message's beside)
FIRST_TURN_BYTES = 8 * 1024  # of a first user message that ends past LIMIT_BYTES
PREFIX_BYTES = 4096  # what the passport's prefix_hash covers

_SYSTEM = (SystemMessage, DeveloperMessage)
_ROLE = {SystemMessage: "system", DeveloperMessage: "developer", UserMessage: "user", AssistantMessage: "assistant",
         ToolMessage: "tool", FunctionMessage: "function"}
_u64 = struct.Struct("<Q").unpack_from
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


def block_ends(size: int, first_turn_end: int) -> list[int]:
    """Where the blocks of a text of `size` bytes end: every BLOCK_BYTES, and at `first_turn_end` (0: no
    such block), from which the next blocks are counted; the last one at the end of the text."""
    ends = list(range(BLOCK_BYTES, first_turn_end, BLOCK_BYTES))
    if first_turn_end:
        ends.append(first_turn_end)
    ends += range(first_turn_end + BLOCK_BYTES, size, BLOCK_BYTES)
    if size and (not ends or ends[-1] != size):
        ends.append(size)
    return ends


def prefix_hash(text: bytes) -> int:
    """The passport's prefix_hash: the same hash as the chain's, over the text's first PREFIX_BYTES."""
    return int(_u64(hashlib.sha256(text[:PREFIX_BYTES]).digest())[0])


def chain(text: bytes, first_turn_end: int) -> tuple[int, list[int], int]:
    """prefix_hash, the chain of block hashes, and the index of the block that ends with the first user
    message (0 without one: the first block then stands for the conversation)."""
    ends = block_ends(len(text), first_turn_end)
    marks = ends
    prefix_end = min(PREFIX_BYTES, len(text))
    if prefix_end not in ends:
        marks = sorted([*ends, prefix_end])
    h = hashlib.sha256()
    view = memoryview(text)
    blocks: list[int] = []
    prefix = conversation = pos = 0
    for end in marks:
        h.update(view[pos:end])
        pos = end
        value: int = _u64(h.copy().digest())[0]
        if end == prefix_end:
            prefix = value
            if marks is not ends:
                continue
        if end == first_turn_end:
            conversation = len(blocks)
        blocks.append(value)
    return prefix, blocks, conversation
