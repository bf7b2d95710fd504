"""Late system and developer messages folded into user turns: where each goes, what it reads, and when not."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import msgspec
import pytest

from ingress.oai.chat import (
    AssistantMessage,
    ChatCompletionRequest,
    DeveloperMessage,
    FunctionCallIn,
    ImagePart,
    ImageUrl,
    Message,
    PromptCacheBreakpoint,
    SystemMessage,
    TextPart,
    ToolCallIn,
    ToolMessage,
    UserMessage,
)
from ingress.pipeline.turns import fold_late_system, late_system, place_cache_breakpoints
from ingress.settings import Route

BREAKPOINT = PromptCacheBreakpoint(mode="explicit")
CALL = ToolCallIn(id="call_1", function=FunctionCallIn(name="ls", arguments="{}"))


def request(*messages: Message) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", messages=list(messages))


def folded(*messages: Message) -> list[Message]:
    out, did = fold_late_system(request(*messages))
    assert did
    return out.messages


def roles(messages: list[Message]) -> list[str]:
    return [type(m).__name__.removesuffix("Message").lower() for m in messages]


def test_claude_codes_late_system_joins_the_user_message_before_it() -> None:
    """[system, user, system]: the leading one stays, the late one ends the user's turn."""
    out = folded(SystemMessage(content="You are Claude Code."), UserMessage(content="fix the bug"),
                 SystemMessage(content="Todo list is empty."))

    assert out == [SystemMessage(content="You are Claude Code."),
                   UserMessage(content="fix the bug\n\n<system>\nTodo list is empty.\n</system>")]


def test_a_late_system_after_an_assistant_turn_opens_the_next_user_message() -> None:
    out = folded(UserMessage(content="hi"), AssistantMessage(content="hello"), DeveloperMessage(content="be brief"),
                 UserMessage(content="and now?"))

    assert roles(out) == ["user", "assistant", "user"]
    assert out[2] == UserMessage(content="<developer>\nbe brief\n</developer>\n\nand now?")


def test_a_late_system_with_no_user_message_beside_it_is_a_user_message_of_its_own() -> None:
    out = folded(UserMessage(content="hi"), AssistantMessage(content="hello"), SystemMessage(content="a"),
                 SystemMessage(content="b"))

    assert roles(out) == ["user", "assistant", "user"]  # a run of them is one user turn: roles alternate
    assert out[2] == UserMessage(content="<system>\na\n</system>\n\n<system>\nb\n</system>")


@pytest.mark.parametrize("messages", [
    pytest.param([UserMessage(content="q"), SystemMessage(content="s"), AssistantMessage(content="a")],
                 id="user-system-assistant"),
    pytest.param([UserMessage(content="q"), AssistantMessage(content="a"), SystemMessage(content="s"),
                  UserMessage(content="q2"), AssistantMessage(content="a2"), SystemMessage(content="s2")],
                 id="after-assistant-and-at-the-end"),
    pytest.param([SystemMessage(content="s0"), UserMessage(content="q"), AssistantMessage(content="a"),
                  SystemMessage(content="s"), AssistantMessage(content="a2")], id="between-two-assistants"),
])
def test_roles_still_alternate(messages: list[Message]) -> None:
    out = folded(*messages)

    talk = [r for r in roles(out) if r != "system"]
    assert all(a != b for a, b in pairwise(talk)), roles(out)
    assert not any(isinstance(m, SystemMessage | DeveloperMessage) for m in out[1:])


def test_a_late_system_between_a_tool_call_and_its_result_waits_for_the_result() -> None:
    out = folded(UserMessage(content="list"), AssistantMessage(tool_calls=[CALL]), SystemMessage(content="note"),
                 ToolMessage(content="a.txt", tool_call_id="call_1"), AssistantMessage(content="done"))

    assert roles(out) == ["user", "assistant", "tool", "user", "assistant"]
    assert out[3] == UserMessage(content="<system>\nnote\n</system>")


def test_the_leading_system_and_developer_messages_stay_where_they_are() -> None:
    leading: list[Message] = [SystemMessage(content="a"), DeveloperMessage(content="b", name="dev")]

    out = folded(*leading, UserMessage(content="q"), SystemMessage(content="late"))

    assert out[:2] == leading


def test_parts_keep_their_cache_breakpoints_and_the_users_parts_come_first() -> None:
    image = ImagePart(image_url=ImageUrl(url="https://example.com/a.png"))
    user = UserMessage(content=[TextPart(text="look"), image], name="ana")
    late = SystemMessage(content=[TextPart(text="one"), TextPart(text="two", prompt_cache_breakpoint=BREAKPOINT)])

    out = folded(user, late)

    assert out == [UserMessage(content=[TextPart(text="look"), image, TextPart(text="<system>\none"),
                                        TextPart(text="two\n</system>", prompt_cache_breakpoint=BREAKPOINT)],
                               name="ana")]


def test_a_string_beside_parts_becomes_a_part() -> None:
    late = SystemMessage(content=[TextPart(text="s", prompt_cache_breakpoint=BREAKPOINT)])

    out = folded(UserMessage(content="q"), late)

    assert out == [UserMessage(content=[TextPart(text="q"),
                                        TextPart(text="<system>\ns\n</system>", prompt_cache_breakpoint=BREAKPOINT)])]


def test_an_empty_late_system_still_shows_where_it_was() -> None:
    assert folded(UserMessage(content="q"), SystemMessage(content=[])) == [
        UserMessage(content="q\n\n<system>\n\n</system>")]


@pytest.mark.parametrize("messages", [
    pytest.param([UserMessage(content="q")], id="no-system"),
    pytest.param([SystemMessage(content="s"), DeveloperMessage(content="d"), UserMessage(content="q"),
                  AssistantMessage(content="a")], id="only-leading"),
    pytest.param([SystemMessage(content="s")], id="only-system"),
])
def test_a_request_without_late_system_messages_is_the_same_request(messages: list[Message]) -> None:
    asked = request(*messages)

    assert fold_late_system(asked) == (asked, False)
    assert fold_late_system(asked)[0] is asked


def test_folding_leaves_the_rest_of_the_request_and_the_original_alone() -> None:
    asked = msgspec.structs.replace(request(UserMessage(content="q"), SystemMessage(content="s")), temperature=0.5)
    before = msgspec.json.encode(asked)

    out, _ = fold_late_system(asked)

    assert out.temperature == 0.5 and msgspec.json.encode(asked) == before


@pytest.mark.parametrize(("route", "mode"), [
    pytest.param({"provider": "self_hosted"}, "fold", id="self-hosted-folds"),
    pytest.param({"provider": "openai"}, "keep", id="openai-keeps"),
    pytest.param({"provider": "anthropic"}, "keep", id="anthropic-keeps"),
    pytest.param({}, "keep", id="default-provider-keeps"),
    pytest.param({"provider": "self_hosted", "late_system": "keep"}, "keep", id="self-hosted-set-to-keep"),
    pytest.param({"provider": "openai", "late_system": "fold"}, "fold", id="openai-set-to-fold"),
])
def test_the_default_follows_the_provider(route: dict[str, Any], mode: str) -> None:
    assert late_system(Route(group="g", model="m", **route)) == mode


def test_the_setting_is_read_from_configuration() -> None:
    route = msgspec.json.decode(b'{"group": "g", "model": "m", "late_system": "keep"}', type=Route)
    assert route.late_system == "keep"
    with pytest.raises(msgspec.ValidationError, match="late_system"):
        msgspec.json.decode(b'{"group": "g", "model": "m", "late_system": "drop"}', type=Route)


# --- prompt-cache breakpoints for Anthropic ---------------------------------------------------------


def marks(req: ChatCompletionRequest) -> list[int]:
    return [i for i, m in enumerate(req.messages) if isinstance(getattr(m, "content", None), list)
            and any(getattr(p, "prompt_cache_breakpoint", None) is not None for p in m.content)]  # type: ignore[union-attr]


def test_breakpoints_go_on_the_instructions_the_last_message_and_the_turn_before() -> None:
    asked = request(SystemMessage(content="rules"), DeveloperMessage(content="more rules"),
                    UserMessage(content="list the files"), AssistantMessage(tool_calls=[CALL]),
                    ToolMessage(content="a.txt", tool_call_id="call_1"), AssistantMessage(content="a.txt is there"),
                    UserMessage(content="and now?"))
    placed, did = place_cache_breakpoints(asked)
    assert did and marks(placed) == [1, 4, 6]
    assert placed.messages[1] == DeveloperMessage(content=[TextPart(text="more rules",
                                                                    prompt_cache_breakpoint=BREAKPOINT)])
    assert asked.messages[1] == DeveloperMessage(content="more rules")  # the request given is left as it was


def test_a_first_turn_gets_two_and_a_client_s_own_breakpoints_are_left_alone() -> None:
    first, _ = place_cache_breakpoints(request(SystemMessage(content="rules"), UserMessage(content="q")))
    assert marks(first) == [0, 1]
    own = request(SystemMessage(content=[TextPart(text="rules", prompt_cache_breakpoint=BREAKPOINT)]),
                  UserMessage(content="q"))
    assert place_cache_breakpoints(own) == (own, False)
    image = request(UserMessage(content=[TextPart(text="what is it"), ImagePart(image_url=ImageUrl(url="https://x"))]))
    placed, _ = place_cache_breakpoints(image)
    assert placed.messages[0].content[-1].prompt_cache_breakpoint == BREAKPOINT  # type: ignore[index, union-attr]
