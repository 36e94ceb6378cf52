"""Discovery, /version, OpenAPI v3 and Table responses, as kubectl and client-go read them."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from trio_ccm_testbed.apiserver import ApiServer

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList"
V2 = AGGREGATED.format(v="v2")
V2BETA1 = AGGREGATED.format(v="v2beta1")
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
MERGE = {"content-type": "application/merge-patch+json"}
NOT_FOUND = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "the server could not find the requested resource",
    "reason": "NotFound",
    "details": {},
    "code": 404,
}


def _by_name(resources: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in resources}


# ---------------------------------------------------------------- /version


@pytest.mark.parametrize(
    "path",
    [pytest.param("/version", id="version"), pytest.param("/version/", id="trailing-slash")],
)
async def test_version_fields(client: httpx.AsyncClient, path: str) -> None:
    """/version answers version.Info with every field kubectl version reads."""
    with trio.fail_after(5):
        response = await client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert {
        "major",
        "minor",
        "gitVersion",
        "gitCommit",
        "gitTreeState",
        "buildDate",
        "goVersion",
        "compiler",
        "platform",
    } <= set(body)
    assert (body["major"], body["minor"]) == ("1", "33")
    assert body["gitVersion"].startswith("v1.33.")
    assert body["gitTreeState"] == "clean"
    assert body["platform"] == "linux/amd64"
    dt.datetime.fromisoformat(body["buildDate"].replace("Z", "+00:00"))


async def test_version_follows_configured_version() -> None:
    """ApiServer(version=...) changes what /version reports."""
    server = ApiServer(seed=1, version=(1, 30))
    with trio.fail_after(5):
        async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as client:
            body = (await client.get("/version")).json()
    assert (body["major"], body["minor"]) == ("1", "30")
    assert body["gitVersion"].startswith("v1.30.")


# ---------------------------------------------------------------- legacy discovery


@pytest.mark.parametrize(
    "path", [pytest.param("/api", id="api"), pytest.param("/api/", id="trailing-slash")]
)
async def test_api_answers_legacy_api_versions(client: httpx.AsyncClient, path: str) -> None:
    """/api answers APIVersions listing v1 and a server address."""
    with trio.fail_after(5):
        response = await client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["kind"] == "APIVersions"
    assert body["versions"] == ["v1"]
    [address] = body["serverAddressByClientCIDRs"]
    assert address["clientCIDR"] == "0.0.0.0/0"
    assert address["serverAddress"]


@pytest.mark.parametrize(
    "accept",
    [
        pytest.param(None, id="no-accept"),
        pytest.param("application/json", id="json"),
        pytest.param("*/*", id="any"),
    ],
)
async def test_apis_answers_group_list(client: httpx.AsyncClient, accept: str | None) -> None:
    """/apis with a plain Accept answers the legacy APIGroupList with every served group."""
    headers = {"accept": accept} if accept else {}
    with trio.fail_after(5):
        response = await client.get("/apis", headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert (body["kind"], body["apiVersion"]) == ("APIGroupList", "v1")
    groups = {g["name"]: g for g in body["groups"]}
    assert {
        "coordination.k8s.io",
        "rbac.authorization.k8s.io",
        "events.k8s.io",
        "authorization.k8s.io",
        "authentication.k8s.io",
    } <= set(groups)
    assert "" not in groups
    for name, group in groups.items():
        assert group["preferredVersion"] == {"groupVersion": f"{name}/v1", "version": "v1"}
        assert group["preferredVersion"] in group["versions"]


@pytest.mark.parametrize(
    ("name", "namespaced", "kind", "verbs", "short_names"),
    [
        pytest.param(
            "nodes",
            False,
            "Node",
            ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            ["no"],
            id="nodes",
        ),
        pytest.param("nodes/status", False, "Node", ["get", "patch", "update"], None, id="node-st"),
        pytest.param(
            "services",
            True,
            "Service",
            ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            ["svc"],
            id="services",
        ),
        pytest.param(
            "services/status", True, "Service", ["get", "patch", "update"], None, id="svc-status"
        ),
        pytest.param(
            "namespaces",
            False,
            "Namespace",
            ["create", "delete", "get", "list", "patch", "update", "watch"],
            ["ns"],
            id="namespaces",
        ),
        pytest.param(
            "serviceaccounts",
            True,
            "ServiceAccount",
            ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            ["sa"],
            id="serviceaccounts",
        ),
        pytest.param(
            "serviceaccounts/token", True, "TokenRequest", ["create"], None, id="sa-token"
        ),
    ],
)
async def test_core_v1_resource_list(
    client: httpx.AsyncClient,
    name: str,
    namespaced: bool,
    kind: str,
    verbs: list[str],
    short_names: list[str] | None,
) -> None:
    """/api/v1 lists each resource and subresource with its scope, kind, verbs and short names."""
    with trio.fail_after(5):
        response = await client.get("/api/v1")
    body = response.json()
    assert (body["kind"], body["apiVersion"], body["groupVersion"]) == (
        "APIResourceList",
        "v1",
        "v1",
    )
    entry = _by_name(body["resources"])[name]
    assert entry["namespaced"] is namespaced
    assert entry["kind"] == kind
    assert sorted(entry["verbs"]) == sorted(verbs)
    assert entry.get("shortNames") == short_names
    if "/" in name:
        assert entry["singularName"] == ""
    else:
        assert entry["singularName"] == kind.lower()


async def test_token_subresource_names_its_group_and_version(client: httpx.AsyncClient) -> None:
    """serviceaccounts/token carries group authentication.k8s.io and version v1, as upstream's."""
    with trio.fail_after(5):
        response = await client.get("/api/v1")
    entry = _by_name(response.json()["resources"])["serviceaccounts/token"]
    assert (entry.get("group"), entry.get("version")) == ("authentication.k8s.io", "v1")


@pytest.mark.parametrize(
    ("path", "kind", "check"),
    [
        pytest.param(
            "/apis/coordination.k8s.io",
            "APIGroup",
            {"name": "coordination.k8s.io"},
            id="api-group",
        ),
        pytest.param(
            "/apis/coordination.k8s.io/",
            "APIGroup",
            {"name": "coordination.k8s.io"},
            id="api-group-trailing-slash",
        ),
        pytest.param(
            "/apis/coordination.k8s.io/v1",
            "APIResourceList",
            {"groupVersion": "coordination.k8s.io/v1"},
            id="coordination-v1",
        ),
        pytest.param(
            "/apis/rbac.authorization.k8s.io/v1",
            "APIResourceList",
            {"groupVersion": "rbac.authorization.k8s.io/v1"},
            id="rbac-v1",
        ),
        pytest.param(
            "/apis/events.k8s.io/v1",
            "APIResourceList",
            {"groupVersion": "events.k8s.io/v1"},
            id="events-v1",
        ),
        pytest.param("/api/v1/", "APIResourceList", {"groupVersion": "v1"}, id="core-trailing"),
    ],
)
async def test_group_and_group_version_documents(
    client: httpx.AsyncClient, path: str, kind: str, check: dict[str, str]
) -> None:
    """/apis/{group} answers APIGroup and /apis/{group}/{version} its APIResourceList."""
    with trio.fail_after(5):
        response = await client.get(path)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["kind"] == kind
    for key, value in check.items():
        assert body[key] == value


@pytest.mark.parametrize(
    ("path", "resource", "namespaced", "kind"),
    [
        pytest.param("/apis/coordination.k8s.io/v1", "leases", True, "Lease", id="leases"),
        pytest.param("/apis/events.k8s.io/v1", "events", True, "Event", id="events"),
        pytest.param(
            "/apis/rbac.authorization.k8s.io/v1",
            "clusterroles",
            False,
            "ClusterRole",
            id="clusterroles",
        ),
        pytest.param(
            "/apis/rbac.authorization.k8s.io/v1", "rolebindings", True, "RoleBinding", id="rb"
        ),
        pytest.param(
            "/apis/authorization.k8s.io/v1",
            "selfsubjectaccessreviews",
            False,
            "SelfSubjectAccessReview",
            id="ssar",
        ),
        pytest.param(
            "/apis/authentication.k8s.io/v1", "tokenreviews", False, "TokenReview", id="tokenrev"
        ),
    ],
)
async def test_group_resources_have_scope_and_kind(
    client: httpx.AsyncClient, path: str, resource: str, namespaced: bool, kind: str
) -> None:
    """Each group's resource list has the resource with the right scope and kind."""
    with trio.fail_after(5):
        response = await client.get(path)
    entry = _by_name(response.json()["resources"])[resource]
    assert (entry["namespaced"], entry["kind"]) == (namespaced, kind)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/api/v1/foos", id="unknown-core-resource"),
        pytest.param("/api/v2", id="unknown-core-version"),
        pytest.param("/apis/coordination.k8s.io/v1/foos", id="unknown-group-resource"),
        pytest.param("/apis/nope.example.com/v1", id="unknown-group-version"),
        pytest.param("/api/v1/namespaces/default/nodes", id="cluster-resource-in-namespace"),
        pytest.param("/api/v1/nodes/n1/foo", id="unknown-subresource"),
        pytest.param("/openapi/v3/apis/nope.example.com/v1", id="unknown-openapi-document"),
    ],
)
async def test_unknown_path_is_404_status(client: httpx.AsyncClient, path: str) -> None:
    """A path the server does not serve gets upstream's 404 NotFound Status."""
    with trio.fail_after(5):
        response = await client.get(path)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.json() == NOT_FOUND


# ---------------------------------------------------------------- aggregated discovery


@pytest.mark.parametrize(
    ("path", "accept", "version"),
    [
        pytest.param("/apis", f"{V2},application/json", "v2", id="apis-v2"),
        pytest.param("/api", f"{V2},application/json", "v2", id="api-v2"),
        pytest.param("/apis", V2BETA1, "v2beta1", id="apis-v2beta1-only"),
        pytest.param(
            "/api", f"{V2BETA1},application/json", "v2beta1", id="api-v2beta1-kubectl-1.27"
        ),
        pytest.param(
            "/apis", f"{V2},{V2BETA1},application/json", "v2", id="apis-both-kubectl-1.30"
        ),
        pytest.param(
            "/apis",
            "application/json; g=apidiscovery.k8s.io; v=v2; as=APIGroupDiscoveryList",
            "v2",
            id="spaces-in-media-type",
        ),
        pytest.param("/apis/", V2, "v2", id="trailing-slash"),
    ],
)
async def test_aggregated_discovery_echoes_the_asked_version(
    client: httpx.AsyncClient, path: str, accept: str, version: str
) -> None:
    """Aggregated discovery answers the version asked for, with the matching content-type."""
    with trio.fail_after(5):
        response = await client.get(path, headers={"accept": accept})
    assert response.status_code == 200
    assert response.headers["content-type"] == AGGREGATED.format(v=version)
    assert "Accept" in response.headers.get("vary", "")
    body = response.json()
    assert (body["kind"], body["apiVersion"]) == (
        "APIGroupDiscoveryList",
        f"apidiscovery.k8s.io/{version}",
    )


async def test_aggregated_apis_lists_groups_and_resources(client: httpx.AsyncClient) -> None:
    """Aggregated /apis lists every group with its resources' scope and response kind."""
    with trio.fail_after(5):
        body = (await client.get("/apis", headers={"accept": V2})).json()
    groups = {item["metadata"]["name"]: item for item in body["items"]}
    assert {
        "coordination.k8s.io",
        "rbac.authorization.k8s.io",
        "events.k8s.io",
        "authorization.k8s.io",
        "authentication.k8s.io",
    } <= set(groups)
    [version] = groups["coordination.k8s.io"]["versions"]
    assert version["version"] == "v1"
    [leases] = [r for r in version["resources"] if r["resource"] == "leases"]
    assert leases["scope"] == "Namespaced"
    assert leases["responseKind"] == {
        "group": "coordination.k8s.io",
        "version": "v1",
        "kind": "Lease",
    }


async def test_aggregated_core_lists_subresources(client: httpx.AsyncClient) -> None:
    """Aggregated /api lists services/status and serviceaccounts/token as subresources."""
    with trio.fail_after(5):
        body = (await client.get("/api", headers={"accept": V2})).json()
    [core] = body["items"]
    [v1] = core["versions"]
    resources = {r["resource"]: r for r in v1["resources"]}
    assert resources["nodes"]["scope"] == "Cluster"
    assert resources["nodes"]["shortNames"] == ["no"]
    assert resources["services"]["scope"] == "Namespaced"
    assert {s["subresource"]: s["verbs"] for s in resources["services"]["subresources"]} == {
        "status": ["get", "patch", "update"]
    }
    [token] = resources["serviceaccounts"]["subresources"]
    assert token["subresource"] == "token"
    assert token["responseKind"] == {
        "group": "authentication.k8s.io",
        "version": "v1",
        "kind": "TokenRequest",
    }
    assert token["verbs"] == ["create"]


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        pytest.param("/apis", "APIGroupList", id="apis"),
        pytest.param("/api", "APIVersions", id="api"),
    ],
)
async def test_other_as_parameter_falls_back_to_legacy(
    client: httpx.AsyncClient, path: str, kind: str
) -> None:
    """An Accept naming an aggregated version the server does not serve gets legacy discovery."""
    accept = f"{AGGREGATED.format(v='v3')},application/json"
    with trio.fail_after(5):
        response = await client.get(path, headers={"accept": accept})
    assert response.headers["content-type"] == "application/json"
    assert response.json()["kind"] == kind


# ---------------------------------------------------------------- OpenAPI v3


async def test_openapi_index_points_at_documents_that_exist(client: httpx.AsyncClient) -> None:
    """Every serverRelativeURL in /openapi/v3 answers an OpenAPI 3 document."""
    with trio.fail_after(10):
        index = (await client.get("/openapi/v3")).json()
        paths = index["paths"]
        assert {"api/v1", "apis/coordination.k8s.io/v1", "apis/rbac.authorization.k8s.io/v1"} <= (
            set(paths)
        )
        for name, entry in paths.items():
            url = entry["serverRelativeURL"]
            assert url.startswith(f"/openapi/v3/{name}?hash=")
            response = await client.get(url)
            assert response.status_code == 200, url
            assert response.json()["openapi"].startswith("3.")


async def test_openapi_patch_operations_carry_gvk_and_field_validation(
    client: httpx.AsyncClient,
) -> None:
    """Each patch operation names its group-version-kind and takes fieldValidation."""
    patches = 0
    with trio.fail_after(10):
        index = (await client.get("/openapi/v3")).json()
        for entry in index["paths"].values():
            document = (await client.get(entry["serverRelativeURL"])).json()
            for path, operations in document["paths"].items():
                operation = operations.get("patch")
                if operation is None:
                    continue
                patches += 1
                gvk = operation["x-kubernetes-group-version-kind"]
                assert {"group", "version", "kind"} <= set(gvk), path
                names = {p["name"] for p in operation.get("parameters", [])}
                assert "fieldValidation" in names, path
    assert patches > 0


async def test_openapi_core_document_covers_node_status_patch(client: httpx.AsyncClient) -> None:
    """The core v1 document has PATCH on /api/v1/nodes/{name}/status with kind Node."""
    with trio.fail_after(5):
        document = (await client.get("/openapi/v3/api/v1")).json()
    operation = document["paths"]["/api/v1/nodes/{name}/status"]["patch"]
    assert operation["x-kubernetes-group-version-kind"] == {
        "group": "",
        "version": "v1",
        "kind": "Node",
    }
    services = document["paths"]["/api/v1/namespaces/{namespace}/services/{name}"]["patch"]
    assert services["x-kubernetes-group-version-kind"]["kind"] == "Service"


# ---------------------------------------------------------------- Table responses

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


@pytest.fixture
def table_server() -> ApiServer:
    return ApiServer(seed=1, now=lambda: NOW)


@pytest.fixture
async def table_client(table_server: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=table_server.transport(), base_url="http://emulator"
    ) as client:
        yield client


def _columns(table: dict[str, Any]) -> list[tuple[str, int]]:
    return [(c["name"], c["priority"]) for c in table["columnDefinitions"]]


async def test_node_table_columns_and_cells(
    table_server: ApiServer, table_client: httpx.AsyncClient
) -> None:
    """A Table of nodes has kubectl's node columns and the node's status in its cells."""
    table_server.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
        }
    )
    with trio.fail_after(5):
        patched = await table_client.patch(
            "/api/v1/nodes/n1/status",
            headers=MERGE,
            json={
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
                    "nodeInfo": {
                        "kubeletVersion": "v1.33.0",
                        "osImage": "Ubuntu 24.04",
                        "kernelVersion": "6.8.0",
                        "containerRuntimeVersion": "containerd://2.0.0",
                    },
                }
            },
        )
        assert patched.status_code == 200, patched.text
        response = await table_client.get("/api/v1/nodes", headers={"accept": TABLE})
    assert response.status_code == 200
    table = response.json()
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert _columns(table) == [
        ("Name", 0),
        ("Status", 0),
        ("Roles", 0),
        ("Age", 0),
        ("Version", 0),
        ("Internal-IP", 1),
        ("External-IP", 1),
        ("OS-Image", 1),
        ("Kernel-Version", 1),
        ("Container-Runtime", 1),
    ]
    [row] = table["rows"]
    assert row["cells"] == [
        "n1",
        "Ready",
        "control-plane",
        "0s",
        "v1.33.0",
        "10.0.0.5",
        "<none>",
        "Ubuntu 24.04",
        "6.8.0",
        "containerd://2.0.0",
    ]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["name"] == "n1"


async def test_service_table_external_ip_pending_then_ingress(
    table_server: ApiServer, table_client: httpx.AsyncClient
) -> None:
    """A LoadBalancer Service shows EXTERNAL-IP <pending> until /status sets an ingress IP."""
    with trio.fail_after(5):
        created = await table_client.post(
            "/api/v1/namespaces/default/services",
            json={
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {
                    "type": "LoadBalancer",
                    "selector": {"app": "web"},
                    "ports": [{"port": 80, "targetPort": 8080}],
                },
            },
        )
        assert created.status_code == 201, created.text
        service = created.json()
        before = (
            await table_client.get(
                "/api/v1/namespaces/default/services/web", headers={"accept": TABLE}
            )
        ).json()
        patched = await table_client.patch(
            "/api/v1/namespaces/default/services/web/status",
            headers=MERGE,
            json={"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}},
        )
        assert patched.status_code == 200, patched.text
        after = (
            await table_client.get(
                "/api/v1/namespaces/default/services/web", headers={"accept": TABLE}
            )
        ).json()
    cluster_ip = service["spec"]["clusterIP"]
    node_port = service["spec"]["ports"][0]["nodePort"]
    assert _columns(before) == [
        ("Name", 0),
        ("Type", 0),
        ("Cluster-IP", 0),
        ("External-IP", 0),
        ("Port(s)", 0),
        ("Age", 0),
        ("Selector", 1),
    ]
    ports = f"80:{node_port}/TCP"
    assert before["rows"][0]["cells"] == [
        "web",
        "LoadBalancer",
        cluster_ip,
        "<pending>",
        ports,
        "0s",
        "app=web",
    ]
    assert after["rows"][0]["cells"] == [
        "web",
        "LoadBalancer",
        cluster_ip,
        "203.0.113.10",
        ports,
        "0s",
        "app=web",
    ]


async def test_service_list_table_has_a_row_per_service(
    table_server: ApiServer, table_client: httpx.AsyncClient
) -> None:
    """A Table list of services has one row per Service, ClusterIP ones showing <none>."""
    with trio.fail_after(5):
        response = await table_client.get(
            "/api/v1/namespaces/default/services", headers={"accept": TABLE}
        )
    table = response.json()
    [row] = table["rows"]
    assert row["cells"][:5] == ["kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP"]
    assert table["metadata"]["resourceVersion"] == str(table_server.store.rv)
