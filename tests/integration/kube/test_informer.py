"""Informer against the emulator: sync, notifications, and recovery from API faults."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from trio_ccm.base.mailbox import Mailbox
from trio_ccm.kube import patches
from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.informer import CHECKPOINT_EVERY, Changed, Informer, Update
from trio_ccm.kube.objects import NODES, SERVICES, Node, Object, Resource, Service
from trio_ccm.testing.factories import make_node, make_service, ready_condition
from trio_ccm.testing.harness import emulator_connection
from trio_ccm_testbed.apiserver import ApiServer


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


@asynccontextmanager
async def running(informer: Informer[Any]) -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.serve)
        yield nursery
        nursery.cancel_scope.cancel()


def _server_nodes(server: ApiServer) -> dict[str, str]:
    storage = server.store.storage(server.store.types["/v1/nodes"])
    return {name: s.obj["metadata"]["resourceVersion"] for (_, name), s in storage.objects.items()}


def _cached(informer: Informer[Node]) -> dict[str, str]:
    return {n.metadata.name: n.metadata.resource_version for n in informer.items()}


def _drain(mailbox: Mailbox[str, Update[Any]]) -> dict[str, Any]:
    """What the mailbox holds, per key: the object, or None once it is Gone."""
    seen: dict[str, Any] = {}
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


async def test_a_watch_that_delivers_events_outlives_the_inactivity_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Events every 100 s keep a watch with a 150 s inactivity deadline open (its deadline
    moves with them); once they stop, the watch is abandoned 150 s after the last one."""
    server = ApiServer(seed=1, bookmark_interval_s=10_000)
    connection = emulator_connection()
    async with open_kube_client(connection, transport=server.transport(), qps=0) as client:
        informer = Informer(
            client,
            NODES,
            Node,
            inactivity_s=150,
            watch_timeout_s=(10_000, 10_000),
            rng=random.Random(1),
        )
        with trio.fail_after(1000):
            async with running(informer):
                for i in range(4):  # at t=100, 200, 300 and 400
                    await trio.sleep(100)
                    server.create(_node(f"n{i}"))
                await trio.sleep(149)
                assert informer.watches == 1  # t=549: 149 s after the last event
                assert len(informer) == 4
                await trio.sleep(2)
                assert informer.watches == 2  # abandoned at t=550, and opened again
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


def _heartbeat(status: str = "True") -> patches.Patch:
    """A kubelet's status update: the Ready condition with a new heartbeat time."""
    return patches.set_condition(ready_condition(status, stamp="2026-11-21T10:05:00Z"))


def _service_condition(since: str) -> patches.Patch:
    """services/status with one condition, which only `since` (not cached) tells apart."""
    condition = {"type": "example.com/Probed", "status": "True", "reason": "Probed"}
    return patches.Patch(
        patches.MERGE, {"status": {"conditions": [{**condition, "lastTransitionTime": since}]}}
    )


@pytest.mark.parametrize(
    ("resource", "kind", "obj", "writes", "notified"),
    [
        pytest.param(
            NODES, Node, make_node("n1"), [(_heartbeat(), "status")], False, id="node-heartbeat"
        ),
        pytest.param(
            NODES,
            Node,
            make_node("n1"),
            [(patches.set_annotations({"example.com/not-cached": "1"}), "")],
            False,
            id="node-annotation-not-cached",
        ),
        pytest.param(
            NODES,
            Node,
            make_node("n1"),
            [(_heartbeat("False"), "status")],
            True,
            id="node-not-ready",
        ),
        pytest.param(
            NODES,
            Node,
            make_node("n1"),
            [(patches.set_labels({"example.com/pool": "b"}), "")],
            True,
            id="node-label",
        ),
        pytest.param(
            SERVICES,
            Service,
            make_service("web"),
            [
                (_service_condition("2026-11-21T10:00:00Z"), "status"),
                (_service_condition("2026-11-21T10:05:00Z"), "status"),
            ],
            False,
            id="service-condition-time",
        ),
        pytest.param(
            SERVICES,
            Service,
            make_service("web"),
            [(patches.set_annotations({"example.com/owner": "me"}), "")],
            True,
            id="service-annotation",
        ),
    ],
)
async def test_an_update_that_changes_only_the_version_notifies_nobody(
    server: ApiServer,
    kube: KubeClient,
    autojump_clock: trio.testing.MockClock,
    resource: Resource,
    kind: type[Object],
    obj: dict[str, Any],
    writes: list[tuple[patches.Patch, str]],
    notified: bool,
) -> None:
    """An update that changes nothing the cache decodes reaches no subscriber and is counted
    in `unchanged`, yet the cache holds its resourceVersion; any other update is delivered
    (the last write of each row is the one looked at)."""
    created = server.create(obj)
    name, namespace = created["metadata"]["name"], created["metadata"].get("namespace", "")
    key = f"{namespace}/{name}" if namespace else name
    informer: Informer[Any] = Informer(kube, resource, kind, rng=random.Random(1))
    with trio.fail_after(60):
        async with running(informer), informer.subscription() as mailbox:
            await informer.wait_synced()
            for patch, subresource in writes:
                _drain(mailbox)
                written = await kube.patch(
                    resource, name, patch, namespace=namespace, subresource=subresource
                )
                before = informer.unchanged
                await trio.testing.wait_all_tasks_blocked()
            seen = _drain(mailbox)
            cached = informer.get(key)
    version = written.metadata.resource_version
    assert cached is not None
    assert cached.metadata.resource_version == version
    if notified:
        assert list(seen) == [key]
        assert seen[key].metadata.resource_version == version
        assert informer.unchanged == before
    else:
        assert seen == {}
        assert informer.unchanged == before + 1


async def test_a_relist_reports_only_real_changes(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """After a 410, a Node whose only change meanwhile was a heartbeat is not reported (the
    cache still takes its version); a Node whose labels changed is."""
    for name in ("n1", "n2"):
        server.create(make_node(name))
    informer = Informer(kube, NODES, Node, rng=random.Random(1))
    with trio.fail_after(60):
        async with informer.subscription() as mailbox, running(informer):
            await trio.testing.wait_all_tasks_blocked()
            _drain(mailbox)
            server.faults.refuse_connections(5.0)
            server.store.drop_watches()
            await trio.testing.wait_all_tasks_blocked()
            nodes = server.store.types["/v1/nodes"]
            for name, patch, subresource in (
                ("n1", _heartbeat(), "status"),
                ("n2", patches.set_labels({"example.com/pool": "b"}), ""),
            ):
                # Straight into the registry: every connection is refused meanwhile.
                server.registry.patch(
                    nodes, "", name, patch.content_type, patch.document, subresource=subresource
                )
            server.store.compact()
            await trio.sleep(30)
            seen = _drain(mailbox)
            assert _cached(informer) == _server_nodes(server)
    assert informer.relists == 2
    assert list(seen) == ["n2"]
    assert informer.unchanged == 1


async def test_a_large_relist_lets_other_tasks_run_while_it_notifies(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """The notifications of a relist of 3 x CHECKPOINT_EVERY Nodes are handed out in steps
    (another task sees the mailbox part filled), and every key arrives."""
    total = 3 * CHECKPOINT_EVERY
    for i in range(total):
        server.create(_node(f"n{i:05}"))
    informer = Informer(kube, NODES, Node, rng=random.Random(1))
    partial: set[int] = set()

    async def probe(mailbox: Mailbox[str, Update[Node]]) -> None:
        while not informer.synced:
            if 0 < len(mailbox) < total:
                partial.add(len(mailbox))
            await trio.lowlevel.checkpoint()

    with trio.fail_after(60):
        async with informer.subscription() as mailbox, trio.open_nursery() as nursery:
            nursery.start_soon(probe, mailbox)
            async with running(informer):
                await informer.wait_synced()
                seen = _drain(mailbox)
    assert partial
    assert partial <= {CHECKPOINT_EVERY, 2 * CHECKPOINT_EVERY}
    assert len(seen) == total


async def test_a_subscription_fills_in_steps_and_misses_nothing_meanwhile(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """A new subscription over 10 x CHECKPOINT_EVERY cached Nodes lets other tasks run while
    it is filled; Nodes changed (before and after the fill reached them) and one deleted
    meanwhile arrive in their newest state."""
    total = 10 * CHECKPOINT_EVERY
    names = [f"n{i:05}" for i in range(total)]
    for name in names:
        server.create(_node(name))
    nodes = server.store.types["/v1/nodes"]
    informer = Informer(kube, NODES, Node, rng=random.Random(1))
    filling = False
    seen_during_fill: list[str] = []

    async def probe() -> None:
        while not filling:
            await trio.lowlevel.checkpoint()
        # Written once the fill has begun, straight into the emulator.
        for name in (names[0], names[-1]):
            label = {"metadata": {"labels": {"during": "fill"}}}
            server.registry.patch(nodes, "", name, patches.MERGE, label)
        server.registry.delete(nodes, "", names[-2])
        while filling:
            if informer.get(names[-2]) is None:
                seen_during_fill.append(names[-2])
            await trio.lowlevel.checkpoint()

    with trio.fail_after(60):
        async with running(informer) as nursery:
            await informer.wait_synced()
            nursery.start_soon(probe)
            filling = True
            async with informer.subscription() as mailbox:
                filling = False
                await trio.testing.wait_all_tasks_blocked()
                seen = _drain(mailbox)
    # The informer applied the deletion while the subscription was still being filled.
    assert seen_during_fill
    assert len(seen) == total
    for name in (names[0], names[-1]):
        assert seen[name].metadata.labels == {"during": "fill"}
    assert seen[names[-2]] is None
    assert {k for k, v in seen.items() if v is not None} == set(informer.keys())
