"""Small builders for the emulator's own tests: content types, paths, a Node, a Service, and
the few HTTP steps (create, patch, delete, list) their checks are made of."""

from __future__ import annotations

from typing import Any

import httpx

MERGE = {"content-type": "application/merge-patch+json"}
JSON_PATCH = {"content-type": "application/json-patch+json"}
STRATEGIC = {"content-type": "application/strategic-merge-patch+json"}

NODES = "/api/v1/nodes"
SERVICES = "/api/v1/namespaces/default/services"


def node(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": spec}


def service(name: str, *ports: int, type_: str = "ClusterIP", **spec: Any) -> dict[str, Any]:
    listed = (
        [{"name": f"p{p}", "port": p} for p in ports]
        if len(ports) > 1
        else [{"port": p} for p in ports]
    )
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"type": type_, "ports": listed, **spec},
    }


def node_body(
    name: str, labels: dict[str, str] | None = None, *, unschedulable: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    spec: dict[str, Any] = {"unschedulable": True} if unschedulable else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec}


async def create(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(path, json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def create_node(
    client: httpx.AsyncClient,
    name: str,
    labels: dict[str, str] | None = None,
    *,
    unschedulable: bool = False,
) -> dict[str, Any]:
    return await create(client, NODES, node_body(name, labels, unschedulable=unschedulable))


async def patch_node(client: httpx.AsyncClient, name: str, patch: dict[str, Any]) -> dict[str, Any]:
    response = await client.patch(f"{NODES}/{name}", json=patch, headers=MERGE)
    assert response.status_code == 200, response.text
    patched: dict[str, Any] = response.json()
    return patched


async def delete_node(client: httpx.AsyncClient, name: str) -> None:
    response = await client.delete(f"{NODES}/{name}")
    assert response.status_code == 200, response.text


async def list_json(
    client: httpx.AsyncClient, path: str, **params: str
) -> tuple[int, dict[str, Any]]:
    response = await client.get(path, params=params)
    body: dict[str, Any] = response.json()
    return response.status_code, body


async def list_ok(client: httpx.AsyncClient, path: str, **params: str) -> dict[str, Any]:
    code, body = await list_json(client, path, **params)
    assert code == 200, body
    return body


def names(body: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in body["items"]]


async def seed_nodes(client: httpx.AsyncClient, count: int, **labels: str) -> list[dict[str, Any]]:
    return [await create_node(client, f"n{i}", labels or None) for i in range(count)]
