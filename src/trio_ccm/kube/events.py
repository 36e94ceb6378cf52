"""Kubernetes Event recorder with client-go's behaviour (tools/record).

- `record()` never blocks: events go into a bounded queue (1,000) and are dropped, and
  counted, when it is full.
- Spam filter per source + involved object: a token bucket of 25, refilled one per 300 s.
- Aggregation: from the 10th event within 600 s that differs only in its message, events
  are folded into one "(combined from similar events): <message>" event.
- Deduplication: an event identical to an earlier one is written as a patch of that Event
  (count + 1, lastTimestamp) instead of a new object; if the old Event is gone, it is
  created again.
- A write that fails is retried up to 12 times, 10 s apart (a 4xx other than 404/409/429
  is not retried).
- The three caches (spam buckets, similar-event windows, written Events; 4,096 keys each,
  as client-go's LRU) forget what no longer changes a decision, once a minute: a bucket
  full again, a window past its 600 s, an Event not written for an hour (the API server's
  `--event-ttl`: a patch of it would find it gone and create it again anyway). So a wave of
  5,000 new Nodes (a `Synced` Event each) does not keep 3 x 4,096 entries for good.

Events about cluster-scoped objects (Nodes) are written to the `default` namespace, as
upstream does. Timestamps come from the injected `now()`; windows and rates use Trio's
clock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NoReturn, TypeVar

import trio

from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.errors import AlreadyExistsError, KubeApiError, KubeError, NotFoundError
from trio_ccm.kube.objects import EVENTS, Object, Resource
from trio_ccm.kube.patches import STRATEGIC, JSONValue, Patch
from trio_ccm.logs import get_logger

log = get_logger("trio_ccm.kube.events")
_T = TypeVar("_T")
_K = TypeVar("_K")
_SimilarKey = tuple[tuple[str, ...], str, str]
"""(source key, type, reason)"""
_SeenKey = tuple[tuple[str, ...], str, str, str]
"""(source key, type, reason, message: "" once aggregated)"""

QUEUE_SIZE = 1000
SPAM_BURST = 25
SPAM_REFILL_S = 300.0
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_WINDOW_S = 600.0
CACHE_SIZE = 4096
SWEEP_PERIOD_S = 60.0
SEEN_TTL_S = 3600.0  # kube-apiserver's --event-ttl default
MAX_TRIES = 12
RETRY_DELAY_S = 10.0

NORMAL = "Normal"
WARNING = "Warning"


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def timestamp(moment: dt.datetime) -> str:
    """A moment as the API writes a metav1.Time: RFC 3339, UTC, whole seconds."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ObjectRef:
    """What an Event is about (its involvedObject)."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"
    resource_version: str = ""

    @classmethod
    def of(cls, obj: Object, resource: Resource) -> ObjectRef:
        meta = obj.metadata
        return cls(
            resource.kind,
            meta.name,
            meta.namespace,
            meta.uid,
            resource.api_version,
            meta.resource_version,
        )

    def json(self) -> dict[str, JSONValue]:
        body: dict[str, JSONValue] = {
            "kind": self.kind,
            "name": self.name,
            "apiVersion": self.api_version,
        }
        if self.namespace:
            body["namespace"] = self.namespace
        if self.uid:
            body["uid"] = self.uid
        if self.resource_version:
            body["resourceVersion"] = self.resource_version
        return body


@dataclass(frozen=True)
class _Pending:
    ref: ObjectRef
    type: str
    reason: str
    message: str
    at: dt.datetime


@dataclass(slots=True)
class _Seen:
    """What was last written for one dedup key."""

    name: str
    namespace: str
    count: int
    first_timestamp: str
    written_at: float  # trio time of the last create or patch


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


@dataclass(slots=True)
class _Similar:
    messages: tuple[str, ...]  # the distinct ones (at most AGGREGATE_MAX_EVENTS matter)
    started: float


@dataclass(frozen=True)
class RecorderStatistics:
    queued: int
    written: int
    patched: int
    dropped_queue_full: int
    dropped_spam: int
    failed: int


class EventRecorder:
    """Records Events for one source component; run `serve()` to write them."""

    def __init__(
        self,
        client: KubeClient,
        *,
        component: str,
        host: str = "",
        now: Callable[[], dt.datetime] = utc_now,
        resource: Resource = EVENTS,
    ) -> None:
        self.client = client
        self.component = component
        self.host = host
        self.now = now
        self.resource = resource
        # Bounded on purpose: recording must never block a controller; overflow is dropped.
        self._send, self._receive = trio.open_memory_channel[_Pending](QUEUE_SIZE)
        self._buckets: OrderedDict[tuple[str, ...], _Bucket] = OrderedDict()
        self._similar: OrderedDict[_SimilarKey, _Similar] = OrderedDict()
        self._seen: OrderedDict[_SeenKey, _Seen] = OrderedDict()
        self._written = 0
        self._patched = 0
        self._dropped_full = 0
        self._dropped_spam = 0
        self._failed = 0
        self._last_nanos = 0

    # -- recording (sync, never blocks) -----------------------------------------------
    def event(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        """Record an Event about `ref` (Normal or Warning)."""
        try:
            self._send.send_nowait(_Pending(ref, type_, reason, message, self.now()))
        except trio.WouldBlock:
            self._dropped_full += 1

    def normal(self, ref: ObjectRef, reason: str, message: str) -> None:
        self.event(ref, NORMAL, reason, message)

    def warning(self, ref: ObjectRef, reason: str, message: str) -> None:
        self.event(ref, WARNING, reason, message)

    def statistics(self) -> RecorderStatistics:
        return RecorderStatistics(
            self._receive.statistics().current_buffer_used,
            self._written,
            self._patched,
            self._dropped_full,
            self._dropped_spam,
            self._failed,
        )

    # -- writing ----------------------------------------------------------------------
    async def serve(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._sweep_forever)
            task_status.started()
            while True:
                pending = await self._receive.receive()
                source = self._source_key(pending)
                if not self._allowed(source):
                    self._dropped_spam += 1
                    continue
                await self._write_with_retries(pending, source)
        raise AssertionError("unreachable")  # pragma: no cover

    def cache_sizes(self) -> tuple[int, int, int]:
        """Keys held: (spam buckets, similar-event windows, written Events)."""
        return len(self._buckets), len(self._similar), len(self._seen)

    async def _sweep_forever(self) -> NoReturn:
        while True:
            await trio.sleep(SWEEP_PERIOD_S)
            self.sweep()

    def sweep(self) -> None:
        """Forget the cache entries that no longer change a decision (module docstring);
        a cache that lost entries is copied, since a dict never gives its table back."""
        now = trio.current_time()
        self._buckets = _without(
            self._buckets,
            lambda b: b.tokens + (now - b.updated) / SPAM_REFILL_S >= SPAM_BURST,
        )
        self._similar = _without(self._similar, lambda s: now - s.started > AGGREGATE_WINDOW_S)
        self._seen = _without(self._seen, lambda s: now - s.written_at >= SEEN_TTL_S)

    async def drain(self) -> None:
        """Write what is queued now (for a graceful shutdown)."""
        while True:
            try:
                pending = self._receive.receive_nowait()
            except trio.WouldBlock:
                return
            source = self._source_key(pending)
            if self._allowed(source):
                await self._write_with_retries(pending, source)

    def _source_key(self, pending: _Pending) -> tuple[str, ...]:
        """The source + involved object: the spam filter's key, and the first element of
        the other two caches' keys (one tuple shared by the three)."""
        ref = pending.ref
        return (
            self.component,
            self.host,
            ref.kind,
            ref.namespace,
            ref.name,
            ref.uid,
            ref.api_version,
        )

    def _allowed(self, key: tuple[str, ...]) -> bool:
        """client-go's spam filter: per source + object (`key`), burst 25, one token per
        300 s."""
        now = trio.current_time()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(float(SPAM_BURST), now)
            self._remember(self._buckets, key, bucket)
        bucket.tokens = min(SPAM_BURST, bucket.tokens + (now - bucket.updated) / SPAM_REFILL_S)
        bucket.updated = now
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True

    def _remember(self, cache: OrderedDict[_K, _T], key: _K, value: _T) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > CACHE_SIZE:
            cache.popitem(last=False)

    def _aggregate(self, pending: _Pending, source: tuple[str, ...]) -> tuple[str, str]:
        """(message, dedup-key message): folds the 10th+ similar event in 600 s."""
        key = (source, pending.type, pending.reason)
        now = trio.current_time()
        similar = self._similar.get(key)
        if similar is None or now - similar.started > AGGREGATE_WINDOW_S:
            similar = _Similar((), now)
            self._remember(self._similar, key, similar)
        if len(similar.messages) < AGGREGATE_MAX_EVENTS and pending.message not in similar.messages:
            similar.messages = (*similar.messages, pending.message)
        if len(similar.messages) >= AGGREGATE_MAX_EVENTS:
            return f"(combined from similar events): {pending.message}", ""
        return pending.message, pending.message

    async def _write_with_retries(self, pending: _Pending, source: tuple[str, ...]) -> None:
        message, dedup_message = self._aggregate(pending, source)
        key = (source, pending.type, pending.reason, dedup_message)
        for attempt in range(1, MAX_TRIES + 1):
            try:
                await self._write(pending, message, key)
                return
            except KubeApiError as exc:
                if 400 <= exc.code < 500 and exc.code not in (404, 409, 429):
                    self._failed += 1
                    log.warning("event.rejected", reason=pending.reason, error=str(exc))
                    return
                failure: KubeError = exc
            except KubeError as exc:
                failure = exc
            if attempt == MAX_TRIES:
                self._failed += 1
                log.warning(
                    "event.dropped", reason=pending.reason, error=str(failure), tries=MAX_TRIES
                )
                return
            await trio.sleep(RETRY_DELAY_S)

    async def _write(self, pending: _Pending, message: str, key: _SeenKey) -> None:
        ref = pending.ref
        namespace = ref.namespace or "default"
        stamp = timestamp(pending.at)
        seen = self._seen.get(key)
        if seen is not None:
            patch = Patch(
                STRATEGIC, {"count": seen.count + 1, "lastTimestamp": stamp, "message": message}
            )
            try:
                await self.client.patch(self.resource, seen.name, patch, namespace=seen.namespace)
            except NotFoundError:
                self._seen.pop(key, None)  # it expired: write it anew below
            else:
                seen.count += 1
                seen.written_at = trio.current_time()
                self._patched += 1
                return
        # client-go names Events "<object>.<unix nanoseconds in hex>"; a clock that did not
        # move (or went back) must not make two Events share a name.
        nanos = max(int(pending.at.timestamp() * 1e9), self._last_nanos + 1)
        self._last_nanos = nanos
        name = f"{ref.name}.{nanos:x}"
        body: Mapping[str, JSONValue] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref.json(),
            "reason": pending.reason,
            "message": message,
            "type": pending.type,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": self.component, **({"host": self.host} if self.host else {})},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
        }
        with contextlib.suppress(AlreadyExistsError):  # a retry of a create that did land
            await self.client.create(self.resource, body, namespace=namespace)
        self._remember(self._seen, key, _Seen(name, namespace, 1, stamp, trio.current_time()))
        self._written += 1


def _without(cache: OrderedDict[_K, _T], expired: Callable[[_T], bool]) -> OrderedDict[_K, _T]:
    """`cache` without its expired entries, in a new table if any went (else itself)."""
    kept = OrderedDict((key, value) for key, value in cache.items() if not expired(value))
    return cache if len(kept) == len(cache) else kept
