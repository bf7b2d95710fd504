"""A chat request's prompt tokens: its texts, counted by `count`, plus the overhead of OpenAI's chat format."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from ingress.oai import chat
from ingress.tokens.images import image_tokens

Count = Callable[[str], int]


@dataclass(frozen=True)
class Format:
    """The tokens a chat format adds around the texts (the cookbook's constants, for OpenAI's models)."""

    per_message: int = 3  # <|start|>{role}<|message|>…<|end|>, less the role, counted as text
    per_name: int = 1
    priming: int = 3  # every reply is primed with <|start|>assistant<|message|>
    func_init: int = 7  # the tool formula's: 7 for o200k models, 10 for cl100k ones
    prop_init: int = 3
    prop_key: int = 3
    enum_init: int = -3
    enum_item: int = 3
    func_end: int = 12
    per_tool_call: int = 3  # an approximation: a call's name and arguments are counted, plus this
    image_costs: tuple[int, int] = (85, 170)


O200K = Format()
CL100K = Format(func_init=10)
# Other models: ChatML's <|im_start|>{role}\n…<|im_end|>\n and Llama 3's <|start_header_id|>{role}
# <|end_header_id|>\n\n…<|eot_id|> both add 4 around the role; a template's default system prompt is not known.
OTHER = Format(per_message=4, priming=4)

AUDIO_TOKENS_PER_S = 10
_AUDIO_BYTES_PER_S = {"wav": 32_000, "mp3": 2_000}  # 16 kHz 16-bit mono; 16 kbit/s: the smallest usual rates
FILE_BYTES_PER_TOKEN = 4
FILE_BY_ID = 1_000  # a file the service holds: its size is not known at the edge
_decode = msgspec.json.Decoder()


def count_chat(request: chat.ChatCompletionRequest, count: Count, fmt: Format,
               functions: dict[tuple[str, str | None, bytes], int] | None = None) -> int:
    """`functions`: a memo of each function definition's count, for a `count` that depends on nothing but
    its text (the estimate; a tokenizer's `_Budget` runs out): clients send the same tools every turn."""
    total = fmt.priming
    per_message, per_name = fmt.per_message, fmt.per_name
    for message in request.messages:  # one pass a message, no call it does not need: 11 of them are ~15 µs
        content = message.content
        total += per_message + count(chat.ROLES[type(message)])
        total += count(content) if type(content) is str else _content(content, count, fmt)
        name = getattr(message, "name", None)
        if name:
            total += count(name) + per_name
        if isinstance(message, chat.AssistantMessage):
            if message.tool_calls or message.refusal or message.function_call is not None or message.audio is not None:
                total += _assistant_extras(message, count, fmt)
        elif isinstance(message, chat.ToolMessage):
            total += count(message.tool_call_id)  # the cookbook counts every value a message holds
    functions_: list[chat.FunctionDef | chat.LegacyFunction] = [t.function for t in request.tools or () if t.function]
    functions_ += request.functions or []
    customs = [t.custom for t in request.tools or () if t.custom is not None]
    if functions_ or customs:
        if functions is None:
            total += sum(_function(f.name, f.description, f.parameters, count, fmt) for f in functions_)
        else:
            total += sum(_memo(functions, f, count, fmt) for f in functions_)
        total += sum(_custom(c, count, fmt) for c in customs) + fmt.func_end
    if isinstance(request.response_format, chat.JsonSchemaResponseFormat):  # an approximation: its text
        schema = request.response_format.json_schema
        total += count(schema.name) + count(bytes(schema.schema).decode())
    return total


def _content(content: str | list[Any] | None, count: Count, fmt: Format) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return count(content)
    return sum(_part(part, count, fmt) for part in content)


def _part(part: Any, count: Count, fmt: Format) -> int:
    if isinstance(part, chat.TextPart):
        return count(part.text)
    if isinstance(part, chat.RefusalPart):
        return count(part.refusal)
    if isinstance(part, chat.ImagePart):
        return image_tokens(part.image_url.url, part.image_url.detail, fmt.image_costs)
    if isinstance(part, chat.AudioPart):
        seconds = _decoded_size(part.input_audio.data) / _AUDIO_BYTES_PER_S[part.input_audio.format]
        return math.ceil(seconds * AUDIO_TOKENS_PER_S)
    if isinstance(part, chat.FilePart):
        if part.file.file_data is None:
            return FILE_BY_ID
        return -(-_decoded_size(part.file.file_data) // FILE_BYTES_PER_TOKEN)
    return 0


def _decoded_size(data: str) -> int:
    """The bytes a base64 string (or a data: URL of one) holds, from its length alone."""
    if data.startswith("data:"):
        data = data[data.find(",") + 1:]
    return len(data) * 3 // 4


def _assistant_extras(message: chat.AssistantMessage, count: Count, fmt: Format) -> int:
    total = count(message.refusal) if message.refusal else 0
    calls = [c.function for c in message.tool_calls or () if c.function is not None]
    calls += [message.function_call] if message.function_call is not None else []
    total += sum(count(c.name) + count(c.arguments) + fmt.per_tool_call for c in calls)
    customs = [c.custom for c in message.tool_calls or () if c.custom is not None]
    total += sum(count(c.name) + count(c.input) + fmt.per_tool_call for c in customs)
    if message.audio is not None:
        total += count(message.audio.id)
    return total


def _function(name: str, description: str | None, parameters: msgspec.Raw, count: Count, fmt: Format) -> int:
    """The cookbook's formula: `name:description` (one trailing '.' dropped), and per property
    `key:type:description` with its enum values. Nested schemas (an object's properties, an array's
    items, anyOf...) and other keywords are an approximation: their JSON text is counted."""
    total = fmt.func_init + count(f"{name}:{_stripped(description)}")
    schema = _decode.decode(parameters) if len(parameters) else {}
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(properties, dict) and properties:
        total += fmt.prop_init
        for key, prop in properties.items():
            total += fmt.prop_key
            if not isinstance(prop, dict):
                total += count(f"{key}:{msgspec.json.encode(prop).decode()}")
                continue
            rest = {k: v for k, v in prop.items() if k not in ("type", "description", "enum")}
            if isinstance(prop.get("enum"), list):
                total += fmt.enum_init + sum(fmt.enum_item + count(str(item)) for item in prop["enum"])
            kind = prop.get("type", "")
            kind = kind if isinstance(kind, str) else msgspec.json.encode(kind).decode()
            total += count(f"{key}:{kind}:{_stripped(prop.get('description'))}")
            if rest:
                total += count(msgspec.json.encode(rest).decode())
    return total


MEMO_SIZE = 1024  # function definitions remembered per counter; past it the memo starts again


def _memo(memo: dict[tuple[str, str | None, bytes], int], f: chat.FunctionDef | chat.LegacyFunction, count: Count,
          fmt: Format) -> int:
    key = (f.name, f.description, bytes(f.parameters))
    found = memo.get(key)
    if found is None:
        if len(memo) >= MEMO_SIZE:
            memo.clear()
        found = memo[key] = _function(f.name, f.description, f.parameters, count, fmt)
    return found


def _custom(tool: chat.CustomDef, count: Count, fmt: Format) -> int:
    """A custom tool, as a function without properties, plus its grammar's text (an approximation)."""
    total = fmt.func_init + count(f"{tool.name}:{_stripped(tool.description)}")
    if isinstance(tool.format, chat.CustomGrammarFormat):
        total += count(tool.format.grammar.definition)
    return total


def _stripped(value: object) -> str:
    text = value if isinstance(value, str) else ""
    return text[:-1] if text.endswith(".") else text
