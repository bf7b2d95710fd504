"""What the stored-responses tests share: an edge served on loopback for the test's length, the openai SDK
pointed at it, and what a recording fake service was asked (tests/integration/test_responses_store.py,
test_conversations.py, test_resumable_streams.py, test_background_responses.py)."""

from __future__ import annotations

from contextlib import AsyncExitStack

import openai
from fakes.upstream import FakeUpstream

from ingress.encoding.requests import message_text
from ingress.oai.chat import AssistantMessage, SystemMessage, UserMessage
from ingress.serve.app import create_app, serve_app
from ingress.settings import Settings


async def serving(stack: AsyncExitStack, settings: Settings) -> str:
    """An edge of `settings` on a free loopback port until `stack` closes: its base URL."""
    return await stack.enter_async_context(serve_app(create_app(settings), "127.0.0.1", 0))


async def sdk(stack: AsyncExitStack, url: str, key: str = "sk-test") -> openai.AsyncOpenAI:
    """The openai SDK for the edge at `url`, with `key`, never retrying (a test sees each answer)."""
    return await stack.enter_async_context(openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0))


def received_messages(fake: FakeUpstream, n: int) -> list[tuple[str, str]]:
    """The chat messages the fake received in its n-th request, as (role, text)."""
    return [(str(type(m).__struct_config__.tag), message_text(m)) for m in fake.received[n].request.messages
            if isinstance(m, UserMessage | AssistantMessage | SystemMessage)]
