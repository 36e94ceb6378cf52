"""OpenAPI v2 (JSON and protobuf) and v3: real schemas, from the one schema table."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
import yaml

from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.apiserver.protobuf import fields

V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    server = ApiServer(seed=1)
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as c:
        yield c


async def get(client: httpx.AsyncClient, path: str, **headers: str) -> httpx.Response:
    with trio.fail_after(10):
        response = await client.get(path, headers=headers)
    assert response.status_code == 200, response.text
    return response


async def test_v2_carries_descriptions_types_enums_and_list_types(
    client: httpx.AsyncClient,
) -> None:
    """The v2 document describes Taint and ServiceSpec.type as upstream does."""
    document = (await get(client, "/openapi/v2")).json()
    taint = document["definitions"]["io.k8s.api.core.v1.Taint"]
    assert taint["required"] == ["key", "effect"]
    assert taint["properties"]["effect"]["enum"] == ["NoExecute", "NoSchedule", "PreferNoSchedule"]
    assert taint["properties"]["timeAdded"] == {
        "$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Time",
        "description": (
            "TimeAdded represents the time at which the taint was added. It is only written "
            "for NoExecute taints."
        ),
    }
    service_type = document["definitions"]["io.k8s.api.core.v1.ServiceSpec"]["properties"]["type"]
    assert service_type["description"].startswith("type determines how the Service is exposed.")
    assert (
        '\n\nPossible enum values:\n - `"ClusterIP"` means a service'
        in (service_type["description"])
    )
    ports = document["definitions"]["io.k8s.api.core.v1.ServiceSpec"]["properties"]["ports"]
    assert ports["x-kubernetes-list-type"] == "map"
    assert ports["x-kubernetes-list-map-keys"] == ["port", "protocol"]
    assert not any(key.startswith("x-proto") for key in ports)


async def test_v2_patch_operations_name_their_kind_and_field_validation(
    client: httpx.AsyncClient,
) -> None:
    """Every PATCH carries its group-version-kind and the fieldValidation query parameter
    (kubectl 1.27/1.28 check this before they let the server validate)."""
    document = (await get(client, "/openapi/v2")).json()
    patch = document["paths"]["/api/v1/namespaces/{namespace}/services/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "",
        "kind": "Service",
        "version": "v1",
    }
    names = {p["name"] for p in patch["parameters"]}
    assert {"fieldValidation", "fieldManager", "dryRun", "force", "name", "namespace"} <= names


def _decode(message: bytes) -> dict[int, list[Any]]:
    found: dict[int, list[Any]] = {}
    for number, _, value in fields(message):
        found.setdefault(number, []).append(value)
    return found


async def test_v2_protobuf_is_the_gnostic_document(client: httpx.AsyncClient) -> None:
    """Asked for protobuf (as kubectl 1.27 asks), /openapi/v2 is gnostic's Document: the
    swagger version, the paths with each PATCH's group-version-kind as a YAML extension."""
    response = await get(client, "/openapi/v2", accept=V2_PROTOBUF)
    document = _decode(response.content)
    assert document[1] == [b"2.0"]
    (paths,) = document[8]
    items = {}
    for entry in _decode(paths)[2]:
        named = _decode(entry)
        items[named[1][0].decode()] = named[2][0]
    service = _decode(items["/api/v1/namespaces/{namespace}/services/{name}"])
    patch = _decode(service[8][0])
    extensions = {}
    for entry in patch[13]:
        named = _decode(entry)
        extensions[named[1][0].decode()] = _decode(named[2][0])[2][0].decode()
    assert yaml.safe_load(extensions["x-kubernetes-group-version-kind"]) == {
        "group": "",
        "kind": "Service",
        "version": "v1",
    }
    query_names = []
    for item in patch[8]:
        parameter = _decode(_decode(item)[1][0])
        if 2 in parameter:
            sub = _decode(parameter[2][0])
            if 3 in sub:
                query_names.append(_decode(sub[3][0])[4][0].decode())
    assert "fieldValidation" in query_names
    legacy = await get(client, "/swagger-2.0.0.pb-v1")
    assert legacy.content == response.content


async def test_v3_documents_hold_the_schemas_their_paths_reach(client: httpx.AsyncClient) -> None:
    """Each v3 document has its kinds' schemas and every schema they reference, with
    references wrapped as upstream writes them (allOf, default {})."""
    index = (await get(client, "/openapi/v3")).json()
    assert set(index["paths"]) >= {"api/v1", "apis/apps/v1", "apis/coordination.k8s.io/v1"}
    document = (await get(client, index["paths"]["api/v1"]["serverRelativeURL"])).json()
    schemas = document["components"]["schemas"]
    node_spec = schemas["io.k8s.api.core.v1.NodeSpec"]
    assert node_spec["properties"]["taints"]["items"] == {
        "allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.Taint"}],
        "default": {},
    }
    assert schemas["io.k8s.api.core.v1.Node"]["x-kubernetes-group-version-kind"] == [
        {"group": "", "kind": "Node", "version": "v1"}
    ]
    for schema in schemas.values():
        for prop in schema.get("properties", {}).values():
            for ref in [prop.get("$ref")] + [r.get("$ref") for r in prop.get("allOf", [])]:
                if ref:
                    assert ref.rsplit("/", 1)[-1] in schemas, ref
    quantity = schemas["io.k8s.apimachinery.pkg.api.resource.Quantity"]
    assert quantity["oneOf"] == [{"type": "string"}, {"type": "number"}]


async def test_v3_of_a_group_nobody_serves_is_404(client: httpx.AsyncClient) -> None:
    """An unknown group-version has no document."""
    with trio.fail_after(5):
        response = await client.get("/openapi/v3/apis/nope.example.com/v1")
    assert response.status_code == 404
