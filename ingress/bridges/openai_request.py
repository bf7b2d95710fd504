"""The OpenAI-compatible dialect, the request side (sans-I/O): our request → the body and headers of
`/v1/chat/completions` or `/v1/completions` on vLLM, SGLang, llama.cpp, TGI, Ollama and OpenAI itself.

The request is the client's, as the edge decoded it, with the model the route names, the route's engine
extras merged at the top level (an extra never replaces a field of OpenAI's request, set or not: such a
key is dropped), usage always asked of a stream (`stream_options.include_usage`: the edge needs the
counts; it shows them to the client only if the client asked), and the target's key as a Bearer token
(never the client's).

The answers, whole and streamed, and every engine quirk they absorb are `openai_answers.py`'s;
`openai.py` joins the two as the dialect.

Errors (the dialect's `error`) keep the engine's status for the client's mistakes, make 401/403 a 502
`upstream_auth_failed` (the bridge's credentials, not the client's), keep 429's and 503's Retry-After,
and carry the engine's text only scrubbed (`scrub`) of keys, tokens, URLs and addresses.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ingress.bridges.dialect import Target
from ingress.oai.chat import ChatCompletionRequest
from ingress.oai.completions import TextCompletionRequest

CHAT_PATH = "/v1/chat/completions"
TEXT_PATH = "/v1/completions"
RESPONSES_PATH = "/v1/responses"

# Fields of OpenAI's requests: an engine extra of one of these names is dropped, never merged over it.
_CHAT_FIELDS = frozenset(ChatCompletionRequest.__struct_fields__) | {"stream_options"}
_TEXT_FIELDS = frozenset(TextCompletionRequest.__struct_fields__) | {"stream_options"}
_json_object = msgspec.json.Decoder(dict[str, Any])
_any = msgspec.json.Decoder()


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


OPENAI_HOSTS = frozenset({"api.openai.com"})  # OpenAI's own API: no `reasoning_content` on its messages


def request_body(request: ChatCompletionRequest | TextCompletionRequest, *, text: bool, model: str,
                 extra_json: bytes | None, host: str | None = None) -> dict[str, Any]:
    """The engine's JSON body for `request`: the route's `model` (none: the engine's one), a lone prompt
    unwrapped, `type: "function"` put back, the route's extras merged, usage asked of a stream. Earlier
    reasoning goes back to engines as their assistant messages' `reasoning_content`; OpenAI's own API
    (`host`) takes none, and keeps its reasoning itself."""
    body: dict[str, Any] = _any.decode(msgspec.json.encode(request))
    if host in OPENAI_HOSTS:
        for message in body.get("messages") or ():
            message.pop("reasoning_content", None)
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
    _merge_extras(body, extra_json, _TEXT_FIELDS if text else _CHAT_FIELDS)
    if request.stream:
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return body


def request_headers(target: Target, stream: bool) -> dict[str, str]:
    headers = {k.lower(): v for k, v in target.headers.items()}
    headers["content-type"] = "application/json"
    headers["accept"] = "text/event-stream" if stream else "application/json"
    if target.api_key:
        headers["authorization"] = f"Bearer {target.api_key}"
    else:
        headers.pop("authorization", None)
    return headers
