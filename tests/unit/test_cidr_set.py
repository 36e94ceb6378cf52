"""CidrSet: a cluster CIDR cut into Node CIDRs, handed out round robin, occupied, released."""

from __future__ import annotations

import ipaddress
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_ccm.actors.cidr_set import CidrOutOfRangeError, CidrSet, NoCidrLeftError


def net(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(text)


@pytest.mark.parametrize(
    ("cluster", "prefix", "first"),
    [
        pytest.param("10.244.0.0/16", 24, ["10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"]),
        pytest.param("10.0.0.0/8", 24, ["10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24"]),
        pytest.param("192.168.0.0/24", 26, ["192.168.0.0/26", "192.168.0.64/26"]),
        pytest.param("10.1.2.0/24", 24, ["10.1.2.0/24"], id="one-block"),
        pytest.param(
            "fd00:10:244::/56", 64, ["fd00:10:244::/64", "fd00:10:244:1::/64"], id="ipv6-64"
        ),
        pytest.param(
            "2001:db8::/112", 120, ["2001:db8::/120", "2001:db8::100/120"], id="ipv6-right-half"
        ),
        pytest.param(
            "2001:db8::/56", 72, ["2001:db8::/72", "2001:db8:0:0:100::/72"], id="ipv6-straddle"
        ),
    ],
)
def test_allocates_in_order(cluster: str, prefix: int, first: list[str]) -> None:
    """Blocks are handed out from the start of the cluster CIDR, in address order."""
    cidr_set = CidrSet(net(cluster), prefix)
    assert [str(cidr_set.allocate_next()) for _ in first] == first


def test_exhaustion_and_round_robin_reuse() -> None:
    """All blocks, then NoCidrLeftError; a released block is reused, after the ones not
    yet handed out (round robin)."""
    cidr_set = CidrSet(net("10.0.0.0/24"), 26)
    got = [str(cidr_set.allocate_next()) for _ in range(4)]
    assert got == ["10.0.0.0/26", "10.0.0.64/26", "10.0.0.128/26", "10.0.0.192/26"]
    assert cidr_set.free == 0
    with pytest.raises(NoCidrLeftError, match=r"10\.0\.0\.0/24 has no free /26"):
        cidr_set.allocate_next()
    assert cidr_set.release(net("10.0.0.64/26")) == 1
    assert str(cidr_set.allocate_next()) == "10.0.0.64/26"


def test_next_search_starts_after_the_last_allocated() -> None:
    """A block released behind the cursor waits for the cursor to come round."""
    cidr_set = CidrSet(net("10.0.0.0/24"), 26)
    first = cidr_set.allocate_next()
    cidr_set.release(first)
    assert str(cidr_set.allocate_next()) == "10.0.0.64/26"


@pytest.mark.parametrize(
    ("cidr", "blocks"),
    [
        pytest.param("10.0.1.0/24", [1], id="same-size"),
        pytest.param("10.0.1.128/25", [1], id="smaller-marks-its-block"),
        pytest.param("10.0.4.0/22", [4, 5, 6, 7], id="larger-marks-all-covered"),
        pytest.param("10.0.0.0/16", list(range(256)), id="the-cluster"),
        pytest.param("10.0.0.0/8", list(range(256)), id="containing-the-cluster"),
    ],
)
def test_occupy_marks_touched_blocks(cidr: str, blocks: list[int]) -> None:
    """Occupy marks every block a CIDR touches; occupying again marks nothing new."""
    cidr_set = CidrSet(net("10.0.0.0/16"), 24)
    assert cidr_set.occupy(net(cidr)) == len(blocks)
    assert cidr_set.occupy(net(cidr)) == 0
    assert cidr_set.used == len(blocks)
    assert list(cidr_set.span(net(cidr))) == blocks
    assert not cidr_set.is_free(net(cidr))
    assert cidr_set.release(net(cidr)) == len(blocks)
    assert cidr_set.used == 0


@pytest.mark.parametrize(
    "cidr",
    [
        pytest.param("10.1.0.0/24", id="other-range"),
        pytest.param("fd00::/64", id="other-family"),
    ],
)
def test_out_of_range(cidr: str) -> None:
    """A CIDR that does not overlap the cluster CIDR is refused, naming both."""
    cidr_set = CidrSet(net("10.0.0.0/16"), 24)
    with pytest.raises(CidrOutOfRangeError, match=r"outside the cluster CIDR 10\.0\.0\.0/16"):
        cidr_set.occupy(net(cidr))
    assert not cidr_set.contains(net(cidr))


def test_reserved_blocks_survive_release() -> None:
    """Reserved blocks (the Service range) are never handed out nor freed by release."""
    cidr_set = CidrSet(net("10.0.0.0/24"), 26)
    assert cidr_set.reserve(net("10.0.0.0/25")) == 2
    assert cidr_set.release(net("10.0.0.0/26")) == 0
    assert [str(cidr_set.allocate_next()) for _ in range(2)] == ["10.0.0.128/26", "10.0.0.192/26"]
    with pytest.raises(NoCidrLeftError):
        cidr_set.allocate_next()


@pytest.mark.parametrize(
    ("cluster", "prefix"),
    [
        pytest.param("10.0.0.0/16", 15, id="node-larger-than-cluster"),
        pytest.param("10.0.0.0/8", 25, id="more-than-2**16-blocks"),
        pytest.param("10.0.0.0/24", 33, id="beyond-32-bits"),
    ],
)
def test_bad_prefix(cluster: str, prefix: int) -> None:
    """A Node prefix shorter than the cluster's, or more than 16 longer, is refused."""
    with pytest.raises(ValueError, match="give a Node prefix from"):
        CidrSet(net(cluster), prefix)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("allocate"), st.just(0)),
        st.tuples(st.just("occupy"), st.integers(0, 31)),
        st.tuples(st.just("release"), st.integers(0, 31)),
    ),
    max_size=120,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_matches_a_model(ops: list[tuple[str, int]]) -> None:
    """Against a plain set of used indices: allocation never hands out a used block, fails
    only when all are used, and the counts agree."""
    cidr_set = CidrSet(net("10.0.0.0/19"), 24)  # 32 blocks
    used: set[int] = set()
    for op, index in ops:
        block = cidr_set.block(index)
        if op == "allocate":
            if len(used) == cidr_set.size:
                with pytest.raises(NoCidrLeftError):
                    cidr_set.allocate_next()
                continue
            got = cidr_set.allocate_next()
            (got_index,) = cidr_set.span(got)
            assert got_index not in used
            used.add(got_index)
        elif op == "occupy":
            assert cidr_set.occupy(block) == (index not in used)
            used.add(index)
        else:
            assert cidr_set.release(block) == (index in used)
            used.discard(index)
        assert cidr_set.used == len(used)
        assert cidr_set.free == cidr_set.size - len(used)


@given(st.integers(0, 2**16 - 1))
def test_block_and_span_are_inverse(index: int) -> None:
    """block(i) is the Node CIDR whose span is exactly [i], for IPv4 and IPv6."""
    for cluster, prefix in (("10.0.0.0/8", 24), ("fd00:10:244::/48", 64)):
        cidr_set = CidrSet(net(cluster), prefix)
        block = cidr_set.block(index)
        assert block.prefixlen == prefix
        assert block.subnet_of(cidr_set.cluster)  # type: ignore[arg-type]
        assert list(cidr_set.span(block)) == [index]


def test_marking_a_node_cidr_adds_nothing_to_it() -> None:
    """Occupying and releasing 5,000 Node CIDRs allocates nothing that stays with them (a
    cached broadcast address would give each a dict and a second address: 350 bytes)."""
    cidr_set = CidrSet(ipaddress.ip_network("10.0.0.0/10"), 26)
    nets = [cidr_set.block(i) for i in range(5000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for net in nets:
            cidr_set.occupy(net)
        for net in nets[::2]:
            cidr_set.release(net)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cidr_set.used == 2500
    assert grown < 5000 * 16
