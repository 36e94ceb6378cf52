"""cloud-node-lifecycle-controller against the emulator and the simulated cloud.

The monitor passes run when the controller starts (t=0) and every --node-monitor-period
after; the cloud-node-controller runs beside it, so its periodic address sync also lists
the instances once at t=0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
import trio
import trio.testing

from tests.helpers.world import World, open_world
from trio_ccm.cloud.provider import InstanceMetadata, NodeInfo
from trio_ccm.testing import wait_for
from trio_ccm.testing.harness import Write
from trio_ccm_testbed.cloud.model import Call

SHUTDOWN = "node.cloudprovider.kubernetes.io/shutdown"
NODE_CONTROLLERS = "--controllers=cloud-node,cloud-node-lifecycle"
MONITOR_5S = "--node-monitor-period=5s"
EVENTS = "/api/v1/namespaces/default/events"


def lookups(world: World) -> list[Call]:
    """The instance lookups (not the address sync's questions to the change feed)."""
    return [c for c in world.cloud.calls_by("instances") if c.method != "ListInstanceChanges"]


def calls(world: World) -> list[tuple[float, str]]:
    return [(c.time, c.method) for c in lookups(world)]


async def test_gone_instance_deletes_its_not_ready_node(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A NotReady Node whose instance is terminated is deleted (with a DeletingNode Event);
    a Ready one is left alone even if its instance is gone."""
    async with open_world() as world:
        gone = world.cloud.add_instance("gone")
        ready_gone = world.cloud.add_instance("ready-gone")
        world.cloud.add_instance("fine")
        world.register("gone", taints=[], ready="Unknown")
        world.register("ready-gone", taints=[])
        world.register("fine", taints=[], ready="False")
        world.cloud.terminate(gone.id)
        world.cloud.terminate(ready_gone.id)
        with trio.fail_after(30):
            async with world.running(NODE_CONTROLLERS):
                await wait_for(lambda: len(world.transport.writes) == 3)
                await trio.sleep(1)  # the deletion's echo: nothing more
        names = [n["metadata"]["name"] for n in await world.nodes()]
        assert names == ["fine", "ready-gone"]
        # The first monitor pass, at once: a listing of the NotReady Nodes, a direct
        # question (by name) about the one it missed, the deletion and its Event. (The address sync
        # lists all three and refreshes fine's addresses, which lack the cloud's IP.)
        assert sorted(world.transport.writes, key=lambda w: (w.at, w.path)) == [
            Write(0.0, "POST", EVENTS),
            Write(0.0, "PATCH", "/api/v1/nodes/fine/status"),
            Write(0.0, "DELETE", "/api/v1/nodes/gone"),
        ]
        listed = [(c.time, c.target) for c in lookups(world)]
        assert sorted(listed) == [
            (0.0, "name=gone"),
            (0.0, "names=fine,gone"),
            (0.0, "names=fine,gone,ready-gone"),
        ]
        deleting = await world.events("DeletingNode")
        assert [e["message"] for e in deleting] == [
            "Deleting node gone because it does not exist in the cloud provider"
        ]
        assert deleting[0]["source"]["component"] == "cloud-node-lifecycle-controller"


class ForgetfulListing:
    """A provider whose bulk listing misses some instances (an eventually consistent API)."""

    def __init__(self, inner: Any, forget: set[str]) -> None:
        self.inner = inner
        self.forget = forget

    async def instance_metadata(self, node: NodeInfo) -> InstanceMetadata | None:
        found: InstanceMetadata | None = await self.inner.instance_metadata(node)
        return found

    async def instance_exists(self, node: NodeInfo) -> bool:
        found: bool = await self.inner.instance_exists(node)
        return found

    async def instance_shutdown(self, node: NodeInfo) -> bool:
        found: bool = await self.inner.instance_shutdown(node)
        return found

    async def instances_metadata(self, nodes: Sequence[NodeInfo]) -> Mapping[str, InstanceMetadata]:
        found: Mapping[str, InstanceMetadata] = await self.inner.instances_metadata(nodes)
        return {k: v for k, v in found.items() if k not in self.forget}


def forgetting(forget: set[str]) -> Callable[[Any], Any]:
    def wrap(provider: Any) -> Any:
        provider.instances = ForgetfulListing(provider.instances, forget)
        return provider

    return wrap


async def test_a_listing_miss_is_confirmed_before_deleting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Node missing from the bulk listing is asked about directly before any deletion:
    a listing that misses an instance never deletes its Node."""
    async with open_world() as world:
        inst = world.cloud.add_instance("n1")
        world.register("n1", taints=[], ready="False", provider_id=f"sim://{inst.zone}/{inst.id}")
        with trio.fail_after(30):
            async with world.running(NODE_CONTROLLERS, MONITOR_5S, wrap=forgetting({"n1"})):
                await wait_for(lambda: calls(world).count((10.0, "GetInstance")) == 1, poll_s=1)
        assert [n["metadata"]["name"] for n in await world.nodes()] == ["n1"]
        # Monitor passes at t=0, 5, 10: each a listing, then a direct question about n1
        # (and at t=0 the address sync's listing).
        assert calls(world) == [
            (0.0, "ListInstances"),
            (0.0, "ListInstances"),
            (0.0, "GetInstance"),
            (5.0, "ListInstances"),
            (5.0, "GetInstance"),
            (10.0, "ListInstances"),
            (10.0, "GetInstance"),
        ]
        assert world.transport.writes == []
        assert await world.events("DeletingNode") == []


async def test_stopped_instance_taints_and_ready_untaints(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A NotReady Node on a stopped instance gets the shutdown taint; once Ready again the
    taint is removed without asking the cloud."""
    async with open_world() as world:
        inst = world.cloud.add_instance("n1")
        world.register("n1", taints=[], ready="Unknown")
        world.cloud.stop(inst.id)
        with trio.fail_after(60):
            async with world.running(NODE_CONTROLLERS, MONITOR_5S):
                await wait_for(lambda: world.taint_keys("n1") == [SHUTDOWN])
                await trio.sleep_until(1)
                world.cloud.start(inst.id)
                await world.set_ready("n1", "True")
                world.cloud.clear_calls()
                await wait_for(lambda: world.taint_keys("n1") == [], poll_s=1)
        assert [n["metadata"]["name"] for n in await world.nodes()] == ["n1"]
        # Tainted by the first monitor pass; untainted by the next one, on its period (not
        # when the Node turned Ready at t=1), with no cloud call.
        assert sorted(world.transport.node_writes("n1"), key=lambda w: (w.at, w.path)) == [
            Write(0.0, "PATCH", "/api/v1/nodes/n1"),
            Write(0.0, "PATCH", "/api/v1/nodes/n1/status"),  # the address sync's
            Write(5.0, "PATCH", "/api/v1/nodes/n1"),
        ]
        assert world.cloud.calls == []


async def test_one_bulk_listing_per_period(autojump_clock: trio.testing.MockClock) -> None:
    """Twenty NotReady Nodes cost one listing call per --node-monitor-period, not 20-40."""
    async with open_world() as world:
        for i in range(20):
            world.cloud.add_instance(f"n{i:02}")
            world.register(f"n{i:02}", taints=[], ready="False")
        with trio.fail_after(60):
            async with world.running(NODE_CONTROLLERS, MONITOR_5S):
                await trio.sleep_until(1)
                world.cloud.clear_calls()
                await wait_for(lambda: len(calls(world)) == 2, poll_s=1)
                await trio.sleep_until(11)
        # Two monitor periods (t=5, t=10) plus none from the address sync (5 min).
        assert calls(world) == [(5.0, "ListInstances"), (10.0, "ListInstances")]
        assert len(await world.nodes()) == 20


async def test_cloud_errors_never_delete(autojump_clock: trio.testing.MockClock) -> None:
    """When the cloud answers with errors, NotReady Nodes are kept and checked again later."""
    async with open_world() as world:
        world.cloud.add_instance("n1")
        world.register("n1", taints=[], ready="False")
        world.cloud.faults.error("instances", status=500, probability=1.0)
        with trio.fail_after(60):
            async with world.running(NODE_CONTROLLERS, MONITOR_5S):
                await wait_for(lambda: len(calls(world)) == 5, poll_s=1)
        assert [n["metadata"]["name"] for n in await world.nodes()] == ["n1"]
        assert world.transport.writes == []
        # A failed pass is not retried early: the next one comes on the period. (At t=0
        # the address sync's listing fails too; it tries again in 5 min.)
        assert calls(world) == [(0.0, "ListInstances")] * 2 + [
            (t, "ListInstances") for t in (5.0, 10.0, 15.0)
        ]
        assert {c.status for c in world.cloud.calls_by("instances")} == {500}


def examined(logs: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """Per monitoring pass, in order: (Nodes looked at, of which not Ready)."""
    return [(e["examined"], e["not_ready"]) for e in logs if e["event"] == "lifecycle.monitored"]


def listed(world: World) -> list[tuple[float, str]]:
    """The instances listings, with the Nodes each named."""
    return [(c.time, c.target) for c in lookups(world)]


async def test_a_pass_looks_only_at_nodes_that_need_a_look(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ready Nodes without the shutdown taint are not looked at; a Ready one with the taint
    is until the taint is gone; a NotReady one at every pass."""
    async with open_world() as world:
        for name in ("down", "ready-a", "ready-b", "tainted"):
            world.cloud.add_instance(name)
        world.register("ready-a", taints=[])
        world.register("ready-b", taints=[])
        world.register("tainted", taints=[{"key": SHUTDOWN, "effect": "NoSchedule"}])
        world.register("down", taints=[], ready="False")
        with structlog.testing.capture_logs() as logs, trio.fail_after(30):
            async with world.running(NODE_CONTROLLERS, MONITOR_5S):
                await trio.sleep_until(7)
        assert examined(logs) == [(2, 1), (1, 1)]
        assert world.taint_keys("tainted") == []
        # The monitor asks about `down` only; the address sync (t=0) lists every Node.
        assert sorted(listed(world)) == [
            (0.0, "names=down"),
            (0.0, "names=down,ready-a,ready-b,tainted"),
            (5.0, "names=down"),
        ]


async def test_nodes_are_looked_at_while_they_need_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Node that turns NotReady is looked at from the next pass; one deleted, or Ready
    again, no longer is."""
    async with open_world() as world:
        for name in ("n1", "n2"):
            world.cloud.add_instance(name)
        world.register("n1", taints=[])
        world.register("n2", taints=[], ready="False")
        with structlog.testing.capture_logs() as logs, trio.fail_after(30):
            async with world.running(NODE_CONTROLLERS, MONITOR_5S):
                await trio.sleep_until(1)
                await world.set_ready("n1", "False")
                (await world.http.delete("/api/v1/nodes/n2")).raise_for_status()
                await trio.sleep_until(6)
                await world.set_ready("n1", "True")
                await trio.sleep_until(12)
        assert examined(logs) == [(1, 1), (1, 1), (0, 0)]
        assert [c for c in listed(world) if c[1] != "names=n1,n2"] == [
            (0.0, "names=n2"),
            (5.0, "names=n1"),
        ]


LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cloud-controller-manager"


async def test_a_new_term_looks_at_every_node_that_needs_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """After the Lease is lost and won again, the first pass of the new term looks at every
    Node that needs it, including those that changed while the replica did not lead."""
    async with open_world() as world:
        for name in ("n1", "n2", "n3"):
            world.cloud.add_instance(name)
        world.register("n1", taints=[], ready="False")
        world.register("n2", taints=[])
        world.register("n3", taints=[], ready="Unknown")

        async def holder(identity: str) -> None:
            patch = {"spec": {"holderIdentity": identity}}
            response = await world.http.patch(
                LEASE_PATH,
                json=patch,
                headers={"content-type": "application/merge-patch+json"},
            )
            response.raise_for_status()

        with structlog.testing.capture_logs() as logs, trio.fail_after(60):
            async with world.running(
                NODE_CONTROLLERS, MONITOR_5S, "--leader-elect=true"
            ) as serving:
                await trio.sleep_until(1)
                await holder("intruder")
                await serving.wait_leading(False)
                await world.set_ready("n1", "True")
                await world.set_ready("n2", "False")
                await holder("")
                await serving.wait_leading()
                restarted = trio.current_time()
                await trio.sleep(1)
                assert serving.leadership_starts == 2
        assert examined(logs) == [(2, 2), (2, 2)]
        monitor = [c for c in listed(world) if c[1] != "names=n1,n2,n3"]
        assert monitor == [(0.0, "names=n1,n3"), (restarted, "names=n2,n3")]
