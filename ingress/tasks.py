"""The one place tasks are spawned: background ones (references kept, failures logged, all drained on
close), ones that live only inside a block (`scoped`) and ones several callers await (`shared`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from ingress.log import get_logger

log = get_logger("ingress.tasks")
T = TypeVar("T")


@asynccontextmanager
async def scoped(coro: Coroutine[Any, Any, T], name: str) -> AsyncIterator[asyncio.Task[T]]:
    """Run `coro` beside the block, in a task that cannot outlive it: when the block ends, however it
    ends, the task is cancelled if it still runs and awaited. Its result or error is the block's to take."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    try:
        yield task
    finally:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def shared(coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
    """Run `coro` for whichever callers await it (one connection attempt that concurrent calls share, each
    behind its own `asyncio.shield` and deadline), in a task its owner holds: the owner keeps the reference,
    retrieves its failure (every awaiter was told it) and cancels and awaits it when it closes. Not for
    work nobody awaits: that is BackgroundTasks', which logs a failure nobody was told."""
    return asyncio.get_running_loop().create_task(coro, name=name)


class BackgroundTasks:
    """Tasks that run beside the app for its whole life (health checks); closed with it."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", task=task.get_name(), error=repr(task.exception()))

    async def wait(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the tasks running now to finish by themselves."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)

    async def close(self) -> None:
        """Cancel every task and wait for them to finish."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __len__(self) -> int:
        return len(self._tasks)
