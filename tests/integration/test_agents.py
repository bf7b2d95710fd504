"""The OpenAI Agents SDK (`openai-agents`) runs an agent with a function tool against a real edge, by
`base_url` alone.

The demo service plays the model (ingress/demo/answer.py): the user's message names the tool, so the
first answer is a call to it, with the user's text as its string argument; the SDK runs the tool and
sends its result back as a tool message, and the demo answers "Tool <call id> returned: <result>". Two
model requests, then a final output only the tool's result can have produced.

Each way the SDK can reach a model is one `Api` (the `model` fixture is parametrized over them): its
chat-completions model, and its Responses model (the SDK's default), which sends the tool's result back
as a `function_call_output` item. Tracing is off: it would export spans to api.openai.com.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import agents
import httpx2
import pytest
from agents import Agent, Model, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool
from openai import AsyncOpenAI
from recording import recording_edge

from ingress.exchange import Exchange
from ingress.settings import Settings

MODEL = "ingress-demo"
PROMPT = "Please look_up the weather in Lisbon"


@dataclass(frozen=True)
class Api:
    """One of the SDK's model classes, built over a client, and the endpoint it calls."""

    path: str
    model: Callable[[AsyncOpenAI], Model]


APIS = {
    "chat": Api("/v1/chat/completions", lambda client: OpenAIChatCompletionsModel(model=MODEL, openai_client=client)),
    "responses": Api("/v1/responses", lambda client: OpenAIResponsesModel(model=MODEL, openai_client=client)),
}


@dataclass
class RecordedEdge:
    """A demo edge that records what reached it: every Exchange, and every (path, status) the client saw."""

    url: str
    exchanges: list[Exchange]
    calls: list[tuple[str, int]] = field(default_factory=list)


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    agents.set_tracing_disabled(True)  # process-wide, and left so: nothing here may reach the network


@pytest.fixture
async def demo() -> AsyncIterator[RecordedEdge]:
    async with AsyncExitStack() as stack:
        url, _, exchanges = await recording_edge(stack, Settings())
        yield RecordedEdge(url, exchanges)


@pytest.fixture(params=sorted(APIS))
async def model(request: pytest.FixtureRequest, demo: RecordedEdge) -> AsyncIterator[tuple[Api, Model]]:
    """The SDK's model for one Api, over an AsyncOpenAI client whose only change is `base_url`."""
    api = APIS[request.param]

    async def seen(response: httpx2.Response) -> None:
        demo.calls.append((response.request.url.path, response.status_code))

    async with (httpx2.AsyncClient(event_hooks={"response": [seen]}) as http,
                AsyncOpenAI(base_url=f"{demo.url}/v1", api_key="sk-test", max_retries=0, http_client=http) as client):
        yield api, api.model(client)


def _agent(model: Model, looked_up: list[str]) -> Agent[None]:
    @function_tool
    def look_up(city: str) -> str:
        """The weather in a city."""
        looked_up.append(city)
        return f"sunny in {city!r}"

    return Agent(name="forecaster", instructions="Answer with the tool's result.", tools=[look_up], model=model)


async def test_an_agent_calls_its_tool_and_answers_with_the_result(demo: RecordedEdge,
                                                                  model: tuple[Api, Model]) -> None:
    api, llm = model
    looked_up: list[str] = []
    result = await Runner.run(_agent(llm, looked_up), PROMPT)

    assert looked_up == [PROMPT]  # the tool ran once, with the argument the demo built from its schema
    assert demo.calls == [(api.path, 200)] * 2  # the call, then the answer to the tool's result
    first, second = demo.exchanges
    assert (first.routed.model, first.routed.stream, second.routed.stream) == (MODEL, False, False)
    # the demo names a call after its request: the tool's result went back under the first answer's call id
    assert result.final_output == f"Tool call_{first.request_id[:24]} returned: sunny in {PROMPT!r}"


async def test_a_streamed_run_yields_the_call_the_output_and_the_answer(demo: RecordedEdge,
                                                                       model: tuple[Api, Model]) -> None:
    api, llm = model
    looked_up: list[str] = []
    run = Runner.run_streamed(_agent(llm, looked_up), PROMPT)
    items = [event.name async for event in run.stream_events() if event.type == "run_item_stream_event"]

    assert items == ["tool_called", "tool_output", "message_output_created"]
    assert looked_up == [PROMPT]
    assert demo.calls == [(api.path, 200)] * 2
    first, second = demo.exchanges
    assert (first.routed.stream, second.routed.stream) == (True, True)
    assert run.final_output == f"Tool call_{first.request_id[:24]} returned: sunny in {PROMPT!r}"
