"""The coalescing mailbox: latest value per key, FIFO by first arrival, bounded by keys."""

from __future__ import annotations

import sys

import pytest
import trio
import trio.testing

from trio_ccm.base.mailbox import Mailbox


async def test_latest_value_wins_and_keeps_its_place() -> None:
    """Updates to a pending key replace its value without moving it in line."""
    box: Mailbox[str, int] = Mailbox()
    box.put("a", 1)
    box.put("b", 1)
    box.put("a", 2)
    assert [await box.get(), await box.get()] == [("a", 2), ("b", 1)]
    assert box.statistics().coalesced == 1
    assert len(box) == 0


async def test_get_waits_for_a_put(autojump_clock: trio.testing.MockClock) -> None:
    """A receiver sleeps until something is put, then wakes with it."""
    box: Mailbox[str, int] = Mailbox()
    got: list[tuple[str, int]] = []

    async def receive() -> None:
        got.append(await box.get())

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            await trio.sleep(5)
            assert box.statistics().receivers_waiting == 1
            box.put("k", 7)
    assert got == [("k", 7)]


async def test_close_drains_then_ends() -> None:
    """After close, pending items still come out, then iteration stops."""
    box: Mailbox[str, int] = Mailbox()
    box.put("a", 1)
    box.close()
    with pytest.raises(trio.ClosedResourceError):
        box.put("b", 2)
    assert [item async for item in box] == [("a", 1)]


def test_take_removes_one_key() -> None:
    """take() hands over a specific key's pending value."""
    box: Mailbox[str, int] = Mailbox()
    box.put("a", 1)
    assert box.take("a") == (True, 1)
    assert box.take("a") == (False, None)
    with pytest.raises(trio.WouldBlock):
        box.get_nowait()


async def _receive(mailbox: Mailbox[str, int], slot: list[int]) -> None:
    _, value = await mailbox.get()
    slot.append(value)  # no yield between get() returning and this


async def _child(mailbox: Mailbox[str, int], slot: list[int], seen: list[bool]) -> None:
    if mailbox.pending("k"):
        await trio.lowlevel.checkpoint()
        found, _ = mailbox.take("k")
        seen.append(found or bool(slot))


async def test_a_value_being_received_is_never_invisible() -> None:
    """A receiver that takes a value and stores it without yielding (as KeyedActors'
    dispatcher does) leaves no instant at which a child that saw `pending(key)` finds the
    value neither in the mailbox nor in the receiver's slot (it would read as "deleted")."""
    for _ in range(50):
        mailbox: Mailbox[str, int] = Mailbox()
        mailbox.put("k", 1)
        slot: list[int] = []
        seen: list[bool] = []
        with trio.fail_after(1):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_receive, mailbox, slot)
                nursery.start_soon(_child, mailbox, slot, seen)
                await trio.testing.wait_all_tasks_blocked()
                if not slot:
                    mailbox.put("k", 2)  # the child took it: let the receiver finish
        assert all(seen)


def test_an_emptied_mailbox_that_held_many_keys_gives_its_dict_back() -> None:
    """A dict never shrinks: once a mailbox that held 10,000 keys is empty again, its
    storage is a new, small one (the 10,000-key table is freed); order is kept throughout."""
    mailbox: Mailbox[int, int] = Mailbox()
    for i in range(10_000):
        mailbox.put(i, i)
    big = sys.getsizeof(mailbox._pending)
    taken = [mailbox.get_nowait()[0] for _ in range(9_999)]
    assert taken == list(range(9_999))
    assert mailbox.take(9_999) == (True, 9_999)
    mailbox.put(1, 1)
    assert sys.getsizeof(mailbox._pending) < big / 100
    assert mailbox.get_nowait() == (1, 1)


async def test_get_batch_takes_the_oldest_pending_up_to_its_limit() -> None:
    """`get_batch` takes up to `limit` keys, oldest first with their latest values, and
    leaves the rest pending in order."""
    box: Mailbox[str, int] = Mailbox()
    for key, value in [("a", 1), ("b", 1), ("c", 1), ("a", 2), ("d", 1)]:
        box.put(key, value)
    assert await box.get_batch(3) == [("a", 2), ("b", 1), ("c", 1)]
    assert await box.get_batch(3) == [("d", 1)]
    assert len(box) == 0


async def test_get_batch_waits_then_ends_once_closed_and_empty(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """`get_batch` sleeps until something is put, and raises EndOfChannel once the
    mailbox is closed and drained."""
    box: Mailbox[str, int] = Mailbox()
    got: list[list[tuple[str, int]]] = []

    async def receive() -> None:
        while True:
            try:
                got.append(list(await box.get_batch(10)))
            except trio.EndOfChannel:
                return

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            await trio.sleep(5)
            box.put("k", 1)
            box.put("j", 2)
            box.close()
    assert got == [[("k", 1), ("j", 2)]]
