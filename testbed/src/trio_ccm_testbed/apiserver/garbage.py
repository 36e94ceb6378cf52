"""Deletion propagation and the garbage collector of `ownerReferences`, done at once.

Upstream's garbage collector is a controller that catches up a moment later; this one runs
inside the write that triggers it, so a test sees the end state when the DELETE returns,
and watchers see the same events in the same order as upstream would send them:

- **Background** (the default): the owner goes at once; each dependent whose owners are
  all gone is then deleted (in the background too, so whole trees go); a dependent that
  still has a live owner only loses its references to the gone ones.
- **Foreground**: the owner gets a deletionTimestamp and the `foregroundDeletion`
  finalizer; its dependents are deleted (in the foreground when they have dependents of
  their own); once no dependent with `blockOwnerDeletion: true` is left, the finalizer is
  removed and the owner goes. A dependent held by its own finalizer keeps the owner too.
- **Orphan**: the owner gets the `orphan` finalizer; its dependents lose their references to
  it; then the finalizer is removed and the owner goes.

Invariants: the collector never deletes an object one of whose owners is alive (or of a
kind the emulator does not serve: such an owner cannot be checked); an owner counts as
alive only with the same uid; each event is handled once, in the order it happened, even
when handling it causes more (a queue drained by the outermost call).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from trio_ccm_testbed.apiserver.store import Obj, Store, Stored, clone

if TYPE_CHECKING:
    from trio_ccm_testbed.apiserver.kinds import ResourceType

FOREGROUND, BACKGROUND, ORPHAN = "Foreground", "Background", "Orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"
ORPHAN_FINALIZER = "orphan"
GC_MANAGER = "generic-garbage-collector"


@dataclass(frozen=True)
class _Event:
    kind: str  # "removed" (an object is gone) or "deleting" (it got a GC finalizer)
    uid: str
    namespace: str
    key: tuple[str, str, str] = ("", "", "")  # storage name, namespace, name


class Delete(Protocol):
    """The registry's delete, as the collector calls it."""

    def __call__(self, rtype: ResourceType, namespace: str, name: str, *, policy: str) -> Obj: ...


Update = Callable[["ResourceType", str, str, Obj], object]
"""The registry's update as the collector's field manager (`GC_MANAGER`)."""


class GarbageCollector:
    """Follows ownerReferences when objects are deleted (see the module docstring). The
    registry that owns it hands it the store and its two writes, so this module knows
    nothing of the registry (no import loop)."""

    def __init__(self, store: Store, *, delete: Delete, update: Update) -> None:
        self.store = store
        self._delete = delete
        self._write = update
        self._queue: deque[_Event] = deque()
        self._running = False
        # Owners deleting in the foreground, by uid: (storage name, namespace, name).
        self._waiting: dict[str, tuple[str, str, str]] = {}

    # -- what the registry reports -----------------------------------------------------------
    def removed(self, obj: Obj) -> None:
        meta = obj["metadata"]
        self._waiting.pop(meta.get("uid", ""), None)
        self._notify(_Event("removed", meta.get("uid", ""), meta.get("namespace", "")))

    def deleting(self, stype: ResourceType, obj: Obj) -> None:
        meta = obj["metadata"]
        key = (stype.storage_name, meta.get("namespace", ""), meta["name"])
        if FOREGROUND_FINALIZER in (meta.get("finalizers") or []):
            self._waiting[meta["uid"]] = key
        self._notify(_Event("deleting", meta["uid"], key[1], key))

    def updated(self) -> None:
        """A dependent changed: an owner waiting for it may be free to go."""
        if self._waiting and not self._running:
            self._notify(_Event("check", "", ""))

    # -- the work --------------------------------------------------------------------------
    def _notify(self, event: _Event) -> None:
        self._queue.append(event)
        if self._running:
            return
        self._running = True
        try:
            while self._queue:
                self._handle(self._queue.popleft())
        finally:
            self._running = False

    def _handle(self, event: _Event) -> None:
        if event.kind == "removed":
            for stype, dependent in list(self._dependents(event.uid, event.namespace)):
                self._collect(stype, dependent)
        elif event.kind == "deleting":
            self._finalize(event)
        self._release_waiting()

    def _dependents(self, uid: str, namespace: str) -> Iterator[tuple[ResourceType, Stored]]:
        """Objects with an ownerReference to `uid` (in `namespace`, or anywhere for a
        cluster-scoped owner)."""
        for stype in self._stored_types():
            storage = self.store.storage(stype)
            for (ns, _), stored in list(storage.objects.items()):
                if namespace and ns != namespace:
                    continue
                refs = stored.obj["metadata"].get("ownerReferences") or []
                if any(isinstance(r, dict) and r.get("uid") == uid for r in refs):
                    yield stype, stored

    def _stored_types(self) -> list[ResourceType]:
        return [t for t in self.store.types.values() if t.to_external is None]

    def _owner_state(self, ref: dict[str, Any], namespace: str) -> str:
        """ "alive", "waiting" (deleting in the foreground) or "gone"."""
        group, _, version = str(ref.get("apiVersion", "")).rpartition("/")
        rtype = next(
            (
                t
                for t in self._stored_types()
                if (t.group, t.version, t.kind) == (group, version, ref.get("kind"))
            ),
            None,
        )
        if rtype is None:
            return "alive"  # a kind the emulator does not serve cannot be checked
        found = self.store.lookup(
            rtype, namespace if rtype.namespaced else "", str(ref.get("name", ""))
        )
        if found is None or found.obj["metadata"].get("uid") != ref.get("uid"):
            return "gone"
        if ref.get("uid") in self._waiting:
            return "waiting"
        return "alive"

    def _collect(self, stype: ResourceType, stored: Stored) -> None:
        """A dependent of a gone owner: delete it, or drop its references to gone owners."""
        current = self.store.lookup(
            stype, stored.obj["metadata"].get("namespace", ""), stored.obj["metadata"]["name"]
        )
        if current is None:
            return
        meta = current.obj["metadata"]
        namespace = meta.get("namespace", "")
        refs = [r for r in meta.get("ownerReferences") or [] if isinstance(r, dict)]
        states = [self._owner_state(r, namespace) for r in refs]
        if "alive" in states:
            # As upstream: with a live owner left, references to owners that are gone or
            # waiting for their dependents are dropped.
            kept = [r for r, s in zip(refs, states, strict=True) if s == "alive"]
            if len(kept) != len(refs):
                self._set_owner_references(stype, current, kept)
            return
        if meta.get("deletionTimestamp"):
            return
        policy = BACKGROUND
        if "waiting" in states and any(True for _ in self._dependents(meta["uid"], namespace)):
            policy = FOREGROUND
        self._delete(stype, namespace, meta["name"], policy=policy)

    def _finalize(self, event: _Event) -> None:
        stype = next(t for t in self._stored_types() if t.storage_name == event.key[0])
        owner = self.store.lookup(stype, event.key[1], event.key[2])
        if owner is None:
            return
        finalizers = owner.obj["metadata"].get("finalizers") or []
        if ORPHAN_FINALIZER in finalizers:
            for dep_type, dependent in list(self._dependents(event.uid, event.namespace)):
                refs = dependent.obj["metadata"].get("ownerReferences") or []
                kept = [r for r in refs if not (isinstance(r, dict) and r.get("uid") == event.uid)]
                self._set_owner_references(dep_type, dependent, kept)
            self._drop_finalizer(stype, event.key, ORPHAN_FINALIZER)
        elif FOREGROUND_FINALIZER in finalizers:
            for dep_type, dependent in list(self._dependents(event.uid, event.namespace)):
                self._collect(dep_type, dependent)

    def _release_waiting(self) -> None:
        """Owners deleting in the foreground whose blocking dependents are all gone."""
        for uid, key in list(self._waiting.items()):
            blocking = [
                stored
                for _, stored in self._dependents(uid, key[1])
                if any(
                    isinstance(r, dict) and r.get("uid") == uid and r.get("blockOwnerDeletion")
                    for r in stored.obj["metadata"].get("ownerReferences") or []
                )
            ]
            if blocking:
                continue
            self._waiting.pop(uid, None)
            stype = next(t for t in self._stored_types() if t.storage_name == key[0])
            self._drop_finalizer(stype, key, FOREGROUND_FINALIZER)

    # -- writes ----------------------------------------------------------------------------
    def _set_owner_references(
        self, stype: ResourceType, stored: Stored, refs: list[dict[str, Any]]
    ) -> None:
        new = clone(stored.obj)
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        self._update(stype, stored, new)

    def _drop_finalizer(
        self, stype: ResourceType, key: tuple[str, str, str], finalizer: str
    ) -> None:
        current = self.store.lookup(stype, key[1], key[2])
        if current is None:
            return
        new = clone(current.obj)
        kept = [f for f in new["metadata"].get("finalizers") or [] if f != finalizer]
        new["metadata"]["finalizers"] = kept
        self._update(stype, current, new)

    def _update(self, stype: ResourceType, stored: Stored, new: Obj) -> None:
        meta = new["metadata"]
        self._write(stype, meta.get("namespace", ""), meta["name"], new)
