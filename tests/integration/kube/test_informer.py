"""Informer against the emulator: sync, notifications, and recovery from API faults."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from trio_ccm.kube import patches
from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.informer import Changed, Informer, Update
from trio_ccm.kube.objects import NODES, Node
from trio_ccm.mailbox import Mailbox
from trio_ccm.testing.apiserver import ApiServer
from trio_ccm.testing.harness import emulator_connection


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


@asynccontextmanager
async def running(informer: Informer[Node]) -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.serve)
        yield nursery
        nursery.cancel_scope.cancel()


def _server_nodes(server: ApiServer) -> dict[str, str]:
    storage = server.store.storage(server.store.types["/v1/nodes"])
    return {name: s.obj["metadata"]["resourceVersion"] for (_, name), s in storage.objects.items()}


def _cached(informer: Informer[Node]) -> dict[str, str]:
    return {n.metadata.name: n.metadata.resource_version for n in informer.items()}


def _drain(mailbox: Mailbox[str, Update[Node]]) -> dict[str, Node | None]:
    """What the mailbox holds, per key: the object, or None once it is Gone."""
    seen: dict[str, Node | None] = {}
    while True:
        try:
            key, update = mailbox.get_nowait()
        except trio.WouldBlock:
            return seen
        seen[key] = update.obj if isinstance(update, Changed) else None


async def test_first_list_is_paginated_and_synced(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """1,200 Nodes arrive over three pages; wait_synced returns with all of them cached."""
    for i in range(1200):
        server.create(_node(f"n{i:04}"))
    informer = Informer(kube, NODES, Node, rng=random.Random(1))
    with trio.fail_after(60):
        async with informer.subscription() as mailbox, running(informer):
            await informer.wait_synced()
            assert _cached(informer) == _server_nodes(server)
            assert len(_drain(mailbox)) == 1200
    assert informer.relists == 1


async def test_subscribers_get_the_latest_state_per_key(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """Several changes of one key while nobody reads coalesce into its newest state."""
    server.create(_node("n1"))
    informer = Informer(kube, NODES, Node, rng=random.Random(1))
    with trio.fail_after(60):
        async with running(informer), informer.subscription() as mailbox:
            _drain(mailbox)
            for value in ("1", "2", "3"):
                await kube.patch(NODES, "n1", patches.set_labels({"v": value}))
            await kube.create(NODES, _node("n2"))
            await kube.delete(NODES, "n2")
            await trio.testing.wait_all_tasks_blocked()
            seen = _drain(mailbox)
    assert seen["n2"] is None
    node = seen["n1"]
    assert node is not None
    assert node.metadata.labels == {"v": "3"}


async def test_dropped_watch_resumes_without_relist(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """When the server drops the watch, the informer re-watches from its last version."""
    server.create(_node("n1"))
    informer = Informer(kube, NODES, Node, rng=random.Random(1))
    with trio.fail_after(60):
        async with running(informer):
            await trio.testing.wait_all_tasks_blocked()
            server.store.drop_watches()
            await kube.patch(NODES, "n1", patches.set_labels({"after": "drop"}))
            await trio.testing.wait_all_tasks_blocked()
            cached = informer.get("n1")
    assert informer.relists == 1
    assert informer.watches == 2
    assert cached is not None
    assert cached.metadata.labels == {"after": "drop"}


async def test_compaction_forces_a_relist_that_reports_deletions(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """After a 410 the informer relists; objects deleted meanwhile are reported deleted."""
    for name in ("n1", "n2", "n3"):
        server.create(_node(name))
    informer = Informer(kube, NODES, Node, rng=random.Random(1))
    with trio.fail_after(60):
        async with informer.subscription() as mailbox, running(informer):
            await trio.testing.wait_all_tasks_blocked()
            _drain(mailbox)
            # Changes the watch misses: the server drops it, then forgets the history.
            server.faults.refuse_connections(5.0)
            server.store.drop_watches()
            server.create(_node("n4"))
            server.registry.delete(server.store.types["/v1/nodes"], "", "n2")
            server.store.compact()
            await trio.sleep(30)
            seen = _drain(mailbox)
            assert _cached(informer) == _server_nodes(server)
    assert informer.relists == 2
    assert seen["n2"] is None
    assert seen["n4"] is not None
    assert "n1" not in seen  # unchanged objects are not re-delivered


@pytest.mark.parametrize(
    ("code", "retry_after_s"),
    [pytest.param(500, None, id="500-burst"), pytest.param(429, 2, id="429-retry-after")],
)
async def test_error_bursts_are_ridden_out(
    server: ApiServer,
    kube: KubeClient,
    autojump_clock: trio.testing.MockClock,
    code: int,
    retry_after_s: int | None,
) -> None:
    """A burst of errors on list and watch delays the informer but loses nothing."""
    server.create(_node("n1"))
    server.faults.inject_error(code, resource="nodes", count=12, retry_after_s=retry_after_s)
    informer = Informer(kube, NODES, Node, rng=random.Random(1))
    with trio.fail_after(600):
        async with running(informer):
            await kube.patch(NODES, "n1", patches.set_labels({"x": "1"}))
            await trio.sleep(120)
            assert _cached(informer) == _server_nodes(server)
    assert informer.errors >= 1


async def test_thirty_seconds_of_refused_connections(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """After a 30 s outage the informer re-watches from its version and catches up."""
    server.create(_node("n1"))
    informer = Informer(kube, NODES, Node, rng=random.Random(1))
    with trio.fail_after(600):
        async with running(informer):
            await trio.testing.wait_all_tasks_blocked()
            server.faults.refuse_connections(30.0)
            server.store.drop_watches()
            server.create(_node("n2"))
            await trio.sleep(90)
            assert _cached(informer) == _server_nodes(server)
    # The server still had the version: the informer re-watched, without a full relist.
    assert informer.relists == 1
    assert informer.errors >= 1


async def test_quiet_watch_is_replaced_after_the_inactivity_deadline(
    kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """A watch that delivers nothing (no bookmarks either) is abandoned and re-opened."""
    server = ApiServer(seed=1, bookmark_interval_s=10_000)
    connection = emulator_connection()
    async with open_kube_client(connection, transport=server.transport(), qps=0) as client:
        informer = Informer(client, NODES, Node, inactivity_s=150, rng=random.Random(1))
        with trio.fail_after(600):
            async with running(informer):
                await trio.sleep(400)
    assert informer.watches == 3  # opened at t=0, 150 and 300
    assert informer.relists == 1


async def test_resync_relists_and_notifies_only_real_changes(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """The periodic relist finds nothing new to report when nothing changed."""
    server.create(_node("n1"))
    informer = Informer(kube, NODES, Node, resync_period_s=100, rng=random.Random(1))
    with trio.fail_after(600):
        async with running(informer):
            await trio.testing.wait_all_tasks_blocked()
            async with informer.subscription() as mailbox:
                _drain(mailbox)
                await trio.sleep(250)
                seen = _drain(mailbox)
    assert informer.relists == 3
    assert seen == {}


async def test_a_subscription_stops_receiving_when_its_block_ends(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """After the `async with` block, changes no longer reach the old mailbox."""
    server.create(_node("n1"))
    informer = Informer(kube, NODES, Node, rng=random.Random(1))
    with trio.fail_after(60):
        async with running(informer):
            await informer.wait_synced()
            async with informer.subscription() as mailbox:
                _drain(mailbox)
            await kube.patch(NODES, "n1", patches.set_labels({"late": "yes"}))
            await trio.testing.wait_all_tasks_blocked()
            assert _drain(mailbox) == {}
            cached = informer.get("n1")
    assert cached is not None
    assert cached.metadata.labels == {"late": "yes"}


async def test_late_subscriber_gets_every_cached_key(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """Subscribing after sync hands over the whole cache at once."""
    server.create(_node("n1"))
    server.create(_node("n2"))
    informer = Informer(kube, NODES, Node, rng=random.Random(1))
    with trio.fail_after(60):
        async with running(informer):
            await informer.wait_synced()
            async with informer.subscription() as mailbox:
                seen = _drain(mailbox)
    assert sorted(seen) == ["n1", "n2"]
