"""instructor, in its own environment (tests/support/clientenv.py), asks the edge for a `Ticket`: prints it as JSON.

    python instructor_ticket.py <edge base URL> <mode: tool_call, json_mode, ...> <user text>

One line per client, the blocking one first, then the async one: `{"client": "sync", "ticket": {...}}`.
Only `base_url` changes; instructor and its pinned `openai` do the rest.
"""

from __future__ import annotations

import asyncio
import json
import sys

import instructor
import openai
from pydantic import BaseModel

MODEL = "ingress-demo"


class Ticket(BaseModel):
    """A support ticket."""

    title: str
    priority: int
    urgent: bool
    assignee: str | None = None


def _messages(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _sync(url: str, mode: instructor.Mode, text: str) -> Ticket:
    with openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0) as raw:
        client = instructor.from_openai(raw, mode=mode)
        ticket: Ticket = client.chat.completions.create(model=MODEL, response_model=Ticket, max_retries=0,
                                                        messages=_messages(text))
        return ticket


async def _async(url: str, mode: instructor.Mode, text: str) -> Ticket:
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0) as raw:
        client = instructor.from_openai(raw, mode=mode)
        ticket: Ticket = await client.chat.completions.create(model=MODEL, response_model=Ticket, max_retries=0,
                                                              messages=_messages(text))
        return ticket


def main(url: str, mode_name: str, text: str) -> None:
    mode = instructor.Mode(mode_name)
    for name, ticket in (("sync", _sync(url, mode, text)), ("async", asyncio.run(_async(url, mode, text)))):
        print(json.dumps({"client": name, "ticket": ticket.model_dump(mode="json")}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
