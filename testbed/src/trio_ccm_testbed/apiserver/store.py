"""The emulator's state: objects, one global resourceVersion, bounded history, watchers.

Everything here is synchronous: a write checks, commits and fans its event out to every
watcher without an await in between, so watchers see a gap-free, ordered stream and no lock
is needed. Kind-specific rules (defaults, validation, allocation) live in `kinds/`.
"""

from __future__ import annotations

import base64
import bisect
import datetime as dt
import random
import uuid
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from trio_ccm_testbed.apiserver import errors
from trio_ccm_testbed.apiserver.errors import ApiError
from trio_ccm_testbed.apiserver.fielderrors import FieldError, forbidden, not_supported, required
from trio_ccm_testbed.apiserver.selector import FieldSelector, LabelSelector

if TYPE_CHECKING:
    from trio_ccm_testbed.apiserver.kinds import ResourceType

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

SCAN_STEP = 2_000
"""A stepped list or watch replay yields to other tasks after this many keys: at 100,000
Nodes a scan in one step held the emulator 1 to 1.4 s (a selector matched against each
Node, a new watch replaying every one)."""

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def encode(value: Any) -> bytes:
    return _encode(value)


def decode(data: bytes) -> Any:
    return _decode(data)


def clone(obj: Obj) -> Obj:
    """A deep copy (a JSON round trip: faster than copy.deepcopy for these documents)."""
    result: Obj = _decode(_encode(obj))
    return result


def format_time(moment: dt.datetime) -> str:
    """RFC 3339 in UTC with seconds precision, as metav1.Time is serialised."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@dataclass(slots=True)
class Stored:
    """One committed object and its JSON encoding (encoded once, at commit)."""

    obj: Obj
    raw: bytes
    rv: int


@dataclass(slots=True)
class Event:
    """A committed change. `old` is the object before the change (None for ADDED)."""

    rv: int
    type: str
    obj: Obj
    raw: bytes
    old: Obj | None
    old_raw: bytes | None


@dataclass(frozen=True, slots=True)
class Frame:
    """What a watcher hands to its stream: a watch event for one object."""

    type: str
    obj: Obj
    raw: bytes


class Watcher:
    """One watch: a filter and a bounded buffer of frames.

    A watcher whose buffer is full is closed, as the real server closes watchers that
    cannot keep up; its client sees the stream end and must re-watch from its last
    resourceVersion.
    """

    def __init__(
        self,
        storage: Storage,
        rtype: ResourceType,
        namespace: str,
        labels: LabelSelector,
        fields: FieldSelector,
        buffer: int,
    ) -> None:
        self.storage = storage
        self.rtype = rtype
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        # Bounded on purpose: a slow reader is cut off instead of growing memory.
        self.send, self.receive = trio.open_memory_channel[Frame](buffer)
        self.closed = False
        self.aborted = False
        self.reason = ""

    def matches(self, obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace and meta.get("namespace", "") != self.namespace:
            return False
        if not self.labels.empty and not self.labels.matches(meta.get("labels") or {}):
            return False
        if self.fields.requirements:
            return self.fields.matches(self.rtype.strategy.field_labels(obj))
        return True

    def offer(self, event: Event) -> None:
        old_match = event.old is not None and self.matches(event.old)
        new_match = self.matches(event.obj)
        if event.type == "DELETED":
            if new_match:
                self._put(Frame("DELETED", event.obj, event.raw))
        elif event.type == "ADDED" or not old_match:
            if new_match:
                self._put(Frame("ADDED", event.obj, event.raw))
        elif new_match:
            self._put(Frame("MODIFIED", event.obj, event.raw))
        else:
            # Left the selection: DELETED with the previous content at the new version.
            assert event.old is not None
            gone = dict(event.old)
            gone["metadata"] = {**event.old["metadata"], "resourceVersion": str(event.rv)}
            self._put(Frame("DELETED", gone, encode(gone)))

    def _put(self, frame: Frame) -> None:
        if self.closed:
            return
        try:
            self.send.send_nowait(frame)
        except trio.WouldBlock:
            self.close("watcher could not keep up")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.close("client went away")

    def close(self, reason: str, *, abort: bool = False) -> None:
        """End the watch: cleanly, or (abort) as a broken connection would."""
        if not self.closed:
            self.closed = True
            self.aborted = abort
            self.reason = reason
            self.send.close()
            self.storage.watchers.discard(self)


@dataclass
class Storage:
    """All objects of one stored resource (several API resources may share one storage)."""

    name: str
    objects: dict[Key, Stored] = field(default_factory=dict)
    history: deque[Event] = field(default_factory=deque)
    compacted_rv: int = 0
    watchers: set[Watcher] = field(default_factory=set)
    # The keys in etcd order ("namespace/name"), made at the first list and then kept as
    # keys come and go: a list of 100,000 Nodes is 200 pages, and sorting every key for each
    # page made it quadratic. Once handed out (`ordered_keys`: a stepped scan or a watch's
    # replay may read it across steps) it is never changed in place: the next key that
    # comes or goes makes a copy, which later keys change in place until it is handed out.
    key_order: list[tuple[str, Key]] | None = None
    key_order_shared: bool = False

    def ordered_keys(self) -> list[tuple[str, Key]]:
        """The key order, for a reader that may hold it across steps (never changed now)."""
        if self.key_order is None:
            self.key_order = sorted((_key_text(key), key) for key in self.objects)
        self.key_order_shared = True
        return self.key_order

    def _own_order(self) -> list[tuple[str, Key]]:
        assert self.key_order is not None
        if self.key_order_shared:  # a reader may hold this one: change a copy
            self.key_order = list(self.key_order)
            self.key_order_shared = False
        return self.key_order

    def key_came(self, key: Key) -> None:
        """Keep the order, once made, as a key comes (a copy of 100,000 entries per key cost
        4 ms a Node registered at 100,000 Nodes, more than the rest of the create; sorting
        every key again at the next list was one long step)."""
        if self.key_order is not None and key not in self.objects:
            bisect.insort(self._own_order(), (_key_text(key), key))

    def key_went(self, key: Key) -> None:
        """Keep the order, once made, as a key goes."""
        if self.key_order is not None:
            order = self._own_order()
            at = bisect.bisect_left(order, (_key_text(key), key))
            if at < len(order) and order[at][1] == key:
                del order[at]


@dataclass(frozen=True)
class ListResult:
    rv: int
    items: list[Stored]
    continue_token: str
    remaining: int | None


@dataclass(frozen=True)
class Preconditions:
    uid: str | None = None
    resource_version: str | None = None


class Store:
    """Objects of every kind, one global resourceVersion, history and watchers."""

    def __init__(
        self,
        *,
        now: Callable[[], dt.datetime] = utc_now,
        history_size: int = 10_000,
        watch_buffer: int = 1_000,
        rng: random.Random | None = None,
    ) -> None:
        self.now = now
        self.history_size = history_size
        self.watch_buffer = watch_buffer
        self.rng = rng or random.Random()  # noqa: S311 - names and uids, not secrets
        self.rv = 1
        self.scan_step = SCAN_STEP
        """A stepped scan pauses after this many keys (`SCAN_STEP`; tests set a few)."""
        self.storages: dict[str, Storage] = {}
        self.types: dict[str, ResourceType] = {}
        # Hooks: called with (type, event) after each commit (tests, RBAC cache).
        self.watch_started = trio.Event()

    # -- registry ---------------------------------------------------------------------
    def register(self, rtype: ResourceType) -> None:
        self.types[rtype.key] = rtype
        self.storages.setdefault(rtype.storage_name, Storage(rtype.storage_name))

    def storage(self, rtype: ResourceType) -> Storage:
        return self.storages[rtype.storage_name]

    # -- reads ------------------------------------------------------------------------
    def lookup(self, rtype: ResourceType, namespace: str, name: str) -> Stored | None:
        return self.storage(rtype).objects.get((namespace, name))

    def get(self, rtype: ResourceType, namespace: str, name: str) -> Stored:
        stored = self.lookup(rtype, namespace, name)
        if stored is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        return stored

    def iter_namespace(self, namespace: str) -> Iterator[tuple[Storage, Stored]]:
        for storage in self.storages.values():
            for (ns, _), stored in list(storage.objects.items()):
                if ns == namespace:
                    yield storage, stored

    def list_objects(
        self,
        rtype: ResourceType,
        namespace: str,
        *,
        labels: LabelSelector,
        fields: FieldSelector,
        limit: int = 0,
        continue_token: str = "",
        resource_version: str = "",
        rv_match: str = "",
    ) -> ListResult:
        """A list in one step (the scan below, run to its end without yielding)."""
        scan = self.list_scan(
            rtype, namespace, labels, fields, limit, continue_token, resource_version, rv_match
        )
        while (result := scan_step(scan)) is None:
            pass
        return result

    async def list_objects_stepped(
        self,
        rtype: ResourceType,
        namespace: str,
        *,
        labels: LabelSelector,
        fields: FieldSelector,
        limit: int = 0,
        continue_token: str = "",
        resource_version: str = "",
        rv_match: str = "",
    ) -> ListResult:
        """The same list, yielding to other tasks every `scan_step` objects scanned: a list
        of 100,000 Nodes (or a selector matched against each) is many short steps, not one
        long one. Writes that land meanwhile are not in it: the scan reads a copy of the
        objects taken at its resourceVersion (the copy is of the index, not the objects:
        a stored object is never changed, only replaced)."""
        scan = self.list_scan(
            rtype,
            namespace,
            labels,
            fields,
            limit,
            continue_token,
            resource_version,
            rv_match,
            stepped=True,
        )
        while (result := scan_step(scan)) is None:
            await trio.lowlevel.checkpoint()
        return result

    def list_scan(
        self,
        rtype: ResourceType,
        namespace: str,
        labels: LabelSelector,
        fields: FieldSelector,
        limit: int,
        continue_token: str,
        resource_version: str,
        rv_match: str,
        *,
        stepped: bool = False,
    ) -> Generator[None, None, ListResult]:
        """The list's scan: a generator that pauses (yields None) after every `scan_step`
        keys when `stepped`, and returns the `ListResult`. Whatever is written between its
        pauses is not in the result: it is the list at the result's resourceVersion."""
        storage = self.storage(rtype)
        start = ""
        if continue_token:
            if resource_version not in ("", "0") or rv_match:
                raise errors.bad_request(
                    "specifying resource version is not allowed when using continue"
                )
            at, start = self._decode_continue(continue_token)
            if at == -1:
                # An "inconsistent" token (from a 410): continue at the latest state.
                at, objects = self.rv, storage.objects
            elif at < storage.compacted_rv:
                error = errors.expired(_CONTINUE_TOO_OLD)
                error.metadata = {"continue": self._encode_continue(-1, start)}
                raise error
            else:
                objects = self._snapshot(storage, at)
        else:
            at, objects = self._list_version(storage, resource_version, rv_match)
        # etcd key order: the "namespace/name" string.
        order = storage.ordered_keys()
        if objects is not storage.objects and objects.keys() != storage.objects.keys():
            order = _order_of(objects, storage.objects, order)  # keys came or went since
        position = bisect.bisect_left(order, (start,)) if start else 0
        selective = not labels.empty or bool(fields.requirements)
        if stepped and objects is storage.objects and len(order) - position > self.scan_step:
            # The scan yields: writes may land meanwhile. Read the index as it is now
            # (`order`, handed out, is never changed in place: a key that comes or goes
            # changes a copy).
            objects = dict(objects)
        matched: list[Stored] = []
        probe = Watcher.__new__(Watcher)  # reuse the watch filter for lists
        probe.rtype, probe.namespace, probe.labels, probe.fields = rtype, namespace, labels, fields
        remaining = 0
        scanned = 0
        for index in range(position, len(order)):
            key = order[index][1]
            scanned += 1
            if stepped and scanned % self.scan_step == 0:
                yield
            if namespace and key[0] != namespace:
                continue
            if limit and len(matched) >= limit:
                if not selective and not namespace:
                    remaining = len(order) - index  # every key from here on counts
                    break
                if selective and not probe.matches(objects[key].obj):
                    continue
                remaining += 1
                if selective:
                    break  # not counted with a selector (below): one more match will do
                continue
            stored = objects[key]
            if probe.matches(stored.obj):
                matched.append(stored)
        token = ""
        if remaining:
            # As etcd3: the next page starts just after the last key returned.
            token = self._encode_continue(at, _key_text(object_key(matched[-1].obj)) + "\x00")
        # Upstream counts the rest only when no selector could make the count wrong.
        counted = token and labels.empty and not fields.requirements
        return ListResult(at, matched, token, remaining if counted else None)

    def _list_version(
        self, storage: Storage, resource_version: str, rv_match: str
    ) -> tuple[int, dict[Key, Stored]]:
        if rv_match and rv_match not in ("Exact", "NotOlderThan"):
            raise list_options_invalid(
                not_supported("resourceVersionMatch", rv_match, ("Exact", "NotOlderThan", ""))
            )
        if rv_match and resource_version == "":
            raise list_options_invalid(
                forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                )
            )
        if resource_version in ("", "0"):
            if rv_match == "Exact" and resource_version == "0":
                raise list_options_invalid(
                    forbidden(
                        "resourceVersionMatch",
                        'resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                    )
                )
            return self.rv, storage.objects
        wanted = parse_rv(resource_version)
        if wanted > self.rv:
            raise errors.too_large_resource_version(wanted, self.rv)
        if rv_match == "Exact":
            if wanted < storage.compacted_rv:
                raise errors.expired("The resourceVersion for the provided list is too old.")
            return wanted, self._snapshot(storage, wanted)
        return self.rv, storage.objects

    def _snapshot(self, storage: Storage, at: int) -> dict[Key, Stored]:
        """The objects as they were at resourceVersion `at` (undo newer history)."""
        objects = dict(storage.objects)
        for event in reversed(storage.history):
            if event.rv <= at:
                break
            key = object_key(event.obj)
            if event.type == "ADDED":
                objects.pop(key, None)
            else:
                assert event.old is not None
                assert event.old_raw is not None
                objects[key] = Stored(
                    event.old,
                    event.old_raw,
                    parse_rv(event.old["metadata"].get("resourceVersion", "0")),
                )
        return objects

    def _encode_continue(self, at: int, start: str) -> str:
        body = encode({"v": "meta.k8s.io/v1", "rv": at, "start": start})
        return base64.urlsafe_b64encode(body).decode().rstrip("=")

    def _decode_continue(self, token: str) -> tuple[int, str]:
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            body = decode(raw)
            at, start = int(body["rv"]), str(body["start"])
            version = body.get("v")
        except (ValueError, KeyError, TypeError, msgspec.DecodeError) as exc:
            raise errors.bad_request(
                f"invalid continue token: continue key is not valid: {exc}"
            ) from exc
        if version != "meta.k8s.io/v1":
            raise errors.bad_request(
                f"invalid continue token: continue key is not valid: server does not "
                f"recognize this encoded key version ({version})"
            )
        if at == 0 or at < -1:
            raise errors.bad_request(
                "invalid continue token: continue key is not valid: incorrect encoded start "
                "resourceVersion (version meta.k8s.io/v1)"
            )
        return at, start

    # -- writes -----------------------------------------------------------------------
    def commit(self, rtype: ResourceType, kind: str, obj: Obj, old: Stored | None) -> Stored:
        """Store `obj` (ADDED/MODIFIED) or remove it (DELETED) at the next resourceVersion."""
        storage = self.storage(rtype)
        self.rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.rv)
        for attr in _OMIT_EMPTY:
            if attr in meta and not meta[attr]:
                del meta[attr]  # Go's omitempty: empty lists and maps are not serialised
        obj = ordered(obj)
        raw = encode(obj)
        stored = Stored(obj, raw, self.rv)
        key = object_key(obj)
        if kind == "DELETED":
            del storage.objects[key]
            storage.key_went(key)
        else:
            if kind == "ADDED":
                storage.key_came(key)
            storage.objects[key] = stored
        event = Event(self.rv, kind, obj, raw, old.obj if old else None, old.raw if old else None)
        if len(storage.history) >= self.history_size:
            storage.compacted_rv = storage.history.popleft().rv
        storage.history.append(event)
        for watcher in list(storage.watchers):
            watcher.offer(event)
        return stored

    def new_uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def generate_name(self, prefix: str) -> str:
        return prefix + "".join(self.rng.choice(_NAME_SUFFIX_ALPHABET) for _ in range(5))

    # -- watch ------------------------------------------------------------------------
    def open_watcher(
        self,
        rtype: ResourceType,
        namespace: str,
        *,
        labels: LabelSelector,
        fields: FieldSelector,
        resource_version: str,
    ) -> tuple[Watcher, Iterable[Frame | None], int]:
        """Register a watcher; return it, the frames to replay first, and their version.

        With no `resource_version` the replay is every matching object as it is now, read
        lazily (the stream filters it a chunk at a time, so a new watch of 100,000 Nodes is
        not one long step) from a copy of the index taken as the watcher is registered:
        a write that lands meanwhile is in the watcher's stream, not in the replay. A None in
        the replay is a pause (`scan_step` objects scanned): the stream may yield there.
        Raises `ApiError` 410 when `resource_version` has been compacted away and 504 when
        it is ahead of the server.
        """
        storage = self.storage(rtype)
        if resource_version not in ("", "0"):
            since = parse_rv(resource_version)
            if since > self.rv:
                raise errors.too_large_resource_version(since, self.rv)
        watcher = Watcher(storage, rtype, namespace, labels, fields, self.watch_buffer)
        replay: Iterable[Frame | None]
        if resource_version in ("", "0"):
            replay = _current_frames(
                watcher, storage.ordered_keys(), dict(storage.objects), self.scan_step
            )
        else:
            since = parse_rv(resource_version)
            if since < storage.compacted_rv:
                raise errors.expired(f"too old resource version: {since} ({storage.compacted_rv})")
            collector = _Collector(watcher)
            for event in storage.history:
                if event.rv > since:
                    collector.offer(event)
            replay = collector.frames
        storage.watchers.add(watcher)
        self.watch_started.set()
        self.watch_started = trio.Event()
        return watcher, replay, self.rv

    def drop_watches(self, *, abort: bool = False) -> int:
        """End every open watch now: cleanly, or (abort) as a connection reset."""
        count = 0
        for storage in self.storages.values():
            for watcher in list(storage.watchers):
                watcher.close("dropped by fault injection", abort=abort)
                count += 1
        return count

    def compact(self) -> None:
        """Forget all history: older resourceVersions now answer 410 Expired."""
        for storage in self.storages.values():
            storage.history.clear()
            storage.compacted_rv = self.rv

    def watcher_count(self) -> int:
        return sum(len(s.watchers) for s in self.storages.values())


def scan_step(scan: Generator[None, None, ListResult]) -> ListResult | None:
    """Run a list's scan (`Store.list_scan`) to its next pause: None there, else its result."""
    try:
        next(scan)
    except StopIteration as done:
        result: ListResult = done.value
        return result
    return None


def _current_frames(
    watcher: Watcher, order: list[tuple[str, Key]], objects: dict[Key, Stored], step: int
) -> Iterator[Frame | None]:
    """ADDED for every object of `objects` that `watcher` selects, in etcd key order, and
    None after every `step` objects scanned (a place to yield)."""
    for scanned, (_, key) in enumerate(order, 1):
        stored = objects[key]
        if watcher.matches(stored.obj):
            yield Frame("ADDED", stored.obj, stored.raw)
        if scanned % step == 0:
            yield None


class _Collector(Watcher):
    """Applies a watcher's filter to history events, collecting frames in a list."""

    def __init__(self, template: Watcher) -> None:
        self.rtype, self.namespace = template.rtype, template.namespace
        self.labels, self.fields = template.labels, template.fields
        self.closed = False
        self.frames: list[Frame] = []

    def _put(self, frame: Frame) -> None:
        self.frames.append(frame)


_CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


def list_options_invalid(*errs: FieldError) -> ApiError:
    return errors.invalid("ListOptions", "meta.k8s.io", "", list(errs))


_HEAD = ("kind", "apiVersion", "metadata")
_OMIT_EMPTY = ("labels", "annotations", "finalizers", "ownerReferences", "managedFields")


def ordered(obj: Obj) -> Obj:
    """kind, apiVersion and metadata first, as the real server serialises objects."""
    if tuple(obj)[:3] == _HEAD:
        return obj
    head = {k: obj[k] for k in _HEAD if k in obj}
    return head | {k: v for k, v in obj.items() if k not in head}


def parse_rv(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise errors.bad_request(f'invalid resource version: "{text}"')
    return value


def object_key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


def _key_text(key: Key) -> str:
    return f"{key[0]}/{key[1]}"


def _order_of(
    objects: dict[Key, Stored], current: dict[Key, Stored], order: list[tuple[str, Key]]
) -> list[tuple[str, Key]]:
    """The etcd order of a snapshot's keys, from the current order: filtered when keys only
    came since (a join while a client pages through a list: no sort of every key per page),
    sorted anew when some went."""
    if all(key in current for key in objects):
        return [entry for entry in order if entry[1] in objects]
    return sorted((_key_text(key), key) for key in objects)


def finalizer_errors(new: Obj, old: Obj) -> list[FieldError]:
    """No new finalizers may be added once deletion has started (upstream's rule)."""
    old_meta, new_meta = old["metadata"], new["metadata"]
    if not old_meta.get("deletionTimestamp"):
        return []
    before = set(old_meta.get("finalizers") or [])
    added = [f for f in new_meta.get("finalizers") or [] if f not in before]
    if added:
        listed = ", ".join(f'"{f}"' for f in added)
        return [
            forbidden(
                "metadata.finalizers",
                f"no new finalizers can be added if the object is being deleted, "
                f"found new finalizers []string{{{listed}}}",
            )
        ]
    return []


def name_required() -> FieldError:
    return required("metadata.name", "name or generateName is required")
