"""Google's Gemini API answers as the edge writes them: `GenerateContentResponse` (whole, and each event of a
stream), countTokens' answer, the models list, the error envelope, and the status each of our errors is
answered with."""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from ingress.errors import (
    IngressError,
    Overloaded,
    ShuttingDown,
    UpstreamAnswered,
    UpstreamProtocolError,
)


class _Out(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel", gc=False):
    """Google's JSON names; UNSET fields are left out, as Google leaves out what it does not set. Trees
    without cycles: not tracked by the garbage collector."""


# --- the answer -----------------------------------------------------------------------------------

EMPTY_ARGS = msgspec.Raw(b"{}")


class FunctionCall(_Out, kw_only=True):
    name: str
    args: msgspec.Raw  # a JSON object, as the model wrote it, and whole (never a piece); none: EMPTY_ARGS
    id: str | UnsetType = UNSET


class Part(_Out, kw_only=True):
    text: str | UnsetType = UNSET
    thought: bool | UnsetType = UNSET  # True: the text is the model's thought
    function_call: FunctionCall | UnsetType = UNSET
    thought_signature: str | UnsetType = UNSET  # base64, opaque


class Content(_Out, kw_only=True):
    parts: list[Part]
    role: Literal["model"] = msgspec.field(default_factory=lambda: "model")  # always written, as Google does


class LogprobsCandidate(_Out, kw_only=True):
    token: str
    log_probability: float


class TopCandidates(_Out, kw_only=True):
    candidates: list[LogprobsCandidate]


class LogprobsResult(_Out, kw_only=True):
    chosen_candidates: list[LogprobsCandidate]
    top_candidates: list[TopCandidates] | UnsetType = UNSET


FinishReason = Literal["STOP", "MAX_TOKENS", "SAFETY", "RECITATION", "OTHER", "MALFORMED_FUNCTION_CALL"]


class Candidate(_Out, kw_only=True):
    content: Content | UnsetType = UNSET
    finish_reason: FinishReason | UnsetType = UNSET
    index: int
    avg_logprobs: float | UnsetType = UNSET
    logprobs_result: LogprobsResult | UnsetType = UNSET


class UsageMetadata(_Out, kw_only=True):
    """`promptTokenCount` includes the cached tokens (`cachedContentTokenCount`); `candidatesTokenCount` leaves
    out the thoughts' (`thoughtsTokenCount`); the total adds up all three."""

    prompt_token_count: int
    candidates_token_count: int
    total_token_count: int
    cached_content_token_count: int | UnsetType = UNSET
    thoughts_token_count: int | UnsetType = UNSET


class GenerateContentResponse(_Out, kw_only=True):
    """A whole answer, or one event of a stream (a partial answer: its parts are the latest; usage on the last)."""

    candidates: list[Candidate]
    usage_metadata: UsageMetadata | UnsetType = UNSET
    model_version: str
    response_id: str


class CountTokensResponse(_Out, kw_only=True):
    total_tokens: int
    cached_content_token_count: int | UnsetType = UNSET


# --- embeddings -----------------------------------------------------------------------------------


class ContentEmbedding(_Out, kw_only=True):
    values: list[float]


class EmbeddingUsage(_Out, kw_only=True):
    prompt_token_count: int
    total_token_count: int


class EmbedContentResponse(_Out, kw_only=True):
    embedding: ContentEmbedding
    usage_metadata: EmbeddingUsage | UnsetType = UNSET


class BatchEmbedContentsResponse(_Out, kw_only=True):
    embeddings: list[ContentEmbedding]
    usage_metadata: EmbeddingUsage | UnsetType = UNSET


# --- models ---------------------------------------------------------------------------------------


METHODS = ("generateContent", "streamGenerateContent", "countTokens", "embedContent", "batchEmbedContents")


class Model(_Out, kw_only=True):
    name: str  # "models/<id>"
    version: str
    display_name: str
    description: str | UnsetType = UNSET
    input_token_limit: int | UnsetType = UNSET
    output_token_limit: int | UnsetType = UNSET
    supported_generation_methods: list[str] = msgspec.field(default_factory=lambda: list(METHODS))


class ModelList(_Out, kw_only=True):
    models: list[Model]
    next_page_token: str | UnsetType = UNSET


def model_info(model: str) -> Model:
    """One model a route serves, as Google describes a model."""
    return Model(name=f"models/{model}", version="001", display_name=model)


def model_list(models: list[str]) -> ModelList:
    """Every model in one page (the edge lists the few its routes name)."""
    return ModelList(models=[model_info(m) for m in models])


# --- errors ---------------------------------------------------------------------------------------

Status = Literal["INVALID_ARGUMENT", "FAILED_PRECONDITION", "UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND",
                 "ABORTED", "RESOURCE_EXHAUSTED", "CANCELLED", "INTERNAL", "UNIMPLEMENTED", "UNAVAILABLE",
                 "DEADLINE_EXCEEDED"]

# google.rpc's canonical mapping of HTTP statuses to its codes (google/rpc/code.proto).
_BY_STATUS: dict[int, Status] = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                                 404: "NOT_FOUND", 408: "DEADLINE_EXCEEDED", 409: "ABORTED", 413: "INVALID_ARGUMENT",
                                 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED",
                                 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
_OVERLOADED_CODES = frozenset({"overloaded", "upstream_overloaded"})
_BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


class FieldViolation(_Out, kw_only=True):
    field: str
    description: str


class BadRequest(_Out, kw_only=True, tag_field="@type", tag=_BAD_REQUEST):
    """The refused field, where Google's clients look for it."""

    field_violations: list[FieldViolation]


class RetryInfo(_Out, kw_only=True, tag_field="@type", tag=_RETRY_INFO):
    """When to try again (`"7s"`): Gemini CLI waits as long before it retries a 429."""

    retry_delay: str


class ErrorInfo(_Out, kw_only=True, tag_field="@type", tag=_ERROR_INFO):
    reason: str
    domain: str = "ingress"


Detail = BadRequest | RetryInfo | ErrorInfo


class ErrorBody(_Out, kw_only=True):
    code: int
    message: str
    status: Status
    details: list[Detail] | UnsetType = UNSET


class ErrorEnvelope(_Out, kw_only=True):
    """An error answer's body, and the last event of a stream that failed after it began."""

    error: ErrorBody


def error_kind(exc: IngressError) -> tuple[Status, int]:
    """The google.rpc status and HTTP status an error is answered with; the Retry-After header is the caller's
    to write from `exc.retry_after`, as for the other shapes.

    - UNAVAILABLE 503: no capacity now, retry (the queue full, a drain, the limit store silent, a service
      overloaded or unreachable: Google's own answer when a model is overloaded); a 529 is 503 here, a
      status Google's clients know.
    - RESOURCE_EXHAUSTED 429: a rate limit or a spent budget, as Google answers a quota.
    - INTERNAL: ours (500), or a service that broke the contract (502 kept: not the edge's own bug).
    - DEADLINE_EXCEEDED 504: the service did not answer in time.
    - every other status by google.rpc's table; a 4xx it has no code for is INVALID_ARGUMENT (FAILED_PRECONDITION
      is Google's for a request valid but not servable now, which none of ours is)."""
    status = exc.status
    if isinstance(exc, Overloaded | ShuttingDown):
        return "UNAVAILABLE", 503
    if isinstance(exc, UpstreamAnswered) and (status in (503, 529) or exc.code in _OVERLOADED_CODES
                                              or exc.type == "overloaded_error"):
        return "UNAVAILABLE", 503
    if isinstance(exc, UpstreamProtocolError):
        return "INTERNAL", status
    if status in _BY_STATUS:
        return _BY_STATUS[status], status
    return ("INTERNAL" if status >= 500 else "INVALID_ARGUMENT"), status


def error_envelope(exc: IngressError) -> ErrorEnvelope:
    """`{"error": {"code", "message", "status", "details"}}`: the refused field as a BadRequest's field
    violation, the wait as RetryInfo, our code as ErrorInfo's reason."""
    status_name, status = error_kind(exc)
    details: list[Detail] = []
    if exc.param:
        details.append(BadRequest(field_violations=[FieldViolation(field=exc.param, description=exc.message)]))
    if exc.retry_after is not None:
        details.append(RetryInfo(retry_delay=f"{exc.retry_after}s"))
    if exc.code:
        details.append(ErrorInfo(reason=exc.code.upper()))
    return ErrorEnvelope(error=ErrorBody(code=status, message=exc.message, status=status_name,
                                         details=details or UNSET))
