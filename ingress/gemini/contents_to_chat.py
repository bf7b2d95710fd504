"""A GenerateContentRequest read as the chat request it amounts to (`as_chat`), so every internal service and
bridge serves it through the one contract.

What has a neutral meaning maps onto chat's fields:

- `systemInstruction` (text parts): a system message, first;
- `user` turns: text, inline images (a data URL), PDFs (a file part), WAV and MP3 audio, plain text files
  (as text); a file by an http(s) URL that is an image (a URL image part, fetched by the route as any);
- `functionResponse` parts: tool messages (the `response` object as JSON text) before the rest of their turn,
  answering by `id`, else the earliest unanswered call of that name;
- `model` turns: text, thought text (`thought: true`) as the turn's `reasoning_content`, `functionCall` parts
  as tool calls, their `args` as JSON text, their ids the call's own or `call_<turn>_<part>` (stable, so the
  same history reads the same);
- function declarations (`parametersJsonSchema` as it is, `parameters` from Google's OpenAPI subset),
  `functionCallingConfig` (AUTO → auto, ANY → required or the one allowed function, NONE → none; several
  allowed functions → allowed_tools; VALIDATED → auto, each function strict);
- `temperature`, `topP`, `candidateCount` → n, `maxOutputTokens` → max_completion_tokens, `stopSequences` →
  stop, `seed`, penalties, `responseLogprobs` → logprobs, `logprobs` → top_logprobs, `serviceTier`;
- `responseMimeType` application/json: `response_format` json_object, or json_schema (strict) from
  `responseJsonSchema` or `responseSchema`;
- `thinkingConfig.thinkingLevel` (lower-cased), else `thinkingBudget`: 0 → none, -1 → the service's default,
  low below 4,096 tokens, medium below 16,384, high above; `includeThoughts` decides whether the answer
  shows the thoughts (`Read.include_thoughts`).

Processing hints shape only how Google's servers work; off Google they have no meaning and are not sent,
and `Read.dropped` names each: `safety_settings`, `labels`, `store`, thought signatures, a part's media
metadata, `media_resolution`, routing and model selection, retrieval config, a declaration's `response`
schema and `behavior`, the Live API's scheduling, and `top_k` (returned apart, for a route that forwards
engine extras). Features that change the answer which only Google serves (its built-in tools,
`cached_content`, files it holds, code execution parts, audio or image output, speech and image configs)
are refused, naming the field by its proto path, as Google's errors do.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field

import msgspec

from ingress.errors import InvalidRequest
from ingress.gemini import contents as g
from ingress.gemini.schema import json_schema
from ingress.oai.chat import (
    NO_JSON,
    AllowedTools,
    AssistantMessage,
    AudioPart,
    ChatCompletionRequest,
    FilePart,
    FileRef,
    FunctionCallIn,
    FunctionDef,
    ImagePart,
    ImageUrl,
    InputAudio,
    JsonObjectFormat,
    JsonSchemaFormat,
    JsonSchemaResponseFormat,
    Message,
    NamedFunction,
    NamedToolChoice,
    ResponseFormat,
    StreamOptions,
    SystemMessage,
    TextPart,
    Tool,
    ToolCallIn,
    ToolChoice,
    ToolMessage,
    UserMessage,
    UserPart,
)

_AUDIO = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/mp3": "mp3", "audio/mpeg": "mp3"}
_IMAGE_SUFFIXES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
                   ".webp": "image/webp"}
# Files only Google can read, though their URIs are https: its Files API's, and videos it fetches itself.
_GOOGLE_HOSTS = ("generativelanguage.googleapis.com", "www.youtube.com", "youtube.com", "youtu.be")
_LEVELS = {"MINIMAL": "minimal", "LOW": "low", "MEDIUM": "medium", "HIGH": "high", "XHIGH": "xhigh"}
_TIERS = {"standard": "default", "flex": "flex", "priority": "priority"}
_GOOGLE_PARTS = ("executable_code", "code_execution_result", "tool_call", "tool_response")
_encoder = msgspec.json.Encoder()
_EMPTY_OBJECT = "{}"


def _refuse(param: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"{param}: {what} is served only by Google's Gemini API, not by the service behind this "
                          "model.", param=param)


@dataclass
class Read:
    """What a GenerateContentRequest amounts to: its chat request, the processing hints not sent (by name,
    for the metric and the access line), `top_k` for a route that forwards engine extras, and whether the
    answer shows the model's thoughts. Read for Google (`as_chat(..., for_gemini=True)`), nothing is refused
    or dropped: the request travels whole beside its reading, and `unread` names what the reading leaves
    out (the features only Google serves)."""

    request: ChatCompletionRequest
    dropped: list[str] = field(default_factory=list)
    top_k: int | None = None
    include_thoughts: bool = False
    unread: list[str] = field(default_factory=list)


class _Reader:
    def __init__(self, for_gemini: bool) -> None:
        self.dropped: list[str] = []
        self.unread: list[str] = []
        self._for_gemini = for_gemini
        self._pending: list[tuple[str, str]] = []  # the calls not yet answered: (id, name), in order

    def hint(self, name: str) -> None:
        if not self._for_gemini and name not in self.dropped:
            self.dropped.append(name)

    def feature(self, param: str, what: str) -> None:
        """A feature only Google serves, at `param`: refused, unless the request goes to Google whole."""
        if not self._for_gemini:
            raise _refuse(param, what)
        self.unread.append(param)

    def metadata(self, part: g.Part) -> None:
        if part.thought_signature is not None:
            self.hint("thought_signature")  # only Gemini reads its signatures back
        for name in g.PART_METADATA:
            if len(getattr(part, name)):
                self.hint(name)

    def system(self, content: g.Content) -> SystemMessage:
        texts = []
        for j, part in enumerate(content.parts):
            self.metadata(part)
            if part.text is not None:
                texts.append(part.text)
            elif part.thought_signature is None:
                self.feature(f"system_instruction.parts[{j}]", "A system instruction other than text")
        return SystemMessage(content="\n".join(texts))

    def inline(self, blob: g.Blob, where: str) -> list[UserPart]:
        mime = blob.mime_type.lower()
        if mime.startswith("image/"):
            return [ImagePart(image_url=ImageUrl(url=f"data:{mime};base64,{blob.data}"))]
        if mime == "application/pdf":
            return [FilePart(file=FileRef(file_data=f"data:application/pdf;base64,{blob.data}",
                                          filename=blob.display_name or "document.pdf"))]
        if mime in _AUDIO:
            return [AudioPart(input_audio=InputAudio(data=blob.data, format=_AUDIO[mime]))]  # type: ignore[arg-type]  # a key of _AUDIO
        if mime.startswith("text/") or mime == "application/json":
            try:
                return [TextPart(text=base64.b64decode(blob.data, validate=True).decode())]
            except (binascii.Error, UnicodeDecodeError):
                raise InvalidRequest(f"Invalid value at '{where}.data': Invalid value (bytes), base64 text in "
                                     "UTF-8 expected.", param=f"{where}.data") from None
        self.feature(f"{where}.mime_type", f"Inline data of type '{blob.mime_type}'")
        return []

    def file(self, data: g.FileData, where: str) -> list[UserPart]:
        """A file by URI: an image on the web is fetched by the route as any URL image; other files, and files
        Google holds (its Files API's, Cloud Storage's, YouTube's) only Google reads."""
        uri = data.file_uri
        scheme, _, rest = uri.partition("://")
        host = rest.split("/", 1)[0].split("?", 1)[0].lower()
        mime = (data.mime_type or _IMAGE_SUFFIXES.get(_suffix(rest), "")).lower()
        if scheme.lower() in ("http", "https") and host not in _GOOGLE_HOSTS and mime.startswith("image/"):
            return [ImagePart(image_url=ImageUrl(url=uri))]
        self.feature(f"{where}.file_uri", f"A file by URI ('{uri[:100]}')")
        return []

    def answer(self, response: g.FunctionResponse, where: str) -> ToolMessage:
        if response.parts:
            self.feature(f"{where}.parts", "Media in a function response")
        for name in ("will_continue", "scheduling"):
            if getattr(response, name) is not None:
                self.hint(f"function_response.{name}")
        call_id = self._match(response, where)
        content = bytes(response.response).decode() if len(response.response) else _EMPTY_OBJECT
        return ToolMessage(content=content, tool_call_id=call_id)

    def _match(self, response: g.FunctionResponse, where: str) -> str:
        """The id of the call a response answers: its own id's, else the earliest unanswered call of its name."""
        for n, (call_id, name) in enumerate(self._pending):
            if (call_id == response.id) if response.id else (name == response.name):
                del self._pending[n]
                return call_id
        if response.id:
            return response.id
        raise InvalidRequest(f"* GenerateContentRequest.{where}.name: no function call named '{response.name}' "
                             "precedes this function response.", param=f"{where}.name")

    def user(self, content: g.Content, where: str) -> list[Message]:
        results: list[Message] = []  # function responses first: they answer the turn before
        parts: list[UserPart] = []
        for j, part in enumerate(content.parts):
            at = f"{where}.parts[{j}]"
            self.metadata(part)
            if part.text is not None:
                if part.thought:
                    self.hint("thought")  # a thought in a user turn: nothing to read it as
                else:
                    parts.append(TextPart(text=part.text))
            elif part.function_response is not None:
                results.append(self.answer(part.function_response, f"{at}.function_response"))
            elif part.inline_data is not None:
                parts += self.inline(part.inline_data, f"{at}.inline_data")
            elif part.file_data is not None:
                parts += self.file(part.file_data, f"{at}.file_data")
            elif part.function_call is not None:
                self.feature(f"{at}.function_call", "A function call in a user turn")
            else:
                self.google_part(part, at)
        if parts:
            only = parts[0] if len(parts) == 1 else None
            results.append(UserMessage(content=only.text if isinstance(only, TextPart) else parts))
        return results

    def model(self, content: g.Content, i: int) -> AssistantMessage:
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[ToolCallIn] = []
        self._pending = []  # a new model turn: what the last one called is answered or never will be
        for j, part in enumerate(content.parts):
            at = f"contents[{i}].parts[{j}]"
            self.metadata(part)
            if part.text is not None:
                (thoughts if part.thought else texts).append(part.text)
            elif part.function_call is not None:
                call = part.function_call
                call_id = call.id or f"call_{i}_{j}"
                if len(call.partial_args) or call.will_continue is not None:
                    self.hint("function_call.partial_args")
                arguments = bytes(call.args).decode() if len(call.args) else _EMPTY_OBJECT
                calls.append(ToolCallIn(id=call_id, function=FunctionCallIn(name=call.name, arguments=arguments)))
                self._pending.append((call_id, call.name))
            elif part.inline_data is not None or part.file_data is not None:
                kind = "inline_data" if part.inline_data is not None else "file_data"
                self.feature(f"{at}.{kind}", "Media in a model turn")
            elif part.function_response is not None:
                self.feature(f"{at}.function_response", "A function response in a model turn")
            else:
                self.google_part(part, at)
        return AssistantMessage(content="".join(texts) if texts or not calls else None, tool_calls=calls or None,
                                reasoning_content="".join(thoughts) if thoughts else None)

    def google_part(self, part: g.Part, at: str) -> None:
        for name in _GOOGLE_PARTS:
            if len(getattr(part, name)):
                self.feature(f"{at}.{name}", f"A '{name}' part")

    def tools(self, tools: list[g.Tool], strict: bool | None) -> list[Tool]:
        out = []
        for i, tool in enumerate(tools):
            for name in g.BUILT_IN_TOOLS:
                if len(getattr(tool, name)):
                    self.feature(f"tools[{i}].{name}", f"Google's tool '{name}'")
            for f in tool.function_declarations or ():
                for name in ("response", "response_json_schema"):
                    if len(getattr(f, name)):
                        self.hint(f"function_declarations.{name}")
                if f.behavior is not None:
                    self.hint("function_declarations.behavior")
                parameters = (f.parameters_json_schema if len(f.parameters_json_schema)
                              else json_schema(f.parameters) if len(f.parameters) else NO_JSON)
                out.append(Tool(function=FunctionDef(name=f.name, description=f.description, parameters=parameters,
                                                     strict=strict)))
        return out


def tool_choice(config: g.FunctionCallingConfig | None, declared: int) -> tuple[ToolChoice | None, bool | None]:
    """`functionCallingConfig` as chat's tool_choice, and each function's `strict` (VALIDATED's schema
    adherence). `declared`: how many functions the request declares."""
    if config is None or config.mode in (None, "MODE_UNSPECIFIED"):
        return None, None
    if config.mode == "NONE":
        return "none", None
    names = config.allowed_function_names or []
    required = config.mode == "ANY"
    strict = True if config.mode == "VALIDATED" else None
    if not names or len(set(names)) >= declared:
        return ("required" if required else "auto"), strict
    if len(names) == 1 and required:
        return NamedToolChoice(function=NamedFunction(name=names[0])), strict
    tools = [msgspec.Raw(_encoder.encode({"type": "function", "function": {"name": n}})) for n in names]
    return NamedToolChoice(type="allowed_tools", allowed_tools=AllowedTools(mode="required" if required else "auto",
                                                                          tools=tools)), strict


def reasoning_effort(thinking: g.ThinkingConfig | None) -> str | None:
    """The thinking level, else the budget's order of magnitude; None: the service's default."""
    if thinking is None:
        return None
    if thinking.thinking_level is not None and thinking.thinking_level in _LEVELS:
        return _LEVELS[thinking.thinking_level]
    budget = thinking.thinking_budget
    if budget is None or budget < 0:
        return None
    return "none" if budget == 0 else "low" if budget < 4096 else "medium" if budget < 16384 else "high"


def response_format(config: g.GenerationConfig, reader: _Reader) -> ResponseFormat | None:
    mime = (config.response_mime_type or "text/plain").lower()
    if mime == "text/plain":
        return None
    if mime != "application/json":
        reader.feature("generation_config.response_mime_type", f"The response type '{config.response_mime_type}'")
        return None
    schema = (config.response_json_schema if len(config.response_json_schema)
              else json_schema(config.response_schema) if len(config.response_schema) else None)
    if schema is None:
        return JsonObjectFormat()
    return JsonSchemaResponseFormat(json_schema=JsonSchemaFormat(name="response", schema=schema, strict=True))


# generationConfig's fields only Google serves (they change the answer) and its processing hints.
_CONFIG_FEATURES = ("speech_config", "image_config", "translation_config", "audio_transcription_config",
                    "response_format")
_CONFIG_HINTS = ("routing_config", "model_selection_config", "media_resolution", "audio_timestamp",
                 "enable_affective_dialog", "enable_enhanced_civic_answers")


def _generation(config: g.GenerationConfig, reader: _Reader) -> None:
    for name in _CONFIG_FEATURES:
        if len(getattr(config, name)):
            reader.feature(f"generation_config.{name}", f"'{name}'")
    for name in _CONFIG_HINTS:
        value = getattr(config, name)
        if value is not None and (not isinstance(value, msgspec.Raw) or len(value)):
            reader.hint(f"generation_config.{name}")
    if any(m.upper() not in ("TEXT", "MODALITY_UNSPECIFIED") for m in config.response_modalities or ()):
        reader.feature("generation_config.response_modalities", "An answer other than text")


def as_chat(r: g.GenerateContentRequest, model: str, *, stream: bool = False, for_gemini: bool = False) -> Read:
    """The chat request a GenerateContentRequest for `model` (the URL's) amounts to; `stream`: asked at
    streamGenerateContent. A feature only Google serves is refused, unless the request goes to Google whole
    (`for_gemini`): then its reading leaves the feature out."""
    reader = _Reader(for_gemini)
    if r.cached_content is not None:
        reader.feature("cached_content", "Cached content")
    if len(r.continuation_token):
        reader.feature("continuation_token", "A continuation token")
    for name in ("safety_settings", "labels", "store"):
        if getattr(r, name) is not None:
            reader.hint(name)
    if r.tool_config is not None:
        if len(r.tool_config.retrieval_config) or r.tool_config.include_server_side_tool_invocations is not None:
            reader.hint("tool_config.retrieval_config")
        if (c := r.tool_config.function_calling_config) is not None and c.stream_function_call_arguments is not None:
            reader.hint("tool_config.function_calling_config.stream_function_call_arguments")
    messages: list[Message] = []
    if r.system_instruction is not None:
        messages.append(reader.system(r.system_instruction))
    for i, content in enumerate(r.contents):
        if content.role == "model":
            messages.append(reader.model(content, i))
        else:
            messages += reader.user(content, f"contents[{i}]")
    config = r.generation_config or g.GenerationConfig()
    _generation(config, reader)
    declared = sum(len(t.function_declarations or ()) for t in r.tools or ())
    choice, strict = tool_choice(r.tool_config.function_calling_config if r.tool_config else None, declared)
    tools = reader.tools(r.tools, strict) if r.tools else []
    thinking = config.thinking_config
    tier = _TIERS.get((r.service_tier or "").lower()) if r.service_tier else None
    chat = ChatCompletionRequest(
        model=model, messages=messages, temperature=config.temperature, top_p=config.top_p,
        n=config.candidate_count, max_completion_tokens=config.max_output_tokens, stop=config.stop_sequences,
        seed=config.seed, presence_penalty=config.presence_penalty, frequency_penalty=config.frequency_penalty,
        logprobs=config.response_logprobs, top_logprobs=config.logprobs if config.response_logprobs else None,
        response_format=response_format(config, reader), reasoning_effort=reasoning_effort(thinking),
        tools=tools or None, tool_choice=choice if tools else None, service_tier=tier,
        stream=True if stream else None, stream_options=StreamOptions(include_usage=True) if stream else None,
    )
    include = bool(thinking is not None and thinking.include_thoughts)
    return Read(chat, reader.dropped, config.top_k, include, reader.unread)


def _suffix(path: str) -> str:
    name = path.split("?", 1)[0].rsplit("/", 1)[-1].lower()
    return name[name.rfind("."):] if "." in name else ""
