"""Translate a decoded EmbeddingResponse into OpenAI's embeddings list, or Google's answer to embedContent and
batchEmbedContents (sans-I/O).

`encoding_format: "base64"` (what the openai SDK asks for unless told otherwise) is base64 of each
vector's little-endian float32 bytes: exactly the floats the service sent, decoded by the SDK with
`array("f", base64.b64decode(...))`. Floats are written as JSON numbers that read back as the same
float32 values.
"""

from __future__ import annotations

import base64
import sys
from array import array

from msgspec import UNSET, UnsetType

from ingress.gemini import answers as gm
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


def translate_gemini_embeddings(e: Embeddings, *,
                                batch: bool) -> gm.EmbedContentResponse | gm.BatchEmbedContentsResponse:
    """The service's vectors as Google answers them: one per request, in the requests' order (`batch`), or the one
    (`embedContent`); with the service's token counts when it gave them."""
    vectors = [gm.ContentEmbedding(values=v) for v in e.vectors]
    usage: gm.EmbeddingUsage | UnsetType = UNSET
    if e.usage is not None:
        prompt = e.usage.prompt_tokens
        usage = gm.EmbeddingUsage(prompt_token_count=prompt, total_token_count=e.usage.total_tokens or prompt)
    if batch:
        return gm.BatchEmbedContentsResponse(embeddings=vectors, usage_metadata=usage)
    return gm.EmbedContentResponse(embedding=vectors[0], usage_metadata=usage)
