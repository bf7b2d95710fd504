"""ingress/bridges/dialect.py: what every dialect shares: the path under the target's base URL, a request
sent as its client sent it with the route's model, the refusals' errors, JSON too deep refused as a 400
by `readable`, and the chunks decoded before an engine's error kept with it."""

from __future__ import annotations

import json

import pytest

from ingress import wire
from ingress.bridges.dialect import (
    UINT32_MAX,
    EngineFailed,
    NestedTooDeeply,
    Target,
    Unsupported,
    as_sent,
    count,
    keeping,
    readable,
    under,
)
from ingress.oai.codec import NESTED_TOO_DEEPLY


@pytest.mark.parametrize(("url", "path"), [
    ("http://127.0.0.1:8000", "/v1/chat/completions"),
    ("https://api.openai.com/v1", "/v1/chat/completions"),
    ("https://gw.example/proxy/v1/", "/proxy/v1/chat/completions"),
    ("https://gw.example/openai", "/openai/v1/chat/completions"),
])
def test_the_path_sits_under_the_targets_base_url(url: str, path: str) -> None:
    assert under(Target(url=url), "/v1/chat/completions") == path


def test_a_request_as_sent_keeps_every_field_and_its_order_but_the_model() -> None:
    sent = b'{"stream":true,"model":"asked","messages":[{"role":"user","content":"hi"}],"z_extra":{"a":[1]}}'
    out = as_sent(sent, "claude-opus-4-6")
    assert list(json.loads(out)) == ["stream", "model", "messages", "z_extra"]
    assert json.loads(out) == {**json.loads(sent), "model": "claude-opus-4-6"}


def test_the_refusals_are_400s_naming_what_they_refuse() -> None:
    info = Unsupported("n", "Only one choice.").info()
    assert (info.status, info.type, info.code, info.param, info.message) == (
        400, "invalid_request_error", "unsupported_parameter", "n", "Only one choice.")
    deep = NestedTooDeeply().info()
    assert (deep.status, deep.code, deep.param, deep.message) == (400, "invalid_json", None, NESTED_TOO_DEEPLY)
    assert isinstance(NestedTooDeeply(), Unsupported)


def test_readable_turns_a_recursion_error_into_nested_too_deeply() -> None:
    def build(depth: int) -> int:
        if depth > 10:
            raise RecursionError
        return depth

    guarded = readable(build)
    assert guarded(3) == 3 and guarded.__name__ == "build"
    with pytest.raises(NestedTooDeeply):
        guarded(11)


def test_an_engine_failure_carries_the_chunks_decoded_before_it() -> None:
    info = wire.ErrorInfo(status=503, type="server_error", message="busy")
    out = [wire.Chunk(sequence=0, content="a")]
    with pytest.raises(EngineFailed) as caught, keeping(out):
        raise EngineFailed(info, [wire.Chunk(sequence=1, content="b")])
    assert caught.value.info is info and [c.content for c in caught.value.chunks] == ["a", "b"]
    assert str(caught.value) == "busy" and EngineFailed(info).chunks == []


def test_counts_are_clamped_to_the_contracts_uint32() -> None:
    assert (count(None), count(-3), count(7), count(2**40)) == (0, 0, 7, UINT32_MAX)
