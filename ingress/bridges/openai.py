"""The OpenAI-compatible dialect (sans-I/O): our contract ↔ `/v1/chat/completions` and `/v1/completions`
of vLLM, SGLang, llama.cpp, TGI, Ollama and OpenAI itself, each engine's known quirks absorbed.

The request is the client's, as the edge decoded it, with the model the route names, the route's engine
extras merged at the top level (an extra never replaces a field of OpenAI's request, set or not: such a
key is dropped), usage always asked of a stream (`stream_options.include_usage`: the edge needs the
counts; it shows them to the client only if the client asked), and the target's key as a Bearer token
(never the client's).

The answers, whole and streamed, and every engine quirk they absorb are `openai_answers.py`'s.

Errors (`error`) keep the engine's status for the client's mistakes, make 401/403 a 502
`upstream_auth_failed` (the bridge's credentials, not the client's), keep 429's and 503's Retry-After,
and carry the engine's text only scrubbed (`scrub`) of keys, tokens, URLs and addresses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ingress import wire
from ingress.bridges.dialect import Dialect, EngineRequest, Target, readable, under
from ingress.bridges.failures import engine_error
from ingress.bridges.openai_answers import OpenAIStream, read_answer
from ingress.oai.chat import ChatCompletionRequest
from ingress.oai.completions import TextCompletionRequest
from ingress.wire import types as wt

CHAT_PATH = "/v1/chat/completions"
TEXT_PATH = "/v1/completions"

# Fields of OpenAI's requests: an engine extra of one of these names is dropped, never merged over it.
_CHAT_FIELDS = frozenset(ChatCompletionRequest.__struct_fields__) | {"stream_options"}
_TEXT_FIELDS = frozenset(TextCompletionRequest.__struct_fields__) | {"stream_options"}
_json_object = msgspec.json.Decoder(dict[str, Any])
_any = msgspec.json.Decoder()

# Engines' finish reasons → ours (wire.FINISH_REASONS); anything else is a stop.


# --- the request ----------------------------------------------------------------------------------


def _merge_extras(body: dict[str, Any], extra_json: bytes | None, fields: frozenset[str]) -> None:
    if not extra_json:
        return
    extras = _json_object.decode(extra_json)  # the edge writes an object; anything else is refused, not dropped
    for key, value in extras.items():
        if key not in fields:
            body[key] = value


def _types_back(body: dict[str, Any]) -> None:
    """`type: "function"` where OpenAI's shape requires it: our Structs omit it as their default, and
    strict engines (vLLM validates the messages with OpenAI's own types) refuse a tool call without it."""
    for tool in body.get("tools") or ():
        tool.setdefault("type", "function")
    for message in body.get("messages") or ():
        for call in message.get("tool_calls") or ():
            call.setdefault("type", "function")
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        choice.setdefault("type", "function")


def _headers(target: Target, stream: bool) -> dict[str, str]:
    headers = {k.lower(): v for k, v in target.headers.items()}
    headers["content-type"] = "application/json"
    headers["accept"] = "text/event-stream" if stream else "application/json"
    if target.api_key:
        headers["authorization"] = f"Bearer {target.api_key}"
    else:
        headers.pop("authorization", None)
    return headers


class OpenAICall:
    """One request's exchange with an OpenAI-compatible engine."""

    def __init__(self, request: EngineRequest, *, text: bool, fallback_id: str, model: str,
                 clock: Callable[[], float]) -> None:
        self.request = request
        self._text = text
        self._fallback_id = fallback_id
        self._model = model
        self._clock = clock

    def answer(self, body: bytes) -> wt.Response:
        return read_answer(body, text=self._text, fallback_id=self._fallback_id, model=self._model,
                           clock=self._clock)

    def stream(self) -> OpenAIStream:
        return OpenAIStream(fallback_id=self._fallback_id, text=self._text)


class OpenAIDialect:
    """vLLM, SGLang, llama.cpp, TGI, Ollama, OpenAI: one dialect. `clock` fills a missing `created`."""

    name = "openai"

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    @readable
    def build(self, buf: bytes, target: Target) -> OpenAICall:
        view = wire.read_request(buf)
        text = bool(view.TextCompletion())
        request: ChatCompletionRequest | TextCompletionRequest
        request = wire.decode_text_request(buf) if text else wire.decode_request(buf)
        body: dict[str, Any] = _any.decode(msgspec.json.encode(request))
        model = request.model or target.model or ""
        if model:
            body["model"] = model
        else:
            body.pop("model", None)  # an engine serving one model takes a request without one
        if text:
            prompts = body.get("prompt")
            if isinstance(prompts, list) and len(prompts) == 1 and isinstance(prompts[0], str):
                body["prompt"] = prompts[0]
        else:
            _types_back(body)
        _merge_extras(body, view.ExtraJson(), _TEXT_FIELDS if text else _CHAT_FIELDS)
        stream = bool(request.stream)
        if stream:
            body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        request_id = (view.RequestId() or b"").decode("utf-8", "replace")
        fallback_id = ("cmpl-" if text else "chatcmpl-") + (request_id or "bridge")
        engine = EngineRequest(path=under(target, TEXT_PATH if text else CHAT_PATH),
                               headers=_headers(target, stream), body=msgspec.json.encode(body), stream=stream)
        return OpenAICall(engine, text=text, fallback_id=fallback_id, model=model, clock=self._clock)

    def error(self, status: int, headers: Mapping[str, str], body: bytes) -> wt.ErrorInfo:
        return engine_error(status, headers, body, clock=self._clock)


DIALECT: Dialect = OpenAIDialect()  # typed: mypy holds the class to the protocol
