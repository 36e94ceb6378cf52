"""Values that both the kube cache and the provider interface hold.

`NodeAddress` is what a cached Node's `status.addresses` decode into and what providers are
shown in `NodeInfo.addresses` (public as `trio_ccm.cloud.NodeAddress`): one class, so a
provider's view of a Node holds the cached Node's own address objects, not copies (at
100,000 Nodes, 120 bytes each and 200,000 objects fewer). `LoadBalancerIngress` and
`PortStatus` are the wire shape of a Service's `status.loadBalancer.ingress`: a provider
returns them, the cache decodes them, the status patch encodes them (one type, not two
with the same fields and a hand-written JSON between them).
"""

from __future__ import annotations

import sys

import msgspec
from msgspec.structs import force_setattr

__all__ = ["LoadBalancerIngress", "NodeAddress", "PortStatus"]


class NodeAddress(msgspec.Struct, frozen=True, gc=False):
    """One address of a Node: `type` is one of ADDRESS_TYPES (trio_ccm.cloud.provider)."""

    type: str = ""
    address: str = ""

    def __post_init__(self) -> None:
        force_setattr(self, "type", sys.intern(self.type))  # a handful of values, repeated


class PortStatus(msgspec.Struct, frozen=True, gc=False, rename="camel", omit_defaults=True):
    """One port's state in a load balancer's ingress (core/v1 PortStatus; `port` and
    `protocol` are required by the API, so always written)."""

    port: int
    protocol: str
    error: str | None = None


class LoadBalancerIngress(
    msgspec.Struct, frozen=True, gc=False, rename="camel", omit_defaults=True
):
    """One ingress point of a load balancer, as a provider returns it and as the Service's
    status holds it (one type: what the provider said is what is written and compared).
    `ip_mode` is "VIP" or "Proxy" (Kubernetes 1.30+), None to omit."""

    ip: str = ""
    hostname: str = ""
    ip_mode: str | None = None
    ports: tuple[PortStatus, ...] = ()
