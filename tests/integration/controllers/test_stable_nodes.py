"""The stable Nodes' views (`StableNodes`): built when a load balancer asks, anew only for
the Nodes noted since, and let go once nobody asked for `VIEWS_KEPT_S` (a settled cluster
holds none); the next ask builds them from the cache again."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.testing
from prometheus_client import CollectorRegistry

from trio_ccm.actors.stable_nodes import (
    VIEWS_KEPT_S,
    Backends,
    StableNodes,
    node_set,
)
from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.informer import Informer
from trio_ccm.kube.metrics import ClientMetrics
from trio_ccm.kube.objects import NODES, Node
from trio_ccm.kube.patches import set_labels
from trio_ccm.testing.factories import make_node
from trio_ccm.testing.harness import emulator_connection
from trio_ccm_testbed.apiserver import ApiServer


@asynccontextmanager
async def stable_nodes(
    server: ApiServer,
) -> AsyncIterator[tuple[StableNodes, list[Backends], KubeClient]]:
    """A loaded StableNodes over a served Node informer of `server`, serving its moves
    (recorded in the list), and a client of `server`."""
    async with open_kube_client(
        emulator_connection(),
        transport=server.transport(),
        metrics=ClientMetrics(CollectorRegistry()),
        qps=0,
        component="test",
    ) as kube:
        informer = Informer(kube, NODES, Node, rng=random.Random(1))
        moves: list[Backends] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(informer.serve)
            stable = StableNodes(informer)
            async with informer.subscription() as mailbox:
                await stable.load()
                nursery.start_soon(stable.serve, mailbox, lambda b: moves.append(b))
                await trio.sleep(1)  # the subscription's first fill noted
                yield stable, moves, kube
            nursery.cancel_scope.cancel()


def _labels(backends: Backends) -> dict[str, str | None]:
    return {info.name: info.labels.get("team") for info in backends.infos}


async def test_views_are_let_go_when_nobody_asks_and_built_anew_from_the_cache(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No view is held after load; an ask builds them; they are let go VIEWS_KEPT_S after
    the last ask, and the next ask shows a label changed meanwhile, with the same set."""
    server = ApiServer(seed=1)
    for name in ("n1", "n2", "n3"):
        server.create(make_node(name, provider_id=f"sim://{name}", labels={"team": "red"}))
    with trio.fail_after(600):
        async with stable_nodes(server) as (stable, moves, kube):
            assert stable.backends is None  # load() notes the set only
            first = await stable.current()
            assert _labels(first) == {"n1": "red", "n2": "red", "n3": "red"}
            assert stable.backends is first
            await trio.sleep(VIEWS_KEPT_S - 1)
            assert stable.backends is first  # asked 29 s ago: kept
            await trio.sleep(2)
            assert stable.backends is None  # let go, and the order with them
            assert stable.order is None
            await kube.patch(NODES, "n2", set_labels({"team": "blue"}))
            await trio.sleep(2)  # the change is noted
            again = await stable.current()
            assert _labels(again) == {"n1": "red", "n2": "blue", "n3": "red"}
            assert again.node_set == first.node_set
            assert moves == []  # a label is no move


async def test_a_rebuild_reuses_the_views_of_nodes_not_noted_since(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """After one Node changes, the next build (a second later) has a new view for it and
    the very same view objects for the others; a Node that came moves the set."""
    server = ApiServer(seed=1)
    for name in ("n1", "n2", "n3"):
        server.create(make_node(name, provider_id=f"sim://{name}", labels={"team": "red"}))
    with trio.fail_after(600):
        async with stable_nodes(server) as (stable, moves, kube):
            first = await stable.current()
            await kube.patch(NODES, "n2", set_labels({"team": "blue"}))
            await trio.sleep(1.5)
            second = await stable.current()
            assert _labels(second) == {"n1": "red", "n2": "blue", "n3": "red"}
            assert second.infos[0] is first.infos[0]
            assert second.infos[2] is first.infos[2]
            assert second.infos[1] is not first.infos[1]
            server.create(make_node("n0", provider_id="sim://n0", labels={"team": "red"}))
            await trio.sleep(5)  # noted, then published after a second of quiet
            assert len(moves) == 1
            assert [info.name for info in moves[0].infos] == ["n0", "n1", "n2", "n3"]
            assert moves[0].infos[2] is second.infos[1]  # n2: unchanged since, kept
            assert moves[0].node_set == node_set(moves[0].infos)
