"""BackgroundTasks: every spawned task is referenced until it ends, its failure is logged, close() drains."""

from __future__ import annotations

import asyncio
import gc
import io
import weakref
from typing import Any

import pytest
from logcapture import lines

from ingress.tasks import BackgroundTasks


async def test_a_spawned_task_is_kept_while_nothing_else_references_it() -> None:
    tasks = BackgroundTasks()

    async def wait_forever() -> None:
        await asyncio.get_running_loop().create_future()  # a future only this task knows of

    task = tasks.spawn(wait_forever(), "orphan")
    assert task.get_name() == "orphan"
    await asyncio.sleep(0)
    alive = weakref.ref(task)
    del task
    gc.collect()  # unreferenced, a pending task and its future are a cycle the collector destroys
    assert alive() is not None and len(tasks) == 1
    await tasks.close()
    assert len(tasks) == 0


async def test_a_finished_task_is_let_go_with_its_result() -> None:
    tasks = BackgroundTasks()
    task = tasks.spawn(asyncio.sleep(0, "done"), "quick")
    assert len(tasks) == 1
    assert await task == "done"
    await asyncio.sleep(0)  # done callbacks run on the next loop iteration
    assert len(tasks) == 0


async def test_a_failed_task_is_logged_by_name_and_its_exception_retrieved(log_stream: io.StringIO) -> None:
    loop = asyncio.get_running_loop()
    unretrieved: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: unretrieved.append(context))
    try:
        tasks = BackgroundTasks()

        async def fail() -> None:
            raise ValueError("health check broke")

        task = tasks.spawn(fail(), "health:primary")
        with pytest.raises(ValueError, match="health check broke"):
            await task
        await asyncio.sleep(0)
        del task
        gc.collect()  # a task whose exception nobody retrieved would be reported here
    finally:
        loop.set_exception_handler(None)
    assert len(tasks) == 0
    (line,) = [line for line in lines(log_stream) if line["event"] == "background task failed"]
    assert (line["task"], line["level"]) == ("health:primary", "error")
    assert line["error"] == "ValueError('health check broke')"
    assert unretrieved == []


async def test_a_cancelled_task_is_not_a_failure(log_stream: io.StringIO) -> None:
    tasks = BackgroundTasks()
    task = tasks.spawn(asyncio.sleep(30), "sleeper")
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    assert len(tasks) == 0
    assert [line for line in lines(log_stream) if line["event"] == "background task failed"] == []


async def test_close_cancels_every_task_and_waits_for_their_cleanup() -> None:
    tasks = BackgroundTasks()
    cleaned: list[str] = []

    async def loop_forever(name: str) -> None:
        try:
            await asyncio.sleep(30)
        finally:
            await asyncio.sleep(0)  # cleanup that itself awaits: close() must wait for it
            cleaned.append(name)

    spawned = [tasks.spawn(loop_forever(f"t{i}"), f"t{i}") for i in range(3)]
    await asyncio.sleep(0)
    await tasks.close()
    assert sorted(cleaned) == ["t0", "t1", "t2"]
    assert all(task.cancelled() for task in spawned)
    await asyncio.sleep(0)
    assert len(tasks) == 0


async def test_close_with_nothing_running_returns() -> None:
    tasks = BackgroundTasks()
    await tasks.close()
    assert len(tasks) == 0
