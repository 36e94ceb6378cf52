"""cloud-node-controller against the emulator and the simulated cloud (both in-process)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from tests.integration.controllers.conftest import open_world, running, settings

ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
TYPE = "node.kubernetes.io/instance-type"
UNINIT = "node.cloudprovider.kubernetes.io/uninitialized"


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
            async with running(world):
                await trio.sleep(1)
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
        assert world.transport.node_writes("node-a") == [
            ("PATCH", "/api/v1/nodes/node-a/status"),
            ("PATCH", "/api/v1/nodes/node-a"),
        ]
        synced = await world.events("Synced")
        assert [(e["involvedObject"]["name"], e["message"]) for e in synced] == [
            ("node-a", "Node synced successfully")
        ]
        assert synced[0]["source"]["component"] == "cloud-node-controller"


async def test_a_wave_is_served_by_few_bulk_calls(autojump_clock: trio.testing.MockClock) -> None:
    """50 Nodes registered at once are initialised concurrently with a handful of bulk
    lookups, not one cloud call per Node."""
    async with open_world() as world:
        for i in range(50):
            world.cloud.add_instance(f"node-{i:02}")
            world.register(f"node-{i:02}")
        with trio.fail_after(30):
            async with running(world):
                # 100 writes through the default client bucket (20/s, burst 30): 3.5 s.
                await trio.sleep(4)
        assert all(UNINIT not in world.taint_keys(f"node-{i:02}") for i in range(50))
        lookups = world.cloud.calls_by("instances")
        assert 1 <= len(lookups) <= 6
        assert {c.method for c in lookups} == {"ListInstances"}


async def test_existing_provider_id_is_kept_and_used(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Node that already has a providerID is looked up by it and keeps it."""
    async with open_world() as world:
        inst = world.cloud.add_instance("other-name", zone="zone-a")
        pid = f"sim://zone-a/{inst.id}"
        world.register("node-a", provider_id=pid)
        with trio.fail_after(30):
            async with running(world):
                await trio.sleep(1)
        node = world.node("node-a")
        assert node["spec"]["providerID"] == pid
        assert UNINIT not in world.taint_keys("node-a")
        assert node["metadata"]["labels"][ZONE] == "zone-a"


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
    async with open_world() as world:
        if name != "no-instance":
            world.cloud.add_instance(name)
        world.register(name, provider_id=provider_id, annotations=annotations)
        for i in range(3):
            world.cloud.add_instance(f"good-{i}")
            world.register(f"good-{i}")
        with trio.fail_after(30):
            async with running(world) as serving:
                await trio.sleep(5)
                stats = serving.debug_actors()
        assert UNINIT in world.taint_keys(name)
        assert all(UNINIT not in world.taint_keys(f"good-{i}") for i in range(3))
        controllers = stats["controllers"]
        assert isinstance(controllers, dict)
        actors = controllers["cloud-node-controller"]["managers"]["cloud-node-controller"]
        assert actors["statistics"]["retries"] >= 3
        assert actors["actors"][name]["failures"] >= 3


async def test_a_node_whose_instance_appears_later_is_initialised_by_retry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No instance yet: the Node is retried with backoff until the instance exists."""
    async with open_world() as world:
        world.register("late")
        with trio.fail_after(60):
            async with running(world):
                await trio.sleep(3)
                assert UNINIT in world.taint_keys("late")
                world.cloud.add_instance("late")
                await trio.sleep(20)
        assert UNINIT not in world.taint_keys("late")


async def test_provided_node_ip_goes_first(autojump_clock: trio.testing.MockClock) -> None:
    """With kubelet's --node-ip annotation, that IP is the Node's first address."""
    async with open_world() as world:
        world.cloud.add_instance(
            "node-a", internal_ips=["10.1.0.5", "10.1.0.6"], external_ips=["203.0.113.1"]
        )
        world.register("node-a", annotations={"alpha.kubernetes.io/provided-node-ip": "10.1.0.6"})
        with trio.fail_after(30):
            async with running(world):
                await trio.sleep(1)
        assert world.node("node-a")["status"]["addresses"] == [
            {"type": "InternalIP", "address": "10.1.0.6"},
            {"type": "ExternalIP", "address": "203.0.113.1"},
            {"type": "Hostname", "address": "node-a"},
        ]


async def test_legacy_beta_labels_are_reconciled(autojump_clock: trio.testing.MockClock) -> None:
    """On an initialised Node the beta zone label is the source of truth for the GA one."""
    async with open_world() as world:
        world.register(
            "old",
            taints=[],
            labels={"failure-domain.beta.kubernetes.io/zone": "zone-z", ZONE: "stale"},
        )
        with trio.fail_after(30):
            async with running(world):
                await trio.sleep(1)
        assert world.node("old")["metadata"]["labels"][ZONE] == "zone-z"
        # No lookup for the Node itself: the one call is the periodic address sync's listing.
        assert [c.method for c in world.cloud.calls_by("instances")] == ["ListInstances"]


async def test_periodic_address_sync_uses_one_bulk_call_per_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Every --node-status-update-frequency, all initialised Nodes' addresses are refreshed
    from one bulk listing; a changed address is patched, unchanged ones are not."""
    async with open_world() as world:
        insts = [world.cloud.add_instance(f"n{i}") for i in range(10)]
        for i in range(10):
            world.register(f"n{i}")
        with trio.fail_after(200):
            async with running(world, settings(node_status_update_frequency_s=60.0)):
                await trio.sleep(5)
                world.cloud.clear_calls()
                before = len(world.transport.writes)
                world.cloud.set_addresses(insts[3].id, internal=["10.9.9.9"])
                await trio.sleep(60)
        sweep = world.cloud.calls_by("instances")
        assert len(sweep) == 1
        assert world.node("n3")["status"]["addresses"][0] == {
            "type": "InternalIP",
            "address": "10.9.9.9",
        }
        status_writes = [w for w in world.transport.writes[before:] if w[1].endswith("/status")]
        assert status_writes == [("PATCH", "/api/v1/nodes/n3/status")]
