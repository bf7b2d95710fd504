"""The demo's simulated prefix cache: an LRU of prompt blocks, the cached tokens it yields, and the prefill wait.

An engine with prefix caching (vLLM, SGLang, llama.cpp) keeps a prompt's KV cache in blocks and skips the
prefill of the leading blocks a new prompt shares with one it still holds. The demo keeps only the blocks'
hashes, at most `blocks` of them per service (one service is one endpoint), least recently used first out:

- a prompt's chain is its passport's (`prefix_blocks`: each hash covers its block and every one before it,
  ingress/wire/prefix.py), the same hashes the edge routes by; past the passport's end (the edge hashes the
  first 16 KiB) and for a request without one, the demo hashes its own layout of the prompt (`Layout`)
  the same way, each of those hashes keyed on the passport's last, so a change anywhere still changes every
  block from its own on;
- the prompt's leading blocks the cache holds are cached; they become `cached_tokens` as the demo's tokens
  (words) of the messages they cover in its layout, and a share by bytes of the one they cut, never the whole
  prompt (an engine computes at least the last token). A prompt's last block is partial: the next turn's
  block there is longer, so it is computed again, as an engine recomputes its partial block;
- the chain is then stored, its last block touched first, so the cache evicts a prompt's tail before its
  head, as vLLM frees a request's blocks;
- the answer's first token waits `prefill_s_per_token` for each uncached prompt token.

The service learns a prompt when it arrives, not when its prefill would end: two requests with one new
prefix at once both find the first one's blocks. Good enough to compare routing policies at 4-16 endpoints.
"""

from __future__ import annotations

import hashlib
import struct
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from ingress.demo.answer import count_tokens, message_text
from ingress.wire import ROLES, CompletionRequestData, MessageData
from ingress.wire.prefix import block_ends, chain

_u64 = struct.Struct("<Q").unpack_from
_ROLE_USER = ROLES["user"]
_ROLE_NAMES = {value: name for name, value in ROLES.items()}
_OPENING = (ROLES["system"], ROLES["developer"])  # the messages a chat template puts before the tools


@dataclass(frozen=True, slots=True)
class KvCacheSettings:
    """A demo service's simulated prefix cache: `blocks` held (0: none), and the prefill wait per uncached token."""

    blocks: int = 0
    prefill_s_per_token: float = 0.0


@dataclass(frozen=True, slots=True)
class Prefill:
    """What one prompt read from the cache: its cached tokens, and how long its first token waits."""

    cached_tokens: int
    delay_s: float


class BlockCache:
    """At most `capacity` block hashes, least recently used first out."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._held: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, block: int) -> bool:
        return block in self._held

    def leading(self, blocks: Sequence[int]) -> int:
        """How many of `blocks`' leading ones are held (a later block without its earlier ones is no use)."""
        held = self._held
        count = 0
        for block in blocks:
            if block not in held:
                break
            count += 1
        return count

    def store(self, blocks: Sequence[int]) -> None:
        """`blocks` were just computed: held, the first most recently used; the oldest dropped past capacity."""
        held = self._held
        for block in reversed(blocks):
            held[block] = None
            held.move_to_end(block)
        while len(held) > self.capacity:
            held.popitem(last=False)


@dataclass(frozen=True, slots=True)
class Layout:
    """The demo's layout of a prompt (as ingress/encoding/prefix.py lays out the edge's: system messages, tools,
    the other messages; a legacy prompt's texts or token ids), where its first user message ends in it (0:
    none), and where each piece ends with the demo's tokens up to there (ingress/demo/answer.py counts them)."""

    text: bytes
    first_turn_end: int
    ends: list[int]
    tokens: list[int]

    def tokens_before(self, offset: int) -> int:
        """The prompt's tokens in text[:offset]: the whole pieces' count, and of the piece the offset cuts, its
        share by bytes."""
        i = bisect_left(self.ends, offset)
        if i == len(self.ends):
            return self.tokens[-1] if self.tokens else 0
        start, before = (self.ends[i - 1], self.tokens[i - 1]) if i else (0, 0)
        return before + (self.tokens[i] - before) * (offset - start) // (self.ends[i] - start)


def _message_bytes(m: MessageData, text: str) -> bytes:
    """As ingress/encoding/prefix.py's, byte for byte for a message of a role and a text (most): blocks then end
    where the edge's do, and the passport's blocks cover what the demo takes them to."""
    role = _ROLE_NAMES.get(m.role, "")
    if not m.name and not m.tool_calls and m.tool_call_id is None:
        return f"{role}\x1f{text}\x1e".encode()
    calls = "".join(f"\x1dcall\x1f{c.name}\x1f{c.arguments}" for c in m.tool_calls or ())
    name = f"\x1d{m.name}" if m.name else ""
    return f"{role}{name}\x1f{text}{calls}\x1d{m.tool_call_id or ''}\x1e".encode()


def prompt_layout(req: CompletionRequestData) -> Layout:
    """The prompt's Layout (see the class)."""
    messages = req.messages or []
    opening = 0
    while opening < len(messages) and messages[opening].role in _OPENING:
        opening += 1
    pieces: list[tuple[bytes, int]] = []  # each piece's bytes and tokens
    for m in messages[:opening]:
        text = message_text(m)
        pieces.append((_message_bytes(m, text), count_tokens(text)))
    pieces += [(b"\x1dtools\x1f%s\x1f%s\x1e" % ((t.name or "").encode(), (t.arguments_json or "").encode()), 0)
               for t in req.tools or ()]
    first_user = -1  # the index of its piece
    for m in messages[opening:]:
        text = message_text(m)
        if first_user < 0 and m.role == _ROLE_USER:
            first_user = len(pieces)
        pieces.append((_message_bytes(m, text), count_tokens(text)))
    for p in req.prompts or ():
        tokens = p.tokens or ()
        if p.text is not None:
            pieces.append((p.text.encode() + b"\x1e", count_tokens(p.text)))
        else:
            pieces.append((struct.pack(f"<{len(tokens)}I", *tokens) + b"\x1e", len(tokens)))
    ends = list(accumulate(len(piece) for piece, _ in pieces))
    return Layout(b"".join(piece for piece, _ in pieces), ends[first_user] if first_user >= 0 else 0, ends,
                  list(accumulate(n for _, n in pieces)))


def prompt_chain(req: CompletionRequestData, layout: Layout) -> list[int]:
    """The prompt's chain of block hashes: its passport's, then the demo's own past its end (see the docstring)."""
    own = chain(layout.text, layout.first_turn_end)[1] if layout.text else []
    given = list(req.passport.prefix_blocks or ()) if req.passport is not None else []
    if not given:
        return own
    last = struct.pack("<Q", given[-1])
    return given + [int(_u64(hashlib.sha256(last + struct.pack("<Q", h)).digest())[0]) for h in own[len(given):]]


class KvCache:
    """One demo service's simulated prefix cache (see the module's docstring)."""

    def __init__(self, settings: KvCacheSettings) -> None:
        self.settings = settings
        self.blocks = BlockCache(settings.blocks)

    def prefill(self, req: CompletionRequestData, prompt_tokens: int) -> Prefill:
        """Read the prompt's leading blocks from the cache, store its chain, and say what that saved."""
        if not self.settings.blocks:
            return Prefill(0, self.settings.prefill_s_per_token * prompt_tokens)
        layout = prompt_layout(req)
        blocks = prompt_chain(req, layout)
        held = self.blocks.leading(blocks)
        self.blocks.store(blocks)
        cached = cached_tokens(prompt_tokens, layout, held)
        return Prefill(cached, self.settings.prefill_s_per_token * (prompt_tokens - cached))


def cached_tokens(prompt_tokens: int, layout: Layout, held: int) -> int:
    """The prompt's tokens its first `held` blocks cover in its layout (the passport's blocks taken to end
    where the demo's own would); at most all but one of `prompt_tokens`."""
    ends = block_ends(len(layout.text), layout.first_turn_end)
    if not held or not ends:
        return 0
    return max(0, min(prompt_tokens - 1, layout.tokens_before(ends[min(held, len(ends)) - 1])))
