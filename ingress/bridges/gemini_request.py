"""Google's Gemini API, the request side (sans-I/O): our chat request → the body of
`POST /v1beta/models/{model}:generateContent` (`:streamGenerateContent?alt=sse`); a Gemini request carried
whole (`gemini_json`) → the same, as its client sent it; and the thought signatures that ride in tool call ids.

Every field of the chat request is sent as Google spells it, or refused with `Unsupported` naming it:
`FIELDS` says which, and tests/unit/bridges/test_gemini_request.py holds it to the struct. The answers, the
event stream and the errors are `gemini_answers.py`'s; `gemini.py` joins the two as the dialect.

Thought signatures. Gemini signs its thinking with an opaque `thoughtSignature` on the parts of its answer,
and wants them back on those parts next turn (a function call without its signature is refused by Gemini 3).
Our contract carries one signature per answer, and OpenAI's and Anthropic's clients give a tool call back
only by its id: so each call's signature travels in its id (`<id>__ts_<signature, URL-safe base64>`), which
every client returns as it got it, and is put back on the call's part here, whatever the client.
"""

from __future__ import annotations

import mimetypes
import re
from typing import Any
from urllib.parse import quote, urlsplit

import msgspec

from ingress.bridges.dialect import Target, Unsupported
from ingress.oai import chat

API = "/v1beta/models/"
SIGNED = "__ts_"  # in a tool call's id: the signature of the call's part follows
GENERATED = "gcall_"  # a call id the bridge made (Gemini gave none): not sent back to Google
_TO_URLSAFE = str.maketrans("+/", "-_")
_FROM_URLSAFE = str.maketrans("-_", "+/")
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,(.*)\Z", re.DOTALL)
_AUDIO = {"wav": "audio/wav", "mp3": "audio/mp3"}
# reasoning_effort → thinkingConfig.thinkingBudget: inside the edge's reading of a budget as an effort.
BUDGETS = {"none": 0, "minimal": 512, "low": 1024, "medium": 8192, "high": 24576, "xhigh": 32768}
TIERS = {"default": "standard", "flex": "flex", "priority": "priority"}  # OpenAI's service_tier → Google's

# Every field of the chat request, and what becomes of it (a test holds this to the struct's fields).
FIELDS = {
    "model": "the URL's model (the route's name for it, else the target's)",
    "messages": "systemInstruction (system and developer, in order) and contents (user/model turns merged; "
                "tool results as functionResponse parts)",
    "max_tokens": "generationConfig.maxOutputTokens",
    "max_completion_tokens": "generationConfig.maxOutputTokens, before max_tokens",
    "temperature": "generationConfig.temperature", "top_p": "generationConfig.topP",
    "n": "generationConfig.candidateCount", "seed": "generationConfig.seed",
    "presence_penalty": "generationConfig.presencePenalty", "frequency_penalty": "generationConfig.frequencyPenalty",
    "stop": "generationConfig.stopSequences",
    "stream": ":streamGenerateContent?alt=sse",
    "stream_options": "nothing to send: Google always counts usage; the edge shows it when asked",
    "tools": "tools[].functionDeclarations, each with its JSON schema as parametersJsonSchema (custom tools refused)",
    "tool_choice": "toolConfig.functionCallingConfig: auto/required/none/named/allowed_tools → AUTO/ANY/NONE/"
                   "ANY with allowedFunctionNames",
    "functions": "travels as tools", "function_call": "travels as tool_choice",
    "response_format": "generationConfig.responseMimeType application/json, json_schema as responseJsonSchema",
    "reasoning_effort": "generationConfig.thinkingConfig: thinkingBudget (none 0 ... xhigh 32768), includeThoughts",
    "service_tier": "serviceTier: default → standard, flex, priority (others refused)",
    "user": "nothing to send: Google's API takes no end-user id",
    "safety_identifier": "nothing to send: Google's API takes no end-user id",
    "prompt_cache_key": "nothing to send: Google caches a prompt's prefix itself (implicit caching)",
    "prompt_cache_retention": "nothing to send: implicit caching's retention is Google's",
    "parallel_tool_calls": "refused when false (Gemini decides)", "logprobs": "refused when true",
    "top_logprobs": "refused", "logit_bias": "refused", "metadata": "refused", "store": "refused when true",
    "audio": "refused", "modalities": "refused unless text only", "prediction": "refused", "moderation": "refused",
    "prompt_cache_options": "refused (Google's explicit caches are cachedContent, in its own API)",
    "verbosity": "refused", "web_search_options": "refused (googleSearch is a tool of Google's own API)",
}
# What the bridge itself writes: a forwarding route's extra field never replaces one of these.
SENT = frozenset({"contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "serviceTier"})


def _refuse(param: str, what: str) -> Unsupported:
    return Unsupported(param, f"{what} is not supported by this model's provider (Google Gemini).")


# --- paths, headers, signatures -----------------------------------------------------------------------


def model_path(target: Target, model: str, method: str) -> str:
    """`{base}/v1beta/models/{model}:{method}`, under the target's own path (which may end in /v1beta or /v1)."""
    base = urlsplit(target.url).path.rstrip("/").removesuffix("/v1beta").removesuffix("/v1")
    return f"{base}{API}{quote(model.removeprefix('models/'), safe='')}:{method}"


def request_headers(target: Target) -> dict[str, str]:
    """The request's headers: the target's own, and its key (never the client's) as Google takes it."""
    headers = {"content-type": "application/json"}
    headers.update(target.headers)
    if target.api_key is not None:
        headers["x-goog-api-key"] = target.api_key
    return headers


def signed_id(base: str, signature: str | None) -> str:
    """A tool call's id carrying its part's thought signature (base64), URL-safe so that every client keeps it."""
    if not signature:
        return base
    return f"{base}{SIGNED}{signature.translate(_TO_URLSAFE).rstrip('=')}"


def split_id(call_id: str) -> tuple[str | None, str | None]:
    """A tool call id as (the id to send Google, or None for one the bridge made; the signature, or None)."""
    base, signed, rest = call_id.partition(SIGNED)
    signature = rest.translate(_FROM_URLSAFE) + "=" * (-len(rest) % 4) if signed and rest else None
    return (None if base.startswith(GENERATED) else base), signature


# --- a Gemini request as its client sent it ------------------------------------------------------------

_fields = msgspec.json.Decoder(dict[str, msgspec.Raw])
_any = msgspec.json.Decoder()
_json = msgspec.json.Encoder()


def _restored_turn(parts: list[Any]) -> None:
    """A model turn's calls given back their signatures from their ids; a signature thus restored is taken off
    any other part of the turn (the edge shows an answer's signature on its first part)."""
    restored: set[str] = set()
    for part in parts:
        for key in ("functionCall", "function_call", "functionResponse", "function_response"):
            call = part.get(key) if isinstance(part, dict) else None
            if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                continue
            base, signature = split_id(call["id"])
            if base is None:
                del call["id"]
            else:
                call["id"] = base
            if signature is not None and key in ("functionCall", "function_call"):
                if not (part.get("thoughtSignature") or part.get("thought_signature")):
                    part["thoughtSignature"] = signature
                restored.add(signature)
    for part in parts:
        if isinstance(part, dict) and "functionCall" not in part and "function_call" not in part \
                and part.get("thoughtSignature") in restored:
            del part["thoughtSignature"]


def as_sent(sent: bytes) -> bytes:
    """A GenerateContentRequest as its client sent it (checked at the edge), without a `model` of its own (the
    URL names the route's): every other field as it came, but the tool call ids the bridge made, which go
    back to what Google gave (its id, and the part's thought signature)."""
    if SIGNED.encode() not in sent and GENERATED.encode() not in sent:
        fields = _fields.decode(sent)
        if "model" not in fields:
            return sent
        del fields["model"]
        return _json.encode(fields)
    doc = _any.decode(sent)
    doc.pop("model", None)
    for content in doc.get("contents") or ():
        if isinstance(content, dict) and isinstance(content.get("parts"), list):
            _restored_turn(content["parts"])
    return _json.encode(doc)


# --- a chat request ------------------------------------------------------------------------------------


def _texts(content: str | list[chat.TextPart] | list[chat.AssistantPart] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.text if isinstance(p, chat.TextPart) else p.refusal for p in content)


def _media(url: str, where: str, what: str) -> dict[str, Any]:
    if (data := _DATA_URL.match(url)) is not None:
        return {"inlineData": {"mimeType": data[1], "data": data[2]}}
    if url.startswith(("https://", "http://", "gs://")):
        mime, _ = mimetypes.guess_type(urlsplit(url).path)
        return {"fileData": {"fileUri": url, **({"mimeType": mime} if mime else {})}}
    raise _refuse(where, f"{what} that is neither a base64 data: URL nor a URL Google can fetch")


def _user_parts(content: str | list[chat.UserPart], where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if isinstance(part, chat.TextPart):
            parts += [{"text": part.text}] if part.text else []
        elif isinstance(part, chat.ImagePart):
            if part.image_url.detail not in (None, "auto"):
                raise _refuse(f"{at}.image_url.detail", "An image's detail")
            parts.append(_media(part.image_url.url, f"{at}.image_url.url", "An image"))
        elif isinstance(part, chat.AudioPart):
            parts.append({"inlineData": {"mimeType": _AUDIO[part.input_audio.format], "data": part.input_audio.data}})
        elif part.file.file_data is not None:
            parts.append(_media(part.file.file_data, f"{at}.file.file_data", "A file"))
        else:
            raise _refuse(f"{at}.file.file_id", "A file by OpenAI's file id")
    return parts


def _arguments(text: str, where: str) -> Any:
    try:
        value = msgspec.json.decode(text or "{}")
    except msgspec.DecodeError:
        value = None
    if not isinstance(value, dict):
        raise Unsupported(where, "A tool call's arguments must be a JSON object to be sent to Google.")
    return value


def _result(text: str) -> Any:
    """A tool's result as Google's `response` object: a JSON object as it is, anything else as its output."""
    try:
        value = msgspec.json.decode(text) if text.lstrip().startswith("{") else None
    except msgspec.DecodeError:
        value = None
    return value if isinstance(value, dict) else {"output": text}


class _Contents:
    """The conversation as Google takes it: system apart, `user` and `model` turns (same-role turns merged),
    each tool result a functionResponse part naming its call's function."""

    def __init__(self) -> None:
        self.system: list[str] = []
        self.turns: list[dict[str, Any]] = []
        self.names: dict[str, str] = {}  # a call's id → its function's name
        self.legacy: dict[str, int] = {}  # legacy function calls still unanswered, by name

    def add(self, role: str, parts: list[dict[str, Any]]) -> None:
        if not parts:
            return
        if self.turns and self.turns[-1]["role"] == role:
            self.turns[-1]["parts"].extend(parts)
        else:
            self.turns.append({"role": role, "parts": parts})

    def message(self, i: int, m: chat.Message) -> None:
        where = f"messages[{i}]"
        if isinstance(m, chat.SystemMessage | chat.DeveloperMessage):
            self.system.append(_texts(m.content))
        elif isinstance(m, chat.UserMessage):
            self.add("user", _user_parts(m.content, f"{where}.content"))
        elif isinstance(m, chat.AssistantMessage):
            self.add("model", self._model_parts(where, m))
        elif isinstance(m, chat.ToolMessage):
            name = self.names.get(m.tool_call_id)
            if name is None:
                raise Unsupported(f"{where}.tool_call_id", "No tool call with this id comes before this result.")
            self.add("user", [{"functionResponse": {"name": name, "response": _result(_texts(m.content))}}])
        else:  # the legacy function message: the result of the last call of that name
            if not self.legacy.get(m.name):
                raise Unsupported(f"{where}.name", f"No function_call of {m.name!r} comes before this result.")
            self.legacy[m.name] -= 1
            self.add("user", [{"functionResponse": {"name": m.name, "response": _result(m.content or "")}}])

    def _model_parts(self, where: str, m: chat.AssistantMessage) -> list[dict[str, Any]]:
        if m.audio is not None:
            raise _refuse(f"{where}.audio", "An earlier audio answer")
        text = _texts(m.content) + (m.refusal or "")
        parts: list[dict[str, Any]] = [{"text": text}] if text else []
        for j, call in enumerate(m.tool_calls or ()):
            if call.function is None:
                raise _refuse(f"{where}.tool_calls[{j}].type", "A custom tool's call")
            self.names[call.id] = call.function.name
            _, signature = split_id(call.id)
            part: dict[str, Any] = {"functionCall": {
                "name": call.function.name,
                "args": _arguments(call.function.arguments, f"{where}.tool_calls[{j}].function.arguments")}}
            if signature is not None:
                part["thoughtSignature"] = signature
            parts.append(part)
        if (legacy := m.function_call) is not None:
            self.legacy[legacy.name] = self.legacy.get(legacy.name, 0) + 1
            parts.append({"functionCall": {"name": legacy.name,
                                           "args": _arguments(legacy.arguments, f"{where}.function_call.arguments")}})
        return parts


def _declaration(j: int, tool: chat.Tool) -> dict[str, Any]:
    if tool.function is None:
        raise _refuse(f"tools[{j}].type", "A custom tool")
    f = tool.function
    out: dict[str, Any] = {"name": f.name}
    if f.description is not None:
        out["description"] = f.description
    if len(f.parameters):
        out["parametersJsonSchema"] = msgspec.json.decode(f.parameters)
    return out


def _tool_config(r: chat.ChatCompletionRequest) -> dict[str, Any] | None:
    choice = r.tool_choice
    if choice is None or not r.tools:
        return None
    if isinstance(choice, str):
        return {"functionCallingConfig": {"mode": {"auto": "AUTO", "required": "ANY", "none": "NONE"}[choice]}}
    if choice.function is not None:
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [choice.function.name]}}
    if choice.allowed_tools is not None:
        names = []
        for k, raw in enumerate(choice.allowed_tools.tools):
            named = msgspec.json.decode(raw)
            name = (named.get("function") or {}).get("name") if isinstance(named, dict) else None
            if not isinstance(name, str):
                raise _refuse(f"tool_choice.allowed_tools.tools[{k}]", "An allowed tool other than a function")
            names.append(name)
        if choice.allowed_tools.mode == "auto":
            raise _refuse("tool_choice.allowed_tools.mode", "Allowed tools the model may also not call ('auto')")
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": names}}
    raise _refuse("tool_choice.type", f"A tool choice of type {choice.type}")


def _refused_fields(r: chat.ChatCompletionRequest) -> None:
    """Every parameter Gemini cannot honour, refused by name before anything is sent."""
    checks: list[tuple[str, bool]] = [
        ("parallel_tool_calls", r.parallel_tool_calls is False), ("logprobs", bool(r.logprobs)),
        ("top_logprobs", r.top_logprobs is not None), ("logit_bias", r.logit_bias is not None),
        ("metadata", r.metadata is not None), ("store", bool(r.store)), ("audio", r.audio is not None),
        ("modalities", r.modalities is not None and r.modalities != ["text"]),
        ("prediction", r.prediction is not None), ("moderation", r.moderation is not None),
        ("prompt_cache_options", r.prompt_cache_options is not None), ("verbosity", r.verbosity is not None),
        ("web_search_options", r.web_search_options is not None),
        ("reasoning_effort", r.reasoning_effort is not None and r.reasoning_effort not in BUDGETS),
        ("service_tier", r.service_tier is not None and r.service_tier not in TIERS and r.service_tier != "auto"),
    ]
    for name, refused in checks:
        if refused:
            raise _refuse(name, f"The parameter {name!r} (as given)")


def _generation_config(r: chat.ChatCompletionRequest) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for name, value in (("temperature", r.temperature), ("topP", r.top_p), ("candidateCount", r.n),
                        ("maxOutputTokens", r.max_completion_tokens or r.max_tokens), ("seed", r.seed),
                        ("presencePenalty", r.presence_penalty), ("frequencyPenalty", r.frequency_penalty)):
        if value is not None:
            config[name] = value
    if r.stop is not None:
        config["stopSequences"] = [r.stop] if isinstance(r.stop, str) else r.stop
    if isinstance(r.response_format, chat.JsonObjectFormat):
        config["responseMimeType"] = "application/json"
    elif isinstance(r.response_format, chat.JsonSchemaResponseFormat):
        config["responseMimeType"] = "application/json"
        schema = r.response_format.json_schema.schema
        config["responseJsonSchema"] = msgspec.json.decode(schema) if len(schema) else {"type": "object"}
    if r.reasoning_effort is not None:
        budget = BUDGETS[r.reasoning_effort]
        config["thinkingConfig"] = {"thinkingBudget": budget, "includeThoughts": True} if budget \
            else {"thinkingBudget": 0}
    return config


def request_body(r: chat.ChatCompletionRequest, extra: bytes | None = None) -> dict[str, Any]:
    """The GenerateContentRequest for a chat request (`extra`: a forwarding route's fields, a JSON object:
    `top_k` is generationConfig.topK, the rest top-level fields of Google's request)."""
    _refused_fields(r)
    contents = _Contents()
    for i, m in enumerate(r.messages):
        contents.message(i, m)
    if not contents.turns:
        raise Unsupported("messages", "Gemini needs at least one message that is not empty or a system message.")
    body: dict[str, Any] = {"contents": contents.turns}
    if system := "\n\n".join(s for s in contents.system if s):
        body["systemInstruction"] = {"parts": [{"text": system}]}
    tools = [_declaration(j, t) for j, t in enumerate(r.tools or ())]
    if tools:
        body["tools"] = [{"functionDeclarations": tools}]
    if (config := _tool_config(r)) is not None:
        body["toolConfig"] = config
    generation = _generation_config(r)
    if r.service_tier in TIERS:
        body["serviceTier"] = TIERS[r.service_tier]
    if extra:
        extras: dict[str, Any] = msgspec.json.decode(extra)
        if "top_k" in extras:
            generation["topK"] = extras.pop("top_k")
        if clash := sorted(extras.keys() & (body.keys() | SENT)):
            raise Unsupported(clash[0], f"The extra field {clash[0]!r} would replace what the bridge sends.")
        body.update(extras)
    if generation:
        body["generationConfig"] = generation
    return body
