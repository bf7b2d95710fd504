"""instructor, in its own environment, against a real edge with the embedded demo, by `base_url` alone.

instructor 1.17 pins `jiter<0.15`, which holds `openai` at 3.3.0: it cannot live in the dev venv, so
tests/support/clientenv.py builds it a cached virtualenv once (the first run pays for pip; the timeout mark
below applies only then) and runs tests/clients/instructor_ticket.py there, against the demo edge
served from this process in a background thread.

What the demo does with each mode (ingress/demo/answer.py):
- `Mode.TOOLS`: instructor offers one function tool named after the model, `Ticket`, and names it in
  `tool_choice`. The demo calls it (the user's text does not contain "Ticket": only `tool_choice` can have
  asked for it) with arguments built from the schema instructor sent: the user's text for `title`, 0 for
  the integer, false for the boolean, null for `assignee` (its schema is an `anyOf`, not a type).
- `Mode.JSON` and `Mode.JSON_SCHEMA`: instructor puts the schema in a system message or in
  `response_format` and parses the message content. The demo has no model: it echoes the last user
  message, so the user's message is the JSON document instructor must parse and validate.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from clientenv import BUILD_TIMEOUT, INSTRUCTOR, ClientScriptFailed

# The env build is the only slow part, and happens once per requirement set and Python.
pytestmark = [] if INSTRUCTOR.ready() else [pytest.mark.timeout(BUILD_TIMEOUT)]

TICKET = {"title": "printer on fire", "priority": 2, "urgent": True, "assignee": "ops"}


def _tickets(edge: str, mode: str, text: str) -> list[dict[str, Any]]:
    lines = INSTRUCTOR.run("instructor_ticket.py", edge, mode, text).splitlines()
    return [json.loads(line) for line in lines]


def test_the_environment_is_its_own() -> None:
    report = json.loads(INSTRUCTOR.run("versions.py", "instructor", "openai"))
    assert report["prefix"] == str(INSTRUCTOR.path)
    assert report["versions"]["instructor"] == "1.17.0"


def test_tools_mode_gets_the_demos_call_of_the_named_tool(threaded_demo_edge: str) -> None:
    text = "The printer in room 4 is on fire"
    ticket = {"title": text, "priority": 0, "urgent": False, "assignee": None}
    assert _tickets(threaded_demo_edge, "tool_call", text) == [
        {"client": "sync", "ticket": ticket}, {"client": "async", "ticket": ticket}]


@pytest.mark.parametrize("mode", ["json_mode", "json_schema_mode"])
def test_json_modes_parse_the_message_content(threaded_demo_edge: str, mode: str) -> None:
    assert _tickets(threaded_demo_edge, mode, json.dumps(TICKET)) == [
        {"client": "sync", "ticket": TICKET}, {"client": "async", "ticket": TICKET}]


def test_a_reply_that_breaks_the_schema_is_refused_by_instructor_not_the_edge(threaded_demo_edge: str) -> None:
    bad = json.dumps({**TICKET, "priority": "high"})  # the edge answers it; instructor's validation refuses it
    with pytest.raises(ClientScriptFailed, match=r"InstructorRetryException(.|\n)*priority\n  Input should be a valid"):
        _tickets(threaded_demo_edge, "json_mode", bad)
