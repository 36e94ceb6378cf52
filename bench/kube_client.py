"""The kube client's own cost: CPU of this process per Node PATCH, with many writes in flight.

    python bench/kube_client.py [--quick]

The emulator runs in its own process (`trio-ccm apiserver`), so the CPU measured here (this
process's, `time.process_time`) is the client's alone: `KubeClient.patch` as the cloud-node
controller calls it (a merge patch of a Node, the answer decoded as its metadata), over
loopback HTTP/1.1, at 40 and at 8 writes in flight (a Node wave at a raised
`--concurrent-node-syncs`, and as deployed). Each level runs `--rounds` times after a
warm-up; the figures are the medians. No rate limit (QPS 0): the client is the bound.

Prints a human-readable summary, then one JSON object with the figures as the last line.
Benchmarks print numbers; they never assert on time.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

from trio_ccm.kube import patches
from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.kube.objects import NODES

IN_FLIGHT = (40, 8)
WARM_UP = 50


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="50 Nodes, 200 writes, 1 round")
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--writes", type=int, default=3000, help="PATCHes per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    nodes, writes, rounds = (50, 200, 1) if args.quick else (args.nodes, args.writes, args.rounds)
    print(
        f"kube client: {writes:,} Node PATCHes a round, {rounds} round(s), over {nodes} Nodes; "
        f"Python {platform.python_version()}, {platform.machine()}",
        flush=True,
    )
    argv = [str(Path(sys.executable).with_name("trio-ccm")), "apiserver", "--port=0"]
    child = subprocess.Popen(  # noqa: S603 - our own CLI
        argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    try:
        assert child.stdout is not None
        url = child.stdout.readline().split()[-1]
        figures = trio.run(functools.partial(measure, url, nodes, writes, rounds))
    finally:
        child.terminate()
        child.wait(timeout=30)
    print(json.dumps({"quick": args.quick, **figures}))


if __name__ == "__main__":
    main()
