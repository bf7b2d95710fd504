"""ingress/edge/gemini.py's pure parts: a path's `{model}:{method}` segment, the key a Google client presents,
and which requests speak Google's API (their errors go in its envelope)."""

from __future__ import annotations

import pytest

from ingress.edge.gemini import google_key, speaks_gemini, split_name


@pytest.mark.parametrize(("segment", "expected"), [
    ("gemini-2.5-flash:generateContent", ("gemini-2.5-flash", "generateContent")),
    ("gemini-2.5-flash:streamGenerateContent", ("gemini-2.5-flash", "streamGenerateContent")),
    ("llama3:8b:countTokens", ("llama3:8b", "countTokens")),  # the method follows the last colon
    ("org/model:generateContent", ("org/model", "generateContent")),
    ("gemini-2.5-flash", ("gemini-2.5-flash", "")),
    (":generateContent", ("", "generateContent")),
])
def test_a_segment_is_the_model_and_the_method_after_its_last_colon(segment: str, expected: tuple[str, str]) -> None:
    assert split_name(segment) == expected


@pytest.mark.parametrize(("headers", "query", "expected"), [
    ({"x-goog-api-key": "g", "Authorization": "Bearer b"}, {"key": "q"}, "g"),
    ({"Authorization": "Bearer b"}, {"key": "q"}, "q"),
    ({"Authorization": "Bearer b"}, {}, "b"),
    ({"x-api-key": "a"}, {}, "a"),
    ({"x-goog-api-key": ""}, {"key": ""}, None),
    ({}, {}, None),
])
def test_the_key_is_googles_header_then_the_query_then_the_usual_headers(headers: dict[str, str],
                                                                        query: dict[str, str],
                                                                        expected: str | None) -> None:
    assert google_key(headers, query) == expected


@pytest.mark.parametrize(("path", "method", "headers", "query", "expected"), [
    ("/v1beta/models/m:generateContent", "POST", {}, {}, True),
    ("/v1beta/nothing-here", "GET", {}, {}, True),  # Google's 404, in its envelope
    ("/v1/models/m:generateContent", "POST", {}, {}, True),
    ("/v1/models", "GET", {"x-goog-api-key": "k"}, {}, True),
    ("/v1/models/m", "GET", {"x-goog-api-client": "google-genai-sdk/1"}, {}, True),
    ("/v1/models", "GET", {}, {"key": "k"}, True),
    ("/v1/models", "GET", {"Authorization": "Bearer k"}, {}, False),  # OpenAI's list
    ("/v1/models/llama3:8b", "GET", {}, {}, False),
    ("/v1/chat/completions", "POST", {"x-goog-api-key": "k"}, {}, False),
    ("/v1betax/models", "GET", {}, {}, False),
])
def test_which_requests_speak_googles_api(path: str, method: str, headers: dict[str, str], query: dict[str, str],
                                          expected: bool) -> None:
    assert speaks_gemini(path, method, headers, query) is expected
