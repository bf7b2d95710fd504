"""ingress.oai.chat against the installed openai SDK (the contract test): every parameter of
`chat.completions.create`, and every key nested in it, is accepted and travels to the internal service.

The SDK's own TypedDicts (`CompletionCreateParamsStreaming` / `NonStreaming`, the message, content-part,
tool and option types) are walked recursively; each key gets valid example values built from its type
(every value of a Literal, every member of a Union), and each example is sent alone in a minimal
request through decode_chat_request → encode_request → decode_request. The test fails when the edge
refuses a key, or when a key's value does not come back, so the next SDK release that adds one fails
CI until the edge carries it. The wire's canonical forms are applied to what is expected (see
tests/property/test_roundtrip.py): `stop` as a list, `stream: false` as absent, legacy
`functions` / `function_call` as the `tools` / `tool_choice` they mean.
"""

from __future__ import annotations

import collections.abc
import json
import types
import typing
from typing import Any

import msgspec
import pytest
import typing_extensions
from openai.types.chat import completion_create_params as sdk

from ingress.encoding.reading import decode_request
from ingress.encoding.requests import encode_request
from ingress.errors import InvalidRequest
from ingress.oai.codec import decode_chat_request
from ingress.wire import read_request
from ingress.wire.passport import Passport

ROOTS = (sdk.CompletionCreateParamsStreaming, sdk.CompletionCreateParamsNonStreaming)
BASE: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
# Strings whose key has a format of its own; any other string is "x".
STRINGS = {"country": "US"}
LISTS = (list, collections.abc.Iterable, collections.abc.Sequence, typing.Iterable, typing.Sequence)
WRAPPERS = {typing_extensions.Required, typing_extensions.NotRequired, typing.Required, typing.NotRequired,
            typing.Annotated, typing_extensions.Annotated}


def _hints(typed_dict: type) -> dict[str, Any]:
    return typing.get_type_hints(typed_dict, include_extras=True)


def examples(tp: Any, key: str = "", depth: int = 0) -> list[Any]:
    """Valid example values of a type: every Literal value, every Union member, every TypedDict key."""
    assert depth < 20, f"{key}: the SDK's types nest deeper than expected"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in WRAPPERS:
        return examples(args[0], key, depth)
    if origin in (typing.Union, types.UnionType):
        return [e for a in args if a is not type(None) for e in examples(a, key, depth)]
    if origin in (typing.Literal, typing_extensions.Literal):
        return list(args)
    if origin in (dict, collections.abc.Mapping) or tp is object:
        value = args[1] if args else object
        return [{"1": 1}] if value is int else [{"k": "v"}] if value is str else [{"type": "object"}]
    if origin in LISTS:
        return [[e] for e in examples(args[0], key, depth + 1)]
    if typing_extensions.is_typeddict(tp):
        return _typed_dict_examples(tp, depth + 1)
    if tp is str:
        return [STRINGS.get(key, "x")]
    if tp is bool:
        return [True]
    if tp is int:
        return [1]
    if tp is float:
        return [0.5]
    raise AssertionError(f"{key}: no example for the SDK type {tp!r}: teach this test about it")


def _typed_dict_examples(tp: type, depth: int) -> list[dict[str, Any]]:
    """Every key set (the first example of each), then each key's other examples, one at a time."""
    per_key = {k: examples(v, k, depth) for k, v in _hints(tp).items()}
    full = {k: values[0] for k, values in per_key.items()}
    return [full] + [{**full, k: value} for k, values in per_key.items() for value in values[1:]]


def _companions(key: str, value: Any) -> dict[str, Any]:
    """What a value needs beside it to be valid: a named tool choice its tool, stream_options stream."""
    if key == "tool_choice" and isinstance(value, dict) and value["type"] in ("function", "custom"):
        kind, name = value["type"], value[value["type"]]["name"]
        return {"tools": [{"type": kind, kind: {"name": name}}]}
    if key == "function_call" and isinstance(value, dict):
        return {"functions": [{"name": value["name"]}]}
    if key == "stream_options":
        return {"stream": True}
    return {}


def cases() -> list[Any]:
    seen: set[str] = set()
    rows: list[Any] = []
    for root in ROOTS:
        for key, tp in _hints(root).items():
            for i, value in enumerate(examples(tp, key)):
                doc = {**BASE, **_companions(key, value), key: value}
                ident = f"{key}-{i}"
                text = json.dumps(doc, sort_keys=True)
                if text not in seen:
                    seen.add(text)
                    rows.append(pytest.param(doc, id=ident if ident not in {r.id for r in rows} else f"{ident}-"))
    return rows


def expected(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` in the form it travels in (the wire's canonical forms)."""
    doc = dict(doc)
    if doc.get("stream") is False:
        del doc["stream"]
    if isinstance(doc.get("stop"), str):
        doc["stop"] = [doc["stop"]]
    if "functions" in doc:
        doc["tools"] = [{"type": "function", "function": f} for f in doc.pop("functions")]
    if "function_call" in doc:
        legacy = doc.pop("function_call")
        doc["tool_choice"] = legacy if isinstance(legacy, str) else {"type": "function", "function": legacy}
    return doc


# Left out of the re-encoded request because they are its defaults.
OMITTED_DEFAULTS = {("type", "function")}


def arrives(sent: Any, got: Any, where: str = "$") -> None:
    """Everything `sent` holds is in `got`, equal (1 == 1.0: a bias travels as a double)."""
    if isinstance(sent, dict):
        assert isinstance(got, dict), f"{where}: {got!r} came back for an object"
        for key, value in sent.items():
            if key not in got:
                assert (key, value) in OMITTED_DEFAULTS, f"{where}.{key}: dropped on the way"
                continue
            arrives(value, got[key], f"{where}.{key}")
    elif isinstance(sent, list):
        assert isinstance(got, list) and len(got) == len(sent), f"{where}: {got!r} came back for {sent!r}"
        for i, (s, g) in enumerate(zip(sent, got, strict=True)):
            arrives(s, g, f"{where}[{i}]")
    else:
        assert sent == got, f"{where}: {sent!r} was sent, {got!r} came back"


@pytest.mark.parametrize("doc", cases())
def test_every_sdk_parameter_is_accepted_and_travels(doc: dict[str, Any]) -> None:
    try:
        request = decode_chat_request(json.dumps(doc).encode())
    except InvalidRequest as exc:
        pytest.fail(f"the edge refuses what the openai SDK sends: {exc.message} (param {exc.param})")
    buf = bytes(encode_request(request, "req-1", Passport()))
    got = json.loads(msgspec.json.encode(decode_request(buf)))
    arrives(expected(doc), got)
    assert read_request(buf).LegacyFunctions() is ("functions" in doc or "function_call" in doc)


def test_the_walk_reaches_the_nested_types() -> None:
    # A guard on the walk itself: if the SDK's type layout changed so that it stopped descending, the
    # test above would pass on the top-level keys alone.
    texts = [json.dumps(row.values[0]) for row in cases()]
    for nested in ('"prompt_cache_breakpoint"', '"input_audio"', '"file_data"', '"custom"', '"allowed_tools"',
                   '"function_call"', '"user_location"', '"timezone"', '"grammar"', '"include_obfuscation"',
                   '"role": "function"', '"detail": "original"'):
        assert any(nested in text for text in texts), nested


@pytest.mark.parametrize(("doc", "param"), [
    pytest.param({**BASE, "temprature": 0.5}, "temprature", id="top-level"),
    pytest.param({**BASE, "web_search_options": {"search_context": "low"}}, "web_search_options.search_context",
                 id="nested"),
    pytest.param({**BASE, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "a", "prompt_cache_breakpoint": {"mode": "explicit", "tll": "30m"}}]}]},
        "messages[0].content[0].prompt_cache_breakpoint.tll", id="in-a-part"),
])
def test_a_misspelt_key_is_refused_naming_it(doc: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        decode_chat_request(json.dumps(doc).encode())
    assert (info.value.status, info.value.param) == (400, param)
