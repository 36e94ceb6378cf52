"""Node spec.podCIDR / spec.podCIDRs as the real API server treats them: at most one CIDR
per IP family, no duplicates, podCIDR == podCIDRs[0], set once; and the guarded patch the
node-ipam-controller writes them with."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from tests.helpers.emulator import JSON_PATCH, MERGE, NODES, node
from trio_ccm.kube.patches import set_pod_cidrs

ONE_PER_FAMILY = "may specify no more than one CIDR for each IP family"


@pytest.mark.parametrize(
    ("spec", "stored"),
    [
        pytest.param({"podCIDR": "10.0.1.0/24"}, ["10.0.1.0/24"], id="podCIDR-only"),
        pytest.param({"podCIDRs": ["10.0.1.0/24"]}, ["10.0.1.0/24"], id="podCIDRs-only"),
        pytest.param(
            {"podCIDRs": ["fd00::/64", "10.0.1.0/24"]}, ["fd00::/64", "10.0.1.0/24"], id="dual"
        ),
        pytest.param(
            {"podCIDR": "10.0.9.0/24", "podCIDRs": ["10.0.1.0/24"]},
            ["10.0.9.0/24"],
            id="podCIDR-wins-when-they-differ",
        ),
    ],
)
async def test_pod_cidrs_are_stored(
    client: httpx.AsyncClient, spec: dict[str, Any], stored: list[str]
) -> None:
    """podCIDR and podCIDRs are kept in step; podCIDR wins when both are given and differ."""
    with trio.fail_after(5):
        response = await client.post(NODES, json=node("n1", **spec))
    assert response.status_code == 201
    assert response.json()["spec"]["podCIDRs"] == stored
    assert response.json()["spec"]["podCIDR"] == stored[0]


@pytest.mark.parametrize(
    ("cidrs", "message"),
    [
        pytest.param(
            ["10.0.1.0/24", "10.0.2.0/24"],
            'spec.podCIDRs: Invalid value: []string{"10.0.1.0/24", "10.0.2.0/24"}: '
            + ONE_PER_FAMILY,
            id="two-ipv4",
        ),
        pytest.param(
            ["10.0.1.0/24", "fd00::/64", "10.0.3.0/24"],
            'spec.podCIDRs: Invalid value: []string{"10.0.1.0/24", "fd00::/64", '
            '"10.0.3.0/24"}: ' + ONE_PER_FAMILY,
            id="three",
        ),
        pytest.param(
            ["fd00::/64", "fd00::/64"],
            '[spec.podCIDRs: Invalid value: []string{"fd00::/64", "fd00::/64"}: '
            + ONE_PER_FAMILY
            + ', spec.podCIDRs[1]: Duplicate value: "fd00::/64"]',
            id="duplicate",
        ),
    ],
)
async def test_pod_cidrs_one_per_family(
    client: httpx.AsyncClient, cidrs: list[str], message: str
) -> None:
    """More than one pod CIDR only for dual stack: one IPv4 and one IPv6, not repeated."""
    with trio.fail_after(5):
        response = await client.post(NODES, json=node("n1", podCIDRs=cidrs))
    assert response.status_code == 422
    assert response.json()["message"] == f'Node "n1" is invalid: {message}'


async def test_guarded_pod_cidr_patch(client: httpx.AsyncClient) -> None:
    """The controller's patch sets both fields once; a second assignment, or one meant for
    a Node since registered again (other uid), fails its test with 422; so does any change
    once set."""
    with trio.fail_after(5):
        created = (await client.post(NODES, json=node("n1"))).json()
        uid = created["metadata"]["uid"]
        stale = set_pod_cidrs(["10.0.1.0/24"], uid="not-" + uid)
        refused = await client.patch(f"{NODES}/n1", json=stale.document, headers=JSON_PATCH)
        patch = set_pod_cidrs(["10.0.1.0/24", "fd00::/64"], uid=uid)
        first = await client.patch(f"{NODES}/n1", json=patch.document, headers=JSON_PATCH)
        again = set_pod_cidrs(["10.0.2.0/24"], uid=uid)
        second = await client.patch(f"{NODES}/n1", json=again.document, headers=JSON_PATCH)
        changed = await client.patch(
            f"{NODES}/n1", json={"spec": {"podCIDRs": ["10.0.2.0/24"]}}, headers=MERGE
        )
    assert refused.status_code == 422
    assert first.status_code == 200
    assert first.json()["spec"]["podCIDR"] == "10.0.1.0/24"
    assert first.json()["spec"]["podCIDRs"] == ["10.0.1.0/24", "fd00::/64"]
    assert second.status_code == 422
    assert "testing value /spec/podCIDRs failed" in str(second.json()["details"])
    # podCIDR (unchanged) wins over the new podCIDRs, which still drops the IPv6 one.
    assert changed.status_code == 422
    assert "node updates may not change podCIDR" in changed.json()["message"]
