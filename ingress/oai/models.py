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


class _Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Unknown fields are refused, as OpenAI does, rather than silently dropped."""


# --- content parts --------------------------------------------------------------------------------


class _Part(_Strict, tag_field="type"):
    pass


class TextPart(_Part, tag="text"):
    text: str


class ImageUrl(_Strict):
    url: Annotated[str, Meta(min_length=1)]
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(_Part, tag="image_url"):
    image_url: ImageUrl


class InputAudio(_Strict):
    data: str
    format: Literal["wav", "mp3"]


class AudioPart(_Part, tag="input_audio"):
    input_audio: InputAudio


class FileRef(_Strict):
    file_data: str | None = None
    file_id: str | None = None
    filename: str | None = None


class FilePart(_Part, tag="file"):
    file: FileRef


class RefusalPart(_Part, tag="refusal"):
    refusal: str


UserPart = TextPart | ImagePart | AudioPart | FilePart
AssistantPart = TextPart | RefusalPart
ContentPart = TextPart | ImagePart | AudioPart | FilePart | RefusalPart

# --- messages -------------------------------------------------------------------------------------


class FunctionCallIn(_Strict):
    name: str
    arguments: str


class ToolCallIn(_Strict):
    id: Annotated[str, Meta(min_length=1)]
    function: FunctionCallIn
    type: Literal["function"] = "function"


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


class ToolMessage(_Message, tag="tool"):
    content: str | list[TextPart]
    tool_call_id: Annotated[str, Meta(min_length=1)]


Message = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage

# --- tools and formats ----------------------------------------------------------------------------


class FunctionDef(_Strict):
    name: FunctionName
    description: str | None = None
    parameters: Raw = NO_JSON  # opaque JSON object, checked to be one; empty when absent
    strict: bool | None = None


class Tool(_Strict):
    function: FunctionDef
    type: Literal["function"] = "function"


class NamedFunction(_Strict):
    name: FunctionName


class NamedToolChoice(_Strict):
    function: NamedFunction
    type: Literal["function"] = "function"


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


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
