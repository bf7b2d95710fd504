"""The OpenAI Agents SDK (`openai-agents`) chaining its turns through the edge's state: by
`previous_response_id` (its `auto_previous_response_id`, then a run continuing from the last one's
`last_response_id`), by `conversation_id` (a conversation made with the openai SDK), and with its
`OpenAIConversationsSession`, which keeps a session's items in a conversation.

The demo service plays a scripted model (ingress/demo/answer.py): a user message that names the tool is
answered with a call to it; a tool's result with "Tool <call id> returned: <result>"; anything else echoed.
The service keeps every request it receives, so each test asserts there that the second run's request
carried the whole conversation, though the SDK sent only its new items. Tracing is off: it would export
spans to api.openai.com, and nothing here may leave the machine.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import agents
import httpx2
import pytest
from agents import Agent, OpenAIConversationsSession, OpenAIResponsesModel, Runner, function_tool
from openai import AsyncOpenAI
from recording import recording_demo, recording_edge

from ingress.encoding.reading import decode_request
from ingress.encoding.requests import message_text
from ingress.oai.chat import AssistantMessage, ToolMessage
from ingress.serve.app import serve_app
from ingress.settings import Settings

MODEL = "ingress-demo"
PROMPT = "Please look_up the weather in Lisbon"
LATER = "And what did it say?"


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    agents.set_tracing_disabled(True)  # process-wide, and left so: nothing here may reach the network


@dataclass
class Stateful:
    client: AsyncOpenAI
    bodies: list[bytes]  # every request the demo service received, as the edge sent it
    sent: list[dict[str, Any]] = field(default_factory=list)  # every POST /v1/responses body the SDK sent

    def inputs(self, n: int) -> list[str]:
        """What the SDK sent as the n-th response's input: each item's type (a message's role)."""
        items = self.sent[n]["input"]
        return [items] if isinstance(items, str) else [i.get("role") or i["type"] for i in items]

    def received(self, n: int) -> list[str]:
        """The n-th request's messages as the service read them: `role: text`, a call as `call look_up`."""
        out = []
        for m in decode_request(self.bodies[n]).messages:
            tag = str(type(m).__struct_config__.tag)
            if isinstance(m, AssistantMessage) and m.tool_calls:
                out += [f"assistant: call {c.function.name}" for c in m.tool_calls if c.function is not None]
            elif isinstance(m, ToolMessage):
                out.append(f"tool: {message_text(m)}")
            elif tag != "system":
                out.append(f"{tag}: {message_text(m)}")
        return out


@pytest.fixture
async def edge() -> AsyncIterator[Stateful]:
    bodies: list[bytes] = []
    async with AsyncExitStack() as stack:
        upstream = await stack.enter_async_context(serve_app(recording_demo(bodies), "127.0.0.1", 0))
        url, _, _ = await recording_edge(stack, Settings(upstream=upstream))
        sent: list[dict[str, Any]] = []

        async def record(request: httpx2.Request) -> None:
            if request.method == "POST" and request.url.path == "/v1/responses":
                sent.append(json.loads(request.content))

        http = await stack.enter_async_context(httpx2.AsyncClient(event_hooks={"request": [record]}))
        client = await stack.enter_async_context(AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0,
                                                             http_client=http))
        yield Stateful(client, bodies, sent)


def _agent(client: AsyncOpenAI) -> Agent[None]:
    @function_tool
    def look_up(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    return Agent(name="forecaster", instructions="Answer with the tool's result.", tools=[look_up],
                 model=OpenAIResponsesModel(model=MODEL, openai_client=client))


FIRST_RUN = [f"user: {PROMPT}", "assistant: call look_up", "tool: sunny"]


def _answered(text: str) -> bool:
    return text.startswith("Tool call_") and text.endswith("returned: sunny")


async def test_runs_chained_by_previous_response_id(edge: Stateful) -> None:
    agent = _agent(edge.client)
    first = await Runner.run(agent, PROMPT, auto_previous_response_id=True)
    assert _answered(first.final_output) and first.last_response_id is not None
    assert edge.received(1) == FIRST_RUN  # the tool's result went with previous_response_id: the call came back
    second = await Runner.run(agent, LATER, previous_response_id=first.last_response_id)
    assert edge.received(2)[:3] == FIRST_RUN and edge.received(2)[4:] == [f"user: {LATER}"]
    assert edge.received(2)[3] == f"assistant: {first.final_output}"
    assert second.final_output == LATER  # the demo echoes what names no tool
    kept = await edge.client.responses.retrieve(second.last_response_id or "")
    assert kept.previous_response_id == first.last_response_id
    # what the SDK sent: each turn only its new items, chained by id
    assert [edge.inputs(n) for n in range(3)] == [["user"], ["function_call_output"], ["user"]]
    assert [body.get("previous_response_id") for body in edge.sent] == [
        None, first.raw_responses[0].response_id, first.last_response_id]


async def test_runs_in_one_conversation(edge: Stateful) -> None:
    agent = _agent(edge.client)
    conversation = await edge.client.conversations.create(metadata={"agent": "forecaster"})
    first = await Runner.run(agent, PROMPT, conversation_id=conversation.id)
    assert _answered(first.final_output) and edge.received(1) == FIRST_RUN
    await Runner.run(agent, LATER, conversation_id=conversation.id)
    assert edge.received(2) == [*FIRST_RUN, f"assistant: {first.final_output}", f"user: {LATER}"]
    kinds = [item.type async for item in edge.client.conversations.items.list(conversation.id, order="asc")]
    assert kinds == ["message", "function_call", "function_call_output", "message", "message", "message"]
    assert [edge.inputs(n) for n in range(3)] == [["user"], ["function_call_output"], ["user"]]
    assert all(body["conversation"] == conversation.id and "previous_response_id" not in body for body in edge.sent)


async def test_a_session_kept_in_a_conversation(edge: Stateful) -> None:
    agent = _agent(edge.client)
    session = OpenAIConversationsSession(openai_client=edge.client)
    first = await Runner.run(agent, PROMPT, session=session)
    assert _answered(first.final_output)
    await Runner.run(agent, LATER, session=session)  # the session sends its items back whole, each run
    assert edge.received(2) == [*FIRST_RUN, f"assistant: {first.final_output}", f"user: {LATER}"]
    items = await session.get_items()
    assert len(items) == 6 and items[-1].get("role") == "assistant"
    popped = await session.pop_item()
    assert popped is not None and len(await session.get_items()) == 5
    await session.clear_session()
