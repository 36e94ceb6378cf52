"""PATCH over the API: merge, JSON and strategic merge patches with kind-specific keys."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from tests.helpers.emulator import (
    JSON_PATCH,
    MERGE,
    NODES,
    SERVICES,
    STRATEGIC,
    node,
    service,
)


async def test_json_patch_test_operation_failure(client: httpx.AsyncClient) -> None:
    """A failing JSON-patch `test` is 422 with upstream's generic message and the cause."""
    with trio.fail_after(5):
        await client.post(NODES, json=node("n1"))
        response = await client.patch(
            f"{NODES}/n1",
            json=[
                {"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
                {"op": "add", "path": "/metadata/labels", "value": {"a": "b"}},
            ],
            headers=JSON_PATCH,
        )
        unchanged = await client.get(f"{NODES}/n1")
    assert response.status_code == 422
    status = response.json()
    assert status["message"] == "the server rejected our request due to an error in our request"
    assert status["details"]["causes"] == [
        {
            "reason": "UnexpectedServerResponse",
            "message": "testing value /metadata/resourceVersion failed: test failed",
        }
    ]
    assert "labels" not in unchanged.json()["metadata"]


async def test_json_patch_finalizer_with_test_precondition(client: httpx.AsyncClient) -> None:
    """A finalizer removal guarded by `test` succeeds when the value is still there."""
    body = node("n1")
    body["metadata"]["finalizers"] = ["a/x", "b/y"]
    with trio.fail_after(5):
        await client.post(NODES, json=body)
        response = await client.patch(
            f"{NODES}/n1",
            json=[
                {"op": "test", "path": "/metadata/finalizers/0", "value": "a/x"},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ],
            headers=JSON_PATCH,
        )
    assert response.json()["metadata"]["finalizers"] == ["b/y"]


async def test_patch_with_stale_resource_version_conflicts(client: httpx.AsyncClient) -> None:
    """A merge patch that carries a resourceVersion is a precondition."""
    with trio.fail_after(5):
        await client.post(NODES, json=node("n1"))
        response = await client.patch(
            f"{NODES}/n1",
            json={"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}},
            headers=MERGE,
        )
    assert response.status_code == 409


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        pytest.param(
            {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.9"}]}},
            [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.9"}],
            id="merge-by-type",
        ),
        pytest.param(
            {"status": {"addresses": [{"type": "Hostname", "$patch": "delete"}]}},
            [{"type": "InternalIP", "address": "10.0.0.1"}],
            id="delete-directive",
        ),
    ],
)
async def test_strategic_patch_node_addresses(
    client: httpx.AsyncClient, patch: dict[str, Any], expected: list[dict[str, str]]
) -> None:
    """Node status.addresses merge by type in a strategic patch (as upstream, quirks too)."""
    status = {
        "addresses": [
            {"type": "Hostname", "address": "n1"},
            {"type": "InternalIP", "address": "10.0.0.1"},
        ]
    }
    with trio.fail_after(5):
        await client.post(NODES, json={**node("n1"), "status": status})
        response = await client.patch(f"{NODES}/n1/status", json=patch, headers=STRATEGIC)
    assert response.json()["status"]["addresses"] == expected


async def test_strategic_patch_conditions_and_finalizers(client: httpx.AsyncClient) -> None:
    """Conditions merge by type; finalizers merge as a set."""
    body = node("n1")
    body["metadata"]["finalizers"] = ["a/x"]
    body["status"] = {
        "conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "NetworkUnavailable", "status": "True"},
        ]
    }
    with trio.fail_after(5):
        await client.post(NODES, json=body)
        response = await client.patch(
            f"{NODES}/n1/status",
            json={
                "metadata": {"finalizers": ["b/y"]},
                "status": {"conditions": [{"type": "NetworkUnavailable", "status": "False"}]},
            },
            headers=STRATEGIC,
        )
    result = response.json()
    assert result["metadata"]["finalizers"] == ["a/x", "b/y"]
    assert result["status"]["conditions"] == [
        {"type": "Ready", "status": "False"},
        {"type": "NetworkUnavailable", "status": "False"},
    ]


async def test_strategic_patch_taints_replace(client: httpx.AsyncClient) -> None:
    """spec.taints has no merge strategy upstream, so a strategic patch replaces the list."""
    with trio.fail_after(5):
        await client.post(NODES, json=node("n1", taints=[{"key": "a", "effect": "NoSchedule"}]))
        response = await client.patch(
            f"{NODES}/n1",
            json={"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}},
            headers=STRATEGIC,
        )
    assert response.json()["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]


async def test_strategic_patch_service_ports_by_port_and_protocol(
    client: httpx.AsyncClient,
) -> None:
    """Service ports merge by port and protocol: a UDP twin is added, not merged."""
    with trio.fail_after(5):
        await client.post(SERVICES, json=service("web", 53))
        response = await client.patch(
            f"{SERVICES}/web",
            json={
                "spec": {
                    "ports": [
                        {"name": "dns-udp", "port": 53, "protocol": "UDP"},
                        {"port": 53, "name": "dns"},
                    ]
                }
            },
            headers=STRATEGIC,
        )
    ports = response.json()["spec"]["ports"]
    assert [(p["port"], p["protocol"], p.get("name")) for p in ports] == [
        (53, "TCP", "dns"),
        (53, "UDP", "dns-udp"),
    ]


@pytest.mark.parametrize(
    ("content_type", "code"),
    [
        pytest.param("application/json", 415, id="plain-json"),
    ],
)
async def test_unsupported_patch_types(
    client: httpx.AsyncClient, content_type: str, code: int
) -> None:
    """Patch content types other than merge, JSON, strategic and apply are 415."""
    with trio.fail_after(5):
        await client.post(NODES, json=node("n1"))
        response = await client.patch(
            f"{NODES}/n1", content=b"{}", headers={"content-type": content_type}
        )
    assert response.status_code == code
    assert response.json()["reason"] == "UnsupportedMediaType"


async def test_malformed_json_patch_is_bad_request(client: httpx.AsyncClient) -> None:
    """A JSON patch that is not a list of operations is 400."""
    with trio.fail_after(5):
        await client.post(NODES, json=node("n1"))
        response = await client.patch(f"{NODES}/n1", json={"op": "add"}, headers=JSON_PATCH)
    assert response.status_code == 400
