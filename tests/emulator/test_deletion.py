"""Deletion propagation (Foreground, Background, Orphan) and the ownerReferences collector."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from tests.helpers.emulator import MERGE
from trio_ccm_testbed.apiserver import ApiServer

DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def deployment(name: str = "web") -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }


def owned(name: str, *owners: dict[str, Any], block: bool = False, **meta: Any) -> dict[str, Any]:
    refs = [
        {
            "apiVersion": o["apiVersion"],
            "kind": o["kind"],
            "name": o["metadata"]["name"],
            "uid": o["metadata"]["uid"],
            **({"blockOwnerDeletion": True} if block else {}),
        }
        for o in owners
    ]
    return {"metadata": {"name": name, "ownerReferences": refs, **meta}, "data": {"k": "v"}}


@pytest.fixture
def server() -> ApiServer:
    return ApiServer(seed=1)


@pytest.fixture
async def client(server: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as c:
        yield c


async def create(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    with trio.fail_after(5):
        response = await client.post(path, json=body)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


async def delete(client: httpx.AsyncClient, path: str, policy: str | None = None) -> httpx.Response:
    body = {"propagationPolicy": policy} if policy else {}
    with trio.fail_after(5):
        return await client.request("DELETE", path, content=json.dumps(body))


async def exists(client: httpx.AsyncClient, path: str) -> bool:
    with trio.fail_after(5):
        return (await client.get(path)).status_code == 200


async def test_background_deletes_what_the_deployment_owns(client: httpx.AsyncClient) -> None:
    """Deleting a Deployment (Background, the default) deletes the ConfigMap it owns, and
    what that ConfigMap owns in turn."""
    web = await create(client, DEPLOYMENTS, deployment())
    child = await create(client, CONFIGMAPS, owned("child", web))
    await create(
        client, CONFIGMAPS, owned("grandchild", {**child, "apiVersion": "v1", "kind": "ConfigMap"})
    )
    response = await delete(client, f"{DEPLOYMENTS}/web")
    assert response.status_code == 200
    assert not await exists(client, f"{DEPLOYMENTS}/web")
    assert not await exists(client, f"{CONFIGMAPS}/child")
    assert not await exists(client, f"{CONFIGMAPS}/grandchild")


async def test_a_dependent_with_a_live_owner_only_loses_the_gone_reference(
    client: httpx.AsyncClient,
) -> None:
    """A ConfigMap owned by two Deployments outlives one of them, without its reference."""
    one = await create(client, DEPLOYMENTS, deployment("one"))
    two = await create(client, DEPLOYMENTS, deployment("two"))
    await create(client, CONFIGMAPS, owned("shared", one, two))
    await delete(client, f"{DEPLOYMENTS}/one")
    with trio.fail_after(5):
        shared = (await client.get(f"{CONFIGMAPS}/shared")).json()
    assert [r["name"] for r in shared["metadata"]["ownerReferences"]] == ["two"]


async def test_orphan_keeps_dependents_without_the_reference(client: httpx.AsyncClient) -> None:
    """Orphan deletes the owner and leaves its dependents, their references removed."""
    web = await create(client, DEPLOYMENTS, deployment())
    await create(client, CONFIGMAPS, owned("child", web))
    response = await delete(client, f"{DEPLOYMENTS}/web", "Orphan")
    assert response.status_code == 200
    assert not await exists(client, f"{DEPLOYMENTS}/web")
    with trio.fail_after(5):
        child = (await client.get(f"{CONFIGMAPS}/child")).json()
    assert "ownerReferences" not in child["metadata"]


async def test_foreground_waits_for_blocking_dependents(
    client: httpx.AsyncClient, server: ApiServer
) -> None:
    """Foreground keeps the owner (foregroundDeletion finalizer) while a blocking dependent
    is held by its own finalizer; when that goes, both go."""
    web = await create(client, DEPLOYMENTS, deployment())
    await create(
        client, CONFIGMAPS, owned("held", web, block=True, finalizers=["example.com/hold"])
    )
    response = await delete(client, f"{DEPLOYMENTS}/web", "Foreground")
    assert response.status_code == 200
    with trio.fail_after(5):
        owner = (await client.get(f"{DEPLOYMENTS}/web")).json()
        held = (await client.get(f"{CONFIGMAPS}/held")).json()
    assert owner["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert owner["metadata"]["deletionTimestamp"]
    assert held["metadata"]["deletionTimestamp"]
    with trio.fail_after(5):
        released = await client.patch(
            f"{CONFIGMAPS}/held", json={"metadata": {"finalizers": None}}, headers=MERGE
        )
    assert released.status_code == 200
    assert not await exists(client, f"{CONFIGMAPS}/held")
    assert not await exists(client, f"{DEPLOYMENTS}/web")


async def test_foreground_events_come_in_upstream_order(
    client: httpx.AsyncClient, server: ApiServer
) -> None:
    """A foreground delete is seen as the owner marked, the dependent deleted, the owner
    deleted."""
    web = await create(client, DEPLOYMENTS, deployment())
    await create(client, CONFIGMAPS, owned("child", web, block=True))
    rv = server.store.rv
    await delete(client, f"{DEPLOYMENTS}/web", "Foreground")
    events = sorted(
        (event.rv, event.type, event.obj["metadata"]["name"])
        for storage in server.store.storages.values()
        for event in storage.history
        if event.rv > rv
    )
    assert [(kind, name) for _, kind, name in events] == [
        ("MODIFIED", "web"),
        ("DELETED", "child"),
        ("DELETED", "web"),
    ]


@pytest.mark.parametrize(
    ("body", "query", "message"),
    [
        pytest.param(
            {"propagationPolicy": "Bogus"},
            "",
            'propagationPolicy: Unsupported value: "Bogus": supported values: "Foreground", '
            '"Background", "Orphan", "nil"',
            id="unknown-policy",
        ),
        pytest.param(
            {"propagationPolicy": "Orphan", "orphanDependents": True},
            "",
            'propagationPolicy: Invalid value: "Orphan": orphanDependents and '
            "deletionPropagation cannot be both set",
            id="both-set",
        ),
        pytest.param(
            {},
            "?dryRun=bogus",
            'dryRun: Unsupported value: []string{"bogus"}: supported values: "All"',
            id="dry-run",
        ),
    ],
)
async def test_bad_delete_options_are_invalid(
    client: httpx.AsyncClient, body: dict[str, Any], query: str, message: str
) -> None:
    """Bad DeleteOptions are a 422 naming DeleteOptions, and nothing is deleted."""
    await create(client, CONFIGMAPS, {"metadata": {"name": "cm"}})
    with trio.fail_after(5):
        response = await client.request(
            "DELETE", f"{CONFIGMAPS}/cm{query}", content=json.dumps(body)
        )
    assert response.status_code == 422
    assert response.json()["message"] == f'DeleteOptions.meta.k8s.io "" is invalid: {message}'
    assert await exists(client, f"{CONFIGMAPS}/cm")


async def test_policy_in_the_query_is_honoured(client: httpx.AsyncClient) -> None:
    """propagationPolicy may come as a query parameter (Orphan keeps the dependent)."""
    web = await create(client, DEPLOYMENTS, deployment())
    await create(client, CONFIGMAPS, owned("child", web))
    with trio.fail_after(5):
        response = await client.delete(f"{DEPLOYMENTS}/web?propagationPolicy=Orphan")
    assert response.status_code == 200
    assert await exists(client, f"{CONFIGMAPS}/child")


async def test_owner_of_an_unserved_kind_is_never_presumed_gone(
    client: httpx.AsyncClient,
) -> None:
    """A dependent whose other owner is of a kind the emulator does not serve is kept."""
    web = await create(client, DEPLOYMENTS, deployment())
    foreign = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "uid": "0000-widget"},
    }
    await create(client, CONFIGMAPS, owned("child", web, foreign))
    await delete(client, f"{DEPLOYMENTS}/web")
    with trio.fail_after(5):
        child = (await client.get(f"{CONFIGMAPS}/child")).json()
    assert [r["kind"] for r in child["metadata"]["ownerReferences"]] == ["Widget"]
