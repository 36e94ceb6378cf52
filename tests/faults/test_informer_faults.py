"""Fault tests: the Node informer against an emulator that drops, compacts, errors and stalls.

Each run drives the in-process emulator under `MockClock` through a schedule of writes,
virtual-time waits and faults, then clears the faults, lets virtual time pass for recovery
and checks that the informer's cache equals the server's state and that a subscriber saw the
newest state of every object, never going backwards. Hypothesis draws schedules; the
table-driven scenarios below pin one readable case per fault kind.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_ccm.base.mailbox import Mailbox
from trio_ccm.kube.client import open_kube_client
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.kube.informer import Changed, Informer, Update
from trio_ccm.kube.objects import NODES, Node
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.apiserver.faults import FaultRule
from trio_ccm_testbed.apiserver.registry import MERGE_PATCH

NAMES = tuple(f"n{i}" for i in range(6))
RECOVERY_S = 200.0  # virtual seconds after the faults are cleared
RUN_LIMIT_S = 20_000.0  # virtual bound on one whole run
SPIN_LIMIT_S = 30.0  # real bound: a run that spins without letting virtual time pass


# -- schedule steps -------------------------------------------------------------------------
@dataclass(frozen=True)
class Write:
    """Create the Node, or change its labels if it exists."""

    name: str


@dataclass(frozen=True)
class Delete:
    """Delete the Node, or create it if it does not exist."""

    name: str


@dataclass(frozen=True)
class Wait:
    seconds: float


@dataclass(frozen=True)
class DropWatches:
    pass


@dataclass(frozen=True)
class Compact:
    pass


@dataclass(frozen=True)
class ErrorBurst:
    code: int
    count: int
    retry_after_s: int | None


@dataclass(frozen=True)
class Refuse:
    """Refuse connections for a while; open watches are dropped so they notice."""

    seconds: float


@dataclass(frozen=True)
class Slow:
    delay_s: float
    count: int


@dataclass(frozen=True)
class ResetWatches:
    """Every open watch connection fails mid-stream, as a TCP reset does (not an emulator fault)."""


Step = Write | Delete | Wait | DropWatches | Compact | ErrorBurst | Refuse | Slow | ResetWatches


# -- the run --------------------------------------------------------------------------------
@dataclass
class Outcome:
    server_state: dict[str, int]  # name -> resourceVersion
    cached: dict[str, int]
    latest: dict[str, int | None]  # what the subscriber saw last per key (None: deleted)
    seen: dict[str, list[int | None]]  # everything the subscriber saw, in order
    saw_final: dict[str, bool]  # whether the subscriber ever saw the server's final state
    versions: dict[str, set[int]] = field(default_factory=dict)  # every version written
    deleted: set[str] = field(default_factory=set)  # every name deleted at least once
    relists: int = 0
    watches: int = 0
    errors: int = 0
    fired: int = 0  # how often injected error/latency rules fired before being cleared


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def _rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


class Writer:
    """Writes straight into the emulator (no faults apply) and remembers every version."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.rtype = server.store.types["/v1/nodes"]
        self.counter = 0
        self.versions: dict[str, set[int]] = {}
        self.deleted: set[str] = set()
        self.rules: list[FaultRule] = []  # injected error and latency rules

    def exists(self, name: str) -> bool:
        return self.server.store.lookup(self.rtype, "", name) is not None

    def create(self, name: str) -> None:
        self._record(name, _rv(self.server.create(_node(name))))

    def write(self, name: str) -> None:
        if not self.exists(name):
            self.create(name)
            return
        self.counter += 1
        patch = {"metadata": {"labels": {"v": str(self.counter)}}}
        self._record(
            name, _rv(self.server.registry.patch(self.rtype, "", name, MERGE_PATCH, patch))
        )

    def delete(self, name: str) -> None:
        if not self.exists(name):
            self.create(name)
            return
        self.server.registry.delete(self.rtype, "", name)
        self.deleted.add(name)

    def _record(self, name: str, rv: int) -> None:
        self.versions.setdefault(name, set()).add(rv)

    def state(self) -> dict[str, int]:
        storage = self.server.store.storage(self.rtype)
        return {name: stored.rv for (_, name), stored in storage.objects.items()}


class _ResettableBody(httpx.AsyncByteStream):
    """The inner body, cut off with a reset once the transport's generation moves on (a
    plain iterator, so a body closed early leaves no async generator to the GC)."""

    def __init__(self, inner: httpx.AsyncByteStream, transport: ResettingTransport) -> None:
        self.inner = inner
        self.chunks = aiter(inner)
        self.transport = transport
        self.generation = transport.generation

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        reset = httpx.ReadError("[Errno 104] Connection reset by peer (test)")
        if self.transport.generation != self.generation:
            raise reset
        chunk = await anext(self.chunks)
        if self.transport.generation != self.generation:
            raise reset
        return chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class ResettingTransport(httpx.AsyncBaseTransport):
    """The emulator's in-process transport, able to reset every open watch connection."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.inner = server.transport()
        self.generation = 0

    def reset_watches(self) -> None:
        self.generation += 1
        self.server.store.drop_watches()  # ends the streams, which then fail as reset

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response: httpx.Response = await self.inner.handle_async_request(request)
        if request.url.params.get("watch") != "1":
            return response
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_ResettableBody(response.stream, self),
            request=request,
        )


async def _apply(
    step: Step, server: ApiServer, writer: Writer, transport: ResettingTransport
) -> None:
    match step:
        case Write(name):
            writer.write(name)
        case Delete(name):
            writer.delete(name)
        case Wait(seconds):
            if seconds:
                await trio.sleep(seconds)
            else:
                await trio.testing.wait_all_tasks_blocked()
        case DropWatches():
            server.store.drop_watches()
        case Compact():
            server.store.compact()
        case ErrorBurst(code, count, retry_after_s):
            rule = server.faults.inject_error(
                code, resource="nodes", count=count, retry_after_s=retry_after_s
            )
            writer.rules.append(rule)
        case Refuse(seconds):
            server.faults.refuse_connections(seconds)
            server.store.drop_watches()
        case ResetWatches():
            transport.reset_watches()
        case Slow(delay_s, count):
            writer.rules.append(
                server.faults.inject_latency(delay_s, resource="nodes", count=count)
            )
    # Let the informer react between steps, as it would between real writes.
    await trio.lowlevel.checkpoint()


class SpinGuard(trio.abc.Instrument):
    """Cancels a run that livelocks: under an autojumping clock that is a busy loop."""

    def __init__(self) -> None:
        self.deadline = time.monotonic() + SPIN_LIMIT_S
        self.scope = trio.CancelScope()
        self.tripped = False
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1
        if self.steps % 4096 == 0 and not self.tripped and time.monotonic() > self.deadline:
            self.tripped = True
            self.scope.cancel()


async def _run_async(
    steps: Sequence[Step],
    initial: Sequence[str],
    seed: int,
    server_options: dict[str, Any],
    guard: SpinGuard,
) -> Outcome:
    server = ApiServer(seed=seed, **server_options)
    writer = Writer(server)
    for name in initial:
        writer.create(name)
    config = ConnectionConfig(
        server="http://emulator", credentials=StaticCredentials(), source="fault tests"
    )
    latest: dict[str, int | None] = {}
    seen: dict[str, list[int | None]] = {}
    with guard.scope, trio.fail_after(RUN_LIMIT_S):
        transport = ResettingTransport(server)
        async with open_kube_client(config, transport=transport, qps=0) as client:
            informer = Informer(client, NODES, Node, rng=random.Random(seed))

            async def consume(mailbox: Mailbox[str, Update[Node]]) -> None:
                async for key, update in mailbox:
                    rv = (
                        int(update.obj.metadata.resource_version)
                        if isinstance(update, Changed)
                        else None
                    )
                    latest[key] = rv
                    seen.setdefault(key, []).append(rv)

            async with informer.subscription() as mailbox, trio.open_nursery() as nursery:
                nursery.start_soon(consume, mailbox)
                nursery.start_soon(informer.serve)
                for step in steps:
                    await _apply(step, server, writer, transport)
                server.faults.clear()
                await trio.sleep(RECOVERY_S)
                await trio.testing.wait_all_tasks_blocked()
                cached = {
                    node.metadata.name: int(node.metadata.resource_version)
                    for node in informer.items()
                }
                nursery.cancel_scope.cancel()
    assert not guard.tripped, f"the run spun for {SPIN_LIMIT_S} s without virtual time passing"
    state = writer.state()
    return Outcome(
        server_state=state,
        cached=cached,
        latest=latest,
        seen=seen,
        saw_final={key: state.get(key) in versions for key, versions in seen.items()},
        versions=writer.versions,
        deleted=writer.deleted,
        relists=informer.relists,
        watches=informer.watches,
        errors=informer.errors,
        fired=sum(rule.fired for rule in writer.rules),
    )


def run(
    steps: Sequence[Step],
    *,
    initial: Sequence[str] = ("n0", "n1"),
    seed: int = 1,
    **server_options: Any,
) -> Outcome:
    """One schedule in a fresh Trio run under an autojumping MockClock."""
    guard = SpinGuard()
    return trio.run(
        _run_async,
        steps,
        initial,
        seed,
        server_options,
        guard,
        clock=trio.testing.MockClock(autojump_threshold=0),
        instruments=[guard],
    )


def check(outcome: Outcome) -> None:
    """The informer caught up, and the subscriber saw every newest state in order."""
    # (1) The cache is the server's state.
    assert outcome.cached == outcome.server_state
    # (2) The subscriber's latest view is the server's state: the newest version of every
    # existing object, and None for every deleted object it had seen.
    for key, rv in outcome.server_state.items():
        assert outcome.latest.get(key) == rv, f"{key}: saw {outcome.latest.get(key)}, server {rv}"
        assert outcome.saw_final[key]
    for key, last in outcome.latest.items():
        if key not in outcome.server_state:
            assert last is None, f"{key} is gone from the server, subscriber still has {last}"
    # (3) Per key, only versions the server wrote, never going backwards and none twice (only
    # real changes are delivered); None only for keys that really were deleted.
    for key, history in outcome.seen.items():
        versions = [rv for rv in history if rv is not None]
        assert versions == sorted(versions), f"{key} delivered out of order: {history}"
        assert len(set(versions)) == len(versions), f"{key} delivered twice: {history}"
        assert set(versions) <= outcome.versions.get(key, set()), f"{key}: unknown versions"
        if None in history:
            assert key in outcome.deleted, f"{key} reported deleted but never was: {history}"


# -- hypothesis-driven schedules ------------------------------------------------------------
names = st.sampled_from(NAMES)
writes = st.one_of(st.builds(Write, names), st.builds(Write, names), st.builds(Delete, names))
faults = st.one_of(
    st.builds(DropWatches),
    st.builds(Compact),
    st.builds(
        ErrorBurst,
        st.sampled_from([500, 429]),
        st.integers(1, 12),
        st.one_of(st.none(), st.integers(1, 10)),
    ),
    st.builds(Refuse, st.sampled_from([5.0, 30.0])),
    st.builds(Slow, st.sampled_from([0.5, 5.0, 40.0]), st.integers(1, 4)),
)
waits = st.builds(Wait, st.sampled_from([0.0, 0.0, 0.5, 3.0, 30.0, 70.0, 160.0]))
# A round: some writes, some faults, a wait, more writes (racing the recovery), a wait.
rounds = st.tuples(
    st.lists(writes, min_size=1, max_size=4),
    st.lists(faults, max_size=2),
    waits,
    st.lists(writes, max_size=3),
    waits,
)
schedules = st.lists(rounds, min_size=1, max_size=8).map(
    lambda rs: [step for r in rs for step in (*r[0], *r[1], r[2], *r[3], r[4])]
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    schedule=schedules,
    initial=st.lists(names, unique=True, max_size=4),
    seed=st.integers(0, 2**16),
    history_size=st.sampled_from([10_000, 8, 3]),
)
def test_random_schedules_of_writes_and_faults(
    schedule: list[Step], initial: list[str], seed: int, history_size: int
) -> None:
    """Any schedule of writes and faults ends with the cache and subscriber in step."""
    check(run(schedule, initial=initial, seed=seed, history_size=history_size))


# -- one readable scenario per fault kind ---------------------------------------------------
def _writes(*names: str) -> list[Step]:
    return [Write(name) for name in names]


def _dropped_every_few_events() -> list[Step]:
    schedule: list[Step] = [Wait(1.0)]
    for i in range(24):
        schedule += [Write(NAMES[i % 4]), Wait(0.0)]
        if i % 3 == 2:
            schedule.append(DropWatches())
    return schedule


SCENARIOS = [
    pytest.param(_dropped_every_few_events(), {}, id="watch-dropped-every-3-events"),
    pytest.param(
        [Wait(1.0), *_writes("n0", "n2"), Wait(0.0), Compact(), *_writes("n1"), DropWatches()],
        {},
        id="compacted-mid-watch",
    ),
    pytest.param(
        [Wait(1.0), Refuse(5.0), *_writes("n2", "n0"), Delete("n1"), Compact(), Wait(10.0)],
        {},
        id="compacted-while-disconnected",
    ),
    pytest.param(
        [Wait(1.0), Refuse(2.0), *_writes("n0", "n1", "n2", "n3", "n0", "n1"), Wait(5.0)],
        {"history_size": 3},
        id="history-overflows-while-dropped",
    ),
    pytest.param(
        [ErrorBurst(500, 14, 2), *_writes("n0", "n2"), Wait(20.0), DropWatches(), Write("n1")],
        {},
        id="500-burst-with-retry-after",
    ),
    pytest.param(
        [Wait(1.0), ErrorBurst(429, 14, 5), DropWatches(), *_writes("n0", "n3"), Delete("n1")],
        {},
        id="429-burst-with-retry-after",
    ),
    pytest.param(
        [Wait(1.0), Refuse(30.0), *_writes("n2", "n0"), Delete("n1"), Wait(10.0), Write("n3")],
        {},
        id="30s-refused-connections",
    ),
    pytest.param(
        [Slow(40.0, 3), Wait(10.0), *_writes("n0", "n2"), DropWatches(), Delete("n1")],
        {},
        id="slow-responses",
    ),
]


@pytest.mark.parametrize(("schedule", "server_options"), SCENARIOS)
def test_fault_scenario(schedule: list[Step], server_options: dict[str, Any]) -> None:
    """A fixed schedule for one fault kind ends with the cache and subscriber in step."""
    check(run(schedule, **server_options))


def test_dropped_watches_resume_without_relisting() -> None:
    """Watches dropped every few events are re-opened from the last version, not relisted."""
    outcome = run(_dropped_every_few_events())
    check(outcome)
    assert outcome.relists == 1
    assert outcome.watches >= 9  # eight drops


def test_compaction_and_history_overflow_force_relists() -> None:
    """A 410 after compaction or history overflow makes the informer relist."""
    # A short outage keeps the informer from re-watching before the history is gone.
    compacted = run([Wait(1.0), Refuse(2.0), Write("n0"), Compact(), Wait(5.0)])
    overflowed = run(
        [Wait(1.0), Refuse(2.0), *_writes("n0", "n1", "n2", "n3"), Wait(5.0)], history_size=2
    )
    for outcome in (compacted, overflowed):
        check(outcome)
        assert outcome.relists == 2


@pytest.mark.parametrize("code", [500, 429])
def test_error_bursts_are_counted_and_ridden_out(code: int) -> None:
    """A burst longer than the client's retries surfaces as informer errors, then recovers."""
    outcome = run([Wait(1.0), ErrorBurst(code, 20, 3), DropWatches(), Write("n0"), Wait(120.0)])
    check(outcome)
    assert outcome.fired == 20
    # The client makes six attempts per request: 6 + 6 + 6 failed, the fourth request got
    # through after two more errors.
    assert outcome.errors == 3


def test_watch_connection_reset_mid_stream_is_survived() -> None:
    """A watch whose connection is reset mid-stream is re-opened, like a dropped one."""
    outcome = run([Wait(1.0), Write("n0"), ResetWatches(), Write("n1"), Delete("n0"), Wait(5.0)])
    check(outcome)
