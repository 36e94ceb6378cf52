"""AWS node waves: N EC2 instances in moto, N Nodes registered at once, initialised by trio-ccm.

    python bench/aws.py [--nodes N ...] [--quick]

For each N (default 1,000 and 5,000; `--quick`: 100): moto (in-process, loopback, the test
world's fidelity patches) holds a cluster-tagged VPC with a subnet per zone and N
instances; the emulator (in-process transport) gets N Nodes as kubelets with
`--cloud-provider=external` register them on EC2 (named by private DNS name, no provider
ID, the uninitialized taint). A trio-ccm replica with the `aws` provider (cloud-node
controller only, `--cloud-batch-size=1000` as docs/aws.md recommends,
`--kube-api-qps=200 --kube-api-burst=400` as bench/node_wave.py's real phase) runs until
the last Node has lost its taint (`init_s`), known from the emulator's answers to the
replica's own writes. Then a second, fresh replica runs its first periodic address sync
over the N initialised Nodes, and its EC2 calls are counted until none has come for 2 s
(`sync_calls_per_period`; a steady-state period costs the same).

Figures per N: `init_s`; `first_node_s` (when the first Node was done: the cloud's part,
before the kube writes paced at 200/s take over); `ec2_calls` (by action, during the wave)
and `describe_instances_calls`; `sync_calls_per_period`; `max_task_step_s` and its task
(the most CPU one step of a Trio task used during the wave, from a Trio instrument reading
the thread's CPU clock: how long our own code held the Trio thread; large XML answers are
parsed in a worker thread, so no step parses one) and `max_loop_lag_s` (how late a 10 ms
ticker woke at worst: this also counts the GIL held by other threads, above all moto's,
rendering megabytes of XML in this very process); `max_gc_pause_s`, the longest garbage
collection meanwhile (moto's objects are frozen out of the collector's reach; the
emulator's Nodes, in this process too, are not);
`seed_s` (moto set-up, not part of the wave). Once: `parse_1000_s`, botocore's parse of one
1,000-instance DescribeInstances page (the CPU moved off the Trio thread).

`upstream_model_calls`: what cloud-provider-aws's algorithm implies for the same cluster
(pkg/providers/v1, read at 63ec440c): a Node without a provider ID costs one
DescribeInstances by `private-dns-name` (getInstanceByNodeName; never batched) and one by
ID (InstanceMetadata → getInstanceByID, through the 500-ID batcher, which only coalesces
the lookups in flight: one at a time with upstream's default `--concurrent-node-syncs=1`,
ten with kops' 10); the periodic sync costs one by-ID lookup per Node, coalesced the same
way (`--concurrent-node-status-updates` defaults to the node-syncs value).

Prints a table, then one JSON object as the last line. Benchmarks never assert on time.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
import prometheus_client
import trio

from _common import machine_line, print_figures, quiet_logging
from trio_ccm.cloud.aws import AwsProvider, parse_cloud_config
from trio_ccm.cloud.aws.codec import Codec
from trio_ccm.cloud.aws.credentials import AwsCredentials
from trio_ccm.flags import parse_flags
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.kube.wellknown import CONTROLLER_ALIASES
from trio_ccm.supervisor import Serving, serve
from trio_ccm.testing.apiserver import ApiServer
from trio_ccm.testing.aws import MotoServer, World

UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
FLAGS = (
    "--cloud-provider=aws",
    "--leader-elect=false",
    "--secure-port=0",
    "--controllers=cloud-node-controller",
    "--cloud-batch-size=1000",
    "--kube-api-qps=200",
    "--kube-api-burst=400",
    "--node-status-update-frequency=1h",
)


class Watching(httpx.AsyncBaseTransport):
    """The replica's way to the emulator, noting each Node its writes leave initialised."""

    def __init__(self, api: ApiServer, expected: int) -> None:
        self.inner = api.transport()
        self.expected = expected
        self.initialised: set[str] = set()
        self.first = trio.Event()
        self.done = trio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response: httpx.Response = await self.inner.handle_async_request(request)
        path = request.url.path
        if request.method in ("PATCH", "PUT") and path.startswith("/api/v1/nodes/"):
            await response.aread()
            body = json.loads(response.content or b"{}")
            taints = (body.get("spec") or {}).get("taints") or []
            if body.get("spec", {}).get("providerID") and not any(
                t.get("key") == UNINITIALIZED for t in taints
            ):
                self.initialised.add(body["metadata"]["name"])
                self.first.set()
                if len(self.initialised) >= self.expected:
                    self.done.set()
        return response


@dataclass
class Wave:
    nodes: int
    seed_s: float = 0.0
    init_s: float = 0.0
    first_node_s: float = 0.0
    ec2_calls: dict[str, int] = field(default_factory=dict)
    describe_instances_calls: int = 0
    sync_calls_per_period: int = 0
    sync_calls: dict[str, int] = field(default_factory=dict)
    max_loop_lag_s: float = 0.0
    max_task_step_s: float = 0.0
    max_task_step_task: str = ""
    max_gc_pause_s: float = 0.0
    upstream_model_calls: dict[str, int] = field(default_factory=dict)


def upstream_model(nodes: int) -> dict[str, int]:
    return {
        "init_describe_instances_1_worker": 2 * nodes,
        "init_describe_instances_10_workers": nodes + math.ceil(nodes / 10),
        "sync_describe_instances_1_worker": nodes,
        "sync_describe_instances_10_workers": math.ceil(nodes / 10),
    }


class Steps(trio.abc.Instrument):
    """The step of a Trio task that used the most CPU of the Trio thread (thread time: not
    the time spent waiting for the GIL other threads hold), once on."""

    def __init__(self) -> None:
        self.on = False
        self.started = 0.0
        self.longest = 0.0
        self.task = ""

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.started = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        took = time.thread_time() - self.started
        if self.on and took > self.longest:
            self.longest, self.task = took, task.name


class GcPauses:
    """The longest garbage collection while on (gc.callbacks)."""

    def __init__(self) -> None:
        self.started = 0.0
        self.longest = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        else:
            self.longest = max(self.longest, time.perf_counter() - self.started)


async def ticker(lag: list[float]) -> None:
    """Record how late a 10 ms sleep wakes: the longest the Trio thread was held."""
    while True:
        before = trio.current_time()
        await trio.sleep(0.01)
        lag[0] = max(lag[0], trio.current_time() - before - 0.01)


async def replica(
    provider: AwsProvider,
    transport: httpx.AsyncBaseTransport,
    *,
    task_status: trio.TaskStatus[Serving] = trio.TASK_STATUS_IGNORED,
) -> None:
    settings = parse_flags(list(FLAGS), controller_aliases=CONTROLLER_ALIASES)
    try:
        await serve(
            settings,
            provider,
            connection=ConnectionConfig(
                server="http://emulator", credentials=StaticCredentials(), source="bench"
            ),
            transport=transport,
            registry=prometheus_client.CollectorRegistry(),
            identity="bench",
            task_status=task_status,
        )
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await provider.aclose()


async def wait_swept(provider: AwsProvider, nodes: int) -> None:
    """Until the provider has answered for every Node (the address sync's sweep is done;
    its progress is the provider's own statistics, so it is polled)."""
    while True:
        stats = provider.context.lookup.statistics()
        if stats.direct_ids + stats.snapshot_hits >= nodes:
            return
        await trio.sleep(0.05)


def provider_for(world: World) -> AwsProvider:
    return AwsProvider(parse_cloud_config(world.cloud_config()), environ=world.environ())


async def run_wave(moto: MotoServer, nodes: int) -> Wave:
    wave = Wave(nodes, upstream_model_calls=upstream_model(nodes))
    await moto.areset()
    started = time.perf_counter()
    world = await World.create(moto, cluster_id="bench")
    instances = await world.add_instances(nodes)
    api = ApiServer(seed=1)
    for instance in instances:
        api.create(World.node_manifest(instance))
    wave.seed_s = time.perf_counter() - started
    # moto's objects (5,000 instances, their ENIs, volumes, tags) would make every full
    # garbage collection of this process long, and the pause lands in whatever Trio task is
    # running: keep them out of the collector's reach, as a CCM process has no moto in it.
    gc.collect()
    gc.freeze()
    moto.faults.reset_counts()
    lag = [0.0]
    steps = Steps()
    trio.lowlevel.add_instrument(steps)
    pauses = GcPauses()
    watching = Watching(api, nodes)
    async with trio.open_nursery() as nursery:
        started = time.perf_counter()
        serving: Serving = await nursery.start(replica, provider_for(world), watching)
        # The lag is the wave's: from when the controllers run (the initial LIST of the
        # Nodes, served by the in-process emulator on this thread, comes before).
        await serving.wait_leading()
        nursery.start_soon(ticker, lag)
        steps.on = True
        gc.callbacks.append(pauses)
        await watching.first.wait()
        wave.first_node_s = time.perf_counter() - started
        await watching.done.wait()
        wave.init_s = time.perf_counter() - started
        wave.max_loop_lag_s = lag[0]
        steps.on = False
        gc.callbacks.remove(pauses)
        wave.max_gc_pause_s = pauses.longest
        trio.lowlevel.remove_instrument(steps)
        wave.max_task_step_s = steps.longest
        wave.max_task_step_task = steps.task
        nursery.cancel_scope.cancel()
    wave.ec2_calls = moto.faults.counts()
    wave.describe_instances_calls = moto.faults.calls("DescribeInstances")
    moto.faults.reset_counts()
    second = provider_for(world)
    async with trio.open_nursery() as nursery:
        await nursery.start(replica, second, api.transport())
        await wait_swept(second, nodes)
        nursery.cancel_scope.cancel()
    gc.unfreeze()
    wave.sync_calls = moto.faults.counts()
    wave.sync_calls_per_period = moto.faults.calls("DescribeInstances")
    return wave


async def parse_page(moto: MotoServer) -> float:
    """Seconds botocore takes to parse one 1,000-instance DescribeInstances page."""
    await moto.areset()
    world = await World.create(moto, cluster_id="parse")
    await world.add_instances(1000)
    codec = await trio.to_thread.run_sync(Codec, "ec2")
    request = codec.request(
        "DescribeInstances",
        {"MaxResults": 1000},
        endpoint_url=moto.url,
        region=world.region,
        credentials=AwsCredentials("AKIABENCH", "secret"),
    )
    async with httpx.AsyncClient(timeout=120) as http:
        response = await http.request(
            request.method, request.url, headers=dict(request.headers), content=request.body
        )
    started = time.perf_counter()
    codec.parse("DescribeInstances", response.status_code, dict(response.headers), response.content)
    return time.perf_counter() - started


async def main_async(sizes: Sequence[int], measure_parse: bool) -> dict[str, Any]:
    async with trio.open_nursery():
        moto = MotoServer()
        await trio.to_thread.run_sync(moto.start)
        try:
            waves = [await run_wave(moto, n) for n in sizes]
            parse_s = await parse_page(moto) if measure_parse else None
        finally:
            await trio.to_thread.run_sync(moto.stop)
    figures: dict[str, Any] = {"waves": [w.__dict__ for w in waves]}
    if parse_s is not None:
        figures["parse_1000_s"] = round(parse_s, 3)
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, action="append", help="wave sizes (repeatable)")
    parser.add_argument("--quick", action="store_true", help="one wave of 100 (smoke check)")
    args = parser.parse_args(argv)
    sizes = args.nodes or ([100] if args.quick else [1000, 5000])
    quiet_logging("error")
    print(
        f"aws node waves: {', '.join(f'{n:,}' for n in sizes)} Nodes named by private DNS "
        f"name, instances in moto on loopback; flags {' '.join(FLAGS[3:])}"
    )
    print(machine_line() + "\n")
    figures = trio.run(partial(main_async, sizes, not args.quick))
    header = f"{'nodes':>7} {'init_s':>8} {'first_s':>8} {'DescribeInstances':>18} "
    header += f"{'sync/period':>12} {'max step s':>11} {'max gc s':>9} {'max lag s':>10}"
    header += f" {'seed_s':>7}   upstream model (1 worker / 10 workers)"
    print(header)
    for w in figures["waves"]:
        model = w["upstream_model_calls"]
        print(
            f"{w['nodes']:>7,} {w['init_s']:>8.1f} {w['first_node_s']:>8.1f} "
            f"{w['describe_instances_calls']:>18} "
            f"{w['sync_calls_per_period']:>12} {w['max_task_step_s']:>11.3f} "
            f"{w['max_gc_pause_s']:>9.3f} {w['max_loop_lag_s']:>10.3f} {w['seed_s']:>7.1f}"
            f"   init {model['init_describe_instances_1_worker']:,} / "
            f"{model['init_describe_instances_10_workers']:,}, sync "
            f"{model['sync_describe_instances_1_worker']:,} / "
            f"{model['sync_describe_instances_10_workers']:,}"
        )
    for w in figures["waves"]:
        print(f"\n{w['nodes']:,} Nodes: EC2 calls in the wave {w['ec2_calls']}")
        print(f"{w['nodes']:,} Nodes: EC2 calls in one sync {w['sync_calls']}")
    if "parse_1000_s" in figures:
        print(
            f"\nbotocore parse of one 1,000-instance DescribeInstances page: "
            f"{figures['parse_1000_s']:.3f} s"
        )
    last = figures["waves"][-1]
    flat = {
        "nodes": last["nodes"],
        "init_s": round(last["init_s"], 2),
        "first_node_s": round(last["first_node_s"], 2),
        "ec2_calls": last["ec2_calls"],
        "describe_instances_calls": last["describe_instances_calls"],
        "sync_calls_per_period": last["sync_calls_per_period"],
        "upstream_model_calls": last["upstream_model_calls"],
        "max_task_step_s": round(last["max_task_step_s"], 3),
        "max_task_step_task": last["max_task_step_task"],
        "max_loop_lag_s": round(last["max_loop_lag_s"], 3),
        "max_gc_pause_s": round(last["max_gc_pause_s"], 3),
        "waves": figures["waves"],
    }
    # null in a --quick run, which does not measure it: every documented key is printed.
    flat["parse_1000_s"] = figures.get("parse_1000_s")
    print_figures(flat)


if __name__ == "__main__":
    main()
