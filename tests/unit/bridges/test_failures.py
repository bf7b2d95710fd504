"""An engine's refusal as our ErrorInfo (ingress/bridges/failures.py): the status table, every body shape,
Retry-After, and the scrubbing of what reaches the client."""

from __future__ import annotations

import pytest

from ingress.bridges.failures import MAX_MESSAGE, engine_error, retry_after, scrub
from ingress.bridges.openai import OpenAIDialect

DIALECT = OpenAIDialect(clock=lambda: 1_700_000_000.0)


@pytest.mark.parametrize(("status", "body", "expected"), [
    (400, b'{"error": {"message": "bad temperature", "type": "invalid_request_error", "param": "temperature",'
          b' "code": "invalid_value"}}',
     (400, "invalid_request_error", "invalid_value", "temperature", "bad temperature")),
    (400, b'{"object": "error", "message": "too long", "type": "BadRequestError", "param": null, "code": 400}',
     (400, "invalid_request_error", None, None, "too long")),  # vLLM's old flat shape, its integer code
    (404, b'{"error": {"message": "The model `x` does not exist.", "type": "NotFoundError", "param": null,'
          b' "code": 404}}', (404, "invalid_request_error", None, None, "The model `x` does not exist.")),
    (422, b'{"error": "Input validation error: `inputs` must have less than 4096 tokens", "error_type": "validation"}',
     (422, "validation", None, None, "Input validation error: `inputs` must have less than 4096 tokens")),  # TGI
    (400, b'{"detail": "Not a chat template"}', (400, "invalid_request_error", None, None, "Not a chat template")),
    (401, b'{"error": {"message": "Incorrect API key provided: sk-proj-abcdef123456. You can find your API key at'
          b' https://platform.openai.com/account/api-keys.", "type": "invalid_request_error",'
          b' "code": "invalid_api_key"}}',
     (502, "server_error", "upstream_auth_failed", None,
      "The model provider refused the bridge's credentials (HTTP 401). It said: Incorrect API key provided: "
      "[redacted]. You can find your API key at [redacted]")),
    (403, b"Forbidden", (502, "server_error", "upstream_auth_failed", None,
                         "The model provider refused the bridge's credentials (HTTP 403). It said: Forbidden")),
    (500, b"Internal Server Error", (502, "server_error", "upstream_error", None,
                                     "The model provider failed (HTTP 500). It said: Internal Server Error")),
    (502, b"<html><head><title>502 Bad Gateway</title></head><body><center>nginx</center></body></html>",
     (502, "server_error", "upstream_error", None, "The model provider failed (HTTP 502). It said: The engine, or "
                                                   "a proxy in front of it, answered HTTP 502 with an HTML page.")),
    (504, b"", (504, "server_error", "upstream_timeout", None, "The model provider timed out.")),
    (500, b'{"error": {"code": 500, "message": "input (701 tokens) is too large to process. increase the physical '
          b'batch size (current batch size: 512)", "type": "server_error"}}',
     (400, "invalid_request_error", "context_length_exceeded", None, "input (701 tokens) is too large to process. "
                                                                     "increase the physical batch size (current "
                                                                     "batch size: 512)")),  # llama.cpp's
    (302, b"", (502, "server_error", "upstream_protocol_error", None,
                "The model provider answered HTTP 302, which is not an answer.")),
])
def test_status_and_shape(status: int, body: bytes, expected: tuple[int, str, str | None, str | None, str]) -> None:
    info = DIALECT.error(status, {}, body)
    assert (info.status, info.type, info.code, info.param, info.message) == expected


def test_429_and_503_keep_retry_after() -> None:
    limited = DIALECT.error(429, {"Retry-After": "7"}, b'{"error": {"message": "slow down", "type": "requests",'
                                                      b' "code": "rate_limit_exceeded"}}')
    assert (limited.status, limited.type, limited.code, limited.retry_after) == (
        429, "requests", "rate_limit_exceeded", 7)
    busy = DIALECT.error(503, {"retry-after": "Tue, 14 Nov 2023 22:13:50 GMT"}, b"loading model")
    assert (busy.status, busy.code, busy.retry_after) == (503, "upstream_overloaded", 30)
    assert DIALECT.error(529, {}, b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
                         ).status == 503


@pytest.mark.parametrize(("status", "body", "expected"), [
    (401, b'{"error": {"message": "Incorrect API key provided: sk-wrong-abcdef12. You can find your API key at'
          b' https://platform.openai.com/account/api-keys.", "type": "invalid_request_error",'
          b' "code": "invalid_api_key"}}',
     (401, "invalid_request_error", "invalid_api_key",
      "Incorrect API key provided: [redacted]. You can find your API key at [redacted]")),
    (403, b'{"error": {"message": "Project does not have access to model gpt-5", "type": "invalid_request_error",'
          b' "code": "model_not_found"}}',
     (403, "invalid_request_error", "model_not_found", "Project does not have access to model gpt-5")),
    (401, b"", (401, "invalid_request_error", "invalid_api_key",
                "The model provider refused the key sent with the request (HTTP 401).")),
    (403, b"Forbidden", (403, "permission_error", None, "Forbidden")),
])
def test_the_clients_own_key_refused_is_its_own_status(status: int, body: bytes,
                                                      expected: tuple[int, str, str | None, str]) -> None:
    """A route forwarding its clients' keys: the provider's 401/403 is the client's (no fallback moves it),
    not the bridge's 502; everything else is as for the bridge's own key."""
    info = DIALECT.error(status, {}, body, clients_key=True)
    assert (info.status, info.type, info.code, info.message) == expected
    assert DIALECT.error(429, {}, b"slow", clients_key=True).status == 429
    assert DIALECT.error(500, {}, b"down", clients_key=True).code == "upstream_error"


@pytest.mark.parametrize(("headers", "seconds"), [
    ({"Retry-After": "120"}, 120), ({"retry-after": "99999"}, 3600), ({"retry-after-ms": "1500"}, 2),
    ({"Retry-After": "soon"}, None), ({}, None),
])
def test_retry_after_forms(headers: dict[str, str], seconds: int | None) -> None:
    assert retry_after(headers) == seconds


@pytest.mark.parametrize(("text", "kept", "gone"), [
    ("key sk-ant-api03-abcdefghijk rejected", "key [redacted] rejected", "abcdefghijk"),
    ("Authorization: Bearer eyJhbGciOi.x.y failed", "Bearer [redacted]", "eyJhbGciOi"),
    ('{"api_key": "hunter2"}', "[redacted]", "hunter2"),
    ("connect to http://10.0.0.5:8000/v1 failed", "connect to [redacted] failed", "10.0.0.5"),
    ("upstream 192.168.1.20:9000 reset", "upstream [redacted] reset", "192.168.1.20"),
    ("dial tcp [fd00::12]:8000: refused", "dial tcp [redacted]: refused", "fd00::12"),
    ("no route to vllm-0.vllm.default.svc.cluster.local:8000", "no route to [redacted]", "vllm-0"),
    ("engine at localhost:8080 is down", "engine at [redacted] is down", "localhost"),
    ("socket unix:/run/llm.sock gone", "socket [redacted] gone", "/run/llm.sock"),
    ("line\n two\x00three", "line two three", "\n"),
    ("messages[0].content is required", "messages[0].content is required", "[redacted]"),
])
def test_scrub(text: str, kept: str, gone: str) -> None:
    scrubbed = scrub(text)
    assert kept in scrubbed
    assert gone not in scrubbed


def test_scrub_bounds_the_length() -> None:
    scrubbed = scrub("x" * 10_000)
    assert len(scrubbed) == MAX_MESSAGE and scrubbed.endswith("…")


def test_an_in_stream_error_takes_its_status_from_vllms_integer_code() -> None:
    assert engine_error(None, {}, b'{"error": {"message": "m", "code": 400}}').status == 400
    assert engine_error(None, {}, b'{"error": {"message": "m"}}').status == 502
