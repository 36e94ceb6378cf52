"""Fixtures of the aws tests: one moto server for the session (reset per test), a cluster
built on it, the aws provider pointed at it, and the emulator beside it (their plumbing is
`tests/helpers/aws.py`).

Time policy of this suite (the exception to the house's MockClock rule, and its limits):
- A test that talks to moto runs on real time: moto answers from its own thread over
  loopback, which `trio.testing.MockClock` cannot drive. Each such test is bounded by
  `trio.fail_after(...)` and waits on conditions (a watch on the emulator, `Cluster.wait_for`,
  or a short poll inside that deadline), never on a fixed sleep standing in for a wait.
- A test with no moto in it (credential refresh, IMDS and codec rules) runs under
  `autojump_clock` (MockClock), so its timing logic is deterministic.
- Timing is never asserted: how long a call took belongs in bench/aws.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.helpers.aws import CLUSTER_ID, Cluster, open_cluster, open_provider
from trio_ccm.cloud.aws import AwsProvider
from trio_ccm_testbed.aws import MotoServer, World


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """moto on loopback for the whole session (its first EC2 call costs about a second)."""
    with MotoServer() as server:
        yield server


@pytest.fixture
async def moto(moto_server: MotoServer) -> MotoServer:
    """The session's moto, emptied (backends, fault rules, counters) for this test."""
    await moto_server.areset()
    return moto_server


@pytest.fixture
async def world(moto: MotoServer) -> World:
    """A cluster on moto: VPC, subnets in us-east-1a/b/c, a cluster-tagged route table."""
    return await World.create(moto, cluster_id=CLUSTER_ID)


@pytest.fixture
async def provider(world: World) -> AsyncIterator[AwsProvider]:
    async with open_provider(world) as found:
        yield found


@pytest.fixture
async def cluster(world: World) -> AsyncIterator[Cluster]:
    async with open_cluster(world) as found:
        yield found
