"""Protobuf request bodies: kubectl's own bytes decode to the objects it meant, and the
server answers them in JSON (406 only for a client that accepts nothing but protobuf)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.apiserver.protobuf import Decoder, ProtobufError
from trio_ccm_testbed.apiserver.schema import load_schema

FIXTURES = Path(__file__).parent / "fixtures" / "kubectl-1.33-protobuf.json"
PROTOBUF = "application/vnd.kubernetes.protobuf"
KUBECTL_ACCEPT = f"{PROTOBUF},application/json"


def captured() -> dict[str, bytes]:
    """The bodies kubectl 1.33 sent for its typed creates, by path (last one wins)."""
    table = json.loads(FIXTURES.read_text())
    return {item["path"]: bytes.fromhex(item["body"]) for item in table["requests"]}


# -- a tiny independent encoder, so the tests do not lean on the module's writer --------
def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = field(1, api_version) + field(2, kind)
    return b"k8s\x00" + field(1, type_meta) + field(2, raw) + field(4, PROTOBUF)


def decode(body: bytes) -> dict[str, Any]:
    return Decoder(load_schema()).decode_envelope(body)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param(
            "/api/v1/namespaces",
            {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "team-a"}},
            id="namespace",
        ),
        pytest.param(
            "/apis/apps/v1/namespaces/default/deployments",
            {
                "kind": "Deployment",
                "apiVersion": "apps/v1",
                "metadata": {"name": "web", "labels": {"app": "web"}},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {
                            "containers": [
                                {
                                    "name": "nginx",
                                    "image": "nginx:1.27",
                                    "ports": [{"containerPort": 8080}],
                                }
                            ]
                        },
                    },
                },
            },
            id="deployment-replicas-0",
        ),
        pytest.param(
            "/api/v1/namespaces/default/secrets",
            {
                "kind": "Secret",
                "apiVersion": "v1",
                "metadata": {"name": "sec"},
                "data": {"password": "czNjcjN0"},
            },
            id="secret-bytes",
        ),
        pytest.param(
            "/api/v1/namespaces/default/serviceaccounts/robot/token",
            {
                "kind": "TokenRequest",
                "apiVersion": "authentication.k8s.io/v1",
                "spec": {"expirationSeconds": 600},
            },
            id="token-request",
        ),
        pytest.param(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
            {
                "kind": "Role",
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "metadata": {"name": "reader"},
                "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}],
            },
            id="role-empty-group-kept",
        ),
        pytest.param(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            {
                "kind": "SelfSubjectAccessReview",
                "apiVersion": "authorization.k8s.io/v1",
                "spec": {
                    "resourceAttributes": {
                        "namespace": "default",
                        "verb": "list",
                        "resource": "pods",
                    }
                },
            },
            id="access-review",
        ),
    ],
)
def test_kubectl_bodies_decode_to_the_objects_it_meant(path: str, expected: dict[str, Any]) -> None:
    """What kubectl 1.33 sent decodes to the object its command describes (a pointer field
    keeps its zero, an empty non-pointer value is left out, bytes become base64)."""
    assert decode(captured()[path]) == expected


def test_every_captured_body_decodes() -> None:
    """Each body kubectl 1.33 sent for the everyday creates decodes without an error."""
    bodies = json.loads(FIXTURES.read_text())["requests"]
    kinds = {decode(bytes.fromhex(item["body"]))["kind"] for item in bodies}
    assert kinds == {
        "Namespace",
        "Deployment",
        "Service",
        "ConfigMap",
        "Secret",
        "ServiceAccount",
        "TokenRequest",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "SelfSubjectAccessReview",
        "SelfSubjectReview",
    }


def test_special_encodings_decode_as_their_json_forms() -> None:
    """Time, IntOrString (both kinds), Quantity, a negative int32, a double and an unknown
    field number decode as upstream's JSON would show them."""
    taint = field(1, "k") + field(3, "NoExecute") + field(4, field(1, 1_700_000_000))
    node = field(1, field(1, "n1")) + field(2, field(5, taint) + field(99, "ignored"))
    assert decode(envelope("v1", "Node", node)) == {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": "n1"},
        "spec": {
            "taints": [{"key": "k", "effect": "NoExecute", "timeAdded": "2023-11-14T22:13:20Z"}]
        },
    }
    by_name = field(1, 1) + field(3, "http")
    by_number = field(1, 0) + field(2, 8080)
    ports = field(1, "a") + field(3, 80) + field(4, by_name)
    ports2 = field(1, "b") + field(3, 81) + field(4, by_number)
    spec = field(1, ports) + field(1, ports2)
    service = envelope("v1", "Service", field(1, field(1, "s")) + field(2, spec))
    assert decode(service)["spec"]["ports"] == [
        {"name": "a", "port": 80, "targetPort": "http"},
        {"name": "b", "port": 81, "targetPort": 8080},
    ]
    lease_spec = field(2, -5 & 0xFFFFFFFFFFFFFFFF)
    lease = decode(envelope("coordination.k8s.io/v1", "Lease", field(2, lease_spec)))
    assert lease["spec"] == {"leaseDurationSeconds": -5}
    resources = field(2, field(1, "cpu") + field(2, field(1, "250m")))
    container = field(1, "c") + field(2, "img") + field(8, resources)
    pod = decode(envelope("v1", "Pod", field(2, field(2, container))))
    assert pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "250m"}}
    unknown = decode(envelope("v1", "Pod", field(2, field(999, struct.pack("<d", 0.5)))))
    assert unknown == {"kind": "Pod", "apiVersion": "v1"}  # unknown fields are skipped


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"{}", "does not start with the k8s protobuf magic", id="no-magic"),
        pytest.param(b"k8s\x00\x0a\x05ab", "bytes announced, fewer remain", id="truncated"),
        pytest.param(
            envelope("v1", "Widget", b""), "no protobuf schema for kind 'Widget'", id="unknown-kind"
        ),
        pytest.param(
            envelope("v1", "Pod", field(2, varint(27 << 3 | 1) + b"\0" * 8)),
            "cannot decode a boolean from wire type 1",
            id="wrong-wire-type",
        ),
    ],
)
def test_malformed_bodies_are_named(body: bytes, message: str) -> None:
    """A body that is not a served object's protobuf is an error that says why."""
    with pytest.raises(ProtobufError, match=message):
        decode(body)


async def test_protobuf_create_is_answered_in_json() -> None:
    """A protobuf create from a client that also accepts JSON gets 201 and a JSON object."""
    server = ApiServer(seed=1)
    body = captured()["/api/v1/namespaces"]
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as client:
        with trio.fail_after(5):
            response = await client.post(
                "/api/v1/namespaces",
                content=body,
                headers={"content-type": PROTOBUF, "accept": KUBECTL_ACCEPT},
            )
    assert response.status_code == 201, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["metadata"]["name"] == "team-a"
    assert server.get("v1", "Namespace", "team-a")["status"] == {"phase": "Active"}


async def test_protobuf_only_client_gets_406() -> None:
    """A client that accepts only protobuf answers is refused with 406, nothing created."""
    server = ApiServer(seed=1)
    body = captured()["/api/v1/namespaces"]
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as client:
        with trio.fail_after(5):
            response = await client.post(
                "/api/v1/namespaces",
                content=body,
                headers={"content-type": PROTOBUF, "accept": PROTOBUF},
            )
            listed = await client.get("/api/v1/namespaces/team-a")
    assert response.status_code == 406
    assert response.json()["reason"] == "NotAcceptable"
    assert listed.status_code == 404


async def test_malformed_protobuf_body_is_400() -> None:
    """A garbled protobuf body is 400 naming protobuf, not a crash."""
    server = ApiServer(seed=1)
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as client:
        with trio.fail_after(5):
            response = await client.post(
                "/api/v1/namespaces", content=b"k8s\x00\xff", headers={"content-type": PROTOBUF}
            )
    assert response.status_code == 400
    assert "could not be decoded as protobuf" in response.json()["message"]
