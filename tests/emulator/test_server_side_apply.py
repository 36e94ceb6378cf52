"""Server-side apply and managedFields: ownership, conflicts, list merging, removal."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from tests.helpers.emulator import MERGE
from trio_ccm_testbed.apiserver import ApiServer

APPLY = {"content-type": "application/apply-patch+yaml"}
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
SERVICES = "/api/v1/namespaces/default/services"


def deployment(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {}}]},
            },
            **spec,
        },
    }


def service(*ports: dict[str, Any], name: str = "web") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"ports": list(ports), "selector": {"app": name}},
    }


def entries(obj: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """managedFields by (manager, operation)."""
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"]["managedFields"]}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    server = ApiServer(seed=1)
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as c:
        yield c


async def apply(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], manager: str, *, force: bool = False
) -> httpx.Response:
    query = f"?fieldManager={manager}" + ("&force=true" if force else "")
    with trio.fail_after(5):
        return await client.patch(path + query, content=json.dumps(body), headers=APPLY)


async def test_create_records_what_the_creator_set_and_defaulted(client: httpx.AsyncClient) -> None:
    """A create owns what it sent and what defaulting added, in upstream's fieldsV1 form;
    server-owned metadata is owned by nobody."""
    with trio.fail_after(5):
        response = await client.post(
            f"{DEPLOYMENTS}?fieldManager=kubectl-create", json=deployment()
        )
    assert response.status_code == 201, response.text
    (entry,) = response.json()["metadata"]["managedFields"]
    assert {k: v for k, v in entry.items() if k not in ("fieldsV1", "time")} == {
        "manager": "kubectl-create",
        "operation": "Update",
        "apiVersion": "apps/v1",
        "fieldsType": "FieldsV1",
    }
    assert entry["fieldsV1"] == {
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {
            "f:progressDeadlineSeconds": {},
            "f:replicas": {},
            "f:revisionHistoryLimit": {},
            "f:selector": {},
            "f:strategy": {
                "f:rollingUpdate": {".": {}, "f:maxSurge": {}, "f:maxUnavailable": {}},
                "f:type": {},
            },
            "f:template": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {
                    "f:containers": {
                        'k:{"name":"nginx"}': {
                            ".": {},
                            "f:image": {},
                            "f:imagePullPolicy": {},
                            "f:name": {},
                            "f:resources": {},
                            "f:terminationMessagePath": {},
                            "f:terminationMessagePolicy": {},
                        }
                    },
                    "f:dnsPolicy": {},
                    "f:restartPolicy": {},
                    "f:schedulerName": {},
                    "f:securityContext": {},
                    "f:terminationGracePeriodSeconds": {},
                },
            },
        },
    }


async def test_without_field_manager_the_user_agent_names_the_manager(
    client: httpx.AsyncClient,
) -> None:
    """A write that names no fieldManager is owned by its User-Agent's first segment."""
    with trio.fail_after(5):
        response = await client.post(
            "/api/v1/namespaces/default/configmaps",
            json={"metadata": {"name": "cm"}, "data": {"a": "1"}},
            headers={"user-agent": "kubectl-1.33/v1.33.1 (linux/amd64)"},
        )
    assert [e["manager"] for e in response.json()["metadata"]["managedFields"]] == ["kubectl-1.33"]


async def test_patch_takes_over_the_fields_it_changes(client: httpx.AsyncClient) -> None:
    """A patch by another manager moves the changed fields to it and leaves the rest."""
    with trio.fail_after(5):
        await client.post(f"{DEPLOYMENTS}?fieldManager=creator", json=deployment())
        response = await client.patch(
            f"{DEPLOYMENTS}/web?fieldManager=scaler", json={"spec": {"replicas": 3}}, headers=MERGE
        )
    owned = entries(response.json())
    assert owned[("scaler", "Update")] == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" not in owned[("creator", "Update")]["f:spec"]
    assert "f:revisionHistoryLimit" in owned[("creator", "Update")]["f:spec"]


async def test_apply_creates_and_owns_exactly_its_configuration(client: httpx.AsyncClient) -> None:
    """An apply to a missing object creates it (201) and owns only what it sent."""
    response = await apply(client, f"{DEPLOYMENTS}/web", deployment(), "applier")
    assert response.status_code == 201, response.text
    owned = entries(response.json())
    assert list(owned) == [("applier", "Apply")]
    spec = owned[("applier", "Apply")]["f:spec"]
    assert "f:revisionHistoryLimit" not in spec  # defaulted, not applied
    assert spec["f:template"]["f:spec"]["f:containers"] == {
        'k:{"name":"nginx"}': {".": {}, "f:image": {}, "f:name": {}, "f:resources": {}}
    }
    assert response.json()["spec"]["revisionHistoryLimit"] == 10


async def test_apply_needs_a_field_manager(client: httpx.AsyncClient) -> None:
    """An apply without fieldManager is 422 on PatchOptions, as upstream."""
    with trio.fail_after(5):
        response = await client.patch(
            f"{DEPLOYMENTS}/web", content=json.dumps(deployment()), headers=APPLY
        )
    assert response.status_code == 422
    assert response.json()["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for '
        "apply patch"
    )


async def test_conflict_names_the_manager_and_field_and_force_takes_it(
    client: httpx.AsyncClient,
) -> None:
    """Changing a field another manager owns is 409 naming both; force=true moves it."""
    with trio.fail_after(5):
        await client.post(f"{DEPLOYMENTS}?fieldManager=kubectl-create", json=deployment())
    config = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}
    config["spec"] = {"replicas": 3}
    refused = await apply(client, f"{DEPLOYMENTS}/web", config, "ops")
    assert refused.status_code == 409
    assert refused.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": (
            'Apply failed with 1 conflict: conflict with "kubectl-create" using apps/v1: '
            ".spec.replicas"
        ),
        "reason": "Conflict",
        "details": {
            "causes": [
                {
                    "reason": "FieldManagerConflict",
                    "message": 'conflict with "kubectl-create" using apps/v1',
                    "field": ".spec.replicas",
                }
            ]
        },
        "code": 409,
    }
    forced = await apply(client, f"{DEPLOYMENTS}/web", config, "ops", force=True)
    assert forced.status_code == 200
    assert forced.json()["spec"]["replicas"] == 3
    owned = entries(forced.json())
    assert owned[("ops", "Apply")] == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" not in owned[("kubectl-create", "Update")]["f:spec"]


async def test_several_conflicts_are_listed_per_manager(client: httpx.AsyncClient) -> None:
    """Conflicts with two managers are grouped under each, managers sorted by name."""
    with trio.fail_after(5):
        await client.post(f"{DEPLOYMENTS}?fieldManager=zeta", json=deployment())
        await client.patch(
            f"{DEPLOYMENTS}/web?fieldManager=alpha",
            json={"spec": {"minReadySeconds": 5}},
            headers=MERGE,
        )
    config = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}
    config["spec"] = {"replicas": 2, "minReadySeconds": 9, "paused": True}
    refused = await apply(client, f"{DEPLOYMENTS}/web", config, "ops")
    assert refused.status_code == 409
    assert refused.json()["message"] == (
        "Apply failed with 2 conflicts: "
        'conflicts with "alpha" using apps/v1:\n- .spec.minReadySeconds\n'
        'conflicts with "zeta" using apps/v1:\n- .spec.replicas'
    )


async def test_same_value_is_shared_without_conflict(client: httpx.AsyncClient) -> None:
    """Applying the value a field already has is no conflict: both managers own it."""
    with trio.fail_after(5):
        await client.post(f"{DEPLOYMENTS}?fieldManager=creator", json=deployment())
    config = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}
    config["spec"] = {"replicas": 1}
    response = await apply(client, f"{DEPLOYMENTS}/web", config, "ops")
    assert response.status_code == 200, response.text
    owned = entries(response.json())
    assert "f:replicas" in owned[("creator", "Update")]["f:spec"]
    assert owned[("ops", "Apply")] == {"f:spec": {"f:replicas": {}}}


async def test_fields_dropped_from_the_configuration_are_removed(client: httpx.AsyncClient) -> None:
    """A label the applier set before and no longer sets is removed; one another manager
    owns is kept."""
    first = deployment()
    first["metadata"]["labels"] = {"app": "web", "tier": "front", "team": "a"}
    await apply(client, f"{DEPLOYMENTS}/web", first, "ops")
    with trio.fail_after(5):
        await client.patch(
            f"{DEPLOYMENTS}/web?fieldManager=teams",
            json={"metadata": {"labels": {"team": "b"}}},
            headers=MERGE,
        )
    second = deployment()
    response = await apply(client, f"{DEPLOYMENTS}/web", second, "ops")
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["labels"] == {"app": "web", "team": "b"}


async def test_ports_merge_by_port_and_protocol(client: httpx.AsyncClient) -> None:
    """Two appliers each own one port of a Service: both ports stay, each with its owner,
    and the protocol key takes its default."""
    http = {"name": "http", "port": 80, "targetPort": 8080}
    https = {"name": "https", "port": 443, "targetPort": 8443}
    await apply(client, f"{SERVICES}/web", service(http), "one")
    response = await apply(client, f"{SERVICES}/web", service(https), "two")
    assert response.status_code == 200, response.text
    ports = response.json()["spec"]["ports"]
    assert [(p["name"], p["port"], p["protocol"]) for p in ports] == [
        ("http", 80, "TCP"),
        ("https", 443, "TCP"),
    ]
    owned = entries(response.json())
    assert list(owned[("two", "Apply")]["f:spec"]["f:ports"]) == ['k:{"port":443,"protocol":"TCP"}']
    assert 'k:{"port":80,"protocol":"TCP"}' in owned[("one", "Apply")]["f:spec"]["f:ports"]


async def test_finalizers_merge_as_a_set(client: httpx.AsyncClient) -> None:
    """Finalizers applied by two managers are kept as a set, each item owned by its applier."""
    config = service({"port": 80})
    config["metadata"]["finalizers"] = ["example.com/a"]
    await apply(client, f"{SERVICES}/web", config, "one")
    second = service({"port": 80})
    second["metadata"]["finalizers"] = ["example.com/b"]
    response = await apply(client, f"{SERVICES}/web", second, "two")
    assert response.json()["metadata"]["finalizers"] == ["example.com/a", "example.com/b"]
    assert entries(response.json())[("two", "Apply")]["f:metadata"] == {
        "f:finalizers": {'v:"example.com/b"': {}}
    }


async def test_undeclared_field_in_an_apply_is_refused(client: httpx.AsyncClient) -> None:
    """An apply with a field the schema lacks fails as upstream's typed conversion does."""
    config = service({"port": 80})
    config["spec"]["bogus"] = 1
    response = await apply(client, f"{SERVICES}/web", config, "one")
    assert response.status_code == 500
    assert response.json()["message"] == (
        "failed to create typed patch object (default/web; /v1, Kind=Service): .spec.bogus: "
        "field not declared in schema"
    )
    assert "reason" not in response.json()


async def test_managed_fields_in_an_apply_are_refused(client: httpx.AsyncClient) -> None:
    """An applied configuration may not carry managedFields."""
    config = service({"port": 80})
    config["metadata"]["managedFields"] = [{"manager": "x"}]
    response = await apply(client, f"{SERVICES}/web", config, "one")
    assert response.status_code == 400
    assert response.json()["message"] == "metadata.managedFields must be nil"


async def test_status_apply_owns_status_only(client: httpx.AsyncClient) -> None:
    """An apply through /status changes the status and records the subresource."""
    await apply(client, f"{SERVICES}/web", service({"port": 80}), "one")
    status = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}},
    }
    response = await apply(client, f"{SERVICES}/web/status", status, "ccm")
    assert response.status_code == 200, response.text
    assert response.json()["status"]["loadBalancer"]["ingress"] == [{"ip": "203.0.113.7"}]
    (entry,) = [e for e in response.json()["metadata"]["managedFields"] if e["manager"] == "ccm"]
    assert entry["subresource"] == "status"
    assert entry["fieldsV1"] == {
        "f:status": {"f:loadBalancer": {"f:ingress": {}}},
    }


async def test_objects_without_managed_fields_get_a_before_first_apply_owner(
    client: httpx.AsyncClient,
) -> None:
    """An object nobody managed yet (created through the Python API) gets its fields owned
    by `before-first-apply`, so an apply that changes them conflicts."""
    server = ApiServer(seed=1)
    server.create(service({"port": 80}))
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as other:
        config = service({"port": 80, "targetPort": 9090})
        refused = await apply(other, f"{SERVICES}/web", config, "one")
    assert refused.status_code == 409
    assert '"before-first-apply" using v1' in refused.json()["message"]


async def test_removed_fields_leave_every_owner_and_empty_entries_go(
    client: httpx.AsyncClient,
) -> None:
    """A field an update removes is owned by nobody after it; an entry left with nothing
    goes; a member that gains children stays a member ("." kept)."""
    with trio.fail_after(5):
        await client.post(
            "/api/v1/namespaces/default/configmaps?fieldManager=one",
            json={"metadata": {"name": "cm"}, "data": {"a": "1"}},
        )
        await client.patch(
            "/api/v1/namespaces/default/configmaps/cm?fieldManager=two",
            json={"metadata": {"labels": {"x": "y"}}},
            headers=MERGE,
        )
        response = await client.patch(
            "/api/v1/namespaces/default/configmaps/cm?fieldManager=three",
            json={"metadata": {"labels": {"x": None}}, "data": {"b": "2"}},
            headers=MERGE,
        )
    owned = entries(response.json())
    assert ("two", "Update") not in owned
    assert owned[("one", "Update")] == {"f:data": {".": {}, "f:a": {}}}
    assert owned[("three", "Update")] == {"f:data": {"f:b": {}}}
    assert response.json()["metadata"].get("labels") is None
