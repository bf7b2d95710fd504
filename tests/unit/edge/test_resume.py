"""Resumable streams (ingress/edge/resume.py): the live stream run by a task the edge owns, its events
logged before the client is handed them and the rest run without a client that left; and a log replayed
from an index, followed while it grows, on a memory store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing

import msgspec
import pytest
from responses_api import call, chunk

from ingress import pipeline
from ingress.edge import resume
from ingress.edge.drain import Drain
from ingress.errors import UpstreamTimeout
from ingress.oai.responses_answers import ResponseObject
from ingress.state import ResponsesSettings, ResponseStore
from ingress.tasks import BackgroundTasks
from ingress.translate.responses_events import ResponseEvents


def _store(**settings: float) -> ResponseStore:
    store = ResponseStore.build(ResponsesSettings(backend="memory", **settings), None)  # type: ignore[arg-type]
    assert store is not None
    return store


def _event(n: int, kind: str = "response.output_text.delta") -> bytes:
    return msgspec.json.encode({"type": kind, "sequence_number": n})


async def _live(events: ResponseEvents, words: int, fail: bool = False
                ) -> AsyncGenerator[pipeline.ResponsesStreamEvent, None]:
    yield pipeline.OPENED
    yield pipeline.ResponsesBurst(events.opened())
    for i in range(words):
        await asyncio.sleep(0)
        yield pipeline.HEARTBEAT
        yield pipeline.ResponsesBurst(events.feed(chunk(content=f"w{i} ")))
    if fail:
        yield pipeline.Failed(UpstreamTimeout("gone"))
        return
    made = events.closed()
    yield pipeline.ResponsesBurst([*made, events.completion(events.final(None))])
    yield pipeline.DONE


async def _logged(store: ResponseStore, events: ResponseEvents) -> list[str]:
    return [resume.event_type(e) for e in await store.read_events("o", events.id, 0) or []]


async def test_a_client_that_leaves_does_not_stop_the_stream_nor_its_log() -> None:
    store, tasks, events = _store(), BackgroundTasks(), ResponseEvents(call(), request_id="r1", created_at=5)
    handed = []
    async with aclosing(resume.detach(tasks, Drain(), store, "o", events, _live(events, 20))) as listened:
        async for event in listened:
            handed.append(event)
            if len(handed) == 4:
                break  # the client is gone
    await tasks.wait(2.0)
    assert len(tasks) == 0
    logged = await _logged(store, events)
    assert logged[0] == "response.created" and logged[-1] == "response.completed"
    numbers = [msgspec.json.decode(e)["sequence_number"] for e in await store.read_events("o", events.id, 0) or []]
    assert numbers == list(range(len(numbers)))  # an event's index in its log is its sequence_number


async def test_a_failure_is_logged_and_handed_as_the_stream_s_own_events() -> None:
    store, tasks, events = _store(), BackgroundTasks(), ResponseEvents(call(), request_id="r2", created_at=5)
    handed = [e async for e in resume.detach(tasks, Drain(), store, "o", events, _live(events, 2, fail=True))]
    assert isinstance(handed[-1], pipeline.Failed)
    assert isinstance(handed[-2], pipeline.ResponsesBurst)
    assert [e.type for e in handed[-2].events] == ["error", "response.failed"]
    assert (await _logged(store, events))[-2:] == ["error", "response.failed"]
    await tasks.close()


async def test_a_log_is_replayed_from_an_index_and_followed_until_its_last_event() -> None:
    store = _store(resume_poll_ms=10)
    await store.append_events("o", "resp_x", [_event(0), _event(1), _event(2)])

    async def grow() -> None:
        for n in range(3, 6):
            await asyncio.sleep(0.02)
            await store.append_events("o", "resp_x", [_event(n)])
        await store.append_events("o", "resp_x", [_event(6, "response.completed")])

    async with asyncio.TaskGroup() as group:
        group.create_task(grow())  # a test's own task, awaited by its group
        first = await store.read_events("o", "resp_x", 2) or []
        got = [e async for batch in resume.replay(store, "o", "resp_x", 2, first) for e in batch]
    assert [msgspec.json.decode(e)["sequence_number"] for e in got] == [2, 3, 4, 5, 6]


async def test_an_ended_stream_is_not_followed_and_a_still_log_ends_in_an_error() -> None:
    store = _store(resume_poll_ms=10, resume_idle=1)
    await store.append_events("o", "resp_y", [_event(0), _event(1, "response.completed")])
    assert [b async for b in resume.replay(store, "o", "resp_y", 2, [], ended=True)] == [[]]
    await store.append_events("o", "resp_z", [_event(0)])
    with pytest.raises(UpstreamTimeout):
        async for _ in resume.replay(store, "o", "resp_z", 1, []):
            pass


async def test_a_background_response_keeps_its_status_and_stops_when_a_cancel_is_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resume, "CANCEL_POLL", 0.0)
    store, tasks, events = _store(), BackgroundTasks(), ResponseEvents(call(), request_id="r3", created_at=5)
    kept: list[str] = []
    asks = iter([False, False, True])

    async def status(obj: ResponseObject) -> None:
        kept.append(obj.status)

    async def asked() -> bool:
        return next(asks, True)

    handed = [e async for e in resume.detach(tasks, Drain(), store, "o", events, _live(events, 50),
                                             resume.Background(status, asked))]
    assert kept == ["in_progress", "cancelled"]
    assert isinstance(handed[-1], pipeline.Failed) and handed[-1].error.code == "response_cancelled"
    assert (await _logged(store, events))[-1] == "response.failed"  # a follower stops there
    await tasks.close()
