"""Leader election against the emulator: timing, takeover, handover, skew, and safety.

Every replica reaches the emulator through its own `Link` (a transport the test can cut)
and runs its body under a `Referee`, which checks at each virtual instant that no two
bodies run at once, that a leader's body stops within the renew deadline of its last
write, and that a new leader enters only after the previous holder's last write has aged a
whole lease duration on the new leader's own clock.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import random
import re
import socket
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from trio_ccm.errors import CcmError, ConfigError
from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.events import EventRecorder
from trio_ccm.kube.leader import LeaderElector, LeaseLostError, default_identity
from trio_ccm.kube.metrics import LeaderMetrics
from trio_ccm.testing.harness import emulator_connection
from trio_ccm_testbed.apiserver import ApiServer

EPOCH = dt.datetime(2026, 11, 21, 10, 0, 0, tzinfo=dt.UTC)
LEASE = ("coordination.k8s.io/v1", "Lease", "cloud-controller-manager", "kube-system")
LEASE_DURATION_S = 15.0
RENEW_DEADLINE_S = 10.0
HAIR = 1e-6


def wall_clock() -> dt.datetime:
    """Wall-clock time tied to Trio's: EPOCH at t=0."""
    return EPOCH + dt.timedelta(seconds=trio.current_time())


def stamp(t: float) -> str:
    return (EPOCH + dt.timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_spec(server: ApiServer) -> dict[str, Any]:
    spec: dict[str, Any] = server.get(*LEASE)["spec"]
    return spec


def sample(registry: CollectorRegistry, metric: str) -> float | None:
    return registry.get_sample_value(metric, {"name": "cloud-controller-manager"})


class FixedJitter(random.Random):
    """Every draw is `value`: with 0, acquire attempts come exactly one retry period apart."""

    def __init__(self, value: float = 0.0) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


@dataclass
class SkewedClock:
    """A clock running `rate` times as fast as Trio's."""

    rate: float

    def current_time(self) -> float:
        return trio.current_time() * self.rate

    def trio_time(self, local: float) -> float:
        return local / self.rate


@dataclass
class JumpingClock:
    """Trio's clock plus an offset the test can bump (a suspended VM waking up)."""

    offset: float = 0.0

    def current_time(self) -> float:
        return trio.current_time() + self.offset

    def trio_time(self, local: float) -> float:
        return local - self.offset


class Referee:
    """Who runs a leading body, and who wrote the Lease, at each virtual instant."""

    def __init__(self) -> None:
        self.rates: dict[str, float] = {}
        self.inside: set[str] = set()
        self.entries: dict[str, list[float]] = defaultdict(list)
        self.exits: dict[str, list[float]] = defaultdict(list)
        self.writes: list[tuple[float, str, str]] = []  # (time, writer, holder written)
        self.overlaps: list[tuple[float, str, str]] = []  # (time, inside already, entering)
        self.violations: list[str] = []

    def wrote(self, writer: str, holder: str) -> None:
        self.writes.append((trio.current_time(), writer, holder))

    def write_times(self, writer: str) -> list[float]:
        return [t for t, who, _ in self.writes if who == writer]

    def body(self, name: str) -> Callable[[], Awaitable[None]]:
        async def body() -> None:
            self._enter(name)
            try:
                await trio.sleep_forever()
            finally:
                self._exit(name)

        return body

    def _local(self, name: str, since: float) -> float:
        """Seconds from `since` to now on `name`'s clock."""
        return self.rates.get(name, 1.0) * (trio.current_time() - since)

    def _last_own_write(self, name: str) -> int:
        return max(
            i for i, (_, who, holder) in enumerate(self.writes) if (who, holder) == (name, name)
        )

    def _enter(self, name: str) -> None:
        now = trio.current_time()
        self.overlaps += [(now, other, name) for other in sorted(self.inside)]
        self.inside.add(name)
        self.entries[name].append(now)
        index = self._last_own_write(name)  # the write that made `name` leader
        if index > 0:
            when, writer, holder = self.writes[index - 1]
            waited = self._local(name, when)
            if holder not in ("", name) and waited < LEASE_DURATION_S - HAIR:
                self.violations.append(
                    f"{name} entered at {now} only {waited} s after {writer}'s write for {holder}"
                )

    def _exit(self, name: str) -> None:
        now = trio.current_time()
        self.inside.discard(name)
        self.exits[name].append(now)
        when = self.writes[self._last_own_write(name)][0]
        if self._local(name, when) > RENEW_DEADLINE_S + HAIR:
            self.violations.append(
                f"{name} left at {now}, more than 10 s after its write at {when}"
            )

    def assert_safe(self) -> None:
        assert self.overlaps == []
        assert self.violations == []


class Link(httpx.AsyncBaseTransport):
    """One replica's connection to the emulator; with `cut` set the server is unreachable."""

    def __init__(self, server: ApiServer, name: str, referee: Referee) -> None:
        self.inner = server.transport()
        self.name = name
        self.referee = referee
        self.cut = False
        self.requests: list[tuple[float, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        method = "WATCH" if request.url.params.get("watch") else request.method
        self.requests.append((trio.current_time(), method))
        if self.cut:
            raise httpx.ConnectError("link cut by the test", request=request)
        response: httpx.Response = await self.inner.handle_async_request(request)
        if request.method in ("POST", "PUT") and response.status_code < 300:
            holder = json.loads(response.content)["spec"].get("holderIdentity") or ""
            self.referee.wrote(self.name, holder)
        return response


def client_for(server: ApiServer, link: Link) -> KubeClient:
    return KubeClient(emulator_connection(), transport=link, qps=0, component="leader-election")


@dataclass
class Replica:
    name: str
    elector: LeaderElector
    link: Link
    scope: trio.CancelScope


class Cluster:
    """Replicas campaigning for the one Lease, each in its own cancel scope."""

    def __init__(self, server: ApiServer, nursery: trio.Nursery) -> None:
        self.server = server
        self.nursery = nursery
        self.referee = Referee()

    def start(
        self,
        name: str,
        *,
        at: float = 0.0,
        rate: float = 1.0,
        rng: random.Random | None = None,
        **options: Any,
    ) -> Replica:
        link = Link(self.server, name, self.referee)
        self.referee.rates[name] = rate
        clock = SkewedClock(rate) if rate != 1.0 else options.pop("clock", None)
        elector = LeaderElector(
            client_for(self.server, link),
            identity=name,
            now=wall_clock,
            clock=clock,
            rng=rng or FixedJitter(),
            **options,
        )
        replica = Replica(name, elector, link, trio.CancelScope())
        self.nursery.start_soon(self._run, replica, at)
        return replica

    async def _run(self, replica: Replica, at: float) -> None:
        try:
            with replica.scope:
                await trio.sleep_until(at)
                await replica.elector.lead(self.referee.body(replica.name))
        finally:
            with trio.CancelScope(shield=True):
                await replica.elector.client.aclose()


@asynccontextmanager
async def open_cluster(server: ApiServer) -> AsyncIterator[Cluster]:
    async with trio.open_nursery() as nursery:
        yield Cluster(server, nursery)
        nursery.cancel_scope.cancel()


# -- one replica -----------------------------------------------------------------------------
async def test_acquires_at_once_and_renews_every_retry_period(
    server: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    """On an empty cluster the Lease is created at t=0 and renewed every 2 s (acquireTime kept)."""
    registry = CollectorRegistry()
    with trio.fail_after(60):
        async with open_cluster(server) as cluster:
            a = cluster.start("a", metrics=LeaderMetrics(registry))
            await a.elector.leading.wait_value(True)
            assert trio.current_time() == 0
            await trio.sleep_until(7)
            assert lease_spec(server) == {
                "holderIdentity": "a",
                "leaseDurationSeconds": 15,
                "acquireTime": stamp(0),
                "renewTime": stamp(6),
                "leaseTransitions": 0,
            }
            assert cluster.referee.write_times("a") == [0, 2, 4, 6]
            assert a.elector.last_renewed == 6
            assert a.elector.holder == "a"
            assert a.elector.healthy()
            assert sample(registry, "leader_election_master_status") == 1
            assert sample(registry, "leader_election_slowpath_total") == 0
    # Leaving the nursery cancelled `lead`: the Lease was released for the next replica.
    assert lease_spec(server) == {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": stamp(7),
        "renewTime": stamp(7),
        "leaseTransitions": 0,
    }
    assert sample(registry, "leader_election_master_status") == 0
    assert cluster.referee.entries == {"a": [0]}
    assert cluster.referee.exits == {"a": [7]}
    cluster.referee.assert_safe()


async def test_body_returning_steps_down(
    server: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    """When the body returns, the Lease is released and `lead` returns."""
    link = Link(server, "a", Referee())
    elector = LeaderElector(
        client_for(server, link), identity="a", now=wall_clock, rng=FixedJitter()
    )

    async def body() -> None:
        await trio.sleep(5)

    with trio.fail_after(60):
        await elector.lead(body)
    assert trio.current_time() == 5
    assert not elector.leading.value
    assert lease_spec(server)["holderIdentity"] == ""
    await elector.client.aclose()


async def test_conflict_on_renewal_takes_the_slow_path(
    server: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A renewal that meets 409 re-reads the Lease, renews it and counts one slow path."""
    registry = CollectorRegistry()
    with trio.fail_after(60):
        async with open_cluster(server) as cluster:
            cluster.start("a", metrics=LeaderMetrics(registry))
            await trio.sleep_until(3)
            server.faults.inject_conflict(verb="update", resource="leases", count=1)
            await trio.sleep_until(5)
            assert lease_spec(server)["renewTime"] == stamp(4)
            assert sample(registry, "leader_election_slowpath_total") == 1
            assert sample(registry, "leader_election_master_status") == 1
    assert cluster.referee.write_times("a")[:4] == [0, 2, 4, 5]  # the last: release


async def test_renewals_failing_with_503(
    server: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A leader whose writes fail with 503 stops 10 s after its last renewal (t=20) and,
    the API back, re-takes its own unexpired Lease at its next attempt (t=22)."""
    registry = CollectorRegistry()
    with trio.fail_after(60):
        async with open_cluster(server) as cluster:
            a = cluster.start("a", metrics=LeaderMetrics(registry))
            cluster.start("b", at=1)
            await trio.sleep_until(10.5)
            rule = server.faults.inject_error(503, verb="update", resource="leases")
            await trio.sleep_until(20.5)
            assert not a.elector.leading.value
            assert sample(registry, "leader_election_master_status") == 0
            await trio.sleep_until(21)
            server.faults.remove(rule.id)
            await a.elector.leading.wait_value(True)
            assert trio.current_time() == 22
            spec = lease_spec(server)
            assert (spec["holderIdentity"], spec["acquireTime"], spec["leaseTransitions"]) == (
                "a",
                stamp(0),
                0,
            )
            # Slow paths: the renewals at 12, 14, 16, 18 and the attempt at 20.
            assert sample(registry, "leader_election_slowpath_total") == 5
            await trio.sleep_until(40)
    referee = cluster.referee
    assert referee.entries == {"a": [0, 22]}
    assert referee.exits["a"][0] == 20
    referee.assert_safe()


async def test_a_renewal_the_server_does_not_answer_in_time_is_logged(
    server: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A renewal the API server does not answer within the attempt timeout (5 s) is logged
    as timed out, and the Lease is lost at the renew deadline (t=12)."""
    with trio.fail_after(60), capture_logs() as logs:
        async with open_cluster(server) as cluster:
            a = cluster.start("a")
            await trio.sleep_until(3)
            server.faults.inject_latency(30.0, verb="update", resource="leases")
            server.faults.inject_latency(30.0, verb="get", resource="leases")
            await trio.sleep_until(12.5)
            assert not a.elector.leading.value
    timed_out = [line for line in logs if line["event"] == "lease.renew-timed-out"]
    # The attempt at t=4 timed out at t=9; the one at t=10 was cut by the deadline at t=12.
    assert len(timed_out) == 1
    assert timed_out[0]["timeout_s"] == 5.0
    lost = [line for line in logs if line["event"] == "lease.lost"]
    assert lost[0]["renew_deadline_s"] == 10.0


async def test_exit_on_lost_lease(
    server: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    """With exit_on_lost_lease, a leader cut off after renewing at t=2 cancels its body and
    raises LeaseLostError at its renew deadline, t=12."""
    referee = Referee()
    link = Link(server, "a", referee)
    elector = LeaderElector(
        client_for(server, link), identity="a", now=wall_clock, rng=FixedJitter()
    )

    async def cut_at_3() -> None:
        await trio.sleep_until(3)
        link.cut = True

    with trio.fail_after(60), capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cut_at_3)
            with pytest.raises(LeaseLostError, match="kube-system/cloud-controller-manager"):
                await elector.lead(referee.body("a"), exit_on_lost_lease=True)
            assert trio.current_time() == 12
    assert issubclass(LeaseLostError, CcmError)
    assert referee.entries == {"a": [0]}
    assert referee.exits == {"a": [12]}
    lost = [entry for entry in logs if entry["event"] == "lease.lost"]
    assert [entry["log_level"] for entry in lost] == ["warning"]
    assert lease_spec(server)["holderIdentity"] == "a"  # a lost Lease is not released
    await elector.client.aclose()


async def test_healthy_reports_a_stalled_leader(
    server: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A leader unrenewed for longer than lease duration + 20 s fails healthy() until it renews."""
    clock = JumpingClock()
    with trio.fail_after(60):
        async with open_cluster(server) as cluster:
            a = cluster.start("a", clock=clock)
            await trio.sleep_until(3)
            assert a.elector.healthy()
            clock.offset = 40.0  # local time jumps 40 s; the renewal due at t=4 has not run
            assert not a.elector.healthy()
            assert a.elector.healthy(slack_s=30)
            await trio.sleep_until(4.5)
            assert a.elector.last_renewed == 44
            assert a.elector.healthy()


async def test_acquire_attempts_are_jittered(
    server: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A standby's attempts are spaced retry period * [1, 1 + 1.2): 2 s to 4.4 s."""
    with trio.fail_after(120):
        async with open_cluster(server) as cluster:
            cluster.start("a")
            b = cluster.start("b", at=1, rng=random.Random(3))
            await trio.sleep_until(100)
    times = [t for t, method in b.link.requests if method == "GET"]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert len(gaps) > 20
    assert all(2.0 <= gap < 4.4 for gap in gaps)
    assert max(gaps) - min(gaps) > 1.0


# -- several replicas ------------------------------------------------------------------------
STANDBY_STARTS = {"b": 1.0, "c": 1.5}


@pytest.mark.parametrize(
    ("failure", "standbys", "successors", "takes_over_at", "old_body_stops_at"),
    [
        # b watches the Lease: it saw a's renewal of t=10 at once, so expiry is t=25, and it
        # attempts exactly then. a stops at its renew deadline, 10 + 10.
        pytest.param("cut", ["b"], {"b"}, 25.0, 20.0, id="cut-off-two-replicas"),
        # b and c both attempt at t=25; the resourceVersion precondition elects one.
        pytest.param("cut", ["b", "c"], {"b", "c"}, 25.0, 20.0, id="cut-off-three-replicas"),
        pytest.param("killed", ["b", "c"], {"b", "c"}, 25.0, 11.25, id="killed-three-replicas"),
        # A released Lease is free: the watch shows the release and it is taken at once.
        pytest.param("released", ["b"], {"b"}, 11.25, 11.25, id="released-two-replicas"),
        pytest.param(
            "released", ["b", "c"], {"b", "c"}, 11.25, 11.25, id="released-three-replicas"
        ),
    ],
)
async def test_takeover(
    server: ApiServer,
    autojump_clock: trio.testing.MockClock,
    failure: str,
    standbys: list[str],
    successors: set[str],
    takes_over_at: float,
    old_body_stops_at: float,
) -> None:
    """When the leader is cut off or killed, a standby takes over the instant the lease has
    expired by its own observation (it watches the Lease, so it saw the last renewal as it
    happened); after a release, at once; the old leader's body has stopped by then."""
    with trio.fail_after(120):
        async with open_cluster(server) as cluster:
            a = cluster.start("a", release_on_cancel=failure == "released")
            replicas = {name: cluster.start(name, at=STANDBY_STARTS[name]) for name in standbys}
            await trio.sleep_until(11.25)
            if failure == "cut":
                a.link.cut = True
            else:
                a.scope.cancel()
            async with trio.open_nursery() as race:
                for replica in replicas.values():

                    async def first(replica: Replica = replica) -> None:
                        await replica.elector.leading.wait_value(True)
                        race.cancel_scope.cancel()

                    race.start_soon(first)
            assert trio.current_time() == takes_over_at
            successor = next(r.name for r in replicas.values() if r.elector.leading.value)
            assert successor in successors
            await trio.sleep(30)
            spec = lease_spec(server)
            assert (spec["holderIdentity"], spec["acquireTime"], spec["leaseTransitions"]) == (
                successor,
                stamp(takes_over_at),
                1,
            )
            assert [r.name for r in replicas.values() if r.elector.leading.value] == [successor]
            assert all(r.elector.holder == successor for r in replicas.values())
    referee = cluster.referee
    assert {name: times[0] for name, times in referee.entries.items()} == {
        "a": 0.0,
        successor: takes_over_at,
    }
    assert referee.exits["a"] == [old_body_stops_at]
    if failure == "released":
        assert [holder for _, writer, holder in referee.writes if writer == "a"][-1] == ""
    referee.assert_safe()


@pytest.mark.parametrize("names", [["a", "b"], ["a", "b", "c"]], ids=["two", "three"])
async def test_simultaneous_candidates_elect_one(
    server: ApiServer, autojump_clock: trio.testing.MockClock, names: list[str]
) -> None:
    """Candidates starting together race to create the Lease; exactly one wins and keeps it."""
    with trio.fail_after(120):
        async with open_cluster(server) as cluster:
            replicas = [cluster.start(name) for name in names]
            await trio.sleep_until(60)
            leaders = [r.name for r in replicas if r.elector.leading.value]
            assert len(leaders) == 1
            assert lease_spec(server)["leaseTransitions"] == 0
    assert list(cluster.referee.entries) == leaders
    assert cluster.referee.entries[leaders[0]] == [0]
    cluster.referee.assert_safe()


async def test_standbys_racing_for_an_expired_lease(
    server: ApiServer, autojump_clock: trio.testing.MockClock
) -> None:
    """Two standbys both try to take an expired Lease at t=25 (a's last renewal, t=10, plus
    the lease duration); the resourceVersion precondition lets exactly one of them win."""
    with trio.fail_after(120):
        async with open_cluster(server) as cluster:
            a = cluster.start("a", release_on_cancel=False)
            standbys = [cluster.start(name, at=1) for name in ("b", "c")]
            await trio.sleep_until(11.25)
            a.scope.cancel()
            await trio.sleep_until(60)
            leaders = [r.name for r in standbys if r.elector.leading.value]
            assert len(leaders) == 1
            for replica in standbys:  # both sent their takeover at t=25
                assert (25.0, "PUT") in replica.link.requests
    assert cluster.referee.entries[leaders[0]] == [25.0]
    assert set(cluster.referee.entries) == {"a", *leaders}
    cluster.referee.assert_safe()


@pytest.mark.parametrize(
    ("leader_rate", "standby_rate", "standby_enters", "leader_stops", "safe"),
    [
        # b's clock at 1.4x: it saw a's write of t=10 at once (watch); "15 s" later on its
        # clock is t = 10 + 15 / 1.4 = 20.71, after a stopped at 20.
        pytest.param(1.0, 1.4, 10 + 15 / 1.4, 20.0, True, id="standby-1.4x-fast"),
        # a's clock at 0.7x: last write at local 6 (t=8.57), stops at local 16 (t=22.86);
        # b saw that write at once and takes over at 8.57 + 15 = 23.57.
        pytest.param(0.7, 1.0, 6 / 0.7 + 15, 16 / 0.7, True, id="leader-0.7x-slow"),
        # Beyond what 15/10 tolerates: b at 2x waits out "15 s" in 7.5 and enters at 17.5,
        # while a, by its own clock, may still act until 20.
        pytest.param(1.0, 2.0, 17.5, 20.0, False, id="standby-2x-fast-beyond-tolerance"),
    ],
)
async def test_clock_rate_skew(
    server: ApiServer,
    autojump_clock: trio.testing.MockClock,
    leader_rate: float,
    standby_rate: float,
    standby_enters: float,
    leader_stops: float,
    safe: bool,
) -> None:
    """Expiry is judged on each replica's own clock: a rate skew within lease duration /
    renew deadline (1.5) keeps one leader at a time; a larger one lets two overlap."""
    with trio.fail_after(120):
        async with open_cluster(server) as cluster:
            a = cluster.start("a", rate=leader_rate)
            b = cluster.start("b", at=1.5, rate=standby_rate)
            await trio.sleep_until(11.25)
            a.link.cut = True
            await b.elector.leading.wait_value(True)
            assert trio.current_time() == pytest.approx(standby_enters)
            await trio.sleep(30)
    referee = cluster.referee
    assert referee.entries["b"] == [pytest.approx(standby_enters)]
    assert referee.exits["a"] == [pytest.approx(leader_stops)]
    assert referee.violations == []
    if safe:
        assert referee.overlaps == []
    else:
        overlaps = [
            (round(when, 6), inside, entering) for when, inside, entering in referee.overlaps
        ]
        assert overlaps == [(standby_enters, "a", "b")]


@pytest.mark.parametrize("seed", range(6))
async def test_random_outages_never_give_two_leaders(
    server: ApiServer, autojump_clock: trio.testing.MockClock, seed: int
) -> None:
    """Over fifteen virtual minutes of random cuts, kills, restarts, API errors and latency
    among three replicas with jittered retries, no two bodies ever run at once."""
    dice = random.Random(seed)
    names = (f"r{i}" for i in itertools.count())
    with trio.fail_after(1800):
        async with open_cluster(server) as cluster:
            live: dict[str, Replica] = {}

            def spawn() -> None:
                name = next(names)
                live[name] = cluster.start(
                    name,
                    at=trio.current_time(),
                    rng=random.Random(dice.random()),
                    release_on_cancel=dice.random() < 0.5,
                )

            for _ in range(3):
                spawn()
            while trio.current_time() < 900:
                await trio.sleep(dice.uniform(0.5, 8))
                victim = live[dice.choice(sorted(live))]
                action = dice.choice(["cut", "heal", "heal", "kill", "errors", "latency"])
                if action == "cut":
                    victim.link.cut = True
                elif action == "heal":
                    for replica in live.values():
                        replica.link.cut = False
                elif action == "kill":
                    victim.scope.cancel()
                    del live[victim.name]
                    spawn()
                elif action == "errors":
                    server.faults.inject_error(
                        dice.choice([500, 503]), resource="leases", count=dice.randint(1, 6)
                    )
                else:
                    server.faults.inject_latency(
                        dice.uniform(0.5, 7), resource="leases", count=dice.randint(1, 3)
                    )
    referee = cluster.referee
    referee.assert_safe()
    assert sum(len(times) for times in referee.entries.values()) >= 6  # it moved around


# -- Events, settings ------------------------------------------------------------------------
async def test_leader_election_events(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """Taking and handing over the Lease records upstream's LeaderElection Events on it."""
    registries = {name: CollectorRegistry() for name in ("a", "b")}
    with trio.fail_after(60):
        async with open_cluster(server) as cluster:
            recorders = {}
            for name in ("a", "b"):
                recorders[name] = EventRecorder(kube, component="cloud-controller-manager")
                await cluster.nursery.start(recorders[name].serve)
            a = cluster.start("a", recorder=recorders["a"], metrics=LeaderMetrics(registries["a"]))
            b = cluster.start(
                "b", at=1, recorder=recorders["b"], metrics=LeaderMetrics(registries["b"])
            )
            await trio.sleep_until(5.5)
            a.scope.cancel()
            await b.elector.leading.wait_value(True)
            assert trio.current_time() == 5.5  # the release is seen through the watch
            await trio.testing.wait_all_tasks_blocked()
            storage = server.store.storage(server.store.types["/v1/events"])
            events = sorted(
                (s.obj for s in storage.objects.values()), key=lambda e: e["metadata"]["name"]
            )
            assert {
                (e["reason"], e["message"], e["type"], e["metadata"]["namespace"]) for e in events
            } == {
                ("LeaderElection", "a became leader", "Normal", "kube-system"),
                ("LeaderElection", "a stopped leading", "Normal", "kube-system"),
                ("LeaderElection", "b became leader", "Normal", "kube-system"),
            }
            for event in events:
                involved = event["involvedObject"]
                assert (involved["kind"], involved["apiVersion"], involved["name"]) == (
                    "Lease",
                    "coordination.k8s.io/v1",
                    "cloud-controller-manager",
                )
            assert sample(registries["a"], "leader_election_master_status") == 0
            assert sample(registries["b"], "leader_election_master_status") == 1


@pytest.mark.parametrize(
    ("lease_s", "renew_s", "retry_s", "problem"),
    [
        pytest.param(15, 15, 2, "leaseDuration must be greater than renewDeadline", id="lease"),
        pytest.param(
            15, 10, 9, "renewDeadline must be greater than retryPeriod*JitterFactor", id="renew"
        ),
        pytest.param(0, -1, -2, "leaseDuration must be greater than zero", id="lease-zero"),
        pytest.param(5, 0, -1, "renewDeadline must be greater than zero", id="renew-zero"),
        pytest.param(15, 10, 0, "retryPeriod must be greater than zero", id="retry-zero"),
    ],
)
def test_invalid_timing(
    server: ApiServer, lease_s: float, renew_s: float, retry_s: float, problem: str
) -> None:
    """Durations are checked as client-go does, with its messages and our flag names."""
    with pytest.raises(ConfigError) as caught:
        LeaderElector(
            KubeClient(emulator_connection()),
            identity="a",
            lease_duration_s=lease_s,
            renew_deadline_s=renew_s,
            retry_period_s=retry_s,
        )
    message = str(caught.value)
    assert problem in message
    assert f"--leader-elect-lease-duration={lease_s}s" in message
    assert f"--leader-elect-renew-deadline={renew_s}s" in message
    assert f"--leader-elect-retry-period={retry_s}s" in message


def test_empty_identity_is_refused(server: ApiServer) -> None:
    """An elector without an identity is a configuration error."""
    with pytest.raises(ConfigError, match="identity is empty"):
        LeaderElector(KubeClient(emulator_connection()), identity="")


def test_default_identity() -> None:
    """The default identity is `<hostname>_<uuid4>`, as the Go CCM's."""
    identity = default_identity()
    host, _, rest = identity.rpartition("_")
    assert host == socket.gethostname()
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", rest
    )
    assert default_identity() != identity
