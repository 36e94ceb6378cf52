"""The kube client's own cost: CPU of this process per Node PATCH, with many writes in flight.

    python bench/kube_client.py [--quick]

The emulator runs in its own process (`trio-ccm apiserver`), so the CPU measured here (this
process's, `time.process_time`) is the client's alone: `KubeClient.patch` as the cloud-node
controller calls it (a merge patch of a Node, the answer decoded as its metadata), over
loopback HTTP/1.1, at 40 and at 8 writes in flight (a Node wave at a raised
`--concurrent-node-syncs`, and as deployed). Each level runs `--rounds` times after a
warm-up; the figures are the medians. No rate limit (QPS 0): the client is the bound.

Watch reads: this process's CPU per watch event of a Node watch read as the CCM's Node
informer reads it (`watch_batches_as(rest_s=0.1)`, decoded as `Node`), the events being
kubelets' heartbeats as at 100,000 Nodes: 333 a second, one every 3 ms, each its own
chunk and its own write, as an API server sends them (a Node of about 4.9 KB, as
the emulator stores them). The server is this script in another process (`--serve-watch`),
so the CPU is the client's alone; over plain loopback HTTP/1.1 and over TLS. Reported with
the events per batch the watch handed over (one batch per wake-up is the best case).

Prints a human-readable summary, then one JSON object with the figures as the last line.
Benchmarks print numbers; they never assert on time.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from trio_ccm.kube import patches
from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.kube.objects import NODES, Node

IN_FLIGHT = (40, 8)
WARM_UP = 50
HEARTBEATS_PER_S = 333  # 100,000 Nodes' kubelets, one status update each every 300 s
REST_S = 0.1  # the CCM's Node informer's (`NODE_WATCH_REST_S`)


async def _patches(kube: KubeClient, names: list[str], count: int, in_flight: int) -> None:
    """`count` label patches over `names`, `in_flight` at a time."""
    todo = iter(range(count))

    async def worker() -> None:
        for i in todo:
            patch = patches.set_labels({"bench.trio-ccm.dev/round": f"w{i}"})
            await kube.patch(NODES, names[i % len(names)], patch)

    async with trio.open_nursery() as nursery:
        for _ in range(in_flight):
            nursery.start_soon(worker)


async def measure(url: str, nodes: int, writes: int, rounds: int) -> dict[str, Any]:
    config = ConnectionConfig(server=url, credentials=StaticCredentials(), source=url)
    figures: dict[str, Any] = {}
    async with open_kube_client(config, qps=0, component="bench") as kube:
        names = [f"node-{i:05d}" for i in range(nodes)]
        for name in names:
            await kube.create(
                NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
            )
        for in_flight in IN_FLIGHT:
            await _patches(kube, names, WARM_UP, in_flight)
            cpu_us: list[float] = []
            rates: list[float] = []
            for _ in range(rounds):
                cpu0, wall0 = time.process_time(), time.perf_counter()
                await _patches(kube, names, writes, in_flight)
                cpu1, wall1 = time.process_time(), time.perf_counter()
                cpu_us.append(1e6 * (cpu1 - cpu0) / writes)
                rates.append(writes / (wall1 - wall0))
            figures[f"cpu_us_per_patch_{in_flight}"] = round(statistics.median(cpu_us), 1)
            figures[f"patches_per_s_{in_flight}"] = round(statistics.median(rates), 1)
            print(
                f"{in_flight:>3} in flight: {statistics.median(cpu_us):7.0f} µs of this "
                f"process's CPU per PATCH ({', '.join(f'{c:.0f}' for c in cpu_us)}), "
                f"{statistics.median(rates):6.0f} PATCHes/s",
                flush=True,
            )
    return figures


def _heartbeat_chunks(count: int) -> list[bytes]:
    """`count` MODIFIED events of Nodes (about 4.9 KB each), one HTTP chunk each."""
    conditions = [
        {
            "type": kind,
            "status": "False",
            "lastHeartbeatTime": "2026-11-28T00:00:00Z",
            "lastTransitionTime": "2026-11-27T00:00:00Z",
            "reason": f"Kubelet{kind}",
            "message": f"kubelet has no {kind.lower()}: " + "m" * 80,
        }
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
    ]
    chunks = []
    for i in range(count):
        node = {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {
                "name": f"node-{i % 1000:05d}",
                "uid": f"00000000-0000-0000-0000-{i % 1000:012d}",
                "resourceVersion": str(1000 + i),
                "labels": {f"bench.trio-ccm.dev/label-{j}": "v" * 40 for j in range(16)},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0", "bench": "a" * 1800},
            },
            "spec": {"providerID": f"sim://node-{i % 1000:05d}", "podCIDR": "10.0.0.0/24"},
            "status": {
                "conditions": conditions,
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            },
        }
        line = json.dumps({"type": "MODIFIED", "object": node}).encode() + b"\n"
        chunks.append(b"%x\r\n%s\r\n" % (len(line), line))
    return chunks


def serve_watch(count: int, tls: bool) -> None:
    """Answer one watch on loopback with `count` heartbeats, HEARTBEATS_PER_S a second, each
    its own write; print the port (and, over TLS, the CA file) first."""
    chunks = _heartbeat_chunks(count)
    listener = socket.create_server(("127.0.0.1", 0))
    context = None
    ca_path = ""
    if tls:
        import trustme

        ca = trustme.CA()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(context)
        with tempfile.NamedTemporaryFile("wb", suffix=".pem", delete=False) as handle:
            handle.write(ca.cert_pem.bytes())
            ca_path = handle.name
    print(listener.getsockname()[1], ca_path, flush=True)
    raw, _ = listener.accept()
    conn = context.wrap_socket(raw, server_side=True) if context is not None else raw
    request = b""
    while b"\r\n\r\n" not in request:
        request += conn.recv(65536)
    conn.sendall(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    due = time.monotonic()
    for chunk in chunks:
        conn.sendall(chunk)
        due += 1 / HEARTBEATS_PER_S
        time.sleep(max(0.0, due - time.monotonic()))
    conn.sendall(b"0\r\n\r\n")
    conn.recv(1)  # until the client closes
    conn.close()


async def read_watch(url: str, ca_pem: bytes | None) -> tuple[float, int, int]:
    """This process's CPU over the whole watch, its events and batches."""
    config = ConnectionConfig(server=url, credentials=StaticCredentials(), ca_pem=ca_pem)
    events = batches = 0
    async with (
        open_kube_client(config, qps=0, component="bench") as kube,
        kube.watch_batches_as(NODES, Node, resource_version="1", rest_s=REST_S) as stream,
    ):
        cpu0 = time.process_time()
        async for batch in stream:
            events += len(batch)
            batches += 1
        return time.process_time() - cpu0, events, batches


def measure_watch(count: int) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for tls in (False, True):
        argv = [sys.executable, __file__, "--serve-watch", str(count)] + (["--tls"] if tls else [])
        child = subprocess.Popen(  # noqa: S603 - this script
            argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
        )
        try:
            assert child.stdout is not None
            port, *ca = child.stdout.readline().split()
            ca_pem = Path(ca[0]).read_bytes() if ca else None
            url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
            cpu_s, events, batches = trio.run(read_watch, url, ca_pem)
        finally:
            child.wait(timeout=30)
            if ca:
                Path(ca[0]).unlink()
        suffix = "_tls" if tls else ""
        figures[f"cpu_us_per_watch_event{suffix}"] = round(1e6 * cpu_s / events, 1)
        figures[f"watch_events_per_batch{suffix}"] = round(events / batches, 1)
        print(
            f"watch over {'TLS' if tls else 'plain HTTP'}: {1e6 * cpu_s / events:5.1f} µs of "
            f"this process's CPU per event ({events:,} events in {batches:,} batches; "
            f"{100 * cpu_s / (events / HEARTBEATS_PER_S):.2f} % of a core at "
            f"{HEARTBEATS_PER_S} a second)",
            flush=True,
        )
    return figures


def main() -> None:
    if sys.argv[1:2] == ["--serve-watch"]:
        serve_watch(int(sys.argv[2]), "--tls" in sys.argv)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="50 Nodes, 200 writes, 1 round")
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--writes", type=int, default=3000, help="PATCHes per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--watch-events", type=int, default=6000, help="heartbeats a watch")
    parser.add_argument("--only", choices=("patch", "watch"), help="one phase")
    args = parser.parse_args()
    nodes, writes, rounds = (50, 200, 1) if args.quick else (args.nodes, args.writes, args.rounds)
    figures: dict[str, Any] = {}
    print(f"kube client: Python {platform.python_version()}, {platform.machine()}", flush=True)
    if args.only != "watch":
        print(f"{writes:,} Node PATCHes a round, {rounds} round(s), over {nodes} Nodes", flush=True)
        argv = [str(Path(sys.executable).with_name("trio-ccm")), "apiserver", "--port=0"]
        child = subprocess.Popen(  # noqa: S603 - our own CLI
            argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
        )
        try:
            assert child.stdout is not None
            url = child.stdout.readline().split()[-1]
            figures.update(trio.run(functools.partial(measure, url, nodes, writes, rounds)))
        finally:
            child.terminate()
            child.wait(timeout=30)
    if args.only != "patch":
        figures.update(measure_watch(150 if args.quick else args.watch_events))
    print(json.dumps({"quick": args.quick, **figures}))


if __name__ == "__main__":
    main()
