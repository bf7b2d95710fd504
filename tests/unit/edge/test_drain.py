"""Drain.deadline(): what runs in it ends with ShuttingDown when the drain deadline passes, and only then."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from ingress.edge.drain import Drain
from ingress.errors import ShuttingDown


async def _forever() -> str:
    await asyncio.Event().wait()
    return "never"


async def _before_drain_deadline(drain: Drain, exchange: Coroutine[Any, Any, str]) -> str:
    with drain.deadline():
        return await exchange


async def test_the_exchange_result_comes_back_and_the_task_is_let_go() -> None:
    drain = Drain()

    async def answer() -> str:
        await asyncio.sleep(0)
        return "answer"

    assert await _before_drain_deadline(drain, answer()) == "answer"
    assert drain.held == set()


async def test_the_deadline_turns_a_waiting_exchange_into_shutting_down() -> None:
    drain = Drain()
    waiting = asyncio.ensure_future(_before_drain_deadline(drain, _forever()))
    await asyncio.sleep(0)
    assert len(drain.held) == 1
    drain.expire()
    with pytest.raises(ShuttingDown):
        await waiting
    assert drain.held == set()


async def test_after_the_deadline_nothing_starts() -> None:
    drain = Drain()
    drain.expire()
    exchange = _forever()
    with pytest.raises(ShuttingDown):
        await _before_drain_deadline(drain, exchange)
    exchange.close()


async def test_a_client_that_goes_away_is_still_a_cancellation() -> None:
    drain = Drain()
    waiting = asyncio.ensure_future(_before_drain_deadline(drain, _forever()))
    await asyncio.sleep(0)
    waiting.cancel()  # aiohttp cancels the handler when its client disconnects
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_a_client_gone_at_the_deadline_too_stays_a_cancellation() -> None:
    drain = Drain()
    waiting = asyncio.ensure_future(_before_drain_deadline(drain, _forever()))
    await asyncio.sleep(0)
    waiting.cancel()
    drain.expire()  # two cancels: uncancel() leaves one, so it is not the drain's alone
    with pytest.raises(asyncio.CancelledError):
        await waiting
