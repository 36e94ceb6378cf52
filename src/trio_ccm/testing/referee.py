"""The leadership referee: did any replica write to the cloud outside its own leadership?

A replica's leadership is judged from the Lease's history, as the other replicas can
judge it, not from what the replica believed. A successful Lease write by replica R naming
R as holder (acquire or renew) at time w makes R the leader on [w, w + lease duration): no
other replica can take the Lease over before its own observation of that write is a lease
duration old. The window ends earlier at the next successful Lease write by anyone that
names another holder (a takeover, or R's own release: holder ""). Lease writes are
ordered by the resourceVersion the server gave them (two writes can share an instant; the
server still applied one before the other). A cloud write by R (a mutating call, at the
time it left R) outside every such window of R is a violation. In one process, the
recorders take a shared sequence number as each request leaves, which orders a cloud write
and a Lease write made at the same instant; across processes, times order them.

`LeaseWrite` and `CloudWrite` are what the referee needs; `LeaseRecorder` records the
Lease writes a replica makes through its kube transport (in-process), and the sim cloud's
call log gives the cloud writes (`cloud_writes`). Times are one clock for both (Trio's, in
process; wall time across processes).

Across processes (`bench/chaos.py`) the same records come from what the servers expose over
HTTP: `lease_write_of` reads one state of the Lease (as a watch delivers each) and dates it
by its `renewTime`, which its writer stamped (wall clock) before sending it, the same instant
`LeaseRecorder` uses; `cloud_writes_of_log` reads the sim cloud's `/_sim/calls` and dates
each call by its arrival (wall clock): over a socket, the kernel's receive time, when the
request left its replica on loopback, however late a busy testbed got to read it. Lease
holders are client-go identities (`<hostname>_<uuid>`) and call-log replicas are the cloud
config's `replica`; `identities` maps the former to the latter.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import httpx
import trio

from trio_ccm.testing._world import JSON, Call

__all__ = [
    "MUTATING_CLOUD_METHODS",
    "CloudRecorder",
    "CloudWrite",
    "LeaseRecorder",
    "LeaseWrite",
    "Violation",
    "cloud_writes",
    "cloud_writes_of_log",
    "leadership_windows",
    "lease_write_of",
    "violations",
]

MUTATING_CLOUD_METHODS: Final = frozenset(
    {
        "PutLoadBalancer",
        "SetLoadBalancerBackends",
        "DeleteLoadBalancer",
        "CreateRoute",
        "DeleteRoute",
    }
)
"""The simulated cloud's calls that change something."""


@dataclass(frozen=True, slots=True)
class LeaseWrite:
    """A successful write of the Lease: when, by which replica, naming which holder, and
    the resourceVersion it made (the server's order of writes)."""

    at: float
    replica: str
    holder: str
    version: int = 0
    seq: int | None = None


@dataclass(frozen=True, slots=True)
class CloudWrite:
    """A mutating cloud call: when it reached the cloud, from which replica."""

    at: float
    replica: str
    method: str
    target: str = ""
    seq: int | None = None


@dataclass(frozen=True, slots=True)
class Violation:
    """A cloud write made while its replica did not lead."""

    write: CloudWrite
    reason: str

    def __str__(self) -> str:
        w = self.write
        return f"{w.replica} {w.method} {w.target} at {w.at:.3f}: {self.reason}"


@dataclass(frozen=True, slots=True)
class _Window:
    start: LeaseWrite
    expires_at: float
    end: LeaseWrite | None  # the next write naming another holder

    def holds(self, write: CloudWrite) -> bool:
        """Whether `write` falls in this window: after its start, before its expiry, and
        before the write that ended it (by sequence when both have one, else by time)."""
        if write.at >= self.expires_at or _before(write, self.start):
            return False
        return self.end is None or _before(write, self.end)


def _before(write: CloudWrite, lease: LeaseWrite) -> bool:
    """Whether the cloud write left before the Lease write did."""
    if write.seq is not None and lease.seq is not None:
        return write.seq < lease.seq
    return write.at < lease.at


def _windows(
    lease_writes: Iterable[LeaseWrite], lease_duration_s: float
) -> dict[str, list[_Window]]:
    ordered = sorted(lease_writes, key=lambda w: (w.version, w.at))
    windows: dict[str, list[_Window]] = {}
    for i, write in enumerate(ordered):
        if not write.holder or write.holder != write.replica:
            continue
        end = next((later for later in ordered[i + 1 :] if later.holder != write.replica), None)
        expires_at = write.at + lease_duration_s
        windows.setdefault(write.replica, []).append(_Window(write, expires_at, end))
    return windows


def leadership_windows(
    lease_writes: Iterable[LeaseWrite], *, lease_duration_s: float
) -> dict[str, list[tuple[float, float]]]:
    """Per replica, the [start, end) times in which it led (see the module docstring)."""
    return {
        replica: [
            (w.start.at, w.expires_at if w.end is None else min(w.expires_at, w.end.at))
            for w in found
        ]
        for replica, found in _windows(lease_writes, lease_duration_s).items()
    }


def violations(
    lease_writes: Iterable[LeaseWrite],
    writes: Iterable[CloudWrite],
    *,
    lease_duration_s: float,
) -> list[Violation]:
    """The cloud writes made outside their replica's leadership, in time order."""
    windows = _windows(lease_writes, lease_duration_s)
    found: list[Violation] = []
    for write in sorted(writes, key=lambda w: (w.at, w.seq or 0)):
        mine = windows.get(write.replica, [])
        if any(window.holds(write) for window in mine):
            continue
        ends = [
            w.expires_at if w.end is None else min(w.expires_at, w.end.at)
            for w in mine
            if w.start.at <= write.at
        ]
        reason = f"its leadership ended at {max(ends):.3f}" if ends else "it never led before"
        found.append(Violation(write, reason))
    return found


def cloud_writes(calls: Sequence[Call]) -> list[CloudWrite]:
    """The mutating calls of the sim cloud's call log (by arrival time)."""
    return [
        CloudWrite(c.time, c.replica, c.method, c.target)
        for c in calls
        if c.method in MUTATING_CLOUD_METHODS
    ]


def cloud_writes_of_log(
    calls: Iterable[Mapping[str, JSON]], *, clock: str = "wall"
) -> list[CloudWrite]:
    """The mutating calls of a call log as `GET /_sim/calls` answers it, dated by `clock`
    ("wall": the wall clock at arrival, comparable across processes; "time": Trio's;
    "readWall": the wall clock when the cloud began handling the call, which a busy testbed
    makes later than its arrival: only to show how much that would change a verdict)."""
    if clock not in ("wall", "time", "readWall"):
        raise ValueError(f"clock={clock!r}: use 'wall', 'time' or 'readWall'")
    found = []
    for call in calls:
        method, at = call.get("method"), call.get(clock)
        if at is None and clock == "readWall":
            at = call.get("wall")  # read as it arrived (no kernel time was taken)
        if method not in MUTATING_CLOUD_METHODS:
            continue
        if not isinstance(at, int | float):
            raise TypeError(f"call log entry {dict(call)!r}: no numeric {clock!r} time")
        found.append(
            CloudWrite(
                float(at),
                str(call.get("replica") or ""),
                str(method),
                str(call.get("target") or ""),
            )
        )
    return found


def _micro_time(value: str) -> float:
    """A metav1.MicroTime (or Time) as seconds since the epoch."""
    for layout in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            stamp = dt.datetime.strptime(value, layout)
        except ValueError:
            continue
        return stamp.replace(tzinfo=dt.UTC).timestamp()
    raise ValueError(f"{value!r} is not an RFC 3339 UTC time (2006-01-02T15:04:05.000000Z)")


def lease_write_of(
    lease: Mapping[str, JSON], *, identities: Mapping[str, str] | None = None
) -> LeaseWrite | None:
    """The write that produced this state of a Lease (as a watch event carries it): at its
    `renewTime`, its resourceVersion as the order, by the holder it names (only a holder
    writes itself in; a release, holder "", is by someone unknown: replica ""). Holders are
    renamed through `identities` when listed there. None for a Lease with no renewTime."""
    metadata, spec = lease.get("metadata"), lease.get("spec")
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        raise TypeError(f"not a Lease (no metadata or spec): {dict(lease)!r}")
    renewed = spec.get("renewTime")
    if not isinstance(renewed, str) or not renewed:
        return None
    holder = str(spec.get("holderIdentity") or "")
    if identities is not None:
        holder = identities.get(holder, holder)
    version = int(str(metadata.get("resourceVersion") or 0))
    return LeaseWrite(_micro_time(renewed), holder, holder, version)


class LeaseRecorder(httpx.AsyncBaseTransport):
    """A replica's kube transport that records its successful Lease writes (Trio time;
    `sequence`, shared with the replicas' `CloudRecorder`s, orders writes of one instant)."""

    def __init__(
        self, inner: httpx.AsyncBaseTransport, replica: str, sequence: Iterator[int]
    ) -> None:
        self.inner = inner
        self.replica = replica
        self.sequence = sequence
        self.writes: list[LeaseWrite] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        lease = (
            request.method in ("POST", "PUT")
            and "/apis/coordination.k8s.io/v1/" in request.url.path
            and "/leases" in request.url.path
        )
        holder = ""
        if lease:
            body = await request.aread()
            holder = str((json.loads(body).get("spec") or {}).get("holderIdentity") or "")
        at, seq = trio.current_time(), next(self.sequence)
        response: httpx.Response = await self.inner.handle_async_request(request)
        if lease and response.status_code < 300:
            # The write took effect between the request's start and the answer; the start
            # is used (a window is never opened late, nor ended late by another's write).
            answered = json.loads(await response.aread())
            version = int(answered.get("metadata", {}).get("resourceVersion") or 0)
            self.writes.append(LeaseWrite(at, self.replica, holder, version, seq))
        return response


class CloudRecorder(httpx.AsyncBaseTransport):
    """A replica's cloud transport that records each mutating request (PUT, POST, DELETE)
    as it leaves: Trio time and the shared sequence number."""

    def __init__(
        self, inner: httpx.AsyncBaseTransport, replica: str, sequence: Iterator[int]
    ) -> None:
        self.inner = inner
        self.replica = replica
        self.sequence = sequence
        self.writes: list[CloudWrite] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method in ("PUT", "POST", "DELETE"):
            self.writes.append(
                CloudWrite(
                    trio.current_time(),
                    self.replica,
                    request.method,
                    request.url.path,
                    next(self.sequence),
                )
            )
        response: httpx.Response = await self.inner.handle_async_request(request)
        return response
