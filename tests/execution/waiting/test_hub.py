"""The hub of waiting claims on its own, in an event loop of the test's: asks made together run
once, a wait ends woken, timed out or cancelled, and a wake is passed on or ends on time."""

import asyncio
import math

import pytest
from sqlalchemy import create_engine

from app.execution import claims as claiming
from app.execution.claims import ClaimTurns
from app.execution.hub import Hub
from app.orchestration.events import Ready


def test_asks_made_together_run_once_and_each_is_answered_however_the_run_ends():
    """ClaimTurns.join: the claims of one turn of the event loop run once, answered in order; a run
    that fails answers every claim with its error; a claim given up before its run starts is left
    out of it."""
    async def scenario() -> None:
        turns = ClaimTurns(threads=2)
        runs: list[list[int]] = []

        def run(asks: list[int]) -> list[int]:
            runs.append(list(asks))
            return [ask * 10 for ask in asks]

        def fail(asks: list[int]) -> list[int]:
            raise RuntimeError("the database is away")
        assert await asyncio.gather(*(turns.join("q", run, n) for n in range(3))) == [0, 10, 20]
        assert runs == [[0, 1, 2]]
        failed = await asyncio.gather(*(turns.join("q", fail, n) for n in range(2)), return_exceptions=True)
        assert [repr(error) for error in failed] == [repr(RuntimeError("the database is away"))] * 2
        given_up = asyncio.ensure_future(turns.join("q", run, 1))
        kept = asyncio.ensure_future(turns.join("q", run, 2))
        await asyncio.sleep(0)  # both have asked; their run has not started
        given_up.cancel()
        assert await kept == 20
        assert runs[-1] == [2]
    asyncio.run(scenario())


def test_a_wait_ends_woken_timed_out_or_cancelled_and_a_wake_reaches_only_a_live_waiter():
    """Hub.wait: a wake answers True; a wait that runs out answers False and is not woken
    later; a wait whose request is cancelled takes no wake, which goes to the next waiter."""
    async def scenario() -> None:
        hub = Hub(create_engine("sqlite://"), lambda: None)
        await hub.start()
        try:
            woken = asyncio.ensure_future(hub.wait(5))
            await asyncio.sleep(0)
            hub.wake(1)
            assert await woken is True
            assert await hub.wait(0.01) is False
            assert list(hub._waiters) == []  # an ended wait leaves nothing behind for later wakes to scan
            cancelled = asyncio.ensure_future(hub.wait(5))
            later = asyncio.ensure_future(hub.wait(5))
            await asyncio.sleep(0)
            cancelled.cancel()
            await asyncio.gather(cancelled, return_exceptions=True)
            assert hub.waiting == 1 and len(hub._waiters) == 1
            hub.wake(1)  # the oldest live waiter is the later one
            assert await later is True
            assert hub.waiting == 0
        finally:
            await hub.stop()
    asyncio.run(asyncio.wait_for(scenario(), 10))  # a wait whose timer never ends it fails, not hangs


def test_claims_made_together_pass_a_wake_on_only_for_announced_work_they_left():
    """Hub.record_claim: claims woken by one event that took, between them, all it announced wake no
    other waiter (it would find nothing); when announced work is left, a full claim passes its
    wake on, once its turn of the event loop is over."""
    async def scenario() -> None:
        hub = Hub(create_engine("sqlite://"), lambda: None)
        await hub.start()
        queues = frozenset({"q"})
        try:
            hub.record_claim(0, False, queues)  # what the start's resynchronisation announced was looked for
            waits = [asyncio.ensure_future(hub.wait(5, queues)) for _ in range(3)]
            await asyncio.sleep(0)
            hub.deliver(Ready(count=2, queue="q"))
            assert hub.waiting == 1  # the two oldest are woken
            for _ in range(2):  # their claims, made together, each took the one it asked for
                hub.record_claim(1, True, queues)
            await asyncio.sleep(0.01)
            assert hub.waiting == 1 and not waits[2].done()

            second = asyncio.ensure_future(hub.wait(5, queues))
            await asyncio.sleep(0)
            hub.deliver(Ready(count=3, queue="q"))  # three tasks for the two waiters: both woken
            assert hub.waiting == 0
            later = asyncio.ensure_future(hub.wait(5, queues))
            await asyncio.sleep(0)
            for _ in range(2):
                hub.record_claim(1, True, queues)
            hub.record_claim(0, False, frozenset({"r"}))  # in the same turn, a claim on other queues finds nothing
            assert hub.waiting == 1  # passed on once the turn is over, not by each claim
            await asyncio.sleep(0.01)
            assert hub.waiting == 0 and later.done() and second.done()  # one task is left: the next waiter looks
        finally:
            await hub.stop()
    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_long_waits_that_end_in_the_same_second_end_together_and_never_late(monkeypatch):
    """An idle fleet's waits run out together (claims.wait_ends): two long waits begun 0.2 s
    apart, whose ends fall in the same second, answer in the same turn of the event loop, on that
    second, neither after its time nor more than a second before it. A short wait keeps its time."""
    monkeypatch.setattr(claiming, "ALIGNED_FROM_SECONDS", 1.0)  # as a 10-30 s wait, in a test's time

    async def nothing() -> tuple[list[int], bool]:
        return [], False

    async def still_there() -> bool:
        return False

    async def scenario() -> None:
        hub = Hub(create_engine("sqlite://"), lambda: None)
        await hub.start()
        loop = asyncio.get_running_loop()
        ended: list[tuple[float, float]] = []

        async def wait(seconds: float) -> None:
            asked = loop.time() + seconds
            items, waited = await claiming.wait_for_work(hub, nothing, limit=1, seconds=seconds, gone=still_there)
            assert items == [] and waited == pytest.approx(loop.time() - (asked - seconds), abs=0.01)  # all waiting
            ended.append((asked, loop.time()))
        try:
            await asyncio.sleep(1.05 - loop.time() % 1)  # just after a whole second: both ends in the next
            first = asyncio.ensure_future(wait(1.2))
            await asyncio.sleep(0.1)
            await asyncio.gather(first, wait(1.2))
            (_, first_end), (_, second_end) = ended
            assert first_end == pytest.approx(second_end, abs=0.005)  # in the same turn
            for asked, end in ended:
                assert math.floor(asked) <= end < min(asked, math.floor(asked) + 0.2)  # on the second before
            asked = loop.time() + 0.5
            await claiming.wait_for_work(hub, nothing, limit=1, seconds=0.5, gone=still_there)
            assert loop.time() >= asked - 0.005  # below ALIGNED_FROM_SECONDS: its own time
        finally:
            await hub.stop()
    asyncio.run(asyncio.wait_for(scenario(), 10))
