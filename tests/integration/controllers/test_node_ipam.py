"""node-ipam-controller against the emulator: pod CIDRs from --cluster-cidr, one per family,
never twice, released when Nodes go."""

from __future__ import annotations

import collections
import ipaddress
import itertools
from typing import Any

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from tests.helpers.world import World, moments, open_world
from trio_ccm.testing import wait_for
from trio_ccm.testing.harness import Write

IPAM = "node-ipam-controller"


def ipam(cluster_cidr: str = "10.244.0.0/16", *flags: str) -> tuple[str, ...]:
    return (
        "--controllers=nodeipam",
        "--allocate-node-cidrs",
        f"--cluster-cidr={cluster_cidr}",
        *flags,
    )


def register(world: World, *names: str) -> None:
    for name in names:
        world.register(name, taints=[])


def pod_cidrs(world: World, name: str) -> list[str]:
    spec: dict[str, Any] = world.node(name)["spec"]
    cidrs: list[str] = spec.get("podCIDRs", [])
    if cidrs:
        assert spec["podCIDR"] == cidrs[0]
    return cidrs


async def delete(world: World, name: str) -> None:
    response = await world.http.delete(f"/api/v1/nodes/{name}")
    response.raise_for_status()


def create_with_cidrs(world: World, name: str, cidrs: list[str]) -> None:
    """A Node whose pod CIDRs someone already assigned (another allocator, an earlier run)."""
    world.register(name, taints=[], pod_cidrs=cidrs)


def writes_to(world: World, name: str) -> list[Write]:
    return world.transport.node_writes(name)


def event_writes(world: World) -> list[Write]:
    return [w for w in world.transport.writes if "/events" in w.path]


def assert_backoff(times: list[float], base_s: float) -> None:
    """Attempts retried after base_s, 2 base_s, 4 base_s ... (jitter shortens by <= 10 %)."""
    for n, (a, b) in enumerate(itertools.pairwise(times)):
        delay = base_s * 2**n
        assert 0.9 * delay - 1e-9 <= b - a <= delay + 1e-9, (n, times)


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        pytest.param(
            ipam(),
            [["10.244.0.0/24"], ["10.244.1.0/24"], ["10.244.2.0/24"]],
            id="single-stack",
        ),
        pytest.param(
            ipam("10.244.0.0/16,fd00:10:244::/56", "--node-cidr-mask-size-ipv6=64"),
            [
                ["10.244.0.0/24", "fd00:10:244::/64"],
                ["10.244.1.0/24", "fd00:10:244:1::/64"],
                ["10.244.2.0/24", "fd00:10:244:2::/64"],
            ],
            id="dual-stack",
        ),
        pytest.param(
            ipam("fd00:10:244::/56,10.244.0.0/16", "--node-cidr-mask-size-ipv4=26"),
            [
                ["fd00:10:244::/64", "10.244.0.0/26"],
                ["fd00:10:244:1::/64", "10.244.0.64/26"],
                ["fd00:10:244:2::/64", "10.244.0.128/26"],
            ],
            id="dual-stack-ipv6-first",
        ),
        pytest.param(
            ipam("10.0.0.0/16", "--node-cidr-mask-size=20"),
            [["10.0.0.0/20"], ["10.0.16.0/20"], ["10.0.32.0/20"]],
            id="mask-size",
        ),
        pytest.param(
            ipam("10.0.0.0/22", "--service-cluster-ip-range=10.0.0.0/23"),
            [["10.0.2.0/24"], ["10.0.3.0/24"], []],
            id="service-range-excluded",
        ),
        pytest.param(
            ipam(
                "10.0.0.0/24",
                "--node-cidr-mask-size=26",
                "--service-cluster-ip-range=10.0.0.100/30",
            ),
            [["10.0.0.0/26"], ["10.0.0.128/26"], ["10.0.0.192/26"]],
            id="small-service-range-takes-its-block",
        ),
        pytest.param(
            ipam(
                "10.244.0.0/16,fd00:10:244::/56",
                "--node-cidr-mask-size-ipv6=64",
                "--service-cluster-ip-range=10.96.0.0/12,fd00:10:244::/63",
            ),
            [
                ["10.244.0.0/24", "fd00:10:244:2::/64"],
                ["10.244.1.0/24", "fd00:10:244:3::/64"],
                ["10.244.2.0/24", "fd00:10:244:4::/64"],
            ],
            id="dual-stack-service-range-in-one-family",
        ),
    ],
)
async def test_allocation(
    autojump_clock: trio.testing.MockClock, cfg: tuple[str, ...], expected: list[list[str]]
) -> None:
    """Each Node gets one pod CIDR per cluster CIDR, in --cluster-cidr's order and never
    from --service-cluster-ip-range, with one patch per Node (which Node gets which CIDR
    depends on scheduling, so the assignments are compared as a set)."""
    names = ["node-a", "node-b", "node-c"]
    want = sum(bool(cidrs) for cidrs in expected)
    async with open_world() as world:
        register(world, *names)
        with trio.fail_after(30):
            async with world.running(*cfg):
                await wait_for(lambda: sum(bool(pod_cidrs(world, n)) for n in names) == want)
                await trio.sleep(1)  # the echoes (and a Node left without): nothing more
        got = sorted(pod_cidrs(world, name) for name in names)
        assert got == sorted(expected)
        for name in names:
            path = f"/api/v1/nodes/{name}"
            writes = [] if not pod_cidrs(world, name) else [Write(0.0, "PATCH", path)]
            assert writes_to(world, name) == writes


async def test_existing_cidrs_are_occupied_across_a_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A new term (here a new replica) marks the CIDRs Nodes already have, whoever wrote
    them, and never gives them again nor rewrites them."""
    async with open_world() as world:
        create_with_cidrs(world, "old", ["10.244.0.0/24"])
        register(world, "node-a", "node-b")
        with trio.fail_after(60):
            async with world.running(*ipam()):
                await wait_for(lambda: all(pod_cidrs(world, n) for n in ("node-a", "node-b")))
                await trio.sleep_until(2)
            first = {pod_cidrs(world, n)[0] for n in ("old", "node-a", "node-b")}
            assert first == {"10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"}
            register(world, "node-c")
            world.registry = CollectorRegistry()  # a new process: its own metrics
            async with world.running(*ipam()):
                await wait_for(lambda: bool(pod_cidrs(world, "node-c")))
                await trio.sleep_until(4)
        assert pod_cidrs(world, "node-c") == ["10.244.3.0/24"]
        assert writes_to(world, "old") == []
        # Each Node written once, when the replica that allocated for it started.
        for name, at in (("node-a", 0.0), ("node-b", 0.0), ("node-c", 2.0)):
            assert writes_to(world, name) == [Write(at, "PATCH", f"/api/v1/nodes/{name}")]


async def test_a_wave_of_200_nodes(autojump_clock: trio.testing.MockClock) -> None:
    """200 Nodes registered at once get 200 distinct CIDRs with one write each."""
    names = [f"node-{i:03}" for i in range(200)]
    async with open_world() as world:
        register(world, *names)
        with trio.fail_after(60):
            async with world.running(*ipam()):
                await wait_for(lambda: len(world.transport.writes) == len(names))
        # 200 writes through the controller's client bucket (20/s, burst 30), whose first
        # token went to the start-up list of the Nodes: 29 at once, then one every 50 ms.
        sent = moments(w.at for w in world.transport.writes)
        assert sent == [0.0] * 29 + moments(0.05 * k for k in range(1, 172))
        cidrs = [pod_cidrs(world, name) for name in names]
        assert all(len(c) == 1 for c in cidrs)
        assert len({c[0] for c in cidrs}) == 200
        cluster = ipaddress.ip_network("10.244.0.0/16")
        assert all(ipaddress.ip_network(c[0]).subnet_of(cluster) for c in cidrs)  # type: ignore[arg-type]
        assert all(len(world.transport.node_writes(name)) == 1 for name in names)


async def test_exhaustion_then_a_freed_cidr_is_used(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With room for 4 Nodes the 5th gets a CIDRNotAvailable Event and a log line with the
    fix; once a Node is deleted, the 5th gets its CIDR without any other change."""
    names = ["node-1", "node-2", "node-3", "node-4"]
    async with open_world() as world:
        register(world, *names)
        with trio.fail_after(120), capture_logs() as logs:
            async with world.running(*ipam("10.244.0.0/24", "--node-cidr-mask-size=26")):
                await trio.sleep_until(2)
                register(world, "node-5")
                await trio.sleep_until(7)
                assert pod_cidrs(world, "node-5") == []
                events = await world.events("CIDRNotAvailable")
                assert [(e["involvedObject"]["name"], e["type"], e["message"]) for e in events] == [
                    ("node-5", "Normal", "Node node-5 status is now: CIDRNotAvailable")
                ]
                assert events[0]["source"]["component"] == "cidrAllocator"
                assert events[0]["count"] > 1  # retried with backoff (aggregated Events)
                freed = pod_cidrs(world, "node-3")
                await delete(world, "node-3")
                await wait_for(lambda: pod_cidrs(world, "node-5") == freed)
        # The Event at once (t=2), counted again at each retry of node-5 (1 s, 2 s, 4 s ...
        # up to 60 s); the freed CIDR is written at its first retry after the deletion
        # (t=7), not when the CIDR was freed.
        recorded = event_writes(world)
        assert recorded[0] == Write(2.0, "POST", "/api/v1/namespaces/default/events")
        (written,) = writes_to(world, "node-5")
        attempts = [w.at for w in recorded] + [written.at]
        assert_backoff(attempts, base_s=1.0)
        assert [t > 7 for t in attempts] == [False] * (len(attempts) - 1) + [True]
        unavailable = [e for e in logs if e["event"] == "node.pod-cidr-unavailable"]
        assert unavailable[0]["log_level"] == "warning"
        assert unavailable[0]["node"] == "node-5"
        assert "enlarge --cluster-cidr" in unavailable[0]["fix"]
        assert {e["log_level"] for e in unavailable[1:]} <= {"debug"}


async def test_deletion_releases_and_reregistration_gets_a_cidr(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A deleted Node's CIDR goes back to the pool; a Node deleted and registered again
    under the same name (one cache update) is a new Node and gets a CIDR of its own."""
    async with open_world() as world:
        register(world, "node-1", "node-2", "node-3", "node-4")
        with trio.fail_after(60):
            async with world.running(*ipam("10.244.0.0/24", "--node-cidr-mask-size=26")):
                await wait_for(lambda: len(world.transport.writes) == 4)
                await trio.sleep_until(2)
                gone = pod_cidrs(world, "node-2")
                await delete(world, "node-2")
                await trio.sleep_until(3)
                register(world, "node-5")
                await wait_for(lambda: pod_cidrs(world, "node-5") == gone)
                await trio.sleep_until(5)
                # Delete and register again at once (no checkpoint between): the old uid's
                # CIDR must be released.
                before = pod_cidrs(world, "node-4")
                world.api.registry.delete(world.api.type_for("v1", "Node"), "", "node-4")
                register(world, "node-4")
                await wait_for(lambda: pod_cidrs(world, "node-4") == before)
        # Each new Node is written the moment it is registered: never a retry.
        assert world.transport.writes[4:] == [
            Write(3.0, "PATCH", "/api/v1/nodes/node-5"),
            Write(5.0, "PATCH", "/api/v1/nodes/node-4"),
        ]
        assert await world.events("CIDRNotAvailable") == []


async def test_failed_write_releases_and_retries(autojump_clock: trio.testing.MockClock) -> None:
    """Three failed writes: the CIDR is released, a CIDRAssignmentFailed Event recorded,
    and the Node retried with backoff until it has CIDRs."""
    async with open_world() as world:
        register(world, "node-a")
        world.api.faults.inject_error(500, verb="patch", resource="nodes", name="node-a", count=3)
        with trio.fail_after(30):
            async with world.running(*ipam("10.244.0.0/24", "--node-cidr-mask-size=25")):
                await wait_for(lambda: bool(pod_cidrs(world, "node-a")))
        # Round robin: the released 10.244.0.0/25 waits behind the untouched .128/25.
        assert pod_cidrs(world, "node-a") == ["10.244.0.128/25"]
        # Three attempts back to back at once (as upstream's cidrUpdateRetries), the Event,
        # then the Node's retry after the node backoff's first 5 ms (less its jitter).
        writes = writes_to(world, "node-a")
        assert [w.at for w in writes[:3]] == [0.0] * 3
        assert 0.9 * 0.005 <= writes[3].at <= 0.005
        assert len(writes) == 4
        assert [w.at for w in event_writes(world)] == [0.0]
        events = await world.events("CIDRAssignmentFailed")
        assert [(e["type"], e["message"]) for e in events] == [
            ("Normal", "Node node-a status is now: CIDRAssignmentFailed")
        ]


async def test_cidrs_set_by_someone_else_win(autojump_clock: trio.testing.MockClock) -> None:
    """Pod CIDRs written by someone else while our write is in flight: our guarded write
    fails, the Node keeps theirs, ours goes back to the pool (no Event, no retry)."""
    async with open_world() as world:
        register(world, "node-a")
        # Our patch (the first for node-a) is held up for a second.
        world.api.faults.inject_latency(1.0, verb="patch", resource="nodes", name="node-a", count=1)
        with trio.fail_after(30):
            async with world.running(*ipam("10.244.0.0/24", "--node-cidr-mask-size=26")):
                await trio.sleep_until(0.5)
                theirs = await world.http.patch(
                    "/api/v1/nodes/node-a",
                    json={"spec": {"podCIDR": "10.244.0.192/26"}},
                    headers={"content-type": "application/merge-patch+json"},
                )
                theirs.raise_for_status()
                await trio.sleep_until(2.5)
                register(world, "node-b", "node-c", "node-d", "node-e")
                await wait_for(lambda: len(world.transport.writes) == 5)
                await trio.sleep(1)  # the fourth new Node finds the range full: no write
        assert pod_cidrs(world, "node-a") == ["10.244.0.192/26"]
        assert writes_to(world, "node-a") == [Write(0.0, "PATCH", "/api/v1/nodes/node-a")]
        # The three CIDRs left (ours among them) go to three of the four new Nodes, at once.
        got = sorted(pod_cidrs(world, n) for n in ("node-b", "node-c", "node-d", "node-e"))
        assert got == [[], ["10.244.0.0/26"], ["10.244.0.128/26"], ["10.244.0.64/26"]]
        assert sorted(w.at for w in world.transport.writes if "/nodes/" in w.path) == [
            0.0,
            2.5,
            2.5,
            2.5,
        ]
        assert await world.events("CIDRAssignmentFailed") == []


async def test_pod_cidr_outside_the_cluster_gets_a_warning_not_fatal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Node whose pod CIDR is outside --cluster-cidr gets a Warning Event and a log line
    naming the fix; the controller carries on with the others."""
    async with open_world() as world:
        create_with_cidrs(world, "stray", ["192.168.7.0/24"])
        register(world, "node-a")
        with trio.fail_after(30), capture_logs() as logs:
            async with world.running(*ipam()):
                await wait_for(lambda: bool(pod_cidrs(world, "node-a")))
                await trio.sleep(1)  # the Event recorder writes in the background
                warnings = await world.events("PodCIDROutsideClusterCIDR")
        assert pod_cidrs(world, "node-a") == ["10.244.0.0/24"]
        assert pod_cidrs(world, "stray") == ["192.168.7.0/24"]
        object_writes = [w for w in world.transport.writes if "/events" not in w.path]
        assert object_writes == [Write(0.0, "PATCH", "/api/v1/nodes/node-a")]
        assert [(e["type"], e["involvedObject"]["name"]) for e in warnings] == [
            ("Warning", "stray")
        ]
        assert (
            "pod CIDR 192.168.7.0/24 is outside --cluster-cidr (10.244.0.0/16)"
            in (warnings[0]["message"])
        )
        (outside,) = [e for e in logs if e["event"] == "node.pod-cidr-outside-cluster"]
        assert outside["node"] == "stray"
        assert outside["pod_cidr"] == "192.168.7.0/24"
        assert "--cluster-cidr" in outside["fix"]


async def test_a_stale_cache_entry_never_allocates_twice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Node update that reaches the cache while our write is in flight (so it shows no
    pod CIDRs) causes neither a second allocation nor a second write."""
    async with open_world() as world:
        register(world, "node-a")
        world.api.faults.inject_latency(1.0, verb="patch", resource="nodes", name="node-a", count=1)
        with trio.fail_after(30):
            async with world.running(*ipam("10.244.0.0/24", "--node-cidr-mask-size=26")):
                await trio.sleep_until(0.5)
                await world.set_ready("node-a", "False")  # the kubelet's status update
                await trio.sleep_until(2.5)
                register(world, "node-b")
                await wait_for(lambda: bool(pod_cidrs(world, "node-b")))
                await trio.sleep(1)  # its echo: nothing more
        assert pod_cidrs(world, "node-a") == ["10.244.0.0/26"]
        assert pod_cidrs(world, "node-b") == ["10.244.0.64/26"]
        # node-a's one write was sent at t=0 (and held for 1 s); node-b's at once.
        assert world.transport.writes == [
            Write(0.0, "PATCH", "/api/v1/nodes/node-a"),
            Write(2.5, "PATCH", "/api/v1/nodes/node-b"),
        ]


async def test_at_most_30_pod_cidr_writes_at_once(autojump_clock: trio.testing.MockClock) -> None:
    """100 Nodes, each write taking 1 s in the API server, a client bucket that does not
    bind: writes go out 30 at a time (upstream's cidrUpdateWorkers)."""
    names = [f"node-{i:03}" for i in range(100)]
    async with open_world() as world:
        register(world, *names)
        world.api.faults.inject_latency(1.0, verb="patch", resource="nodes")
        with trio.fail_after(60):
            async with world.running(
                *ipam("10.244.0.0/16", "--kube-api-qps=10000", "--kube-api-burst=10000")
            ):
                await wait_for(lambda: len(world.transport.writes) == len(names))
                await trio.sleep(1)  # the last wave's answers
        sent = [
            w.at
            for w in world.transport.writes
            if w.method == "PATCH" and w.path.startswith("/api/v1/nodes/")
        ]
        assert len(sent) == 100
        waves = collections.Counter(moments(sent))
        assert waves == {0.0: 30, 1.0: 30, 2.0: 30, 3.0: 10}
        assert all(len(pod_cidrs(world, name)) == 1 for name in names)


async def test_a_shared_cidr_is_freed_only_when_its_last_holder_goes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two Nodes that hold one CIDR: deleting one keeps it taken; deleting the other frees
    it for a Node waiting in a full range."""
    async with open_world() as world:
        create_with_cidrs(world, "x", ["10.244.0.0/24"])
        create_with_cidrs(world, "y", ["10.244.0.0/24"])
        register(world, "a")
        with trio.fail_after(600):
            async with world.running(*ipam("10.244.0.0/23", "--node-cidr-mask-size=24")):
                await wait_for(lambda: pod_cidrs(world, "a") == ["10.244.1.0/24"])
                register(world, "b")
                await delete(world, "x")
                await trio.sleep(120)  # retries of the full range, x gone, y still there
                waited = pod_cidrs(world, "b")
                await delete(world, "y")
                await wait_for(lambda: pod_cidrs(world, "b") == ["10.244.0.0/24"])
    assert waited == []
