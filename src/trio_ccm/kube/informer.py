"""Informer: keeps a cache of one resource in step with the API server.

list (pages of 500) -> watch from the list's resourceVersion (bookmarks, a random server
timeout of 5-10 min, an inactivity deadline) -> on stream end, re-watch from the last
version; on 410, relist; on errors, back off and retry. A relist replaces the cache and
reports objects that vanished meanwhile as deleted. A periodic relist (upstream's resync)
delivers only real changes. A new version of an object shares its unchanged parts with the
version it replaces (`share_unchanged`): a Node's heartbeat costs a few small structs.

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
from dataclasses import dataclass
from typing import Generic, NoReturn, TypeVar

import msgspec
import trio
from msgspec.structs import astuple

from trio_ccm.base.mailbox import Mailbox
from trio_ccm.base.pacing import Paced
from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.errors import GoneError, KubeDecodeError, KubeError
from trio_ccm.kube.objects import Object, Resource, WatchEvent, share_unchanged
from trio_ccm.logs import get_logger

T = TypeVar("T", bound=Object)
log = get_logger("trio_ccm.kube.informer")

PAGE_SIZE = 500
CHECKPOINT_EVERY = 1000
"""Objects handled between two checkpoints in loops over every object (about 1-2 ms)."""


@dataclass(frozen=True, slots=True)
class Changed(Generic[T]):
    """The object was added or changed: `obj` is its newest cached state."""

    obj: T


@dataclass(frozen=True, slots=True)
class Gone(Generic[T]):
    """The object was deleted; `last` is its last cached state (None if never cached)."""

    last: T | None = None


Update = Changed[T] | Gone[T]
"""What a subscription delivers per key."""


def same_but_version(old: Object, new: Object) -> bool:
    """Whether `new` equals `old` in every decoded field but `metadata.resourceVersion`
    (for any `Object` Struct: what a subscriber can read of it did not change)."""
    kind = type(new)
    if type(old) is not kind or type(old.metadata) is not type(new.metadata):
        return False
    at = kind.__struct_fields__.index("metadata")
    whole_old, whole_new = astuple(old), astuple(new)
    if whole_old[:at] != whole_new[:at] or whole_old[at + 1 :] != whole_new[at + 1 :]:
        return False
    version = type(new.metadata).__struct_fields__.index("resource_version")
    meta_old, meta_new = astuple(old.metadata), astuple(new.metadata)
    return (
        meta_old[:version] == meta_new[:version]
        and meta_old[version + 1 :] == meta_new[version + 1 :]
    )


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
        self.rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        self._cache: dict[str, T] = {}
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
        continue_token = ""
        while True:
            try:
                page = await self.client.list(
                    self.resource,
                    type=self.kind,
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
                fresh, continue_token = {}, ""
                continue
            for obj in page.items:
                fresh[obj.key] = obj
            continue_token = page.metadata.continue_
            if not continue_token:
                break
        self.relists += 1
        old = self._cache
        self._cache = fresh
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
        for key, obj in fresh.items():
            before = old.get(key)
            if before is not None:
                share_unchanged(before, obj)  # one copy of what did not change
            if before is None:
                self._notify(key, Changed(obj))
            elif before.metadata.resource_version != obj.metadata.resource_version:
                self._changed(key, before, obj)
            await paced.step()
        if not self._synced.is_set():
            self._synced.set()
            log.info("informer.synced", resource=self.resource.plural, objects=len(fresh))

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
        async with self.client.watch(
            self.resource,
            resource_version=self.resource_version,
            namespace=self.namespace,
            timeout_s=math.ceil(timeout_s),
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        ) as events:
            # One scope per watch whose deadline moves with every event (cheaper than a
            # fresh scope per event): a watch silent for inactivity_s is abandoned.
            with trio.CancelScope() as quiet:
                quiet.deadline = trio.current_time() + self.inactivity_s
                async for event in events:
                    now = trio.current_time()
                    quiet.deadline = now + self.inactivity_s
                    self.last_activity = now
                    self._apply(event)
            if quiet.cancelled_caught:
                log.warning(
                    "watch.inactive", resource=self.resource.plural, quiet_s=self.inactivity_s
                )

    def _apply(self, event: WatchEvent) -> None:
        try:
            if event.type == "BOOKMARK":
                marker = self.client.decode(event.object, Object)
                self.resource_version = marker.metadata.resource_version
                return
            obj = self.client.decode(event.object, self.kind)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            # The watch is abandoned and re-established from the last good version.
            raise KubeDecodeError(
                f"WATCH {self.resource.plural}: a {event.type} event's object does not decode "
                f"as {self.kind.__name__} ({exc}); it begins {bytes(event.object)[:80]!r}"
            ) from exc
        self.resource_version = obj.metadata.resource_version
        key = obj.key
        if event.type == "DELETED":
            last = self._cache.pop(key, None)
            if last is not None:
                self._notify(key, Gone(last))
        else:
            before = self._cache.get(key)
            if before is not None:
                share_unchanged(before, obj)  # a heartbeat costs a few small structs
            self._cache[key] = obj
            if before is None:
                self._notify(key, Changed(obj))
            else:
                self._changed(key, before, obj)

    def _changed(self, key: str, before: T, obj: T) -> None:
        """`obj` replaced `before` in the cache: tell the subscribers, unless only the
        resourceVersion moved (module docstring)."""
        if same_but_version(before, obj):
            self.unchanged += 1
        else:
            self._notify(key, Changed(obj))
