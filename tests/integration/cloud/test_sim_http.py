"""The simulated cloud over real HTTP on loopback, reached by the `sim` provider from its config."""

from __future__ import annotations

import functools

import httpx
import pytest
import trio

from trio_ccm.cloud.provider import NodeInfo, Route, ServiceInfo, ServicePort
from trio_ccm.cloud.sim import SimCloudError, SimInstances, from_config
from trio_ccm.cloud.sim.loadbalancers import LIST_PAGE, SimLoadBalancers
from trio_ccm.health import bind_socket
from trio_ccm_testbed.cloud import Listening, SimCloud, cloud_config, serve_sim_cloud

LIMIT_S = 10  # real sockets, real clock: a generous bound that still fails a hang fast


async def test_provider_reaches_the_cloud_over_http(nursery: trio.Nursery) -> None:
    """A provider built from cloud_config(url) initialises, looks up, balances and routes."""
    cloud = SimCloud(seed=2)
    node = cloud.add_instance("node-1", external_ips=["198.51.100.4"])
    listening: Listening = await nursery.start(functools.partial(serve_sim_cloud, cloud))
    assert listening.url == f"http://127.0.0.1:{listening.port}"
    provider = from_config(cloud_config(listening.url, replica="ccm-http"))
    instances = provider.instances
    assert isinstance(instances, SimInstances)
    assert provider.load_balancers is not None
    assert provider.routes is not None
    service = ServiceInfo("default", "web", "1234", ports=(ServicePort("http", "TCP", 80, 30080),))
    many = [NodeInfo(name=f"absent-node-with-a-long-name-{i:05d}") for i in range(250)]
    with trio.fail_after(LIMIT_S):
        await provider.initialize()
        metadata = await instances.instance_metadata(NodeInfo(name="node-1"))
        exists = await instances.instance_exists(
            NodeInfo(name="x", provider_id=metadata.provider_id)
        )
        status = await provider.load_balancers.ensure_load_balancer("k", service, [])
        await provider.routes.create_route("k", "uid-1", Route("node-1", "10.244.0.0/24"))
        routes = await provider.routes.list_routes("k")
        bulk = await instances.instances_metadata([NodeInfo(name="node-1"), *many[:200]])
        await provider.aclose()
    assert metadata.provider_id == f"sim://sim-region-1a/{node.id}"
    assert exists is True
    assert status.ingress[0].ip == "203.0.113.1"
    assert [r.name for r in routes] == ["k-uid-1"]
    assert list(bulk) == ["node-1"]
    assert {c.replica for c in cloud.calls} == {"ccm-http"}
    assert [c.method for c in cloud.calls] == [
        "Health",
        "ListInstances",
        "GetInstance",
        "PutLoadBalancer",
        "CreateRoute",
        "ListRoutes",
        "ListInstances",
    ]
    assert len(cloud.calls[-1].target) > 5000  # names in the query line


async def test_admin_api_over_http(nursery: trio.Nursery) -> None:
    """The admin API works over HTTP as the docs' curl examples use it."""
    cloud = SimCloud(seed=2)
    listening: Listening = await nursery.start(functools.partial(serve_sim_cloud, cloud))
    async with httpx.AsyncClient(base_url=listening.url) as http:
        with trio.fail_after(LIMIT_S):
            added = await http.post("/_sim/instances", json={"name": "node-1"})
            await http.post("/_sim/faults/error", json={"method": "ListInstances", "count": 1})
            failed = await http.get("/v1/instances", headers={"X-Sim-Replica": "curl"})
            calls = (await http.get("/_sim/calls", params={"replica": "curl"})).json()["calls"]
            state = (await http.get("/_sim/state")).json()
    assert added.status_code == 201
    assert failed.status_code == 500
    assert failed.json()["error"]["code"] == "InternalError"
    assert [(c["method"], c["status"]) for c in calls] == [("ListInstances", 500)]
    assert [i["name"] for i in state["instances"]] == ["node-1"]


async def test_unreachable_cloud_fails_initialize() -> None:
    """With nothing listening at the URL, initialize() raises SimCloudError naming the URL."""
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()  # a port that was just free: connections are refused
    provider = from_config(cloud_config(f"http://127.0.0.1:{port}", replica="r"))
    with trio.fail_after(LIMIT_S), pytest.raises(SimCloudError) as caught:
        await provider.initialize()
    await provider.aclose()
    message = str(caught.value)
    assert f"sim cloud at http://127.0.0.1:{port} is not usable" in message
    assert "no answer from" in message
    assert caught.value.status is None


async def test_the_sweep_lists_every_load_balancer_page_by_page(nursery: trio.Nursery) -> None:
    """`list_load_balancers` reads the cluster's load balancers `LIST_PAGE` at a time (each
    carries its node names) and returns every one, with its Service."""
    cloud = SimCloud(seed=3)
    listening: Listening = await nursery.start(functools.partial(serve_sim_cloud, cloud))
    provider = from_config(cloud_config(listening.url, replica="ccm-pages"))
    lbs = provider.load_balancers
    assert isinstance(lbs, SimLoadBalancers)
    count = LIST_PAGE + 2
    services = [
        ServiceInfo(
            "default", f"web{i:02d}", f"uid-{i}", ports=(ServicePort("http", "TCP", 80, 30080),)
        )
        for i in range(count)
    ]
    nodes = (NodeInfo(name="node-0"),)
    with trio.fail_after(LIMIT_S):
        await provider.initialize()
        for service in services:
            await lbs.ensure_load_balancer("k", service, nodes)
        cloud.clear_calls()
        listed = await lbs.list_load_balancers("k")
        await provider.aclose()
    assert sorted(lb.service for lb in listed) == [s.name for s in services]
    assert [c.method for c in cloud.calls] == ["ListLoadBalancers", "ListLoadBalancers"]


async def test_a_node_set_is_encoded_once_for_the_load_balancers_given_it(
    nursery: trio.Nursery,
) -> None:
    """Load balancers given one tuple of views share one encoding of its names (and one
    backends body); another tuple, or a list changed in place, sends its own names."""
    cloud = SimCloud(seed=2)
    listening: Listening = await nursery.start(functools.partial(serve_sim_cloud, cloud))
    provider = from_config(cloud_config(listening.url, replica="ccm-http"))
    lbs = provider.load_balancers
    assert isinstance(lbs, SimLoadBalancers)
    services = [
        ServiceInfo(
            "default", f"web{i}", f"uid-{i}", ports=(ServicePort("http", "TCP", 80, 30080),)
        )
        for i in range(3)
    ]
    first = tuple(NodeInfo(name=f"node-{i}") for i in range(3))
    second = (*first[:2], NodeInfo(name="node-9"))
    changing = list(first)

    def backends(service: ServiceInfo) -> tuple[str, ...]:
        found = cloud.load_balancer(lbs.load_balancer_name("k", service))
        assert found is not None
        return found.nodes

    with trio.fail_after(LIMIT_S):
        await provider.initialize()
        for service in services:
            await lbs.ensure_load_balancer("k", service, first)
        shared = lbs.names.encodings
        assert [backends(s) for s in services] == [("node-0", "node-1", "node-2")] * 3
        for service in services:
            await lbs.update_load_balancer("k", service, second)
        assert [backends(s) for s in services] == [("node-0", "node-1", "node-9")] * 3
        assert lbs.names.bodies == 1  # the three calls sent one body
        await lbs.update_load_balancer("k", services[0], changing)
        changing[0] = NodeInfo(name="node-5")
        await lbs.update_load_balancer("k", services[0], changing)
        assert backends(services[0]) == ("node-1", "node-2", "node-5")
        await provider.aclose()
    assert shared == 1
    assert lbs.names.encodings == 4  # first, second, and the list twice
    assert lbs.names.bodies == 3  # second's, and the list's twice
