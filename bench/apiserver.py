"""Throughput of the Kubernetes API emulator: writes/s and watch events delivered/s.

    python bench/apiserver.py [--quick]

Creates realistic Nodes (~5 KB each), opens watchers from the list's resourceVersion, then
drives merge-patch writes from a few concurrent writer tasks while every watcher decodes each
event line as a client would. It runs twice in one process and one `trio.run`: in-process
(`server.transport()`, no sockets) and over HTTP (the plain HTTP/1.1 door on loopback; one
HTTP/1.1 client per watcher and a shared client for the writers). Server and clients share
the same cores.

A third phase, `server-process`, measures the emulator's HTTP write path alone, as the
benchmarks that run a CCM in another process use it: `trio-ccm apiserver` in its own process,
the same creates and patches from 8 connections of this process, no watchers. It reports the
rates and the emulator process's CPU per request (from /proc).

Writers are paced by a window: no write starts while the slowest watcher is `window` events
or more behind, so the server's per-watcher buffer (`watch_buffer`) can never fill and no
watcher is closed for falling behind. The figures are therefore sustained end-to-end rates.
`--window 0` turns pacing off (watchers may then be closed, which the output reports).

Prints a human-readable summary, then one JSON object with the figures as the last line.
Benchmarks print numbers; they never assert on time.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h11
import httpx
import msgspec
import trio

from _common import cpu_seconds, print_figures
from trio_ccm_testbed.apiserver import ApiServer, serve_apiserver

NODES_PATH = "/api/v1/nodes"
MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}
JSON_BODY = {"Content-Type": "application/json"}
LABEL = "bench.trio-ccm.io/write"
DRAIN_TIMEOUT_S = 60.0

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


# -- realistic Nodes ---------------------------------------------------------------------
_IMAGES = [
    (["registry.k8s.io/kube-proxy@sha256:" + "a1" * 32, "registry.k8s.io/kube-proxy:v1.33.1"],
     29_143_520),
    (["docker.io/calico/node@sha256:" + "b2" * 32, "docker.io/calico/node:v3.29.1"],
     144_587_393),
    (["registry.k8s.io/pause@sha256:" + "c3" * 32, "registry.k8s.io/pause:3.10"], 320_368),
    (["quay.io/prometheus/node-exporter@sha256:" + "d4" * 32,
      "quay.io/prometheus/node-exporter:v1.8.2"], 12_058_374),
    (["registry.k8s.io/coredns/coredns@sha256:" + "e5" * 32,
      "registry.k8s.io/coredns/coredns:v1.12.0"], 20_939_036),
    (["public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver@sha256:" + "f6" * 32,
      "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver:v1.38.1"], 31_233_488),
    (["registry.k8s.io/sig-storage/csi-node-driver-registrar@sha256:" + "a7" * 32,
      "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.12.0"], 10_910_466),
    (["docker.io/calico/cni@sha256:" + "b8" * 32, "docker.io/calico/cni:v3.29.1"],
     94_462_203),
    (["docker.io/fluent/fluent-bit@sha256:" + "c9" * 32, "docker.io/fluent/fluent-bit:3.2.2"],
     38_911_732),
]  # fmt: skip


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def make_node(i: int) -> dict[str, Any]:
    """A Node shaped like one a kubelet and a cloud controller manager have filled in."""
    name = node_name(i)
    zone = "abc"[i % 3]
    a, b = divmod(i, 250)
    internal = f"10.{a // 250}.{a % 250}.{b + 1}"
    external = f"203.0.{i % 250}.{(i // 250) % 250 + 1}"
    beat = "2026-11-21T09:00:00Z"
    since = "2026-11-01T08:00:00Z"

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "lastHeartbeatTime": beat,
            "lastTransitionTime": since,
            "reason": reason,
            "message": message,
        }

    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": "m6i.2xlarge",
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": f"eu-west-1{zone}",
                "node-role.kubernetes.io/worker": "",
                "example.com/nodepool": f"pool-{i % 8}",
                LABEL: "0",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": f"i-{i:017x}"}),
                "projectcalico.org/IPv4Address": f"{internal}/16",
                "projectcalico.org/IPv4VXLANTunnelAddr": f"192.168.{a % 250}.{b + 1}",
                "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
            },
        },
        "spec": {
            "podCIDR": f"10.{100 + a // 250}.{a % 250}.0/24",
            "podCIDRs": [f"10.{100 + a // 250}.{a % 250}.0/24"],
            "providerID": f"aws:///eu-west-1{zone}/i-{i:017x}",
            "taints": [
                {"key": "example.com/dedicated", "value": f"pool-{i % 8}", "effect": "NoSchedule"}
            ],
        },
        "status": {
            "capacity": {
                "cpu": "8",
                "ephemeral-storage": "104845292Ki",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": "32386520Ki",
                "pods": "110",
            },
            "allocatable": {
                "cpu": "7910m",
                "ephemeral-storage": "95551679124",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": "31369688Ki",
                "pods": "110",
            },
            "conditions": [
                condition(
                    "NetworkUnavailable", "False", "CalicoIsUp", "Calico is running on this node"
                ),
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                condition(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
                condition(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                ),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": internal},
                {"type": "ExternalIP", "address": external},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{i:032x}",
                "systemUUID": f"ec2{i:05x}-0000-4000-8000-{i:012x}",
                "bootID": f"{i:08x}-1111-4222-8333-{i:012x}",
                "kernelVersion": "6.1.119-129.201.amzn2023.x86_64",
                "osImage": "Amazon Linux 2023.6.20241212",
                "containerRuntimeVersion": "containerd://1.7.23",
                "kubeletVersion": "v1.33.1",
                "kubeProxyVersion": "v1.33.1",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [{"names": names, "sizeBytes": size} for names, size in _IMAGES],
            "volumesInUse": [f"kubernetes.io/csi/ebs.csi.aws.com^vol-{i:017x}"],
            "volumesAttached": [
                {
                    "name": f"kubernetes.io/csi/ebs.csi.aws.com^vol-{i:017x}",
                    "devicePath": "",
                }
            ],
        },
    }


# -- measurement helpers -----------------------------------------------------------------
class Pacer:
    """Holds writers back while the slowest watcher is `window` or more events behind."""

    def __init__(self, window: int, watchers: int) -> None:
        self.window = window
        self.counts = [0] * watchers
        self.issued = 0
        self.waits = 0
        self._progress = trio.Event()

    async def acquire(self) -> None:
        if self.window:
            waited = False
            while self.issued - min(self.counts) >= self.window:
                waited = True
                await self._progress.wait()
            self.waits += waited
        self.issued += 1

    def report(self, watcher: int, count: int) -> None:
        self.counts[watcher] = count
        self._progress.set()
        self._progress = trio.Event()


@dataclass
class WatchResult:
    received: int = 0
    chunks: int = 0
    done_at: float | None = None
    ended_early: bool = False
    out_of_order: int = 0
    others: dict[str, int] = field(default_factory=dict)


async def consume_watch(
    response: httpx.Response,
    index: int,
    expected: int,
    pacer: Pacer,
    result: WatchResult,
    all_done: Callable[[], None],
) -> None:
    """Read the event stream, decode every line, count MODIFIED events in order."""
    pending = b""
    last_rv = 0
    async for chunk in response.aiter_bytes():
        result.chunks += 1
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            if not line:
                continue
            event = _decode(line)
            kind = event["type"]
            if kind != "MODIFIED":
                result.others[kind] = result.others.get(kind, 0) + 1
                continue
            rv = int(event["object"]["metadata"]["resourceVersion"])
            if rv <= last_rv:
                result.out_of_order += 1
            last_rv = rv
            result.received += 1
        pacer.report(index, result.received)
        if result.received >= expected and result.done_at is None:
            result.done_at = time.perf_counter()
            all_done()
    # The server ended the stream: only expected if it closed us for falling behind.
    if result.done_at is None:
        result.ended_early = True
        pacer.report(index, sys.maxsize)  # stop holding the writers back for this one
        all_done()


async def create_nodes(
    client: httpx.AsyncClient, count: int, concurrency: int
) -> tuple[float, list[float]]:
    bodies = [_encode(make_node(i)) for i in range(count)]
    latencies: list[float] = []
    next_index = iter(range(count))

    async def creator() -> None:
        for i in next_index:
            began = time.perf_counter()
            response = await client.post(NODES_PATH, content=bodies[i], headers=JSON_BODY)
            latencies.append(time.perf_counter() - began)
            if response.status_code != 201:
                raise RuntimeError(f"create {node_name(i)}: {response.status_code} {response.text}")

    began = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(creator)
    return time.perf_counter() - began, latencies


async def list_resource_version(client: httpx.AsyncClient) -> tuple[str, int]:
    """Page through the list as an informer would; the first page's resourceVersion."""
    rv = ""
    items = 0
    token = ""
    while True:
        params = {"limit": "500"}
        if token:
            params["continue"] = token
        response = await client.get(NODES_PATH, params=params)
        response.raise_for_status()
        body = _decode(response.content)
        rv = rv or body["metadata"]["resourceVersion"]
        items += len(body["items"])
        token = body["metadata"].get("continue", "")
        if not token:
            return rv, items


@dataclass
class PhaseConfig:
    nodes: int
    watchers: int
    writes: int
    writers: int
    creators: int
    window: int
    watch_buffer: int


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run_phase(
    server: ApiServer,
    writer_client: httpx.AsyncClient,
    watch_client: Callable[[], AbstractAsyncContextManager[httpx.AsyncClient]],
    cfg: PhaseConfig,
) -> dict[str, Any]:
    create_s, create_lat = await create_nodes(writer_client, cfg.nodes, cfg.creators)
    rv, listed = await list_resource_version(writer_client)
    if listed != cfg.nodes:
        raise RuntimeError(f"listed {listed} Nodes, expected {cfg.nodes}")
    stored_bytes = len((await writer_client.get(f"{NODES_PATH}/{node_name(0)}")).content)

    pacer = Pacer(cfg.window, cfg.watchers)
    results = [WatchResult() for _ in range(cfg.watchers)]
    finished = trio.Event()
    open_watchers = cfg.watchers

    def watcher_finished() -> None:
        nonlocal open_watchers
        open_watchers -= 1
        if open_watchers == 0:
            finished.set()

    write_lat: list[float] = []
    failures: list[str] = []
    write_end = 0.0

    async with AsyncExitStack() as stack, trio.open_nursery() as nursery:
        params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true"}
        for index in range(cfg.watchers):
            client = await stack.enter_async_context(watch_client())
            response = await stack.enter_async_context(
                client.stream("GET", NODES_PATH, params=params)
            )
            response.raise_for_status()
            nursery.start_soon(
                consume_watch,
                response,
                index,
                cfg.writes,
                pacer,
                results[index],
                watcher_finished,
            )
        registered = server.store.watcher_count()

        sequence = iter(range(cfg.writes))

        async def writer() -> None:
            for n in sequence:
                await pacer.acquire()
                name = node_name(n % cfg.nodes)
                body = _encode({"metadata": {"labels": {LABEL: str(n // cfg.nodes + 1)}}})
                began = time.perf_counter()
                response = await writer_client.patch(
                    f"{NODES_PATH}/{name}", content=body, headers=MERGE_PATCH
                )
                write_lat.append(time.perf_counter() - began)
                if response.status_code != 200:
                    failures.append(f"{name}: {response.status_code}")

        start = time.perf_counter()
        async with trio.open_nursery() as writers:
            for _ in range(cfg.writers):
                writers.start_soon(writer)
        write_end = time.perf_counter()
        # Wait for every watcher to see every event (or to have been cut off). A watcher
        # lags at most `watch_buffer` events plus what sits in socket buffers, so a minute
        # is plenty; one still short after that is reported, not waited for.
        with trio.move_on_after(DRAIN_TIMEOUT_S):
            await finished.wait()
        still_open = server.store.watcher_count()
        nursery.cancel_scope.cancel()

    if failures:
        raise RuntimeError(f"{len(failures)} writes failed, e.g. {failures[:3]}")
    write_s = write_end - start
    delivered = sum(r.received for r in results)
    done_times = [r.done_at for r in results if r.done_at is not None]
    complete = len(done_times) == cfg.watchers
    events_s = (max(done_times) if complete else time.perf_counter()) - start
    short = [i for i, r in enumerate(results) if r.received < cfg.writes]
    return {
        "node_bytes": stored_bytes,
        "create_s": create_s,
        "create_per_s": cfg.nodes / create_s,
        "create_p50_ms": 1000 * statistics.median(create_lat),
        "writes": cfg.writes,
        "write_s": write_s,
        "writes_per_s": cfg.writes / write_s,
        "write_p50_ms": 1000 * statistics.median(write_lat),
        "write_p99_ms": 1000 * percentile(write_lat, 0.99),
        "watch_events_delivered": delivered,
        "watch_events_expected": cfg.writes * cfg.watchers,
        "watch_s": events_s,
        "watch_events_per_s": delivered / events_s,
        "events_per_chunk": delivered / max(1, sum(r.chunks for r in results)),
        "watchers_registered": registered,
        "watchers_open_after": still_open,
        "watchers_short": len(short),
        "watchers_ended_early": sum(r.ended_early for r in results),
        "events_out_of_order": sum(r.out_of_order for r in results),
        "other_events": _merge_counts(r.others for r in results),
        "pacer_waits": pacer.waits,
    }


def _merge_counts(counts: Any) -> dict[str, int]:
    merged: dict[str, int] = {}
    for one in counts:
        for key, value in one.items():
            merged[key] = merged.get(key, 0) + value
    return merged


# -- the two front doors -----------------------------------------------------------------
async def in_process(cfg: PhaseConfig) -> dict[str, Any]:
    server = ApiServer(seed=1, watch_buffer=cfg.watch_buffer)
    base = "http://emulator"

    @asynccontextmanager
    async def watch_client() -> AsyncIterator[httpx.AsyncClient]:
        async with httpx.AsyncClient(transport=server.transport(), base_url=base) as client:
            yield client

    async with httpx.AsyncClient(transport=server.transport(), base_url=base) as client:
        return await run_phase(server, client, watch_client, cfg)


async def over_http(cfg: PhaseConfig) -> dict[str, Any]:
    server = ApiServer(seed=1, watch_buffer=cfg.watch_buffer)
    timeout = httpx.Timeout(60.0, read=None)
    async with trio.open_nursery() as nursery:
        listening = await nursery.start(functools.partial(serve_apiserver, server))

        @asynccontextmanager
        async def watch_client() -> AsyncIterator[httpx.AsyncClient]:
            async with httpx.AsyncClient(base_url=listening.url, timeout=timeout) as client:
                yield client

        limits = httpx.Limits(max_connections=max(cfg.writers, cfg.creators) + 4)
        async with httpx.AsyncClient(
            base_url=listening.url, timeout=timeout, limits=limits
        ) as client:
            result = await run_phase(server, client, watch_client, cfg)
        nursery.cancel_scope.cancel()
    return result


class RawConnection:
    """A lean HTTP/1.1 client connection (h11 over a Trio stream): this phase measures the
    server, and httpx would cost the client more CPU per request than the server spends."""

    def __init__(self, stream: trio.SocketStream, host: str) -> None:
        self.stream = stream
        self.host = host
        self.conn = h11.Connection(h11.CLIENT)

    async def request(self, method: str, path: str, body: bytes, content_type: str) -> int:
        headers = [
            ("host", self.host),
            ("content-type", content_type),
            ("content-length", str(len(body))),
        ]
        data = self.conn.send(h11.Request(method=method, target=path, headers=headers)) or b""
        data += (self.conn.send(h11.Data(data=body)) or b"") + (
            self.conn.send(h11.EndOfMessage()) or b""
        )
        await self.stream.send_all(data)
        status = 0
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                self.conn.receive_data(await self.stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.EndOfMessage):
                self.conn.start_next_cycle()
                return status
            elif isinstance(event, h11.ConnectionClosed):
                raise RuntimeError(f"{method} {path}: the server closed the connection")


async def server_process(cfg: PhaseConfig, connections: int = 8) -> dict[str, Any]:
    """The emulator in its own process (`trio-ccm apiserver`): creates and patches over
    HTTP from `connections` connections, the server's CPU per request."""
    argv = [str(Path(sys.executable).with_name("trio-ccm")), "apiserver", "--port=0"]
    # Started before anything is measured; its one line of output is read in a thread.
    child = subprocess.Popen(  # noqa: ASYNC220, S603 - our own CLI
        argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    try:
        assert child.stdout is not None
        line = await trio.to_thread.run_sync(child.stdout.readline)
        url = httpx.URL(line.split()[-1])
        host, port = url.host, url.port or 80
        pool = [
            RawConnection(await trio.open_tcp_stream(host, port), f"{host}:{port}")
            for _ in range(connections)
        ]
        creates = [_encode(make_node(i)) for i in range(cfg.nodes)]

        async def drive(requests: list[tuple[str, str, bytes, str]]) -> float:
            todo = iter(requests)

            async def worker(connection: RawConnection) -> None:
                for method, path, body, content_type in todo:
                    status = await connection.request(method, path, body, content_type)
                    if status >= 300:
                        raise RuntimeError(f"{method} {path}: {status}")

            began = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for connection in pool:
                    nursery.start_soon(worker, connection)
            return time.perf_counter() - began

        cpu0 = cpu_seconds(child.pid)
        create_s = await drive([("POST", NODES_PATH, body, "application/json") for body in creates])
        cpu1 = cpu_seconds(child.pid)
        patches = [
            (
                "PATCH",
                f"{NODES_PATH}/{node_name(i % cfg.nodes)}",
                _encode({"metadata": {"labels": {LABEL: f"w{i}"}}}),
                "application/merge-patch+json",
            )
            for i in range(cfg.writes)
        ]
        write_s = await drive(patches)
        cpu2 = cpu_seconds(child.pid)
        for connection in pool:
            await connection.stream.aclose()
    finally:
        child.send_signal(signal.SIGINT)
        await trio.to_thread.run_sync(child.wait)
    return {
        "create_per_s": cfg.nodes / create_s,
        "writes_per_s": cfg.writes / write_s,
        "create_cpu_ms": 1000 * (cpu1 - cpu0) / cfg.nodes,
        "write_cpu_ms": 1000 * (cpu2 - cpu1) / cfg.writes,
        "connections": connections,
    }


# -- main --------------------------------------------------------------------------------
def summary(label: str, r: dict[str, Any], cfg: PhaseConfig) -> str:
    lines = [
        f"{label}:",
        f"  create   {cfg.nodes:>7} Nodes in {r['create_s']:6.2f} s  "
        f"{r['create_per_s']:9,.0f} creates/s  (p50 {r['create_p50_ms']:.2f} ms, "
        f"{cfg.creators} tasks)",
        f"  write    {r['writes']:>7} patches in {r['write_s']:6.2f} s "
        f"{r['writes_per_s']:9,.0f} writes/s   (p50 {r['write_p50_ms']:.2f} ms, "
        f"p99 {r['write_p99_ms']:.2f} ms, {cfg.writers} tasks, paced {r['pacer_waits']} times)",
        f"  watch    {r['watch_events_delivered']:>7} events in {r['watch_s']:6.2f} s  "
        f"{r['watch_events_per_s']:9,.0f} events/s   "
        f"({r['watchers_registered']} watchers, expected {r['watch_events_expected']}, "
        f"{r['watchers_open_after']} still open on the server)",
    ]
    if r["watchers_short"] or r["watchers_ended_early"] or r["events_out_of_order"]:
        lines.append(
            f"  WARNING: {r['watchers_short']} watchers short of events, "
            f"{r['watchers_ended_early']} closed by the server, "
            f"{r['events_out_of_order']} events out of order"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (smoke check)")
    parser.add_argument("--nodes", type=int, help="Nodes to create (default 5000; quick 100)")
    parser.add_argument("--watchers", type=int, help="watchers (default 10; quick 3)")
    parser.add_argument("--writes", type=int, help="patches per front door (20000; quick 200)")
    parser.add_argument("--http-writes", type=int, help="patches over HTTP")
    parser.add_argument("--writers", type=int, default=4, help="concurrent writer tasks")
    parser.add_argument("--creators", type=int, default=4, help="concurrent create tasks")
    parser.add_argument("--watch-buffer", type=int, default=1_000, help="ApiServer(watch_buffer=)")
    parser.add_argument(
        "--window",
        type=int,
        help="max events the slowest watcher may lag before writers wait "
        "(default watch_buffer // 2; 0: unpaced)",
    )
    parser.add_argument(
        "--only", choices=("in-process", "http", "server-process"), help="run one phase"
    )
    args = parser.parse_args(argv)

    nodes = args.nodes or (100 if args.quick else 5_000)
    writes = args.writes or (200 if args.quick else 20_000)
    args.watchers = args.watchers or (3 if args.quick else 10)
    http_writes = args.http_writes or writes
    window = args.watch_buffer // 2 if args.window is None else args.window
    base = PhaseConfig(
        nodes, args.watchers, writes, args.writers, args.creators, window, args.watch_buffer
    )
    http_cfg = PhaseConfig(**{**base.__dict__, "writes": http_writes})

    async def both() -> dict[str, Any]:
        out: dict[str, Any] = {}
        print(
            f"{nodes} Nodes, {args.watchers} watchers, {writes} patches in-process and "
            f"{http_writes} over HTTP; pacing: "
            + (f"writers wait while a watcher lags {window}+ events" if window else "off")
            + f" (watch_buffer={args.watch_buffer})"
        )
        if args.only in (None, "in-process"):
            out["in_process"] = await in_process(base)
            print(summary("in-process (httpx transport, no sockets)", out["in_process"], base))
        if args.only in (None, "http"):
            out["http"] = await over_http(http_cfg)
            print(summary("over HTTP (loopback, HTTP/1.1)", out["http"], http_cfg))
        if args.only in (None, "server-process"):
            sp = out["server_process"] = await server_process(http_cfg)
            print(
                f"emulator in its own process, {sp['connections']} connections, no watchers:\n"
                f"  create {sp['create_per_s']:9,.0f} creates/s ({sp['create_cpu_ms']:.2f} ms "
                f"of server CPU each)\n  write  {sp['writes_per_s']:9,.0f} writes/s  "
                f"({sp['write_cpu_ms']:.2f} ms of server CPU each)"
            )
        return out

    began = time.perf_counter()
    results = trio.run(both)
    total_s = time.perf_counter() - began
    inp = results.get("in_process", {})
    http = results.get("http", {})
    sp = results.get("server_process", {})
    figures: dict[str, Any] = {
        "writes_per_s": round(inp["writes_per_s"], 1) if inp else None,
        "watch_events_per_s": round(inp["watch_events_per_s"], 1) if inp else None,
        "http_writes_per_s": round(http["writes_per_s"], 1) if http else None,
        "http_watch_events_per_s": round(http["watch_events_per_s"], 1) if http else None,
        "create_per_s": round(inp["create_per_s"], 1) if inp else None,
        "http_create_per_s": round(http["create_per_s"], 1) if http else None,
        "server_writes_per_s": round(sp["writes_per_s"], 1) if sp else None,
        "server_create_per_s": round(sp["create_per_s"], 1) if sp else None,
        "server_cpu_ms_per_write": round(sp["write_cpu_ms"], 3) if sp else None,
        "server_cpu_ms_per_create": round(sp["create_cpu_ms"], 3) if sp else None,
        "nodes": nodes,
        "node_bytes": (inp or http or {"node_bytes": None})["node_bytes"],
        "watchers": args.watchers,
        "writes": writes,
        "http_writes": http_writes,
        "writers": args.writers,
        "creators": args.creators,
        "watch_buffer": args.watch_buffer,
        "pacing": f"window={window}" if window else "none",
        "quick": args.quick,
        "total_s": round(total_s, 1),
        "python": platform.python_version(),
    }
    for prefix, r in (("", inp), ("http_", http)):
        if not r:
            continue
        for key in (
            "write_s",
            "watch_s",
            "write_p50_ms",
            "write_p99_ms",
            "watch_events_delivered",
            "watch_events_expected",
            "events_per_chunk",
            "watchers_short",
            "watchers_ended_early",
            "watchers_open_after",
            "events_out_of_order",
            "other_events",
            "pacer_waits",
        ):
            value = r[key]
            figures[prefix + key] = round(value, 3) if isinstance(value, float) else value
    print(f"total {total_s:.1f} s")
    sys.stdout.flush()
    print_figures(figures)


if __name__ == "__main__":
    main()
