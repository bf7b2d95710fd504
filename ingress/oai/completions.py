"""OpenAI's legacy text-completions request (`POST /v1/completions`) and answer types, strictly decoded.

Bounds are OpenAI's documented ones (`best_of` 0-20, `logprobs` 0-5, `n` 1-128, `max_tokens` ≥ 0, up to
4 `stop` sequences); a prompt is a string, a list of strings, a list of token ids or a list of them. At
most 2048 prompts, as for embeddings inputs; a prompt's own token limit is the service's (its tokenizer).
`logprobs` with `echo` is refused: OpenAI answers the prompt's token logprobs then, which the contract
does not carry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from ingress.oai.chat import (
    INT32_MAX,
    Bias,
    ChoiceCount,
    ModelName,
    Penalty,
    Seed,
    ShortText,
    StreamOptions,
    Temperature,
    TokenId,
    TopP,
    one_by_one,
)
from ingress.oai.chat_answers import UsageOut
from ingress.oai.codec import invalid, refusal, split_extras, unreadable

MAX_PROMPTS = 2048

PromptToken = Annotated[int, Meta(ge=0, le=INT32_MAX)]
PromptTokens = Annotated[list[PromptToken], Meta(min_length=1)]
# msgspec allows one array type in a union: a list's items are checked to be of one kind below.
PromptList = Annotated[list[str | PromptToken | PromptTokens], Meta(min_length=1)]


class TextCompletionRequest(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Unknown fields are refused, as OpenAI does, rather than silently dropped."""

    model: ModelName
    prompt: str | PromptList
    best_of: Annotated[int, Meta(ge=0, le=20)] | None = None
    echo: bool | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: dict[TokenId, Bias] | None = None
    logprobs: Annotated[int, Meta(ge=0, le=5)] | None = None
    max_tokens: Annotated[int, Meta(ge=0, le=INT32_MAX)] | None = None
    n: ChoiceCount | None = None
    presence_penalty: Penalty | None = None
    seed: Seed | None = None
    stop: str | Annotated[list[str], Meta(max_length=4)] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    suffix: str | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    user: ShortText | None = None

    @property
    def prompts(self) -> list[str | list[int]]:
        """The prompts one by one: texts, or token-id lists."""
        return one_by_one(self.prompt)


_decoder = msgspec.json.Decoder(TextCompletionRequest)
_OPENAI_FIELDS = frozenset(TextCompletionRequest.__struct_fields__)


def decode_text_request(body: bytes) -> TextCompletionRequest:
    """Parse and strictly validate; every failure is an InvalidRequest naming the field path."""
    return decode_text_request_forwarding(body, _refuse)[0]


def _refuse(model: str) -> bool:
    return False


def decode_text_request_forwarding(
    body: bytes, forwards: Callable[[str], bool],
) -> tuple[TextCompletionRequest, str | None]:
    """As decode_text_request, but the top-level fields that are not OpenAI's come back as one JSON
    object (text) when `forwards(model)` says the model's route forwards them, as for chat (codec.py)."""
    try:
        request = _decoder.decode(body)
    except msgspec.ValidationError as exc:
        split = split_extras(body, exc, forwards, _OPENAI_FIELDS)
        if split is not None:
            return decode_text_request(split[0]), split[1]
        raise refusal(exc) from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise unreadable(exc) from None
    _check(request)
    return request, None


_KINDS = {str: "a string", int: "a token id", list: "a list of token ids"}


def _check(request: TextCompletionRequest) -> None:
    """What a type cannot say: one kind of prompt per list, best_of against n and stream."""
    value = request.prompt
    if not isinstance(value, str):
        kind = type(value[0])
        for i, item in enumerate(value):
            if type(item) is not kind:
                raise invalid(f"expected {_KINDS[kind]}, as the first item is, got {_KINDS[type(item)]}",
                               f"prompt[{i}]")
        if kind is not int and len(value) > MAX_PROMPTS:
            raise invalid(f"at most {MAX_PROMPTS} prompts are allowed, got {len(value)}", "prompt")
    for token in request.logit_bias or ():
        if int(token) > INT32_MAX:
            raise invalid("token ids must fit in 32 bits", f"logit_bias.{token}")
    if request.best_of is not None and request.best_of < (request.n or 1):
        raise invalid("best_of must be at least n", "best_of")
    if request.best_of is not None and request.best_of > 1 and request.stream:
        raise invalid("best_of above 1 cannot be streamed", "best_of")
    if request.stream_options is not None and not request.stream:
        raise invalid("stream_options is only allowed when stream is true", "stream_options")
    if request.logprobs is not None and request.echo:
        # OpenAI answers the echoed prompt's token logprobs too, and the contract carries none: what is
        # asked for is mostly the prompt's score, and the completion's alone would read as a wrong one.
        raise invalid("logprobs with echo is not supported: the prompt's token logprobs are not carried",
                       "logprobs")


# --- the answer: a text_completion object, streamed or not ----------------------------------------


class TextLogprobsOut(msgspec.Struct, kw_only=True):
    """OpenAI's legacy shape, one entry per token in each list: the token, its log probability, the most
    likely tokens at its position (token → logprob), and where it starts in the choice's text (characters)."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class TextChoiceOut(msgspec.Struct, kw_only=True):
    text: str
    index: int
    finish_reason: str | None
    logprobs: TextLogprobsOut | None = None  # null when none were asked for (the service sent none)


class TextCompletion(msgspec.Struct, kw_only=True):
    """Both the whole answer and each streamed chunk (OpenAI sends one shape for both). UNSET fields are
    left out; `usage` None is written as null (a stream with include_usage, before its last chunk)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[TextChoiceOut]
    usage: UsageOut | UnsetType | None = UNSET
    system_fingerprint: str | UnsetType = UNSET
