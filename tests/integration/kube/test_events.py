"""The Event recorder: client-go's dedup, aggregation, spam filter, bounded queue, retries."""

from __future__ import annotations

import datetime as dt
import functools
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.config import load_kubeconfig
from trio_ccm.kube.events import EventRecorder, ObjectRef
from trio_ccm.kube.objects import NODES, Node
from trio_ccm.testing.harness import emulator_connection
from trio_ccm_testbed.apiserver import ApiServer, serve_apiserver

NOW = dt.datetime(2026, 11, 21, 12, 0, 0, tzinfo=dt.UTC)
NODE = ObjectRef("Node", "n1", uid="uid-1")


def _events(server: ApiServer) -> list[dict[str, Any]]:
    storage = server.store.storage(server.store.types["/v1/events"])
    return [s.obj for s in storage.objects.values()]


@asynccontextmanager
async def recording(kube: KubeClient) -> AsyncIterator[EventRecorder]:
    recorder = EventRecorder(kube, component="cloud-node-controller", host="ccm-0", now=lambda: NOW)
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.serve)
        yield recorder
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()


async def test_event_fields(server: ApiServer, kube: KubeClient) -> None:
    """An Event about a Node lands in default with upstream's fields."""
    with trio.fail_after(5):
        async with recording(kube) as recorder:
            recorder.normal(NODE, "Synced", "Node synced successfully")
    (event,) = _events(server)
    assert event["metadata"]["namespace"] == "default"
    assert event["metadata"]["name"].startswith("n1.")
    assert event["involvedObject"] == {
        "kind": "Node",
        "name": "n1",
        "apiVersion": "v1",
        "uid": "uid-1",
    }
    assert (event["type"], event["reason"], event["message"]) == (
        "Normal",
        "Synced",
        "Node synced successfully",
    )
    assert event["source"] == {"component": "cloud-node-controller", "host": "ccm-0"}
    assert event["count"] == 1
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-11-21T12:00:00Z"


async def test_identical_events_become_a_count(server: ApiServer, kube: KubeClient) -> None:
    """Repeating an event patches the first one's count instead of creating more."""
    with trio.fail_after(5):
        async with recording(kube) as recorder:
            for _ in range(3):
                recorder.warning(NODE, "DeletingNodeFailed", "instance lookup failed")
    (event,) = _events(server)
    assert event["count"] == 3
    assert recorder.statistics().patched == 2


async def test_similar_events_are_aggregated(server: ApiServer, kube: KubeClient) -> None:
    """From the tenth event differing only in message, they fold into one combined Event."""
    with trio.fail_after(5):
        async with recording(kube) as recorder:
            for i in range(12):
                recorder.warning(NODE, "SyncLoadBalancerFailed", f"attempt {i} failed")
    events = _events(server)
    combined = [e for e in events if e["message"].startswith("(combined from similar events)")]
    assert len(events) == 10
    assert len(combined) == 1
    assert combined[0]["count"] == 3
    assert combined[0]["message"] == "(combined from similar events): attempt 11 failed"


async def test_spam_filter_per_object(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """25 events per object pass at once, then one more per 300 s; other objects are free."""
    other = ObjectRef("Node", "n2", uid="uid-2")
    with trio.fail_after(1000):
        async with recording(kube) as recorder:
            for i in range(30):
                recorder.normal(NODE, f"Reason{i}", "m")
            recorder.normal(other, "Reason0", "m")
            await trio.testing.wait_all_tasks_blocked()
            dropped_at_once = recorder.statistics().dropped_spam
            await trio.sleep(300)
            recorder.normal(NODE, "Later", "m")
    names = [e["involvedObject"]["name"] for e in _events(server)]
    assert dropped_at_once == 5
    assert names.count("n1") == 26
    assert names.count("n2") == 1


async def test_full_queue_drops_instead_of_blocking(kube: KubeClient) -> None:
    """Recording never blocks: past 1,000 queued events, new ones are dropped and counted."""
    recorder = EventRecorder(kube, component="c", now=lambda: NOW)
    for i in range(1005):
        recorder.normal(ObjectRef("Node", f"n{i}"), "Synced", "m")
    assert recorder.statistics().queued == 1000
    assert recorder.statistics().dropped_queue_full == 5


async def test_failed_writes_are_retried_ten_seconds_apart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A create that fails with 500 is tried again 10 s later; a 422 is not retried."""
    # The server's wall clock follows Trio's, so creationTimestamp tells when it landed.
    server = ApiServer(seed=1, now=lambda: NOW + dt.timedelta(seconds=trio.current_time()))
    server.faults.inject_error(500, verb="create", resource="events", count=2)
    with trio.fail_after(100):
        async with (
            open_kube_client(emulator_connection(), transport=server.transport(), qps=0) as kube,
            recording(kube) as recorder,
        ):
            recorder.normal(NODE, "Synced", "ok")
            recorder.normal(ObjectRef("Node", "Bad_Name"), "Synced", "rejected")
            await trio.sleep(60)
    (event,) = _events(server)
    assert event["metadata"]["creationTimestamp"] == "2026-11-21T12:00:20Z"
    assert recorder.statistics().failed == 1


async def test_expired_event_is_created_again(server: ApiServer, kube: KubeClient) -> None:
    """If the Event to bump was deleted meanwhile, a new one is created."""
    with trio.fail_after(5):
        async with recording(kube) as recorder:
            recorder.normal(NODE, "Synced", "ok")
            await trio.testing.wait_all_tasks_blocked()
            (first,) = _events(server)
            server.registry.delete(
                server.store.types["/v1/events"], "default", first["metadata"]["name"]
            )
            recorder.normal(NODE, "Synced", "ok")
    (event,) = _events(server)
    assert event["count"] == 1


@pytest.mark.parametrize(
    ("wait_s", "kept"),
    [
        pytest.param(120, (50, 50, 50), id="within-every-window"),
        pytest.param(400, (0, 50, 50), id="buckets-full-again"),
        pytest.param(700, (0, 0, 50), id="aggregation-window-over"),
        pytest.param(3700, (0, 0, 0), id="events-past-their-ttl"),
    ],
)
async def test_caches_forget_a_wave(
    server: ApiServer,
    kube: KubeClient,
    autojump_clock: trio.testing.MockClock,
    wait_s: float,
    kept: tuple[int, int, int],
) -> None:
    """A wave of one Event per Node fills the three caches; each forgets its entries once
    they no longer change a decision (window over, bucket full, Event past its TTL)."""
    with trio.fail_after(5000):
        async with recording(kube) as recorder:
            for i in range(50):
                recorder.normal(ObjectRef("Node", f"n{i}", uid=f"u{i}"), "Synced", "ok")
            await trio.testing.wait_all_tasks_blocked()
            full = recorder.cache_sizes()
            await trio.sleep(wait_s)
            left = recorder.cache_sizes()
    assert full == (50, 50, 50)
    assert left == kept


async def test_a_bumped_event_stays_remembered(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """An Event repeated within the TTL keeps its dedup entry: the repeat after the sweep
    still patches the one Event."""
    with trio.fail_after(5000):
        async with recording(kube) as recorder:
            recorder.warning(NODE, "DeletingNodeFailed", "lookup failed")
            await trio.sleep(3000)
            recorder.warning(NODE, "DeletingNodeFailed", "lookup failed")
            await trio.sleep(1000)  # 4,000 s after the first write, 1,000 after the bump
            recorder.warning(NODE, "DeletingNodeFailed", "lookup failed")
    (event,) = _events(server)
    assert event["count"] == 3


def _kubectl() -> str | None:
    found = shutil.which("kubectl")
    if found is None:
        return None
    candidate = Path(os.path.realpath(found)).parent / "kubectl.1.33"
    return str(candidate) if candidate.exists() else found


@pytest.mark.kubectl
async def test_kubectl_describe_shows_recorded_events(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """`kubectl describe node` lists the Events the recorder wrote."""
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("no kubectl on this machine")
    server = ApiServer(seed=1)
    server.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    listening = await nursery.start(functools.partial(serve_apiserver, server, tls=True))
    path = listening.write_kubeconfig(tmp_path / "kubeconfig")
    with trio.fail_after(60):
        async with open_kube_client(load_kubeconfig(path), qps=0) as client:
            node = await client.get(NODES, "n1", type=Node)
            recorder = EventRecorder(
                client, component="cloud-node-controller", now=lambda: dt.datetime.now(dt.UTC)
            )
            recorder.normal(ObjectRef.of(node, NODES), "Synced", "Node synced successfully")
            await recorder.drain()
        result = await trio.run_process(
            [
                kubectl,
                "--kubeconfig",
                str(path),
                "--cache-dir",
                str(tmp_path / "cache"),
                "describe",
                "node",
                "n1",
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    output = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    events = output.split("Events:", 1)[1]
    assert "Synced" in events
    assert "cloud-node-controller" in events
    assert "Node synced successfully" in events


async def test_a_wave_of_events_keeps_compact_records(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """Each object's three cache entries share one source key (not three copies of it), and
    a window of similar Events keeps no more distinct messages than aggregation needs."""
    with trio.fail_after(100):
        async with recording(kube) as recorder:
            for i in range(3):
                recorder.normal(ObjectRef("Node", f"n{i}", uid=f"u{i}"), "Synced", "ok")
            for i in range(20):
                recorder.warning(NODE, "Failed", f"attempt {i}")
            await trio.testing.wait_all_tasks_blocked()
            sources = list(recorder._buckets)
            similar = dict(recorder._similar)
            seen = list(recorder._seen)
    for source in sources[:3]:
        assert sum(key[0] is source for key in similar) == 1
        assert sum(key[0] is source for key in seen) == 1
    windows = [window for key, window in similar.items() if key[2] == "Failed"]
    assert [len(window.messages) for window in windows] == [10]
    assert sum(e["message"].startswith("(combined") for e in _events(server)) == 1
