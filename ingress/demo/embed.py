"""The demo's embeddings, as pure functions: deterministic unit vectors and honest token counts.

- An input's vector is SHAKE-256 of the input (its UTF-8 text, or its token ids as little-endian
  int32s, each kind tagged), read as uint32s mapped onto [-1, 1), normalised to length 1 and rounded
  to float32. The first d components of the stream are the same for every length, so a vector of
  `dimensions` d is the normalised first d components of a longer one, as OpenAI's shortened
  embeddings are.
- `dimensions` defaults to DEFAULT_DIMENSIONS and may be at most MAX_DIMENSIONS.
- Tokens are the demo's own (`answer.count_tokens` over a text; a token-id input counts its ids);
  an input of more than MAX_INPUT_TOKENS is refused.
"""

from __future__ import annotations

import hashlib
import math
import struct
from array import array
from dataclasses import dataclass

from ingress.demo.answer import count_tokens
from ingress.wire.embeddings import EmbeddingInputData, EmbeddingRequestData

DEFAULT_DIMENSIONS = 256
MAX_DIMENSIONS = 4096
MAX_INPUT_TOKENS = 8192


class Refused(ValueError):
    """A request the demo refuses, naming the field (answered with a 400 Error)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class Embedded:
    vectors: list[list[float]]
    prompt_tokens: int


def _seed(value: EmbeddingInputData) -> bytes:
    if value.text is not None:
        return b"text\0" + value.text.encode()
    tokens = value.tokens or []
    return b"tokens\0" + struct.pack(f"<{len(tokens)}i", *tokens)


def vector(value: EmbeddingInputData, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The demo's unit vector for one input: float32 values, as they travel."""
    words = struct.unpack(f"<{dimensions}I", hashlib.shake_256(_seed(value)).digest(4 * dimensions))
    raw = [w / 2**31 - 1.0 for w in words]
    norm = math.sqrt(math.fsum(x * x for x in raw)) or 1.0
    return array("f", [x / norm for x in raw]).tolist()


def tokens_of(value: EmbeddingInputData) -> int:
    return count_tokens(value.text) if value.text is not None else len(value.tokens or ())


def embed(req: EmbeddingRequestData) -> Embedded:
    """Every input's vector and the prompt's tokens; Refused if the request asks for what the demo lacks."""
    dimensions = DEFAULT_DIMENSIONS if req.dimensions is None else req.dimensions
    if not 1 <= dimensions <= MAX_DIMENSIONS:
        raise Refused(f"The demo embeds in 1 to {MAX_DIMENSIONS} dimensions, not {dimensions}.", "dimensions")
    inputs = req.inputs or []
    if not inputs:
        raise Refused("The request has no input.", "input")
    counts = [tokens_of(value) for value in inputs]
    for i, count in enumerate(counts):
        if count > MAX_INPUT_TOKENS:
            raise Refused(f"Input {i} has {count} tokens; at most {MAX_INPUT_TOKENS} are allowed.", f"input[{i}]")
    return Embedded([vector(value, dimensions) for value in inputs], sum(counts))
