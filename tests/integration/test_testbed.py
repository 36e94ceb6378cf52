"""Testbed: simulated kubelets over the in-process emulator and simulated cloud, in virtual time.

The testbed's wall clock is pinned to Trio's (EPOCH + current_time()), so condition
timestamps are virtual too. Heartbeat timing is observed through a watch on Nodes: every
status write the kubelets make arrives there at the virtual instant it was made.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest
import trio
import trio.testing

from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.objects import NODES, Node
from trio_ccm.testing.harness import emulator_connection
from trio_ccm_testbed.apiserver import ApiError, ApiServer
from trio_ccm_testbed.cloud import SimCloud
from trio_ccm_testbed.testbed import Testbed

EPOCH = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"


def virtual_now() -> dt.datetime:
    return EPOCH + dt.timedelta(seconds=trio.current_time())


def stamp(seconds: float) -> str:
    return (EPOCH + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


async def node_names(kube: KubeClient) -> list[str]:
    return [n.metadata.name for n in (await kube.list(NODES, type=Node)).items]


def node(server: ApiServer, name: str) -> dict[str, Any]:
    found: dict[str, Any] = server.get("v1", "Node", name)
    return found


def condition(obj: dict[str, Any], kind: str = "Ready") -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)


class RecordingServer(ApiServer):
    """An emulator whose in-process transport records when each Node status write arrives."""

    def __init__(self) -> None:
        super().__init__(seed=1)
        self.status_writes: dict[str, list[tuple[float, str]]] = defaultdict(list)

    def transport(self) -> httpx.AsyncBaseTransport:
        return _Recorder(self, super().transport())


class _Recorder(httpx.AsyncBaseTransport):
    def __init__(self, server: RecordingServer, inner: httpx.AsyncBaseTransport) -> None:
        self.server = server
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.split("/")
        if request.method == "PATCH" and parts[-1] == "status" and parts[-3] == "nodes":
            body = msgspec.json.decode(await request.aread())
            ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
            self.server.status_writes[parts[-2]].append((trio.current_time(), ready["status"]))
        return await self.inner.handle_async_request(request)


@pytest.fixture
async def kube(server: ApiServer) -> AsyncIterator[KubeClient]:
    async with open_kube_client(
        emulator_connection(), transport=server.transport(), qps=0, component="test"
    ) as client:
        yield client


@pytest.fixture
def server() -> RecordingServer:
    return RecordingServer()


@pytest.fixture
def cloud() -> SimCloud:
    return SimCloud(seed=1)


def make_testbed(server: ApiServer, cloud: SimCloud, heartbeat_s: float = 10.0) -> Testbed:
    return Testbed(server, cloud, heartbeat_s=heartbeat_s, seed=3, now=virtual_now)


async def test_running_instances_register_tainted_ready_nodes(
    autojump_clock: trio.testing.MockClock, server: ApiServer, cloud: SimCloud
) -> None:
    """Every running instance gets a Node as an external-cloud kubelet registers it: hostname
    label, uninitialized taint, a Hostname address and Ready=True, before serve() starts."""
    testbed = make_testbed(server, cloud)
    added = testbed.add_nodes(6)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(testbed.serve)
            assert trio.current_time() == 0.0
            for instance in added:
                obj = node(server, instance.name)
                assert obj["metadata"]["labels"]["kubernetes.io/hostname"] == instance.name
                assert obj["spec"]["taints"] == [
                    {"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}
                ]
                assert obj["status"]["addresses"] == [
                    {"type": "Hostname", "address": instance.name}
                ]
                assert "providerID" not in obj["spec"]
                ready = condition(obj)
                assert ready["status"] == "True"
                assert ready["reason"] == "KubeletReady"
                assert ready["lastHeartbeatTime"] == ready["lastTransitionTime"] == stamp(0)
            assert testbed.statistics().registered == 6
            nursery.cancel_scope.cancel()
    assert [i.name for i in added] == [f"node-000{n}" for n in range(1, 7)]
    assert [i.zone for i in added] == [f"sim-region-1{z}" for z in "abcabc"]
    assert {i.state for i in added} == {"running"}


async def test_initialised_nodes_register_as_a_ccm_left_them_and_later_ones_join_new(
    autojump_clock: trio.testing.MockClock, server: ApiServer, cloud: SimCloud
) -> None:
    """add_nodes(initialised=True) registers Nodes with the sim provider ID, the topology labels
    (and their legacy twins), the instance's IP before the hostname and no taint; an instance
    added later through the cloud joins as a new, tainted Node."""
    testbed = make_testbed(server, cloud)
    (instance,) = testbed.add_nodes(1, initialised=True)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(testbed.serve)
            obj = node(server, instance.name)
            assert obj["spec"] == {"providerID": f"sim://sim-region-1a/{instance.id}"}
            labels = obj["metadata"]["labels"]
            for key, value in [
                ("node.kubernetes.io/instance-type", "sim.small"),
                ("beta.kubernetes.io/instance-type", "sim.small"),
                ("topology.kubernetes.io/zone", "sim-region-1a"),
                ("failure-domain.beta.kubernetes.io/zone", "sim-region-1a"),
                ("topology.kubernetes.io/region", "sim-region-1"),
                ("failure-domain.beta.kubernetes.io/region", "sim-region-1"),
            ]:
                assert labels[key] == value
            assert obj["status"]["addresses"] == [
                {"type": "InternalIP", "address": instance.internal_ips[0]},
                {"type": "Hostname", "address": instance.name},
            ]
            joined = cloud.add_instance("joined", zone="sim-region-1b")
            await trio.sleep(testbed.poll_s + 0.5)
            assert node(server, joined.name)["spec"]["taints"][0]["key"] == UNINITIALIZED
            nursery.cancel_scope.cancel()


def test_add_nodes_numbers_on_from_the_highest_name(server: ApiServer, cloud: SimCloud) -> None:
    """add_nodes continues after the highest node-NNNN already in the cloud."""
    cloud.add_instance("node-0007")
    testbed = make_testbed(server, cloud)
    assert [i.name for i in testbed.add_nodes(2)] == ["node-0008", "node-0009"]


async def test_heartbeats_come_every_period_spread_over_the_first_one(
    autojump_clock: trio.testing.MockClock, server: RecordingServer, cloud: SimCloud
) -> None:
    """Each kubelet patches its conditions exactly every heartbeat period, its first beat at
    its own offset in (0, period], so the fleet's writes are spread, not simultaneous."""
    testbed = make_testbed(server, cloud, heartbeat_s=10.0)
    testbed.add_nodes(8)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(testbed.serve)
            await trio.sleep(35)
            nursery.cancel_scope.cancel()
    assert len(server.status_writes) == 8
    firsts = []
    for name, writes in server.status_writes.items():
        times = [t for t, _ in writes]
        first = times[0]
        firsts.append(first)
        assert 0 < first <= 10.0, name
        assert times == pytest.approx([first + 10.0 * k for k in range(len(times))]), name
        assert len(times) == (3 if first + 30.0 > 35 else 4), name
        assert {status for _, status in writes} == {"True"}
    assert len(set(firsts)) == 8
    assert testbed.statistics().heartbeats == sum(len(w) for w in server.status_writes.values())
    last = server.status_writes["node-0001"][-1][0]
    ready = condition(node(server, "node-0001"))
    assert ready["lastTransitionTime"] == stamp(0)
    assert ready["lastHeartbeatTime"] == stamp(last)


async def test_stopped_instance_goes_unknown_and_back_to_ready_when_started(
    autojump_clock: trio.testing.MockClock, server: RecordingServer, cloud: SimCloud
) -> None:
    """Stopping an instance turns its Node's conditions Unknown at the next poll (heartbeat
    kept, transition stamped) and silences its kubelet; starting it posts Ready=True again
    and the heartbeats resume, one period apart."""
    testbed = make_testbed(server, cloud, heartbeat_s=10.0)
    target, _other = testbed.add_nodes(2)
    writes = server.status_writes[target.name]
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            await nursery.start(testbed.serve)
            await trio.sleep(12.5)
            last_beat = condition(node(server, target.name))["lastHeartbeatTime"]
            cloud.stop(target.id)
            await trio.sleep(1.0)  # the poll at t=13 has seen it
            obj = node(server, target.name)
            for kind in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
                cond = condition(obj, kind)
                assert cond["status"] == "Unknown", kind
                assert cond["reason"] == "NodeStatusUnknown"
                assert cond["message"] == "Kubelet stopped posting node status."
                assert cond["lastTransitionTime"] == stamp(13)
            assert condition(obj)["lastHeartbeatTime"] == last_beat
            assert writes[-1] == (13.0, "Unknown")
            writes_when_stopped = len(writes)
            await trio.sleep(40)
            assert len(writes) == writes_when_stopped  # silent while stopped
            cloud.start(target.id)  # at t=53.5
            await trio.sleep(1.0)  # the poll at t=54 has seen it
            ready = condition(node(server, target.name))
            assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
            assert ready["lastTransitionTime"] == ready["lastHeartbeatTime"] == stamp(54)
            await trio.sleep(20)
            nursery.cancel_scope.cancel()
    after = [(t, status) for t, status in writes if t >= 54]
    assert after[0] == (54.0, "True")
    beats = [t for t, _ in after[1:]]
    assert len(beats) == 2
    assert 54 < beats[0] <= 64
    assert beats[1] - beats[0] == pytest.approx(10.0)
    assert [status for _, status in writes].count("Unknown") == 1
    assert testbed.statistics().unknown == 1


async def test_terminated_instance_goes_unknown_and_is_forgotten(
    autojump_clock: trio.testing.MockClock, server: RecordingServer, cloud: SimCloud
) -> None:
    """A terminated instance (gone from the cloud at once) turns its Node Unknown at the
    next poll; its kubelet is forgotten and the Node is left for the CCM to delete."""
    testbed = make_testbed(server, cloud)
    target, _other = testbed.add_nodes(2)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(testbed.serve)
            await trio.sleep(0.5)
            cloud.terminate(target.id)
            await trio.sleep(1.0)
            ready = condition(node(server, target.name))
            assert (ready["status"], ready["lastTransitionTime"]) == ("Unknown", stamp(1))
            stats = testbed.statistics()
            assert (stats.instances, stats.running, stats.registered) == (1, 1, 1)
            nursery.cancel_scope.cancel()


async def test_a_joining_kubelet_does_not_queue_behind_the_fleets_heartbeats(
    autojump_clock: trio.testing.MockClock, server: ApiServer, cloud: SimCloud, kube: KubeClient
) -> None:
    """With one write in flight and heartbeats that take 5 s each (a backlog that only
    grows), an instance launched at t=10.5 still has its Node registered at the next poll:
    registrations have slots of their own."""
    server.faults.inject_latency(5.0, verb="patch", resource="nodes/status")
    testbed = Testbed(
        server,
        cloud,
        heartbeat_s=1.0,
        seed=3,
        now=virtual_now,
        node_lease_s=None,
        max_in_flight=1,
    )
    testbed.add_nodes(4)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(testbed.serve)
            await trio.sleep_until(10.5)
            cloud.add_instance("node-extra")
            await trio.sleep_until(12.0)
            names = await node_names(kube)
            nursery.cancel_scope.cancel()
    assert "node-extra" in names
    assert condition(node(server, "node-extra"))["lastTransitionTime"] == stamp(11.0)
    assert testbed.statistics().heartbeats < 4  # the backlog: one beat per 5 s got through


@pytest.mark.parametrize(
    ("state", "registered_at"),
    [
        pytest.param("running", 1.0, id="running"),
        pytest.param("stopped", None, id="stopped"),
    ],
)
async def test_instance_added_through_the_admin_api_gets_a_node(
    autojump_clock: trio.testing.MockClock,
    server: ApiServer,
    cloud: SimCloud,
    kube: KubeClient,
    state: str,
    registered_at: float | None,
) -> None:
    """An instance added through the sim cloud's HTTP admin API gets its Node registered
    at the next poll when it runs, and none while it is stopped."""
    testbed = make_testbed(server, cloud)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(testbed.serve)
            async with httpx.AsyncClient(
                transport=cloud.transport(), base_url="http://sim-cloud"
            ) as admin:
                await trio.sleep(0.5)
                answer = await admin.post(
                    "/_sim/instances", json={"name": "node-extra", "state": state}
                )
                assert answer.status_code == 201
            await trio.sleep(2)
            if registered_at is None:
                assert await node_names(kube) == []
            else:
                assert await node_names(kube) == ["node-extra"]
                obj = node(server, "node-extra")
                assert condition(obj)["lastTransitionTime"] == stamp(registered_at)
                assert obj["spec"]["taints"][0]["key"] == UNINITIALIZED
            nursery.cancel_scope.cancel()


async def test_node_deleted_while_running_is_not_registered_again(
    autojump_clock: trio.testing.MockClock,
    server: ApiServer,
    cloud: SimCloud,
    kube: KubeClient,
) -> None:
    """A kubelet registers once per start: if its Node is deleted while the instance runs,
    its next heartbeat finds it gone and it stops posting; a restart registers it again."""
    testbed = make_testbed(server, cloud, heartbeat_s=10.0)
    (target,) = testbed.add_nodes(1)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(testbed.serve)
            await kube.delete(NODES, target.name)
            await trio.sleep(25.5)
            assert await node_names(kube) == []
            assert testbed.statistics().registered == 0
            cloud.stop(target.id)
            await trio.sleep(1)
            cloud.start(target.id)
            await trio.sleep(1)
            assert await node_names(kube) == [target.name]
            assert condition(node(server, target.name))["lastTransitionTime"] == stamp(27)
            nursery.cancel_scope.cancel()


def test_heartbeat_must_be_positive(server: ApiServer, cloud: SimCloud) -> None:
    """A heartbeat period of 0 is refused with a message naming it."""
    with pytest.raises(ValueError, match="heartbeat_s=0"):
        Testbed(server, cloud, heartbeat_s=0)


def lease(server: ApiServer, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = server.get(
            "coordination.k8s.io/v1", "Lease", name, namespace="kube-node-lease"
        )
    except ApiError as exc:
        if exc.code == 404:
            return None
        raise
    return found


async def test_kubelets_keep_node_leases_owned_by_their_nodes(
    autojump_clock: trio.testing.MockClock, server: ApiServer, cloud: SimCloud
) -> None:
    """Each running kubelet creates its node Lease in kube-node-lease (owned by its Node)
    and renews it every 10 s; a stopped one stops renewing; deleting the Node deletes it."""
    testbed = make_testbed(server, cloud, heartbeat_s=60.0)
    target, other = testbed.add_nodes(2)
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            await nursery.start(testbed.serve)
            await trio.sleep(0.5)
            created = lease(server, target.name)
            assert created is not None
            assert created["spec"] == {
                "holderIdentity": target.name,
                "leaseDurationSeconds": 40,
                "renewTime": "2030-01-01T00:00:00.000000Z",
            }
            assert created["metadata"]["ownerReferences"] == [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": target.name,
                    "uid": node(server, target.name)["metadata"]["uid"],
                }
            ]
            await trio.sleep(25)  # t=25.5: renewed at 10 and 20
            renewed = lease(server, target.name)
            assert renewed is not None
            assert renewed["spec"]["renewTime"] == "2030-01-01T00:00:20.000000Z"
            cloud.stop(target.id)
            await trio.sleep(30)  # t=55.5: no renewal since the stop
            stopped = lease(server, target.name)
            assert stopped is not None
            assert stopped["spec"]["renewTime"] == "2030-01-01T00:00:20.000000Z"
            server.registry.delete(server.registry.store.types["/v1/nodes"], "", other.name)
            assert lease(server, other.name) is None
            nursery.cancel_scope.cancel()


def test_node_lease_duration_must_be_sensible(server: ApiServer, cloud: SimCloud) -> None:
    """A node Lease shorter than a second is refused with the parameter named."""
    with pytest.raises(ValueError, match=r"node_lease_s=0\.5"):
        Testbed(server, cloud, node_lease_s=0.5)
