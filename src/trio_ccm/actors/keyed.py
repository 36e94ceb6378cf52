"""Per-key child actors: one task per object key, spawned on demand in a nursery we own.

`KeyedActors.serve(mailbox)` reads `(key, latest message)` from a coalescing `Mailbox` and
hands each message to the child task of its key, spawning the child if there is none. A
child runs `handler(key, message)` under the shared `trio.CapacityLimiter`, so:

- work on one key is serialised (one child per key, one handler call at a time), and work
  across keys is capped by the limiter (`--concurrent-service-syncs`, ...);
- messages that arrive while a child is busy (or waiting for the limiter, or backing off)
  coalesce in the child's one-message slot: the next call sees only the newest;
- **own echoes are skipped**: a handler returns the resourceVersion of its last write (or
  None), and a later `Changed(obj)` whose object is older than that write is not handed to
  the handler: it is a cache entry from before our write, whose echo is on its way
  (DESIGN §3). `Reverify(obj)` is never skipped (a command to act on `obj` regardless), and
  `Gone` forgets the version. The version lives in the child's record and dies with it;
- a handler that raises is retried with backoff: `RetryAfter(delay_s)` waits exactly
  `delay_s`, anything else the key's exponential delay (`Backoff`). The retry takes the
  newest message; a newer message does not cut the wait short (the owner may, with
  `expedite(key)`, for a change that makes the wait pointless) nor reset the backoff: only
  a successful call does. The exception is logged once, with the key and traceback; it never
  reaches siblings or the manager. This is the one broad `except Exception` of the
  per-object path (STYLE: Errors); a controller that reports failures (an Event naming
  what failed) is told through `on_error(key, exc)`, called here, synchronously;
- **a wave waits as values, not as children**: a new key's child is spawned only while
  fewer new children wait for their first turn of the limiter than it has tokens;
  otherwise the dispatcher waits until one gets it, and the next keys stay in the mailbox
  (one coalesced value per key, where a child would have been a task of about 2 KB). So
  5,000 new Nodes with 30 tokens make at most 30 busy and 30 waiting children, not 5,000
  tasks whose memory the allocator keeps after the wave. Children that already ran and
  queue again (a retry, a pushed message) are not counted, so they never keep a new key
  from starting: it queues behind them, as before. While the dispatcher waits, a value
  for a key whose child is idle reaches it when the dispatcher gets to it (mailbox order)
  or at the child's idle expiry (a child looks at the mailbox before it exits),
  whichever is first: it would have queued on the limiter behind the same wave;
- a child with nothing to do exits after `idle_timeout_s` (in ticks of `IDLE_TICK_S`: at
  most that much later); a new message spawns it again. A
  child that exits (idle, or cancelled while failing) resets its key in the Backoff, so
  give each manager its own Backoff;
- **shutdown**: a cancellation of `serve` stops idle and backing-off children at once, and
  cancels handler calls in flight at the grace deadline of the `GracefulCancelScope` the
  manager was given, if that scope was what cancelled (`cancel(grace_s)`: the grace is a
  parameter of the cancel). Any other cancellation, or a later `cancel(0)` (the Lease lost
  during a drain), stops them at once: losing the Lease must stop all work.

**Admission**: `serve(subscription, admit=admit)` reads another mailbox (an informer's
subscription, say) and hands each update to `admit(key, update)`, which returns the message
for the key's actor or None to drop it (and may note what it saw). Messages the controller
makes itself (a node-set change pushed to every load balancer, a paced re-verification) go
in with `send(key, message)`. Both meet in one coalescing inbox owned here, in the order
they were admitted or sent, so a controller needs no second mailbox and no router task of
its own. Without `admit`, `serve` reads its mailbox directly (and `send` is refused).

When the mailbox is closed, `serve` hands out what is pending, lets every child finish
(children exit as soon as they are idle), and returns.

Memory: a child is a Trio task plus a small slotted record. An idle child is parked with
`wait_task_rescheduled` (no Event, no cancel scope) and one timer task expires the idle
children for all keys, so an idle child costs about 2 KB (20 MB for 10,000; see
`bench/actors.py` and docs/benchmarks.md). The handler runs with the structlog contextvars
`controller` and `key` bound, so its own log lines carry the key.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Literal, NoReturn, TypeVar, cast, overload

import msgspec
import structlog
import trio

from trio_ccm.actors.backoff import Backoff, retry_after_s
from trio_ccm.base.mailbox import Mailbox, MailboxReader
from trio_ccm.cloud import drain
from trio_ccm.errors import traceback_for
from trio_ccm.kube.informer import Changed, Gone
from trio_ccm.kube.objects import Object, resource_version_number
from trio_ccm.logs import get_logger

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
U = TypeVar("U")
ObjT = TypeVar("ObjT", bound=Object)

IDLE_TICK_S = 1.0
"""Idle children exit in ticks of this length: at most this much after their idle timeout."""

ADMIT_BURST = 1000
"""Updates admitted per scheduler pass at most (about 1-2 ms: other tasks are not held up)."""

Handler = Callable[[K, V], Awaitable[str | None]]
"""Reconcile one object: `handler(key, latest message)`. Return the resourceVersion of the
last write made (or None); raise to be retried (RetryAfter for a fixed delay)."""

Admit = Callable[[K, U], V | None]
"""Map one update read by `serve` to the message for the key's actor, or None to drop it."""


class Reverify(msgspec.Struct, Generic[ObjT], frozen=True, gc=False):
    """A command: reconcile `obj` even if nothing seems to have changed (never skipped as
    an echo). A controller's own periodic checks send it."""

    obj: ObjT


Message = Changed[ObjT] | Reverify[ObjT] | Gone[ObjT]
"""What per-object controllers hand their actors."""


class GracefulCancelScope:
    """A cancel scope whose `cancel(grace_s)` lets KeyedActors' handler calls in flight run
    `grace_s` more seconds; see the module docstring.

    Enter `scope` (`with graceful.scope:`) around the actors; pass the object to each
    KeyedActors. Calling `cancel` again can only shorten the grace.
    """

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.deadline = math.inf
        """Trio time until which handler calls may run; inf until `cancel`."""
        self._listeners: list[Callable[[float], None]] = []

    def cancel(self, grace_s: float = 0.0) -> None:
        """Cancel the scope; handler calls in flight get `grace_s` more (0: none)."""
        if not grace_s >= 0:
            raise ValueError(f"grace_s={grace_s!r} must be >= 0")
        self.deadline = min(self.deadline, trio.current_time() + grace_s)
        for listener in list(self._listeners):
            listener(self.deadline)
        self.scope.cancel()

    @property
    def cancel_called(self) -> bool:
        return self.scope.cancel_called

    def _listen(self, listener: Callable[[float], None]) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)


ActorState = Literal["idle", "waiting", "busy", "backoff"]

log = get_logger("trio_ccm.actors.keyed")
_SMALL = 64  # the most children whose emptied tables are kept


@dataclass(frozen=True)
class KeyedStatistics:
    """A snapshot of one KeyedActors for /debug/actors and metrics."""

    name: str
    alive: int  # children alive
    idle: int  # parked, nothing to do
    waiting: int  # waiting for the CapacityLimiter
    busy: int  # in a handler call
    backing_off: int  # sleeping before a retry
    pending: int  # children holding a value not yet handed to the handler
    oldest_pending_s: float  # age of the oldest such value (trio time); 0.0 if none
    spawned: int  # children started since serve() began
    handled: int  # handler calls that succeeded
    retries: int  # handler calls that raised (so a retry was scheduled)
    coalesced: int  # values replaced by a newer one before the handler saw them
    echoes: int  # Changed messages skipped: older than the handler's own last write
    abandoned: int  # handler calls cancelled when the shutdown grace ended
    queued: int = 0  # values in the mailbox read, not yet handed to a child (a wave waiting)


@dataclass(frozen=True)
class ActorStatistics:
    """One child's state."""

    key: Hashable
    state: ActorState
    pending: bool  # a value is waiting for the next handler call
    pending_s: float | None  # how long it has waited (trio time), None if not pending
    failures: int  # consecutive failures (exponential backoff count)
    retry_in_s: float | None  # time until the retry while backing off, else None


class _Actor(Generic[V]):
    """The state of one child: a one-value slot plus what statistics() reports."""

    __slots__ = (
        "backoff_scope",
        "has_value",
        "idle_deadline",
        "queued",
        "retry_at",
        "scope",
        "since",
        "state",
        "step",
        "value",
        "waiter",
        "written",
    )

    def __init__(self) -> None:
        self.value: V | None = None
        self.has_value = False
        self.since = 0.0  # trio time the slot became full
        self.state: ActorState = "waiting"
        self.retry_at = 0.0  # trio time of the retry while backing off
        self.idle_deadline = 0.0  # trio time the child exits if still idle
        self.waiter: trio.lowlevel.Task | None = None  # set while parked idle
        self.scope: trio.CancelScope | None = None  # set while in a handler call
        self.step: drain.Step | None = None  # the same call, as the cloud budget sees it
        self.backoff_scope: trio.CancelScope | None = None  # set while backing off
        self.written = -1  # resourceVersion of the handler's last write (-1: none known)
        self.queued = False  # counted in KeyedActors._waiting (waits for its first turn)

    def put(self, value: V) -> bool:
        """Store the newest value and wake the child if parked; True if one was replaced."""
        replaced = self.has_value
        if not replaced:
            self.since = trio.current_time()
            self.has_value = True
        self.value = value
        self.wake()
        return replaced

    def wake(self) -> None:
        """Reschedule the child if it is parked (it then looks at its slot and deadline)."""
        if self.waiter is not None:
            task, self.waiter = self.waiter, None
            trio.lowlevel.reschedule(task)

    def abort(self, _: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        self.waiter = None
        return trio.lowlevel.Abort.SUCCEEDED


class KeyedActors(Generic[K, V]):
    """One child task per key, fed from a Mailbox; see the module docstring."""

    def __init__(
        self,
        name: str,
        handler: Handler[K, V],
        *,
        limiter: trio.CapacityLimiter,
        backoff: Backoff,
        idle_timeout_s: float = 30.0,
        graceful: GracefulCancelScope | None = None,
        on_error: Callable[[K, Exception], None] | None = None,
    ) -> None:
        if not idle_timeout_s >= 0:
            raise ValueError(f"{name}: idle_timeout_s={idle_timeout_s!r} must be >= 0")
        self.name = name
        self._graceful = graceful
        self._idle_timeout_s = idle_timeout_s
        self._handler = handler
        self._on_error = on_error
        self._limiter = limiter
        self._backoff = backoff
        self._actors: dict[K, _Actor[V]] = {}
        # Parked children in the order they parked, which is the order of their idle
        # deadlines (one idle_timeout_s for all, trio time only moves forward): one timer
        # task expires them, instead of a cancel scope per child (~1 KB each, measured).
        self._parked: dict[_Actor[V], None] = {}
        # A dict never gives its table back: once a wave of children (5,000 new Nodes)
        # has exited, both dicts start anew (`_shrink_if_empty`), as Mailbox does.
        self._peak = 0
        self._timer_wakeup = trio.Event()
        # New children waiting for their first turn of the limiter, and the dispatcher's
        # wake-up when one got it: a new key's child is spawned only below the limiter's
        # tokens (docstring). Only first turns count: children that already ran and queue
        # again (a retry, a node-set push) must not keep new keys from starting.
        self._waiting = 0
        self._room = trio.Event()
        self._serving = False
        self._inbox: Mailbox[K, V] | None = None  # while serving with `admit`: what `send` fills
        self._source: MailboxReader[K, V] | None = None  # while serving: the mailbox read
        self._closing = False  # the mailbox is closed: children exit once idle
        self._drained = trio.Event()
        self._grace_deadline = math.inf  # deadline of handler calls; set at shutdown
        self._spawned = 0
        self._handled = 0
        self._retries = 0
        self._coalesced = 0
        self._echoes = 0
        self._abandoned = 0

    # -- the manager ---------------------------------------------------------------------
    @overload
    async def serve(
        self,
        mailbox: MailboxReader[K, V],
        *,
        task_status: trio.TaskStatus[None] = ...,
    ) -> None: ...

    @overload
    async def serve(
        self,
        mailbox: MailboxReader[K, U],
        *,
        admit: Admit[K, U, V],
        task_status: trio.TaskStatus[None] = ...,
    ) -> None: ...

    async def serve(
        self,
        mailbox: MailboxReader[K, Any],  # the overloads above type it
        *,
        admit: Admit[K, Any, V] | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run the children of `mailbox`'s keys until cancelled or the mailbox is closed.

        With `admit`, each update goes through it first and `send` is open (see the module
        docstring). `task_status.started()` once values are being read. Returns after a
        closed mailbox has been drained and every child has finished.
        """
        if self._serving:
            raise RuntimeError(f"{self.name}: serve() is already running")
        self._serving = True
        self._closing = False
        self._drained = trio.Event()
        self._grace_deadline = math.inf
        self._parked.clear()
        self._waiting = 0  # every child of an earlier serve() has exited
        self._spawned = self._handled = self._retries = self._coalesced = 0
        self._echoes = self._abandoned = 0
        stop_listening = (
            self._graceful._listen(self._shorten_grace) if self._graceful is not None else None
        )
        try:
            async with trio.open_nursery() as nursery:
                try:
                    nursery.start_soon(self._expire_idle, name=f"{self.name}/idle-timer")
                    if admit is None:
                        source = cast("MailboxReader[K, V]", mailbox)
                    else:
                        self._inbox = source = Mailbox()
                        nursery.start_soon(
                            self._admit, mailbox, admit, self._inbox, name=f"{self.name}/admit"
                        )
                    self._source = source
                    task_status.started()
                    await self._dispatch(source, nursery)
                    self._closing = True
                    for actor in self._actors.values():
                        actor.wake()
                    if self._actors:
                        await self._drained.wait()
                    nursery.cancel_scope.cancel()  # the idle timer; no child is left
                finally:
                    self._start_grace()
        finally:
            self._serving = False
            self._inbox = self._source = None
            if stop_listening is not None:
                stop_listening()

    async def _admit(
        self, mailbox: MailboxReader[K, U], admit: Admit[K, U, V], inbox: Mailbox[K, V]
    ) -> None:
        """Hand each update `admit` keeps to the inbox; close the inbox when `mailbox` ends.
        What is pending is taken in bursts (`admit` and `put` never yield): one scheduler
        pass per burst of up to ADMIT_BURST updates, not one per update."""
        while True:
            try:
                burst = await mailbox.get_batch(ADMIT_BURST)
            except trio.EndOfChannel:
                break
            for key, update in burst:
                message = admit(key, update)
                if message is not None:
                    inbox.put(key, message)
        inbox.close()

    def send(self, key: K, message: V) -> None:
        """Hand `message` to `key`'s actor (coalesced with what is pending, like any update).
        Only while `serve` runs with `admit`; a message sent after the mailbox closed is
        dropped (the term is ending)."""
        inbox = self._inbox
        if inbox is None:
            raise RuntimeError(f"{self.name}: send() needs serve(..., admit=...) running")
        if not inbox.statistics().closed:
            inbox.put(key, message)

    async def _dispatch(self, mailbox: MailboxReader[K, V], nursery: trio.Nursery) -> None:
        """Hand every value to its key's child until the mailbox ends.

        `nursery` is serve()'s, where children are spawned; it is not kept.
        """
        # One value per scheduler pass (Mailbox.get checkpoints): handing over a batch at
        # once wakes a crowd of children that then queue on the limiter (measured: 2x
        # slower with a busy limiter, bench/actors.py).
        async for key, value in mailbox:
            if key not in self._actors:
                await self._wait_for_room()
            self._deliver(key, value, mailbox, nursery)

    async def _wait_for_room(self) -> None:
        """Until fewer new children wait for their first turn than the limiter has tokens."""
        while self._waiting >= self._limiter.total_tokens:
            self._room = trio.Event()
            await self._room.wait()

    def _deliver(
        self, key: K, value: V, mailbox: MailboxReader[K, V], nursery: trio.Nursery
    ) -> None:
        actor = self._actors.get(key)
        if actor is None:
            actor = self._actors[key] = _Actor()
            self._peak = max(self._peak, len(self._actors))
            self._queue(actor)  # a new child starts by waiting for the limiter
            actor.put(value)
            self._spawned += 1
            nursery.start_soon(self._run, key, actor, mailbox, name=f"{self.name}/{key}")
        elif actor.put(value):
            self._coalesced += 1

    async def _expire_idle(self) -> NoReturn:
        """Wake every parked child whose idle deadline has passed, so it exits."""
        while True:
            now = trio.current_time()
            expired: list[_Actor[V]] = []
            next_deadline = math.inf
            for actor in self._parked:
                if actor.waiter is None:
                    continue  # woken, and about to remove itself
                if actor.idle_deadline > now:
                    next_deadline = actor.idle_deadline
                    break
                expired.append(actor)
            for actor in expired:
                del self._parked[actor]
                actor.wake()
            if next_deadline < math.inf:
                # In ticks: a wave's children, parked at as many moments, exit a tick's
                # worth at a time instead of one timer wake-up each.
                await trio.sleep_until(max(next_deadline, now + IDLE_TICK_S))
            else:
                self._timer_wakeup = trio.Event()
                await self._timer_wakeup.wait()

    def _start_grace(self) -> None:
        """Shutdown: handler calls in flight may run until the grace deadline of the scope
        that cancelled us (at once when something else cancelled), then are cancelled."""
        graceful = self._graceful
        granted = graceful is not None and graceful.cancel_called
        self._shorten_grace(graceful.deadline if granted and graceful else trio.current_time())

    def _shorten_grace(self, deadline: float) -> None:
        self._grace_deadline = min(self._grace_deadline, deadline)
        for actor in self._actors.values():
            if actor.scope is not None:
                actor.scope.deadline = min(actor.scope.deadline, self._grace_deadline)
            if actor.step is not None:
                drain.drain(actor.step)  # one still queued for a cloud token stops now

    # -- one child -------------------------------------------------------------------------
    async def _run(self, key: K, actor: _Actor[V], mailbox: MailboxReader[K, V]) -> None:
        """The child of `key`: handle its newest value whenever there is one; exit when idle."""
        structlog.contextvars.bind_contextvars(controller=self.name, key=key)
        try:
            while True:
                if actor.has_value or mailbox.pending(key):
                    await self._reconcile(key, actor, mailbox)
                    actor.idle_deadline = trio.current_time() + self._idle_timeout_s
                elif self._closing or trio.current_time() >= actor.idle_deadline:
                    return
                else:
                    # Parked inline (no cancel scope, no Event): woken by a value, by the
                    # idle timer once idle_deadline has passed, or by a closed mailbox.
                    actor.state = "idle"
                    actor.waiter = trio.lowlevel.current_task()
                    self._parked[actor] = None
                    self._timer_wakeup.set()
                    await trio.lowlevel.wait_task_rescheduled(actor.abort)
                    self._parked.pop(actor, None)
        finally:
            # Synchronous from the last check to here: no value can slip in unseen.
            self._unqueue(actor)  # cancelled before its first turn
            self._parked.pop(actor, None)
            if self._actors.get(key) is actor:
                del self._actors[key]
                self._shrink_if_empty()
            self._backoff.reset(key)
            if self._closing and not self._actors:
                self._drained.set()

    def _shrink_if_empty(self) -> None:
        """The last child exited after many were alive: new, small tables."""
        if not self._actors and self._peak > _SMALL:
            self._actors, self._parked, self._peak = {}, {}, 0

    async def _reconcile(self, key: K, actor: _Actor[V], mailbox: MailboxReader[K, V]) -> None:
        """Handle the newest value, retrying with backoff until a call succeeds."""
        actor.state = "waiting"
        await self._acquire(actor)
        try:
            value = self._take(key, actor, mailbox)
            delay = await self._call(key, actor, value)
        finally:
            self._limiter.release()
        while delay is not None:
            actor.state = "backoff"
            actor.retry_at = trio.current_time() + delay
            with trio.CancelScope(deadline=actor.retry_at) as actor.backoff_scope:
                await trio.sleep_forever()
            actor.backoff_scope = None
            actor.state = "waiting"
            await self._acquire(actor)
            try:
                if actor.has_value or mailbox.pending(key):
                    value = self._take(key, actor, mailbox)
                delay = await self._call(key, actor, value)
            finally:
                self._limiter.release()
        self._backoff.reset(key)

    async def _acquire(self, actor: _Actor[V]) -> None:
        """A token of the limiter (this task its borrower); a new child's first turn ends
        its count in `_waiting`."""
        try:
            await self._limiter.acquire()
        finally:
            self._unqueue(actor)

    def _queue(self, actor: _Actor[V]) -> None:
        actor.queued = True
        self._waiting += 1

    def _unqueue(self, actor: _Actor[V]) -> None:
        if actor.queued:
            actor.queued = False
            self._waiting -= 1
            if self._waiting < self._limiter.total_tokens:
                self._room.set()

    def _take(self, key: K, actor: _Actor[V], mailbox: MailboxReader[K, V]) -> V:
        """The newest value of `key`: one still in the mailbox beats the child's slot."""
        value = actor.value
        actor.value = None
        actor.has_value = False
        found, newer = mailbox.take(key)
        if found:
            value = newer
        # V may itself admit None (a deleted object), so the slot's None is not a marker.
        return cast("V", value)

    async def _call(self, key: K, actor: _Actor[V], value: V) -> float | None:
        """One handler call: None on success, else the delay before the retry."""
        if self._echo(actor, value):
            self._echoes += 1
            await trio.lowlevel.checkpoint()
            return None
        actor.state = "busy"
        delay: float | None = None
        # Shielded so that a graceful shutdown does not cut the call short; the shield is
        # always bounded: a cancellation sets the deadline of every such scope
        # (_start_grace, _shorten_grace).
        with (
            trio.CancelScope(shield=True, deadline=self._grace_deadline) as scope,
            drain.step(scope) as step,
        ):
            actor.scope, actor.step = scope, step
            if self._grace_deadline < math.inf:
                drain.drain(step)  # started during a drain: no new cloud call
            try:
                written = await self._handler(key, value)
            except Exception as exc:  # the per-object reconcile boundary (STYLE: Errors)
                delay = self._failed(key, exc)
            else:
                number = resource_version_number(written) if written else None
                if number is not None:
                    actor.written = max(actor.written, number)
                if isinstance(value, Gone):
                    actor.written = -1
            finally:
                actor.scope = actor.step = None
        if scope.cancelled_caught and step.cut:
            log.info(
                "actor.left-to-next-leader",
                controller=self.name,
                key=key,
                reason="still queued for a cloud call when the drain began",
            )
            await trio.lowlevel.checkpoint()  # delivers the shutdown's Cancelled
        elif scope.cancelled_caught:
            self._abandoned += 1
            log.warning(
                "actor.abandoned",
                controller=self.name,
                key=key,
                reason="handler still running when the shutdown grace period ended",
            )
            await trio.lowlevel.checkpoint()  # delivers the shutdown's Cancelled
        if delay is None:
            self._handled += 1
        return delay

    @staticmethod
    def _echo(actor: _Actor[V], value: V) -> bool:
        """Whether `value` is a Changed snapshot older than the handler's own last write."""
        if actor.written < 0 or not isinstance(value, Changed):
            return False
        obj = value.obj
        number = (
            resource_version_number(obj.metadata.resource_version)
            if isinstance(obj, Object)
            else None
        )
        return number is not None and number < actor.written

    def _failed(self, key: K, exc: Exception) -> float:
        """Log a failed handler call once, tell `on_error`, and return its retry delay."""
        self._retries += 1
        if self._on_error is not None:
            self._on_error(key, exc)
        fixed = retry_after_s(exc)
        if fixed is not None:
            log.info(
                "actor.retrying",
                controller=self.name,
                key=key,
                retry_in_s=fixed,
                failures=self._backoff.failures(key),
                reason=str(exc),
            )
            return fixed
        delay = self._backoff.next_delay(key)
        failures = self._backoff.failures(key)
        # The traceback once per streak of failures, and never for our own verdicts.
        log.warning(
            "actor.failed",
            controller=self.name,
            key=key,
            retry_in_s=round(delay, 3),
            failures=failures,
            error=f"{type(exc).__name__}: {exc}",
            exc_info=traceback_for(exc, failures),
        )
        return delay

    def expedite(self, key: K) -> bool:
        """Retry `key` now if its child is backing off (the newest value is taken, the
        failure count kept: the next failure waits longer still). For a change that makes
        the wait pointless, e.g. an object fixed or deleted by its owner; True if woken."""
        actor = self._actors.get(key)
        if actor is None or actor.backoff_scope is None:
            return False
        actor.backoff_scope.cancel()
        return True

    # -- introspection ---------------------------------------------------------------------
    @property
    def idle_timeout_s(self) -> float:
        """How long a child with nothing to do stays alive (fixed: the idle timer relies on it)."""
        return self._idle_timeout_s

    def __len__(self) -> int:
        """The number of children alive."""
        return len(self._actors)

    def __iter__(self) -> Iterator[K]:
        """The keys whose child is alive (a snapshot)."""
        return iter(list(self._actors))

    def __contains__(self, key: object) -> bool:
        """Whether `key` has a child alive."""
        return key in self._actors

    def statistics(self) -> KeyedStatistics:
        """Counts over all children; O(children)."""
        now = trio.current_time()
        states = {"idle": 0, "waiting": 0, "busy": 0, "backoff": 0}
        pending = 0
        oldest = now
        for actor in self._actors.values():
            states[actor.state] += 1
            if actor.has_value:
                pending += 1
                oldest = min(oldest, actor.since)
        return KeyedStatistics(
            name=self.name,
            alive=len(self._actors),
            idle=states["idle"],
            waiting=states["waiting"],
            busy=states["busy"],
            backing_off=states["backoff"],
            pending=pending,
            oldest_pending_s=now - oldest,
            spawned=self._spawned,
            handled=self._handled,
            retries=self._retries,
            coalesced=self._coalesced,
            echoes=self._echoes,
            abandoned=self._abandoned,
            queued=len(self._source) if isinstance(self._source, Mailbox) else 0,
        )

    def actor_statistics(self, key: K) -> ActorStatistics | None:
        """The state of `key`'s child, or None when it has none."""
        actor = self._actors.get(key)
        if actor is None:
            return None
        now = trio.current_time()
        return ActorStatistics(
            key=key,
            state=actor.state,
            pending=actor.has_value,
            pending_s=now - actor.since if actor.has_value else None,
            failures=self._backoff.failures(key),
            retry_in_s=max(0.0, actor.retry_at - now) if actor.state == "backoff" else None,
        )
