"""Service allocation: cluster IPs from the service CIDR, node ports from 30000-32767."""

from __future__ import annotations

import ipaddress

import httpx
import pytest
import trio

from tests.helpers.emulator import MERGE, SERVICES, service
from trio_ccm_testbed.apiserver import ApiServer


async def test_default_kubernetes_service_exists(client: httpx.AsyncClient) -> None:
    """The default namespace holds the `kubernetes` Service on the range's first IP."""
    with trio.fail_after(5):
        response = await client.get(f"{SERVICES}/kubernetes")
    assert response.json()["spec"]["clusterIP"] == "10.96.0.1"


@pytest.mark.parametrize(
    ("type_", "node_ports"),
    [
        pytest.param("ClusterIP", False, id="cluster-ip"),
        pytest.param("NodePort", True, id="node-port"),
        pytest.param("LoadBalancer", True, id="load-balancer"),
    ],
)
async def test_allocation_by_type(client: httpx.AsyncClient, type_: str, node_ports: bool) -> None:
    """Every Service gets a cluster IP in the CIDR; NodePort and LoadBalancer get node ports."""
    with trio.fail_after(5):
        body = (await client.post(SERVICES, json=service("web", 80, 443, type_=type_))).json()
    spec = body["spec"]
    assert ipaddress.ip_address(spec["clusterIP"]) in ipaddress.ip_network("10.96.0.0/12")
    assert spec["clusterIPs"] == [spec["clusterIP"]]
    ports = [p.get("nodePort") for p in spec["ports"]]
    if node_ports:
        assert all(30000 <= p <= 32767 for p in ports)
        assert len(set(ports)) == 2
    else:
        assert ports == [None, None]
    assert body["status"] == {"loadBalancer": {}}


async def test_health_check_node_port_for_local_policy(client: httpx.AsyncClient) -> None:
    """A LoadBalancer with externalTrafficPolicy Local gets a healthCheckNodePort."""
    with trio.fail_after(5):
        body = (
            await client.post(
                SERVICES,
                json=service("web", 80, type_="LoadBalancer", externalTrafficPolicy="Local"),
            )
        ).json()
    assert 30000 <= body["spec"]["healthCheckNodePort"] <= 32767


async def test_requested_node_port_in_use_is_rejected(client: httpx.AsyncClient) -> None:
    """A nodePort already held by another Service is refused with upstream's message."""
    spec_port = [{"port": 80, "nodePort": 30080}]
    with trio.fail_after(5):
        first = await client.post(
            SERVICES,
            json={"metadata": {"name": "a"}, "spec": {"type": "NodePort", "ports": spec_port}},
        )
        second = await client.post(
            SERVICES,
            json={"metadata": {"name": "b"}, "spec": {"type": "NodePort", "ports": spec_port}},
        )
    assert first.status_code == 201
    assert second.status_code == 422
    assert second.json()["message"] == (
        'Service "b" is invalid: spec.ports[0].nodePort: Invalid value: 30080: provided port '
        "is already allocated"
    )


async def test_delete_releases_allocations(client: httpx.AsyncClient, server: ApiServer) -> None:
    """Deleting a Service gives its IP and node port back for reuse."""
    spec = {
        "type": "NodePort",
        "clusterIP": "10.96.5.5",
        "ports": [{"port": 80, "nodePort": 30080}],
    }
    with trio.fail_after(5):
        await client.post(SERVICES, json={"metadata": {"name": "a"}, "spec": spec})
        await client.delete(f"{SERVICES}/a")
        again = await client.post(SERVICES, json={"metadata": {"name": "b"}, "spec": spec})
    assert again.status_code == 201
    assert "10.96.5.5" in server.allocator.ips
    assert 30080 in server.allocator.ports


async def test_update_keeps_allocations_the_client_omitted(client: httpx.AsyncClient) -> None:
    """A PUT without clusterIP or nodePort keeps the allocated values (patchAllocatedValues)."""
    with trio.fail_after(5):
        created = (await client.post(SERVICES, json=service("web", 80, type_="NodePort"))).json()
        body = service("web", 80, type_="NodePort")
        body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
        updated = (await client.put(f"{SERVICES}/web", json=body)).json()
    assert updated["spec"]["clusterIP"] == created["spec"]["clusterIP"]
    assert updated["spec"]["ports"][0]["nodePort"] == created["spec"]["ports"][0]["nodePort"]


async def test_type_change_to_cluster_ip_releases_node_ports(
    client: httpx.AsyncClient, server: ApiServer
) -> None:
    """Switching a LoadBalancer to ClusterIP drops and releases its node ports."""
    with trio.fail_after(5):
        created = (
            await client.post(SERVICES, json=service("web", 80, type_="LoadBalancer"))
        ).json()
        port = created["spec"]["ports"][0]["nodePort"]
        changed = await client.patch(
            f"{SERVICES}/web",
            json={
                "spec": {
                    "type": "ClusterIP",
                    "externalTrafficPolicy": None,
                    "allocateLoadBalancerNodePorts": None,
                }
            },
            headers=MERGE,
        )
    assert changed.status_code == 200, changed.json()
    assert "nodePort" not in changed.json()["spec"]["ports"][0]
    assert port not in server.allocator.ports


async def test_headless_and_external_name(client: httpx.AsyncClient) -> None:
    """Headless Services keep clusterIP None; ExternalName gets no cluster IP at all."""
    with trio.fail_after(5):
        headless = (await client.post(SERVICES, json=service("h", 80, clusterIP="None"))).json()
        external = (
            await client.post(
                SERVICES,
                json={
                    "metadata": {"name": "x"},
                    "spec": {"type": "ExternalName", "externalName": "db.example.com"},
                },
            )
        ).json()
    assert headless["spec"]["clusterIP"] == "None"
    assert "clusterIP" not in external["spec"]


@pytest.mark.parametrize(
    ("type_", "spec"),
    [
        pytest.param("LoadBalancer", {"clusterIP": "None"}, id="lb-cluster-ip"),
        pytest.param("LoadBalancer", {"clusterIPs": ["None"]}, id="lb-cluster-ips"),
        pytest.param("NodePort", {"clusterIP": "None"}, id="node-port"),
    ],
)
async def test_headless_load_balancer_or_node_port_is_refused(
    client: httpx.AsyncClient, type_: str, spec: dict[str, object]
) -> None:
    """clusterIP None on a LoadBalancer or NodePort Service is a 422 with kube-apiserver's
    field error, and nothing is stored."""
    with trio.fail_after(5):
        response = await client.post(SERVICES, json=service("h", 80, type_=type_, **spec))
        missing = await client.get(f"{SERVICES}/h")
    assert response.status_code == 422
    status = response.json()
    assert status["message"] == (
        'Service "h" is invalid: spec.clusterIPs[0]: Invalid value: "None": '
        f"may not be set to 'None' for {type_} services"
    )
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": f"Invalid value: \"None\": may not be set to 'None' for {type_} services",
            "field": "spec.clusterIPs[0]",
        }
    ]
    assert missing.status_code == 404
