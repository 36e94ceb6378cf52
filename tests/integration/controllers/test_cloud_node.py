"""cloud-node-controller against the emulator and the simulated cloud (both in-process).

Per-Node cloud lookups wait 20 ms to be batched (`--cloud-batch-window=20ms`), so a Node
registered before the replica starts is initialised at exactly t=0.02.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
import trio
import trio.testing

from tests.helpers.world import World, moments, open_world
from trio_ccm.actors.cloud_node import WAVE_LOOKUPS_CAP
from trio_ccm.supervisor import LOOKUP_SPACING_S
from trio_ccm.testing import wait_for
from trio_ccm.testing.harness import Write
from trio_ccm_testbed.cloud.model import Call

ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
TYPE = "node.kubernetes.io/instance-type"
UNINIT = "node.cloudprovider.kubernetes.io/uninitialized"
NODE_CONTROLLERS = "--controllers=cloud-node,cloud-node-lifecycle"
EVENTS = "/api/v1/namespaces/default/events"
BATCH_S = 0.02
RETRY_BASE_S, JITTER = 0.005, 0.1  # client-go's per-item 5 ms * 2^n; our jitter shortens


def initialised(world: World, *names: str) -> bool:
    return all(UNINIT not in world.taint_keys(name) for name in names)


def lookups(world: World, name: str) -> list[Call]:
    """The bulk lookups whose names include `name`."""
    return [
        c for c in world.cloud.calls_by("instances") if name in c.target.split("=")[-1].split(",")
    ]


def assert_backoff(times: Sequence[float], *, window_s: float) -> None:
    """Attempts retried after 5 ms, 10 ms, 20 ms ... (jitter shortens each by <= 10 %),
    each plus `window_s` of batching, and never sooner than the bulk calls' spacing."""
    gaps = [b - a for a, b in itertools.pairwise(times)]
    for n, gap in enumerate(gaps):
        delay = RETRY_BASE_S * 2**n
        low = max((1 - JITTER) * delay + window_s, LOOKUP_SPACING_S)
        high = max(delay + window_s, LOOKUP_SPACING_S)
        assert low - 1e-9 <= gap <= high + 1e-9, (n, times)


async def test_initializes_a_node_with_two_writes_taint_last(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A tainted Node gets providerID, labels (GA and beta) and addresses, then loses the
    taint, in two writes (status, then one guarded patch), with a Synced Event."""
    async with open_world() as world:
        inst = world.cloud.add_instance(
            "node-a", zone="zone-b", instance_type="sim.large", external_ips=["203.0.113.9"]
        )
        world.register(
            "node-a",
            taints=[
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                {"key": UNINIT, "value": "true", "effect": "NoSchedule"},
            ],
        )
        with trio.fail_after(30):
            async with world.running(NODE_CONTROLLERS):
                await wait_for(lambda: len(world.transport.writes) == 3)
                await trio.sleep(1)  # the echoes of both writes: nothing more
        node = world.node("node-a")
        assert node["spec"]["providerID"] == f"sim://zone-b/{inst.id}"
        labels = node["metadata"]["labels"]
        assert labels[ZONE] == labels["failure-domain.beta.kubernetes.io/zone"] == "zone-b"
        assert (
            labels[REGION] == labels["failure-domain.beta.kubernetes.io/region"] == ("sim-region-1")
        )
        assert labels[TYPE] == labels["beta.kubernetes.io/instance-type"] == "sim.large"
        assert [t["key"] for t in node["spec"]["taints"]] == ["dedicated"]
        assert node["status"]["addresses"] == [
            {"type": "InternalIP", "address": inst.internal_ips[0]},
            {"type": "ExternalIP", "address": "203.0.113.9"},
            {"type": "Hostname", "address": "node-a"},
        ]
        # One batch window after the start: the one lookup, both writes, then the Event.
        assert [(c.time, c.method) for c in world.cloud.calls_by("instances")] == [
            (BATCH_S, "ListInstances")
        ]
        assert world.transport.writes == [
            Write(BATCH_S, "PATCH", "/api/v1/nodes/node-a/status"),
            Write(BATCH_S, "PATCH", "/api/v1/nodes/node-a"),
            Write(BATCH_S, "POST", EVENTS),
        ]
        synced = await world.events("Synced")
        assert [(e["involvedObject"]["name"], e["message"]) for e in synced] == [
            ("node-a", "Node synced successfully")
        ]
        assert synced[0]["source"]["component"] == "cloud-node-controller"


async def test_a_wave_is_served_by_few_bulk_calls(autojump_clock: trio.testing.MockClock) -> None:
    """50 Nodes registered at once are initialised concurrently with a handful of bulk
    lookups, not one cloud call per Node."""
    names = [f"node-{i:02}" for i in range(50)]
    async with open_world() as world:
        for name in names:
            world.cloud.add_instance(name)
            world.register(name)
        with trio.fail_after(30):
            async with world.running(NODE_CONTROLLERS):
                await wait_for(lambda: len(world.transport.node_writes(names[-1])) == 2)
                await wait_for(lambda: initialised(world, *names))
        # All 50 asked within one batch window: a single listing, at its end.
        lookups_made = world.cloud.calls_by("instances")
        assert [(c.time, c.method, c.target) for c in lookups_made] == [
            (BATCH_S, "ListInstances", "names=" + ",".join(names))
        ]
        # 100 Node writes through the client bucket (20/s, burst 30): the burst at t=0.02,
        # then one every 50 ms, the last at 0.02 + 70 * 0.05 = 3.52.
        node_writes = moments(w.at for w in world.transport.writes if "/nodes/" in w.path)
        assert len(node_writes) == 100
        assert node_writes[:30] == [BATCH_S] * 30
        assert node_writes[30:] == moments(BATCH_S + 0.05 * k for k in range(1, 71))


async def test_a_wave_looks_up_at_most_the_cap_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """500 new Nodes with `--cloud-batch-size=1000`: the first lookup asks about exactly
    `WAVE_LOOKUPS_CAP` of them (not all 500: two batches' worth is 2,000), and no later
    one about more, until every Node has been asked about."""
    names = [f"node-{i:03}" for i in range(500)]
    async with open_world() as world:
        for name in names:
            world.cloud.add_instance(name)
            world.register(name)

        def asked() -> list[int]:
            return [len(c.target.split(",")) for c in world.cloud.calls_by("instances")]

        with trio.fail_after(600):
            async with world.running(NODE_CONTROLLERS, "--cloud-batch-size=1000"):
                await wait_for(lambda: sum(asked()) >= len(names))
    assert asked()[0] == WAVE_LOOKUPS_CAP
    assert max(asked()) == WAVE_LOOKUPS_CAP


async def test_existing_provider_id_is_kept_and_used(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Node that already has a providerID is looked up by it and keeps it."""
    async with open_world() as world:
        inst = world.cloud.add_instance("other-name", zone="zone-a")
        pid = f"sim://zone-a/{inst.id}"
        world.register("node-a", provider_id=pid)
        with trio.fail_after(30):
            async with world.running(NODE_CONTROLLERS):
                await wait_for(lambda: initialised(world, "node-a"))
        node = world.node("node-a")
        assert node["spec"]["providerID"] == pid
        assert node["metadata"]["labels"][ZONE] == "zone-a"
        assert [(c.time, c.target) for c in world.cloud.calls_by("instances")] == [
            (BATCH_S, f"ids={inst.id}")
        ]
        assert [w.at for w in world.transport.node_writes("node-a")] == [BATCH_S, BATCH_S]


@pytest.mark.parametrize(
    ("name", "provider_id", "annotations"),
    [
        pytest.param("no-instance", "", {}, id="no-instance-for-the-node"),
        pytest.param(
            "bad-ip",
            "",
            {"alpha.kubernetes.io/provided-node-ip": "10.255.255.1"},
            id="provided-ip-not-in-cloud",
        ),
        pytest.param(
            "junk-ip",
            "",
            # Today the Node is looked up, at every retry, before its annotation is found
            # unusable.
            {"alpha.kubernetes.io/provided-node-ip": "banana"},
            id="provided-ip-junk",
        ),
    ],
)
async def test_bad_nodes_stay_tainted_and_never_stop_the_others(
    autojump_clock: trio.testing.MockClock,
    name: str,
    provider_id: str,
    annotations: dict[str, str],
) -> None:
    """A Node the cloud cannot describe (or whose annotations are wrong) keeps its taint and
    is retried; the good Nodes registered with it are initialised all the same."""
    good = [f"good-{i}" for i in range(3)]
    async with open_world() as world:
        if name != "no-instance":
            world.cloud.add_instance(name)
        world.register(name, provider_id=provider_id, annotations=annotations)
        for node in good:
            world.cloud.add_instance(node)
            world.register(node)
        with trio.fail_after(30):
            async with world.running(NODE_CONTROLLERS) as serving:
                await wait_for(lambda: initialised(world, *good))
                assert trio.current_time() < 2 * BATCH_S
                # Retries 1 .. 9 wait 5 ms .. 1.28 s (2.56 s in all, plus a batch window
                # each), their lookups at least LOOKUP_SPACING_S apart: all done by t=7.
                await trio.sleep_until(7)
                stats = serving.debug_actors()
        assert UNINIT in world.taint_keys(name)
        assert all(initialised(world, node) for node in good)
        # Object writes all went out with the first batch (a missing instance's Warning
        # Event is recorded, and its count bumped, as it is retried).
        assert {w.at for w in world.transport.writes if "/events" not in w.path} == {BATCH_S}
        assert world.transport.node_writes(name) == []
        controllers = stats["controllers"]
        assert isinstance(controllers, dict)
        actors = controllers["cloud-node-controller"]["managers"]["cloud-node-controller"]
        failures = actors["actors"][name]["failures"]
        assert actors["statistics"]["retries"] == failures >= 10
        # Every attempt is a lookup, the first in the good Nodes' batch.
        attempts = [c.time for c in lookups(world, name)]
        assert attempts[0] == BATCH_S
        assert len(attempts) == failures
        assert_backoff(attempts, window_s=BATCH_S)


async def test_a_node_whose_instance_appears_later_is_initialised_by_retry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No instance yet: the Node is retried with backoff until the instance exists."""
    async with open_world() as world:
        world.register("late")
        with trio.fail_after(60):
            async with world.running(NODE_CONTROLLERS):
                await trio.sleep(3)
                assert UNINIT in world.taint_keys("late")
                world.cloud.add_instance("late")
                await wait_for(lambda: initialised(world, "late"))
        attempts = [c.time for c in lookups(world, "late")]
        assert_backoff(attempts, window_s=BATCH_S)
        # The first attempt after t=3 finds the instance, and both writes go out with it.
        found = [t for t in attempts if t > 3]
        assert found == attempts[-1:]
        assert [w.at for w in world.transport.node_writes("late")] == found * 2


async def test_a_node_without_an_instance_gets_a_warning_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Node whose instance the cloud does not know stays tainted with an InstanceNotFound
    Warning (what `kubectl describe node` shows), its retries aggregated into its count."""
    async with open_world() as world:
        world.register("ghost", provider_id="sim://zone-a/i-0000dead")
        with trio.fail_after(60):
            async with world.running(NODE_CONTROLLERS):
                await trio.sleep(5)
                assert UNINIT in world.taint_keys("ghost")
                found = await world.events("InstanceNotFound")
        assert [(e["type"], e["involvedObject"]["name"]) for e in found] == [("Warning", "ghost")]
        assert "the cloud has no instance for it" in found[0]["message"]
        assert "stays tainted and is retried" in found[0]["message"]
        assert found[0]["count"] > 1


async def test_provided_node_ip_goes_first(autojump_clock: trio.testing.MockClock) -> None:
    """With kubelet's --node-ip annotation, that IP is the Node's first address."""
    async with open_world() as world:
        world.cloud.add_instance(
            "node-a", internal_ips=["10.1.0.5", "10.1.0.6"], external_ips=["203.0.113.1"]
        )
        world.register("node-a", annotations={"alpha.kubernetes.io/provided-node-ip": "10.1.0.6"})
        with trio.fail_after(30):
            async with world.running(NODE_CONTROLLERS):
                await wait_for(lambda: initialised(world, "node-a"))
        assert world.node("node-a")["status"]["addresses"] == [
            {"type": "InternalIP", "address": "10.1.0.6"},
            {"type": "ExternalIP", "address": "203.0.113.1"},
            {"type": "Hostname", "address": "node-a"},
        ]
        assert world.transport.node_writes("node-a")[0] == Write(
            BATCH_S, "PATCH", "/api/v1/nodes/node-a/status"
        )


async def test_legacy_beta_labels_are_reconciled(autojump_clock: trio.testing.MockClock) -> None:
    """On an initialised Node the beta zone label is the source of truth for the GA one."""
    async with open_world() as world:
        world.register(
            "old",
            taints=[],
            labels={"failure-domain.beta.kubernetes.io/zone": "zone-z", ZONE: "stale"},
        )
        with trio.fail_after(30):
            async with world.running(NODE_CONTROLLERS):
                await wait_for(lambda: world.node("old")["metadata"]["labels"][ZONE] == "zone-z")
                await trio.sleep(1)  # its echo: nothing more
        # At once (no cloud lookup to wait for), in one write.
        assert world.transport.writes == [Write(0.0, "PATCH", "/api/v1/nodes/old")]
        # No lookup for the Node itself: the calls are the periodic address sync's first
        # (full) pass when the controller starts: the change feed's cursor, then the listing.
        assert [(c.time, c.method) for c in world.cloud.calls_by("instances")] == [
            (0.0, "ListInstanceChanges"),
            (0.0, "ListInstances"),
        ]


async def test_periodic_address_sync_uses_one_bulk_call_per_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The first --node-status-update-frequency pass with initialised Nodes refreshes all
    their addresses from one bulk listing (after taking the change feed's cursor); a changed
    address is patched, unchanged ones are not."""
    async with open_world() as world:
        insts = [world.cloud.add_instance(f"n{i}") for i in range(10)]
        for i in range(10):
            world.register(f"n{i}")
        with trio.fail_after(200):
            async with world.running(NODE_CONTROLLERS, "--node-status-update-frequency=1m"):
                await wait_for(lambda: initialised(world, *(f"n{i}" for i in range(10))))
                world.cloud.clear_calls()
                before = len(world.transport.writes)
                world.cloud.set_addresses(insts[3].id, internal=["10.9.9.9"])
                # The times are the call log's: polling once a second only ends the wait.
                await wait_for(lambda: len(world.cloud.calls_by("instances")) == 2, poll_s=1)
        # The periods count from the controller's start (t=0), not from the initialisations.
        sweeps = world.cloud.calls_by("instances")
        assert [(c.time, c.method) for c in sweeps] == [
            (60.0, "ListInstanceChanges"),
            (60.0, "ListInstances"),
        ]
        assert world.node("n3")["status"]["addresses"][0] == {
            "type": "InternalIP",
            "address": "10.9.9.9",
        }
        assert world.transport.writes[before:] == [Write(60.0, "PATCH", "/api/v1/nodes/n3/status")]


async def test_heartbeats_of_initialised_nodes_wake_no_node_actor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An initialised Node's status updates are no work for the cloud-node-controller: no
    actor is spawned for them, nothing is looked up or written; a new Node still is."""
    async with open_world() as world:
        world.cloud.add_instance("steady")
        world.register("steady", taints=[], provider_id="sim://sim-region-1a/i-steady")
        with trio.fail_after(60):
            async with world.running(NODE_CONTROLLERS) as serving:
                for _ in range(5):
                    await trio.sleep(10)
                    await world.set_ready("steady", "True")
                await trio.sleep(1)
                stats = serving.debug_actors()
                world.cloud.add_instance("new")
                world.register("new")
                await wait_for(lambda: initialised(world, "new"))
        controllers = stats["controllers"]
        assert isinstance(controllers, dict)
        actors = controllers["cloud-node-controller"]["managers"]["cloud-node-controller"]
        assert actors["statistics"]["spawned"] == 0
        assert world.transport.node_writes("steady") == []


@pytest.mark.parametrize(
    ("cloud_hostname", "node_addresses", "annotation", "written"),
    [
        pytest.param(
            "n0",
            [("InternalIP", "10.0.0.5"), ("InternalIP", "10.0.0.6"), ("Hostname", "n0")],
            None,
            None,
            id="the-cloud-reports-what-the-node-has",
        ),
        pytest.param(
            "",
            [("InternalIP", "10.0.0.5"), ("InternalIP", "10.0.0.6"), ("Hostname", "n0")],
            None,
            None,
            id="the-node-keeps-its-hostname-the-cloud-lacks",
        ),
        pytest.param(
            "n0",
            [("InternalIP", "10.0.0.5"), ("InternalIP", "10.0.0.6"), ("Hostname", "n0")],
            "10.0.0.6",
            ["10.0.0.6", "n0"],  # upstream: other addresses of the matched type are dropped
            id="same-addresses-but-the-provided-ip-rules",
        ),
        pytest.param(
            "n0",
            [("InternalIP", "10.0.0.6"), ("InternalIP", "10.0.0.5"), ("Hostname", "n0")],
            None,
            ["10.0.0.5", "10.0.0.6", "n0"],
            id="same-addresses-in-another-order",
        ),
    ],
)
async def test_address_sync_writes_only_a_real_change(
    autojump_clock: trio.testing.MockClock,
    cloud_hostname: str,
    node_addresses: list[tuple[str, str]],
    annotation: str | None,
    written: list[str] | None,
) -> None:
    """The periodic sync skips a Node whose addresses equal the cloud's without building
    anything, but never one whose provided node IP reorders them, and patches a reorder."""
    async with open_world() as world:
        instance = world.cloud.add_instance(
            "n0", internal_ips=["10.0.0.5", "10.0.0.6"], hostname=cloud_hostname
        )
        world.register(
            "n0",
            taints=[],
            provider_id=f"sim://{instance.zone}/{instance.id}",
            addresses=[{"type": t, "address": a} for t, a in node_addresses],
            annotations={"alpha.kubernetes.io/provided-node-ip": annotation} if annotation else {},
        )
        with trio.fail_after(200):
            async with world.running(NODE_CONTROLLERS, "--node-status-update-frequency=1m"):
                await wait_for(lambda: len(world.cloud.calls_by("instances")) >= 2, poll_s=1)
    patches = world.transport.node_writes("n0")
    if written is None:
        assert patches == []
    else:
        assert [w.path for w in patches] == ["/api/v1/nodes/n0/status"]
        addresses = [a["address"] for a in world.node("n0")["status"]["addresses"]]
        assert addresses == written


async def test_a_wave_has_at_most_two_batches_of_lookups_in_flight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """100 new Nodes with lookups batched 10 at a time: every Node is initialised, and no
    more than 20 of their handler calls (two full batches) run at once."""
    names = [f"w{i:03}" for i in range(100)]
    async with open_world() as world:
        for name in names:
            world.cloud.add_instance(name)
            world.register(name)
        busiest = 0
        with trio.fail_after(600):
            async with world.running(NODE_CONTROLLERS, "--cloud-batch-size=10") as serving:
                while not initialised(world, *names):
                    controllers = serving.debug_actors()["controllers"]
                    assert isinstance(controllers, dict)
                    manager = controllers["cloud-node-controller"]["managers"]
                    busiest = max(busiest, manager["cloud-node-controller"]["statistics"]["busy"])
                    await trio.sleep(0.005)
    assert 10 <= busiest <= 20
