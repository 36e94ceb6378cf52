"""Node wave: N Nodes registered at once, initialised by trio-ccm against the simulated cloud.

    python bench/node_wave.py [--nodes N] [--quick] [--only PHASE] [--profile FILE]

N instances are launched in the simulated cloud and N Nodes registered in the emulator at
once, as kubelets with `--cloud-provider=external` register them (the uninitialized taint,
`Ready=True`, one `Hostname` address, no provider ID, no topology labels). The cloud answers
every call after 50 ms and limits the instances family to 20 calls/s with a burst of 100
(429 with Retry-After beyond it). Then a trio-ccm replica (`serve()`, no leader election, no
HTTP server) is started with the `sim` provider, and the clock runs from that moment until
the last Node has lost its taint.

Both the emulator and the cloud are reached through their in-process front doors (httpx
transports, no sockets): what is measured is the CCM, not the emulator's HTTP stack. A
wrapping transport counts every request the replica sends to the emulator, by client and
by kind: writes to each Node (`PATCH`/`PUT` of `/api/v1/nodes/NAME` and `.../status`) and
Event writes (`POST`/`PATCH` of `/api/v1/namespaces/*/events`). It also decodes the answer
to each write of a Node: the first answer without the taint is when that Node was
initialised, so the end of the wave is known without polling the emulator. Writes and cloud
calls are counted once the asynchronous `Synced` Events have been written (quiet for 2 s),
so a retry that comes after the last taint went is counted too.

Phases:

- `real`: `--kube-api-qps=200 --kube-api-burst=400`, real time (`init_s`, `cloud_calls`,
  `writes_per_node`).
- `virtual`: under `trio.testing.MockClock(autojump_threshold=0)`, where rate limits and
  latencies take their time and CPU takes none: the default `--kube-api-qps=20
  --kube-api-burst=30` (`init_default_qps_s`; about N*2/20 s of waiting, too long to sit
  through), and 200/400 again as a cross-check of the real run, followed by one periodic
  address sync (`--node-status-update-frequency`, 5 min) after the wave, whose cloud calls
  are counted (`sync_calls_per_period`).
- `model`: what the Go cloud-node-controller's algorithm (upstream-ccm.md §2.1) implies under
  the same limits, as a small discrete-event simulation under MockClock: one worker
  (`--concurrent-node-syncs=1`) takes Nodes from the queue one at a time; per Node one
  `InstanceMetadata` (50 ms, the same cloud bucket; a 429 puts the Node back into the queue
  with the workqueue's rate-limited delay), then a full `PUT` of the Node (the taint goes),
  a status `PATCH` and the `Synced` Event, all three through the controller's one client
  bucket (the Event asynchronously, by the broadcaster); the periodic status loop runs at
  the start and 5 min after each pass ends, one `InstanceMetadata` per initialised Node.
  At 20/30 and 200/400, with 1 worker and with 10 (kops' setting). Write latency is taken
  as zero, so the model's times are lower bounds.

Prints a table, then one JSON object as the last line. Benchmarks print numbers; they never
assert on time.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import math
import pstats
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

import httpx
import msgspec
import prometheus_client
import trio
import trio.testing

from _common import (
    CountingTransport,
    emulator_connection,
    machine_line,
    metric_sum,
    peak_rss_mb,
    print_figures,
    quiet_logging,
)
from apiserver import make_node
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.kube.events import utc_now
from trio_ccm.settings import Settings
from trio_ccm.supervisor import serve
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.cloud import SimCloud

TAINT: Final = "node.cloudprovider.kubernetes.io/uninitialized"
EPOCH: Final = dt.datetime(2026, 11, 21, 10, 0, 0, tzinfo=dt.UTC)
CLOUD_LATENCY_S: Final = 0.05
CLOUD_RATE_PER_S: Final = 20.0
CLOUD_BURST: Final = 100
FAST: Final = (200.0, 400)  # --kube-api-qps, --kube-api-burst of the goal
DEFAULT: Final = (20.0, 30)  # the Go CCM's and our defaults
PERIOD_S: Final = 300.0  # --node-status-update-frequency (default)
GOAL_S: Final = 60.0
GOAL_CALLS: Final = 100
GOAL_NODES: Final = 5000
# Kubelet registrations carry none of what the CCM sets.
_CLOUD_LABELS: Final = (
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "bench.trio-ccm.io/write",
)


# -- the world ------------------------------------------------------------------------------
def kubelet_node(i: int) -> dict[str, Any]:
    """The Node of bench/apiserver.py as its kubelet registers it (before any CCM)."""
    node = make_node(i)
    labels = node["metadata"]["labels"]
    for key in _CLOUD_LABELS:
        labels.pop(key, None)
    spec = node["spec"]
    spec.pop("providerID", None)
    spec["taints"] = [{"key": TAINT, "value": "true", "effect": "NoSchedule"}]
    node["status"]["addresses"] = [{"type": "Hostname", "address": node["metadata"]["name"]}]
    return node


def register(api: ApiServer, cloud: SimCloud, nodes: int) -> None:
    """N running instances and their N freshly registered Nodes."""
    for i in range(nodes):
        node = kubelet_node(i)
        name = node["metadata"]["name"]
        a, b = divmod(i, 250)
        # Explicit IPs: the sim cloud's own allocation scans every instance per launch.
        cloud.add_instance(
            name,
            instance_type="sim.large",
            zone=f"{cloud.region}{'abc'[i % 3]}",
            internal_ips=[f"10.{a // 250}.{a % 250}.{b + 1}"],
        )
        api.create(node)


class _Taint(msgspec.Struct):
    key: str = ""


class _Spec(msgspec.Struct):
    taints: list[_Taint] = []


class _NodeView(msgspec.Struct):
    spec: _Spec = msgspec.field(default_factory=_Spec)


class WaveTransport(CountingTransport):
    """The replica's way to the emulator: counts its requests and sees Nodes initialised."""

    def __init__(self, inner: httpx.AsyncBaseTransport, nodes: int) -> None:
        super().__init__(inner)
        self.expected = nodes
        self.untainted: dict[str, float] = {}  # Node name -> when its taint was gone
        self.last_event_at = 0.0
        self.all_untainted = trio.Event()
        self._decode = msgspec.json.Decoder(_NodeView).decode

    def reads_answers(self, kind: str) -> bool:
        return kind == "node"

    def answered(self, kind: str, match: re.Match[str], body: bytes) -> None:
        name = match.group(1)
        if name not in self.untainted and not any(
            t.key == TAINT for t in self._decode(body).spec.taints
        ):
            self.untainted[name] = trio.current_time()
            if len(self.untainted) >= self.expected:
                self.all_untainted.set()

    def writes_by_part(self) -> tuple[int, int]:
        """Writes of the Nodes themselves and of their status."""
        status = sum(n for (_, is_status), n in self.node_writes.items() if is_status)
        return self.writes_of_nodes() - status, status


# -- one wave of trio-ccm -------------------------------------------------------------------
@dataclass
class Wave:
    """What one run of trio-ccm did."""

    label: str
    clock: str  # "wall" or "virtual"
    nodes: int
    qps: float
    burst: int
    init_s: float = math.nan
    first_s: float = math.nan  # first Node initialised
    median_s: float = math.nan  # half of the Nodes initialised
    events_s: float = math.nan  # last Synced Event written
    cloud_calls: int = 0
    cloud_by_method: dict[str, int] = field(default_factory=dict)
    cloud_throttled: int = 0
    node_writes: int = 0
    main_writes: int = 0
    status_writes: int = 0
    event_writes: int = 0
    failed_writes: dict[int, int] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    cpu_s: float = math.nan
    budget_wait_s: float = math.nan  # cloud calls' total wait for the CCM's own budget
    limiter_wait_s: float = math.nan  # kube requests' total wait for their client buckets
    sync_calls: int | None = None
    sync_s: float | None = None
    sync_node_writes: int | None = None
    peak_rss_mb: float = math.nan  # of the process so far, at the end of the wave

    @property
    def writes_per_node(self) -> float:
        return self.node_writes / self.nodes

    @property
    def events_per_node(self) -> float:
        return self.event_writes / self.nodes


async def run_wave(
    nodes: int,
    qps: float,
    burst: int,
    *,
    label: str,
    virtual: bool,
    measure_sync: bool,
    profiler: cProfile.Profile | None = None,
) -> Wave:
    """One replica against a fresh world, from serve() until every Node is initialised
    (`profiler`, if any, runs during the wave only)."""
    now: Callable[[], dt.datetime] = (
        (lambda: EPOCH + dt.timedelta(seconds=trio.current_time())) if virtual else utc_now
    )
    api = ApiServer(seed=1, now=now)
    cloud = SimCloud(seed=1)
    register(api, cloud, nodes)
    cloud.faults.latency("*", fixed_s=CLOUD_LATENCY_S)
    cloud.faults.throttle("instances", rate_per_s=CLOUD_RATE_PER_S, burst=CLOUD_BURST)
    transport = WaveTransport(api.transport(), nodes)
    provider = SimProvider(url="http://sim", replica="ccm", transport=cloud.transport())
    registry = prometheus_client.CollectorRegistry()
    settings = Settings(
        cloud_provider="sim",
        secure_port=0,
        leader_elect=False,
        kube_api_qps=qps,
        kube_api_burst=burst,
        node_status_update_frequency_s=PERIOD_S,
        # The wave measures the cloud-node-controller (the Go model models only it); routes
        # would need --cluster-cidr and add their own cloud calls to the count.
        configure_cloud_routes=False,
    )
    wave = Wave(label, "virtual" if virtual else "wall", nodes, qps, burst)
    # Generous: a wave that never ends fails the run instead of hanging it.
    limit_s = 20 * (2 * nodes / qps + nodes * CLOUD_LATENCY_S) + 120
    async with trio.open_nursery() as nursery:
        if profiler is not None:
            profiler.enable()
        cpu0 = time.process_time()
        wall0 = time.perf_counter()
        t0 = trio.current_time()
        await nursery.start(
            partial(
                serve,
                settings,
                provider,
                connection=emulator_connection(),
                transport=transport,
                registry=registry,
                identity="ccm",
                now=now,
            )
        )
        with trio.fail_after(limit_s):
            await transport.all_untainted.wait()
        wall1 = time.perf_counter()
        cpu1 = time.process_time()
        end = trio.current_time()
        if profiler is not None:
            profiler.disable()
        wave.init_s = (wall1 - wall0) if not virtual else end - t0
        done = sorted(transport.untainted.values())
        wave.first_s = done[0] - t0
        wave.median_s = done[len(done) // 2] - t0
        wave.cpu_s = cpu1 - cpu0
        # The Synced Events are written asynchronously: let them drain (quiet for 2 s).
        with trio.move_on_after(max(60.0, 4 * nodes / qps)):
            while True:
                quiet_s = trio.current_time() - max(transport.last_event_at, end)
                if transport.event_writes >= nodes and quiet_s >= 2.0:
                    break
                await trio.sleep(0.25)
        wave.event_writes = transport.event_writes
        # Writes and calls after the drain: a retry may come after the last taint went.
        wave.cloud_calls = len(cloud.calls)
        wave.cloud_by_method = dict(Counter(c.method for c in cloud.calls))
        wave.cloud_throttled = sum(1 for c in cloud.calls if c.status == 429)
        wave.budget_wait_s = metric_sum(registry, "cloudprovider_api_budget_wait_seconds_sum")
        wave.limiter_wait_s = metric_sum(registry, "rest_client_rate_limiter_duration_seconds_sum")
        wave.main_writes, wave.status_writes = transport.writes_by_part()
        wave.node_writes = transport.writes_of_nodes()
        wave.events_s = transport.last_event_at - t0
        wave.failed_writes = dict(transport.failed_writes)
        wave.requests = transport.request_counts()
        wave.peak_rss_mb = peak_rss_mb()
        if measure_sync:
            await measure_one_sync(wave, cloud, transport)
        nursery.cancel_scope.cancel()
    await provider.aclose()
    return wave


async def measure_one_sync(wave: Wave, cloud: SimCloud, transport: WaveTransport) -> None:
    """Wait for the next periodic address sync after the wave and count what it did.

    Its calls are the next cluster of cloud calls: from the first one until the cloud has
    been quiet for 10 s (the lifecycle controller calls nothing while all Nodes are Ready).
    """
    mark = len(cloud.calls)
    writes = transport.writes_of_nodes()
    with trio.fail_after(2 * PERIOD_S):
        while True:
            if len(cloud.calls) > mark:
                break
            await trio.sleep(1.0)
        seen, quiet_since = len(cloud.calls), trio.current_time()
        while trio.current_time() - quiet_since < 10.0:
            await trio.sleep(1.0)
            if len(cloud.calls) != seen:
                seen, quiet_since = len(cloud.calls), trio.current_time()
    calls = cloud.calls[mark:]
    wave.sync_calls = len(calls)
    wave.sync_s = calls[-1].time - calls[0].time + CLOUD_LATENCY_S
    wave.sync_node_writes = transport.writes_of_nodes() - writes


# -- the Go cloud-node-controller, modelled ---------------------------------------------------
class GoRateLimiter:
    """golang.org/x/time/rate's Limiter.Wait: reserve a token now, sleep until it is due."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = burst
        self.tokens = float(burst)
        self.updated = 0.0

    def reserve(self) -> float:
        """The delay of a reservation taken now."""
        now = trio.current_time()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.qps)
        self.updated = now
        self.tokens -= 1.0
        return max(0.0, -self.tokens / self.qps)

    async def wait(self) -> None:
        await trio.sleep(self.reserve())


class CloudBucket:
    """The simulated cloud's throttle: a call finding less than one token is refused."""

    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate = rate_per_s
        self.burst = burst
        self.tokens = float(burst)
        self.updated = 0.0

    def admit(self) -> bool:
        now = trio.current_time()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens < 1.0 - 1e-9:
            return False
        self.tokens -= 1.0
        return True


@dataclass
class GoResult:
    nodes: int
    qps: float
    burst: int
    workers: int
    init_s: float = math.nan
    calls: int = 0  # cloud calls until the last Node was initialised
    init_calls: int = 0
    status_calls: int = 0
    throttled: int = 0  # of those calls
    kube_writes: int = 0  # PUT + status PATCH + Event, until the last Node was initialised
    sync_calls_per_period: int = 0
    sync_throttled: int = 0
    sync_s: float = math.nan  # one status pass over all N Nodes (after the wave)


async def go_model(
    nodes: int, qps: float, burst: int, *, workers: int = 1, write_latency_s: float = 0.0
) -> GoResult:
    """The Go cloud-node-controller's wave under the same limits (see the module docstring)."""
    result = GoResult(nodes, qps, burst, workers)
    throttled = 0
    kube = GoRateLimiter(qps, burst)  # the controller's clientset (node-controller)
    cloud = CloudBucket(CLOUD_RATE_PER_S, CLOUD_BURST)
    queue_bucket = GoRateLimiter(10.0, 100)  # the workqueue's overall bucket (10 qps/100)
    failures: Counter[int] = Counter()  # per item, for the 5 ms * 2^n backoff
    initialised: dict[int, float] = {}
    done = trio.Event()
    send, receive = trio.open_memory_channel[int](math.inf)  # the workqueue (FIFO)
    events_send, events_receive = trio.open_memory_channel[int](math.inf)  # the broadcaster

    async def instance_metadata() -> bool:
        nonlocal throttled
        await trio.sleep(CLOUD_LATENCY_S)
        admitted = cloud.admit()
        if not admitted:
            throttled += 1
        return admitted

    writes = 0

    async def write() -> None:
        nonlocal writes
        await kube.wait()
        writes += 1
        await trio.sleep(write_latency_s)

    async def requeue(item: int) -> None:
        delay = max(min(0.005 * 2 ** failures[item], 1000.0), queue_bucket.reserve())
        failures[item] += 1
        await trio.sleep(delay)
        send.send_nowait(item)

    async def worker(nursery: trio.Nursery) -> None:
        async for item in receive:
            result.init_calls += 1
            if not await instance_metadata():
                nursery.start_soon(requeue, item)  # AddRateLimited; the taint stays
                continue
            failures.pop(item, None)
            await write()  # PUT the Node: the taint is gone
            initialised[item] = trio.current_time()
            if len(initialised) == nodes:
                result.init_s = trio.current_time()
                result.calls = result.init_calls + result.status_calls
                result.throttled = throttled
                result.kube_writes = writes
                done.set()
            await write()  # PATCH the status (addresses)
            events_send.send_nowait(item)  # the Synced Event, written by the broadcaster

    async def broadcaster() -> None:
        async for _item in events_receive:
            await write()

    async def status_pass(items: list[int]) -> float:
        started = trio.current_time()
        limiter = trio.CapacityLimiter(workers)  # --concurrent-node-status-updates

        async def one() -> None:
            async with limiter:
                result.status_calls += 1
                await instance_metadata()  # errors are logged; addresses unchanged: no PATCH

        async with trio.open_nursery() as pass_nursery:
            for _ in items:
                pass_nursery.start_soon(one)
        return trio.current_time() - started

    async def status_loop() -> None:
        while True:
            await status_pass(list(initialised))
            await trio.sleep(PERIOD_S)

    async with trio.open_nursery() as nursery:
        for item in range(nodes):
            send.send_nowait(item)
        for _ in range(workers):
            nursery.start_soon(worker, nursery)
        nursery.start_soon(broadcaster)
        nursery.start_soon(status_loop)
        await done.wait()
        nursery.cancel_scope.cancel()
    # One pass of the status loop over all N Nodes, on a rested cloud bucket.
    cloud.tokens, cloud.updated = float(CLOUD_BURST), trio.current_time()
    calls_before, throttled_before = result.status_calls, throttled
    result.sync_s = await status_pass(list(range(nodes)))
    result.sync_calls_per_period = result.status_calls - calls_before
    result.sync_throttled = throttled - throttled_before
    return result


def go_formula_s(nodes: int, qps: float, burst: int, workers: int = 1) -> float:
    """Closed form of the model with one worker and no throttling: whichever of the client
    bucket (3 writes per Node, the last Node's PUT being its (3N-2)th token) and the worker
    (50 ms per Node) is slower. With more workers (NaN) the cloud throttles: simulate."""
    if workers != 1:
        return math.nan
    tokens_s = max(0.0, (3 * nodes - 2 - burst) / qps)
    return max(tokens_s, nodes * CLOUD_LATENCY_S)


# -- profile -----------------------------------------------------------------------------------
_PARTS: Final = (
    ("trio_ccm_testbed/apiserver/", "emulator (trio_ccm_testbed/apiserver)"),
    ("trio_ccm_testbed/cloud/", "sim cloud (trio_ccm_testbed/cloud)"),
    ("trio_ccm/kube/", "CCM kube client, informer, events (kube/)"),
    ("trio_ccm/cloud/", "CCM cloud provider, budget, batcher (cloud/)"),
    ("trio_ccm/actors/", "CCM controllers and actors (actors/, mailbox)"),
    ("trio_ccm/mailbox", "CCM controllers and actors (actors/, mailbox)"),
    ("trio_ccm/", "CCM other (supervisor, metrics)"),
    ("/httpx/", "httpx (both sides of the in-process transports)"),
    ("/httpcore/", "httpx (both sides of the in-process transports)"),
    ("/trio/", "trio (scheduler, sleeps, limiters)"),
    ("/structlog/", "structlog"),
    ("/prometheus_client/", "prometheus_client"),
    ("node_wave.py", "this benchmark (counting transport)"),
)


def _part(filename: str) -> str:
    for marker, part in _PARTS:
        if marker in filename:
            return part
    return "stdlib and other"


def print_profile(stats: pstats.Stats) -> None:
    """Own time by part of the program; time in C functions goes to their callers' parts."""
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]  # pstats' raw table
    parts: dict[str, float] = {}

    def add(part: str, seconds: float) -> None:
        parts[part] = parts.get(part, 0.0) + seconds

    for (filename, _line, name), (_cc, _nc, tottime, _ct, callers) in table.items():
        if "epoll" in name:
            add("idle: the scheduler waiting for a timer (epoll)", tottime)
            continue
        if filename != "~":
            add(_part(filename), tottime)
            continue
        edges = {caller: edge[2] for caller, edge in callers.items()}  # caller -> own time
        total = sum(edges.values())
        for (caller_file, _l, _n), share in edges.items():
            part = "C functions" if caller_file == "~" else _part(caller_file)
            add(part, tottime * share / total if total else 0.0)
        if not edges:
            add("C functions", tottime)
    everything = sum(parts.values())
    print(f"time of the wave by part (profiled; {everything:.1f} s in all):")
    for part, seconds in sorted(parts.items(), key=lambda item: -item[1]):
        print(f"  {seconds:7.2f} s  {seconds / everything:6.1%}  {part}")


# -- output -----------------------------------------------------------------------------------
def _fmt(value: float | int | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def print_table(waves: list[Wave], models: list[GoResult]) -> None:
    columns: list[tuple[str, list[str]]] = []
    for w in waves:
        columns.append(
            (
                f"trio-ccm {w.qps:g}/{w.burst}",
                [
                    w.clock,
                    _fmt(w.init_s),
                    _fmt(w.first_s, 2),
                    _fmt(w.median_s),
                    _fmt(w.events_s),
                    _fmt(w.cloud_calls),
                    _fmt(w.cloud_throttled),
                    _fmt(w.writes_per_node, 2),
                    _fmt(w.events_per_node, 2),
                    _fmt(w.sync_calls),
                    _fmt(w.cpu_s),
                ],
            )
        )
    for m in models:
        columns.append(
            (
                f"Go model {m.qps:g}/{m.burst}",
                [
                    "virtual",
                    _fmt(m.init_s),
                    "-",
                    "-",
                    "-",
                    _fmt(m.calls),
                    _fmt(m.throttled),
                    "2.00",
                    "1.00",
                    _fmt(m.sync_calls_per_period),
                    "-",
                ],
            )
        )
    rows = [
        "clock",
        "all Nodes initialised (s)",
        "first Node initialised (s)",
        "half initialised (s)",
        "last Synced Event (s)",
        "cloud calls in the wave",
        "  of which throttled (429)",
        "Node writes per Node",
        "Event writes per Node",
        "cloud calls per sync period",
        "CPU (s)",
    ]
    width = max(len(r) for r in rows) + 2
    col = max(18, *(len(name) + 2 for name, _ in columns))
    print("".ljust(width) + "".join(name.rjust(col) for name, _ in columns))
    for i, row in enumerate(rows):
        print(row.ljust(width) + "".join(values[i].rjust(col) for _, values in columns))


def print_details(w: Wave) -> None:
    print(f"\n{w.label} ({w.clock} clock):")
    print(f"  cloud calls by method: {w.cloud_by_method}")
    print(
        f"  Node writes: {w.main_writes:,} of the Node, {w.status_writes:,} of its status; "
        f"failed writes by status: {w.failed_writes or 'none'}"
    )
    print(
        f"  waited for the CCM's cloud budget: {w.budget_wait_s:,.1f} s in total; "
        f"kube requests waited for their client buckets: {w.limiter_wait_s:,.1f} s in total"
    )
    if w.sync_calls is not None:
        print(
            f"  next periodic sync: {w.sync_calls} cloud calls over {w.sync_s:.2f} s, "
            f"{w.sync_node_writes} Node writes"
        )
    print("  requests to the emulator by client:")
    for key, count in w.requests.items():
        print(f"    {count:>7,}  {key}")


# -- main ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, help="Nodes in the wave (default 1000; quick 100)")
    parser.add_argument("--quick", action="store_true", help="a smaller run (smoke check)")
    parser.add_argument(
        "--only", choices=("real", "virtual", "model"), action="append", help="run these phases"
    )
    parser.add_argument("--profile", metavar="FILE", help="cProfile the real-time run to FILE")
    parser.add_argument("--log-level", default="error", help="trio-ccm's logs, to stderr")
    args = parser.parse_args(argv)
    nodes = args.nodes or (100 if args.quick else 1000)
    phases = set(args.only or ("real", "virtual", "model"))
    quiet_logging(args.log_level)
    started = time.perf_counter()

    print(
        f"node wave: {nodes:,} Nodes registered at once; sim cloud {CLOUD_LATENCY_S * 1000:g} ms "
        f"per call, instances throttled at {CLOUD_RATE_PER_S:g}/s burst {CLOUD_BURST}; "
        f"trio-ccm defaults otherwise (concurrent-node-syncs 10, batch 200 / 20 ms, "
        f"cloud budget instances 10/s burst 30)"
    )
    print(machine_line() + "\n")
    waves: list[Wave] = []
    if "real" in phases:
        profiler = cProfile.Profile() if args.profile else None
        waves.append(
            trio.run(
                partial(
                    run_wave,
                    nodes,
                    *FAST,
                    label="real",
                    virtual=False,
                    measure_sync=False,
                    profiler=profiler,
                )
            )
        )
        if profiler is not None:
            profiler.dump_stats(args.profile)
            print(f"profile of the real-time wave written to {args.profile}")
            print_profile(pstats.Stats(args.profile))
    if "virtual" in phases:
        for (qps, burst), label, sync in (
            (DEFAULT, "virtual-default", False),
            (FAST, "virtual-fast", True),
        ):
            waves.append(
                trio.run(
                    partial(
                        run_wave, nodes, qps, burst, label=label, virtual=True, measure_sync=sync
                    ),
                    clock=trio.testing.MockClock(autojump_threshold=0),
                )
            )
    models: list[GoResult] = []  # the defaults (1 worker), then kops' 10 workers
    if "model" in phases:
        for workers in (1, 10):
            for qps, burst in (DEFAULT, FAST):
                models.append(
                    trio.run(
                        partial(go_model, nodes, qps, burst, workers=workers),
                        clock=trio.testing.MockClock(autojump_threshold=0),
                    )
                )

    print_table(waves, [m for m in models if m.workers == 1])
    for w in waves:
        print_details(w)
    for m in models:
        formula = go_formula_s(nodes, m.qps, m.burst, m.workers)
        closed = (
            "" if math.isnan(formula) else f" (closed form without throttling: {formula:,.1f} s)"
        )
        print(
            f"\nGo model {m.qps:g}/{m.burst}, {m.workers} worker{'s' if m.workers > 1 else ''}: "
            f"all initialised at {m.init_s:,.1f} s{closed}; cloud calls {m.calls:,} "
            f"({m.init_calls:,} at initialisation, {m.calls - m.init_calls:,} by the status "
            f"loop during the wave; {m.throttled:,} throttled); {m.kube_writes:,} kube writes; "
            f"then one status pass over all Nodes: {m.sync_calls_per_period:,} calls "
            f"({m.sync_throttled:,} throttled), {m.sync_s:,.1f} s"
        )

    by_label = {w.label: w for w in waves}
    real = by_label.get("real")
    default = by_label.get("virtual-default")
    fast = by_label.get("virtual-fast")
    go = models[0] if models else None
    go_fast = models[1] if len(models) > 1 else None
    go_10 = models[2] if len(models) > 2 else None
    go_10_fast = models[3] if len(models) > 3 else None
    peak_mb = peak_rss_mb()
    took_s = time.perf_counter() - started
    after_real = f" ({real.peak_rss_mb:,.0f} MB after the real-time run)" if real else ""
    print(
        f"\npeak RSS {peak_mb:,.0f} MB{after_real}: emulator, sim cloud and CCM in one "
        f"process; the whole run took {took_s:.1f} s"
    )
    if real is not None:
        met = real.init_s < GOAL_S and real.cloud_calls < GOAL_CALLS
        verdict = "met" if met else "NOT met"
        scope = "" if nodes >= GOAL_NODES else f" (goal is for {GOAL_NODES:,} Nodes)"
        print(
            f"goal at 200/400: all Nodes in < {GOAL_S:g} s with < {GOAL_CALLS} cloud calls: "
            f"{real.init_s:.1f} s, {real.cloud_calls} calls: {verdict}{scope}"
        )

    def num(value: float | None, digits: int = 2) -> float | None:
        if value is None or math.isnan(value):
            return None
        return round(value, digits)

    first = real or fast or default  # writes per Node do not depend on the clock
    figures: dict[str, Any] = {
        "nodes": nodes,
        "init_s": num(real.init_s) if real else None,
        "init_default_qps_s": num(default.init_s) if default else None,
        "writes_per_node": num(first.writes_per_node, 3) if first else None,
        "cloud_calls": real.cloud_calls if real else None,
        "sync_calls_per_period": fast.sync_calls if fast else None,
        "go_model_init_s": num(go.init_s) if go else None,
        "go_model_calls": go.calls if go else None,
        "go_model_sync_calls_per_period": go.sync_calls_per_period if go else None,
        "go_model_throttled": go.throttled if go else None,
        "go_model_init_fast_s": num(go_fast.init_s) if go_fast else None,
        "go_model_calls_fast": go_fast.calls if go_fast else None,
        "go_model_10_workers_init_s": num(go_10.init_s) if go_10 else None,
        "go_model_10_workers_calls": go_10.calls if go_10 else None,
        "go_model_10_workers_init_fast_s": num(go_10_fast.init_s) if go_10_fast else None,
        "go_model_10_workers_calls_fast": go_10_fast.calls if go_10_fast else None,
        "events_per_node": num(first.events_per_node, 3) if first else None,
        "init_virtual_s": num(fast.init_s) if fast else None,
        "cloud_throttled": real.cloud_throttled if real else None,
        "cpu_s": num(real.cpu_s) if real else None,
        "default_qps_cloud_calls": default.cloud_calls if default else None,
        "default_qps_writes_per_node": num(default.writes_per_node, 3) if default else None,
        "sync_s": num(fast.sync_s) if fast else None,
        "peak_rss_mb": round(peak_mb),
        "peak_rss_real_mb": round(real.peak_rss_mb) if real else None,
        "goal_met": (real.init_s < GOAL_S and real.cloud_calls < GOAL_CALLS) if real else None,
    }
    print_figures(figures)


if __name__ == "__main__":
    main()
