"""trio_ccm.cli.heap.serve_collector_freezes: the garbage collector is frozen during a term
of leadership (after its start) and unfrozen when the term ends, against serve() and the
emulator in-process."""

from __future__ import annotations

import gc
import weakref

import trio
import trio.testing
from prometheus_client import CollectorRegistry

from tests.helpers.supervisor import FixedJitter, Link, NoCapabilities, Probe
from trio_ccm.cli.heap import COLLECT_PERIOD_S, FREEZE_AFTER_S, serve_collector_freezes
from trio_ccm.settings import Settings
from trio_ccm.supervisor import Serving, serve
from trio_ccm.testing.harness import emulator_connection
from trio_ccm_testbed.apiserver import ApiServer


async def test_the_collector_is_frozen_only_within_a_term(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Frozen FREEZE_AFTER_S after the controllers start, unfrozen when the Lease is lost
    (the controllers stopped), frozen again in the next term, unfrozen when cancelled."""
    server = ApiServer(seed=1)
    server.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}})
    link = Link(server)
    frozen: list[tuple[float, bool, bool]] = []  # (time, leading, frozen) at each change
    assert gc.get_freeze_count() == 0
    with trio.fail_after(300):
        async with trio.open_nursery() as host:
            serving: Serving = await host.start(
                lambda task_status: serve(
                    Settings(secure_port=0, controllers=("*",)),
                    NoCapabilities(),
                    controllers=[Probe().controller()],
                    connection=emulator_connection(),
                    transport=link,
                    registry=CollectorRegistry(),
                    identity="a",
                    rng=FixedJitter(),
                    task_status=task_status,
                )
            )
            host.start_soon(serve_collector_freezes, serving)

            async def watch() -> None:
                last = (False, False)
                while True:
                    now = (serving.leading, gc.get_freeze_count() > 0)
                    if now != last:
                        frozen.append((trio.current_time(), *now))
                        last = now
                    await trio.sleep(0.5)

            host.start_soon(watch)
            await serving.wait_leading()
            started = trio.current_time()
            await trio.sleep(FREEZE_AFTER_S + 1)
            link.cut = True  # renew deadline 10 s after the last renewal: the term ends
            await serving.wait_leading(False)
            await trio.sleep(1)
            assert gc.get_freeze_count() == 0
            link.cut = False
            await serving.wait_leading()
            second = trio.current_time()
            await trio.sleep(FREEZE_AFTER_S + 1)
            assert gc.get_freeze_count() > 0
            host.cancel_scope.cancel()
    assert gc.get_freeze_count() == 0
    states = [(leading, is_frozen) for _, leading, is_frozen in frozen]
    assert states == [(True, False), (True, True), (False, False), (True, False), (True, True)]
    times = [at for at, *_ in frozen]
    assert started + FREEZE_AFTER_S <= times[1] <= started + FREEZE_AFTER_S + 0.5
    assert second + FREEZE_AFTER_S <= times[4] <= second + FREEZE_AFTER_S + 0.5


class _Term:
    """A replica whose leadership the test sets."""

    def __init__(self) -> None:
        self.leading = False
        self._changed = trio.Event()

    def lead(self, leading: bool) -> None:
        self.leading = leading
        self._changed.set()
        self._changed = trio.Event()

    async def wait_leading(self, leading: bool = True) -> None:
        while self.leading != leading:
            await self._changed.wait()


class _Cycle:
    """An object in a reference cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


async def test_while_frozen_a_full_collection_frees_cycles_each_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With automatic collection off, a cycle made after the freeze is freed by the next
    periodic collection, not before it; none runs once the term ended."""
    term = _Term()
    gc.disable()
    try:
        async with trio.open_nursery() as host:
            host.start_soon(serve_collector_freezes, term)
            term.lead(True)
            await trio.sleep(FREEZE_AFTER_S + 1)
            assert gc.get_freeze_count() > 0
            garbage = weakref.ref(_Cycle())
            await trio.sleep(COLLECT_PERIOD_S - 2)
            assert garbage() is not None
            await trio.sleep(2)
            assert garbage() is None
            term.lead(False)
            await trio.sleep(1)
            assert gc.get_freeze_count() == 0
            kept = weakref.ref(_Cycle())
            await trio.sleep(3 * COLLECT_PERIOD_S)
            assert kept() is not None
            host.cancel_scope.cancel()
    finally:
        gc.enable()
    assert gc.get_freeze_count() == 0
