"""What the kubelets' process of the split test world pays per call at N instances.

In-process, no sockets: a `Testbed` of N registered kubelets over a `SimCloud` (its poll of
the cloud, `Testbed._sync`, timed once the fleet runs), and the cloud's own handler called
for `SetLoadBalancerBackends` naming every instance, a bulk `ListInstances` of 1,000 names
and a `GetInstance`. Medians of 5, in milliseconds, on one line. Run it against another
commit's code with PYTHONPATH (docs/benchmarks.md, "The join, sixth pass"):

    PYTHONPATH=COPY/src:COPY/testbed/src .venv/bin/python tools/world_costs.py 100000
"""

from __future__ import annotations

import statistics
import sys
import time

import msgspec
import trio

from trio_ccm_testbed._http import Request
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.cloud import SimCloud
from trio_ccm_testbed.testbed import Testbed

ROUNDS = 5


def _ms(samples: list[float]) -> float:
    return round(1000 * statistics.median(samples), 1)


async def measure(count: int) -> str:
    cloud = SimCloud(seed=1, lb_network="10.128.0.0/9")
    testbed = Testbed(ApiServer(seed=1), cloud, heartbeat_s=300.0, node_lease_s=None)
    added = testbed.add_nodes(count, initialised=True, registered=True)
    names = sorted(instance.name for instance in added)
    polls = []
    async with trio.open_nursery() as nursery:
        await testbed._sync(nursery)  # boots the fleet (each kubelet adopts its Node)
        for _ in range(ROUNDS):
            started = time.perf_counter()
            await testbed._sync(nursery)
            polls.append(time.perf_counter() - started)
        nursery.cancel_scope.cancel()
    port = {"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080}
    lb = {"service": "default/a", "ports": [port], "nodes": names}
    path = "/v1/clusters/c/loadbalancers/lb1"
    await cloud.handle(Request.build("PUT", path, "", [], msgspec.json.encode(lb)))
    backends = msgspec.json.encode({"nodes": names})
    sets, lists, gets = [], [], []
    for k in range(ROUNDS):
        started = time.perf_counter()
        await cloud.handle(Request.build("PUT", f"{path}/backends", "", [], backends))
        sets.append(time.perf_counter() - started)
        query = "names=" + ",".join(names[k * 1000 : (k + 1) * 1000])
        started = time.perf_counter()
        await cloud.handle(Request.build("GET", "/v1/instances", query, [], b""))
        lists.append(time.perf_counter() - started)
        one = f"/v1/instances/{added[-1 - k].id}"
        started = time.perf_counter()
        await cloud.handle(Request.build("GET", one, "", [], b""))
        gets.append(time.perf_counter() - started)
    return (
        f"N={count} poll_ms={_ms(polls)} set_backends_ms={_ms(sets)} "
        f"list_1000_names_ms={_ms(lists)} get_instance_ms={_ms(gets)}"
    )


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    print(trio.run(measure, count), flush=True)


if __name__ == "__main__":
    main()
