"""A stored response's record (ingress/state/record.py): ids given to the items, the conversation a
continuation begins with, owners that never share a namespace, and the input items' pages as OpenAI's list."""

from __future__ import annotations

import msgspec
import pytest

from ingress.oai.responses import FunctionCallOutputItem, InputText, MessageItem, OutputText
from ingress.oai.responses_answers import MessageOut, OutputTextOut, ResponseObject
from ingress.oai.responses_codec import decode_responses_request
from ingress.state.record import (
    OPEN,
    PageError,
    PageQuery,
    conversation,
    deleted,
    encode_input,
    encode_page,
    encode_record,
    input_items,
    known_id,
    owner,
    page,
    page_query,
    response_json,
    with_ids,
)
from ingress.translate.responses import response_object


def _response(text: str = "hi back") -> ResponseObject:
    call = decode_responses_request(b'{"model": "m", "input": "hi", "instructions": "Be brief."}')
    out = MessageOut(id="msg_r1", status="completed", content=[OutputTextOut(text=text, annotations=[])])
    return response_object(call, id="resp_r1", created_at=1, model="m", status="completed", output=[out])


def test_items_without_an_id_get_one_by_their_type_and_place() -> None:
    call = decode_responses_request(b'{"model": "m", "input": [{"role": "user", "content": "a"}, '
                                    b'{"type": "function_call_output", "call_id": "c1", "output": "x", "id": "mine"},'
                                    b'{"role": "user", "content": "b"}]}')
    items = with_ids(call.items, "r9", start=4)
    assert [getattr(i, "id", None) for i in items] == ["msg_r9_in4", "mine", "msg_r9_in6"]
    assert isinstance(items[1], FunctionCallOutputItem) and items[1].output == "x"


def test_a_record_gives_back_its_response_and_its_conversation_then_output() -> None:
    call = decode_responses_request(b'{"model": "m", "input": "hi", "instructions": "Be brief."}')
    items = with_ids(call.items, "r1")
    record = encode_record(_response(), encode_input(items))
    answered = msgspec.json.decode(response_json(record))
    assert answered["id"] == "resp_r1" and answered["instructions"] == "Be brief."
    user, assistant = conversation(record)
    assert isinstance(user, MessageItem) and user.content == "hi" and user.id == "msg_r1_in0"
    assert isinstance(assistant, MessageItem) and assistant.role == "assistant" and assistant.id == "msg_r1"
    assert isinstance(assistant.content, list) and isinstance(assistant.content[0], OutputText)
    assert [getattr(i, "id", None) for i in input_items(record)] == ["msg_r1_in0"]  # the output is not input


def test_owners_are_the_key_or_the_tenant_and_one_namespace_without_tenancy() -> None:
    assert owner("acme", "k1", "key") == "acme/k1"
    assert owner("acme", "k1", "tenant") == "acme"
    assert owner(None, None, "key") == OPEN
    assert owner("acme", "k1", "key") != owner("acme", "k2", "key")


@pytest.mark.parametrize("response_id", ["resp_abc123", "resp_" + "a" * 64])
def test_ids_the_edge_makes_are_known(response_id: str) -> None:
    assert known_id(response_id)


@pytest.mark.parametrize("response_id", ["", "resp_", "abc", "resp_a:b", "resp_../x", "resp_" + "a" * 65, "resp_é"])
def test_other_ids_are_never_looked_up(response_id: str) -> None:
    assert not known_id(response_id)


def _messages(n: int) -> list[MessageItem]:
    return [MessageItem(role="user", content=f"m{i}", id=f"msg_{i}") for i in range(n)]


def test_pages_in_either_order_after_an_item() -> None:
    items = list(_messages(5))
    first = page(items, PageQuery(limit=2))  # desc, as OpenAI's default
    assert [m.id for m in first.data] == ["msg_4", "msg_3"]
    assert (first.first_id, first.last_id, first.has_more) == ("msg_4", "msg_3", True)
    rest = page(items, PageQuery(after="msg_3", limit=5))
    assert [m.id for m in rest.data] == ["msg_2", "msg_1", "msg_0"] and not rest.has_more
    asc = page(items, PageQuery(order="asc", after="msg_2", limit=2))
    assert [m.id for m in asc.data] == ["msg_3", "msg_4"] and not asc.has_more
    empty = page(items, PageQuery(after="msg_0"))
    assert (empty.data, empty.first_id, empty.last_id, empty.has_more) == ([], None, None, False)


def test_a_message_s_text_is_listed_as_one_part() -> None:
    listed = page([MessageItem(role="user", content="hi", id="a"), MessageItem(role="assistant", content="yo", id="b")],
                  PageQuery(order="asc"))
    doc = msgspec.json.decode(encode_page(listed))
    assert doc["object"] == "list"
    assert doc["data"][0]["content"] == [{"type": "input_text", "text": "hi"}]
    assert doc["data"][1]["content"] == [{"type": "output_text", "text": "yo", "annotations": []}]
    assert isinstance(listed.data[0], MessageItem) and isinstance(listed.data[0].content[0], InputText)


def test_an_unknown_after_is_refused_naming_it() -> None:
    with pytest.raises(PageError) as raised:
        page(_messages(2), PageQuery(after="msg_9"))
    assert raised.value.param == "after"


@pytest.mark.parametrize(("query", "param"), [
    ({"limit": "0"}, "limit"), ({"limit": "101"}, "limit"), ({"limit": "x"}, "limit"), ({"limit": "-1"}, "limit"),
    ({"order": "up"}, "order"), ({"after": ""}, "after"),
])
def test_bad_query_parameters_are_named(query: dict[str, str], param: str) -> None:
    with pytest.raises(PageError) as raised:
        page_query(query)
    assert raised.value.param == param


def test_query_defaults_are_openai_s() -> None:
    assert page_query({"include[]": "x"}) == PageQuery(None, 20, "desc")
    assert page_query({"limit": "100", "order": "asc", "after": "msg_1"}) == PageQuery("msg_1", 100, "asc")


def test_deleted_is_openai_s_object() -> None:
    assert msgspec.json.decode(deleted("resp_1")) == {"id": "resp_1", "object": "response.deleted", "deleted": True}
