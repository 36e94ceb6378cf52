"""The CCM judged by traffic: requests through the simulated cloud's load balancers.

Each test runs a whole cluster in-process (`open_datapath_world`: the emulator, the
simulated cloud with a data plane, the testbed's kubelets, kube-proxy and pods, one CCM
replica) on a random 127.x.y.0/24 of its own, on the real clock: it waits on conditions
with a deadline, never a fixed sleep.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from trio_ccm_testbed.cloud import SimCloud
from trio_ccm_testbed.cloud.dataplane import DataPlane
from trio_ccm_testbed.datapath import Outcome, open_datapath_world
from trio_ccm_testbed.loopback import NotLoopbackError
from trio_ccm_testbed.traffic import TrafficError, http_get, open_http_connection, udp_ask

DEADLINE_S = 60.0
EXCLUDE = "node.kubernetes.io/exclude-from-external-load-balancers"


def all_ok(outcome: Outcome) -> bool:
    return not outcome.errors and bool(outcome.answers)


async def test_requests_succeed_through_every_load_balancer_tcp_and_udp() -> None:
    """Every LoadBalancer Service answers through its EXTERNAL-IP, on each TCP and UDP port,
    from pods spread over the Nodes."""
    with trio.fail_after(DEADLINE_S):
        async with open_datapath_world(nodes=3, pods=3) as world:
            web = await world.create_service("web")
            dns = await world.create_service(
                "dns",
                ports=[
                    {"name": "dns", "port": 5353, "protocol": "UDP"},
                    {"name": "http", "port": 8053, "protocol": "TCP"},
                ],
            )
            web_ip = await world.wait_external_ip(web)
            dns_ip = await world.wait_external_ip(dns)
            web_out = await world.wait_traffic(
                web_ip, 8080, lambda o: all_ok(o) and len(o.pods()) == 3, count=12
            )
            assert {a.service for a in web_out.answers} == {web}
            assert web_out.nodes() == {"node-0001", "node-0002", "node-0003"}
            udp = await world.wait_traffic(dns_ip, 5353, all_ok, protocol="UDP", count=5)
            assert {a.service for a in udp.answers} == {dns}
            tcp = await world.wait_traffic(dns_ip, 8053, all_ok, count=5)
            assert {a.service for a in tcp.answers} == {dns}


async def test_excluded_node_gets_no_traffic() -> None:
    """A Node labelled exclude-from-external-load-balancers leaves every load balancer:
    it then receives no connection while the others keep answering."""
    with trio.fail_after(DEADLINE_S):
        async with open_datapath_world(nodes=3) as world:
            key = await world.create_service("web")
            ip = await world.wait_external_ip(key)
            await world.wait_traffic(ip, 8080, all_ok)
            await world.label_node("node-0002", {EXCLUDE: "true"})
            await world.wait_backends(key, lambda backends: "node-0002" not in backends)
            before = world.kube_proxy.received["node-0002"]
            outcome = await world.send(ip, 8080, count=20)
            assert outcome.errors == []
            assert world.kube_proxy.received["node-0002"] == before
            assert world.kube_proxy.received["node-0001"] > 0
            assert world.kube_proxy.received["node-0003"] > 0


async def test_new_node_serves_once_the_ccm_adds_it() -> None:
    """A Node joining the cluster receives connections through the load balancer once the
    CCM has added it as a backend and it passed its health checks."""
    with trio.fail_after(DEADLINE_S):
        async with open_datapath_world(nodes=2) as world:
            key = await world.create_service("web")
            ip = await world.wait_external_ip(key)
            await world.wait_traffic(ip, 8080, all_ok)
            world.testbed.add_nodes(1)
            await world.wait_backends(
                key, lambda backends: backends.get("node-0003", {}).get("state") == "healthy"
            )
            before = world.kube_proxy.received["node-0003"]
            outcome = await world.send(ip, 8080, count=9)
            assert outcome.errors == []
            assert world.kube_proxy.received["node-0003"] >= before + 3


@pytest.mark.parametrize(
    "action",
    [pytest.param("stop", id="stopped"), pytest.param("terminate", id="deleted")],
)
async def test_a_gone_nodes_share_moves_to_the_others(action: str) -> None:
    """A stopped Node (failing its health checks) or a deleted one (removed by the CCM)
    gets no more traffic; requests keep succeeding through the other Nodes."""
    with trio.fail_after(DEADLINE_S):
        async with open_datapath_world(nodes=3, pods=3) as world:
            key = await world.create_service("web")
            ip = await world.wait_external_ip(key)
            await world.wait_traffic(ip, 8080, lambda o: all_ok(o) and len(o.nodes()) == 3)
            victim = next(i for i in world.cloud.instances() if i.name == "node-0002")
            getattr(world.cloud, action)(victim.id)
            outcome = await world.wait_traffic(
                ip, 8080, lambda o: all_ok(o) and "node-0002" not in o.nodes(), count=12
            )
            assert outcome.nodes() == {"node-0001", "node-0003"}
            before = world.kube_proxy.received["node-0002"]
            again = await world.send(ip, 8080, count=12)
            assert again.errors == []
            assert world.kube_proxy.received["node-0002"] == before
            if action == "terminate":
                await world.wait_backends(key, lambda backends: "node-0002" not in backends)


async def test_local_policy_sends_only_to_nodes_with_a_pod_and_follows_a_moved_pod() -> None:
    """externalTrafficPolicy Local: only the Node running the pod passes the health check
    and receives traffic, seeing the client's own address; moving the pod moves it."""
    with trio.fail_after(DEADLINE_S):
        async with open_datapath_world(nodes=3) as world:
            key = await world.create_service("local", replicas=1, externalTrafficPolicy="Local")
            ip = await world.wait_external_ip(key)
            first = await world.wait_traffic(ip, 8080, all_ok, count=6)
            [pod] = world.kube_proxy.pods(key)
            assert first.nodes() == {pod.node}
            assert {a.source for a in first.answers} == {"127.0.0.1"}
            healthy = {n for n, b in (await world.backends(key)).items() if b["healthy"]}
            assert healthy == {pod.node}
            target = next(n for n in ("node-0001", "node-0002", "node-0003") if n != pod.node)
            world.kube_proxy.move_pod(key, pod.name, target)
            moved = await world.wait_traffic(
                ip, 8080, lambda o: all_ok(o) and o.nodes() == {target}, count=6
            )
            assert moved.pods() == {pod.name}


async def test_source_ranges_admit_and_refuse_by_source_address() -> None:
    """loadBalancerSourceRanges: a client inside a range is answered, one outside is
    refused by the load balancer and reaches no Node."""
    with trio.fail_after(DEADLINE_S):
        async with open_datapath_world(nodes=2) as world:
            key = await world.create_service("ranged", loadBalancerSourceRanges=["127.0.0.1/32"])
            ip = await world.wait_external_ip(key)
            admitted = await world.wait_traffic(ip, 8080, all_ok, count=4, source="127.0.0.1")
            assert {a.source for a in admitted.answers} <= {"127.0.0.1"} | {
                n.internal_ips[0] for n in world.cloud.instances()
            }
            received = sum(world.kube_proxy.received.values())
            refused = await world.send(ip, 8080, count=4, source="127.0.0.2")
            assert refused.answers == []
            assert len(refused.errors) == 4
            assert sum(world.kube_proxy.received.values()) == received
            state = world.plane.balancer(await world.load_balancer_name(key))
            assert state is not None
            assert state["refusedClients"] == 4


async def test_a_port_added_then_removed_serves_then_stops() -> None:
    """A port added to the Service gets a listener on the load balancer that answers; once
    removed again, nothing listens there while the first port keeps answering."""
    with trio.fail_after(DEADLINE_S):
        async with open_datapath_world(nodes=2) as world:
            key = await world.create_service("web")
            ip = await world.wait_external_ip(key)
            await world.wait_traffic(ip, 8080, all_ok)
            one = {"name": "a", "port": 8080, "protocol": "TCP"}
            two = {"name": "b", "port": 9090, "protocol": "TCP"}
            await world.patch_service(key, {"ports": [one, two]})
            await world.wait_traffic(ip, 9090, all_ok, count=3)
            await world.patch_service(key, {"ports": [one]})
            await world.wait_traffic(
                ip, 9090, lambda o: not o.answers and len(o.errors) == 3, count=3
            )
            assert all_ok(await world.send(ip, 8080, count=3))


async def test_client_ip_affinity_holds_per_client_address() -> None:
    """sessionAffinity ClientIP: every request from one client address reaches the same
    Node and pod, and different addresses are spread over the Nodes."""
    with trio.fail_after(DEADLINE_S):
        async with open_datapath_world(nodes=3, pods=3) as world:
            key = await world.create_service("sticky", sessionAffinity="ClientIP")
            ip = await world.wait_external_ip(key)
            await world.wait_traffic(ip, 8080, all_ok, source="127.0.0.10")
            await world.wait_backends(key, lambda bs: all(b["healthy"] for b in bs.values()))
            pods_seen = set()
            for client in ("127.0.0.10", "127.0.0.11", "127.0.0.12"):
                outcome = await world.send(ip, 8080, count=8, source=client)
                assert outcome.errors == []
                assert len(outcome.pods()) == 1, (client, outcome.answers)
                pods_seen |= outcome.pods()
            assert len(pods_seen) > 1


async def test_a_removed_backend_drains_its_connections_then_cuts_them() -> None:
    """A backend the CCM removes keeps its connection in flight answering while it drains,
    takes no new connection, and has the connection cut once the drain time is over; the
    admin API shows it draining."""
    with trio.fail_after(DEADLINE_S):
        async with open_datapath_world(nodes=2, drain_s=3.0) as world:
            key = await world.create_service("web")
            ip = await world.wait_external_ip(key)
            await world.wait_traffic(ip, 8080, all_ok)
            await world.wait_backends(key, lambda bs: all(b["healthy"] for b in bs.values()))
            connection = await open_http_connection(ip, 8080)
            (await connection.get()).answer()
            [held] = [n for n, b in (await world.backends(key)).items() if b["activeConnections"]]
            await world.label_node(held, {EXCLUDE: "true"})
            await world.wait_backends(key, lambda bs: bs.get(held, {}).get("state") == "draining")
            assert (await connection.get()).answer().service == key
            before = world.kube_proxy.received[held]
            outcome = await world.send(ip, 8080, count=4)
            assert outcome.errors == []
            assert world.kube_proxy.received[held] == before
            async with httpx.AsyncClient(
                transport=world.cloud.transport(), base_url="http://sim"
            ) as admin:
                shown = (await admin.get("/_sim/dataplane")).json()
            [lb] = [lb for lb in shown["loadBalancers"] if lb["service"] == key]
            assert {b["node"]: b["state"] for b in lb["backends"]}[held] == "draining"
            await world.wait_backends(key, lambda bs: held not in bs)
            with pytest.raises(TrafficError):
                await connection.get()
            await connection.aclose()


async def test_admin_api_has_no_data_plane_without_one() -> None:
    """GET /_sim/dataplane answers 404 naming the fix when no data plane serves the cloud."""
    async with httpx.AsyncClient(transport=SimCloud().transport(), base_url="http://sim") as admin:
        response = await admin.get("/_sim/dataplane")
    assert response.status_code == 404
    assert "loopback --lb-network" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("address", "send"),
    [
        pytest.param("203.0.113.1", http_get, id="tcp-documentation-range"),
        pytest.param("10.0.0.10", udp_ask, id="udp-private-range"),
    ],
)
async def test_senders_refuse_non_loopback_addresses(address: str, send: Any) -> None:
    """The traffic clients refuse any address outside 127.0.0.0/8 before sending."""
    with pytest.raises(NotLoopbackError, match=f"{address} is not a loopback address"):
        await send(address, 80)


def test_data_plane_refuses_a_documentation_pool() -> None:
    """A data plane over the default 203.0.113.0/24 pool is refused with the fix named."""
    with pytest.raises(NotLoopbackError, match=r"lb_network='127\.240\.0\.0/24'"):
        DataPlane(SimCloud())
