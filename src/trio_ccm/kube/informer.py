"""Informer: keeps a cache of one resource in step with the API server.

list (pages of 500) -> watch from the list's resourceVersion (bookmarks, a random server
timeout of 5-10 min, an inactivity deadline) -> on stream end, re-watch from the last
version; on 410, relist; on errors, back off and retry. A relist replaces the cache and
reports objects that vanished meanwhile as deleted. A periodic relist (upstream's resync)
delivers only real changes. A new version of an object is compared with the version it
replaces before it is built, and shares its unchanged parts (`kube/versions.py`): a Node's
heartbeat costs a few small structs and decodes none of its labels, spec or addresses.
Watch lines are decoded with their object in one parse, the lines of each received chunk
together (`KubeClient.watch_batches_as`), and applied in one step.

Subscribers (`async with informer.subscription() as mailbox`) get a `Mailbox` of key ->
latest message, `Changed(obj)` or `Gone(last)`: they see the newest state of every changed
object, never an unbounded queue of intermediate ones. A new subscription starts with a
`Changed` for every cached object.

**An update that changes nothing we decode notifies nobody.** Kubelets post their Node's
status every few minutes (333 updates/s at 100,000 Nodes); the heartbeat times are not
decoded (`kube/objects.py`), so such an update differs from the cached object only in
`metadata.resourceVersion`. The cache takes it (`get` returns the newest version) and
`unchanged` counts it, but no subscriber hears of it: what a subscriber can see did not
change. Every other update is delivered, so a subscriber still sees every change of what it
reads, and a `Changed` always carries the newest object at the time it was sent (a later
no-op update may give the cache a newer resourceVersion of the same content).

**No step is O(objects).** Loops over every object (a relist's notifications, a new
subscription's first `Changed` per key) yield to other tasks every `CHECKPOINT_EVERY`
objects, so 100,000 cached Nodes never hold the Trio thread for long (a long step starves
the Lease renewal). Only the informer's own task writes the cache, so such a loop sees no
other change of it meanwhile; a subscription filled in steps is registered first, so
changes made during its fill reach it too and it never gets an older state after a newer.
"""

from __future__ import annotations

import math
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Generic, NoReturn, TypeVar

import msgspec
import trio

from trio_ccm.base.mailbox import Mailbox
from trio_ccm.base.pacing import Paced
from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.errors import GoneError, KubeDecodeError, KubeError
from trio_ccm.kube.objects import Object, Resource, Watched
from trio_ccm.kube.versions import versions_for
from trio_ccm.logs import get_logger

T = TypeVar("T", bound=Object)
log = get_logger("trio_ccm.kube.informer")

PAGE_SIZE = 500
CHECKPOINT_EVERY = 1000
"""Objects handled between two checkpoints in loops over every object (about 1-2 ms)."""
MOVE_EVERY_S = 1.0
"""A watch's inactivity deadline is moved at most this often (seconds of Trio time)."""


class Changed(msgspec.Struct, Generic[T], frozen=True, gc=False):
    """The object was added or changed: `obj` is its newest cached state. (Untracked by
    the garbage collector, as the cached objects are: a term's first fill holds one per
    object per subscription, 500,000 at 100,000 Nodes, which a full collection walked.)"""

    obj: T


class Gone(msgspec.Struct, Generic[T], frozen=True, gc=False):
    """The object was deleted; `last` is its last cached state (None if never cached)."""

    last: T | None = None


Update = Changed[T] | Gone[T]
"""What a subscription delivers per key."""


class Informer(Generic[T]):
    """One resource's cache, kept current; see the module docstring."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        kind: type[T],
        *,
        namespace: str = "",
        label_selector: str = "",
        field_selector: str = "",
        resync_period_s: float = 12 * 3600.0,
        watch_timeout_s: tuple[float, float] = (300.0, 600.0),
        inactivity_s: float = 150.0,
        backoff_s: tuple[float, float] = (0.8, 30.0),
        rng: random.Random | None = None,
        watch_rest_s: float = 0.0,
    ) -> None:
        self.client = client
        self.resource = resource
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.resync_period_s = resync_period_s
        self.watch_timeout_s = watch_timeout_s
        self.inactivity_s = inactivity_s
        self.backoff_s = backoff_s
        # > 0: a watch that has caught up rests this long (`KubeClient.watch_batches_as`).
        self.watch_rest_s = watch_rest_s
        self.rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        self._cache: dict[str, T] = {}
        # How new versions are read, and what it keeps per cached key (`kube/versions.py`).
        self._versions = versions_for(kind)
        self._memos: dict[str, Any] = {}
        self._subscribers: list[Mailbox[str, Update[T]]] = []
        self._synced = trio.Event()
        self.resource_version = ""
        self.last_activity = -math.inf  # trio time of the last list, event or bookmark
        self.relists = 0
        self.watches = 0
        self.errors = 0
        self.unchanged = 0  # updates that changed only the resourceVersion: not notified

    # -- reading ----------------------------------------------------------------------
    def get(self, key: str) -> T | None:
        return self._cache.get(key)

    def items(self) -> list[T]:
        return list(self._cache.values())

    def keys(self) -> list[str]:
        return list(self._cache)

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        """Return once the first full list is in the cache."""
        await self._synced.wait()

    # -- subscribers ------------------------------------------------------------------
    @asynccontextmanager
    async def subscription(self) -> AsyncIterator[Mailbox[str, Update[T]]]:
        """A mailbox that receives every key that changes while the block runs and, before
        the block starts, a `Changed` for every cached key; it stops receiving when the
        block ends.

        The first `Changed`s are put in steps of CHECKPOINT_EVERY keys. The mailbox is
        registered first, so a key changed or deleted meanwhile gets its newest state (or
        `Gone`), never an older one after it."""
        mailbox: Mailbox[str, Update[T]] = Mailbox()
        self._subscribers.append(mailbox)
        try:
            paced = Paced(CHECKPOINT_EVERY)
            for key in list(self._cache):
                obj = self._cache.get(key)  # the newest (the cache may have been relisted)
                if obj is not None:  # else deleted meanwhile: its Gone is in the mailbox
                    mailbox.put(key, Changed(obj))
                await paced.step()
            yield mailbox
        finally:
            self._subscribers.remove(mailbox)

    def _notify(self, key: str, update: Update[T]) -> None:
        for mailbox in self._subscribers:
            mailbox.put(key, update)

    # -- the loop ---------------------------------------------------------------------
    async def serve(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Run forever; `task_status.started()` once the cache holds the first full list."""
        failures = 0
        started = False
        while True:
            try:
                await self._relist()
                if not started:
                    started = True
                    task_status.started()
                failures = 0
                await self._watch_until_relist()
            except KubeError as exc:
                failures += 1
                await trio.sleep(self._failed("informer.failed", exc, failures))

    def _failed(self, event: str, exc: KubeError, failures: int) -> float:
        """Count and log a failure; return how long to back off before the next try."""
        self.errors += 1
        delay = self._backoff(failures)
        log.warning(
            event, resource=self.resource.plural, error=str(exc), retry_in_s=round(delay, 3)
        )
        return delay

    def _backoff(self, failures: int) -> float:
        base, cap = self.backoff_s
        return float(min(cap, base * 2 ** (failures - 1)) * self.rng.uniform(1.0, 1.5))

    async def _relist(self) -> None:
        """A full paginated list that replaces the cache and notifies real changes."""
        fresh: dict[str, T] = {}
        memos: dict[str, Any] = {}
        changed: list[str] = []  # keys whose new version differs in more than its version
        continue_token = ""
        while True:
            try:
                page = await self.client.list(
                    self.resource,
                    type=self._versions.wire,
                    namespace=self.namespace,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                    limit=PAGE_SIZE,
                    continue_token=continue_token,
                )
            except GoneError:
                if not continue_token:
                    raise
                # The continue token expired between pages: start the list again.
                fresh, memos, changed, continue_token = {}, {}, [], ""
                continue
            for wire in page.items:
                # Built against the cached version (unchanged parts shared); only this task
                # writes the cache, so it is the one the swap below replaces.
                key = _key(wire.metadata)
                before = self._cache.get(key)
                obj, memo, differs = self._build("LIST", wire, key, before)
                fresh[key] = obj
                if memo is not None:
                    memos[key] = memo
                if differs:
                    changed.append(key)
                elif before is not None and _version(before) != _version(obj):
                    self.unchanged += 1  # a new version, nothing a subscriber reads changed
            continue_token = page.metadata.continue_
            if not continue_token:
                break
        self.relists += 1
        old = self._cache
        self._cache, self._memos = fresh, memos
        self.resource_version = page.metadata.resource_version
        self.last_activity = trio.current_time()
        # Both loops yield now and then (module docstring); only this task writes the
        # cache, so neither dict changes under them.
        paced = Paced(CHECKPOINT_EVERY)
        for key, last in old.items():
            if key not in fresh:
                self._notify(key, Gone(last))
            await paced.step()
        paced = Paced(CHECKPOINT_EVERY)
        for key in changed:
            self._notify(key, Changed(fresh[key]))
            await paced.step()
        if not self._synced.is_set():
            self._synced.set()
            log.info("informer.synced", resource=self.resource.plural, objects=len(fresh))

    def _build(self, verb: str, wire: Any, key: str, before: T | None) -> tuple[T, Any, bool]:
        """The new version of `key` read from `wire`, against `before`, the cached one."""
        try:
            return self._versions.build(wire, before, self._memos.get(key))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise KubeDecodeError(
                f"{verb} {self.resource.plural}: {key} does not decode as "
                f"{self.kind.__name__} ({exc})"
            ) from exc

    async def _watch_until_relist(self) -> None:
        """Watch from the current version; return when a relist is due (410 or resync).

        Other failures back off and re-watch from the last version seen: a relist of every
        object is kept for when the server no longer has that version.
        """
        resync_at = trio.current_time() + self.resync_period_s
        failures = 0
        while trio.current_time() < resync_at:
            timeout_s = self.rng.uniform(*self.watch_timeout_s)
            try:
                with trio.move_on_at(resync_at):
                    await self._watch_once(timeout_s)
                failures = 0
            except GoneError:
                log.info(
                    "watch.expired",
                    resource=self.resource.plural,
                    resource_version=self.resource_version,
                )
                return
            except KubeError as exc:
                failures += 1
                delay = self._failed("watch.failed", exc, failures)
                with trio.move_on_at(resync_at):
                    await trio.sleep(delay)

    async def _watch_once(self, timeout_s: float) -> None:
        """One watch request, until the server ends it or it goes quiet for too long."""
        self.watches += 1
        async with self.client.watch_batches_as(
            self.resource,
            self._versions.wire,
            resource_version=self.resource_version,
            namespace=self.namespace,
            timeout_s=math.ceil(timeout_s),
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            rest_s=self.watch_rest_s,
        ) as batches:
            # One scope per watch whose deadline moves with the received chunks of events,
            # at most once per MOVE_EVERY_S (a move costs a push into Trio's deadline heap):
            # a watch silent for inactivity_s (less up to MOVE_EVERY_S) is abandoned. A
            # chunk's events are applied in one step, with no checkpoint between them, so a
            # cancellation never leaves one half applied.
            inactivity_s = self.inactivity_s
            with trio.CancelScope() as quiet:
                quiet.deadline = moved = trio.current_time() + inactivity_s
                apply = self._apply
                async for batch in batches:
                    now = trio.current_time()
                    self.last_activity = now
                    if now + inactivity_s - moved >= MOVE_EVERY_S:
                        quiet.deadline = moved = now + inactivity_s
                    for event in batch:
                        apply(event)
            if quiet.cancelled_caught:
                log.warning(
                    "watch.inactive", resource=self.resource.plural, quiet_s=self.inactivity_s
                )

    def _apply(self, event: Watched[Any]) -> None:
        wire = event.object  # decoded with its line (`KubeClient.watch_batches_as`)
        if event.type == "BOOKMARK":
            self.resource_version = wire.metadata.resource_version
            return
        key = _key(wire.metadata)
        if event.type == "DELETED":
            self.resource_version = wire.metadata.resource_version
            self._memos.pop(key, None)
            last = self._cache.pop(key, None)
            if last is not None:
                self._notify(key, Gone(last))
            return
        before = self._cache.get(key)
        obj, memo, changed = self._build("WATCH", wire, key, before)
        self.resource_version = obj.metadata.resource_version
        self._cache[key] = obj
        if memo is not None:
            self._memos[key] = memo
        if changed:
            self._notify(key, Changed(obj))
        elif before is not None:
            self.unchanged += 1


def _key(meta: Any) -> str:
    """upstream's MetaNamespaceKeyFunc, of any decoded metadata (as `Object.key`)."""
    return f"{meta.namespace}/{meta.name}" if meta.namespace else str(meta.name)


def _version(obj: Object) -> str:
    return obj.metadata.resource_version
