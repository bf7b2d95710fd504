"""OpenAI chat-completion answer, chunk, usage and model-list types as the edge writes them."""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType


class _Out(msgspec.Struct):
    """UNSET fields are left out; None fields are written as null, as OpenAI does."""


class FunctionOut(_Out):
    name: str
    arguments: str


class CustomCallOut(_Out):
    name: str
    input: str


class ToolCallOut(_Out, kw_only=True):
    """A function call (`function`), or a custom tool's call (`type` "custom", its free-form `input`)."""

    id: str
    type: str = "function"
    function: FunctionOut | UnsetType = UNSET
    custom: CustomCallOut | UnsetType = UNSET


class UrlCitationOut(_Out, kw_only=True):
    start_index: int
    end_index: int
    title: str
    url: str


class AnnotationOut(_Out, kw_only=True):
    type: str = "url_citation"
    url_citation: UrlCitationOut


class MessageOut(_Out, kw_only=True):
    role: str = "assistant"
    content: str | None
    refusal: str | UnsetType | None = UNSET
    tool_calls: list[ToolCallOut] | UnsetType = UNSET
    function_call: FunctionOut | UnsetType = UNSET  # legacy: the answer to a `functions` request
    annotations: list[AnnotationOut] | UnsetType = UNSET
    reasoning_content: str | UnsetType = UNSET  # a reasoning model's thinking, as vLLM and SGLang name it


class TopLogprobOut(_Out, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprobOut(_Out, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprobOut]


class LogprobsOut(_Out, kw_only=True):
    """A choice's `logprobs`: each list is null when the answer has no such tokens."""

    content: list[TokenLogprobOut] | None
    refusal: list[TokenLogprobOut] | None


class ChoiceOut(_Out):
    index: int
    message: MessageOut
    finish_reason: str | None
    logprobs: LogprobsOut | None = None


class PromptTokensDetails(_Out):
    """The first two are always written, as OpenAI's chat answers do; the others only when the service
    counted them (nonzero): a text_tokens of 0 beside a prompt of text would say what is not so."""

    cached_tokens: int = 0
    audio_tokens: int = 0
    cache_write_tokens: int | UnsetType = UNSET
    image_tokens: int | UnsetType = UNSET
    text_tokens: int | UnsetType = UNSET


class CompletionTokensDetails(_Out):
    """As PromptTokensDetails: the first four always, text_tokens only when counted."""

    reasoning_tokens: int = 0
    audio_tokens: int = 0
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0
    text_tokens: int | UnsetType = UNSET


class UsageOut(_Out):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | UnsetType = UNSET
    completion_tokens_details: CompletionTokensDetails | UnsetType = UNSET


class ChatCompletion(_Out, kw_only=True):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChoiceOut]
    usage: UsageOut | UnsetType = UNSET
    system_fingerprint: str | UnsetType = UNSET
    service_tier: str | UnsetType = UNSET


class FunctionDeltaOut(_Out):
    name: str | UnsetType = UNSET
    arguments: str | UnsetType = UNSET


class ToolCallDeltaOut(_Out):
    index: int
    id: str | UnsetType = UNSET
    type: str | UnsetType = UNSET
    function: FunctionDeltaOut | UnsetType = UNSET


class DeltaOut(_Out):
    role: str | UnsetType = UNSET
    content: str | UnsetType = UNSET
    refusal: str | UnsetType = UNSET
    tool_calls: list[ToolCallDeltaOut] | UnsetType = UNSET
    function_call: FunctionDeltaOut | UnsetType = UNSET  # legacy: the answer to a `functions` request
    reasoning_content: str | UnsetType = UNSET


class ChunkChoiceOut(_Out):
    index: int
    delta: DeltaOut
    finish_reason: str | None = None
    logprobs: LogprobsOut | None = None


class ChatCompletionChunk(_Out, kw_only=True):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoiceOut]
    system_fingerprint: str | UnsetType = UNSET
    service_tier: str | UnsetType = UNSET
    usage: UsageOut | UnsetType | None = UNSET


class ModelOut(_Out, kw_only=True):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(_Out, kw_only=True):
    object: Literal["list"] = "list"
    data: list[ModelOut]
