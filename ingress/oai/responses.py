"""OpenAI's Responses API request (`POST /v1/responses`) as msgspec types: content parts, input items,
tools and tool choices, the request itself, and `Call`, the request with its items and tools decoded.

`responses_codec` decodes a body into a `Call` and checks it, refusing by name what the edge cannot do;
`responses_to_chat` reads a `Call` as the chat request it amounts to.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Raw

from ingress.oai.chat import (
    INT32_MAX,
    NO_JSON,
    CustomTextFormat,
    FunctionName,
    JsonObjectFormat,
    MetadataKey,
    MetadataValue,
    ModelName,
    Moderation,
    PromptCacheBreakpoint,
    ShortText,
    Temperature,
    TextFormat,
    TokenLimit,
    TopLogprobs,
    TopP,
)

MAX_ITEMS = 2048  # input items; a conversation longer than this is not one a gateway should pass on


class _Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Unknown fields are refused, as OpenAI does, rather than silently dropped."""


# --- content parts --------------------------------------------------------------------------------


class _Part(_Strict, tag_field="type"):
    pass


class InputText(_Part, tag="input_text"):
    text: str
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class InputImage(_Part, tag="input_image"):
    image_url: Annotated[str, Meta(min_length=1)] | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high", "original"] | None = None
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class InputFile(_Part, tag="input_file"):
    file_data: str | None = None
    file_id: str | None = None
    filename: str | None = None
    file_url: str | None = None
    detail: Literal["auto", "low", "high"] | None = None
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class OutputText(_Part, tag="output_text"):
    text: str
    annotations: list[Raw] | None = None  # the model's own metadata: not sent back to it
    logprobs: list[Raw] | None = None


class OutputRefusal(_Part, tag="refusal"):
    refusal: str


Part = InputText | InputImage | InputFile | OutputText | OutputRefusal
InputPart = InputText | InputImage | InputFile


# --- input items ----------------------------------------------------------------------------------


class _Item(_Strict, tag_field="type", kw_only=True):
    # An agent's own bookkeeping on its items (Codex: the turn and the parts that made it): a hint.
    internal_chat_message_metadata_passthrough: Raw = NO_JSON


class MessageItem(_Item, tag="message"):
    """An input message (`type` may be left out), or an earlier answer's output message."""

    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Part]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: None = None  # OpenAI's commentary / final-answer marks: only on OpenAI's own answers


class DirectCaller(_Strict, tag_field="type", tag="direct"):
    """Who made a tool call: the model itself (programmatic callers are OpenAI's hosted code)."""


CallId = Annotated[str, Meta(min_length=1, max_length=256)]


class FunctionCallItem(_Item, tag="function_call"):
    call_id: CallId
    name: FunctionName
    arguments: str
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    caller: DirectCaller | None = None
    namespace: FunctionName | None = None  # the call of a tool offered inside a `namespace` tool
    # OpenAI's asynchronous calls: accepted only as their default, as the SDK writes it.
    async_: Literal[False] | None = msgspec.field(default=None, name="async")


class FunctionCallOutputItem(_Item, tag="function_call_output"):
    call_id: CallId
    output: str | list[InputPart]
    id: str | None = None
    name: str | None = None  # the call's own name: the call id already says which call it answers
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    caller: DirectCaller | None = None
    namespace: str | None = None  # as `name`: the call id says which call it answers


class CustomToolCallItem(_Item, tag="custom_tool_call"):
    call_id: CallId
    name: FunctionName
    input: str
    id: str | None = None
    caller: DirectCaller | None = None
    namespace: FunctionName | None = None
    async_: Literal[False] | None = msgspec.field(default=None, name="async")


class CustomToolCallOutputItem(_Item, tag="custom_tool_call_output"):
    call_id: CallId
    output: str | list[InputPart]
    id: str | None = None
    caller: DirectCaller | None = None
    name: str | None = None
    namespace: str | None = None


class SummaryText(_Strict, tag_field="type", tag="summary_text"):
    text: str


class ReasoningText(_Strict, tag_field="type", tag="reasoning_text"):
    text: str


class ReasoningItem(_Item, tag="reasoning"):
    """An earlier answer's reasoning, sent back: its text (`content`, else its `summary`) and, with
    `include: ["reasoning.encrypted_content"]`, the opaque `encrypted_content` its service gave it (the
    edge's own seal, ingress/oai/sealing.py, or a provider's)."""

    id: str | None = None
    summary: list[SummaryText] = []
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class CompactionItem(_Item, tag="compaction"):
    """An earlier compaction of the conversation, sent back in its place: the summary the edge sealed."""

    encrypted_content: str
    id: str | None = None


class CompactionTrigger(_Item, tag="compaction_trigger"):
    """The last input item of a request that asks for the conversation compacted (Codex CLI, when its
    context fills): answered with one `compaction` item."""

    id: str | None = None  # as a stored response's input items list it (every item there has one)


class AdditionalToolsItem(_Item, tag="additional_tools"):
    """Tools offered along the way (Codex CLI's default model gets its tools so): offered as the request's."""

    tools: Annotated[list[Raw], Meta(max_length=128)]
    id: str | None = None
    role: Literal["developer", "system"] | None = None


class ConfigurationUpdate(_Item, tag="configuration_update"):
    """A change of settings along the way (Codex: the reasoning effort of its turns from here on)."""

    reasoning: ReasoningConfig | None = None
    id: str | None = None


Item = (MessageItem | FunctionCallItem | FunctionCallOutputItem | CustomToolCallItem | CustomToolCallOutputItem
        | ReasoningItem | CompactionItem | CompactionTrigger | AdditionalToolsItem | ConfigurationUpdate)


# --- tools, tool choice, formats ------------------------------------------------------------------


class FunctionTool(_Strict, tag_field="type", tag="function"):
    name: FunctionName
    description: str | None = None
    parameters: Raw = NO_JSON  # opaque JSON object (or null), checked to be one
    strict: bool | None = None


class GrammarFormat(_Strict, tag_field="type", tag="grammar"):
    """A custom tool's grammar, as the Responses API writes it: flat (chat nests it under `grammar`)."""

    syntax: Literal["lark", "regex"]
    definition: str


class CustomTool(_Strict, tag_field="type", tag="custom"):
    name: FunctionName
    description: str | None = None
    format: CustomTextFormat | GrammarFormat | None = None


class NamespaceTool(_Strict, tag_field="type", tag="namespace"):
    """A group of function and custom tools under one name (Codex's sub-agent tools): offered to a model
    as flat tools named `<namespace>__<name>`, whose calls come back to the client as the namespaced
    calls it offered (`Call.namespaced`)."""

    name: FunctionName
    description: str | None = None
    tools: Annotated[list[FunctionTool | CustomTool], Meta(max_length=128)] = []


class HostedTool(msgspec.Struct, frozen=True):
    """A tool OpenAI's own servers run (`web_search`, `file_search`, `code_interpreter`...), named by its
    `type` and its place in `tools`: on a route that cannot run it, left out (named as a hint) or refused
    by the route's `hosted_tools`."""

    type: str
    param: str


ToolDef = FunctionTool | CustomTool | NamespaceTool


class _Choice(_Strict, tag_field="type"):
    pass


class FunctionChoice(_Choice, tag="function"):
    name: FunctionName


class CustomChoice(_Choice, tag="custom"):
    name: FunctionName


class AllowedToolsChoice(_Choice, tag="allowed_tools"):
    mode: Literal["auto", "required"]
    tools: Annotated[list[Raw], Meta(max_length=128)]  # {"type": "function", "name": ...}, as in `tools`


ResponsesToolChoice = Literal["none", "auto", "required"] | FunctionChoice | CustomChoice | AllowedToolsChoice


class NamedTool(_Strict):
    type: Literal["function", "custom"]
    name: FunctionName


class JsonSchemaText(_Strict, tag_field="type", tag="json_schema"):
    name: FunctionName
    schema: Raw = NO_JSON
    description: str | None = None
    strict: bool | None = None


class TextConfig(_Strict):
    format: TextFormat | JsonObjectFormat | JsonSchemaText | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


SummaryKind = Literal["auto", "concise", "detailed"]


class ReasoningConfig(_Strict):
    effort: Annotated[str, Meta(min_length=1, max_length=32)] | None = None
    # A summary of the reasoning in the answer's reasoning items: the service's reasoning text stands as it.
    summary: SummaryKind | None = None
    generate_summary: SummaryKind | None = None  # the older name of `summary`
    # How much earlier reasoning OpenAI's servers keep, and how they reason: hints to them alone.
    context: Annotated[str, Meta(max_length=64)] | None = None
    mode: Annotated[str, Meta(max_length=64)] | None = None


class PromptCacheOptions(_Strict):
    mode: Literal["implicit", "explicit"] | None = None
    ttl: Literal["30m", "12h"] | None = None
    prewarm: bool | None = None  # refused when true: a cache warmed by a request with no answer
    comparison_response_id: str | None = None  # refused: a stored response


class ResponsesStreamOptions(_Strict):
    include_obfuscation: bool | None = None  # accepted; the edge adds no obfuscation padding, as for chat


Include = Literal[
    "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
    "message.input_image.image_url", "computer_call_output.output.image_url", "code_interpreter_call.outputs",
    "reasoning.encrypted_content", "message.output_text.logprobs",
]


# --- the request ----------------------------------------------------------------------------------


class ResponsesRequest(_Strict):
    model: ModelName
    input: str | Annotated[list[Raw], Meta(min_length=1, max_length=MAX_ITEMS)]
    instructions: str | None = None
    include: Annotated[list[Include], Meta(max_length=16)] | None = None
    max_output_tokens: TokenLimit | None = None
    max_tool_calls: Annotated[int, Meta(ge=1, le=INT32_MAX)] | None = None  # hosted tools only: none here
    metadata: Annotated[dict[MetadataKey, MetadataValue], Meta(max_length=16)] | None = None
    moderation: Moderation | None = None
    parallel_tool_calls: bool | None = None
    prompt_cache_key: ShortText | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    reasoning: ReasoningConfig | None = None
    safety_identifier: Annotated[str, Meta(max_length=128)] | None = None
    service_tier: Annotated[str, Meta(min_length=1, max_length=32)] | None = None
    store: bool | None = None
    stream: bool | None = None
    stream_options: ResponsesStreamOptions | None = None
    temperature: Temperature | None = None
    text: TextConfig | None = None
    tool_choice: ResponsesToolChoice | None = None
    tools: Annotated[list[Raw], Meta(max_length=128)] | None = None
    top_logprobs: TopLogprobs | None = None
    top_p: TopP | None = None
    truncation: Literal["auto", "disabled"] | None = None
    user: ShortText | None = None
    background: bool | None = None
    # Ids an agent tags its requests with (Codex: its session, turn and window): a hint, never refused.
    client_metadata: Raw = NO_JSON
    # Continued from a stored response (ingress/state), whose conversation the edge carries over.
    previous_response_id: Annotated[str, Meta(min_length=1, max_length=128)] | None = None
    # A conversation (its id, or {"id": ...}) the edge keeps (ingress/state); refused by name without one.
    conversation: Raw = NO_JSON
    # Declared so that they are refused by name (responses_codec), never taken for typos.
    prompt: Raw = NO_JSON
    context_management: Raw = NO_JSON
    background_options: Raw = NO_JSON
    access_programs: Raw = NO_JSON
    image: Raw = NO_JSON


def is_set(raw: Raw) -> bool:
    """Whether an opaque JSON field (`NO_JSON` when left out) holds something other than null."""
    return len(raw) > 0 and bytes(raw) != b"null"


class Call(msgspec.Struct, frozen=True):
    """A decoded Responses request with its input items and tools decoded one by one; `hosted`: the tools
    only OpenAI's servers run; `namespaced`: each namespaced tool's flat name, as offered to the model, to
    its (namespace, name); `hints`: what the request asks of OpenAI's servers alone, by name."""

    request: ResponsesRequest
    items: list[Item]  # the conversation: the `carried` items of the previous response, then the request's own
    tools: list[ToolDef]
    hosted: list[HostedTool] = []
    namespaced: dict[str, tuple[str, str]] = {}
    hints: list[str] = []
    carried: int = 0  # items carried over from `previous_response_id` (ingress/state), before the request's
    kept: bool = False  # the edge keeps the answer (`store` not false, and a store): it says `store: true`
    conversation: str | None = None  # the id of the conversation it continues and is added to (ingress/state)

    @property
    def compacting(self) -> bool:
        """Whether the request asks for the conversation compacted (its last item a compaction_trigger)."""
        return bool(self.items) and isinstance(self.items[-1], CompactionTrigger)

    @property
    def sealed_reasoning(self) -> bool:
        """Whether the answer's reasoning items carry their text sealed (`include`), to be sent back."""
        return "reasoning.encrypted_content" in (self.request.include or ())

    @property
    def summary(self) -> str | None:
        """The kind of reasoning summary asked for (`reasoning.summary`, or its older name), if any."""
        reasoning = self.request.reasoning
        return None if reasoning is None else reasoning.summary or reasoning.generate_summary

    @property
    def logprobs(self) -> bool:
        r = self.request
        return "message.output_text.logprobs" in (r.include or ()) or bool(r.top_logprobs)
