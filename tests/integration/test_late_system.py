"""System messages after the first turn (docs/routing.md, "Late system messages"), through a real edge:
a `self_hosted` route's service receives them folded into user turns, the access line names the hint;
another provider's route sends them as they came; a fallback route folds by its own setting.

Chat, Responses and Messages requests each reach the scripted fakes, which show what was sent.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import openai
import pytest
from fakes import upstream as fu
from fakes.upstream import FakeUpstream
from logcapture import lines
from prometheus_client.parser import text_string_to_metric_families

from ingress import wire
from ingress.oai.chat import Message, SystemMessage, UserMessage
from ingress.settings import Endpoint, Group, Retry, Route, Settings, Timeouts

StartEdge = Callable[[Settings], Awaitable[str]]  # the `start_edge` fixture
QUICK = Timeouts(connect=1.0, first_byte=5.0, idle=5.0)

HINT = "messages.late_system_folded"
COUNTED = f'ingress_hints_not_sent_total{{hint="{HINT}"}}'
CLAUDE_CODE: Any = [  # Claude Code's shape: its instructions, the user's turn, a reminder after it
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "fix the failing test"},
    {"role": "system", "content": "The todo list is empty."},
]
FOLDED = [SystemMessage(content="You are a coding agent."),
          UserMessage(content="fix the failing test\n\n<system>\nThe todo list is empty.\n</system>")]
OVERLOADED = wire.ErrorInfo(status=503, type="server_error", code="upstream_overloaded", message="Overloaded.")


@dataclass
class Edge:
    url: str
    local: FakeUpstream  # behind the self_hosted routes
    cloud: FakeUpstream  # behind the openai route


@pytest.fixture
async def cloud() -> AsyncIterator[FakeUpstream]:
    fake = FakeUpstream()
    async with fake.running():
        yield fake


@pytest.fixture
async def edge(start_edge: StartEdge, fake_upstream: FakeUpstream, cloud: FakeUpstream) -> Edge:
    groups = {"local": Group(endpoints=[Endpoint(url=fake_upstream.url)]),
              "cloud": Group(endpoints=[Endpoint(url=cloud.url)])}
    routes = (Route(prefix="qwen-", group="local", provider="self_hosted"),
              Route(prefix="kept-", group="local", provider="self_hosted", late_system="keep"),
              Route(prefix="gpt-", group="cloud", provider="openai", fallbacks=["qwen-fallback"]),
              Route(name="qwen-fallback", group="local", provider="self_hosted", upstream_model="qwen-3"))
    # A fallback's retry earned by the request itself, not by the budget's trickle (test_fallback_chains.py).
    url = await start_edge(Settings(groups=groups, routes=routes, timeouts=QUICK,
                                    retry=Retry(budget_ratio=1.0, budget_min_per_s=100.0)))
    return Edge(url, fake_upstream, cloud)


def _client(edge: Edge) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{edge.url}/v1", api_key="sk-test", max_retries=0)


def _access(log_stream: io.StringIO, request_id: str) -> dict[str, Any]:
    [access] = [line for line in lines(log_stream) if line.get("request_id") == request_id]
    return access


async def _counted(http: aiohttp.ClientSession, url: str) -> float:
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "ingress_hints_not_sent_total" and s.labels.get("hint") == HINT)


def _received(fake: FakeUpstream) -> list[Message]:
    return list(fake.received[-1].request.messages)


async def test_a_self_hosted_route_receives_them_folded_and_the_access_line_names_the_hint(
        edge: Edge, log_stream: io.StringIO, http: aiohttp.ClientSession) -> None:
    before = await _counted(http, edge.url)
    async with _client(edge) as client:
        completion = await client.chat.completions.create(model="qwen-3", messages=CLAUDE_CODE,
                                                          extra_headers={"x-request-id": "late-system-0001"})

    assert completion.choices[0].message.content
    assert _received(edge.local) == FOLDED
    assert _access(log_stream, "late-system-0001")["dropped"] == [HINT]
    assert await _counted(http, edge.url) - before == 1


@pytest.mark.parametrize("model", ["gpt-4o", "kept-3"], ids=["openai-by-default", "self-hosted-set-to-keep"])
async def test_a_route_that_keeps_them_sends_them_as_they_came(edge: Edge, log_stream: io.StringIO,
                                                               model: str) -> None:
    async with _client(edge) as client:
        await client.chat.completions.create(model=model, messages=CLAUDE_CODE,
                                             extra_headers={"x-request-id": f"late-system-{model}"})

    fake = edge.cloud if model.startswith("gpt-") else edge.local
    assert [type(m).__name__ for m in _received(fake)] == ["SystemMessage", "UserMessage", "SystemMessage"]
    assert "dropped" not in _access(log_stream, f"late-system-{model}")


async def test_a_fallback_route_folds_by_its_own_setting(edge: Edge, log_stream: io.StringIO) -> None:
    edge.cloud.play(fu.error_answer(OVERLOADED))
    async with _client(edge) as client:
        await client.chat.completions.create(model="gpt-4o", messages=CLAUDE_CODE,
                                             extra_headers={"x-request-id": "late-system-fallback"})

    assert [type(m).__name__ for m in _received(edge.cloud)] == ["SystemMessage", "UserMessage", "SystemMessage"]
    assert _received(edge.local) == FOLDED
    assert _access(log_stream, "late-system-fallback")["dropped"] == [HINT]


async def test_a_responses_request_keeps_its_own_hints_beside_the_fold(edge: Edge, log_stream: io.StringIO) -> None:
    async with _client(edge) as client:
        await client.responses.create(
            model="qwen-3", instructions="You are a coding agent.", tools=[{"type": "web_search"}],
            input=[{"role": "user", "content": "fix the failing test"},
                   {"role": "developer", "content": "Run the tests first."}],
            extra_headers={"x-request-id": "late-system-responses"})

    assert _received(edge.local) == [
        SystemMessage(content="You are a coding agent."),
        UserMessage(content="fix the failing test\n\n<developer>\nRun the tests first.\n</developer>")]
    assert sorted(_access(log_stream, "late-system-responses")["dropped"]) == [HINT, "tools.web_search"]


async def test_a_messages_request_off_anthropic_is_folded(edge: Edge, log_stream: io.StringIO,
                                                          http: aiohttp.ClientSession) -> None:
    body = {"model": "qwen-3", "max_tokens": 64, "system": "You are a coding agent.",
            "messages": [{"role": "user", "content": "fix the failing test"},
                         {"role": "assistant", "content": "On it."},
                         {"role": "system", "content": "The todo list is empty."}]}
    headers = {"anthropic-version": "2023-06-01", "x-request-id": "late-system-messages"}
    async with http.post(f"{edge.url}/v1/messages", json=body, headers=headers) as response:
        assert response.status == 200, await response.text()

    [system, user, assistant, reminder] = _received(edge.local)
    assert [system.content, user.content, assistant.content] == ["You are a coding agent.", "fix the failing test",
                                                                 "On it."]
    assert reminder == UserMessage(content="<system>\nThe todo list is empty.\n</system>")
    assert HINT in _access(log_stream, "late-system-messages")["dropped"]
