"""The scale subresource, JWT-shaped tokens, SelfSubjectReview versions and upstream's
Table columns for Pods, Events, Deployments, DaemonSets and (Cluster)RoleBindings."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from tests.helpers.emulator import MERGE
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.apiserver.tokens import claims_of

DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
TABLE = {"accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.moment = EPOCH

    def __call__(self) -> dt.datetime:
        return self.moment


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def server(clock: Clock) -> ApiServer:
    return ApiServer(seed=1, now=clock)


@pytest.fixture
async def client(server: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as c:
        yield c


def deployment(replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]},
            },
        },
    }


# -- scale -------------------------------------------------------------------------------
async def test_scale_reads_and_writes_the_deployment_replicas(client: httpx.AsyncClient) -> None:
    """GET scale is an autoscaling/v1 Scale; a merge patch of it changes spec.replicas and
    is recorded as the scale subresource's write."""
    with trio.fail_after(5):
        await client.post(DEPLOYMENTS, json=deployment(2))
        scale = (await client.get(f"{DEPLOYMENTS}/web/scale")).json()
        patched = await client.patch(
            f"{DEPLOYMENTS}/web/scale?fieldManager=kubectl-scale",
            json={"spec": {"replicas": 5}},
            headers=MERGE,
        )
        stored = (await client.get(f"{DEPLOYMENTS}/web")).json()
    assert scale["kind"] == "Scale"
    assert scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 0, "selector": "app=web"}
    assert patched.status_code == 200, patched.text
    assert patched.json()["spec"] == {"replicas": 5}
    assert stored["spec"]["replicas"] == 5
    assert stored["metadata"]["generation"] == 2
    (entry,) = [e for e in stored["metadata"]["managedFields"] if e["manager"] == "kubectl-scale"]
    assert entry["subresource"] == "scale"
    assert entry["fieldsV1"] == {"f:spec": {"f:replicas": {}}}


async def test_scale_update_checks_the_resource_version_and_the_count(
    client: httpx.AsyncClient,
) -> None:
    """A PUT of a stale Scale is 409; a negative count is 422 on Scale.autoscaling."""
    with trio.fail_after(5):
        await client.post(DEPLOYMENTS, json=deployment())
        scale = (await client.get(f"{DEPLOYMENTS}/web/scale")).json()
        stale = {**scale, "metadata": {**scale["metadata"], "resourceVersion": "1"}}
        conflict = await client.put(f"{DEPLOYMENTS}/web/scale", json=stale)
        negative = await client.put(
            f"{DEPLOYMENTS}/web/scale", json={**scale, "spec": {"replicas": -1}}
        )
    assert conflict.status_code == 409
    assert negative.status_code == 422
    assert negative.json()["message"] == (
        'Scale.autoscaling "web" is invalid: spec.replicas: Invalid value: -1: must be greater '
        "than or equal to 0"
    )


# -- tokens ------------------------------------------------------------------------------
def _verify(token: str, jwks: dict[str, Any]) -> None:
    """Check an ES256 JWT against the published key set (raises if it does not verify)."""
    head, payload, signature = token.split(".")
    key = jwks["keys"][0]

    def unb64(text: str) -> bytes:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

    public = ec.EllipticCurvePublicNumbers(
        int.from_bytes(unb64(key["x"]), "big"),
        int.from_bytes(unb64(key["y"]), "big"),
        ec.SECP256R1(),
    ).public_key()
    raw = unb64(signature)
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public.verify(der, f"{head}.{payload}".encode(), ec.ECDSA(hashes.SHA256()))
    assert json.loads(unb64(head)) == {"alg": "ES256", "kid": key["kid"]}


async def test_token_request_is_a_signed_jwt_with_upstream_claims(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    """A TokenRequest answers a JWT signed with the key /openid/v1/jwks publishes, with
    upstream's claims; the token authenticates as the service account until it expires."""
    with trio.fail_after(5):
        account = (
            await client.post(
                "/api/v1/namespaces/default/serviceaccounts", json={"metadata": {"name": "robot"}}
            )
        ).json()
        response = await client.post(
            "/api/v1/namespaces/default/serviceaccounts/robot/token",
            json={"spec": {"expirationSeconds": 600}},
        )
        jwks = (await client.get("/openid/v1/jwks")).json()
    assert response.status_code == 201, response.text
    status = response.json()["status"]
    token = status["token"]
    _verify(token, jwks)
    now = int(EPOCH.timestamp())
    claims = claims_of(token)
    assert claims == {
        "aud": ["https://kubernetes.default.svc.cluster.local"],
        "exp": now + 600,
        "iat": now,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "jti": claims["jti"],
        "kubernetes.io": {
            "namespace": "default",
            "serviceaccount": {"name": "robot", "uid": account["metadata"]["uid"]},
        },
        "nbf": now,
        "sub": "system:serviceaccount:default:robot",
    }
    assert status["expirationTimestamp"] == "2026-01-01T00:10:00Z"
    review: dict[str, Any] = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview"}
    review["spec"] = {"token": token}
    with trio.fail_after(5):
        valid = (
            await client.post("/apis/authentication.k8s.io/v1/tokenreviews", json=review)
        ).json()
        clock.moment += dt.timedelta(seconds=600)
        expired = (
            await client.post("/apis/authentication.k8s.io/v1/tokenreviews", json=review)
        ).json()
    assert valid["status"]["authenticated"] is True
    assert valid["status"]["user"]["username"] == "system:serviceaccount:default:robot"
    assert valid["status"]["user"]["uid"] == account["metadata"]["uid"]
    assert expired["status"]["authenticated"] is False


async def test_short_token_durations_are_refused(client: httpx.AsyncClient) -> None:
    """A TokenRequest for less than ten minutes is 422, as upstream."""
    with trio.fail_after(5):
        await client.post(
            "/api/v1/namespaces/default/serviceaccounts", json={"metadata": {"name": "robot"}}
        )
        response = await client.post(
            "/api/v1/namespaces/default/serviceaccounts/robot/token",
            json={"spec": {"expirationSeconds": 60}},
        )
    assert response.status_code == 422
    assert "may not specify a duration less than 10 minutes" in response.json()["message"]


async def test_service_account_token_secret_holds_a_legacy_jwt(client: httpx.AsyncClient) -> None:
    """A service-account-token Secret is filled with a legacy-claims JWT."""
    secret = {
        "metadata": {
            "name": "robot-token",
            "annotations": {"kubernetes.io/service-account.name": "robot"},
        },
        "type": "kubernetes.io/service-account-token",
    }
    with trio.fail_after(5):
        created = (await client.post("/api/v1/namespaces/default/secrets", json=secret)).json()
    token = base64.b64decode(created["data"]["token"]).decode()
    claims = claims_of(token)
    assert claims["iss"] == "kubernetes/serviceaccount"
    assert claims["kubernetes.io/serviceaccount/secret.name"] == "robot-token"
    assert claims["sub"] == "system:serviceaccount:default:robot"


# -- SelfSubjectReview --------------------------------------------------------------------
@pytest.mark.parametrize("version", ["v1", "v1beta1", "v1alpha1"])
async def test_self_subject_review_at_every_version(
    client: httpx.AsyncClient, version: str
) -> None:
    """SelfSubjectReview is served at v1, v1beta1 and v1alpha1 (kubectl 1.27 asks alpha)."""
    body = {"apiVersion": f"authentication.k8s.io/{version}", "kind": "SelfSubjectReview"}
    with trio.fail_after(5):
        response = await client.post(
            f"/apis/authentication.k8s.io/{version}/selfsubjectreviews", json=body
        )
    assert response.status_code == 201
    assert response.json()["apiVersion"] == f"authentication.k8s.io/{version}"
    assert response.json()["status"]["userInfo"]["username"] == "system:admin"


# -- tables --------------------------------------------------------------------------------
async def table(client: httpx.AsyncClient, path: str) -> dict[str, Any]:
    with trio.fail_after(5):
        response = await client.get(path, headers=TABLE)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def columns(body: dict[str, Any]) -> list[tuple[str, int]]:
    return [(c["name"], c["priority"]) for c in body["columnDefinitions"]]


async def test_pod_table_has_upstream_columns_and_status(
    client: httpx.AsyncClient, server: ApiServer, clock: Clock
) -> None:
    """Pods print upstream's nine columns; a crash-looping container shows its reason and
    the restart count."""
    server.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]},
        }
    )
    await server_status(
        server,
        {
            "phase": "Running",
            "podIPs": [{"ip": "10.0.0.7"}],
            "containerStatuses": [
                {"name": "a", "ready": True, "restartCount": 0, "state": {"running": {}}},
                {
                    "name": "b",
                    "ready": False,
                    "restartCount": 4,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                },
            ],
        },
    )
    clock.moment += dt.timedelta(minutes=3)
    body = await table(client, "/api/v1/namespaces/default/pods")
    assert columns(body) == [
        ("Name", 0),
        ("Ready", 0),
        ("Status", 0),
        ("Restarts", 0),
        ("Age", 0),
        ("IP", 1),
        ("Node", 1),
        ("Nominated Node", 1),
        ("Readiness Gates", 1),
    ]
    assert body["rows"][0]["cells"] == [
        "p",
        "1/2",
        "CrashLoopBackOff",
        "4",
        "3m",
        "10.0.0.7",
        "<none>",
        "<none>",
        "<none>",
    ]


async def server_status(server: ApiServer, status: dict[str, Any]) -> None:
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as client:
        with trio.fail_after(5):
            response = await client.patch(
                "/api/v1/namespaces/default/pods/p/status",
                json={"status": status},
                headers=MERGE,
            )
    assert response.status_code == 200, response.text


async def test_event_table_is_wide(client: httpx.AsyncClient, server: ApiServer) -> None:
    """Events print all ten of upstream's columns (the wide ones at priority 1)."""
    server.create(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "n1.1", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "n1", "fieldPath": "spec"},
            "reason": "Synced",
            "message": " done ",
            "type": "Normal",
            "source": {"component": "cloud-node-controller"},
            "firstTimestamp": "2025-12-31T23:59:00Z",
            "lastTimestamp": "2025-12-31T23:59:30Z",
            "count": 2,
        }
    )
    body = await table(client, "/api/v1/namespaces/default/events")
    assert columns(body) == [
        ("Last Seen", 0),
        ("Type", 0),
        ("Reason", 0),
        ("Object", 0),
        ("Subobject", 1),
        ("Source", 1),
        ("Message", 0),
        ("First Seen", 1),
        ("Count", 1),
        ("Name", 1),
    ]
    assert body["rows"][0]["cells"] == [
        "30s",
        "Normal",
        "Synced",
        "node/n1",
        "spec",
        "cloud-node-controller",
        "done",
        "60s",
        2,
        "n1.1",
    ]


async def test_deployment_daemonset_and_binding_tables(
    client: httpx.AsyncClient, server: ApiServer
) -> None:
    """Deployments, DaemonSets and ClusterRoleBindings print upstream's columns."""
    with trio.fail_after(5):
        await client.post(DEPLOYMENTS, json=deployment(3))
    daemonset = deployment()
    daemonset["kind"] = "DaemonSet"
    daemonset["spec"].pop("replicas")
    daemonset["spec"]["template"]["spec"]["nodeSelector"] = {"role": "edge"}
    with trio.fail_after(5):
        await client.post("/apis/apps/v1/namespaces/default/daemonsets", json=daemonset)
    server.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "b"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "view",
            },
            "subjects": [
                {"kind": "User", "name": "alice"},
                {"kind": "Group", "name": "devs"},
                {"kind": "ServiceAccount", "name": "robot", "namespace": "default"},
            ],
        }
    )
    deployments = await table(client, DEPLOYMENTS)
    assert [c for c, _ in columns(deployments)] == [
        "Name",
        "Ready",
        "Up-to-date",
        "Available",
        "Age",
        "Containers",
        "Images",
        "Selector",
    ]
    cells = deployments["rows"][0]["cells"]
    assert cells[:4] + cells[5:] == ["web", "0/3", 0, 0, "nginx", "nginx:1.27", "app=web"]
    daemonsets = await table(client, "/apis/apps/v1/namespaces/default/daemonsets")
    assert [c for c, _ in columns(daemonsets)] == [
        "Name",
        "Desired",
        "Current",
        "Ready",
        "Up-to-date",
        "Available",
        "Node Selector",
        "Age",
        "Containers",
        "Images",
        "Selector",
    ]
    assert daemonsets["rows"][0]["cells"][:7] == ["web", 0, 0, 0, 0, 0, "role=edge"]
    bindings = await table(client, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/b")
    assert columns(bindings) == [
        ("Name", 0),
        ("Role", 0),
        ("Age", 0),
        ("Users", 1),
        ("Groups", 1),
        ("ServiceAccounts", 1),
    ]
    cells = bindings["rows"][0]["cells"]
    assert cells[:2] + cells[3:] == ["b", "ClusterRole/view", "alice", "devs", "default/robot"]
    assert bindings["columnDefinitions"][0]["description"].startswith(
        "Name must be unique within a namespace."
    )
