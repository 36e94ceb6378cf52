"""KeyedActors: one child per key, capped by a limiter, coalescing, retries, idle exit, drain.

Everything runs under `MockClock(autojump_threshold=0)` (`autojump_clock`), so times are
exact virtual seconds: "the retry ran at t=15.0".
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial

import pytest
import structlog
import trio
import trio.testing
from structlog.testing import capture_logs

from trio_ccm.actors.backoff import Backoff
from trio_ccm.actors.keyed import (
    IDLE_TICK_S,
    ActorStatistics,
    GracefulCancelScope,
    KeyedActors,
    Reverify,
)
from trio_ccm.base.mailbox import Mailbox
from trio_ccm.cloud.provider import OutcomeUnknownError
from trio_ccm.errors import RetryAfter
from trio_ccm.kube.informer import Changed, Gone
from trio_ccm.kube.objects import Node, NodeMeta

LIMIT_S = 1000  # virtual fail_after bound of every test


class BoomError(Exception):
    """A handler failure that is not a RetryAfter."""


class Recorder:
    """A handler that records every call and can sleep, fail on script or always fail."""

    def __init__(
        self,
        *,
        sleep_s: float | dict[str, float] = 0.0,
        script: dict[str, list[BaseException | None]] | None = None,
        broken: frozenset[str] = frozenset(),
    ) -> None:
        self.sleep_s = sleep_s
        self.script = script or {}
        self.broken = broken
        self.calls: list[tuple[float, str, object]] = []
        self.finished: list[tuple[float, str, object]] = []
        self.contexts: list[dict[str, object]] = []
        self.in_flight: Counter[str] = Counter()
        self.max_per_key = 0
        self.max_total = 0

    async def __call__(self, key: str, value: object) -> None:
        self.calls.append((trio.current_time(), key, value))
        self.contexts.append(structlog.contextvars.get_contextvars())
        self.in_flight[key] += 1
        self.max_per_key = max(self.max_per_key, self.in_flight[key])
        self.max_total = max(self.max_total, self.in_flight.total())
        try:
            sleep_s = self.sleep_s if isinstance(self.sleep_s, float) else self.sleep_s.get(key)
            if sleep_s:
                await trio.sleep(sleep_s)
            steps = self.script.get(key)
            if steps:
                error = steps.pop(0)
                if error is not None:
                    raise error
            if key in self.broken:
                raise BoomError(f"{key}: broken")
        finally:
            self.in_flight[key] -= 1
        self.finished.append((trio.current_time(), key, value))

    def times(self, key: str) -> list[float]:
        return [t for t, k, _ in self.calls if k == key]

    def values(self, key: str) -> list[object]:
        return [v for _, k, v in self.calls if k == key]


def make(
    handler: Recorder,
    *,
    limit: int = 10,
    limiter: trio.CapacityLimiter | None = None,
    backoff: Backoff | None = None,
    idle_timeout_s: float = 30.0,
    graceful: GracefulCancelScope | None = None,
) -> KeyedActors[str, object]:
    return KeyedActors(
        "test-controller",
        handler,
        limiter=limiter or trio.CapacityLimiter(limit),
        backoff=backoff or Backoff(5.0, 300.0, jitter=0.0),
        idle_timeout_s=idle_timeout_s,
        graceful=graceful,
    )


@asynccontextmanager
async def serving(
    actors: KeyedActors[str, object], mailbox: Mailbox[str, object]
) -> AsyncIterator[None]:
    """Run actors.serve(mailbox) for the body, then cancel it."""
    async with trio.open_nursery() as nursery:
        await nursery.start(actors.serve, mailbox)
        yield
        nursery.cancel_scope.cancel()


async def feed(mailbox: Mailbox[str, object], puts: Sequence[tuple[float, str, object]]) -> None:
    """Put each (t, key, value) at virtual time t."""
    for at, key, value in puts:
        await trio.sleep_until(at)
        mailbox.put(key, value)


async def test_one_child_per_key_serialises_work_on_that_key(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each key gets one child; a key's second value waits for its first call to finish."""
    handler = Recorder(sleep_s=1.0)
    actors = make(handler)
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            await feed(mailbox, [(0.0, "a", 1), (0.0, "b", 1), (0.5, "a", 2), (0.5, "c", 1)])
            await trio.sleep_until(10.0)
    # Trio runs tasks made runnable at the same moment in a deliberately random order.
    assert sorted(handler.calls) == [(0.0, "a", 1), (0.0, "b", 1), (0.5, "c", 1), (1.0, "a", 2)]
    assert handler.max_per_key == 1
    assert actors.statistics().spawned == 3


@pytest.mark.parametrize(
    ("limit", "starts"),
    [
        pytest.param(1, [0.0, 1.0, 2.0, 3.0, 4.0], id="limit-1"),
        pytest.param(2, [0.0, 0.0, 1.0, 1.0, 2.0], id="limit-2"),
        pytest.param(10, [0.0] * 5, id="limit-above-keys"),
    ],
)
async def test_limiter_caps_concurrency_across_keys(
    autojump_clock: trio.testing.MockClock, limit: int, starts: list[float]
) -> None:
    """At most `limit` handler calls run at once; the others start as calls finish."""
    handler = Recorder(sleep_s=1.0)
    actors = make(handler, limit=limit)
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            for i in range(5):
                mailbox.put(f"k{i}", i)
            await trio.sleep_until(10.0)
    assert [t for t, _, _ in handler.calls] == starts
    assert handler.max_total == min(limit, 5)


@pytest.mark.parametrize(
    ("first_key", "sleep_s", "steps", "seen"),
    [
        pytest.param("a", 1.0, [], [(0.0, 0), (1.0, 5)], id="while-busy"),
        pytest.param("other", 1.0, [], [(1.0, 5)], id="while-waiting-for-the-limiter"),
        pytest.param("a", 0.0, [BoomError()], [(0.0, 0), (5.0, 5)], id="while-backing-off"),
    ],
)
async def test_values_coalesce_while_the_child_cannot_take_them(
    autojump_clock: trio.testing.MockClock,
    first_key: str,
    sleep_s: float,
    steps: list[BaseException | None],
    seen: list[object],
) -> None:
    """A child that is busy, waiting for the limiter or backing off then sees only the latest."""
    handler = Recorder(sleep_s=sleep_s, script={"a": steps})
    actors = make(handler, limit=1)
    mailbox: Mailbox[str, object] = Mailbox()
    puts = [(0.0, first_key, 0)] + [(0.1 * i, "a", i) for i in range(1, 6)]
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            await feed(mailbox, puts)
            await trio.sleep_until(20.0)
    assert list(zip(handler.times("a"), handler.values("a"), strict=True)) == seen
    assert actors.statistics().coalesced == 4


async def test_none_is_a_value_not_an_empty_slot(autojump_clock: trio.testing.MockClock) -> None:
    """A deleted object's None reaches the handler like any other snapshot."""
    handler = Recorder()
    actors = make(handler)
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            await feed(mailbox, [(0.0, "gone", None), (1.0, "gone", None)])
            await trio.sleep_until(2.0)
    assert handler.calls == [(0.0, "gone", None), (1.0, "gone", None)]


@pytest.mark.parametrize(
    ("steps", "times"),
    [
        pytest.param([RetryAfter(7.0), None], [0.0, 7.0], id="retry-after-is-exact"),
        pytest.param(
            [BoomError(), BoomError(), BoomError(), None], [0.0, 5.0, 15.0, 35.0], id="exponential"
        ),
        pytest.param(
            [BoomError(), RetryAfter(1.0), BoomError(), None],
            [0.0, 5.0, 6.0, 16.0],
            id="retry-after-does-not-grow-the-count",
        ),
        pytest.param(
            [BoomError(), BoomError(), RetryAfter(1.0), BoomError(), None],
            [0.0, 5.0, 15.0, 16.0, 36.0],
            id="retry-after-does-not-reset-the-count",
        ),
        pytest.param(
            [ExceptionGroup("lb", [RetryAfter(3.0), RetryAfter(2.0)]), None],
            [0.0, 3.0],
            id="group-of-retry-afters",
        ),
        pytest.param(
            [ExceptionGroup("lb", [RetryAfter(3.0), BoomError()]), None],
            [0.0, 5.0],
            id="group-with-a-failure",
        ),
    ],
)
async def test_retries_run_at_exact_times(
    autojump_clock: trio.testing.MockClock, steps: list[BaseException | None], times: list[float]
) -> None:
    """RetryAfter waits exactly its delay; other errors wait 5 s, 10 s, 20 s ... per key."""
    handler = Recorder(script={"k": steps})
    actors = make(handler)
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            mailbox.put("k", "v")
            await trio.sleep_until(times[-1] + 100.0)
    assert handler.times("k") == times
    assert handler.finished == [(times[-1], "k", "v")]
    assert actors.statistics().retries == len(times) - 1


async def test_exponential_backoff_is_per_key(autojump_clock: trio.testing.MockClock) -> None:
    """A key that starts failing later starts from the base delay, whatever others did."""
    handler = Recorder(script={"a": [BoomError(), BoomError(), None], "b": [BoomError(), None]})
    actors = make(handler)
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            await feed(mailbox, [(0.0, "a", 1), (6.0, "b", 1)])
            await trio.sleep_until(100.0)
    assert (handler.times("a"), handler.times("b")) == ([0.0, 5.0, 15.0], [6.0, 11.0])


async def test_a_newer_snapshot_is_retried_without_resetting_the_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The retry takes the newest value, on the failing operation's schedule."""
    handler = Recorder(script={"k": [BoomError(), BoomError(), None]})
    actors = make(handler)
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            await feed(mailbox, [(0.0, "k", "v1"), (1.0, "k", "v2"), (6.0, "k", "v3")])
            await trio.sleep_until(100.0)
    assert handler.calls == [(0.0, "k", "v1"), (5.0, "k", "v2"), (15.0, "k", "v3")]


async def test_expedite_retries_now_and_keeps_the_failure_count(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """expedite(key) ends a backoff at once with the newest value; the next failure still
    waits the longer delay (10 s, not 5 s). A key not backing off is not woken."""
    handler = Recorder(script={"k": [BoomError(), BoomError(), BoomError(), None]})
    actors = make(handler)
    mailbox: Mailbox[str, object] = Mailbox()
    woken: list[bool] = []
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            mailbox.put("k", "v1")
            await trio.sleep_until(2.0)
            mailbox.put("k", "v2")
            woken.append(actors.expedite("k"))
            woken.append(actors.expedite("other"))
            await trio.sleep_until(100.0)
            woken.append(actors.expedite("k"))
    assert handler.calls == [
        (0.0, "k", "v1"),
        (2.0, "k", "v2"),
        (12.0, "k", "v2"),
        (32.0, "k", "v2"),
    ]
    assert woken == [True, False, False]


async def test_success_resets_the_backoff(autojump_clock: trio.testing.MockClock) -> None:
    """After a success, the next failure of the key waits the base delay again."""
    handler = Recorder(script={"k": [BoomError(), None, BoomError(), None]})
    backoff = Backoff(5.0, 300.0, jitter=0.0)
    actors = make(handler, backoff=backoff)
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            await feed(mailbox, [(0.0, "k", "v1"), (10.0, "k", "v2")])
            await trio.sleep_until(100.0)
    assert handler.calls == [
        (0.0, "k", "v1"),
        (5.0, "k", "v1"),
        (10.0, "k", "v2"),
        (15.0, "k", "v2"),
    ]
    assert backoff.failures("k") == 0


async def test_a_crashing_key_does_not_disturb_others(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A key whose handler always raises is logged (its traceback once) and retried; other
    keys carry on."""
    handler = Recorder(broken=frozenset({"bad"}))
    actors = make(handler)
    mailbox: Mailbox[str, object] = Mailbox()
    with capture_logs() as logs, trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            await feed(
                mailbox, [(0.0, "bad", 1), (0.0, "good", 1), (3.0, "good", 2), (16.0, "good", 3)]
            )
            await trio.sleep_until(20.0)
            assert actors.statistics().alive == 2
    assert handler.times("bad") == [0.0, 5.0, 15.0]
    assert [(t, v) for t, k, v in handler.finished if k == "good"] == [
        (0.0, 1),
        (3.0, 2),
        (16.0, 3),
    ]
    failed = [entry for entry in logs if entry["event"] == "actor.failed"]
    assert [(e["key"], e["failures"], e["retry_in_s"]) for e in failed] == [
        ("bad", 1, 5.0),
        ("bad", 2, 10.0),
        ("bad", 3, 20.0),
    ]
    assert all(e["log_level"] == "warning" for e in failed)
    # The traceback once per streak; every line names the error.
    assert [type(e["exc_info"]) for e in failed] == [BoomError, type(None), type(None)]
    assert all(e["error"].startswith("BoomError") for e in failed)
    assert all(e["controller"] == "test-controller" for e in failed)


async def test_our_own_verdicts_are_logged_without_a_traceback(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A handler failing with one of our errors (a write whose outcome is unknown) is logged
    as one line naming it, with no traceback even at the first failure; a bug keeps its
    traceback."""
    unknown = OutcomeUnknownError("ensure default/web: the create timed out; read back next")
    handler = Recorder(script={"lb": [unknown, unknown, None], "bug": [BoomError("bug")]})
    actors = make(handler)
    mailbox: Mailbox[str, object] = Mailbox()
    with capture_logs() as logs, trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            await feed(mailbox, [(0.0, "lb", 1), (0.0, "bug", 1)])
            await trio.sleep_until(30.0)
    assert handler.times("lb") == [0.0, 5.0, 15.0]
    failed = [entry for entry in logs if entry["event"] == "actor.failed"]
    assert [(e["key"], e["failures"], type(e["exc_info"])) for e in failed] == [
        ("lb", 1, type(None)),
        ("bug", 1, BoomError),
        ("lb", 2, type(None)),
    ]
    assert failed[0]["error"].startswith("OutcomeUnknownError: ensure default/web")


async def test_retry_after_is_logged_without_a_traceback(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A RetryAfter is logged as actor.retrying at info, with its reason and delay."""
    handler = Recorder(script={"lb": [RetryAfter(30.0, "load balancer still provisioning"), None]})
    actors = make(handler)
    mailbox: Mailbox[str, object] = Mailbox()
    with capture_logs() as logs, trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            mailbox.put("lb", 1)
            await trio.sleep_until(31.0)
    assert logs == [
        {
            "event": "actor.retrying",
            "log_level": "info",
            "controller": "test-controller",
            "key": "lb",
            "retry_in_s": 30.0,
            "failures": 0,
            "reason": "load balancer still provisioning",
        }
    ]


async def test_the_handler_runs_with_the_key_bound_in_contextvars(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The handler's own structlog lines carry the controller and key through contextvars."""
    handler = Recorder()
    actors = make(handler)
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            mailbox.put("default/web", 1)
            await trio.sleep(1.0)
    assert handler.contexts == [{"controller": "test-controller", "key": "default/web"}]
    assert structlog.contextvars.get_contextvars() == {}


@pytest.mark.parametrize(
    ("puts", "handler_s", "idle_timeout_s", "exit_at"),
    [
        pytest.param([0.0], 0.0, 0.0, 0.0, id="zero-timeout-exits-at-once"),
        pytest.param([0.0], 0.0, 5.0, 5.0, id="five-seconds"),
        pytest.param([0.0], 2.0, 5.0, 7.0, id="counted-from-the-end-of-the-call"),
        pytest.param([0.0, 4.0], 0.0, 5.0, 9.0, id="a-new-value-restarts-the-count"),
    ],
)
async def test_idle_children_exit_after_idle_timeout(
    autojump_clock: trio.testing.MockClock,
    puts: list[float],
    handler_s: float,
    idle_timeout_s: float,
    exit_at: float,
) -> None:
    """A child with nothing to do exits idle_timeout_s after its last call; a value respawns it."""
    handler = Recorder(sleep_s=handler_s)
    actors = make(handler, idle_timeout_s=idle_timeout_s)
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            await feed(mailbox, [(at, "k", i) for i, at in enumerate(puts)])
            if exit_at > puts[-1]:
                await trio.sleep_until(exit_at - 0.001)
                assert actors.statistics().alive == 1
                assert actors.actor_statistics("k") is not None
            await trio.sleep_until(exit_at + 0.001)
            assert actors.statistics().alive == 0
            assert actors.actor_statistics("k") is None
            mailbox.put("k", "again")
            await trio.sleep(0.001 + handler_s)
            assert actors.statistics().spawned == 2
    assert handler.values("k")[-1] == "again"


@pytest.mark.parametrize(
    ("handler_s", "grace_s", "ended_at", "completed"),
    [
        pytest.param(3.0, 10.0, 3.0, True, id="finishes-within-grace"),
        pytest.param(30.0, 10.0, 11.0, False, id="cancelled-when-grace-ends"),
        pytest.param(30.0, 0.0, 1.0, False, id="no-grace"),
    ],
)
async def test_a_graceful_cancel_lets_handler_calls_finish_within_its_grace(
    autojump_clock: trio.testing.MockClock,
    handler_s: float,
    grace_s: float,
    ended_at: float,
    completed: bool,
) -> None:
    """`cancel(grace_s)` gives a call in flight grace_s to finish; idle and retrying stop."""
    handler = Recorder(sleep_s=handler_s, broken=frozenset({"failing"}))
    graceful = GracefulCancelScope()
    actors = make(handler, graceful=graceful)
    mailbox: Mailbox[str, object] = Mailbox()
    with capture_logs() as logs, trio.fail_after(LIMIT_S):
        with graceful.scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(actors.serve, mailbox)
                mailbox.put("busy", 1)
                await trio.sleep(1.0)
                graceful.cancel(grace_s)
        assert trio.current_time() == ended_at
    assert handler.finished == ([(ended_at, "busy", 1)] if completed else [])
    assert actors.statistics().abandoned == (0 if completed else 1)
    assert actors.statistics().alive == 0
    abandoned = [e for e in logs if e["event"] == "actor.abandoned"]
    assert [e["key"] for e in abandoned] == ([] if completed else ["busy"])


async def test_a_second_cancel_cuts_the_grace_short(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """`cancel(0)` during a drain (the Lease lost) stops the calls in flight at once."""
    handler = Recorder(sleep_s=30.0)
    graceful = GracefulCancelScope()
    actors = make(handler, graceful=graceful)
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as outer:
            with graceful.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(actors.serve, mailbox)
                    mailbox.put("busy", 1)
                    await trio.sleep(1.0)
                    outer.start_soon(_cancel_later, graceful, 2.0)
                    graceful.cancel(10.0)
        assert trio.current_time() == 3.0
    assert handler.finished == []
    assert actors.statistics().abandoned == 1


async def test_any_other_cancellation_stops_handler_calls_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Cancelled by something other than its graceful scope, a manager grants no grace."""
    handler = Recorder(sleep_s=30.0)
    actors = make(handler, graceful=GracefulCancelScope())
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(actors.serve, mailbox)
            mailbox.put("busy", 1)
            await trio.sleep(1.0)
            nursery.cancel_scope.cancel()
        assert trio.current_time() == 1.0
    assert handler.finished == []


async def test_shutdown_stops_idle_waiting_and_backing_off_children_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Children not in a handler call are cancelled immediately, whatever the grace."""
    handler = Recorder(broken=frozenset({"failing"}))
    limiter = trio.CapacityLimiter(2)
    graceful = GracefulCancelScope()
    actors = make(handler, limiter=limiter, graceful=graceful)
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        with graceful.scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(actors.serve, mailbox)
                await feed(mailbox, [(0.0, "idle", 1), (0.0, "failing", 1)])
                await trio.sleep(0.5)
                await limiter.acquire_on_behalf_of("someone else")
                await limiter.acquire_on_behalf_of("another controller")
                mailbox.put("waiting", 1)
                await trio.sleep(0.5)
                states = {k: getattr(actors.actor_statistics(k), "state", None) for k in actors}
                assert states == {"idle": "idle", "failing": "backoff", "waiting": "waiting"}
                graceful.cancel(60.0)
        assert trio.current_time() == 1.0
    assert len(actors) == 0
    assert handler.values("waiting") == []


async def _cancel_later(graceful: GracefulCancelScope, delay_s: float) -> None:
    await trio.sleep(delay_s)
    graceful.cancel(0.0)


def node(rv: int) -> Node:
    return Node(metadata=NodeMeta(name="n", resource_version=str(rv)))


class Writer:
    """A handler that 'writes' the next resourceVersion on every call and records calls."""

    def __init__(self, writes_at: int) -> None:
        self.next_rv = writes_at
        self.seen: list[object] = []

    async def __call__(self, key: str, message: object) -> str | None:
        self.seen.append(message)
        if isinstance(message, Gone):
            return None
        self.next_rv += 1
        return str(self.next_rv)


async def test_changed_snapshots_older_than_our_own_write_are_skipped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """After a handler wrote version 11, a cached Changed at 10 (a stale echo) is skipped;
    a Reverify at 10 and a Changed at 11 (the echo itself) are handled; Gone forgets."""
    handler = Writer(writes_at=10)
    actors: KeyedActors[str, object] = KeyedActors(
        "test-controller", handler, limiter=trio.CapacityLimiter(1), backoff=Backoff(1, 10)
    )
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            steps: list[object] = [
                Changed(node(5)),  # handled: writes 11
                Changed(node(10)),  # older than 11: skipped
                Reverify(node(10)),  # a command: handled, writes 12
                Changed(node(12)),  # the echo itself: handled, writes 13
                Gone(node(13)),  # handled, forgets 13
                Changed(node(7)),  # after Gone: handled
            ]
            for step in steps:
                mailbox.put("n", step)
                await trio.sleep(1)
    assert handler.seen == [steps[0], steps[2], steps[3], steps[4], steps[5]]
    assert actors.statistics().echoes == 1


async def test_one_timer_expires_children_in_deadline_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Children parked at different times exit each idle_timeout_s after their own last call."""
    handler = Recorder()
    actors = make(handler, idle_timeout_s=5.0)
    mailbox: Mailbox[str, object] = Mailbox()
    alive: dict[float, list[str]] = {}
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            puts = [(0.0, "a", 1), (1.0, "b", 1), (2.0, "c", 1), (3.0, "b", 2)]
            await feed(mailbox, puts)
            for at in (4.5, 5.5, 6.5, 7.5, 8.5):
                await trio.sleep_until(at)
                alive[at] = sorted(actors)
    assert alive == {4.5: ["a", "b", "c"], 5.5: ["b", "c"], 6.5: ["b", "c"], 7.5: ["b"], 8.5: []}


async def test_statistics_reflect_the_children(autojump_clock: trio.testing.MockClock) -> None:
    """statistics() counts children by state, pending values and their age, retries."""
    handler = Recorder(sleep_s={"a": 10.0}, broken=frozenset({"c"}))
    actors = make(handler, limit=1)  # "a" holds the one token from t=1 to t=11
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            await feed(
                mailbox,
                [(0.0, "c", 1), (0.0, "d", 1), (1.0, "a", 1), (1.5, "b", 1), (2.0, "a", 2)],
            )
            await trio.sleep_until(3.0)
            stats = actors.statistics()
            assert (stats.alive, stats.idle, stats.waiting, stats.busy, stats.backing_off) == (
                4,
                1,
                1,
                1,
                1,
            )
            assert (stats.pending, stats.oldest_pending_s) == (2, 1.5)
            assert (stats.spawned, stats.handled, stats.retries, stats.coalesced) == (4, 1, 1, 0)
            assert actors.actor_statistics("c") == ActorStatistics(
                key="c", state="backoff", pending=False, pending_s=None, failures=1, retry_in_s=2.0
            )
            assert actors.actor_statistics("b") == ActorStatistics(
                key="b", state="waiting", pending=True, pending_s=1.5, failures=0, retry_in_s=None
            )
            assert actors.actor_statistics("a") == ActorStatistics(
                key="a", state="busy", pending=True, pending_s=1.0, failures=0, retry_in_s=None
            )
            assert actors.actor_statistics("nobody") is None
            assert sorted(actors) == ["a", "b", "c", "d"]
            assert "a" in actors
            assert "nobody" not in actors
    assert actors.statistics().name == "test-controller"


async def test_a_closed_mailbox_is_drained_then_serve_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """After close, pending values are handled and serve returns without waiting for idleness."""
    handler = Recorder(sleep_s=2.0)
    actors = make(handler, idle_timeout_s=3600.0)
    mailbox: Mailbox[str, object] = Mailbox()
    mailbox.put("a", 1)
    mailbox.put("b", 1)
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(actors.serve, mailbox)
            await trio.sleep(1.0)
            mailbox.put("a", 2)
            mailbox.close()
        assert trio.current_time() == 4.0
    assert sorted(handler.finished) == [(2.0, "a", 1), (2.0, "b", 1), (4.0, "a", 2)]
    assert len(actors) == 0


async def test_serve_refuses_to_run_twice_at_once(autojump_clock: trio.testing.MockClock) -> None:
    """A second concurrent serve() is a programming error and says so."""
    actors = make(Recorder())
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            with pytest.raises(
                RuntimeError, match="test-controller: serve\\(\\) is already running"
            ):
                await actors.serve(mailbox)


def test_invalid_timeouts_are_refused() -> None:
    """A negative idle timeout or grace raises ValueError naming the value."""
    with pytest.raises(
        ValueError, match=re.escape("test-controller: idle_timeout_s=-1.0 must be >= 0")
    ):
        make(Recorder(), idle_timeout_s=-1.0)
    with pytest.raises(ValueError, match="grace_s=nan must be >= 0"):
        GracefulCancelScope().cancel(float("nan"))


async def test_admission_maps_or_drops_updates_and_send_meets_them_in_one_inbox(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With `admit`, each update becomes the message its function returns (None drops it,
    no child is spawned); `send` hands a controller's own messages to the same children,
    coalesced with what is pending; `on_error` hears of each failed call."""
    recorder = Recorder(script={"b": [BoomError("no"), None]})
    failures: list[tuple[str, str]] = []
    actors: KeyedActors[str, object] = KeyedActors(
        "t",
        recorder,
        limiter=trio.CapacityLimiter(10),
        backoff=Backoff(5.0, 300.0, jitter=0.0),
        on_error=lambda key, exc: failures.append((key, str(exc))),
    )
    source: Mailbox[str, object] = Mailbox()
    seen: list[tuple[str, object]] = []

    def admit(key: str, update: object) -> object | None:
        seen.append((key, update))
        return None if key.startswith("skip") else f"msg:{update}"

    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(actors.serve, source, admit=admit))
            source.put("a", 1)
            source.put("skip-me", 2)
            source.put("b", 3)
            await trio.sleep(1)
            actors.send("a", "own")
            await trio.sleep(10)
            nursery.cancel_scope.cancel()
    assert seen == [("a", 1), ("skip-me", 2), ("b", 3)]
    assert sorted(recorder.calls, key=lambda c: (c[0], c[1])) == [
        (0.0, "a", "msg:1"),
        (0.0, "b", "msg:3"),
        (1.0, "a", "own"),
        (5.0, "b", "msg:3"),
    ]
    assert failures == [("b", "no")]


async def test_send_without_admission_is_refused() -> None:
    """`send` needs `serve(..., admit=...)` running: otherwise a clear RuntimeError."""
    actors: KeyedActors[str, object] = KeyedActors(
        "t", Recorder(), limiter=trio.CapacityLimiter(1), backoff=Backoff(5.0, 300.0)
    )
    with pytest.raises(RuntimeError, match=r"send\(\) needs serve\(\.\.\., admit=\.\.\.\)"):
        actors.send("a", 1)


async def test_a_wave_of_children_gives_its_tables_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Once 5,000 children (a wave of new Nodes) have all exited idle, the manager's tables
    are small again, and a later key still gets its child."""
    handler = Recorder(sleep_s=1.0)
    actors = make(handler, limit=100, idle_timeout_s=30.0)
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            for i in range(5000):
                mailbox.put(f"node-{i}", i)
            await trio.sleep(10.0)
            wave = sys.getsizeof(actors._actors)
            await trio.sleep(100.0)
            emptied = (len(actors), sys.getsizeof(actors._actors), sys.getsizeof(actors._parked))
            mailbox.put("late", 1)
            await trio.sleep(5.0)
    assert len(handler.calls) == 5001
    assert wave > 20_000  # about 1,200 children at t=10: 1,000 idle, 100 busy, 100 waiting
    assert emptied[0] == 0
    assert max(emptied[1:]) < 1_000
    assert handler.values("late") == [1]


async def test_a_wave_waits_in_the_mailbox_not_as_children(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """1,000 new keys with 10 tokens: at most 10 children wait for the limiter (the other
    keys stay values in the mailbox), and the calls start at the same times, ten a second in
    mailbox order."""
    handler = Recorder(sleep_s=1.0)
    actors = make(handler, limit=10, idle_timeout_s=0.0)
    mailbox: Mailbox[str, object] = Mailbox()
    most = {"alive": 0, "waiting": 0, "queued": 0}
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            for i in range(1000):
                mailbox.put(f"node-{i:04d}", i)
            while len(handler.calls) < 1000 or len(actors):
                stats = actors.statistics()
                most["alive"] = max(most["alive"], stats.alive)
                most["waiting"] = max(most["waiting"], stats.waiting)
                most["queued"] = max(most["queued"], stats.queued)
                await trio.sleep(0.25)
            assert actors.statistics().queued == 0
    assert most == {"alive": 20, "waiting": 10, "queued": 1000}
    assert [at for at, _, _ in handler.calls] == [float(i // 10) for i in range(1000)]
    by_second = [sorted(key for at, key, _ in handler.calls if at == t) for t in range(100)]
    assert by_second == [[f"node-{i:04d}" for i in range(10 * t, 10 * t + 10)] for t in range(100)]


async def test_an_idle_childs_value_is_not_held_behind_a_wave(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """While the dispatcher waits for room, a value for a key whose child is idle is handled
    once that child's idle deadline comes (it looks at the mailbox), not after the wave."""
    handler = Recorder(sleep_s=1.0)
    actors = make(handler, limit=1, idle_timeout_s=5.0)
    mailbox: Mailbox[str, object] = Mailbox()
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            await feed(mailbox, [(0.0, "old", 1)])
            await trio.sleep_until(1.5)  # "old" handled at 0-1, now idle until t=6
            for i in range(20):
                mailbox.put(f"new-{i:02d}", i)
            mailbox.put("old", 2)
            await trio.sleep_until(40.0)
    assert handler.times("old") == [0.0, 7.5]
    assert len(handler.calls) == 22


async def test_children_queueing_again_do_not_keep_a_new_key_from_starting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Five keys fed a new value every 0.5 s keep more children waiting for the 2 tokens
    than there are tokens; a new key still starts, queued behind them, and is handled."""
    handler = Recorder(sleep_s=1.0)
    actors = make(handler, limit=2)
    mailbox: Mailbox[str, object] = Mailbox()
    busy = [f"busy-{i}" for i in range(5)]
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            for step in range(40):
                for key in busy:
                    mailbox.put(key, step)
                if step == 4:
                    mailbox.put("new", 1)
                await trio.sleep(0.5)
    assert handler.times("new") == [4.0]


async def test_children_parked_close_together_exit_in_one_tick(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ten children parked 0.1 s apart: the first exits at its deadline, the rest together
    one tick (IDLE_TICK_S) later, never before their own deadline."""
    handler = Recorder()
    actors = make(handler, idle_timeout_s=5.0)
    mailbox: Mailbox[str, object] = Mailbox()
    alive: dict[float, int] = {}
    with trio.fail_after(LIMIT_S):
        async with serving(actors, mailbox):
            await feed(mailbox, [(i / 10, f"k{i}", 1) for i in range(10)])
            for at in (4.95, 5.05, 5.95, 5.0 + IDLE_TICK_S + 0.05):
                await trio.sleep_until(at)
                alive[at] = len(actors)
    assert alive == {4.95: 10, 5.05: 9, 5.95: 9, 5.0 + IDLE_TICK_S + 0.05: 0}
