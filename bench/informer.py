"""Throughput and memory of the Node informer: events/s through decode + cache + notify.

    python bench/informer.py [--quick]

events/s: the informer's own work, isolated from any server. A small httpx transport
(`ReplayTransport`, passed to `KubeClient(transport=...)` as any transport would be) answers
the informer's paginated list with N realistic Nodes (~4.9 KB of JSON each, as the emulator
stores them) and each watch with a pre-encoded stream of MODIFIED events (a whole Node per
line, increasing resourceVersions, round-robin over the Nodes), handed over in 64 KiB chunks
(httpcore's read size) with a scheduler checkpoint per chunk, as a socket read would have.
One subscriber mailbox is drained by a consumer task, which takes what is pending (up to
1,000 keys) per scheduler pass, as `KeyedActors`' admission of the cloud-node-controller does
(`--per-value`: one key per pass, as a plain `async for` over the mailbox reads, the way
this bench's consumer read until issue 28's fifth pass). The clock runs from the moment the
watch response is handed over until the consumer has received the round's last event, so
the figure covers httpx's body iteration, line splitting, msgspec decoding, the cache update
and the mailbox hand-off, and nothing of building the stream. Each round is one watch; when
its stream ends, the informer re-watches and the next round starts. Before each round the
machine's speed is taken (`machine_speed_ms`: the CPU milliseconds of a fixed pure-Python
workload, printed in brackets after the round's events/s and reported as `machine_ms_N`):
this machine's speed moves between runs, and the bracket tells a slow machine from a slow
round.

memory: `tracemalloc` is started just before the informer's first list (the client and its
decoders are warmed up beforehand) and a snapshot is taken once the informer reports synced
and the garbage collector has run. Everything still allocated then is the cache plus a few
fixed objects (the serve task, the pending watch request); the figure is that total / Nodes,
with 5,000 and 20,000 Nodes. A deep `sys.getsizeof` walk of the cached objects and the
marginal bytes per Node between the two sizes are reported as cross-checks.

`--quick` runs every phase smaller (sizes 1,000 and 4,000, 2,000 events, 300 e2e patches,
2,000 lifecycle Nodes) to prove the bench runs; the keys of the default sizes are then null.

e2e: for context, the same informer against the emulator in-process (`ApiServer().transport()`)
while 4 tasks send merge patches (one label each) through httpx; this includes the emulator's
own work (patching, storing, encoding and fanning out events) on the same thread.

heartbeat: the cost of a kubelet's status update that changes nothing the cache holds (only
the resourceVersion and the heartbeat times), with three subscriptions open as in a running
CCM (cloud-node, service-lb, lifecycle): CPU microseconds per update, from the stream to the
cache, decode included. Beside it, the same for updates that change a label, which reach the
three subscribers (each drained by a consumer task).

lifecycle: the cloud-node-lifecycle-controller (`NodeLifecycleController.run`, the code the
supervisor runs each term) over an informer holding N Ready Nodes (100,000; quick 5,000),
under `trio.testing.MockClock` so its monitoring passes come every 5 s of virtual time with
no waiting: the CPU of the first pass of a term (the subscription's fill included) and of
each pass after it, with no Node NotReady.

`events_per_s` is the lower of the per-size medians over the rounds; `bytes_per_node` is the
higher of the per-size figures. Everything runs in one process, one thread and one `trio.run`
per phase, so every figure is for one core. Prints a human-readable summary, then one JSON
object as the last line. Benchmarks print numbers; they never assert on time.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import math
import platform
import pstats
import random
import statistics
import sys
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec
import prometheus_client
import trio
import trio.testing

from _common import machine_speed_ms, print_figures, quiet_logging
from apiserver import LABEL, make_node, node_name
from trio_ccm.actors.controller import ControllerContext, ControllerSetup
from trio_ccm.actors.node_lifecycle import NodeLifecycleController
from trio_ccm.base.mailbox import Mailbox
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.kube.events import EventRecorder
from trio_ccm.kube.informer import CHECKPOINT_EVERY, Changed, Informer, Update
from trio_ccm.kube.objects import NODES, SERVICES, Node, Service, Watched, WatchEvent
from trio_ccm.kube.versions import FullVersions, NodeVersions
from trio_ccm.settings import Settings
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.cloud import SimCloud

NODES_PATH = "/api/v1/nodes"
CHUNK_BYTES = 64 * 1024  # what httpcore asks the socket for per read
MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}
ROUND_TIMEOUT_S = 300.0
SIZES = (5_000, 20_000)  # Nodes cached, for the memory and events/s phases (documented keys)
QUICK_SIZES = (1_000, 4_000)  # --quick: the same phases, smaller (its SIZES' keys are null)

_encode = msgspec.json.Encoder().encode


def connection() -> ConnectionConfig:
    return ConnectionConfig(server="http://bench", credentials=StaticCredentials())


# -- realistic Nodes and watch lines -----------------------------------------------------
def stored_node(i: int, resource_version: int, generation: int = 0) -> dict[str, Any]:
    """bench/apiserver.py's Node with the metadata the API server adds (4,892 bytes)."""
    node = make_node(i)
    meta = node["metadata"]
    meta["uid"] = str(uuid.UUID(int=i + 1, version=4))
    meta["creationTimestamp"] = "2026-11-01T08:00:00Z"
    meta["resourceVersion"] = str(resource_version)
    if generation:
        # What a status update and a label change would change.
        meta["labels"][LABEL] = str(generation)
        beat = f"2026-11-21T{9 + generation // 3600 % 12:02d}:{generation // 60 % 60:02d}:00Z"
        for condition in node["status"]["conditions"]:
            condition["lastHeartbeatTime"] = beat
    return node


@dataclass
class Round:
    """One watch stream: pre-encoded chunks and what its last event is."""

    chunks: list[bytes]
    events: int
    stream_bytes: int
    last_key: str
    last_rv: str
    started_at: float = 0.0
    done_at: float = 0.0
    done: trio.Event = field(default_factory=trio.Event)


def build_round(nodes: int, first_seq: int, count: int, chunk_bytes: int) -> Round:
    """`count` MODIFIED events, round-robin over the Nodes, resourceVersions after the list's."""
    lines = []
    for seq in range(first_seq, first_seq + count):
        node = stored_node(seq % nodes, nodes + 1 + seq, seq // nodes + 1)
        lines.append(_encode({"type": "MODIFIED", "object": node}) + b"\n")
    return _round(lines, chunk_bytes, node_name((first_seq + count - 1) % nodes))


def build_heartbeats(nodes: int, first_seq: int, count: int, chunk_bytes: int) -> Round:
    """`count` MODIFIED events of which all but the last are heartbeats (a new
    resourceVersion and heartbeat time, nothing the cache holds), round-robin over all
    Nodes but the last; the last event changes the last Node's label, so that subscribers
    see when the round is over."""
    lines = []
    for seq in range(first_seq, first_seq + count - 1):
        node = stored_node(seq % (nodes - 1), nodes + 1 + seq)
        beat = f"2026-11-21T{10 + seq // 3600 % 12:02d}:{seq // 60 % 60:02d}:{seq % 60:02d}Z"
        for condition in node["status"]["conditions"]:
            condition["lastHeartbeatTime"] = beat
        lines.append(_encode({"type": "MODIFIED", "object": node}) + b"\n")
    last = first_seq + count - 1
    sentinel = stored_node(nodes - 1, nodes + 1 + last)
    sentinel["metadata"]["labels"][LABEL] = f"round-{last}"
    lines.append(_encode({"type": "MODIFIED", "object": sentinel}) + b"\n")
    return _round(lines, chunk_bytes, node_name(nodes - 1))


def _round(lines: list[bytes], chunk_bytes: int, last_key: str) -> Round:
    stream = b"".join(lines)
    last_rv = msgspec.json.decode(lines[-1], type=dict)["object"]["metadata"]["resourceVersion"]
    chunks = [stream[at : at + chunk_bytes] for at in range(0, len(stream), chunk_bytes)]
    return Round(chunks, len(lines), len(stream), last_key, last_rv)


class _Replay(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            await trio.lowlevel.checkpoint()  # a socket read is a checkpoint too
            yield chunk


class ReplayTransport(httpx.AsyncBaseTransport):
    """Answers `GET /api/v1/nodes` lists from pre-encoded Nodes and watches with `Round`s.

    Each watch request waits for the next round (`send_round`); the stream then ends, as a
    server-side watch timeout would end it.
    """

    def __init__(self, node_json: list[bytes], list_rv: str) -> None:
        self.node_json = node_json
        self.list_rv = list_rv
        self.send_round, self._rounds = trio.open_memory_channel[Round](0)
        self.lists = 0
        self.watches = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await trio.lowlevel.checkpoint()
        if request.method != "GET" or request.url.path != NODES_PATH:
            return httpx.Response(404, json={"kind": "Status", "code": 404}, request=request)
        params = request.url.params
        headers = {"Content-Type": "application/json"}
        if params.get("watch") in ("1", "true"):
            self.watches += 1
            round_ = await self._rounds.receive()
            round_.started_at = time.perf_counter()
            return httpx.Response(200, headers=headers, stream=_Replay(round_.chunks))
        self.lists += 1
        total = len(self.node_json)
        start = int(params.get("continue") or 0)
        end = min(total, start + (int(params.get("limit") or 0) or total))
        token = f',"continue":"{end}"' if end < total else ""
        body = b"".join(
            (
                b'{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"',
                self.list_rv.encode(),
                b'"',
                token.encode(),
                b'},"items":[',
                b",".join(self.node_json[start:end]),
                b"]}",
            )
        )
        return httpx.Response(200, headers=headers, content=body, request=request)


def cluster(nodes: int) -> ReplayTransport:
    node_json = [_encode(stored_node(i, i + 1)) for i in range(nodes)]
    return ReplayTransport(node_json, str(nodes))


async def nursery_subscription(
    nursery: trio.Nursery, informer: Informer[Node]
) -> Mailbox[str, Update[Node]]:
    """A subscription held open by a task in `nursery` until the nursery is cancelled."""

    async def hold(*, task_status: trio.TaskStatus[Mailbox[str, Update[Node]]]) -> None:
        async with informer.subscription() as mailbox:
            task_status.started(mailbox)
            await trio.sleep_forever()

    mailbox: Mailbox[str, Update[Node]] = await nursery.start(hold)
    return mailbox


def drain(mailbox: Mailbox[str, Update[Node]]) -> int:
    count = 0
    while True:
        try:
            mailbox.get_nowait()
        except trio.WouldBlock:
            return count
        count += 1


# -- events/s ----------------------------------------------------------------------------
@dataclass
class Consumer:
    """A subscriber: takes what is pending in one step per scheduler pass, up to
    CHECKPOINT_EVERY keys, as `KeyedActors`' admission (cloud-node-controller) and the
    service-lb and lifecycle controllers' Node readers do; `per_value`: one key per pass,
    as a plain `async for` over the mailbox (node-route) or `KeyedActors` without `admit`
    (node-ipam) read."""

    received: int = 0
    target: Round | None = None
    per_value: bool = False

    async def run(self, mailbox: Mailbox[str, Update[Node]]) -> None:
        if self.per_value:
            async for key, update in mailbox:
                self.take(key, update)
            return
        while True:
            for key, update in await mailbox.get_batch(CHECKPOINT_EVERY):
                self.take(key, update)

    def take(self, key: str, update: Update[Node]) -> None:
        self.received += 1
        target = self.target
        obj = update.obj if isinstance(update, Changed) else None
        if (
            target is not None
            and obj is not None
            and key == target.last_key
            and obj.metadata.resource_version == target.last_rv
        ):
            target.done_at = time.perf_counter()
            target.done.set()


async def events_phase(
    nodes: int,
    events: int,
    rounds: int,
    chunk_bytes: int,
    profile: cProfile.Profile | None,
    per_value: bool = False,
) -> dict[str, Any]:
    transport = cluster(nodes)
    client = KubeClient(connection(), transport=transport, qps=0)
    informer = Informer(client, NODES, Node, rng=random.Random(1))
    results: list[dict[str, Any]] = []
    consumer = Consumer(per_value=per_value)
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.serve)
        # A subscription starts with every cached key at once.
        mailbox = await nursery_subscription(nursery, informer)
        drain(mailbox)
        nursery.start_soon(consumer.run, mailbox)
        for index in range(rounds):
            round_ = build_round(nodes, index * events, events, chunk_bytes)
            gc.collect()
            machine_ms = machine_speed_ms()
            before = mailbox.statistics()
            received_before = consumer.received
            consumer.target = round_
            cpu_began = time.process_time()
            if profile is not None:
                profile.enable()
            with trio.fail_after(ROUND_TIMEOUT_S):
                await transport.send_round.send(round_)
                await round_.done.wait()
            if profile is not None:
                profile.disable()
            cpu_s = time.process_time() - cpu_began
            after = mailbox.statistics()
            wall_s = round_.done_at - round_.started_at
            cached = informer.get(round_.last_key)
            if (
                informer.resource_version != round_.last_rv
                or len(informer) != nodes
                or cached is None
                or cached.metadata.resource_version != round_.last_rv
            ):
                raise RuntimeError(f"round {index}: the cache does not hold the last event")
            results.append(
                {
                    "events": events,
                    "wall_s": wall_s,
                    "events_per_s": events / wall_s,
                    "mb_per_s": round_.stream_bytes / wall_s / 1e6,
                    "cpu_util": cpu_s / wall_s,
                    "cpu_us_per_event": cpu_s / events * 1e6,
                    "machine_ms": machine_ms,
                    "puts": after.puts - before.puts,
                    "coalesced": after.coalesced - before.coalesced,
                    "received": consumer.received - received_before,
                    "chunks": len(round_.chunks),
                    "event_bytes": round_.stream_bytes / events,
                }
            )
            del round_
        nursery.cancel_scope.cancel()
    await client.aclose()
    rates = [r["events_per_s"] for r in results]
    return {
        "nodes": nodes,
        "rounds": results,
        "events_per_s": statistics.median(rates),
        "events_per_s_best": max(rates),
        "cpu_us_per_event": statistics.median(r["cpu_us_per_event"] for r in results),
        "machine_ms": statistics.median(r["machine_ms"] for r in results),
        "watches": transport.watches,
        "relists": informer.relists,
    }


# -- heartbeats: updates that change nothing cached -------------------------------------
SUBSCRIBERS = 3  # cloud-node, service-lb and lifecycle subscribe to the Node cache


async def heartbeat_phase(nodes: int, events: int, rounds: int, chunk_bytes: int) -> dict[str, Any]:
    """CPU per update with SUBSCRIBERS subscriptions: heartbeats, then label changes."""
    transport = cluster(nodes)
    client = KubeClient(connection(), transport=transport, qps=0)
    informer = Informer(client, NODES, Node, rng=random.Random(1))
    consumers = [Consumer() for _ in range(SUBSCRIBERS)]
    costs: dict[str, list[float]] = {"heartbeat": [], "change": []}
    unchanged = 0
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.serve)
        for consumer in consumers:
            mailbox = await nursery_subscription(nursery, informer)
            drain(mailbox)
            nursery.start_soon(consumer.run, mailbox)
        seq = 0
        for kind in ("heartbeat", "change"):
            for _ in range(rounds):
                build = build_heartbeats if kind == "heartbeat" else build_round
                round_ = build(nodes, seq, events, chunk_bytes)
                seq += events
                gc.collect()
                before = informer.unchanged
                done = [trio.Event() for _ in consumers]
                for consumer, event in zip(consumers, done, strict=True):
                    consumer.target = dataclasses.replace(round_, done=event)
                cpu_began = time.process_time()
                with trio.fail_after(ROUND_TIMEOUT_S):
                    await transport.send_round.send(round_)
                    for event in done:
                        await event.wait()
                costs[kind].append((time.process_time() - cpu_began) / events * 1e6)
                if kind == "heartbeat":
                    unchanged += informer.unchanged - before
                    if informer.unchanged - before != events - 1:
                        raise RuntimeError(
                            f"{informer.unchanged - before} of {events - 1} heartbeats were "
                            "taken for no change"
                        )
                elif informer.unchanged != before:
                    raise RuntimeError("a label change was taken for no change")
        nursery.cancel_scope.cancel()
    await client.aclose()
    return {
        "nodes": nodes,
        "heartbeat_us": statistics.median(costs["heartbeat"]),
        "change_us": statistics.median(costs["change"]),
        "unchanged": unchanged,
    }


# -- the lifecycle controller's passes ---------------------------------------------------
MONITOR_PERIOD_S = 5.0


async def lifecycle_phase(nodes: int, passes: int) -> dict[str, Any]:
    """CPU of the lifecycle controller's first pass and of its passes after, no NotReady."""
    transport = cluster(nodes)
    client = KubeClient(connection(), transport=transport, qps=0)
    informer = Informer(client, NODES, Node, rng=random.Random(1))
    services: Informer[Service] = Informer(client, SERVICES, Service)  # never served
    cloud = SimCloud(seed=1)
    provider = SimProvider(url="http://sim", replica="bench", transport=cloud.transport())
    settings = Settings(node_monitor_period_s=MONITOR_PERIOD_S)
    controller = NodeLifecycleController(
        ControllerSetup(settings, prometheus_client.CollectorRegistry())
    )
    ctx = ControllerContext(
        name=controller.name,
        settings=settings,
        kube=client,
        nodes=informer,
        services=services,
        cloud=provider,
        events=EventRecorder(client, component=controller.event_component),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.serve)
        gc.collect()
        # Virtual time stands still while a pass runs: passes come at 0, 5, 10, ... s.
        began = time.process_time()
        nursery.start_soon(controller.run, ctx)
        await trio.sleep(MONITOR_PERIOD_S / 2)
        first_s = time.process_time() - began
        began = time.process_time()
        await trio.sleep(passes * MONITOR_PERIOD_S)
        steady_s = time.process_time() - began
        nursery.cancel_scope.cancel()
    await provider.aclose()
    await client.aclose()
    if cloud.calls:
        raise RuntimeError(f"{len(cloud.calls)} cloud calls with every Node Ready")
    return {
        "nodes": nodes,
        "passes": passes,
        "first_pass_ms": first_s * 1e3,
        "pass_us": steady_s / passes * 1e6,
    }


# -- memory ------------------------------------------------------------------------------
def deep_size(objects: Iterable[object]) -> int:
    """sys.getsizeof over every object reachable through Structs, dicts, tuples (once each)."""
    seen: set[int] = set()
    total = 0
    stack = list(objects)
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, msgspec.Struct):
            stack.extend(getattr(obj, name) for name in obj.__struct_fields__)
        elif isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, tuple | list):
            stack.extend(obj)
    return total


async def memory_phase(nodes: int) -> dict[str, Any]:
    transport = cluster(nodes)
    json_bytes = sum(map(len, transport.node_json)) / nodes
    client = KubeClient(connection(), transport=transport, qps=0)
    # Warm up what the first list would create once: the httpx client, the decoder.
    await client.list(NODES, type=Node, limit=1)
    informer = Informer(client, NODES, Node, rng=random.Random(1))
    gc.collect()
    tracemalloc.start()
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.serve)
        gc.collect()
        snapshot = tracemalloc.take_snapshot()
        tracemalloc.stop()
        nursery.cancel_scope.cancel()
    snapshot = snapshot.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    stats = snapshot.statistics("lineno")
    traced = sum(stat.size for stat in stats)
    top = [
        (f"{stat.traceback[0].filename.rsplit('/', 2)[-1]}:{stat.traceback[0].lineno}", stat.size)
        for stat in stats[:4]
    ]
    deep = deep_size([informer._cache])  # read-only look at the cache dict itself
    if len(informer) != nodes:
        raise RuntimeError(f"cached {len(informer)} Nodes, expected {nodes}")
    await client.aclose()
    return {
        "nodes": nodes,
        "traced_bytes": traced,
        "bytes_per_node": traced / nodes,
        "deep_bytes_per_node": deep / nodes,
        "json_bytes_per_node": json_bytes,
        "top": top,
    }


# -- end to end against the emulator -----------------------------------------------------
async def e2e_phase(nodes: int, writes: int, writers: int, window: int) -> dict[str, Any]:
    server = ApiServer(seed=1)
    for i in range(nodes):
        server.create(make_node(i))
    client = KubeClient(connection(), transport=server.transport(), qps=0)
    informer = Informer(client, NODES, Node, rng=random.Random(1))
    consumer = Consumer()
    progress = trio.Event()
    issued = 0

    async def consume(mailbox: Mailbox[str, Update[Node]]) -> None:
        nonlocal progress
        async for _ in mailbox:
            consumer.received += 1
            progress.set()
            progress = trio.Event()

    async with (
        httpx.AsyncClient(transport=server.transport(), base_url="http://emulator") as http,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(informer.serve)
        mailbox = await nursery_subscription(nursery, informer)
        drain(mailbox)
        nursery.start_soon(consume, mailbox)
        sequence = iter(range(writes))

        async def writer() -> None:
            nonlocal issued
            for n in sequence:
                # Pace: the emulator closes a watcher that lags 1,000 events (watch_buffer).
                while issued - consumer.received >= window:
                    await progress.wait()
                issued += 1
                body = _encode({"metadata": {"labels": {LABEL: str(n // nodes + 1)}}})
                response = await http.patch(
                    f"{NODES_PATH}/{node_name(n % nodes)}", content=body, headers=MERGE_PATCH
                )
                if response.status_code != 200:
                    raise RuntimeError(f"patch: {response.status_code} {response.text}")

        began = time.perf_counter()
        cpu_began = time.process_time()
        with trio.fail_after(ROUND_TIMEOUT_S):
            async with trio.open_nursery() as writing:
                for _ in range(writers):
                    writing.start_soon(writer)
            while consumer.received < writes:
                await progress.wait()
        wall_s = time.perf_counter() - began
        cpu_s = time.process_time() - cpu_began
        nursery.cancel_scope.cancel()
    await client.aclose()
    return {
        "nodes": nodes,
        "writes": writes,
        "received": consumer.received,
        "wall_s": wall_s,
        "events_per_s": consumer.received / wall_s,
        "cpu_util": cpu_s / wall_s,
        "relists": informer.relists,
        "watches": informer.watches,
    }


# -- build: decode to cache, the two ways -------------------------------------------------
def build_phase(nodes: int, rounds: int) -> dict[str, float]:
    """CPU per watch line from its bytes to the cached Node, without httpx, Trio or the
    mailbox: the full decode (the line with its object raw, the object decoded whole, then
    `share_unchanged` and `same_but_version`: `FullVersions`, what the informer did before)
    against one parse into the wire form and compare-before-build (`NodeVersions`, what it
    does now), for label changes and for heartbeats. Best of `rounds` alternating rounds."""
    raw_event = msgspec.json.Decoder(WatchEvent)
    labels = [
        _encode({"type": "MODIFIED", "object": stored_node(i, nodes + 1 + i, 1)})
        for i in range(nodes)
    ]
    beats = []
    for i in range(nodes):
        node = stored_node(i, nodes + 1 + i)
        for condition in node["status"]["conditions"]:
            condition["lastHeartbeatTime"] = "2026-11-21T11:11:11Z"
        beats.append(_encode({"type": "MODIFIED", "object": node}))
    listed = [_encode(stored_node(i, i + 1)) for i in range(nodes)]
    best: dict[str, float] = {}
    for _ in range(rounds):
        for way, versions, one_parse in (
            ("full", FullVersions(Node), False),
            ("compared", NodeVersions(), True),
        ):
            wire = msgspec.json.Decoder(versions.wire)
            line = msgspec.json.Decoder(Watched[versions.wire])  # type: ignore[name-defined]
            for kind, lines in (("label", labels), ("heartbeat", beats)):
                cache: dict[str, Any] = {}
                memos: dict[str, Any] = {}
                for body in listed:
                    obj, memo, _ = versions.build(wire.decode(body), None, None)
                    cache[obj.metadata.name], memos[obj.metadata.name] = obj, memo
                gc.collect()
                began = time.process_time()
                for text in lines:
                    if one_parse:
                        got = line.decode(text).object
                    else:
                        got = wire.decode(raw_event.decode(text).object)
                    key = got.metadata.name
                    obj, memo, _ = versions.build(got, cache.get(key), memos.get(key))
                    cache[key], memos[key] = obj, memo
                us = (time.process_time() - began) / nodes * 1e6
                name = f"build_{kind}_us_{way}"
                best[name] = min(best.get(name, math.inf), us)
    return best


# -- main --------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (smoke check)")
    parser.add_argument(
        "--sizes", help="Nodes cached, comma-separated (default 5000,20000; quick 1000,4000)"
    )
    parser.add_argument("--events", type=int, help="events per round (default 20000; quick 2000)")
    parser.add_argument("--rounds", type=int, help="watch rounds per size (default 3; quick 1)")
    parser.add_argument("--chunk-bytes", type=int, default=CHUNK_BYTES)
    parser.add_argument("--e2e-nodes", type=int, help="emulator Nodes (default 5000; quick 300)")
    parser.add_argument("--e2e-writes", type=int, help="patches (default 5000; quick 300)")
    parser.add_argument("--writers", type=int, default=4, help="concurrent e2e writer tasks")
    parser.add_argument("--window", type=int, default=500, help="max e2e events in flight")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the events/s rounds to FILE")
    parser.add_argument(
        "--per-value",
        action="store_true",
        help="events/s with a consumer that takes one key per scheduler pass",
    )
    parser.add_argument(
        "--lifecycle-nodes", type=int, help="lifecycle phase Nodes (default 100000; quick 2000)"
    )
    parser.add_argument("--passes", type=int, default=20, help="lifecycle passes measured")
    parser.add_argument(
        "--only",
        choices=("events", "memory", "e2e", "heartbeat", "lifecycle", "build"),
        help="run one phase",
    )
    args = parser.parse_args(argv)
    quiet_logging("warning")

    sizes = [
        int(s)
        for s in (args.sizes or ",".join(map(str, QUICK_SIZES if args.quick else SIZES))).split(",")
        if s
    ]
    events = args.events or (2_000 if args.quick else 20_000)
    rounds = args.rounds or (1 if args.quick else 3)
    e2e_nodes = args.e2e_nodes or (300 if args.quick else 5_000)
    e2e_writes = args.e2e_writes or (300 if args.quick else 5_000)
    lifecycle_nodes = args.lifecycle_nodes or (2_000 if args.quick else 100_000)
    profile = cProfile.Profile() if args.profile else None

    print(
        f"Node informer, one process, one thread; sizes {sizes}; {rounds} x {events} "
        f"MODIFIED events per size in {args.chunk_bytes // 1024} KiB chunks"
    )
    began = time.perf_counter()
    memory: dict[int, dict[str, Any]] = {}
    rates: dict[int, dict[str, Any]] = {}
    e2e: dict[str, Any] = {}
    if args.only in (None, "memory"):
        for nodes in sizes:
            m = memory[nodes] = trio.run(memory_phase, nodes)
            print(
                f"  memory   {nodes:>6} Nodes: {m['bytes_per_node']:7,.0f} B/Node traced "
                f"({m['traced_bytes'] / 1e6:.1f} MB; deep sizeof {m['deep_bytes_per_node']:,.0f} "
                f"B/Node; JSON {m['json_bytes_per_node']:,.0f} B/Node)"
            )
            print("           largest: " + ", ".join(f"{k} {v / nodes:,.0f}" for k, v in m["top"]))
            gc.collect()
    if len(memory) >= 2:
        low, high = min(memory), max(memory)
        marginal = (memory[high]["traced_bytes"] - memory[low]["traced_bytes"]) / (high - low)
        print(f"           marginal {low} -> {high} Nodes: {marginal:,.0f} B/Node")
    if args.only in (None, "events"):
        for nodes in sizes:
            r = rates[nodes] = trio.run(
                events_phase, nodes, events, rounds, args.chunk_bytes, profile, args.per_value
            )
            each = " / ".join(
                f"{x['events_per_s']:,.0f} [{x['machine_ms']:.0f} ms]" for x in r["rounds"]
            )
            first = r["rounds"][0]
            print(
                f"  events   {nodes:>6} Nodes: {r['events_per_s']:9,.0f} events/s median "
                f"(rounds {each}; {first['mb_per_s']:.0f} MB/s, "
                f"{first['event_bytes']:,.0f} B/event, cpu {first['cpu_util']:.0%}, "
                f"{r['cpu_us_per_event']:.1f} µs CPU/event median, "
                f"{first['received']} of {first['puts']} received, "
                f"{first['coalesced']} coalesced)"
            )
            gc.collect()
    if args.only in (None, "e2e"):
        e2e = trio.run(e2e_phase, e2e_nodes, e2e_writes, args.writers, args.window)
        print(
            f"  e2e      {e2e_nodes:>6} Nodes: {e2e['events_per_s']:9,.0f} events/s "
            f"({e2e['received']} of {e2e_writes} patches seen by the subscriber in "
            f"{e2e['wall_s']:.2f} s, {args.writers} writers, emulator in-process, "
            f"cpu {e2e['cpu_util']:.0%})"
        )
    beats: dict[str, Any] = {}
    if args.only in (None, "heartbeat"):
        beat_nodes = min(sizes) if args.quick else max(sizes)
        beats = trio.run(heartbeat_phase, beat_nodes, events, rounds, args.chunk_bytes)
        print(
            f"  heartbeat {beats['nodes']:>5} Nodes, {SUBSCRIBERS} subscribers: "
            f"{beats['heartbeat_us']:.1f} µs CPU per update that changes nothing cached, "
            f"{beats['change_us']:.1f} µs per label change (medians of {rounds} x {events})"
        )
        gc.collect()
    lifecycle: dict[str, Any] = {}
    if args.only in (None, "lifecycle"):
        lifecycle = trio.run(
            lifecycle_phase,
            lifecycle_nodes,
            args.passes,
            clock=trio.testing.MockClock(autojump_threshold=0),
        )
        print(
            f"  lifecycle {lifecycle_nodes:>5} Nodes, all Ready: first pass of a term "
            f"{lifecycle['first_pass_ms']:.1f} ms CPU, then {lifecycle['pass_us']:.1f} µs "
            f"per pass ({args.passes} passes)"
        )
        gc.collect()
    build: dict[str, float] = {}
    if args.only in (None, "build"):
        build = build_phase(min(sizes) if args.quick else max(sizes), 1 if args.quick else 4)
        print(
            f"  build    line to cached Node, CPU per event: label change "
            f"{build['build_label_us_full']:.1f} µs full decode, "
            f"{build['build_label_us_compared']:.1f} µs compared first; heartbeat "
            f"{build['build_heartbeat_us_full']:.1f} / "
            f"{build['build_heartbeat_us_compared']:.1f} µs"
        )
        gc.collect()
    total_s = time.perf_counter() - began

    if profile is not None:
        profile.dump_stats(args.profile)
        print(f"profile of the events/s rounds: {args.profile}; top by own time:")
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(15)

    figures: dict[str, Any] = {
        "events_per_s": round(min(r["events_per_s"] for r in rates.values()), 1) if rates else None,
        "bytes_per_node": round(max(m["bytes_per_node"] for m in memory.values()), 1)
        if memory
        else None,
        "e2e_events_per_s": round(e2e["events_per_s"], 1) if e2e else None,
    }
    for nodes, r in rates.items():
        figures[f"events_per_s_{nodes}"] = round(r["events_per_s"], 1)
        figures[f"events_per_s_best_{nodes}"] = round(r["events_per_s_best"], 1)
        figures[f"cpu_us_per_event_{nodes}"] = round(r["cpu_us_per_event"], 2)
        figures[f"machine_ms_{nodes}"] = round(r["machine_ms"], 1)
    for nodes, m in memory.items():
        figures[f"bytes_per_node_{nodes}"] = round(m["bytes_per_node"], 1)
        figures[f"deep_bytes_per_node_{nodes}"] = round(m["deep_bytes_per_node"], 1)
    for nodes in SIZES:  # the documented sizes a smaller run (--quick) did not measure: null
        for key in ("events_per_s", "events_per_s_best", "cpu_us_per_event"):
            figures.setdefault(f"{key}_{nodes}", None)
        for key in ("bytes_per_node", "deep_bytes_per_node"):
            figures.setdefault(f"{key}_{nodes}", None)
    if len(memory) >= 2:
        figures["marginal_bytes_per_node"] = round(marginal, 1)
    if memory:
        figures["json_bytes_per_node"] = round(next(iter(memory.values()))["json_bytes_per_node"])
    if rates:
        first = next(iter(rates.values()))["rounds"][0]
        figures["event_bytes"] = round(first["event_bytes"])
        figures["coalesced"] = sum(x["coalesced"] for r in rates.values() for x in r["rounds"])
    if beats:
        figures["heartbeat_us"] = round(beats["heartbeat_us"], 2)
        figures["change_us"] = round(beats["change_us"], 2)
        figures["heartbeat_nodes"] = beats["nodes"]
    if lifecycle:
        figures["lifecycle_pass_us"] = round(lifecycle["pass_us"], 1)
        figures["lifecycle_first_pass_ms"] = round(lifecycle["first_pass_ms"], 1)
        figures["lifecycle_nodes"] = lifecycle["nodes"]
    figures.update({name: round(us, 2) for name, us in build.items()})
    figures.update(
        {
            "events_per_round": events,
            "rounds": rounds,
            "chunk_bytes": args.chunk_bytes,
            "e2e_nodes": e2e_nodes if e2e else None,
            "e2e_writes": e2e_writes if e2e else None,
            "quick": args.quick,
            "total_s": round(total_s, 1),
            "python": platform.python_version(),
        }
    )
    print(f"total {total_s:.1f} s")
    sys.stdout.flush()
    print_figures(figures)


if __name__ == "__main__":
    main()
