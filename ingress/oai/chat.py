"""OpenAI chat-completions request types, strictly validated and bounded before they reach FlatBuffers."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Raw

INT32_MAX = 2**31 - 1
NO_JSON = Raw()  # the default of optional opaque-JSON fields; compare with `len(raw) == 0`

# Bounds follow OpenAI's documented ranges; every integer is bounded to what its FlatBuffers field holds.
Temperature = Annotated[float, Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, Meta(ge=0.0, le=1.0)]
Penalty = Annotated[float, Meta(ge=-2.0, le=2.0)]
TokenLimit = Annotated[int, Meta(ge=1, le=INT32_MAX)]
ChoiceCount = Annotated[int, Meta(ge=1, le=128)]
Seed = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
TopLogprobs = Annotated[int, Meta(ge=0, le=20)]
ModelName = Annotated[str, Meta(min_length=1, max_length=256)]
# Patterns end in \Z: `$` would also match before a trailing newline.
FunctionName = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_\-]+\Z")]
ShortText = Annotated[str, Meta(max_length=256)]
TokenId = Annotated[str, Meta(pattern=r"^(?:0|[1-9][0-9]{0,9})\Z")]  # one spelling per token id
Bias = Annotated[float, Meta(ge=-100.0, le=100.0)]
MetadataKey = Annotated[str, Meta(min_length=1, max_length=64)]
MetadataValue = Annotated[str, Meta(max_length=512)]
Identifier = Annotated[str, Meta(min_length=1, max_length=256)]  # ids OpenAI gives no bound for


class _Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Unknown fields are refused, as OpenAI does, rather than silently dropped."""


# --- content parts --------------------------------------------------------------------------------


class PromptCacheBreakpoint(_Strict):
    """An explicit prompt-cache breakpoint on a content part (`prompt_cache_options.mode`)."""

    mode: Literal["explicit"]
    ttl: Literal["30m", "12h"] | None = None


class _Part(_Strict, tag_field="type"):
    pass


class TextPart(_Part, tag="text"):
    text: str
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class ImageUrl(_Strict):
    url: Annotated[str, Meta(min_length=1)]
    detail: Literal["auto", "low", "high", "original"] | None = None


class ImagePart(_Part, tag="image_url"):
    image_url: ImageUrl
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class InputAudio(_Strict):
    data: str
    format: Literal["wav", "mp3"]


class AudioPart(_Part, tag="input_audio"):
    input_audio: InputAudio
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class FileRef(_Strict):
    file_data: str | None = None
    file_id: str | None = None
    filename: str | None = None


class FilePart(_Part, tag="file"):
    file: FileRef
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class RefusalPart(_Part, tag="refusal"):
    refusal: str


UserPart = TextPart | ImagePart | AudioPart | FilePart
AssistantPart = TextPart | RefusalPart
ContentPart = TextPart | ImagePart | AudioPart | FilePart | RefusalPart

# --- messages -------------------------------------------------------------------------------------


class FunctionCallIn(_Strict):
    name: str
    arguments: str


class CustomCallIn(_Strict):
    name: str
    input: str


class ToolCallIn(_Strict):
    """A tool call in an assistant message: `function` (the default type) or `custom` (free-form input).
    One struct, not a tagged union: a function call's `type` may be left out."""

    id: Annotated[str, Meta(min_length=1)]
    function: FunctionCallIn | None = None
    type: Literal["function", "custom"] = "function"
    custom: CustomCallIn | None = None


class AudioRef(_Strict):
    """An earlier audio answer, referred to by its id."""

    id: Annotated[str, Meta(min_length=1)]


class _Message(_Strict, tag_field="role"):
    pass


class SystemMessage(_Message, tag="system"):
    content: str | list[TextPart]
    name: str | None = None


class DeveloperMessage(_Message, tag="developer"):
    content: str | list[TextPart]
    name: str | None = None


class UserMessage(_Message, tag="user"):
    content: str | list[UserPart]
    name: str | None = None


class AssistantMessage(_Message, tag="assistant"):
    content: str | list[AssistantPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    refusal: str | None = None
    audio: AudioRef | None = None
    function_call: FunctionCallIn | None = None  # legacy, with `functions`
    # The turn's reasoning given back to the model, as vLLM, SGLang and llama.cpp name it (and as the
    # Responses API's reasoning items travel): a reasoning model's templates put it before the answer.
    reasoning_content: str | None = None


class ToolMessage(_Message, tag="tool"):
    content: str | list[TextPart]
    tool_call_id: Annotated[str, Meta(min_length=1)]


class FunctionMessage(_Message, tag="function"):
    """Legacy: a function's result, answering an assistant's `function_call`."""

    content: str | None
    name: str


Message = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage | FunctionMessage
# Each message class's role (its tag), read once: msgspec builds a struct's config anew on each access.
ROLES: dict[type, str] = {kind: str(kind.__struct_config__.tag) for kind in Message.__args__}

# --- tools and formats ----------------------------------------------------------------------------


class FunctionDef(_Strict):
    name: FunctionName
    description: str | None = None
    parameters: Raw = NO_JSON  # opaque JSON object, checked to be one; empty when absent
    strict: bool | None = None


class Grammar(_Strict):
    definition: str
    syntax: Literal["lark", "regex"]


class _CustomFormat(_Strict, tag_field="type"):
    pass


class CustomTextFormat(_CustomFormat, tag="text"):
    pass


class CustomGrammarFormat(_CustomFormat, tag="grammar"):
    grammar: Grammar


class CustomDef(_Strict):
    name: FunctionName
    description: str | None = None
    format: CustomTextFormat | CustomGrammarFormat | None = None


class Tool(_Strict):
    """A function tool (the default type) or a custom one. One struct, not a tagged union: a function
    tool's `type` may be left out; the codec checks that the object `type` names is the one given."""

    function: FunctionDef | None = None
    type: Literal["function", "custom"] = "function"
    custom: CustomDef | None = None


class LegacyFunction(_Strict):
    """Legacy `functions[]` entry; travels as a function tool."""

    name: FunctionName
    description: str | None = None
    parameters: Raw = NO_JSON  # opaque JSON object, checked to be one; empty when absent


class NamedFunction(_Strict):
    name: FunctionName


class AllowedTools(_Strict):
    mode: Literal["auto", "required"]
    tools: Annotated[list[Raw], Meta(max_length=128)]  # tool definitions as OpenAI spells them, kept opaque


class NamedToolChoice(_Strict):
    """A named function (the default type) or custom tool, or a subset of the tools (`allowed_tools`).
    One struct, as `Tool`: the codec checks that the object `type` names is the one given."""

    function: NamedFunction | None = None
    type: Literal["function", "custom", "allowed_tools"] = "function"
    custom: NamedFunction | None = None
    allowed_tools: AllowedTools | None = None


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice
FunctionCallChoice = Literal["none", "auto"] | NamedFunction  # legacy `function_call`


class JsonSchemaFormat(_Strict):
    name: FunctionName
    description: str | None = None
    schema: Raw = NO_JSON  # opaque JSON object, checked to be one; empty when absent
    strict: bool | None = None


class _Format(_Strict, tag_field="type"):
    pass


class TextFormat(_Format, tag="text"):
    pass


class JsonObjectFormat(_Format, tag="json_object"):
    pass


class JsonSchemaResponseFormat(_Format, tag="json_schema"):
    json_schema: JsonSchemaFormat


ResponseFormat = TextFormat | JsonObjectFormat | JsonSchemaResponseFormat


class VoiceId(_Strict):
    id: Annotated[str, Meta(min_length=1)]


class AudioOutput(_Strict):
    """`audio`: the format and voice of an audio answer (with `modalities: ["audio"]`)."""

    format: Literal["wav", "aac", "mp3", "flac", "opus", "pcm16"]
    voice: Identifier | VoiceId


class Prediction(_Strict, tag_field="type", tag="content"):
    """Predicted Outputs: text the answer is expected to largely repeat."""

    content: str | list[TextPart]


class ModerationMode(_Strict):
    mode: Literal["score", "block"]


class ModerationPolicy(_Strict):
    input: ModerationMode | None = None
    output: ModerationMode | None = None


class Moderation(_Strict):
    model: Identifier
    policy: ModerationPolicy | None = None


class PromptCacheOptions(_Strict):
    mode: Literal["implicit", "explicit"] | None = None
    ttl: Literal["30m"] | None = None


class ApproximateLocation(_Strict):
    city: ShortText | None = None
    country: Annotated[str, Meta(pattern=r"^[A-Za-z]{2}\Z")] | None = None  # ISO 3166-1 alpha-2
    region: ShortText | None = None
    timezone: ShortText | None = None


class UserLocation(_Strict, tag_field="type", tag="approximate"):
    approximate: ApproximateLocation


class WebSearchOptions(_Strict):
    search_context_size: Literal["low", "medium", "high"] | None = None
    user_location: UserLocation | None = None


class StreamOptions(_Strict):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None  # accepted; the edge adds no obfuscation padding


# --- the request ----------------------------------------------------------------------------------


class ChatCompletionRequest(_Strict):
    model: ModelName
    messages: Annotated[list[Message], Meta(min_length=1)]
    frequency_penalty: Penalty | None = None
    logit_bias: dict[TokenId, Bias] | None = None
    logprobs: bool | None = None
    top_logprobs: TopLogprobs | None = None
    max_tokens: TokenLimit | None = None
    max_completion_tokens: TokenLimit | None = None
    metadata: Annotated[dict[MetadataKey, MetadataValue], Meta(max_length=16)] | None = None
    n: ChoiceCount | None = None
    parallel_tool_calls: bool | None = None
    presence_penalty: Penalty | None = None
    reasoning_effort: Annotated[str, Meta(min_length=1, max_length=32)] | None = None
    response_format: ResponseFormat | None = None
    seed: Seed | None = None
    service_tier: Annotated[str, Meta(min_length=1, max_length=32)] | None = None
    stop: str | Annotated[list[str], Meta(max_length=4)] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    temperature: Temperature | None = None
    tool_choice: ToolChoice | None = None
    tools: Annotated[list[Tool], Meta(max_length=128)] | None = None
    top_p: TopP | None = None
    user: ShortText | None = None
    audio: AudioOutput | None = None
    function_call: FunctionCallChoice | None = None  # legacy: travels as tool_choice
    functions: Annotated[list[LegacyFunction], Meta(min_length=1, max_length=128)] | None = None  # legacy: as tools
    modalities: Annotated[list[Literal["text", "audio"]], Meta(max_length=2)] | None = None
    moderation: Moderation | None = None
    prediction: Prediction | None = None
    # OpenAI documents no maximum for the key; 256 as for `user`, which it replaces.
    prompt_cache_key: ShortText | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: Annotated[str, Meta(max_length=128)] | None = None  # OpenAI's documented maximum
    store: bool | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    web_search_options: WebSearchOptions | None = None

    @property
    def legacy_functions(self) -> bool:
        """Sent in the legacy form (`functions`, `function_call`): answered in it too."""
        return self.functions is not None or self.function_call is not None


def one_by_one(value: str | list[str | int | list[int]]) -> list[str | list[int]]:
    """A prompt or input field's items one by one: texts, or token-id lists (a flat list of ids is one
    item). All of one kind: decoding checked it."""
    if isinstance(value, str) or isinstance(value[0], int):
        return [value]  # type: ignore[list-item]  # a flat list holds only ints
    return value  # type: ignore[return-value]  # texts, or lists of ints
