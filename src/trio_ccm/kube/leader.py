"""Lease-based leader election, compatible with client-go's (tools/leaderelection).

Replicas of trio-ccm and of a Go cloud-controller-manager can share one Lease
(`coordination.k8s.io/v1`, `kube-system/cloud-controller-manager` by default): the same
fields are written the same way.

- **Expiry is judged by local observation only.** A candidate notes, on its own clock, when
  it last saw the Lease's record change, and takes the Lease over only once the record has
  stayed unchanged for `leaseDurationSeconds`. Timestamps inside the Lease (acquireTime,
  renewTime) are written for people and never compared, so clock offsets between replicas
  do not matter; clock *rates* do, within the margin lease duration / renew deadline
  (15 / 10 tolerates a candidate whose clock runs up to 1.5 times as fast as the leader's).
- **Writes are optimistic.** Every write is a PUT carrying the resourceVersion last read, so
  of two candidates taking an expired Lease one gets 409 Conflict.
- **Acquiring**: one attempt at once, then every retry period stretched by a random factor
  in [1, 1 + jitter) (client-go's `wait.Jitter`: 2 s to 4.4 s by default). Beyond
  client-go, a candidate also watches the Lease while it waits: it sees each renewal as it
  happens (so its expiry clock starts at the leader's true last renewal, not at its own next
  poll), attempts at the very instant the Lease expires by its observation instead of at
  its next jittered slot, and takes a released Lease at once. A crashed leader is thus
  replaced one lease duration after its last renewal (client-go: up to 2 x 4.4 s later),
  and a graceful handover takes milliseconds. The watch only reads: every decision is still
  `tryAcquireOrRenew`'s, judged by local observation, so safety is unchanged.
- **Renewing**: every retry period after the last successful renewal; failed attempts are
  retried every retry period. When `renew_deadline_s` has passed since the start of the
  last successful renewal (client-go measures it from the start of the failing round, up
  to one retry period later), leadership is lost at once, before any other replica can
  have taken over; so is it when a read shows another holder.
- **Releasing** (when `lead` is cancelled, or `body` returns): the holder is cleared and the
  duration set to 1 s, as client-go's ReleaseOnCancel does, so another replica takes over
  at its next attempt instead of after a whole lease duration.

There is no fencing: a leader that stops being scheduled for longer than the renew
deadline can act after its Lease has passed on. Time for waiting and expiry comes from a
`Clock` (Trio's by default); wall-clock time only fills the Lease's timestamps.
"""

from __future__ import annotations

import datetime as dt
import random
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Final, NoReturn, Protocol

import msgspec
import trio

from trio_ccm.base.observable import AsyncValue
from trio_ccm.errors import CcmError, ConfigError
from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.errors import ForbiddenError, KubeError, NotFoundError
from trio_ccm.kube.events import EventRecorder, ObjectRef, utc_now
from trio_ccm.kube.metrics import LeaderMetrics
from trio_ccm.kube.objects import LEASES, Lease, LeaseSpec, resource_version_number
from trio_ccm.kube.patches import JSONValue
from trio_ccm.kube.wellknown import LEASE_NAME, LEASE_NAMESPACE, REASON_LEADER_ELECTION
from trio_ccm.logs import get_logger

log = get_logger("trio_ccm.kube.leader")

DEFAULT_LEASE_DURATION_S: Final = 15.0
DEFAULT_RENEW_DEADLINE_S: Final = 10.0
DEFAULT_RETRY_PERIOD_S: Final = 2.0
JITTER_FACTOR: Final = 1.2
HEALTHZ_SLACK_S: Final = 20.0
"""How long past the lease duration a leader may go unrenewed before /healthz fails."""

_MICRO_TIME: Final = "%Y-%m-%dT%H:%M:%S.%fZ"


class LeaseLostError(CcmError):
    """Leadership was lost and the caller asked to stop rather than campaign again."""


def default_identity() -> str:
    """`<hostname>_<uuid4>`, as the Go CCM names itself in the Lease."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def validate_timing(
    lease_duration_s: float,
    renew_deadline_s: float,
    retry_period_s: float,
    *,
    jitter: float = JITTER_FACTOR,
) -> None:
    """Raise ConfigError unless lease duration > renew deadline > retry period * jitter > 0.

    The checks and their order are client-go's (NewLeaderElector), and so are the messages.
    """
    flags = (
        f"--leader-elect-lease-duration={lease_duration_s:g}s, "
        f"--leader-elect-renew-deadline={renew_deadline_s:g}s, "
        f"--leader-elect-retry-period={retry_period_s:g}s"
    )
    problem = ""
    if lease_duration_s <= renew_deadline_s:
        problem = "leaseDuration must be greater than renewDeadline"
    elif renew_deadline_s <= jitter * retry_period_s:
        problem = "renewDeadline must be greater than retryPeriod*JitterFactor"
    elif lease_duration_s <= 0:
        problem = "leaseDuration must be greater than zero"
    elif renew_deadline_s <= 0:
        problem = "renewDeadline must be greater than zero"
    elif retry_period_s <= 0:
        problem = "retryPeriod must be greater than zero"
    if problem:
        raise ConfigError(f"leader election: {problem} ({flags})")


class Clock(Protocol):
    """The elector's sense of elapsed time: every interval it waits for or judges."""

    def current_time(self) -> float:
        """Seconds on this clock, from any origin."""
        ...

    def trio_time(self, local: float) -> float:
        """The `trio.current_time()` at which this clock will read `local`."""
        ...


class TrioClock:
    """Trio's clock (the default): drift-free scheduling, and MockClock in tests."""

    def current_time(self) -> float:
        return trio.current_time()

    def trio_time(self, local: float) -> float:
        return local


@dataclass(frozen=True)
class _Record:
    """client-go's LeaderElectionRecord: the part of a Lease the election reads and writes."""

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str = ""
    renew_time: str = ""
    lease_transitions: int = 0

    @classmethod
    def of(cls, spec: LeaseSpec) -> _Record:
        return cls(
            spec.holder_identity or "",
            spec.lease_duration_seconds or 0,
            spec.acquire_time or "",
            spec.renew_time or "",
            spec.lease_transitions or 0,
        )

    def spec(self) -> dict[str, JSONValue]:
        return {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time or None,
            "renewTime": self.renew_time or None,
            "leaseTransitions": self.lease_transitions,
        }


def _newer(candidate: dict[str, Any], current: dict[str, Any] | None) -> bool:
    """Whether a Lease from the watch is newer than the one last read or written."""
    if current is None:
        return True
    new = str((candidate.get("metadata") or {}).get("resourceVersion", ""))
    old = str((current.get("metadata") or {}).get("resourceVersion", ""))
    new_number, old_number = resource_version_number(new), resource_version_number(old)
    if new_number is not None and old_number is not None:
        return new_number > old_number
    return new != old


class LeaderElector:
    """Campaigns for a Lease and runs a body only while holding it. See the module docstring."""

    def __init__(
        self,
        client: KubeClient,
        *,
        identity: str,
        namespace: str = LEASE_NAMESPACE,
        name: str = LEASE_NAME,
        lease_duration_s: float = DEFAULT_LEASE_DURATION_S,
        renew_deadline_s: float = DEFAULT_RENEW_DEADLINE_S,
        retry_period_s: float = DEFAULT_RETRY_PERIOD_S,
        jitter: float = JITTER_FACTOR,
        now: Callable[[], dt.datetime] = utc_now,
        clock: Clock | None = None,
        recorder: EventRecorder | None = None,
        metrics: LeaderMetrics | None = None,
        rng: random.Random | None = None,
        release_on_cancel: bool = True,
    ) -> None:
        validate_timing(lease_duration_s, renew_deadline_s, retry_period_s, jitter=jitter)
        if not identity:
            raise ConfigError(f"leader election: Lease {namespace}/{name}: the identity is empty")
        self.client = client
        self.identity = identity
        self.namespace = namespace
        self.name = name
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.jitter = jitter
        self.release_on_cancel = release_on_cancel
        self._now = now
        self._clock: Clock = clock if clock is not None else TrioClock()
        self._recorder = recorder
        self._metrics = metrics
        self._rng = rng if rng is not None else random.Random()  # noqa: S311 - jitter, not secrets
        # The lock client's timeout in client-go: max(1 s, renewDeadline / 2).
        self._attempt_timeout_s = max(1.0, renew_deadline_s / 2)
        self._lease: dict[str, Any] | None = None  # as last read or written: what a PUT sends
        self._observed = _Record()
        self._observed_at: float | None = None  # clock time the record was last seen to change
        self._last_renewed: float | None = None
        self.leading: AsyncValue[bool] = AsyncValue(False)
        """Whether this replica holds the Lease (and its body may run)."""
        self._running = False
        self._poked = trio.Event()  # set when the Lease watch saw the record change
        if metrics is not None:
            metrics.master_status.labels(name).set(0)
            metrics.slowpath.labels(name)  # exported as 0 from the start

    # -- observable state ----------------------------------------------------------------
    @property
    def holder(self) -> str:
        """The holder last seen in the Lease ("" when free or not read yet)."""
        return self._observed.holder_identity

    @property
    def last_renewed(self) -> float | None:
        """Clock time at which the last successful acquire or renewal began (None before)."""
        return self._last_renewed

    def holds(self) -> bool:
        """Whether this replica may act now: it leads, and its last renewal is less than
        the renew deadline ago by its own clock. False from the instant the elector would
        give the Lease up, even if the task that gives it up has not run yet (say the
        process was frozen), so no other replica can have taken over."""
        if not self.leading.value or self._last_renewed is None:
            return False
        return self._clock.current_time() < self._last_renewed + self.renew_deadline_s

    def healthy(self, slack_s: float = HEALTHZ_SLACK_S) -> bool:
        """False while leading with no renewal for longer than lease duration + `slack_s`.

        client-go's healthz check: an election loop that is stuck should not pass /healthz.
        """
        if not self.leading.value or self._last_renewed is None:
            return True
        return self._clock.current_time() - self._last_renewed <= self.lease_duration_s + slack_s

    # -- the campaign --------------------------------------------------------------------
    async def lead(
        self,
        body: Callable[[], Awaitable[None]],
        *,
        exit_on_lost_lease: bool = False,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        """Campaign for the Lease; each time it is won, run `body` while it is held.

        Losing the Lease calls `on_lost()` at that instant, synchronously (so the caller can
        stop work that `body`'s cancellation does not reach at once, e.g. calls shielded for
        a graceful drain), then cancels `body`; then the campaign starts again, or, with
        `exit_on_lost_lease`, LeaseLostError is raised. If `lead` is cancelled while leading,
        `body` is cancelled first and then the Lease released (unless `release_on_cancel` is
        off), shielded under a deadline. If `body` returns, the Lease is released the same
        way and `lead` returns. An exception from `body` propagates (in an ExceptionGroup, as
        from any nursery) after the same release.
        """
        if self._running:
            raise RuntimeError(f"Lease {self._describe()}: lead() is already running")
        self._running = True
        try:
            while True:
                await self._acquire()
                if not await self._hold(body, on_lost):
                    return
                if exit_on_lost_lease:
                    raise LeaseLostError(
                        f"Lease {self._describe()}: {self.identity} could not renew it within "
                        f"{self.renew_deadline_s:g} s and stopped leading; exiting as "
                        "--exit-on-lost-lease asks (check the connection to the API server)"
                    )
        finally:
            self._running = False

    async def _acquire(self) -> None:
        """Try at once, then again at the first of: the next jittered retry slot, the instant
        the Lease expires by our observation, or a release seen by the Lease watch."""
        log.info("lease.campaign-started", lease=self._describe(), identity=self.identity)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_lease)
            while True:
                started = self._clock.current_time()
                with trio.move_on_at(self._clock.trio_time(started + self._attempt_timeout_s)):
                    if await self._try_acquire_or_renew():
                        break
                await self._wait_for_next_attempt(started)
            nursery.cancel_scope.cancel()  # the watch: the leader renews by writing
        self._last_renewed = started
        self._set_leading(True)
        self._event("became leader")
        log.info(
            "lease.acquired",
            lease=self._describe(),
            identity=self.identity,
            transitions=self._observed.lease_transitions,
        )

    async def _wait_for_next_attempt(self, last_attempt: float) -> None:
        """Sleep until the next attempt is due (see `_acquire`); the watch may bring it forward.

        Only what was observed after `last_attempt` began can bring it forward, so a failing
        attempt never turns into a busy loop.
        """
        period = self.retry_period_s * (1.0 + self._rng.random() * self.jitter)
        slot = self._clock.current_time() + period
        while True:
            due = slot
            observed_at = self._observed_at
            if observed_at is not None and self._lease is not None:
                if not self._observed.holder_identity:
                    if observed_at > last_attempt:
                        due = observed_at  # released: take it now
                else:
                    expiry = observed_at + self._observed.lease_duration_seconds
                    if expiry > last_attempt:
                        due = min(due, expiry)  # expired by our own observation
            if self._clock.current_time() >= due:
                return
            self._poked = trio.Event()
            with trio.move_on_at(self._clock.trio_time(due)):
                await self._poked.wait()
                continue  # something was observed: recompute
            return

    async def _watch_lease(self) -> NoReturn:
        """While campaigning, watch the Lease so that a renewal is seen as it happens (its
        expiry then counts from the true last renewal, not from our next poll) and a release
        at once. Reads only: every decision is still taken by `_try_acquire_or_renew`."""
        selector = f"metadata.name={self.name}"
        while True:
            try:
                async with self.client.watch(
                    LEASES,
                    namespace=self.namespace,
                    resource_version="",
                    field_selector=selector,
                    timeout_s=300,
                ) as events:
                    async for event in events:
                        self._watched(event.type, event.object)
            except KubeError as exc:
                # Routine (a dropped watch) at debug; refused by RBAC, which no retry mends,
                # at warning.
                report = log.warning if isinstance(exc, ForbiddenError) else log.debug
                report("lease.watch-failed", lease=self._describe(), error=str(exc))
            await trio.sleep(self.retry_period_s)

    def _watched(self, kind: str, raw: msgspec.Raw) -> None:
        if kind not in ("ADDED", "MODIFIED"):
            return
        try:
            lease = msgspec.json.decode(raw)
            record = _Record.of(msgspec.convert(lease, Lease).spec)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        if not _newer(lease, self._lease):
            return
        self._lease = lease
        if record != self._observed:
            self._observe(record)
            self._poked.set()

    async def _hold(
        self, body: Callable[[], Awaitable[None]], on_lost: Callable[[], None] | None
    ) -> bool:
        """Run `body` while renewing. True: the Lease was lost; False: we stepped down."""
        lost = False
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._run_body, body, nursery.cancel_scope)
                await self._renew_until_lost()
                lost = True
                if on_lost is not None:
                    on_lost()
                self._stop_leading()
                nursery.cancel_scope.cancel()
        finally:
            if not lost:
                self._stop_leading()
                if self.release_on_cancel:
                    with trio.CancelScope(shield=True), trio.move_on_after(self._attempt_timeout_s):
                        await self._release()
                else:
                    log.info("lease.abandoned", lease=self._describe(), identity=self.identity)
        return lost

    @staticmethod
    async def _run_body(body: Callable[[], Awaitable[None]], scope: trio.CancelScope) -> None:
        await body()
        scope.cancel()  # the body is done: stop renewing and step down

    async def _renew_until_lost(self) -> None:
        """Renew every retry period; return when leadership is lost."""
        while True:
            assert self._last_renewed is not None
            last = self._last_renewed
            slot = last + self.retry_period_s
            with trio.move_on_at(self._clock.trio_time(last + self.renew_deadline_s)):
                while True:
                    await trio.sleep_until(self._clock.trio_time(slot))
                    started = self._clock.current_time()
                    deadline = started + self._attempt_timeout_s
                    with trio.move_on_at(self._clock.trio_time(deadline)) as attempt:
                        if await self._try_acquire_or_renew():
                            self._last_renewed = started
                            break
                    if attempt.cancelled_caught:
                        log.warning(
                            "lease.renew-timed-out",
                            lease=self._describe(),
                            identity=self.identity,
                            timeout_s=self._attempt_timeout_s,
                            hint="the API server did not answer in time; the Lease is lost "
                            f"{self.renew_deadline_s:g} s after the last renewal",
                        )
                    if self._observed.holder_identity != self.identity:
                        log.warning(
                            "lease.lost",
                            lease=self._describe(),
                            identity=self.identity,
                            holder=self._observed.holder_identity,
                        )
                        return
                    now = self._clock.current_time()
                    while slot <= now:  # skip the slots a slow attempt overran
                        slot += self.retry_period_s
            if self._last_renewed == last:
                log.warning(
                    "lease.lost",
                    lease=self._describe(),
                    identity=self.identity,
                    renew_deadline_s=self.renew_deadline_s,
                )
                return
            log.debug("lease.renewed", lease=self._describe(), identity=self.identity)

    def _stop_leading(self) -> None:
        self._set_leading(False)
        self._event("stopped leading")

    def _set_leading(self, leading: bool) -> None:
        self.leading.value = leading
        if self._metrics is not None:
            self._metrics.master_status.labels(self.name).set(1 if leading else 0)

    # -- one attempt (client-go's tryAcquireOrRenew) ----------------------------------------
    async def _try_acquire_or_renew(self) -> bool:
        stamp = self._stamp()
        ours = _Record(
            self.identity, max(1, int(self.lease_duration_s)), stamp, stamp, lease_transitions=0
        )
        # 1. The fast path: we hold it, as far as we know; write over the version last seen.
        if self._lease is not None and self._holding() and self._valid():
            kept = replace(
                ours,
                acquire_time=self._observed.acquire_time,
                lease_transitions=self._observed.lease_transitions,
            )
            try:
                await self._write(kept)
                return True
            except KubeError as exc:
                self._failed("lease.update-failed", exc)
        # 2. Read it, or create it.
        try:
            raw = await self.client.get(LEASES, self.name, namespace=self.namespace)
        except NotFoundError:
            return await self._create(ours)
        except KubeError as exc:
            self._failed("lease.read-failed", exc)
            return False
        try:
            record = _Record.of(msgspec.convert(raw, Lease).spec)
        except msgspec.ValidationError as exc:
            log.warning("lease.unreadable", lease=self._describe(), error=str(exc))
            return False
        self._lease = raw
        # 3. Note when the record last changed; a valid lease held by another stands.
        if record != self._observed:
            self._observe(record)
        if record.holder_identity and not self._holding() and self._valid():
            return False
        # 4. Take it, or renew it the slow way.
        if self._holding():
            new = replace(
                ours,
                acquire_time=record.acquire_time,
                lease_transitions=record.lease_transitions,
            )
            if self._metrics is not None:
                self._metrics.slowpath.labels(self.name).inc()
        else:
            new = replace(ours, lease_transitions=record.lease_transitions + 1)
        try:
            await self._write(new)
        except KubeError as exc:
            self._failed("lease.update-failed", exc)
            return False
        return True

    async def _create(self, record: _Record) -> bool:
        body: dict[str, JSONValue] = {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": record.spec(),
        }
        try:
            self._lease = await self.client.create(LEASES, body, namespace=self.namespace)
        except KubeError as exc:
            report = log.warning if isinstance(exc, ForbiddenError) else log.info
            report("lease.create-failed", lease=self._describe(), error=str(exc))
            return False
        self._observe(record)
        return True

    async def _write(self, record: _Record) -> None:
        """PUT the Lease last seen with `record` as its spec (resourceVersion precondition)."""
        assert self._lease is not None
        body = {**self._lease, "spec": record.spec()}
        self._lease = await self.client.update(LEASES, self.name, body, namespace=self.namespace)
        self._observe(record)

    async def _release(self) -> None:
        """Clear the holder (duration 1 s) so the next replica need not wait the lease out."""
        if self._lease is None or not self._holding():
            return
        stamp = self._stamp()
        released = _Record("", 1, stamp, stamp, self._observed.lease_transitions)
        try:
            await self._write(released)
        except KubeError as exc:
            log.warning("lease.release-failed", lease=self._describe(), error=str(exc))
            return
        log.info("lease.released", lease=self._describe(), identity=self.identity)

    # -- helpers ---------------------------------------------------------------------------
    def _observe(self, record: _Record) -> None:
        previous = self._observed.holder_identity
        self._observed = record
        self._observed_at = self._clock.current_time()
        holder = record.holder_identity
        if holder != previous and holder not in ("", self.identity):
            log.info("lease.holder-observed", lease=self._describe(), holder=holder)

    def _failed(self, event: str, exc: KubeError) -> None:
        """A failed attempt: a warning while leading (a renewal) or when RBAC refused it (no
        retry mends that), else routine while waiting."""
        report = log.warning if self.leading.value or isinstance(exc, ForbiddenError) else log.info
        report(event, lease=self._describe(), identity=self.identity, error=str(exc))

    def _holding(self) -> bool:
        return self._observed.holder_identity == self.identity

    def _valid(self) -> bool:
        """Whether the record seen last has not yet expired, by our own observation."""
        if self._observed_at is None:
            return False
        expiry = self._observed_at + self._observed.lease_duration_seconds
        return expiry > self._clock.current_time()

    def _stamp(self) -> str:
        return self._now().astimezone(dt.UTC).strftime(_MICRO_TIME)

    def _describe(self) -> str:
        return f"{self.namespace}/{self.name}"

    def _event(self, what: str) -> None:
        if self._recorder is None:
            return
        meta = (self._lease or {}).get("metadata") or {}
        ref = ObjectRef(
            LEASES.kind,
            self.name,
            self.namespace,
            str(meta.get("uid", "")),
            LEASES.api_version,
            str(meta.get("resourceVersion", "")),
        )
        self._recorder.normal(ref, REASON_LEADER_ELECTION, f"{self.identity} {what}")
