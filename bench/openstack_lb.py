"""OpenStack load balancers: many LoadBalancer Services created at once against real Octavia,
then a node-set change, then a CCM restart; the Octavia calls of each phase, beside OCCM's.

    python bench/openstack_lb.py [--services 50] [--nodes 20] [--added 5] [--quick]

Runs on the project's OpenStack test world (`trio_ccm_testbed.openstack.open_free_world`:
Debian's Keystone, Neutron, Octavia with noop amphorae and real Neutron VIPs; started for
the run, stopped after; docs/openstack-testworld.md), or on the running world that
`TRIO_CCM_OPENSTACK_WORLD` describes (`make test`'s: bench/_openstack.py). The emulator
(in-process) holds the Nodes (addresses on the world's subnet, no servers: members need
only an address) and the Services. One trio-ccm replica with the openstack provider
(service-lb-controller only) runs them.

Phases and figures:
- `single_create_s`: one Service alone, from its creation until its status has the
  floating IP (the load balancer is ACTIVE with listener, pool, members and floating IP).
- `create_s`: `lbs` Services created at once, until every status has its floating IP.
- `nodeset_calls`: after `added` Nodes join the `nodes`, the Octavia calls (by action)
  until every pool holds them (checked with openstacksdk); `nodeset_calls_per_lb`.
- `restart_calls`: a new replica (a fresh provider: nothing in memory) takes over; its
  Octavia calls (by action) until none came for 10 s, started once every load balancer
  is ACTIVE again after the node change; `restart_calls_per_lb`.
- `occm_model_calls`: OCCM's algorithm (openstack-ccm-study §1.2.7, §4) for the same
  phases: create `7 + k` calls per Service with `k` its ACTIVE polls (1 s growing 1.2 times) for
  the measured single create time, serial at its default `--concurrent-service-syncs=1`
  (`occm_model_create_s` = lbs times its polled create time); node change `2 + P(3 + k')`
  per Service (k' = 2 polls); restart `4 + 2P` per Service.
- `leftovers`: what remains in Octavia/Neutron after every Service is deleted (must be 0).
- What bounds `create_s`: `world_cpu_single_s` and `world_cpu_create_s` are the CPU seconds
  the world's services (Octavia API and worker, Neutron, Keystone, MariaDB, RabbitMQ...)
  used during the single create and during the `lbs` creates, by service;
  `world_cpu_per_create_s` the first's total; `cpu_floor_create_s` = the second's total over
  the machine's cores, the least time the creates could take on this machine however they
  were sent. `bench_cpu_create_s`: this process's own (trio-ccm and the emulator).
  `provider`: the provider's pacing (writes that waited for a slot, ERROR replacements).

The last line printed is the JSON of every figure; after each phase, the figures so far go
to stderr (a line starting `progress`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from _openstack import openstack_world  # noqa: E402
from trio_ccm.cloud.openstack.config import parse_cloud_config  # noqa: E402
from trio_ccm.cloud.openstack.loadbalancers import OpenStackLoadBalancers  # noqa: E402
from trio_ccm.cloud.openstack.provider import OpenStackProvider  # noqa: E402
from trio_ccm.testing import make_node, make_service  # noqa: E402
from trio_ccm.testing.harness import run_ccm  # noqa: E402
from trio_ccm_testbed.apiserver import ApiError, ApiServer  # noqa: E402

QUIET_S = 10.0  # longer than the provider's longest PENDING backoff (8 s)
OCCM_POLLS = [0, 1, 2.2, 3.6, 5.4, 7.4, 9.9, 12.9, 16.5, 20.8, 26.0, 32.2, 39.6, 48.5, 59.2, 72.0]
OCCM_POLLS += [87.4, 105.9, 128.1, 154.7, 186.7, 225.0, 271.0]


def occm_polls(active_after_s: float) -> tuple[int, float]:
    """OCCM's ACTIVE polls for an LB that is ACTIVE after `active_after_s`: (count, when
    it notices)."""
    for i, at in enumerate(OCCM_POLLS):
        if at >= active_after_s:
            return i + 1, at
    return len(OCCM_POLLS), OCCM_POLLS[-1]


def progress(figures: dict[str, Any]) -> None:
    """The figures so far, to stderr: a run stopped before its end still has its phases."""
    print("progress", json.dumps(figures), file=sys.stderr, flush=True)


def octavia_calls(provider: OpenStackProvider) -> Counter[str]:
    stats = provider.client.statistics()
    return Counter({k: v for k, v in stats.calls.items() if k.startswith("load-balancer:")})


async def main(args: argparse.Namespace, world: Any) -> dict[str, Any]:
    admin = world.sdk(admin=True)
    base = world.subnet_cidr.rsplit(".", 1)[0]
    cluster = f"bench{os.getpid()}"
    api = ApiServer(seed=1)
    tmp = Path(tempfile.mkdtemp(prefix="oslb-bench-"))
    keys = {"subnet-id": world.subnet_id, "floating-network-id": world.external_network_id}
    path = world.write_cloud_conf(tmp / "cloud.conf", extra={"LoadBalancer": keys})
    conf = parse_cloud_config(path.read_bytes())
    figures: dict[str, Any] = {"lbs": args.services, "nodes": args.nodes}
    for i in range(args.nodes):
        api.create(
            make_node(
                f"n{i}",
                uninitialized=False,
                addresses=[{"type": "InternalIP", "address": f"{base}.{20 + i}"}],
            )
        )

    def ingress(name: str) -> bool:
        svc = api.get("v1", "Service", name, namespace="default")
        return bool(svc.get("status", {}).get("loadBalancer", {}).get("ingress"))

    def world_cpu() -> dict[str, float]:
        return dict(world.cpu_seconds())

    def used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {k: round(after[k] - before.get(k, 0.0), 1) for k in sorted(after)}

    def create(name: str, node_port: int) -> None:
        ports = [{"name": "p", "port": 80, "protocol": "TCP", "nodePort": node_port}]
        api.create(make_service(name, ports=ports))

    async def wait(check: Any, deadline_s: float) -> None:
        with trio.fail_after(deadline_s):
            while True:  # the emulator and Octavia share no watch: look again
                if check():
                    return
                await trio.sleep(0.2)

    names = [f"s{i}" for i in range(args.services)]

    async def replica(provider: OpenStackProvider, task_status: Any) -> None:
        async with run_ccm(
            api,
            provider,
            "--controllers=service-lb-controller",
            f"--cluster-name={cluster}",
            "--cloud-api-rate=load_balancers=50:100",
            identity=cluster,
            now=lambda: dt.datetime.now(dt.UTC),
        ):
            task_status.started()
            await trio.sleep_forever()

    provider = OpenStackProvider(conf)
    async with trio.open_nursery() as nursery:
        cancel = trio.CancelScope()

        async def run_first(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            with cancel:
                await replica(provider, task_status)

        await nursery.start(run_first)
        started, cpu = time.monotonic(), world_cpu()
        create("single", 30999)
        await wait(lambda: ingress("single"), 600)
        figures["single_create_s"] = round(time.monotonic() - started, 2)
        single_cpu = used(cpu, world_cpu())
        started, cpu, own = time.monotonic(), world_cpu(), time.process_time()
        for i, name in enumerate(names):
            create(name, 31000 + i)
        await wait(lambda: all(ingress(n) for n in names), 1800)
        figures["create_s"] = round(time.monotonic() - started, 2)
        figures["create_vs_single"] = round(figures["create_s"] / figures["single_create_s"], 2)
        create_cpu = used(cpu, world_cpu())
        figures["bench_cpu_create_s"] = round(time.process_time() - own, 1)
        figures["world_cpu_single_s"] = single_cpu
        figures["world_cpu_per_create_s"] = round(sum(single_cpu.values()), 1)
        figures["world_cpu_create_s"] = create_cpu
        cores = os.cpu_count() or 1
        figures["cpu_floor_create_s"] = round(sum(create_cpu.values()) / cores, 1)
        lbs = provider.load_balancers
        if isinstance(lbs, OpenStackLoadBalancers):
            figures["provider"] = lbs.statistics()
        progress(figures)

        before = octavia_calls(provider)
        added = [f"{base}.{20 + args.nodes + i}" for i in range(args.added)]
        for i, ip in enumerate(added):
            api.create(
                make_node(
                    f"n{args.nodes + i}",
                    uninitialized=False,
                    addresses=[{"type": "InternalIP", "address": ip}],
                )
            )
        started = time.monotonic()

        def joined() -> bool:
            for lb in admin.load_balancer.load_balancers():
                if not lb.name.startswith(f"kube_service_{cluster}_default_s"):
                    continue
                for pool in admin.load_balancer.pools(loadbalancer_id=lb.id):
                    if pool.loadbalancers and pool.loadbalancers[0]["id"] != lb.id:
                        continue
                    have = {m.address for m in admin.load_balancer.members(pool.id)}
                    if not set(added) <= have:
                        return False
            return True

        with trio.fail_after(900):
            while True:  # read back with openstacksdk until every pool holds them
                if await trio.to_thread.run_sync(joined):
                    break
                await trio.sleep(1.0)
        figures["nodeset_s"] = round(time.monotonic() - started, 2)
        calls = octavia_calls(provider) - before
        figures["nodeset_calls"] = dict(sorted(calls.items()))
        lbs_total = args.services + 1
        figures["nodeset_calls_per_lb"] = round(sum(calls.values()) / lbs_total, 2)
        progress(figures)

        def settled() -> bool:  # the member updates applied: every load balancer ACTIVE
            prefix = f"kube_service_{cluster}_"
            return all(
                lb.provisioning_status == "ACTIVE"
                for lb in admin.load_balancer.load_balancers()
                if lb.name.startswith(prefix)
            )

        with trio.fail_after(900):
            while True:
                if await trio.to_thread.run_sync(settled):
                    break
                await trio.sleep(1.0)
        cancel.cancel()
    await provider.aclose()

    # restart: a fresh provider, nothing in memory
    fresh = OpenStackProvider(conf)
    async with trio.open_nursery() as nursery:
        await nursery.start(replica, fresh)
        last, quiet_since = 0, time.monotonic()
        with trio.fail_after(600):
            while time.monotonic() - quiet_since < QUIET_S:
                await trio.sleep(0.2)
                now = sum(octavia_calls(fresh).values())
                if now != last:
                    last, quiet_since = now, time.monotonic()
        calls = octavia_calls(fresh)
        figures["restart_calls"] = dict(sorted(calls.items()))
        figures["restart_calls_per_lb"] = round(sum(calls.values()) / lbs_total, 2)

        # clean up through the controller, then check nothing is left
        http = httpx.AsyncClient(transport=api.transport(), base_url="http://emulator")
        async with http:
            for name in ["single", *names]:
                (
                    await http.delete(f"/api/v1/namespaces/default/services/{name}")
                ).raise_for_status()

        def deleted() -> bool:
            for name in ["single", *names]:
                try:
                    api.get("v1", "Service", name, namespace="default")
                except ApiError as exc:
                    if exc.code == 404:
                        continue
                    raise
                return False
            return True

        await wait(deleted, 900)
        nursery.cancel_scope.cancel()
    await fresh.aclose()
    prefix = f"kube_service_{cluster}_"
    left = [lb.id for lb in admin.load_balancer.load_balancers() if lb.name.startswith(prefix)]
    left += [
        f.id for f in admin.network.ips() if f"from cluster {cluster}" in (f.description or "")
    ]
    figures["leftovers"] = len(left)

    k, noticed = occm_polls(figures["single_create_s"])
    per_create = 7 + k
    figures["occm_model_calls"] = {
        "create": per_create * lbs_total,
        "nodeset": (2 + 1 * (3 + 2)) * lbs_total,
        "restart": (4 + 2 * 1) * lbs_total,
    }
    figures["occm_model_create_s"] = round(noticed * args.services, 1)
    return figures


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=50)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--added", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1 Service, 3 Nodes, 1 added")
    args = parser.parse_args(argv)
    if args.quick:
        # one Service at once beside the single one: every phase and figure, one load
        # balancer fewer for the world's one serial Octavia worker (`make test`)
        args.services, args.nodes, args.added = 1, 3, 1
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    warnings.simplefilter("ignore")  # openstacksdk's deprecation chatter
    # The project's test world: started here, or the running one `make test` names.
    with openstack_world() as world:
        return trio.run(main, args, world)


if __name__ == "__main__":
    print(json.dumps(run(parse())))
