"""Which addresses a Node should carry, given what the cloud reports (upstream's rules).

Upstream (`node/helpers/address.go`, `updateNodeAddress`):

1. nothing to do when the cloud reports no address;
2. the Node's kubelet-set `Hostname` addresses are kept when the cloud reports none;
3. with `alpha.kubernetes.io/provided-node-ip` (kubelet's `--node-ip`: one IP, or a
   dual-stack pair), each provided IP must be among the cloud's addresses: the matching
   addresses go first, and other addresses of the matched types are dropped.

Where we differ on purpose: a change is the new list differing from the old one, in order.
Upstream compares one address per type, so a Node with two InternalIPs (IPv4 and IPv6) is
patched on every sync, and a re-ordering (which changes the Node's primary IP) is missed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from trio_ccm.cloud.provider import NodeAddress
from trio_ccm.errors import CcmError

__all__ = ["AddressError", "desired_addresses", "parse_provided_node_ip"]

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressError(CcmError):
    """The cloud's addresses cannot satisfy the Node's provided node IP (or it is malformed)."""


def parse_provided_node_ip(node: str, value: str) -> list[_IP]:
    """The IPs of the provided-node-ip annotation: one, or two of different families."""
    parts = [p.strip() for p in value.split(",")]
    try:
        ips = [ipaddress.ip_address(p) for p in parts]
    except ValueError as exc:
        raise AddressError(
            f"Node {node}: annotation alpha.kubernetes.io/provided-node-ip={value!r} is not "
            "an IP or a comma-separated dual-stack pair; fix kubelet's --node-ip"
        ) from exc
    if len(ips) > 2 or (len(ips) == 2 and ips[0].version == ips[1].version):
        raise AddressError(
            f"Node {node}: annotation alpha.kubernetes.io/provided-node-ip={value!r} must be "
            "one IP or one IPv4 and one IPv6; fix kubelet's --node-ip"
        )
    if len(ips) == 2 and any(ip.is_unspecified for ip in ips):
        raise AddressError(
            f"Node {node}: annotation alpha.kubernetes.io/provided-node-ip={value!r}: a "
            "dual-stack pair cannot contain an unspecified address; fix kubelet's --node-ip"
        )
    return ips


def _same_ip(address: str, ip: _IP) -> bool:
    try:
        return ipaddress.ip_address(address) == ip
    except ValueError:
        return False


def desired_addresses(
    node: str,
    cloud: Sequence[NodeAddress],
    current: Sequence[NodeAddress],
    provided_node_ip: str | None,
) -> list[NodeAddress] | None:
    """The addresses the Node should have, or None to leave them as they are.

    Raises AddressError when a provided node IP is malformed or absent from the cloud's list.
    """
    if not cloud:
        return None
    addresses = list(cloud)
    if not any(a.type == "Hostname" for a in addresses):
        addresses += [a for a in current if a.type == "Hostname"]
    if provided_node_ip:
        first: list[NodeAddress] = []
        matched_types: set[str] = set()
        for ip in parse_provided_node_ip(node, provided_node_ip):
            if ip.is_unspecified:
                continue  # "0.0.0.0" / "::" means "any": nothing to enforce
            matching = [a for a in addresses if _same_ip(a.address, ip)]
            if not matching:
                raise AddressError(
                    f"Node {node}: failed to get node address from cloud provider that "
                    f"matches ip {ip} (alpha.kubernetes.io/provided-node-ip); the cloud "
                    f"reports {', '.join(a.address for a in cloud)}"
                )
            first += [a for a in matching if a not in first]
            matched_types |= {a.type for a in matching}
        if matched_types:
            addresses = first + [a for a in addresses if a.type not in matched_types]
    return addresses
