"""Resumable Responses streams: a stored streamed response runs in a task the edge owns, which appends
each read's events to the response's log in the store (ingress/state/event_stores.py) before the client
is sent them; so a client that drops (a network blip, a sleeping laptop, an idle timeout) loses nothing:
the response goes on to its end and is kept, and `GET /v1/responses/{id}?stream=true&starting_after=N`,
on this replica or any other on the same store, replays events N+1.. and follows the rest of one still
running by reading its log again every `[responses] resume_poll_ms` (polling: one LRANGE a poll on
Redis, nothing on a log that has not grown) until response.completed, .incomplete or .failed.

    detach  the live stream, run by the task and handed to the client through a queue while it listens
    replay  a stored log from an index on, following it while it grows
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing, suppress
from dataclasses import dataclass

import msgspec

from ingress import metrics, pipeline
from ingress.edge.drain import Drain
from ingress.errors import IngressError, ResponseCancelled, UpstreamTimeout
from ingress.oai import responses_answers
from ingress.state import ResponseStore
from ingress.tasks import BackgroundTasks
from ingress.translate.responses_events import ResponseEvents

TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
CANCEL_POLL = 0.25  # seconds between two reads of a background response's cancel mark, while it runs
PING_EVERY = 10.0  # seconds a follower waits on an unchanged log before it sends the client a heartbeat
_END = object()
_encoder = msgspec.json.Encoder()


class _Type(msgspec.Struct):
    type: str = ""


_type = msgspec.json.Decoder(_Type)


def event_type(event: bytes) -> str:
    return _type.decode(event).type


@dataclass(frozen=True)
class Background:
    """A background response (`background: true`): its record kept at each change of status (`kept`:
    in_progress once the service has begun; failed or cancelled at such an end: completed is the stream's
    own `keep`), and whether a cancel was asked (`asked`, read from the store at most every CANCEL_POLL s)."""

    kept: Callable[[responses_answers.ResponseObject], Awaitable[None]]
    asked: Callable[[], Awaitable[bool]]


def detach(tasks: BackgroundTasks, drain: Drain, store: ResponseStore, owner: str, events: ResponseEvents,
           stream: AsyncGenerator[pipeline.ResponsesStreamEvent, None], background: Background | None = None
           ) -> AsyncGenerator[pipeline.ResponsesStreamEvent, None]:
    """The stream's events for the client, while it reads them; the stream itself runs in a task of
    `tasks` to its end (or the drain's deadline), each read's events appended to the log first. A failure,
    the edge's own too, is ended in the log as the client is sent it: `error`, then response.failed; a
    background response's record says how it ended (failed, or cancelled)."""
    queue: asyncio.Queue[object] = asyncio.Queue()  # unbounded: what a slow client has not read yet
    listening = [True]
    loop = asyncio.get_running_loop()

    def hand(event: object) -> None:
        if listening[0]:
            queue.put_nowait(event)

    async def log(made: list[responses_answers.StreamEvent]) -> None:
        if made:
            await store.append_events(owner, events.id, [_encoder.encode(e) for e in made])

    async def run() -> None:
        try:
            async with aclosing(stream) as live:
                with drain.deadline():
                    checked = loop.time()
                    async for event in live:
                        if isinstance(event, pipeline.Failed):
                            await _fail(event.error)
                            return
                        if background is not None and event is pipeline.OPENED:
                            await background.kept(events.snapshot("in_progress"))
                        if background is not None and loop.time() - checked >= CANCEL_POLL:
                            checked = loop.time()
                            if await background.asked():
                                raise ResponseCancelled("The response was cancelled (POST /v1/responses/{id}/cancel).")
                        if isinstance(event, pipeline.ResponsesBurst):
                            await log(event.events)
                        elif not isinstance(event, pipeline.Signal):
                            await log([event])
                        hand(event)
        except IngressError as exc:  # the drain's deadline, or the store failing under the stream
            await _fail(exc)
        finally:
            hand(_END)

    async def _fail(exc: IngressError) -> None:
        made = events.failed(exc)
        with suppress(IngressError):  # the store is failing: the client is still told
            await log(made)
        hand(pipeline.ResponsesBurst(made))
        hand(pipeline.Failed(exc))
        last = made[-1] if made else None
        if background is not None and isinstance(last, responses_answers.ResponseEvent):
            status = "cancelled" if isinstance(exc, ResponseCancelled) else "failed"
            ended = msgspec.structs.replace(last.response, status=status)
            with suppress(IngressError):  # the store is failing: nothing else can say it ended
                await background.kept(ended)

    return _listen(queue, listening, tasks.spawn(run(), f"response:{events.id}"), drain)


async def _listen(queue: asyncio.Queue[object], listening: list[bool], task: asyncio.Task[None], drain: Drain
                  ) -> AsyncGenerator[pipeline.ResponsesStreamEvent, None]:
    """What the task hands, until the stream's end. A client that leaves is let go, and the request waits
    for the task without it (the drain's deadline bounds it), so that its usage is recorded and charged
    whole, as the response it is kept as. At the drain's deadline the task ends the stream with its own
    events (logged too), which the client is then handed: the request's own cancellation is let go."""
    try:
        while (event := await _next(queue, drain)) is not _END:
            yield event  # type: ignore[misc]  # what `run` hands
            if event is pipeline.DONE or isinstance(event, pipeline.Failed):
                return
        raise UpstreamTimeout("The response's stream ended without its last event.")
    finally:
        listening[0] = False  # the client is gone or done: the task goes on without it
        await asyncio.wait((task,))  # its failure is logged by `tasks`, not raised here


async def _next(queue: asyncio.Queue[object], drain: Drain) -> object:
    while True:
        try:
            return await queue.get()
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is None or not (drain.expiry.done() and current.cancelling() == 1):
                raise  # the client gone, or anyone's but the drain's
            current.uncancel()  # the drain's: the task ends the stream, and hands its last events


async def replay(store: ResponseStore, owner: str, response_id: str, start: int, first: list[bytes],
                 ended: bool = False) -> AsyncGenerator[list[bytes], None]:
    """The log's events from `start` on (`first`: those read already), a list a read; an empty list when
    nothing came for PING_EVERY seconds (a heartbeat), and at once when nothing is there yet (the head
    goes out). `ended`: the event before `start` was the last. Ends after the last event, or when the log
    is gone (deleted, expired); past `resume_idle` seconds of a log that does not grow, an in-band error."""
    settings, loop = store.settings, asyncio.get_running_loop()
    running = not (ended or (first and event_type(first[-1]) in TERMINAL))
    metrics.child(metrics.RESPONSES_RESUMED, store.backend.backend, "true" if running else "false").inc()
    yield first
    start += len(first)
    if not running:
        return
    grew = pinged = loop.time()
    while True:
        await asyncio.sleep(settings.resume_poll_ms / 1000)
        got = await store.read_events(owner, response_id, start)
        now = loop.time()
        if got is None:
            return
        if got:
            start += len(got)
            grew = pinged = now
            yield got
            if event_type(got[-1]) in TERMINAL:
                return
        elif now - grew > settings.resume_idle:
            raise UpstreamTimeout(f"The response's stream has not grown for {settings.resume_idle:g} s: the "
                                  "edge that ran it may have stopped. Retrieve it to see its status.")
        elif now - pinged >= PING_EVERY:
            pinged = now
            yield []
