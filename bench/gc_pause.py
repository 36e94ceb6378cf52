"""A full garbage collection over a Node cache: how long it holds the (one) Trio thread.

    python bench/gc_pause.py [--quick] [--nodes N] [--subscriptions S]

In one process: the Node informer over `bench/informer.py`'s replay transport lists N
realistic Nodes (100,000; quick 2,000) and S subscriptions (5; quick 2) are opened and left
undrained, so each holds every Node, as at the start of a term of leadership (each
controller's first fill). Then `gc.collect()` is timed three times (CPU: `process_time`;
wall: `perf_counter`), then again after `gc.freeze()`, as `trio-ccm` freezes the collector
10 s into each term (`trio_ccm.cli.heap.serve_collector_freezes`). The figures are the best
of three. Prints a summary, then one JSON object as the last line. Benchmarks print
numbers; they never assert on time.
"""

from __future__ import annotations

import argparse
import collections
import gc
import random
import time
from typing import Any

import trio

from _common import print_figures, quiet_logging
from informer import cluster, connection, nursery_subscription
from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.informer import Informer
from trio_ccm.kube.objects import NODES, Node


def collections_timed(rounds: int = 3) -> tuple[float, float]:
    """(CPU s, wall s) of a full collection, best of `rounds`."""
    cpu, wall = [], []
    for _ in range(rounds):
        w, c = time.perf_counter(), time.process_time()
        gc.collect()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return min(cpu), min(wall)


async def measure(nodes: int, subscriptions: int) -> dict[str, Any]:
    transport = cluster(nodes)
    client = KubeClient(connection(), transport=transport, qps=0)
    informer = Informer(client, NODES, Node, rng=random.Random(1))
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.serve)
        transport.node_json.clear()  # the test world's JSON, not the cache
        boxes = [await nursery_subscription(nursery, informer) for _ in range(subscriptions)]
        if any(len(box) != nodes for box in boxes):
            raise RuntimeError("a subscription does not hold every Node")
        gc.collect()
        tracked = gc.get_objects()
        top = collections.Counter(type(obj).__qualname__ for obj in tracked).most_common(3)
        count = len(tracked)
        del tracked
        cpu, wall = collections_timed()
        gc.freeze()
        try:
            frozen_cpu, frozen_wall = collections_timed()
        finally:
            gc.unfreeze()
        nursery.cancel_scope.cancel()
    await client.aclose()
    return {
        "nodes": nodes,
        "subscriptions": subscriptions,
        "tracked_objects": count,
        "top_tracked_types": top,
        "full_collection_cpu_s": round(cpu, 4),
        "full_collection_wall_s": round(wall, 4),
        "frozen_collection_cpu_s": round(frozen_cpu, 4),
        "frozen_collection_wall_s": round(frozen_wall, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 Nodes, 2 subscriptions")
    parser.add_argument("--nodes", type=int, help="Nodes cached (100,000; quick 2,000)")
    parser.add_argument("--subscriptions", type=int, help="full subscriptions (5; quick 2)")
    args = parser.parse_args()
    quiet_logging()
    nodes = args.nodes or (2_000 if args.quick else 100_000)
    subscriptions = args.subscriptions if args.subscriptions is not None else 2 if args.quick else 5
    figures = trio.run(measure, nodes, subscriptions)
    print(
        f"{nodes:,} Nodes, {subscriptions} full subscriptions: {figures['tracked_objects']:,} "
        f"tracked objects (top {figures['top_tracked_types']}); a full collection "
        f"{figures['full_collection_cpu_s']} s CPU ({figures['full_collection_wall_s']} s wall), "
        f"frozen {figures['frozen_collection_cpu_s']} s CPU"
    )
    print_figures(figures)


if __name__ == "__main__":
    main()
