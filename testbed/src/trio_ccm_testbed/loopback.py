"""Traffic goes to loopback only: the one check every sender of the test world makes.

The simulated cloud's load balancers, the testbed's simulated kube-proxy, the demo, the tests
and the benches send requests to addresses the cloud handed out. Before anything is sent,
`require_loopback` checks the address is in 127.0.0.0/8 (or ::1) and raises
`NotLoopbackError` otherwise: the default load-balancer pool, 203.0.113.0/24, is a
documentation range (TEST-NET-3) and is never sent to.

All of 127.0.0.0/8 is loopback on Linux, so a test world takes a /24 of its own
(`random_loopback_network`) for its load balancers and its Nodes, and parallel runs on one
machine do not collide on addresses and ports.
"""

from __future__ import annotations

import ipaddress
import random
from typing import Final

__all__ = [
    "LOOPBACK_NETWORK",
    "NotLoopbackError",
    "is_loopback",
    "random_loopback_network",
    "require_loopback",
]

LOOPBACK_NETWORK: Final = ipaddress.IPv4Network("127.0.0.0/8")


class NotLoopbackError(ValueError):
    """An address outside loopback was about to receive traffic; nothing was sent."""


def is_loopback(address: str) -> bool:
    """Whether `address` (an IP, without port) is in 127.0.0.0/8 or is ::1."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return False
    return parsed.is_loopback


def require_loopback(address: str, what: str) -> str:
    """`address` if it is loopback; else `NotLoopbackError` naming `what` and the fix."""
    if not is_loopback(address):
        raise NotLoopbackError(
            f"{what}: {address} is not a loopback address; traffic goes to 127.0.0.0/8 only "
            "(start the simulated cloud with a loopback pool, e.g. lb_network="
            "'127.240.0.0/24' or `trio-ccm demo --lb-network 127.240.0.0/24`)"
        )
    return address


def random_loopback_network(rng: random.Random | None = None) -> ipaddress.IPv4Network:
    """A random 127.x.y.0/24 (x in 100..254), so that test worlds running at once on this
    machine hold different addresses; 127.0.0.0/16 (127.0.0.1 and friends) is left alone."""
    pick = rng or random.Random()  # noqa: S311 - spreading addresses, not a secret
    return ipaddress.IPv4Network(f"127.{pick.randint(100, 254)}.{pick.randint(0, 255)}.0/24")
