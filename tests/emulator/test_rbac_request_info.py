"""Request attributes as kube-apiserver's RequestInfo derives them for RBAC: a list or watch
whose field selector pins `metadata.name` is a request for that name, so a rule limited by
`resourceNames` can allow watching one object (as a leader-election standby watches its
Lease), and a refusal names the object."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from trio_ccm_testbed.apiserver import ApiServer

ADMIN = "adm"
SA = "system:serviceaccount:kube-system:ccm"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"

MANIFEST = """
apiVersion: v1
kind: ServiceAccount
metadata: {name: ccm, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: "ccm:lease", namespace: kube-system}
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [ccm, "a%b"]
  verbs: [get, list, deletecollection]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [watched]
  verbs: [watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: "ccm:lease", namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: "ccm:lease"}
subjects:
- {kind: ServiceAccount, name: ccm, namespace: kube-system}
"""


def lease(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"holderIdentity": "someone"},
    }


@pytest.fixture
async def sa() -> AsyncIterator[httpx.AsyncClient]:
    server = ApiServer(seed=1, admin_token=ADMIN, rbac=True)
    server.load_manifest_text(MANIFEST)
    for name in ("ccm", "other", "watched"):
        server.create(lease(name))
    token = server.authn.issue_service_account("kube-system", "ccm")
    async with httpx.AsyncClient(
        transport=server.transport(),
        base_url="http://emulator",
        headers={"authorization": f"Bearer {token}"},
    ) as client:
        yield client


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        pytest.param({"fieldSelector": "metadata.name=ccm"}, 200, id="name-pinned"),
        pytest.param({"fieldSelector": "metadata.name==ccm"}, 200, id="double-equals"),
        pytest.param(
            {"fieldSelector": "metadata.namespace=kube-system,metadata.name=ccm"},
            200,
            id="with-another-term",
        ),
        pytest.param({}, 403, id="no-selector"),
        pytest.param({"labelSelector": "app=ccm"}, 403, id="label-selector-only"),
        pytest.param({"fieldSelector": "metadata.name=other"}, 403, id="other-name"),
        pytest.param({"fieldSelector": "metadata.name!=other"}, 403, id="not-equal"),
        pytest.param({"fieldSelector": "metadata.name=a%b"}, 403, id="not-a-path-segment"),
        pytest.param({"fieldSelector": "metadata.name"}, 403, id="unparsable"),
    ],
)
async def test_a_list_is_authorized_for_the_name_its_field_selector_pins(
    sa: httpx.AsyncClient, params: dict[str, str], expected: int
) -> None:
    """A list pinned to one name by `metadata.name=` is allowed by a rule naming it in
    resourceNames; any other list is a request for the whole collection."""
    with trio.fail_after(5):
        response = await sa.get(LEASES, params=params)
    assert response.status_code == expected, response.text
    if expected == 200:
        assert [i["metadata"]["name"] for i in response.json()["items"]] == ["ccm"]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param("metadata.name=watched", 200, id="granted-name"),
        pytest.param("metadata.name=ccm", 403, id="name-without-watch"),
        pytest.param("", 403, id="whole-collection"),
    ],
)
async def test_a_watch_is_authorized_for_the_name_its_field_selector_pins(
    sa: httpx.AsyncClient, selector: str, expected: int
) -> None:
    """A standby may watch just its Lease with a rule limited by resourceNames."""
    params = {"watch": "1", "fieldSelector": selector} if selector else {"watch": "1"}
    with trio.fail_after(5):
        async with sa.stream("GET", LEASES, params=params) as response:
            assert response.status_code == expected
            first = await anext(response.aiter_lines())
    if expected == 200:
        assert '"type":"ADDED"' in first
        assert '"name":"watched"' in first


async def test_a_refused_named_watch_names_the_object(sa: httpx.AsyncClient) -> None:
    """The 403 for a watch pinned to one name carries that name, as upstream's does."""
    with trio.fail_after(5):
        response = await sa.get(LEASES, params={"watch": "1", "fieldSelector": "metadata.name=ccm"})
    assert response.status_code == 403
    body = response.json()
    assert body["message"] == (
        f'leases.coordination.k8s.io "ccm" is forbidden: User "{SA}" cannot watch resource '
        '"leases" in API group "coordination.k8s.io" in the namespace "kube-system"'
    )
    assert body["details"] == {"name": "ccm", "group": "coordination.k8s.io", "kind": "leases"}


async def test_a_delete_collection_is_never_a_named_request(sa: httpx.AsyncClient) -> None:
    """Only list and watch take their name from the field selector: a deletecollection
    pinned to a name is still a request for the collection."""
    with trio.fail_after(5):
        response = await sa.delete(LEASES, params={"fieldSelector": "metadata.name=ccm"})
    assert response.status_code == 403
    assert "cannot deletecollection resource" in response.json()["message"]
