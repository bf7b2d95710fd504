"""OpenAI's embeddings request and answer types, and the strict decoding of a request body.

Limits are OpenAI's documented ones: at most 2048 inputs, none empty; a token-id input holds at most
8192 ids, and all of a request's token ids at most 300,000. A text input's token count depends on the
model's tokenizer, which only the internal service knows: it enforces the per-input limit on text.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from ingress.oai.chat import INT32_MAX, ModelName, ShortText, one_by_one
from ingress.oai.codec import invalid, refusal, unreadable

MAX_INPUTS = 2048
MAX_INPUT_TOKENS = 8192
MAX_REQUEST_TOKENS = 300_000

Text = Annotated[str, Meta(min_length=1)]
TokenId = Annotated[int, Meta(ge=0, le=INT32_MAX)]
TokenIds = Annotated[list[TokenId], Meta(min_length=1, max_length=MAX_INPUT_TOKENS)]
# msgspec allows one array type in a union: a list's items are checked to be of one kind below.
InputList = Annotated[list[Text | TokenId | TokenIds], Meta(min_length=1, max_length=MAX_INPUT_TOKENS)]
Dimensions = Annotated[int, Meta(ge=1, le=INT32_MAX)]


class EmbeddingRequest(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Unknown fields are refused, as OpenAI does, rather than silently dropped."""

    model: ModelName
    input: Text | InputList
    dimensions: Dimensions | None = None
    encoding_format: Literal["float", "base64"] | None = None
    user: ShortText | None = None

    @property
    def inputs(self) -> list[str | list[int]]:
        """The inputs one by one: texts, or token-id lists."""
        return one_by_one(self.input)


_decoder = msgspec.json.Decoder(EmbeddingRequest)


def decode_embedding_request(body: bytes) -> EmbeddingRequest:
    """Parse and strictly validate; every failure is an InvalidRequest naming the field path."""
    try:
        request = _decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise refusal(exc) from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise unreadable(exc) from None
    _check_input(request.input)
    return request


_KINDS = {str: "a string", int: "a token id", list: "a list of token ids"}


def _check_input(value: str | list[str | int | list[int]]) -> None:
    """One kind of item per list, and the counts OpenAI allows."""
    if isinstance(value, str):
        return
    kind = type(value[0])
    for i, item in enumerate(value):
        if type(item) is not kind:
            raise invalid(f"expected {_KINDS[kind]}, as the first item is, got {_KINDS[type(item)]}", f"input[{i}]")
    if kind is not int and len(value) > MAX_INPUTS:
        raise invalid(f"at most {MAX_INPUTS} inputs are allowed, got {len(value)}", "input")
    if kind is list and sum(map(len, value)) > MAX_REQUEST_TOKENS:  # type: ignore[arg-type]  # all lists
        raise invalid(f"at most {MAX_REQUEST_TOKENS} tokens are allowed over all inputs", "input")


# --- the answer -----------------------------------------------------------------------------------


class EmbeddingOut(msgspec.Struct, kw_only=True):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # floats, or base64 of their little-endian float32 bytes


class EmbeddingUsage(msgspec.Struct):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[EmbeddingOut]
    model: str
    usage: EmbeddingUsage
