"""A cluster CIDR cut into equal Node pod CIDRs: hand out the next free one, occupy or
release given ones. Pure bookkeeping, no I/O (kube-controller-manager's `cidrset.CidrSet`).

Contract:
- one mark per Node-sized block of the cluster CIDR; a set holds at most 2**16 blocks
  (`--node-cidr-mask-size` at most 16 more than the cluster prefix);
- `allocate_next` hands blocks out round robin, starting after the last one handed out, so
  a CIDR just released is not given to the next Node at once (pods of the deleted Node
  may still be draining);
- `occupy` accepts any CIDR that overlaps the cluster CIDR: a smaller one marks the block
  that contains it, a larger one every block it covers; occupying twice is harmless;
- `release` clears the blocks a CIDR covers, except blocks `reserve` marked for good (the
  Service range).

How it compares with upstream's `cidrset`: docs/controllers.md (node-ipam-controller).
"""

from __future__ import annotations

import ipaddress
from typing import Final

from trio_ccm.errors import CcmError

__all__ = ["MAX_PREFIX_GROWTH", "CidrOutOfRangeError", "CidrSet", "IPNetwork", "NoCidrLeftError"]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_PREFIX_GROWTH: Final = 16
"""A Node prefix may be at most this much longer than the cluster prefix (2**16 blocks)."""

_FREE: Final = 0
_USED: Final = 1
_RESERVED: Final = 2


class NoCidrLeftError(CcmError):
    """Every block of the cluster CIDR is in use."""


class CidrOutOfRangeError(CcmError):
    """The CIDR does not overlap the cluster CIDR (or is of the other IP family)."""


class CidrSet:
    """The blocks of one cluster CIDR; see the module docstring."""

    __slots__ = ("_base", "_next", "_shift", "_state", "_used", "cluster", "node_prefix", "size")

    def __init__(self, cluster: IPNetwork, node_prefix: int) -> None:
        growth = node_prefix - cluster.prefixlen
        if not 0 <= growth <= MAX_PREFIX_GROWTH or node_prefix > cluster.max_prefixlen:
            raise ValueError(
                f"cluster CIDR {cluster} with Node prefix /{node_prefix}: give a Node prefix "
                f"from /{cluster.prefixlen} to "
                f"/{min(cluster.max_prefixlen, cluster.prefixlen + MAX_PREFIX_GROWTH)}"
            )
        self.cluster = cluster
        self.node_prefix = node_prefix
        self.size = 1 << growth
        self._shift = cluster.max_prefixlen - node_prefix
        self._base = int(cluster.network_address)
        self._state = bytearray(self.size)  # one of _FREE, _USED, _RESERVED per block
        self._used = 0
        self._next = 0  # where the next search for a free block starts

    def __repr__(self) -> str:
        return f"CidrSet({self.cluster}, /{self.node_prefix}, used {self._used}/{self.size})"

    @property
    def used(self) -> int:
        """Blocks in use, reserved ones included."""
        return self._used

    @property
    def free(self) -> int:
        return self.size - self._used

    def allocate_next(self) -> IPNetwork:
        """Mark the next free block used and return it; NoCidrLeftError when there is none."""
        index = self._state.find(_FREE, self._next)
        if index < 0:
            index = self._state.find(_FREE, 0, self._next)
        if index < 0:
            raise NoCidrLeftError(
                f"the cluster CIDR {self.cluster} has no free /{self.node_prefix}"
            )
        self._state[index] = _USED
        self._used += 1
        self._next = (index + 1) % self.size
        return self.block(index)

    def occupy(self, cidr: IPNetwork) -> int:
        """Mark the blocks `cidr` touches used; returns how many were free."""
        return self._mark(cidr, _USED)

    def reserve(self, cidr: IPNetwork) -> int:
        """Mark the blocks `cidr` touches used for good (release leaves them); returns how
        many were free."""
        return self._mark(cidr, _RESERVED)

    def release(self, cidr: IPNetwork) -> int:
        """Free the blocks `cidr` touches, except reserved ones; returns how many were used."""
        freed = 0
        for index in self.span(cidr):
            if self._state[index] == _USED:
                self._state[index] = _FREE
                freed += 1
        self._used -= freed
        return freed

    def is_free(self, cidr: IPNetwork) -> bool:
        """Whether every block `cidr` touches is free."""
        span = self.span(cidr)
        return self._state.count(_FREE, span.start, span.stop) == len(span)

    def contains(self, cidr: IPNetwork) -> bool:
        """Whether `cidr` overlaps the cluster CIDR (so occupy and release apply to it)."""
        return cidr.version == self.cluster.version and cidr.overlaps(self.cluster)

    def block(self, index: int) -> IPNetwork:
        """The Node CIDR of block `index`."""
        address = self._base + (index << self._shift)
        return type(self.cluster)((address, self.node_prefix))

    def span(self, cidr: IPNetwork) -> range:
        """The indices of the blocks `cidr` touches; CidrOutOfRangeError if none."""
        if not self.contains(cidr):
            raise CidrOutOfRangeError(f"{cidr} is outside the cluster CIDR {self.cluster}")
        if cidr.prefixlen <= self.cluster.prefixlen:
            return range(self.size)
        # The last address by arithmetic, not `broadcast_address`: that cached property
        # gives every Node's CIDR a __dict__ and a second address (about 350 bytes each).
        start = int(cidr.network_address)
        end = start + (1 << (cidr.max_prefixlen - cidr.prefixlen)) - 1
        first = (start - self._base) >> self._shift
        last = (end - self._base) >> self._shift
        return range(first, last + 1)

    def _mark(self, cidr: IPNetwork, mark: int) -> int:
        newly = 0
        for index in self.span(cidr):
            state = self._state[index]
            if state == _FREE:
                newly += 1
            if state != _RESERVED:
                self._state[index] = mark
        self._used += newly
        return newly
