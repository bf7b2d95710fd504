"""The chain of hashes over a prompt's canonical bytes that the passport carries (the bytes, the prompt as an
engine caches it, are built on the edge's side: ingress/encoding/prefix.py).

An engine with prefix caching (vLLM, SGLang, llama.cpp) keeps a prompt's KV cache in blocks of tokens and
reuses the blocks a new prompt starts with. Two prompts that start with the same messages and tools start
with the same canonical bytes, so with the same blocks and hashes.

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
tests/unit/wire/test_prefix.py pins the bytes and the hashes.
"""

from __future__ import annotations

import hashlib
import struct

# vLLM caches blocks of 16 tokens, SGLang a radix tree of tokens, TensorRT-LLM blocks of 64: at ~4 bytes a
# token, 512 bytes (~128 tokens) is a handful of engine blocks, fine enough to tell where two prompts part,
# coarse enough that a 16 KiB prompt has 32 hashes (each a copy of the hash state, ~0.7 µs, and an entry
# in a cache-affine group's map, ~100 bytes).
BLOCK_BYTES = 512
LIMIT_BYTES = 16 * 1024  # of canonical text hashed in blocks: 32 of them (the first user message's beside)
FIRST_TURN_BYTES = 8 * 1024  # of a first user message that ends past LIMIT_BYTES
PREFIX_BYTES = 4096  # what the passport's prefix_hash covers

_u64 = struct.Struct("<Q").unpack_from


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
