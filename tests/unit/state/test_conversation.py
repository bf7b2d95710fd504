"""A conversation's codec (ingress/state/conversation.py): the requests that make and change one, checked
with 400s naming the field; ids given to items; the `conversation` reference of a Responses request; its
items as pages of OpenAI's list object."""

from __future__ import annotations

import json

import msgspec
import pytest

from ingress.errors import InvalidRequest
from ingress.oai.responses import FunctionCallItem, Item, MessageItem, OutputText
from ingress.state import conversation as cv
from ingress.state.record import PageError, PageQuery


def test_a_conversation_is_made_with_its_metadata_and_items_each_with_an_id() -> None:
    body = json.dumps({"metadata": {"topic": "t"}, "items": [
        {"role": "user", "content": "hi"}, {"type": "message", "role": "assistant", "content": "yo", "id": "msg_mine"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]}).encode()
    metadata, items = cv.create_request(body, "abc")
    assert metadata == {"topic": "t"}
    assert [cv.item_id(i) for i in items] == ["msg_abc_in0", "msg_mine", "fc_abc_in2"]
    assert cv.create_request(b"", "abc") == ({}, [])  # a body left out: an empty conversation


@pytest.mark.parametrize(("body", "param"), [
    ({"items": [{"role": "user", "content": "x"}] * 21}, "items"),
    ({"items": [{"type": "web_search_call"}]}, "items[0].type"),
    ({"metadata": {"k": "v" * 513}}, "metadata"),
    ({"colour": "red"}, "colour"),
])
def test_a_bad_creation_is_a_400_naming_the_field(body: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        cv.create_request(json.dumps(body).encode(), "r")
    assert refused.value.param == param


def test_updates_and_additions_need_their_field() -> None:
    assert cv.update_request(b'{"metadata": {"a": "b"}}') == {"a": "b"}
    for bad in (b"{}", b"not json"):
        with pytest.raises(InvalidRequest):
            cv.update_request(bad)
    with pytest.raises(InvalidRequest) as empty:
        cv.items_request(b'{"items": []}', "r")
    assert empty.value.param == "items"
    assert [cv.item_id(i) for i in cv.items_request(b'{"items": [{"role": "user", "content": "x"}]}', "r")] == \
        ["msg_r_in0"]


@pytest.mark.parametrize(("value", "named"), [("conv_1", "conv_1"), ({"id": "conv_2"}, "conv_2")])
def test_a_responses_request_names_its_conversation_by_id_or_object(value: object, named: str) -> None:
    assert cv.reference(value) == named


@pytest.mark.parametrize("value", ["", 5, {"id": 5}, {"id": "conv_1", "x": 1}, ["conv_1"]])
def test_anything_else_is_a_400_naming_conversation(value: object) -> None:
    with pytest.raises(InvalidRequest) as refused:
        cv.reference(value)
    assert refused.value.param == "conversation"


def test_only_ids_the_edge_could_have_made_are_looked_up() -> None:
    assert cv.known_id("conv_" + "ab" * 24)
    assert not any(cv.known_id(i) for i in ("resp_1", "conv_", "conv_a/b", "conv_" + "a" * 65))


def test_the_object_and_items_round_trip_as_kept() -> None:
    made = cv.ConversationObject(id="conv_1", created_at=5, metadata={"a": "b"})
    assert json.loads(cv.encode_object(made)) == {"id": "conv_1", "created_at": 5, "metadata": {"a": "b"},
                                                  "object": "conversation"}
    assert cv.decode_object(cv.encode_object(made)) == made
    items: list[Item] = [MessageItem(role="user", content="hi", id="msg_1"),
                         FunctionCallItem(call_id="c", name="f", arguments="{}", id="fc_1")]
    assert cv.decode_items_kept(cv.encode_items(items)) == items


def test_items_are_listed_as_openai_lists_them() -> None:
    items: list[Item] = [MessageItem(role="user", content="hi", id="msg_1"),
                         MessageItem(role="assistant", content="yo", id="msg_2"),
                         MessageItem(role="user", content="again", id="msg_3")]
    page = json.loads(cv.items_page(items, PageQuery(limit=2)))  # newest first by default
    assert [i["id"] for i in page["data"]] == ["msg_3", "msg_2"] and page["has_more"]
    assert page["first_id"] == "msg_3" and page["last_id"] == "msg_2" and page["object"] == "list"
    assert page["data"][1]["content"] == [{"type": "output_text", "text": "yo", "annotations": []}]
    assert all(i["status"] == "completed" for i in page["data"])
    rest = json.loads(cv.items_page(items, PageQuery(after="msg_2")))
    assert [i["id"] for i in rest["data"]] == ["msg_1"] and not rest["has_more"]
    with pytest.raises(PageError) as unknown:
        cv.items_page(items, PageQuery(after="msg_9"))
    assert unknown.value.param == "after" and "conversation" in str(unknown.value)
    added = json.loads(cv.added_page(items))  # in the order given
    assert [i["id"] for i in added["data"]] == ["msg_1", "msg_2", "msg_3"]
    one = msgspec.json.decode(cv.item_json(items[1]))
    assert one["content"][0] == msgspec.to_builtins(OutputText(text="yo", annotations=[]))


def test_include_takes_openai_s_values_only() -> None:
    cv.include_query(["message.output_text.logprobs", "reasoning.encrypted_content"])
    with pytest.raises(InvalidRequest) as refused:
        cv.include_query(["everything"])
    assert refused.value.param == "include"


def test_a_deleted_conversation_is_openai_s_deleted_object() -> None:
    assert json.loads(cv.deleted("conv_1")) == {"id": "conv_1", "object": "conversation.deleted", "deleted": True}
