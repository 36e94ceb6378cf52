"""Load balancers that carry traffic: how soon a Service and a new Node serve requests.

    python bench/datapath.py [--quick]

One process runs a whole cluster on a random 127.x.y.0/24 (`open_datapath_world`: the
emulator, the simulated cloud with its data plane at its defaults (health checks every 1 s,
rise 2), the testbed's kubelets, kube-proxy and pods, one CCM replica), on the real clock.
For each count N of load balancers (10 and 100; quick: 2):

- `service_to_first_request_s`: N LoadBalancer Services are created one after the other
  (through the API, as `kubectl create` does); per Service, the time from its create to the
  first request answered by a pod through its EXTERNAL-IP (all polled by one loop every
  100 ms: a list of the Services, one request to each with an EXTERNAL-IP);
- `node_to_first_request_s`: a Node joins (an instance is launched; its kubelet registers
  the Node); per load balancer, the time from the Node's registration to the first request
  through that load balancer that the new Node served (the data plane's per-backend count
  says which Node took it; polled every 100 ms, a request sent once the Node is healthy
  there).

Then `requests_per_s`: small HTTP requests (kept-alive connections, 8 clients) through one
load balancer for a few seconds (quick: 1 s), each through the proxy, a Node's kube-proxy and
a pod; `requests_per_cpu_s`, the same per CPU second this process used (what one free core
would carry: the machine is shared); and `connections_per_s`, with a new connection per
request.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial
from typing import Any

import trio

from _common import cpu_seconds, machine_line, print_figures, quiet_logging
from trio_ccm.kube.objects import NODES, SERVICES, Node, Service
from trio_ccm_testbed.datapath import DatapathWorld, open_datapath_world
from trio_ccm_testbed.traffic import TrafficError, http_get, open_http_connection

_POLL_S = 0.1


def spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "p95": None, "max": None}
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 3),
        "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3),
        "max": round(ordered[-1], 3),
    }


async def answered(address: str, port: int) -> bool:
    """Whether one request to `address:port` gets a pod's answer (within 2 s)."""
    try:
        with trio.fail_after(2):
            (await http_get(address, port)).answer()
    except (TrafficError, trio.TooSlowError):
        return False
    return True


async def service_phase(
    world: DatapathWorld, count: int, keys: list[str], took: list[float]
) -> None:
    """Create `count` Services one after the other (their keys into `keys`); per Service,
    the seconds from its create to its first answer into `took`. One loop polls them all
    (a list of the Services, then one request to each that has an EXTERNAL-IP) every
    `_POLL_S`, so that the bench's own polling stays small beside what it measures."""
    created: dict[str, float] = {}
    for index in range(count):
        started = time.perf_counter()
        key = await world.create_service(f"bench-{index}")
        created[key] = started
        keys.append(key)

    async def try_one(key: str, address: str) -> None:
        if await answered(address, 8080) and key in created:
            took.append(time.perf_counter() - created.pop(key))

    while created:
        listed = await world.testbed.kube.list(SERVICES, type=Service)
        async with trio.open_nursery() as nursery:
            for svc in listed.items:
                ingress = svc.status.load_balancer.ingress
                if svc.key in created and ingress and ingress[0].ip:
                    nursery.start_soon(try_one, svc.key, ingress[0].ip)
        await trio.sleep(_POLL_S)


async def node_phase(world: DatapathWorld, keys: list[str], took: list[float]) -> None:
    """Add a Node; per load balancer, seconds from the Node's registration to the first
    request through it that the new Node served (into `took`). One loop polls every
    `_POLL_S`: the data plane's state of each load balancer, and, where the new Node is
    healthy, one request (which it may or may not get: backends take turns)."""
    ips = {key: await world.wait_external_ip(key) for key in keys}
    names = {key: await world.load_balancer_name(key) for key in keys}
    [instance] = world.testbed.add_nodes(1)
    name = instance.name
    while True:
        listed = await world.testbed.kube.list(NODES, type=Node)
        if any(n.metadata.name == name for n in listed.items):
            break
        await trio.sleep(0.01)
    registered = time.perf_counter()
    pending = set(keys)

    def served(key: str) -> bool:
        state = world.plane.balancer(names[key]) or {}
        rows = state.get("backends", [])
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, dict) and row.get("node") == name:
                return bool(row.get("totalConnections"))
        return False

    def healthy(key: str) -> bool:
        state = world.plane.balancer(names[key]) or {}
        rows = state.get("backends", [])
        return any(
            isinstance(row, dict) and row.get("node") == name and row.get("state") == "healthy"
            for row in (rows if isinstance(rows, list) else [])
        )

    async def try_one(key: str) -> None:
        if await answered(ips[key], 8080) and served(key) and key in pending:
            pending.discard(key)
            took.append(time.perf_counter() - registered)

    while pending:
        async with trio.open_nursery() as nursery:
            for key in list(pending):
                if healthy(key):
                    nursery.start_soon(try_one, key)
        await trio.sleep(_POLL_S)


async def rate(address: str, port: int, seconds: float, *, keep_alive: bool) -> tuple[float, float]:
    """Requests answered per second by 8 clients for `seconds`, and per CPU second of this
    process (clients, load balancer, kube-proxy and pods all run in it)."""
    done = 0
    deadline = trio.current_time() + seconds

    async def client() -> None:
        nonlocal done
        if keep_alive:
            connection = await open_http_connection(address, port)
            try:
                while trio.current_time() < deadline:
                    (await connection.get("/")).answer()
                    done += 1
            finally:
                await connection.aclose()
        else:
            while trio.current_time() < deadline:
                (await http_get(address, port)).answer()
                done += 1

    started, cpu = time.perf_counter(), cpu_seconds()
    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(client)
    return done / (time.perf_counter() - started), done / max(cpu_seconds() - cpu, 1e-9)


async def bounded(what: str, work: Any, limit_s: float) -> Any:
    """`work()` within `limit_s`, else None (said on stderr): a saturated run ends."""
    with trio.move_on_after(limit_s):
        return await work()
    print(f"{what}: not done within {limit_s:g} s", file=sys.stderr, flush=True)
    return None


async def run(args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    requests_per_s = connections_per_s = per_cpu = None
    for count in args.load_balancers:
        async with open_datapath_world(
            nodes=args.nodes, pods=2, health_interval_s=args.health_interval, drain_s=10.0
        ) as world:
            began = time.perf_counter()
            keys: list[str] = []
            service_s: list[float] = []
            node_s: list[float] = []

            await bounded(
                f"N={count} services",
                partial(service_phase, world, count, keys, service_s),
                args.limit,
            )
            await bounded(f"N={count} node", partial(node_phase, world, keys, node_s), args.limit)
            runs.append(
                {
                    "load_balancers": count,
                    "nodes": args.nodes,
                    "service_to_first_request_s": spread(service_s),
                    "services_not_served": count - len(service_s),
                    "node_to_first_request_s": spread(node_s),
                    "load_balancers_not_served_by_node": count - len(node_s),
                    "health_interval_s": args.health_interval,
                    "phase_s": round(time.perf_counter() - began, 2),
                }
            )
            print(f"N={count}: {runs[-1]}", file=sys.stderr, flush=True)
            if requests_per_s is None:
                ip = await world.wait_external_ip(keys[0])
                requests_per_s, per_cpu = await rate(ip, 8080, args.seconds, keep_alive=True)
                connections_per_s, _ = await rate(ip, 8080, args.seconds, keep_alive=False)
    first = runs[0]
    return {
        "machine": machine_line(),
        "runs": runs,
        "service_to_first_request_s": first["service_to_first_request_s"],
        "node_to_first_request_s": first["node_to_first_request_s"],
        "requests_per_s": round(requests_per_s or 0.0, 1),
        "connections_per_s": round(connections_per_s or 0.0, 1),
        "requests_per_cpu_s": round(per_cpu or 0.0, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (smoke check)")
    parser.add_argument(
        "--load-balancers",
        type=int,
        nargs="+",
        help="counts of load balancers, one world each (default 10 100; quick 2)",
    )
    parser.add_argument("--nodes", type=int, default=3, help="Nodes at start (default 3)")
    parser.add_argument(
        "--health-interval", type=float, default=1.0, help="seconds between health checks (1)"
    )
    parser.add_argument(
        "--limit", type=float, default=300.0, help="seconds each phase may take (default 300)"
    )
    parser.add_argument(
        "--seconds", type=float, help="length of each throughput run (default 5; quick 1)"
    )
    args = parser.parse_args(argv)
    args.load_balancers = args.load_balancers or ([2] if args.quick else [10, 100])
    args.seconds = args.seconds or (1.0 if args.quick else 5.0)
    quiet_logging("warning")
    figures = trio.run(run, args)
    for row in figures["runs"]:
        print(
            f"{row['load_balancers']:>4} load balancers: service -> first request "
            f"{row['service_to_first_request_s']}, node -> first request "
            f"{row['node_to_first_request_s']}"
        )
    print(
        f"data plane: {figures['requests_per_s']} requests/s kept alive, "
        f"{figures['connections_per_s']} connections/s; "
        f"{figures['requests_per_cpu_s']} requests per CPU second"
    )
    print_figures(figures)


if __name__ == "__main__":
    main()
