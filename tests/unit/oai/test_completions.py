"""The strict legacy text completions request codec (ingress/oai/completions.py): every SDK parameter a
field, every prompt shape a list of prompts, a bad body refused naming the field."""

from __future__ import annotations

import typing

import pytest
from bad_completions import BAD_COMPLETIONS, completions_body
from bad_requests import Bad
from openai.types import completion_create_params as sdk
from openai.types.chat import ChatCompletionStreamOptionsParam

from ingress.errors import InvalidRequest
from ingress.oai.chat import StreamOptions
from ingress.oai.completions import TextCompletionRequest, decode_text_request


@pytest.mark.parametrize("bad", BAD_COMPLETIONS)
def test_bad_body_is_refused_naming_the_field(bad: Bad) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_text_request(bad.body)
    assert caught.value.param == bad.param
    if bad.code is not None:
        assert caught.value.code == bad.code


def test_every_sdk_parameter_is_a_field_of_the_request() -> None:
    # The installed SDK's parameters of completions.create: the next release that adds one fails here.
    params = set(typing.get_type_hints(sdk.CompletionCreateParamsStreaming)) | set(
        typing.get_type_hints(sdk.CompletionCreateParamsNonStreaming))
    assert params == set(TextCompletionRequest.__struct_fields__)
    assert set(typing.get_type_hints(ChatCompletionStreamOptionsParam)) <= set(StreamOptions.__struct_fields__)


@pytest.mark.parametrize(("prompt", "prompts"), [
    ("", [""]), ("a", ["a"]), (["a", "b"], ["a", "b"]), ([1, 2], [[1, 2]]), ([[1], [2, 3]], [[1], [2, 3]]),
])
def test_every_prompt_shape_reads_as_a_list_of_prompts(prompt: object, prompts: list[object]) -> None:
    assert decode_text_request(completions_body(prompt=prompt)).prompts == prompts


def test_logprobs_with_echo_are_refused_naming_logprobs() -> None:
    for logprobs in (0, 5):
        with pytest.raises(InvalidRequest) as caught:
            decode_text_request(completions_body(echo=True, logprobs=logprobs))
        assert caught.value.param == "logprobs" and "echo" in str(caught.value)
    assert decode_text_request(completions_body(echo=False, logprobs=2)).logprobs == 2
    assert decode_text_request(completions_body(echo=True, logprobs=None)).echo
