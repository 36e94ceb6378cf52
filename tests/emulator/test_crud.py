"""Create, read, update, delete: metadata, optimistic concurrency, finalizers, subresources."""

from __future__ import annotations

import httpx
import pytest
import trio

from tests.helpers.emulator import MERGE, NODES, SERVICES, node, service
from trio_ccm_testbed.apiserver import ApiServer


async def test_create_assigns_server_metadata(client: httpx.AsyncClient) -> None:
    """A create answers 201 with uid, creationTimestamp and a fresh resourceVersion."""
    with trio.fail_after(5):
        before = int((await client.get(NODES)).json()["metadata"]["resourceVersion"])
        response = await client.post(NODES, json=node("n1"))
    assert response.status_code == 201
    body = response.json()
    assert list(body)[:3] == ["kind", "apiVersion", "metadata"]
    meta = body["metadata"]
    assert len(meta["uid"]) == 36
    assert meta["creationTimestamp"].endswith("Z")
    assert int(meta["resourceVersion"]) == before + 1


async def test_generate_name_appends_five_characters(client: httpx.AsyncClient) -> None:
    """generateName gets a five-character suffix, as upstream's name generator does."""
    body = {"metadata": {"generateName": "web-"}, "spec": {"ports": [{"port": 80}]}}
    with trio.fail_after(5):
        response = await client.post(SERVICES, json=body)
    name = response.json()["metadata"]["name"]
    assert response.status_code == 201
    assert name.startswith("web-")
    assert len(name) == len("web-") + 5


async def test_create_twice_is_already_exists(client: httpx.AsyncClient) -> None:
    """A second create of the same name is 409 AlreadyExists with upstream's Status."""
    with trio.fail_after(5):
        await client.post(NODES, json=node("n1"))
        response = await client.post(NODES, json=node("n1"))
    assert response.status_code == 409
    assert response.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'nodes "n1" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "n1", "kind": "nodes"},
        "code": 409,
    }


@pytest.mark.parametrize(
    ("path", "message"),
    [
        pytest.param(f"{NODES}/nope", 'nodes "nope" not found', id="node"),
        pytest.param(f"{SERVICES}/nope", 'services "nope" not found', id="service"),
        pytest.param(
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/nope",
            'leases.coordination.k8s.io "nope" not found',
            id="lease-group",
        ),
        pytest.param(
            "/api/v1/widgets",
            "the server could not find the requested resource",
            id="unknown-resource",
        ),
    ],
)
async def test_missing_objects_are_not_found(
    client: httpx.AsyncClient, path: str, message: str
) -> None:
    """Reads of missing objects answer 404 NotFound naming the object."""
    with trio.fail_after(5):
        response = await client.get(path)
    assert response.status_code == 404
    assert response.json()["reason"] == "NotFound"
    assert response.json()["message"] == message


async def test_create_in_missing_namespace_is_not_found(client: httpx.AsyncClient) -> None:
    """A namespaced create into a namespace that does not exist is 404 for the namespace."""
    with trio.fail_after(5):
        response = await client.post(
            "/api/v1/namespaces/ghost/configmaps", json={"metadata": {"name": "c"}}
        )
    assert response.status_code == 404
    assert response.json()["message"] == 'namespaces "ghost" not found'


async def test_update_with_stale_resource_version_conflicts(client: httpx.AsyncClient) -> None:
    """A PUT carrying an old resourceVersion is 409 Conflict; the current one succeeds."""
    with trio.fail_after(5):
        created = (await client.post(NODES, json=node("n1"))).json()
        await client.patch(f"{NODES}/n1", json={"metadata": {"labels": {"a": "1"}}}, headers=MERGE)
        stale = await client.put(f"{NODES}/n1", json=created)
        current = (await client.get(f"{NODES}/n1")).json()
        current["metadata"]["labels"]["b"] = "2"
        fresh = await client.put(f"{NODES}/n1", json=current)
    assert stale.status_code == 409
    assert stale.json()["reason"] == "Conflict"
    assert stale.json()["message"] == (
        'Operation cannot be fulfilled on nodes "n1": the object has been modified; please '
        "apply your changes to the latest version and try again"
    )
    assert fresh.status_code == 200
    assert fresh.json()["metadata"]["labels"] == {"a": "1", "b": "2"}


async def test_update_without_resource_version_is_unconditional(
    client: httpx.AsyncClient,
) -> None:
    """A PUT without resourceVersion overwrites (upstream allows unconditional updates)."""
    with trio.fail_after(5):
        await client.post(NODES, json=node("n1"))
        response = await client.put(f"{NODES}/n1", json=node("n1", unschedulable=True))
    assert response.status_code == 200
    assert response.json()["spec"]["unschedulable"] is True


async def test_update_name_mismatch_is_bad_request(client: httpx.AsyncClient) -> None:
    """A PUT whose body names another object is 400 with upstream's message."""
    with trio.fail_after(5):
        await client.post(NODES, json=node("n1"))
        response = await client.put(f"{NODES}/n1", json=node("n2"))
    assert response.status_code == 400
    assert response.json()["message"] == (
        "the name of the object (n2) does not match the name on the URL (n1)"
    )


async def test_noop_update_keeps_resource_version(client: httpx.AsyncClient) -> None:
    """An update that changes nothing writes nothing: the resourceVersion stays."""
    with trio.fail_after(5):
        created = (await client.post(NODES, json=node("n1"))).json()
        response = await client.patch(
            f"{NODES}/n1", json={"metadata": {"labels": None}}, headers=MERGE
        )
    assert (
        response.json()["metadata"]["resourceVersion"] == (created["metadata"]["resourceVersion"])
    )


async def test_server_fields_cannot_be_overwritten(client: httpx.AsyncClient) -> None:
    """uid may not change and creationTimestamp is kept whatever the client sends."""
    with trio.fail_after(5):
        created = (await client.post(NODES, json=node("n1"))).json()
        body = dict(created)
        body["metadata"] = {**created["metadata"], "creationTimestamp": "2000-01-01T00:00:00Z"}
        kept = await client.put(f"{NODES}/n1", json=body)
        body["metadata"] = {**kept.json()["metadata"], "uid": "other"}
        changed_uid = await client.put(f"{NODES}/n1", json=body)
    assert kept.json()["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]
    assert changed_uid.status_code == 422
    assert "metadata.uid: Invalid value" in changed_uid.json()["message"]


async def test_status_subresource_splits_spec_and_status(client: httpx.AsyncClient) -> None:
    """The main endpoint ignores status; /status ignores spec but takes metadata."""
    ingress = {"loadBalancer": {"ingress": [{"ip": "192.0.2.10", "ipMode": "VIP"}]}}
    with trio.fail_after(5):
        await client.post(SERVICES, json=service("web", 80, type_="LoadBalancer"))
        main = await client.patch(
            f"{SERVICES}/web",
            json={"status": ingress, "metadata": {"labels": {"via": "main"}}},
            headers=MERGE,
        )
        status = await client.patch(
            f"{SERVICES}/web/status",
            json={
                "status": ingress,
                "spec": {"sessionAffinity": "ClientIP"},
                "metadata": {"finalizers": ["service.kubernetes.io/load-balancer-cleanup"]},
            },
            headers=MERGE,
        )
    assert main.json()["status"] == {"loadBalancer": {}}
    assert main.json()["metadata"]["labels"] == {"via": "main"}
    body = status.json()
    assert body["status"] == ingress
    assert body["spec"]["sessionAffinity"] == "None"
    assert body["metadata"]["finalizers"] == ["service.kubernetes.io/load-balancer-cleanup"]


async def test_generation_bumps_on_spec_change_only(client: httpx.AsyncClient) -> None:
    """metadata.generation starts at 1 and grows with spec changes, not status or labels."""
    with trio.fail_after(5):
        created = (await client.post(SERVICES, json=service("web", 80))).json()
        labelled = await client.patch(
            f"{SERVICES}/web", json={"metadata": {"labels": {"a": "b"}}}, headers=MERGE
        )
        respec = await client.patch(
            f"{SERVICES}/web", json={"spec": {"sessionAffinity": "ClientIP"}}, headers=MERGE
        )
    assert created["metadata"]["generation"] == 1
    assert labelled.json()["metadata"]["generation"] == 1
    assert respec.json()["metadata"]["generation"] == 2


async def test_delete_with_finalizers_waits_for_them(client: httpx.AsyncClient) -> None:
    """Delete of an object with finalizers sets deletionTimestamp; removing them deletes it."""
    body = node("n1")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    with trio.fail_after(5):
        await client.post(NODES, json=body)
        deleting = await client.delete(f"{NODES}/n1")
        still = await client.get(f"{NODES}/n1")
        added = await client.patch(
            f"{NODES}/n1",
            json={"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}},
            headers=MERGE,
        )
        released = await client.patch(
            f"{NODES}/n1", json={"metadata": {"finalizers": None}}, headers=MERGE
        )
        gone = await client.get(f"{NODES}/n1")
    assert deleting.status_code == 200
    assert deleting.json()["metadata"]["deletionTimestamp"]
    assert still.status_code == 200
    assert added.status_code == 422
    assert (
        "no new finalizers can be added if the object is being deleted" in (added.json()["message"])
    )
    assert released.status_code == 200
    assert gone.status_code == 404


@pytest.mark.parametrize(
    ("preconditions", "message"),
    [
        pytest.param(
            {"uid": "wrong"},
            "Precondition failed: UID in precondition: wrong, UID in object meta: ",
            id="uid",
        ),
        pytest.param(
            {"resourceVersion": "1"},
            "Precondition failed: ResourceVersion in precondition: 1, ResourceVersion in "
            "object meta: ",
            id="resource-version",
        ),
    ],
)
async def test_delete_preconditions_conflict(
    client: httpx.AsyncClient, preconditions: dict[str, str], message: str
) -> None:
    """Delete preconditions that do not hold answer 409 Conflict and keep the object."""
    with trio.fail_after(5):
        await client.post(NODES, json=node("n1"))
        response = await client.request(
            "DELETE", f"{NODES}/n1", json={"preconditions": preconditions}
        )
        kept = await client.get(f"{NODES}/n1")
    assert response.status_code == 409
    assert message in response.json()["message"]
    assert kept.status_code == 200


async def test_delete_with_matching_uid_precondition(client: httpx.AsyncClient) -> None:
    """A delete whose uid precondition holds removes the object (Status for Nodes)."""
    with trio.fail_after(5):
        uid = (await client.post(NODES, json=node("n1"))).json()["metadata"]["uid"]
        response = await client.request(
            "DELETE", f"{NODES}/n1", json={"preconditions": {"uid": uid}}
        )
        gone = await client.get(f"{NODES}/n1")
    assert response.json()["status"] == "Success"
    assert response.json()["details"]["uid"] == uid
    assert gone.status_code == 404


async def test_delete_service_returns_the_object(client: httpx.AsyncClient) -> None:
    """Services answer a delete with the deleted object, as upstream does."""
    with trio.fail_after(5):
        await client.post(SERVICES, json=service("web", 80))
        response = await client.delete(f"{SERVICES}/web")
    assert response.json()["kind"] == "Service"


async def test_namespace_delete_cascades(client: httpx.AsyncClient) -> None:
    """Deleting a namespace deletes its content, waits for finalizers, then goes away."""
    with trio.fail_after(5):
        await client.post("/api/v1/namespaces", json={"metadata": {"name": "team"}})
        await client.post(
            "/api/v1/namespaces/team/configmaps",
            json={"metadata": {"name": "held", "finalizers": ["example.com/x"]}},
        )
        await client.post("/api/v1/namespaces/team/configmaps", json={"metadata": {"name": "c"}})
        terminating = await client.delete("/api/v1/namespaces/team")
        refused = await client.post(
            "/api/v1/namespaces/team/configmaps", json={"metadata": {"name": "late"}}
        )
        plain = await client.get("/api/v1/namespaces/team/configmaps/c")
        await client.patch(
            "/api/v1/namespaces/team/configmaps/held",
            json={"metadata": {"finalizers": None}},
            headers=MERGE,
        )
        gone = await client.get("/api/v1/namespaces/team")
    assert terminating.json()["status"]["phase"] == "Terminating"
    assert refused.status_code == 403
    assert "because it is being terminated" in refused.json()["message"]
    assert plain.status_code == 404
    assert gone.status_code == 404


async def test_protected_namespaces_cannot_be_deleted(client: httpx.AsyncClient) -> None:
    """default, kube-system and kube-public refuse deletion with 403."""
    with trio.fail_after(5):
        response = await client.delete("/api/v1/namespaces/kube-system")
    assert response.status_code == 403
    assert response.json()["message"] == (
        'namespaces "kube-system" is forbidden: this namespace may not be deleted'
    )


async def test_dry_run_stores_nothing(client: httpx.AsyncClient, server: ApiServer) -> None:
    """dryRun=All validates and answers but stores nothing and allocates nothing."""
    with trio.fail_after(5):
        before = server.store.rv
        response = await client.post(
            SERVICES, params={"dryRun": "All"}, json=service("web", 80, type_="NodePort")
        )
        missing = await client.get(f"{SERVICES}/web")
    assert response.status_code == 201
    assert server.store.rv == before
    assert missing.status_code == 404
    assert response.json()["spec"]["ports"][0]["nodePort"] not in server.allocator.ports


@pytest.mark.parametrize(
    ("headers", "content", "code", "reason"),
    [
        pytest.param({}, b'{"metadata":{"name":"n1"}}', 201, None, id="no-content-type"),
        pytest.param(
            {"content-type": "application/yaml"}, b"metadata:\n  name: n1\n", 201, None, id="yaml"
        ),
        pytest.param(
            {"content-type": "text/plain"}, b"x", 415, "UnsupportedMediaType", id="unsupported"
        ),
        pytest.param(
            {"content-type": "application/json"}, b"{not json", 400, "BadRequest", id="malformed"
        ),
        pytest.param(
            {"content-type": "application/json"},
            b'{"kind":"Pod","metadata":{}}',
            400,
            "BadRequest",
            id="wrong-kind",
        ),
    ],
)
async def test_request_bodies(
    client: httpx.AsyncClient,
    headers: dict[str, str],
    content: bytes,
    code: int,
    reason: str | None,
) -> None:
    """Bodies default to JSON without a Content-Type; unknown types are 415, junk is 400."""
    with trio.fail_after(5):
        response = await client.post(NODES, content=content, headers=headers)
    assert response.status_code == code
    if reason:
        assert response.json()["reason"] == reason


async def test_patch_missing_object_is_not_found(client: httpx.AsyncClient) -> None:
    """A patch of a missing object is 404, never a create."""
    with trio.fail_after(5):
        response = await client.patch(f"{NODES}/ghost", json={}, headers=MERGE)
    assert response.status_code == 404


async def test_events_put_creates(client: httpx.AsyncClient) -> None:
    """Events allow create-on-update (PUT of a missing Event answers 201)."""
    body = {
        "metadata": {"name": "e1", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": "n1"},
        "reason": "Synced",
        "type": "Normal",
    }
    with trio.fail_after(5):
        response = await client.put("/api/v1/namespaces/default/events/e1", json=body)
    assert response.status_code == 201


async def test_events_v1_view_of_core_events(client: httpx.AsyncClient) -> None:
    """A core/v1 Event reads back through events.k8s.io/v1 with regarding and note."""
    body = {
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Node", "name": "n1"},
        "reason": "Synced",
        "message": "done",
        "type": "Normal",
    }
    with trio.fail_after(5):
        await client.post("/api/v1/namespaces/default/events", json=body)
        response = await client.get("/apis/events.k8s.io/v1/namespaces/default/events/e1")
    event = response.json()
    assert event["apiVersion"] == "events.k8s.io/v1"
    assert event["regarding"] == {"kind": "Node", "name": "n1"}
    assert event["note"] == "done"
