"""Instances: OCCM's provider-ID forms and node-address order (pure: OCCM's golden vectors),
then the instances against the real Nova and Neutron (lookups, bulk, exists, shutdown)."""

from __future__ import annotations

from typing import Any

import pytest

from trio_ccm.cloud.openstack.instances import (
    Networking,
    node_addresses,
    parse_provider_id,
    provider_id,
    sanitize_label,
)
from trio_ccm.cloud.provider import InvalidProviderIDError, NodeAddress

UUID = "7b9cf879-7146-417c-abfd-cb4272f0c935"

# OCCM's TestNodeAddresses* server (pkg/openstack/openstack_test.go).
SERVER: dict[str, Any] = {
    "status": "ACTIVE",
    "accessIPv4": "50.56.176.99",
    "accessIPv6": "2001:4800:790e:510:be76:4eff:fe04:82a8",
    "addresses": {
        "private": [
            {"addr": "10.0.0.32", "OS-EXT-IPS:type": "fixed", "version": 4},
            {"addr": "50.56.176.36", "OS-EXT-IPS:type": "floating", "version": 4},
            {"addr": "10.0.0.31", "version": 4},
        ],
        "public": [
            {"addr": "50.56.176.35", "version": 4},
            {"addr": "2001:4800:780e:510:be76:4eff:fe04:84a8", "version": 6},
        ],
    },
    "metadata": {"hostname": "minion.novalocal"},
}
PORTS: list[dict[str, Any]] = [
    {"status": "ACTIVE", "fixed_ips": [{"ip_address": "10.0.0.32"}, {"ip_address": "10.0.0.31"}]}
]
ACCESS_V6 = "2001:4800:790e:510:be76:4eff:fe04:82a8"
PUBLIC_V6 = "2001:4800:780e:510:be76:4eff:fe04:84a8"


def networks(**addresses: list[dict[str, Any]]) -> dict[str, Any]:
    """SERVER with other Nova addresses (network names with '-' written as '_')."""
    return {
        **SERVER,
        "metadata": {},
        "addresses": {name.replace("_", "-"): entries for name, entries in addresses.items()},
    }


PRIVATE = SERVER["addresses"]["private"]
PUBLIC = SERVER["addresses"]["public"]
ALSO_PRIVATE = [{"addr": "10.0.0.64", "version": 4}]


def addrs(*pairs: str) -> tuple[NodeAddress, ...]:
    """Addresses from "Type address" strings."""
    return tuple(NodeAddress(*pair.split(" ", 1)) for pair in pairs)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(f"openstack:///{UUID}", (UUID, ""), id="plain"),
        pytest.param(f"openstack://RegionOne/{UUID}", (UUID, "RegionOne"), id="regional"),
        pytest.param(f"/{UUID}", (UUID, ""), id="k8s-85731-slash"),
        pytest.param(f"RegionOne/{UUID}", (UUID, "RegionOne"), id="k8s-85731-region"),
    ],
)
def test_provider_id_accepted(value: str, expected: tuple[str, str]) -> None:
    """Every provider-ID form OCCM's parser accepts gives the server ID and region."""
    assert parse_provider_id(value, node="n1") == expected


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(f"openstack://{UUID}", id="no-slash"),
        pytest.param(UUID, id="bare-uuid"),
        pytest.param(f"other-provider:///{UUID}", id="other-scheme"),
        pytest.param(f"aws:///us-east-1a/{UUID}", id="aws"),
        pytest.param(f"openstack:///{UUID}/extra", id="extra-segment"),
    ],
)
def test_provider_id_refused(value: str) -> None:
    """The forms OCCM rejects raise InvalidProviderIDError naming the Node and the forms."""
    with pytest.raises(InvalidProviderIDError, match=r"Node n1: .*openstack:///<server-id>"):
        parse_provider_id(value, node="n1")


@pytest.mark.parametrize(
    ("regional", "expected"),
    [
        pytest.param(False, f"openstack:///{UUID}", id="default"),
        pytest.param(True, f"openstack://RegionOne/{UUID}", id="OS_CCM_REGIONAL"),
    ],
)
def test_provider_id_made(regional: bool, expected: str) -> None:
    """The provider ID made for a Node is OCCM's, regional under OS_CCM_REGIONAL=true."""
    made = provider_id(UUID, region="RegionOne", regional=regional)
    assert made == expected
    assert parse_provider_id(made) == (UUID, "RegionOne" if regional else "")


@pytest.mark.parametrize(
    ("server", "ports", "networking", "expected"),
    [
        pytest.param(
            SERVER,
            PORTS,
            Networking(public_network_names=("public",)),
            addrs(
                "InternalIP 10.0.0.32",
                "InternalIP 10.0.0.31",
                "ExternalIP 50.56.176.99",
                f"ExternalIP {ACCESS_V6}",
                "Hostname minion.novalocal",
                "ExternalIP 50.56.176.36",
                "ExternalIP 50.56.176.35",
                f"ExternalIP {PUBLIC_V6}",
            ),
            id="TestNodeAddresses",
        ),
        pytest.param(
            networks(private=PRIVATE, pub_net=PUBLIC),
            PORTS,
            Networking(public_network_names=("pub-net",)),
            addrs(
                "InternalIP 10.0.0.32",
                "InternalIP 10.0.0.31",
                "ExternalIP 50.56.176.99",
                f"ExternalIP {ACCESS_V6}",
                "ExternalIP 50.56.176.36",
                "ExternalIP 50.56.176.35",
                f"ExternalIP {PUBLIC_V6}",
            ),
            id="CustomPublicNetwork",
        ),
        pytest.param(
            networks(
                private=[PRIVATE[0], PRIVATE[2]],
                pub_net=[{"addr": "50.56.176.36", "version": 4}, PUBLIC[1]],
            ),
            [
                {
                    "status": "ACTIVE",
                    "fixed_ips": [
                        {"ip_address": "10.0.0.32"},
                        {"ip_address": "10.0.0.31"},
                        {"ip_address": "50.56.176.36"},
                    ],
                }
            ],
            Networking(public_network_names=("pub-net",)),
            addrs(
                "InternalIP 10.0.0.32",
                "InternalIP 10.0.0.31",
                "ExternalIP 50.56.176.99",
                f"ExternalIP {ACCESS_V6}",
                "ExternalIP 50.56.176.36",
                f"ExternalIP {PUBLIC_V6}",
            ),
            id="CustomPublicNetworkWithIntersectingFixedIP",
        ),
        pytest.param(
            networks(private=PRIVATE, also_private=ALSO_PRIVATE, pub_net=PUBLIC),
            PORTS,
            Networking(internal_network_names=("private", "also-private")),
            addrs(
                "InternalIP 10.0.0.32",
                "InternalIP 10.0.0.31",
                "ExternalIP 50.56.176.99",
                f"ExternalIP {ACCESS_V6}",
                "InternalIP 10.0.0.64",
                "ExternalIP 50.56.176.36",
            ),
            id="MultipleCustomInternalNetworks",
        ),
        pytest.param(
            networks(private=PRIVATE, also_private=ALSO_PRIVATE, pub_net=PUBLIC),
            PORTS,
            Networking(internal_network_names=("also-private",)),
            addrs(
                "ExternalIP 50.56.176.99",
                f"ExternalIP {ACCESS_V6}",
                "InternalIP 10.0.0.64",
                "ExternalIP 50.56.176.36",
            ),
            id="OneInternalNetwork",
        ),
        pytest.param(
            {**SERVER, "metadata": {}},
            PORTS,
            Networking(public_network_names=("public",), ipv6_support_disabled=True),
            addrs(
                "InternalIP 10.0.0.32",
                "InternalIP 10.0.0.31",
                "ExternalIP 50.56.176.99",
                "ExternalIP 50.56.176.36",
                "ExternalIP 50.56.176.35",
            ),
            id="IPv6Disabled",
        ),
        pytest.param(
            {**SERVER, "metadata": {}},
            [{"status": "DOWN", "fixed_ips": [{"ip_address": "10.0.0.32"}]}],
            Networking(public_network_names=("public",)),
            addrs(
                "ExternalIP 50.56.176.99",
                f"ExternalIP {ACCESS_V6}",
                "InternalIP 10.0.0.32",
                "ExternalIP 50.56.176.36",
                "InternalIP 10.0.0.31",
                "ExternalIP 50.56.176.35",
                f"ExternalIP {PUBLIC_V6}",
            ),
            id="port-not-active-is-skipped",
        ),
        pytest.param(
            {**SERVER, "metadata": {}},
            PORTS,
            Networking(
                public_network_names=("public",),
                address_sort_order=("50.56.176.0/24", "10.0.0.0/8"),
            ),
            addrs(
                "ExternalIP 50.56.176.35",
                "ExternalIP 50.56.176.36",
                "ExternalIP 50.56.176.99",
                "InternalIP 10.0.0.31",
                "InternalIP 10.0.0.32",
                f"ExternalIP {ACCESS_V6}",
                f"ExternalIP {PUBLIC_V6}",
            ),
            id="address-sort-order",
        ),
    ],
)
def test_node_addresses(
    server: dict[str, Any],
    ports: list[dict[str, Any]],
    networking: Networking,
    expected: tuple[NodeAddress, ...],
) -> None:
    """Node addresses come in OCCM's order with its removal rules (its golden vectors)."""
    assert node_addresses(server, ports, networking) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("nova", "nova", id="plain"),
        pytest.param("az 1/rack:2", "az-1-rack-2", id="runs-replaced"),
        pytest.param("..-zone-_", "zone", id="trimmed"),
        pytest.param("a" * 70, "a" * 63, id="cut-63"),
        pytest.param("", "", id="empty"),
    ],
)
def test_sanitize_label(value: str, expected: str) -> None:
    """Zones and host IDs become label values as OCCM's SanitizeLabel makes them."""
    assert sanitize_label(value) == expected
