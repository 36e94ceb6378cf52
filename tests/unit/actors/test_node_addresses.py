"""The address rules of the cloud-node-controller (pure functions)."""

from __future__ import annotations

import pytest

from trio_ccm.actors.node_addresses import AddressError, desired_addresses
from trio_ccm.cloud.provider import NodeAddress

INT = "InternalIP"
EXT = "ExternalIP"
HOST = "Hostname"


def addrs(*pairs: tuple[str, str]) -> list[NodeAddress]:
    return [NodeAddress(t, a) for t, a in pairs]


@pytest.mark.parametrize(
    ("cloud", "current", "provided", "expected"),
    [
        pytest.param([], addrs((INT, "10.0.0.1")), None, None, id="no-cloud-addresses-no-change"),
        pytest.param(
            addrs((INT, "10.0.0.1"), (EXT, "203.0.113.1")),
            addrs((HOST, "node-a")),
            None,
            addrs((INT, "10.0.0.1"), (EXT, "203.0.113.1"), (HOST, "node-a")),
            id="kubelet-hostname-kept-when-cloud-has-none",
        ),
        pytest.param(
            addrs((INT, "10.0.0.1"), (HOST, "cloud-name")),
            addrs((HOST, "node-a")),
            None,
            addrs((INT, "10.0.0.1"), (HOST, "cloud-name")),
            id="cloud-hostname-wins",
        ),
        pytest.param(
            addrs((INT, "10.0.0.1"), (INT, "10.0.0.2"), (EXT, "203.0.113.1")),
            [],
            "10.0.0.2",
            addrs((INT, "10.0.0.2"), (EXT, "203.0.113.1")),
            id="provided-ip-first-other-same-type-dropped",
        ),
        pytest.param(
            addrs((INT, "10.0.0.1"), (INT, "fd00::1"), (EXT, "203.0.113.1")),
            [],
            "10.0.0.1,fd00::1",
            addrs((INT, "10.0.0.1"), (INT, "fd00::1"), (EXT, "203.0.113.1")),
            id="dual-stack-pair",
        ),
        pytest.param(
            addrs((INT, "10.0.0.1"), (EXT, "203.0.113.1")),
            [],
            "203.0.113.1",
            addrs((EXT, "203.0.113.1"), (INT, "10.0.0.1")),
            id="provided-external-ip-goes-first",
        ),
        pytest.param(
            addrs((INT, "10.0.0.1")),
            [],
            "0.0.0.0",  # noqa: S104 - an address, not a bind
            addrs((INT, "10.0.0.1")),
            id="unspecified-ip-enforces-nothing",
        ),
    ],
)
def test_desired_addresses(
    cloud: list[NodeAddress],
    current: list[NodeAddress],
    provided: str | None,
    expected: list[NodeAddress] | None,
) -> None:
    """The Node's addresses follow upstream's rules for the cloud's list and --node-ip."""
    assert desired_addresses("node-a", cloud, current, provided) == expected


@pytest.mark.parametrize(
    ("provided", "message"),
    [
        pytest.param("10.0.0.9", "matches ip 10.0.0.9", id="ip-not-in-cloud"),
        pytest.param("not-an-ip", "is not an IP", id="junk"),
        pytest.param("10.0.0.1,10.0.0.2", "one IPv4 and one IPv6", id="two-v4"),
        pytest.param("0.0.0.0,fd00::1", "unspecified", id="pair-with-unspecified"),
        pytest.param("10.0.0.1,fd00::1,fd00::2", "one IPv4 and one IPv6", id="three"),
    ],
)
def test_bad_provided_node_ip(provided: str, message: str) -> None:
    """A malformed or unmatched provided-node-ip is an error naming the Node and the fix."""
    with pytest.raises(AddressError, match=message) as info:
        desired_addresses("node-a", addrs((INT, "10.0.0.1"), (INT, "fd00::1")), [], provided)
    assert "Node node-a" in str(info.value)


def test_reordering_is_a_change_and_two_of_a_type_are_stable() -> None:
    """Order matters (the first InternalIP is the Node's IP); a stable dual list is no change."""
    dual = addrs((INT, "10.0.0.1"), (INT, "fd00::1"))
    assert desired_addresses("n", dual, dual, None) == dual
    swapped = list(reversed(dual))
    assert desired_addresses("n", swapped, dual, None) == swapped
