"""`eventually()`: the one way a test waits for something to become true, naming what it waits for."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


@overload
async def eventually(condition: Callable[[], Awaitable[T]], what: str, *, timeout: float = ...,
                     interval: float = ...) -> T: ...
@overload
async def eventually(condition: Callable[[], T], what: str, *, timeout: float = ..., interval: float = ...) -> T: ...
async def eventually(condition: Callable[[], Any], what: str, *, timeout: float = 5.0, interval: float = 0.02) -> Any:
    """Call `condition` (a function, or an async one) until it returns something true, and return that.

    Fails the test with `what` and the last value seen once `timeout` seconds pass. The timeout only
    says when to give up on a loaded machine; it is never what a test proves (a test that needs
    something to happen *soon* asserts it against an ordering, or with 3x headroom). `condition` may
    raise to fail at once (a process that exited will not become ready).
    """
    last: object = None
    try:
        async with asyncio.timeout(timeout):
            while True:
                value = condition()
                result = await value if inspect.isawaitable(value) else value
                if result:
                    return result
                last = result
                await asyncio.sleep(interval)
    except TimeoutError:
        raise AssertionError(f"waited {timeout} s for {what}; last seen: {last!r}") from None
