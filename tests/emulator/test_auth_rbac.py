"""Authentication and RBAC: who may do what, and the 401/403 answers kube-apiserver gives."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx
import pytest
import trio

from trio_ccm_testbed.apiserver import ApiServer, User, serve_apiserver

ADMIN = "adm"
SA = "system:serviceaccount:kube-system:ccm"
SA_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]
MERGE = {"content-type": "application/merge-patch+json"}
JSON_PATCH = {"content-type": "application/json-patch+json"}

MANIFEST = """
apiVersion: v1
kind: ServiceAccount
metadata: {name: ccm, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ccm}
rules:
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list]
- apiGroups: [""]
  resources: [services/status]
  verbs: [patch, update]
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [ccm-config]
  verbs: [get, update]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
- nonResourceURLs: [/metrics, /logs/*]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: ccm}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ccm}
subjects:
- {kind: ServiceAccount, name: ccm, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: cm-writer, namespace: default}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: ccm-cm-writer, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm-writer}
subjects:
- {kind: ServiceAccount, name: ccm, namespace: kube-system}
"""


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> Any:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


UNAUTHORIZED = _status(401, "Unauthorized", "Unauthorized")


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@asynccontextmanager
async def _connect(server: ApiServer, token: str | None) -> AsyncIterator[httpx.AsyncClient]:
    headers = _bearer(token) if token else {}
    async with httpx.AsyncClient(
        transport=server.transport(), base_url="http://emulator", headers=headers
    ) as client:
        yield client


@pytest.fixture
def rbac_server() -> ApiServer:
    server = ApiServer(seed=1, admin_token=ADMIN, rbac=True)
    server.load_manifest_text(MANIFEST)
    server.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    for namespace in ("default", "kube-system"):
        server.create(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": namespace},
                "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}},
            }
        )
    for name in ("ccm-config", "other"):
        server.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "kube-system"},
                "data": {"k": "v"},
            }
        )
    server.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "ccm", "namespace": "kube-system"},
            "spec": {"holderIdentity": "a"},
        }
    )
    return server


@pytest.fixture
async def sa(rbac_server: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    token = rbac_server.authn.issue_service_account("kube-system", "ccm")
    async with _connect(rbac_server, token) as client:
        yield client


@pytest.fixture
async def admin(rbac_server: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with _connect(rbac_server, ADMIN) as client:
        yield client


# ---------------------------------------------------------------- authentication (401)


@pytest.mark.parametrize(
    ("rbac", "headers"),
    [
        pytest.param(False, {}, id="no-token"),
        pytest.param(False, {"authorization": "Bearer wrong"}, id="bad-token"),
        pytest.param(False, {"authorization": "Basic YWRtOmFkbQ=="}, id="basic-scheme"),
        pytest.param(False, {"authorization": "Bearer"}, id="empty-bearer"),
        pytest.param(True, {"authorization": "Bearer wrong"}, id="bad-token-with-rbac"),
    ],
)
async def test_unauthenticated_request_gets_401_status(rbac: bool, headers: dict[str, str]) -> None:
    """A request without a valid bearer token gets upstream's 401 Unauthorized Status."""
    server = ApiServer(seed=1, admin_token=ADMIN, rbac=rbac)
    with trio.fail_after(5):
        async with _connect(server, None) as client:
            response = await client.get("/api/v1/nodes", headers=headers)
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/json"
    assert response.json() == UNAUTHORIZED


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/api/v1/nodes", id="resource"),
        pytest.param("/api", id="discovery"),
        pytest.param("/_emulator/state", id="admin-api"),
    ],
)
async def test_admin_token_is_a_cluster_admin(path: str) -> None:
    """The configured admin token may do anything, with or without RBAC."""
    for rbac in (False, True):
        server = ApiServer(seed=1, admin_token=ADMIN, rbac=rbac)
        with trio.fail_after(5):
            async with _connect(server, ADMIN) as client:
                response = await client.get(path)
        assert response.status_code == 200, (rbac, response.text)


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-token"),
        pytest.param({"authorization": "Bearer anything"}, id="any-token"),
    ],
)
async def test_auth_off_treats_every_caller_as_admin(headers: dict[str, str]) -> None:
    """With neither an admin token nor RBAC, any or no token acts as a cluster admin."""
    server = ApiServer(seed=1)
    with trio.fail_after(5):
        async with _connect(server, None) as client:
            listed = await client.get("/api/v1/nodes", headers=headers)
            state = await client.get("/_emulator/state", headers=headers)
    assert listed.status_code == 200
    assert state.status_code == 200


async def test_registered_user_token_authenticates(rbac_server: ApiServer) -> None:
    """A token registered with `authn.add` authenticates as that user and their groups."""
    rbac_server.authn.add("alice-token", User("alice", ("devs", "system:authenticated")))
    with trio.fail_after(5):
        async with _connect(rbac_server, "alice-token") as client:
            response = await client.post(
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            )
    assert response.status_code == 201
    user = response.json()["status"]["userInfo"]
    assert (user["username"], user["groups"]) == ("alice", ["devs", "system:authenticated"])


# ---------------------------------------------------------------- RBAC: allowed


@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "expected"),
    [
        pytest.param("GET", "/api/v1/nodes", {}, None, 200, id="list-nodes"),
        pytest.param("GET", "/api/v1/nodes/n1", {}, None, 200, id="get-node"),
        pytest.param(
            "GET", "/api/v1/namespaces/default/services/web", {}, None, 200, id="get-service"
        ),
        pytest.param("GET", "/api/v1/services", {}, None, 200, id="list-services-cluster-wide"),
        pytest.param(
            "PATCH",
            "/api/v1/namespaces/default/services/web/status",
            MERGE,
            {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}},
            200,
            id="patch-service-status-subresource",
        ),
        pytest.param(
            "GET",
            "/api/v1/namespaces/kube-system/configmaps/ccm-config",
            {},
            None,
            200,
            id="resource-name-allowed",
        ),
        pytest.param(
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
            {},
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "other-lease"},
            },
            201,
            id="create-lease-in-api-group",
        ),
        pytest.param(
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ccm",
            {},
            None,
            200,
            id="get-lease",
        ),
        pytest.param(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            {},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "made"}},
            201,
            id="rolebinding-create-in-its-namespace",
        ),
        pytest.param(
            "GET",
            "/api/v1/namespaces/default/configmaps",
            {},
            None,
            200,
            id="rolebinding-list-in-its-namespace",
        ),
    ],
)
async def test_bound_service_account_may_do_what_its_rules_say(
    sa: httpx.AsyncClient,
    method: str,
    path: str,
    headers: dict[str, str],
    body: Any,
    expected: int,
) -> None:
    """A ServiceAccount bound to a role may make exactly the requests the role's rules allow."""
    with trio.fail_after(5):
        response = await sa.request(method, path, headers=headers, json=body)
    assert response.status_code == expected, response.text


async def test_bound_service_account_may_watch_nodes(sa: httpx.AsyncClient) -> None:
    """The `watch` verb in a rule lets the ServiceAccount open a watch on nodes."""
    with trio.fail_after(5):
        async with sa.stream("GET", "/api/v1/nodes?watch=true") as response:
            assert response.status_code == 200
            first = await anext(response.aiter_lines())
    assert '"type":"ADDED"' in first
    assert '"name":"n1"' in first


# ---------------------------------------------------------------- RBAC: denied (403)


def _forbidden(message: str, details: dict[str, Any]) -> Any:
    return _status(403, "Forbidden", message, details)


@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "message", "details"),
    [
        pytest.param(
            "PATCH",
            "/api/v1/namespaces/default/services/web",
            MERGE,
            {"metadata": {"labels": {"a": "b"}}},
            f'services "web" is forbidden: User "{SA}" cannot patch resource "services" '
            'in API group "" in the namespace "default"',
            {"name": "web", "kind": "services"},
            id="patch-main-resource-while-only-status-allowed",
        ),
        pytest.param(
            "PATCH",
            "/api/v1/nodes/n1/status",
            MERGE,
            {"status": {}},
            f'nodes "n1" is forbidden: User "{SA}" cannot patch resource "nodes/status" '
            'in API group "" at the cluster scope',
            {"name": "n1", "kind": "nodes"},
            id="subresource-not-covered-by-resource-rule",
        ),
        pytest.param(
            "DELETE",
            "/api/v1/nodes/n1",
            {},
            None,
            f'nodes "n1" is forbidden: User "{SA}" cannot delete resource "nodes" '
            'in API group "" at the cluster scope',
            {"name": "n1", "kind": "nodes"},
            id="verb-not-in-rule",
        ),
        pytest.param(
            "GET",
            "/api/v1/secrets",
            {},
            None,
            f'secrets is forbidden: User "{SA}" cannot list resource "secrets" '
            'in API group "" at the cluster scope',
            {"kind": "secrets"},
            id="resource-not-in-any-rule",
        ),
        pytest.param(
            "GET",
            "/api/v1/namespaces/default/services?watch=true",
            {},
            None,
            f'services is forbidden: User "{SA}" cannot watch resource "services" '
            'in API group "" in the namespace "default"',
            {"kind": "services"},
            id="watch-not-granted",
        ),
        pytest.param(
            "GET",
            "/api/v1/namespaces/kube-system/configmaps/other",
            {},
            None,
            f'configmaps "other" is forbidden: User "{SA}" cannot get resource "configmaps" '
            'in API group "" in the namespace "kube-system"',
            {"name": "other", "kind": "configmaps"},
            id="resource-name-not-listed",
        ),
        pytest.param(
            "GET",
            "/api/v1/namespaces/kube-system/configmaps",
            {},
            None,
            f'configmaps is forbidden: User "{SA}" cannot list resource "configmaps" '
            'in API group "" in the namespace "kube-system"',
            {"kind": "configmaps"},
            id="resource-names-rule-does-not-allow-list",
        ),
        pytest.param(
            "POST",
            "/api/v1/namespaces/kube-system/configmaps",
            {},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
            f'configmaps is forbidden: User "{SA}" cannot create resource "configmaps" '
            'in API group "" in the namespace "kube-system"',
            {"kind": "configmaps"},
            id="rolebinding-does-not-reach-other-namespace",
        ),
        pytest.param(
            "GET",
            "/api/v1/configmaps",
            {},
            None,
            f'configmaps is forbidden: User "{SA}" cannot list resource "configmaps" '
            'in API group "" at the cluster scope',
            {"kind": "configmaps"},
            id="rolebinding-does-not-reach-cluster-scope",
        ),
        pytest.param(
            "DELETE",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ccm",
            {},
            None,
            f'leases.coordination.k8s.io "ccm" is forbidden: User "{SA}" cannot delete '
            'resource "leases" in API group "coordination.k8s.io" in the namespace '
            '"kube-system"',
            {"name": "ccm", "group": "coordination.k8s.io", "kind": "leases"},
            id="group-qualified-resource",
        ),
        pytest.param(
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
            {},
            None,
            f'leases.coordination.k8s.io is forbidden: User "{SA}" cannot list resource '
            '"leases" in API group "coordination.k8s.io" in the namespace "kube-system"',
            {"group": "coordination.k8s.io", "kind": "leases"},
            id="group-resource-verb-not-in-rule",
        ),
        pytest.param(
            "POST",
            "/api/v1/namespaces/kube-system/serviceaccounts/ccm/token",
            {},
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
            f'serviceaccounts "ccm" is forbidden: User "{SA}" cannot create resource '
            '"serviceaccounts/token" in API group "" in the namespace "kube-system"',
            {"name": "ccm", "kind": "serviceaccounts"},
            id="token-request-needs-its-own-rule",
        ),
        pytest.param(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {},
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": "bob", "resourceAttributes": {"verb": "get"}},
            },
            f'subjectaccessreviews.authorization.k8s.io is forbidden: User "{SA}" cannot '
            'create resource "subjectaccessreviews" in API group "authorization.k8s.io" '
            "at the cluster scope",
            {"group": "authorization.k8s.io", "kind": "subjectaccessreviews"},
            id="subject-access-review-needs-a-rule",
        ),
        pytest.param(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            {},
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {}},
            f'tokenreviews.authentication.k8s.io is forbidden: User "{SA}" cannot create '
            'resource "tokenreviews" in API group "authentication.k8s.io" at the cluster scope',
            {"group": "authentication.k8s.io", "kind": "tokenreviews"},
            id="token-review-needs-a-rule",
        ),
        pytest.param(
            "GET",
            "/logs",
            {},
            None,
            f'forbidden: User "{SA}" cannot get path "/logs"',
            {},
            id="non-resource-url-prefix-rule-excludes-bare-path",
        ),
        pytest.param(
            "POST",
            "/metrics",
            {},
            None,
            f'forbidden: User "{SA}" cannot post path "/metrics"',
            {},
            id="non-resource-url-verb-not-in-rule",
        ),
    ],
)
async def test_denied_request_gets_upstream_403(
    sa: httpx.AsyncClient,
    method: str,
    path: str,
    headers: dict[str, str],
    body: Any,
    message: str,
    details: dict[str, Any],
) -> None:
    """A request no rule allows gets 403 Forbidden with kube-apiserver's message and details."""
    with trio.fail_after(5):
        response = await sa.request(method, path, headers=headers, json=body)
    assert response.status_code == 403, response.text
    assert response.json() == _forbidden(message, details)


async def test_binding_to_missing_role_names_it_in_the_403(rbac_server: ApiServer) -> None:
    """A binding whose role does not exist adds upstream's `RBAC: ... not found` reason."""
    rbac_server.load_manifest_text(
        """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: dangling}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: missing}
subjects: [{kind: User, name: dave}]
"""
    )
    rbac_server.authn.add("dave-token", User("dave", ("system:authenticated",)))
    with trio.fail_after(5):
        async with _connect(rbac_server, "dave-token") as client:
            response = await client.get("/api/v1/nodes")
    assert response.status_code == 403
    assert response.json() == _forbidden(
        'nodes is forbidden: User "dave" cannot list resource "nodes" in API group "" at the '
        'cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io "missing" not found',
        {"kind": "nodes"},
    )


async def test_unbound_service_account_is_denied_everything(rbac_server: ApiServer) -> None:
    """A ServiceAccount with no bindings gets 403 on resources (RBAC denies by default)."""
    token = rbac_server.authn.issue_service_account("default", "nobody")
    with trio.fail_after(5):
        async with _connect(rbac_server, token) as client:
            response = await client.get("/api/v1/namespaces/default/services")
    assert response.status_code == 403
    assert response.json() == _forbidden(
        'services is forbidden: User "system:serviceaccount:default:nobody" cannot list '
        'resource "services" in API group "" in the namespace "default"',
        {"kind": "services"},
    )


# ---------------------------------------------------------------- discovery and public paths


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/api", id="api"),
        pytest.param("/api/v1", id="api-v1"),
        pytest.param("/apis", id="apis"),
        pytest.param("/apis/coordination.k8s.io", id="api-group"),
        pytest.param("/apis/coordination.k8s.io/v1", id="api-group-version"),
        pytest.param("/version", id="version"),
        pytest.param("/openapi/v3", id="openapi-v3"),
        pytest.param("/openapi/v3/api/v1", id="openapi-v3-document"),
        pytest.param("/healthz", id="healthz"),
    ],
)
async def test_discovery_is_open_to_any_authenticated_user(
    rbac_server: ApiServer, path: str
) -> None:
    """system:discovery lets every authenticated user read discovery, /version and OpenAPI."""
    token = rbac_server.authn.issue_service_account("default", "nobody")
    with trio.fail_after(5):
        async with _connect(rbac_server, token) as client:
            response = await client.get(path)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param("/version", 200, id="version-public-info"),
        pytest.param("/healthz", 200, id="healthz-public-info"),
        pytest.param("/readyz", 200, id="readyz-public-info"),
        pytest.param("/api", 403, id="api-needs-authentication"),
        pytest.param("/apis", 403, id="apis-needs-authentication"),
        pytest.param("/openapi/v3", 403, id="openapi-needs-authentication"),
    ],
)
async def test_anonymous_sees_public_info_only(
    rbac_server: ApiServer, path: str, expected: int
) -> None:
    """With RBAC on, an anonymous caller reaches /version and health checks but not discovery."""
    with trio.fail_after(5):
        async with _connect(rbac_server, None) as client:
            response = await client.get(path)
    assert response.status_code == expected
    if expected == 403:
        assert response.json() == _forbidden(
            f'forbidden: User "system:anonymous" cannot get path "{path}"', {}
        )


# ---------------------------------------------------------------- changes take effect at once


async def test_rule_added_at_run_time_takes_effect_at_once(
    sa: httpx.AsyncClient, admin: httpx.AsyncClient
) -> None:
    """Patching the bound ClusterRole grants the new permission on the very next request."""
    with trio.fail_after(5):
        before = await sa.get("/api/v1/namespaces/kube-system/secrets")
        patched = await admin.patch(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/ccm",
            headers=JSON_PATCH,
            json=[
                {
                    "op": "add",
                    "path": "/rules/-",
                    "value": {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]},
                }
            ],
        )
        after = await sa.get("/api/v1/namespaces/kube-system/secrets")
    assert before.status_code == 403
    assert patched.status_code == 200, patched.text
    assert after.status_code == 200, after.text


async def test_deleted_binding_revokes_at_once(
    sa: httpx.AsyncClient, admin: httpx.AsyncClient
) -> None:
    """Deleting the ClusterRoleBinding takes the permission away on the very next request."""
    with trio.fail_after(5):
        before = await sa.get("/api/v1/nodes")
        deleted = await admin.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/ccm")
        after = await sa.get("/api/v1/nodes")
    assert before.status_code == 200
    assert deleted.status_code == 200, deleted.text
    assert after.status_code == 403


async def test_group_subject_binds_every_member(rbac_server: ApiServer) -> None:
    """A binding to a Group subject applies to every user in that group."""
    rbac_server.load_manifest_text(
        """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: all-sas-read-nodes}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ccm}
subjects:
- kind: Group
  name: "system:serviceaccounts:default"
  apiGroup: rbac.authorization.k8s.io
"""
    )
    member = rbac_server.authn.issue_service_account("default", "anyone")
    outsider = rbac_server.authn.issue_service_account("kube-public", "anyone")
    with trio.fail_after(5):
        async with _connect(rbac_server, member) as client:
            allowed = await client.get("/api/v1/nodes")
        async with _connect(rbac_server, outsider) as client:
            denied = await client.get("/api/v1/nodes")
    assert allowed.status_code == 200
    assert denied.status_code == 403


# ---------------------------------------------------------------- tokens


async def test_token_request_returns_a_working_token(admin: httpx.AsyncClient) -> None:
    """POST serviceaccounts/{name}/token answers a TokenRequest whose token authenticates."""
    with trio.fail_after(5):
        response = await admin.post(
            "/api/v1/namespaces/kube-system/serviceaccounts/ccm/token",
            json={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 600},
            },
        )
        assert response.status_code == 201, response.text
        body = response.json()
        token = body["status"]["token"]
        whoami = await admin.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            headers=_bearer(token),
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        nodes = await admin.get("/api/v1/nodes", headers=_bearer(token))
    assert (body["kind"], body["apiVersion"]) == ("TokenRequest", "authentication.k8s.io/v1")
    assert body["metadata"]["name"] == "ccm"
    assert body["metadata"]["namespace"] == "kube-system"
    assert body["spec"]["expirationSeconds"] == 600
    assert body["status"]["expirationTimestamp"]
    assert whoami.json()["status"]["userInfo"]["username"] == SA
    assert nodes.status_code == 200


async def test_token_request_for_missing_service_account_is_404(
    admin: httpx.AsyncClient,
) -> None:
    """A TokenRequest for a ServiceAccount that does not exist gets 404 NotFound."""
    with trio.fail_after(5):
        response = await admin.post(
            "/api/v1/namespaces/kube-system/serviceaccounts/nope/token",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
    assert response.status_code == 404
    assert response.json() == _status(
        404,
        "NotFound",
        'serviceaccounts "nope" not found',
        {"name": "nope", "kind": "serviceaccounts"},
    )


async def test_service_account_token_secret_gets_a_working_token(
    admin: httpx.AsyncClient,
) -> None:
    """A Secret of type kubernetes.io/service-account-token is filled with a usable data.token."""
    with trio.fail_after(5):
        created = await admin.post(
            "/api/v1/namespaces/kube-system/secrets",
            json={
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": "ccm-token",
                    "annotations": {"kubernetes.io/service-account.name": "ccm"},
                },
                "type": "kubernetes.io/service-account-token",
            },
        )
        assert created.status_code == 201, created.text
        fetched = await admin.get("/api/v1/namespaces/kube-system/secrets/ccm-token")
        data = fetched.json()["data"]
        token = base64.b64decode(data["token"]).decode()
        whoami = await admin.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            headers=_bearer(token),
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    assert base64.b64decode(data["namespace"]) == b"kube-system"
    assert whoami.status_code == 201
    assert whoami.json()["status"]["userInfo"]["username"] == SA


# ---------------------------------------------------------------- reviews


def _ssar(resource: dict[str, str] | None = None, path: str = "", verb: str = "") -> Any:
    spec: dict[str, Any] = (
        {"resourceAttributes": resource}
        if resource is not None
        else {"nonResourceAttributes": {"path": path, "verb": verb}}
    )
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("review", "allowed"),
    [
        pytest.param(_ssar({"verb": "list", "resource": "nodes"}), True, id="list-nodes"),
        pytest.param(_ssar({"verb": "delete", "resource": "nodes"}), False, id="delete-nodes"),
        pytest.param(
            _ssar(
                {
                    "verb": "patch",
                    "resource": "services",
                    "subresource": "status",
                    "namespace": "default",
                    "name": "web",
                }
            ),
            True,
            id="patch-services-status",
        ),
        pytest.param(
            _ssar({"verb": "patch", "resource": "services", "namespace": "default"}),
            False,
            id="patch-services",
        ),
        pytest.param(
            _ssar(
                {
                    "verb": "get",
                    "resource": "configmaps",
                    "namespace": "kube-system",
                    "name": "ccm-config",
                }
            ),
            True,
            id="resource-name-listed",
        ),
        pytest.param(
            _ssar(
                {"verb": "get", "resource": "configmaps", "namespace": "kube-system", "name": "x"}
            ),
            False,
            id="resource-name-not-listed",
        ),
        pytest.param(
            _ssar({"verb": "get", "resource": "configmaps", "namespace": "kube-system"}),
            False,
            id="resource-names-need-a-name",
        ),
        pytest.param(
            _ssar({"verb": "create", "resource": "configmaps", "namespace": "default"}),
            True,
            id="rolebinding-namespace",
        ),
        pytest.param(
            _ssar({"verb": "create", "resource": "configmaps", "namespace": "kube-public"}),
            False,
            id="rolebinding-other-namespace",
        ),
        pytest.param(
            _ssar(
                {
                    "verb": "create",
                    "group": "coordination.k8s.io",
                    "resource": "leases",
                    "namespace": "kube-system",
                }
            ),
            True,
            id="api-group-matches",
        ),
        pytest.param(
            _ssar({"verb": "create", "resource": "leases", "namespace": "kube-system"}),
            False,
            id="api-group-must-match",
        ),
        pytest.param(_ssar(path="/metrics", verb="get"), True, id="non-resource-exact"),
        pytest.param(_ssar(path="/logs/kubelet.log", verb="get"), True, id="non-resource-prefix"),
        pytest.param(_ssar(path="/logs", verb="get"), False, id="non-resource-prefix-bare"),
        pytest.param(_ssar(path="/metrics", verb="post"), False, id="non-resource-verb"),
        pytest.param(_ssar(path="/api", verb="get"), True, id="non-resource-discovery"),
    ],
)
async def test_self_subject_access_review_answers_per_rules(
    sa: httpx.AsyncClient, review: Any, allowed: bool
) -> None:
    """SelfSubjectAccessReview tells the caller whether its own rules allow a request."""
    with trio.fail_after(5):
        response = await sa.post(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=review
        )
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["kind"], body["apiVersion"]) == (
        "SelfSubjectAccessReview",
        "authorization.k8s.io/v1",
    )
    assert body["spec"] == review["spec"]
    assert body["status"]["allowed"] is allowed


async def test_access_review_reason_names_the_binding(sa: httpx.AsyncClient) -> None:
    """An RBAC allow carries upstream's reason naming the binding, role and subject."""
    with trio.fail_after(5):
        response = await sa.post(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            json=_ssar({"verb": "list", "resource": "nodes"}),
        )
    assert response.json()["status"] == {
        "allowed": True,
        "reason": 'RBAC: allowed by ClusterRoleBinding "ccm" of ClusterRole "ccm" to '
        'ServiceAccount "ccm/kube-system"',
    }


async def test_access_review_for_admin_has_no_rbac_reason(admin: httpx.AsyncClient) -> None:
    """system:masters is allowed before RBAC is consulted, so the status carries no reason."""
    with trio.fail_after(5):
        response = await admin.post(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            json=_ssar({"verb": "delete", "resource": "nodes"}),
        )
    assert response.json()["status"] == {"allowed": True}


async def test_denied_access_review_is_only_allowed_false(sa: httpx.AsyncClient) -> None:
    """A denial with no opinion answers `{"allowed": false}` and nothing else."""
    with trio.fail_after(5):
        response = await sa.post(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            json=_ssar({"verb": "delete", "resource": "nodes"}),
        )
    assert response.json()["status"] == {"allowed": False}


@pytest.mark.parametrize(
    ("user", "groups", "attributes", "allowed"),
    [
        pytest.param(SA, SA_GROUPS, {"verb": "list", "resource": "nodes"}, True, id="sa-allowed"),
        pytest.param(SA, SA_GROUPS, {"verb": "delete", "resource": "nodes"}, False, id="sa-denied"),
        pytest.param(
            "bob", ["system:authenticated"], {"verb": "list", "resource": "nodes"}, False, id="bob"
        ),
        pytest.param(
            "root", ["system:masters"], {"verb": "delete", "resource": "nodes"}, True, id="masters"
        ),
    ],
)
async def test_subject_access_review_answers_for_another_user(
    admin: httpx.AsyncClient,
    user: str,
    groups: list[str],
    attributes: dict[str, str],
    allowed: bool,
) -> None:
    """SubjectAccessReview evaluates RBAC for the user and groups named in its spec."""
    with trio.fail_after(5):
        response = await admin.post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            json={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": groups, "resourceAttributes": attributes},
            },
        )
    assert response.status_code == 201, response.text
    assert response.json()["kind"] == "SubjectAccessReview"
    assert response.json()["status"]["allowed"] is allowed


async def test_self_subject_rules_review_lists_bound_rules(sa: httpx.AsyncClient) -> None:
    """SelfSubjectRulesReview lists the ClusterRole's and the namespace's Role rules."""
    with trio.fail_after(5):
        response = await sa.post(
            "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
            json={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectRulesReview",
                "spec": {"namespace": "default"},
            },
        )
    assert response.status_code == 201, response.text
    status = response.json()["status"]
    assert status["incomplete"] is False
    resource_rules = status["resourceRules"]
    assert {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["nodes"]} in (
        resource_rules
    )
    assert {
        "verbs": ["get", "update"],
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": ["ccm-config"],
    } in resource_rules
    assert {"verbs": ["create", "list"], "apiGroups": [""], "resources": ["configmaps"]} in (
        resource_rules
    )
    assert {"verbs": ["get"], "nonResourceURLs": ["/metrics", "/logs/*"]} in status[
        "nonResourceRules"
    ]


async def test_self_subject_rules_review_includes_bootstrap_policy(sa: httpx.AsyncClient) -> None:
    """The rules review also lists what system:basic-user and system:discovery grant everyone."""
    with trio.fail_after(5):
        response = await sa.post(
            "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
            json={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectRulesReview",
                "spec": {"namespace": "default"},
            },
        )
    status = response.json()["status"]
    reviews = [
        rule
        for rule in status["resourceRules"]
        if "selfsubjectaccessreviews" in rule.get("resources", [])
    ]
    assert reviews, status["resourceRules"]
    assert reviews[0]["verbs"] == ["create"]
    assert reviews[0]["apiGroups"] == ["authorization.k8s.io"]
    discovery_urls = {
        url
        for rule in status["nonResourceRules"]
        if "get" in rule["verbs"]
        for url in rule["nonResourceURLs"]
    }
    assert {"/api", "/api/*", "/apis", "/apis/*", "/version"} <= discovery_urls


@pytest.mark.parametrize(
    ("token_of", "authenticated", "username"),
    [
        pytest.param("service-account", True, SA, id="service-account-token"),
        pytest.param("admin", True, "admin", id="admin-token"),
        pytest.param("bogus", False, None, id="bogus-token"),
    ],
)
async def test_token_review_reports_authentication(
    rbac_server: ApiServer,
    admin: httpx.AsyncClient,
    token_of: str,
    authenticated: bool,
    username: str | None,
) -> None:
    """TokenReview says whether a token authenticates, and as whom."""
    token = {
        "service-account": rbac_server.authn.issue_service_account("kube-system", "ccm"),
        "admin": ADMIN,
        "bogus": "not-a-token",
    }[token_of]
    with trio.fail_after(5):
        response = await admin.post(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            json={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["kind"], body["apiVersion"]) == ("TokenReview", "authentication.k8s.io/v1")
    status = body["status"]
    assert status["authenticated"] is authenticated
    assert (status.get("user") or {}).get("username") == username


async def test_self_subject_review_says_who_am_i(sa: httpx.AsyncClient) -> None:
    """SelfSubjectReview (kubectl auth whoami) answers the caller's user info and no spec."""
    with trio.fail_after(5):
        response = await sa.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) == {"kind", "apiVersion", "metadata", "status"}
    assert (body["kind"], body["apiVersion"]) == ("SelfSubjectReview", "authentication.k8s.io/v1")
    user = body["status"]["userInfo"]
    assert (user["username"], user["groups"]) == (SA, SA_GROUPS)


# ---------------------------------------------------------------- the emulator admin API


@pytest.mark.parametrize(
    ("method", "path"),
    [
        pytest.param("GET", "/_emulator/state", id="state"),
        pytest.param("GET", "/_emulator/faults", id="list-faults"),
        pytest.param("POST", "/_emulator/drop-watches", id="drop-watches"),
        pytest.param("POST", "/_emulator/compact", id="compact"),
    ],
)
async def test_admin_api_needs_the_admin_token(
    rbac_server: ApiServer, sa: httpx.AsyncClient, method: str, path: str
) -> None:
    """/_emulator/ answers 403 to a non-admin and 401 to a bad token, and works for the admin."""
    with trio.fail_after(5):
        denied = await sa.request(method, path)
        async with _connect(rbac_server, "wrong") as client:
            unknown = await client.request(method, path)
        async with _connect(rbac_server, ADMIN) as client:
            allowed = await client.request(method, path)
    assert denied.status_code == 403
    assert denied.json()["reason"] == "Forbidden"
    assert SA in denied.json()["message"]
    assert unknown.status_code == 401
    assert unknown.json() == UNAUTHORIZED
    assert allowed.status_code == 200, allowed.text


async def test_admin_api_without_token_is_401_when_an_admin_token_is_set() -> None:
    """Without RBAC but with an admin token, the admin API refuses a caller with no token."""
    server = ApiServer(seed=1, admin_token=ADMIN)
    with trio.fail_after(5):
        async with _connect(server, None) as client:
            response = await client.get("/_emulator/state")
    assert response.status_code == 401
    assert response.json() == UNAUTHORIZED


# ---------------------------------------------------------------- over the real listener


async def test_tls_listener_kubeconfig_token_authenticates(rbac_server: ApiServer) -> None:
    """Over HTTPS the kubeconfig's token works and a request without one gets 401."""
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            listening = await nursery.start(partial(serve_apiserver, rbac_server, tls=True))
            assert listening.ca_pem is not None
            config = listening.kubeconfig(ADMIN)
            assert config["users"][0]["user"]["token"] == ADMIN
            context = ssl.create_default_context(cadata=listening.ca_pem.decode())
            async with httpx.AsyncClient(base_url=listening.url, verify=context) as client:
                ok = await client.get("/api/v1/nodes", headers=_bearer(ADMIN))
                bad = await client.get("/api/v1/nodes", headers=_bearer("wrong"))
            nursery.cancel_scope.cancel()
    assert listening.url.startswith("https://127.0.0.1:")
    assert ok.status_code == 200
    assert bad.status_code == 401
    assert bad.json() == UNAUTHORIZED
