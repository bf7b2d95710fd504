"""gemini.answers: the error envelope and its statuses, and the models list, as the google-genai SDK reads them
(its own client, answered in-process)."""

from __future__ import annotations

import msgspec
import pytest
from gemini_sdk import sdk_generate, sdk_models
from google.genai import errors as sdk_errors

from ingress import errors
from ingress.gemini.answers import error_envelope, error_kind, model_list


@pytest.mark.parametrize(("exc", "status", "name"), [
    (errors.InvalidRequest("bad", param="contents[0]"), 400, "INVALID_ARGUMENT"),
    (errors.PayloadTooLarge("big"), 413, "INVALID_ARGUMENT"),
    (errors.ResponseCancelled("cancelled"), 400, "INVALID_ARGUMENT"),
    (errors.Unauthenticated("who?"), 401, "UNAUTHENTICATED"),
    (errors.NotFound("no such model"), 404, "NOT_FOUND"),
    (errors.RequestTimeout("slow body"), 408, "DEADLINE_EXCEEDED"),
    (errors.RateLimited("slow down", retry_after=7), 429, "RESOURCE_EXHAUSTED"),
    (errors.QuotaExceeded("spent"), 429, "RESOURCE_EXHAUSTED"),
    (errors.Overloaded("full"), 503, "UNAVAILABLE"),
    (errors.ShuttingDown(), 503, "UNAVAILABLE"),
    (errors.LimitsUnavailable("store"), 503, "UNAVAILABLE"),
    (errors.StoreUnavailable("store"), 503, "UNAVAILABLE"),
    (errors.UpstreamUnavailable("refused"), 502, "UNAVAILABLE"),
    (errors.UpstreamProtocolError("garbled"), 502, "INTERNAL"),
    (errors.UpstreamTimeout("late"), 504, "DEADLINE_EXCEEDED"),
    (errors.UpstreamAnswered(529, "overloaded_error", None, "busy", None), 503, "UNAVAILABLE"),
    (errors.UpstreamAnswered(418, "invalid_request_error", None, "teapot", None), 418, "INVALID_ARGUMENT"),
    (errors.IngressError("bug"), 500, "INTERNAL"),
])
def test_each_error_is_answered_with_googles_status_and_the_sdk_raises_it(exc: errors.IngressError, status: int,
                                                                          name: str) -> None:
    assert error_kind(exc) == (name, status)
    body = msgspec.json.encode(error_envelope(exc))
    kind = sdk_errors.ClientError if status < 500 else sdk_errors.ServerError
    with pytest.raises(kind) as caught:
        sdk_generate(body, status)
    assert (caught.value.code, caught.value.status, caught.value.message) == (status, name, exc.message)


def test_the_refused_field_and_the_wait_are_in_googles_details() -> None:
    refused = msgspec.json.decode(msgspec.json.encode(error_envelope(
        errors.InvalidRequest("Invalid value at 'generation_config.top_k'", param="generation_config.top_k"))))
    assert refused["error"]["details"][0] == {
        "@type": "type.googleapis.com/google.rpc.BadRequest",
        "fieldViolations": [{"field": "generation_config.top_k",
                             "description": "Invalid value at 'generation_config.top_k'"}]}
    limited = msgspec.json.decode(msgspec.json.encode(error_envelope(errors.RateLimited("slow", retry_after=7))))
    assert {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"} in limited["error"]["details"]


def test_the_models_list_is_read_by_the_sdk() -> None:
    models = sdk_models(msgspec.json.encode(model_list(["gemini-2.5-pro", "local-model"])))
    assert [(m.name, m.display_name, m.version) for m in models] == [
        ("models/gemini-2.5-pro", "gemini-2.5-pro", "001"), ("models/local-model", "local-model", "001")]
    assert models[0].supported_actions == ["generateContent", "streamGenerateContent", "countTokens",
                                           "embedContent", "batchEmbedContents"]

