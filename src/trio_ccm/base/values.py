"""Values that both the kube cache and the provider interface hold.

`NodeAddress` is what a cached Node's `status.addresses` decode into and what providers are
shown in `NodeInfo.addresses` (public as `trio_ccm.cloud.NodeAddress`): one class, so a
provider's view of a Node holds the cached Node's own address objects, not copies (at
100,000 Nodes, 120 bytes each and 200,000 objects fewer).
"""

from __future__ import annotations

import sys

import msgspec
from msgspec.structs import force_setattr

__all__ = ["NodeAddress"]


class NodeAddress(msgspec.Struct, frozen=True, gc=False):
    """One address of a Node: `type` is one of ADDRESS_TYPES (trio_ccm.cloud.provider)."""

    type: str = ""
    address: str = ""

    def __post_init__(self) -> None:
        force_setattr(self, "type", sys.intern(self.type))  # a handful of values, repeated
