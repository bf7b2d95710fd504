"""Translate a decoded EmbeddingResponse into OpenAI's embeddings list (sans-I/O).

`encoding_format: "base64"` (what the openai SDK asks for unless told otherwise) is base64 of each
vector's little-endian float32 bytes: exactly the floats the service sent, decoded by the SDK with
`array("f", base64.b64decode(...))`. Floats are written as JSON numbers that read back as the same
float32 values.
"""

from __future__ import annotations

import base64
import sys
from array import array

from ingress.oai.embeddings import EmbeddingList, EmbeddingOut, EmbeddingUsage
from ingress.wire.embeddings import Embeddings

_BIG_ENDIAN = sys.byteorder == "big"


def encode_base64(vector: list[float]) -> str:
    """Base64 of `vector` as little-endian float32s."""
    floats = array("f", vector)
    if _BIG_ENDIAN:
        floats.byteswap()
    return base64.b64encode(floats.tobytes()).decode("ascii")


def translate_embeddings(e: Embeddings, *, as_base64: bool) -> EmbeddingList:
    """The service's vectors, one per input in the inputs' order, as OpenAI's list."""
    data = [EmbeddingOut(index=i, embedding=encode_base64(v) if as_base64 else v) for i, v in enumerate(e.vectors)]
    prompt = e.usage.prompt_tokens if e.usage is not None else 0
    total = (e.usage.total_tokens or prompt) if e.usage is not None else 0
    return EmbeddingList(data=data, model=e.model, usage=EmbeddingUsage(prompt_tokens=prompt, total_tokens=total))
