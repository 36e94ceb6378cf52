"""`trio-ccm testbed --cloud=openstack` / `demo --cloud=openstack` (issue 23 item 6): Nova
servers whose simulated kubelets register Nodes named like the servers, and
`OpenStackFleet`, what those kubelets follow. Real services, real time, deadlines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

from tests.helpers.aws import until
from trio_ccm.cli import aclose_provider
from trio_ccm.cloud.openstack import from_config
from trio_ccm.testing.apiserver import ApiServer
from trio_ccm.testing.harness import run_ccm
from trio_ccm.testing.openstack import OpenStackWorld, unique
from trio_ccm.testing.openstack.fleet import OpenStackFleet, action
from trio_ccm.testing.testbed import Testbed

UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
SHUTDOWN = "node.cloudprovider.kubernetes.io/shutdown"


async def test_the_fleet_follows_servers_and_routes(openstack: OpenStackWorld) -> None:
    """A snapshot names each server as its Node; a stop, a deletion and a router route show
    at the next refresh, and the fleet's own reads are not counted as the CCM's calls."""
    prefix = unique("test-fleet")
    fleet = OpenStackFleet(openstack)
    try:
        with trio.fail_after(300):
            await fleet.add_servers(2, prefix=prefix)
            await fleet.refresh()
            mine = {s.name: s for s in fleet.instances() if s.name.startswith(prefix)}
            assert sorted(mine) == [f"{prefix}-1", f"{prefix}-2"]
            assert {s.state for s in mine.values()} == {"running"}
            assert {s.zone for s in mine.values()} == {openstack.availability_zone}
            first, second = mine[f"{prefix}-1"], mine[f"{prefix}-2"]
            network = openstack.sdk().network
            (port,) = network.ports(device_id=first.id)
            route = {"destination": "10.250.1.0/24", "nexthop": port.fixed_ips[0]["ip_address"]}
            body = {"router": {"routes": [route]}}
            router = network.get_router(openstack.router_id)
            await trio.to_thread.run_sync(
                lambda: network.add_extra_routes_to_router(router, body=body)
            )
            await trio.to_thread.run_sync(openstack.stop_server, first.id)
            await trio.to_thread.run_sync(openstack.delete_server, second.id)
            await fleet.refresh()
        states = {s.id: s.state for s in fleet.instances()}
        assert states[first.id] == "stopped"
        assert second.id not in states
        assert (route["destination"], route["nexthop"]) in {
            (r.destination, r.target) for r in fleet.routes()
        }
        assert fleet.call_counts() == {}
        network.remove_extra_routes_from_router(router, body=body)
    finally:
        for server in fleet.instances():
            if server.name.startswith(prefix):
                await trio.to_thread.run_sync(openstack.delete_server, server.id)
        fleet.close()


def test_action_names_a_request_without_ids_or_query() -> None:
    """The fleet's call counts name a request by method and path, IDs and query left out."""
    target = "/v2.1/servers/0b8a2b0e-4c1c-4d55-9e1e-6a3b5b1b2c3d/action?x=1"
    assert action("POST", target) == "POST /v2.1/servers/{id}/action"
    assert action("GET", "/v2.0/ports?device_id=a") == "GET /v2.0/ports"


async def _nodes(http: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    answer = await http.get("/api/v1/nodes")
    return {n["metadata"]["name"]: n for n in answer.json()["items"]}


def _taints(node: dict[str, Any]) -> set[str]:
    return {t["key"] for t in node["spec"].get("taints", [])}


async def test_the_ccm_follows_the_testbeds_servers(
    openstack: OpenStackWorld, tmp_path: Path
) -> None:
    """Kubelets register a Node per server, named like it; the CCM on the openstack provider
    and the world's cloud.conf initialises them (provider ID openstack:///<server id>), taints
    the Node of a stopped server as shut down and deletes the Node of a deleted server."""
    prefix = unique("test-follow")
    fleet = OpenStackFleet(openstack, name_prefix=prefix, poll_s=0.5)
    api = ApiServer(seed=1)
    conf = openstack.write_cloud_conf(tmp_path / "cloud.conf").read_bytes()
    provider = from_config(conf)
    http = httpx.AsyncClient(transport=api.transport(), base_url="http://emulator")
    controllers = "--controllers=cloud-node-controller,cloud-node-lifecycle-controller"
    try:
        with trio.fail_after(400):
            await fleet.add_servers(2, prefix=prefix)
            async with trio.open_nursery() as nursery:
                await nursery.start(fleet.serve)
                testbed = Testbed(api, fleet, poll_s=0.5, node_lease_s=None)
                await nursery.start(testbed.serve)
                async with run_ccm(api, provider, controllers, "--node-monitor-period=1s"):
                    names = {s.name: s.id for s in fleet.instances()}
                    assert sorted(names) == [f"{prefix}-1", f"{prefix}-2"]

                    async def initialised() -> bool:
                        nodes = await _nodes(http)
                        return len(nodes) == 2 and not any(
                            UNINITIALIZED in _taints(n) for n in nodes.values()
                        )

                    await until(initialised)
                    nodes = await _nodes(http)
                    for name, server_id in names.items():
                        assert nodes[name]["spec"]["providerID"] == f"openstack:///{server_id}"
                        labels = nodes[name]["metadata"]["labels"]
                        assert labels["topology.kubernetes.io/zone"] == "az1"
                        assert labels["node.kubernetes.io/instance-type"] == "m1.tiny"
                    stopped, deleted = f"{prefix}-1", f"{prefix}-2"
                    await trio.to_thread.run_sync(openstack.stop_server, names[stopped])

                    async def shut_down() -> bool:
                        return SHUTDOWN in _taints((await _nodes(http))[stopped])

                    await until(shut_down)
                    await trio.to_thread.run_sync(openstack.delete_server, names[deleted])

                    async def gone() -> bool:
                        return deleted not in await _nodes(http)

                    await until(gone)
                    assert stopped in await _nodes(http)
                nursery.cancel_scope.cancel()
    finally:
        await http.aclose()
        await aclose_provider(provider)
        for server in fleet.instances():
            await trio.to_thread.run_sync(openstack.delete_server, server.id)
        fleet.close()
