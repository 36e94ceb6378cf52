"""422 Invalid answers name the field, with upstream's message texts."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from tests.helpers.emulator import MERGE, NODES, SERVICES, node, service

DNS1035 = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
    "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
    "[a-z0-9])?)*')"
)


def _svc(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web"}, "spec": spec}


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        pytest.param(
            SERVICES,
            service("Web_1", 80),
            f'Service "Web_1" is invalid: metadata.name: Invalid value: "Web_1": {DNS1035}',
            id="service-name-dns1035",
        ),
        pytest.param(
            NODES,
            node("Node_1"),
            f'Node "Node_1" is invalid: metadata.name: Invalid value: "Node_1": '
            f"{DNS1123_SUBDOMAIN}",
            id="node-name-subdomain",
        ),
        pytest.param(
            NODES,
            {"metadata": {}},
            'Node "" is invalid: metadata.name: Required value: name or generateName is required',
            id="name-required",
        ),
        pytest.param(
            SERVICES,
            _svc(ports=[{"port": 70000}]),
            # targetPort defaults to port before validation, so it is reported too.
            'Service "web" is invalid: [spec.ports[0].port: Invalid value: 70000: must be '
            "between 1 and 65535, inclusive, spec.ports[0].targetPort: Invalid value: 70000: "
            "must be between 1 and 65535, inclusive]",
            id="port-range",
        ),
        pytest.param(
            SERVICES,
            _svc(),
            'Service "web" is invalid: spec.ports: Required value',
            id="ports-required",
        ),
        pytest.param(
            SERVICES,
            _svc(ports=[{"name": "a", "port": 80}, {"name": "b", "port": 80}]),
            'Service "web" is invalid: spec.ports[1]: Duplicate value: core.ServicePort{Name:'
            '"", Protocol:"TCP", AppProtocol:(*string)(nil), Port:80, TargetPort:intstr.'
            'IntOrString{Type:0, IntVal:0, StrVal:""}, NodePort:0}',
            id="duplicate-port",
        ),
        pytest.param(
            SERVICES,
            _svc(ports=[{"port": 80, "protocol": "ICMP"}]),
            'Service "web" is invalid: spec.ports[0].protocol: Unsupported value: "ICMP": '
            'supported values: "SCTP", "TCP", "UDP"',
            id="protocol",
        ),
        pytest.param(
            SERVICES,
            _svc(type="Magic", ports=[{"port": 80}]),
            'Service "web" is invalid: spec.type: Unsupported value: "Magic": supported '
            'values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"',
            id="type",
        ),
        pytest.param(
            SERVICES,
            _svc(type="NodePort", ports=[{"port": 80, "nodePort": 40000}]),
            'Service "web" is invalid: spec.ports[0].nodePort: Invalid value: 40000: provided '
            "port is not in the valid range. The range of valid ports is 30000-32767",
            id="node-port-range",
        ),
        pytest.param(
            SERVICES,
            _svc(type="LoadBalancer", ports=[{"port": 80}], loadBalancerSourceRanges=["x"]),
            'Service "web" is invalid: spec.loadBalancerSourceRanges[0]: Invalid value: "x": '
            "must be a list of IP ranges. For example, 10.240.0.0/24,10.250.0.0/24 ",
            id="source-ranges",
        ),
        pytest.param(
            NODES,
            node("n1", taints=[{"key": "k", "effect": "Sometimes"}]),
            'Node "n1" is invalid: spec.taints[0].effect: Unsupported value: "Sometimes": '
            'supported values: "NoExecute", "NoSchedule", "PreferNoSchedule"',
            id="taint-effect",
        ),
        pytest.param(
            NODES,
            {"metadata": {"name": "n1", "annotations": {"a": "x" * (256 * 1024)}}},
            'Node "n1" is invalid: metadata.annotations: Too long: may not be more than '
            "262144 bytes",
            id="annotations-size",
        ),
        pytest.param(
            "/apis/coordination.k8s.io/v1/namespaces/default/leases",
            {"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0}},
            'Lease.coordination.k8s.io "l" is invalid: spec.leaseDurationSeconds: Invalid '
            "value: 0: must be greater than 0",
            id="lease-duration",
        ),
    ],
)
async def test_invalid_objects_are_rejected(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], message: str
) -> None:
    """Invalid creates answer 422 Invalid with the field and upstream's text."""
    with trio.fail_after(5):
        response = await client.post(path, json=body)
    assert response.status_code == 422
    status = response.json()
    assert status["reason"] == "Invalid"
    assert status["message"] == message
    assert status["details"]["causes"][0]["field"]


async def test_several_errors_are_listed_together(client: httpx.AsyncClient) -> None:
    """Several field errors come as one bracketed list and one cause each."""
    with trio.fail_after(5):
        response = await client.post(
            SERVICES, json=_svc(ports=[{"port": 0}, {"port": 80, "protocol": "X"}])
        )
    status = response.json()
    assert status["message"].startswith('Service "web" is invalid: [')
    assert [c["field"] for c in status["details"]["causes"]] == [
        "spec.ports[0].name",
        "spec.ports[0].port",
        "spec.ports[0].targetPort",
        "spec.ports[1].name",
        "spec.ports[1].protocol",
    ]


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        pytest.param(
            {"spec": {"providerID": "sim://other"}},
            'Node "n1" is invalid: spec.providerID: Forbidden: node updates may not change '
            'providerID except from "" to valid',
            id="provider-id",
        ),
        pytest.param(
            {"spec": {"podCIDRs": ["10.0.9.0/24"], "podCIDR": "10.0.9.0/24"}},
            'Node "n1" is invalid: spec.podCIDRs: Forbidden: node updates may not change '
            'podCIDR except from "" to valid',
            id="pod-cidr",
        ),
    ],
)
async def test_node_immutable_fields(
    client: httpx.AsyncClient, patch: dict[str, Any], message: str
) -> None:
    """providerID and podCIDRs may be set once, never changed."""
    with trio.fail_after(5):
        await client.post(NODES, json=node("n1"))
        first = await client.patch(
            f"{NODES}/n1",
            json={"spec": {"providerID": "sim://n1", "podCIDR": "10.0.1.0/24"}},
            headers=MERGE,
        )
        second = await client.patch(f"{NODES}/n1", json=patch, headers=MERGE)
    assert first.status_code == 200
    assert first.json()["spec"]["podCIDRs"] == ["10.0.1.0/24"]
    assert second.status_code == 422
    assert second.json()["message"] == message


async def test_cluster_ip_is_immutable(client: httpx.AsyncClient) -> None:
    """A Service's clusterIP may not change once allocated."""
    with trio.fail_after(5):
        created = (await client.post(SERVICES, json=service("web", 80))).json()
        response = await client.patch(
            f"{SERVICES}/web", json={"spec": {"clusterIP": "10.96.0.99"}}, headers=MERGE
        )
    assert created["spec"]["clusterIP"]
    assert response.status_code == 422
    assert response.json()["message"] == (
        'Service "web" is invalid: spec.clusterIPs[0]: Invalid value: []string{"10.96.0.99"}: '
        "may not change once set"
    )


async def test_ingress_status_is_validated(client: httpx.AsyncClient) -> None:
    """status.loadBalancer.ingress IPs are validated on the status subresource."""
    with trio.fail_after(5):
        await client.post(SERVICES, json=service("web", 80, type_="LoadBalancer"))
        response = await client.patch(
            f"{SERVICES}/web/status",
            json={"status": {"loadBalancer": {"ingress": [{"ip": "not-an-ip"}]}}},
            headers=MERGE,
        )
    assert response.status_code == 422
    assert response.json()["details"]["causes"][0]["field"] == ("status.loadBalancer.ingress[0].ip")
