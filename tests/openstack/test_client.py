"""OpenStackClient against the real Keystone, Nova and Neutron: both auth methods, token
re-use, the catalog, paging, the error tree, and the leadership fence."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.helpers.openstack import open_client, password_credentials
from trio_ccm.cloud import fence
from trio_ccm.cloud.openstack import (
    ConflictError,
    Credentials,
    NotFoundError,
    OpenStackAuthError,
    OpenStackError,
)
from trio_ccm.errors import NotLeadingError

DEADLINE_S = 60


async def test_password_auth_reuses_the_token(openstack: Any) -> None:
    """One Keystone call serves many requests; the token is scoped to the ccm project."""
    async with open_client(openstack) as client:
        with trio.fail_after(DEADLINE_S):
            first = await client.request("compute", "GET", "/flavors")
            await client.request("network", "GET", "/v2.0/networks")
            assert await client.project_id() == openstack.ccm_auth["project_id"]
        assert {f["name"] for f in first["flavors"]} >= set(openstack.flavors)
        stats = client.statistics()
        assert stats.auths == 1
        assert stats.calls["identity:POST:/v3/auth/tokens"] == 1


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"project_name": "", "project_id": "<id>"}, id="project-id"),
        pytest.param(
            {"user_domain_name": "", "project_domain_name": "", "domain_name": "Default"},
            id="domain-name-fallback",
        ),
    ],
)
async def test_password_auth_forms(openstack: Any, changes: dict[str, str]) -> None:
    """The project by ID and the shared domain-name both authenticate."""
    changes = {
        k: (openstack.ccm_auth["project_id"] if v == "<id>" else v) for k, v in changes.items()
    }
    async with open_client(openstack, password_credentials(openstack, **changes)) as client:
        with trio.fail_after(DEADLINE_S):
            assert await client.project_id() == openstack.ccm_auth["project_id"]


async def test_application_credential(openstack: Any) -> None:
    """An application credential of the ccm user authenticates, by ID and by name."""
    conn = openstack.sdk()
    user_id = conn.current_user_id
    name = "test-application-credential"
    for old in conn.identity.application_credentials(user_id, name=name):
        conn.identity.delete_application_credential(user_id, old.id)
    made = conn.identity.create_application_credential(user_id, name=name)
    try:
        by_id = Credentials(
            auth_url=openstack.auth_url,
            application_credential_id=made.id,
            application_credential_secret=made.secret,
        )
        by_name = Credentials(
            auth_url=openstack.auth_url,
            application_credential_name=name,
            application_credential_secret=made.secret,
            user_id=user_id,
        )
        for credentials in (by_id, by_name):
            async with open_client(openstack, credentials) as client:
                with trio.fail_after(DEADLINE_S):
                    answer = await client.request("network", "GET", "/v2.0/networks")
                    assert await client.project_id() == openstack.ccm_auth["project_id"]
            assert openstack.network_id in {n["id"] for n in answer["networks"]}
    finally:
        conn.identity.delete_application_credential(user_id, made.id)


async def test_wrong_password_names_the_keys(openstack: Any) -> None:
    """Keystone's refusal is an OpenStackAuthError naming the cloud.conf keys to check."""
    async with open_client(openstack, password_credentials(openstack, password="wrong")) as c:
        with trio.fail_after(DEADLINE_S), pytest.raises(OpenStackAuthError) as caught:
            await c.request("compute", "GET", "/flavors")
    assert caught.value.status == 401
    assert "username/user-id, password" in str(caught.value)


async def test_unknown_region_names_the_catalog(openstack: Any) -> None:
    """A region the catalog lacks is an error listing what the catalog offers."""
    async with open_client(openstack) as client:
        client.region = "Atlantis"
        with trio.fail_after(DEADLINE_S), pytest.raises(OpenStackError) as caught:
            await client.request("compute", "GET", "/flavors")
    assert "no public endpoint of type 'compute' in region Atlantis" in str(caught.value)
    assert "public@RegionOne" in str(caught.value)


async def test_paging_and_repeated_filters(openstack: Any) -> None:
    """`list` follows Neutron's next links; a list value repeats the filter (any of)."""
    conn = openstack.sdk()
    made = [
        conn.network.create_port(network_id=openstack.network_id, name=f"test-paging-{i}")
        for i in range(3)
    ]
    try:
        async with open_client(openstack) as client:
            with trio.fail_after(DEADLINE_S):
                ports = await client.list(
                    "network",
                    "/v2.0/ports",
                    "ports",
                    params={"id": [p.id for p in made]},
                    limit=1,
                )
            assert sorted(p["id"] for p in ports) == sorted(p.id for p in made)
            assert client.statistics().calls["network:GET:/v2.0/ports"] >= 3
    finally:
        for port in made:
            conn.network.delete_port(port, ignore_missing=True)


async def test_error_tree(openstack: Any) -> None:
    """404 is NotFoundError and 409 ConflictError, each with the server's message."""
    conn = openstack.sdk()
    port = conn.network.create_port(network_id=openstack.network_id, name="test-error-tree")
    try:
        async with open_client(openstack) as client:
            with trio.fail_after(DEADLINE_S):
                with pytest.raises(NotFoundError) as missing:
                    await client.request(
                        "compute", "GET", "/servers/00000000-0000-0000-0000-000000000000"
                    )
                address = port.fixed_ips[0]["ip_address"]
                with pytest.raises(ConflictError) as conflict:
                    await client.request(
                        "network",
                        "POST",
                        "/v2.0/ports",
                        json={
                            "port": {
                                "network_id": openstack.network_id,
                                "fixed_ips": [{"ip_address": address}],
                            }
                        },
                    )
        assert missing.value.status == 404
        assert missing.value.server_message
        assert conflict.value.status == 409
        assert address in conflict.value.server_message
    finally:
        conn.network.delete_port(port, ignore_missing=True)


async def test_fence_stops_every_request(openstack: Any) -> None:
    """A replica that lost its Lease sends nothing, not even to Keystone."""

    def guard() -> None:
        raise NotLeadingError("the Lease is gone")

    async with open_client(openstack) as client:
        with trio.fail_after(DEADLINE_S), fence.guarding(guard), pytest.raises(NotLeadingError):
            await client.request("compute", "GET", "/flavors")
        assert client.statistics().calls == {}
