"""Google's `GenerateContentRequest` (`POST /v1beta/models/{model}:generateContent`), strictly typed (decoded by
contents_codec.py).

Fields are Google's JSON names (lowerCamelCase); the decoder also reads their proto names (snake_case), which
Google's parser accepts and the `google-genai` Python SDK sends for some nested fields (`inlineData.mime_type`,
`parameters_json_schema`, `thinkingConfig.thinking_budget`). What the edge reads is typed and bounded; JSON
only Google reads (a built-in tool's settings, speech and image configs, a part's media metadata) and JSON the
edge passes on as it is (function arguments and responses, schemas) is kept as `msgspec.Raw`, present when
`len(raw) > 0`. Unknown fields are refused, as Google refuses them.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Raw

from ingress.oai.chat import INT32_MAX, NO_JSON, ChoiceCount, Penalty, Seed, Temperature, TopLogprobs, TopP

Count = Annotated[int, Meta(ge=1, le=INT32_MAX)]
ThinkingBudget = Annotated[int, Meta(ge=-1, le=INT32_MAX)]  # -1: the model decides; 0: no thinking
Mode = Literal["MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED"]
ThinkingLevel = Literal["THINKING_LEVEL_UNSPECIFIED", "MINIMAL", "LOW", "MEDIUM", "HIGH", "XHIGH"]
Role = Literal["user", "model", "function"]  # "function": older clients' turn of function responses

# Google's own tools, by their field in `tools[]`: each changes the answer, and only Google serves it.
BUILT_IN_TOOLS = ("google_search", "google_search_retrieval", "code_execution", "url_context", "google_maps",
                  "file_search", "computer_use", "mcp_servers", "retrieval", "enterprise_web_search",
                  "parallel_ai_search", "exa_ai_search")


class In(msgspec.Struct, rename="camel", forbid_unknown_fields=True, omit_defaults=True):
    """Unknown fields are refused, as Google does."""


# --- parts ----------------------------------------------------------------------------------------


class Blob(In):
    """`inlineData`: bytes in the request, base64."""

    mime_type: str
    data: str
    display_name: str | None = None


class FileData(In):
    """`fileData`: a file by URI (Google's Files API, Cloud Storage, YouTube, or the web)."""

    file_uri: Annotated[str, Meta(min_length=1)]
    mime_type: str | None = None
    display_name: str | None = None


class FunctionCall(In):
    name: Annotated[str, Meta(min_length=1)]
    args: Raw = NO_JSON  # a JSON object, checked to be one; absent: {}
    id: str | None = None
    partial_args: Raw = NO_JSON  # Vertex's streamed arguments: only Google reads them
    will_continue: bool | None = None


class FunctionResponsePart(In):
    """Media a function returns beside its `response`."""

    inline_data: Blob | None = None
    file_data: FileData | None = None
    media_processing: Raw = NO_JSON
    media_resolution: Raw = NO_JSON
    video_metadata: Raw = NO_JSON
    document_metadata: Raw = NO_JSON
    spreadsheet_metadata: Raw = NO_JSON
    audio_metadata: Raw = NO_JSON


class FunctionResponse(In):
    name: Annotated[str, Meta(min_length=1)]
    response: Raw = NO_JSON  # a JSON object, checked to be one: `{"output": ...}` or `{"error": ...}` by convention
    id: str | None = None
    parts: list[FunctionResponsePart] | None = None
    will_continue: bool | None = None
    scheduling: str | None = None  # the Live API's SILENT / WHEN_IDLE / INTERRUPT


class Part(In):
    """One part: exactly one kind of data (text, inline data, a file, a function call or response, code or its
    result, a built-in tool's call or response), with its metadata. A part with only a `thoughtSignature` is
    kept too: Gemini sends such parts, and clients send them back."""

    text: str | None = None
    inline_data: Blob | None = None
    file_data: FileData | None = None
    function_call: FunctionCall | None = None
    function_response: FunctionResponse | None = None
    # Made by Google's own tools (code execution, server-side tool calls): only Google reads them.
    executable_code: Raw = NO_JSON
    code_execution_result: Raw = NO_JSON
    tool_call: Raw = NO_JSON
    tool_response: Raw = NO_JSON
    thought: bool | None = None  # the text is the model's thought (summary)
    thought_signature: str | None = None  # opaque, base64: Gemini's signature of its thoughts
    # Metadata of how Google reads the part.
    video_metadata: Raw = NO_JSON
    media_resolution: Raw = NO_JSON
    part_metadata: Raw = NO_JSON
    media_processing: Raw = NO_JSON
    audio_transcription: Raw = NO_JSON
    speech_metadata: Raw = NO_JSON
    document_metadata: Raw = NO_JSON
    spreadsheet_metadata: Raw = NO_JSON
    audio_metadata: Raw = NO_JSON


# The fields of Part's `data` oneof, as Google names them (at most one may be set).
PART_DATA = ("text", "inline_data", "file_data", "function_call", "function_response", "executable_code",
             "code_execution_result", "tool_call", "tool_response")
PART_METADATA = ("video_metadata", "media_resolution", "part_metadata", "media_processing", "audio_transcription",
                 "speech_metadata", "document_metadata", "spreadsheet_metadata", "audio_metadata")


class Content(In):
    parts: list[Part] = []
    role: Role | None = None  # absent: "user" (a single-turn request)


# --- tools and how to use them --------------------------------------------------------------------


class FunctionDeclaration(In):
    """A function the client runs. Its arguments' schema is either Google's OpenAPI subset (`parameters`)
    or JSON Schema (`parametersJsonSchema`, what Gemini CLI sends); likewise its result's."""

    name: Annotated[str, Meta(min_length=1, max_length=128)]
    description: str | None = None
    parameters: Raw = NO_JSON  # a JSON object, checked to be one
    parameters_json_schema: Raw = NO_JSON  # a JSON object, checked to be one
    response: Raw = NO_JSON
    response_json_schema: Raw = NO_JSON
    behavior: str | None = None  # the Live API's BLOCKING / NON_BLOCKING


class Tool(In):
    """Function declarations, or one of Google's own tools (a field of BUILT_IN_TOOLS, kept as sent)."""

    function_declarations: list[FunctionDeclaration] | None = None
    google_search: Raw = NO_JSON
    google_search_retrieval: Raw = NO_JSON
    code_execution: Raw = NO_JSON
    url_context: Raw = NO_JSON
    google_maps: Raw = NO_JSON
    file_search: Raw = NO_JSON
    computer_use: Raw = NO_JSON
    mcp_servers: Raw = NO_JSON
    retrieval: Raw = NO_JSON
    enterprise_web_search: Raw = NO_JSON
    parallel_ai_search: Raw = NO_JSON
    exa_ai_search: Raw = NO_JSON


class FunctionCallingConfig(In):
    mode: Mode | None = None
    allowed_function_names: list[Annotated[str, Meta(min_length=1)]] | None = None
    stream_function_call_arguments: bool | None = None  # Vertex's


class ToolConfig(In):
    function_calling_config: FunctionCallingConfig | None = None
    retrieval_config: Raw = NO_JSON  # a location for Google Maps and Search
    include_server_side_tool_invocations: bool | None = None


# --- generation -----------------------------------------------------------------------------------


class ThinkingConfig(In):
    include_thoughts: bool | None = None
    thinking_budget: ThinkingBudget | None = None
    thinking_level: ThinkingLevel | None = None


class GenerationConfig(In):
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: Count | None = None
    candidate_count: ChoiceCount | None = None
    max_output_tokens: Count | None = None
    stop_sequences: Annotated[list[str], Meta(max_length=5)] | None = None
    response_logprobs: bool | None = None
    logprobs: TopLogprobs | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    seed: Seed | None = None
    response_mime_type: str | None = None
    response_schema: Raw = NO_JSON  # Google's OpenAPI subset: a JSON object, checked to be one
    response_json_schema: Raw = NO_JSON  # JSON Schema: a JSON object, checked to be one
    response_modalities: list[str] | None = None
    thinking_config: ThinkingConfig | None = None
    media_resolution: str | None = None
    audio_timestamp: bool | None = None
    enable_affective_dialog: bool | None = None
    enable_enhanced_civic_answers: bool | None = None
    # Only Google reads these: kept as sent.
    speech_config: Raw = NO_JSON
    image_config: Raw = NO_JSON
    routing_config: Raw = NO_JSON
    model_selection_config: Raw = NO_JSON
    translation_config: Raw = NO_JSON
    audio_transcription_config: Raw = NO_JSON
    response_format: Raw = NO_JSON


class SafetySetting(In):
    category: str
    threshold: str | None = None
    method: str | None = None  # Vertex's


# --- the request ----------------------------------------------------------------------------------


class GenerateContentRequest(In):
    """`generateContent`'s body, as the client sent it; the model is the URL's. `model` in the body is
    accepted (countTokens' `generateContentRequest` names it)."""

    contents: Annotated[list[Content], Meta(min_length=1, max_length=100_000)]
    system_instruction: Content | None = None
    tools: Annotated[list[Tool], Meta(max_length=128)] | None = None
    tool_config: ToolConfig | None = None
    generation_config: GenerationConfig | None = None
    safety_settings: list[SafetySetting] | None = None
    cached_content: str | None = None  # the name of content Google cached: `cachedContents/...`
    labels: dict[str, str] | None = None
    service_tier: str | None = None
    store: bool | None = None
    model: str | None = None
    continuation_token: Raw = NO_JSON
