"""Services: load balancers for 1,000 new Services, and 600 of them following 50 new Nodes.

    python bench/services.py [--quick] [--only PHASE] [--services N] [--lb-services N]
                             [--nodes N] [--added N]

The simulated cloud answers every load-balancer call (`PutLoadBalancer`,
`SetLoadBalancerBackends`, `GetLoadBalancer`, `DeleteLoadBalancer`) after 200 ms and every
instance call after 50 ms; it does not throttle. trio-ccm's own budget for the
load_balancers family is 20 calls/s with a burst of 20 (`--cloud-api-rate
load_balancers=20:20`); everything else is at its default (up to 100 Service actors at
once, node-set changes coalesced for 1 s). The emulator and the cloud are reached through
their in-process front doors (httpx transports, no sockets); a trio-ccm replica runs as
`serve()` with the `sim` provider, no leader election and no HTTP server.

Phases:

- `create`: 100 initialised Nodes; a replica with the service-lb-controller only is started
  and has synced its caches; then 1,000 `type: LoadBalancer` Services are created at once
  (one synchronous loop into the emulator). The clock runs from the first creation until
  every Service has `status.loadBalancer.ingress` (seen in the answers to the replica's
  status patches). Counted: cloud calls by method, writes of the service controller's
  client (finalizer and status patches of `services/status`), Event writes.
- `nodeset`: 500 initialised Nodes (provider ID set, no taint, running instances behind
  them) and 600 Services, provisioned by the replica first (not timed, until it is quiet).
  The replica runs the cloud-node-controller and the service-lb-controller. Then 50
  instances' kubelets register at once (taint `uninitialized`, no provider ID): each new
  Node changes the node set twice, once when it appears (name, empty provider ID) and once
  when the cloud-node-controller sets its provider ID. The clock runs from the
  registrations until every load balancer in the simulated cloud holds all 550 Nodes
  (`nodeset_600x500_s`). Also measured: until every load balancer was last told all 550
  Nodes with their provider IDs (what a cloud that registers instances by ID needs), and
  until the last load-balancer call (settled).

Each phase runs three times: at `--kube-api-qps=200 --kube-api-burst=400` in real time, and
under `trio.testing.MockClock(autojump_threshold=0)` (virtual time: rate limits, latencies
and timers take their time, CPU takes none) at the default 20/30 and again at 200/400 as a
cross-check of the real run.

`model`: what the Go service controller's algorithm (upstream-ccm.md §2.3) implies under the
same cloud, as discrete-event simulations under MockClock, with write latency zero (lower
bounds):

- create: one service worker (`--concurrent-service-syncs=1`) takes the 1,000 keys in
  order; per Service the Event `EnsuringLoadBalancer`, the finalizer PATCH,
  `EnsureLoadBalancer` (200 ms), the Event `EnsuredLoadBalancer`, the status PATCH. The
  patches and the Events (written asynchronously by the broadcaster) all draw from the
  controller's one client bucket (20/30 or 200/400, `x/time/rate`-style reservations).
- nodeset: the 50 Node adds reach the node queue at once (a client-go workqueue: a key
  already queued is not queued twice; a key being processed is queued again after).
  The Go cloud-node-controller (one worker, its own client bucket) initialises the new Nodes
  one after another: `InstanceMetadata` (50 ms), then the `PUT` that sets the provider ID
  (which enqueues that Node key again: providerID changed), the status PATCH and its
  Event. The one node worker runs `syncNodes` for each key it takes: over all 600 Services
  with `--concurrent-service-syncs` (1) parallelism; per Service it lists the Nodes at that
  moment, stores them as last synced, skips the Service when the names and provider IDs
  equal the last synced ones ("sufficiently equal"), else `UpdateLoadBalancer` (200 ms).

Prints tables, then one JSON object as the last line. Benchmarks print numbers; they never
assert on time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
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
    LogCounter,
    emulator_connection,
    machine_line,
    metric_sum,
    peak_rss_mb,
    print_figures,
    quiet_logging,
)
from apiserver import make_node, node_name
from node_wave import GoRateLimiter, kubelet_node
from trio_ccm.cloud.provider import (
    Instances,
    LoadBalancers,
    LoadBalancerStatus,
    NodeInfo,
    Routes,
    ServiceInfo,
)
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.cloud.sim.instances import provider_id
from trio_ccm.kube.events import utc_now
from trio_ccm.settings import Settings
from trio_ccm.supervisor import Serving, serve
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.cloud import SimCloud

EPOCH: Final = dt.datetime(2026, 11, 21, 10, 0, 0, tzinfo=dt.UTC)
LB_LATENCY_S: Final = 0.2
INSTANCE_LATENCY_S: Final = 0.05
LB_RATE: Final = 20.0  # --cloud-api-rate load_balancers=20:20
LB_BURST: Final = 20
FAST: Final = (200.0, 400)
DEFAULT: Final = (20.0, 30)  # the Go CCM's and our defaults
GOAL_NODESET_S: Final = 120.0
CREATE_NODES: Final = 100  # Nodes behind every load balancer of the create phase
QUIET_S: Final = 5.0  # no load-balancer call and no Event write for this long: settled
# The simulated cloud hands out load-balancer IPs from 203.0.113.0/24 (254 addresses) by
# default; 1,000 load balancers need more: RFC 2544's benchmarking range.
LB_POOL: Final = ipaddress.ip_network("198.18.0.0/20")


# -- the world --------------------------------------------------------------------------------
def _zone(cloud: SimCloud, i: int) -> str:
    return f"{cloud.region}{'abc'[i % 3]}"


def _internal_ip(i: int) -> str:
    a, b = divmod(i, 250)
    return f"10.{a // 250}.{a % 250}.{b + 1}"


def launch(cloud: SimCloud, i: int) -> str:
    """Instance i (explicit IP: the sim cloud's own allocation scans every instance); its
    provider ID."""
    node = make_node(i)
    name = node["metadata"]["name"]
    instance = cloud.add_instance(
        name, instance_type="sim.large", zone=_zone(cloud, i), internal_ips=[_internal_ip(i)]
    )
    return provider_id(instance.zone, instance.id)


def initialised_node(cloud: SimCloud, i: int, pid: str) -> dict[str, Any]:
    """The Node of bench/apiserver.py as a CCM left it for the sim cloud (its periodic
    address sync finds nothing to change)."""
    node = make_node(i)
    labels = node["metadata"]["labels"]
    labels["node.kubernetes.io/instance-type"] = "sim.large"
    labels["topology.kubernetes.io/region"] = cloud.region
    labels["topology.kubernetes.io/zone"] = _zone(cloud, i)
    node["spec"]["providerID"] = pid
    node["spec"].pop("taints", None)
    node["status"]["addresses"] = [
        {"type": "InternalIP", "address": _internal_ip(i)},
        {"type": "Hostname", "address": node["metadata"]["name"]},
    ]
    return node


def lb_service(i: int) -> dict[str, Any]:
    name = f"svc-{i:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
            "externalTrafficPolicy": "Cluster",
        },
    }


# -- what the replica did -----------------------------------------------------------------------
class _Ingress(msgspec.Struct):
    ip: str = ""
    hostname: str = ""


class _LoadBalancer(msgspec.Struct):
    ingress: list[_Ingress] = []


class _Status(msgspec.Struct, rename="camel"):
    load_balancer: _LoadBalancer = msgspec.field(default_factory=_LoadBalancer)


class _ServiceView(msgspec.Struct):
    status: _Status = msgspec.field(default_factory=_Status)


class _NodeSpec(msgspec.Struct, rename={"provider_id": "providerID"}):
    provider_id: str = ""


class _NodeView(msgspec.Struct):
    spec: _NodeSpec = msgspec.field(default_factory=_NodeSpec)


class KubeTransport(CountingTransport):
    """The replica's way to the emulator: counts its requests by client and kind, and reads
    the answers to its writes (Service status with ingress, Node with a provider ID)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        super().__init__(inner)
        self.waiting: set[str] = set()  # Services ("ns/name") still without ingress
        self.ingress_at: dict[str, float] = {}
        self.all_ingress = trio.Event()
        self.pid_at: dict[str, float] = {}  # Node -> first answer with a provider ID
        self._service = msgspec.json.Decoder(_ServiceView).decode
        self._node = msgspec.json.Decoder(_NodeView).decode

    def expect(self, keys: Iterable[str]) -> None:
        self.waiting = set(keys) - set(self.ingress_at)
        self.all_ingress = trio.Event()
        if not self.waiting:
            self.all_ingress.set()

    def reads_answers(self, kind: str) -> bool:
        return kind in ("service/status", "node")

    def answered(self, kind: str, match: re.Match[str], body: bytes) -> None:
        now = trio.current_time()
        if kind == "service/status":
            key = f"{match.group(1)}/{match.group(2)}"
            if key not in self.ingress_at and self._service(body).status.load_balancer.ingress:
                self.ingress_at[key] = now
                self.waiting.discard(key)
                if not self.waiting:
                    self.all_ingress.set()
        else:
            name = match.group(1)
            if name not in self.pid_at and self._node(body).spec.provider_id:
                self.pid_at[name] = now


class Backends:
    """What the replica told each load balancer, once the cloud said yes; and when every
    load balancer had the target node set."""

    def __init__(self) -> None:
        self.names: dict[str, frozenset[str]] = {}  # Service key -> Node names
        self.pairs: dict[str, frozenset[tuple[str, str]]] = {}  # ... -> (name, provider ID)
        self.calls: Counter[str] = Counter()  # provider method -> calls (also failed)
        self.last_call_at = -math.inf
        self.target: frozenset[tuple[str, str]] = frozenset()
        self.target_names: frozenset[str] = frozenset()
        self.pending_names: set[str] = set()
        self.pending_pairs: set[str] = set()
        self.names_at = math.nan
        self.pairs_at = math.nan
        self.names_done = trio.Event()
        self.pairs_done = trio.Event()

    def aim(self, keys: Iterable[str], target: Iterable[tuple[str, str]]) -> None:
        """From now on, wait for `keys` to hold `target` (names, and names with IDs)."""
        self.target = frozenset(target)
        self.target_names = frozenset(name for name, _ in self.target)
        keys = set(keys)
        self.pending_names = {k for k in keys if self.names.get(k) != self.target_names}
        self.pending_pairs = {k for k in keys if self.pairs.get(k) != self.target}
        self.names_done, self.pairs_done = trio.Event(), trio.Event()
        self._check()

    def told(self, key: str, nodes: Sequence[NodeInfo]) -> None:
        if not self.target:
            return  # nothing to wait for (yet): spare the CPU
        self.names[key] = frozenset(n.name for n in nodes)
        self.pairs[key] = frozenset((n.name, n.provider_id) for n in nodes)
        if self.names[key] == self.target_names:
            self.pending_names.discard(key)
        if self.pairs[key] == self.target:
            self.pending_pairs.discard(key)
        self._check()

    def _check(self) -> None:
        now = trio.current_time()
        if not self.pending_names and not self.names_done.is_set():
            self.names_at = now
            self.names_done.set()
        if not self.pending_pairs and not self.pairs_done.is_set():
            self.pairs_at = now
            self.pairs_done.set()


class RecordingLoadBalancers:
    """The sim provider's load balancers, recording what the cloud accepted (a provider
    wrapper, as a third-party provider would sit between trio-ccm and its cloud)."""

    def __init__(self, inner: LoadBalancers, backends: Backends) -> None:
        self._inner = inner
        self._backends = backends

    def _called(self, method: str) -> None:
        self._backends.calls[method] += 1
        self._backends.last_call_at = trio.current_time()

    def load_balancer_name(self, cluster: str, service: ServiceInfo) -> str:
        return self._inner.load_balancer_name(cluster, service)

    async def get_load_balancer(
        self, cluster: str, service: ServiceInfo
    ) -> LoadBalancerStatus | None:
        try:
            return await self._inner.get_load_balancer(cluster, service)
        finally:
            self._called("get_load_balancer")

    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> LoadBalancerStatus:
        try:
            status = await self._inner.ensure_load_balancer(cluster, service, nodes)
        finally:
            self._called("ensure_load_balancer")
        self._backends.told(service.key, nodes)
        return status

    async def update_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> None:
        try:
            await self._inner.update_load_balancer(cluster, service, nodes)
        finally:
            self._called("update_load_balancer")
        self._backends.told(service.key, nodes)

    async def ensure_load_balancer_deleted(self, cluster: str, service: ServiceInfo) -> None:
        try:
            await self._inner.ensure_load_balancer_deleted(cluster, service)
        finally:
            self._called("ensure_load_balancer_deleted")


class RecordingProvider:
    """The sim provider with its load balancers recorded; instances and routes as they are
    (so bulk instance lookups still batch)."""

    def __init__(self, inner: SimProvider, backends: Backends) -> None:
        assert inner.load_balancers is not None
        self._inner = inner
        self.name = inner.name
        self.instances: Instances | None = inner.instances
        self.routes: Routes | None = inner.routes
        self.load_balancers: LoadBalancers | None = RecordingLoadBalancers(
            inner.load_balancers, backends
        )

    async def initialize(self) -> None:
        await self._inner.initialize()


# -- one run of trio-ccm ------------------------------------------------------------------------
@dataclass
class Run:
    """What one replica did in one phase."""

    phase: str  # "create" or "nodeset"
    clock: str  # "wall" or "virtual"
    qps: float
    burst: int
    services: int
    nodes: int
    added: int = 0
    done_s: float = math.nan  # create: all ingress; nodeset: all LBs hold every name
    first_s: float = math.nan  # create: first ingress
    median_s: float = math.nan  # create: half of them
    pairs_s: float = math.nan  # nodeset: all LBs told every Node with its provider ID
    settled_s: float = math.nan  # the last load-balancer call ended
    nodes_initialised_s: float = math.nan  # nodeset: the last new Node got its provider ID
    events_s: float = math.nan  # last Event write
    cloud_by_method: dict[str, int] = field(default_factory=dict)  # the cloud's call log
    provider_calls: dict[str, int] = field(default_factory=dict)
    service_writes: int = 0  # writes of the service-controller client (not Events)
    event_writes: int = 0
    failed_writes: dict[int, int] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    logs: dict[str, int] = field(default_factory=dict)
    budget_wait_s: float = math.nan
    cpu_s: float = math.nan
    cloud_lbs_complete: int = 0  # after the phase: load balancers in the cloud with every Node
    setup_s: float = math.nan  # nodeset: provisioning before the clock starts (not timed)

    @property
    def label(self) -> str:
        return f"trio-ccm {self.qps:g}/{self.burst} ({self.clock})"

    @property
    def lb_calls(self) -> int:
        return sum(n for m, n in self.cloud_by_method.items() if "LoadBalancer" in m)


async def _wait_quiet(transport: KubeTransport, backends: Backends, limit_s: float) -> None:
    """Until no load-balancer call and no Event write for QUIET_S (at most `limit_s`)."""
    with trio.move_on_after(limit_s):
        while True:
            last = max(transport.last_event_at, backends.last_call_at)
            if trio.current_time() - last >= QUIET_S:
                return
            await trio.sleep(0.25)


async def run_phase(
    phase: str,
    services: int,
    nodes: int,
    added: int,
    qps: float,
    burst: int,
    *,
    virtual: bool,
    logs: LogCounter,
) -> Run:
    """One replica against a fresh world (see the module docstring)."""
    now: Callable[[], dt.datetime] = (
        (lambda: EPOCH + dt.timedelta(seconds=trio.current_time())) if virtual else utc_now
    )
    api = ApiServer(seed=1, now=now)
    cloud = SimCloud(seed=1, lb_network=str(LB_POOL))
    cloud.faults.latency("loadbalancers", fixed_s=LB_LATENCY_S)
    cloud.faults.latency("instances", fixed_s=INSTANCE_LATENCY_S)
    pids = [launch(cloud, i) for i in range(nodes + added)]
    for i in range(nodes):
        api.create(initialised_node(cloud, i, pids[i]))
    keys = [f"default/svc-{i:05d}" for i in range(services)]
    controllers = ["service-lb-controller"]
    if phase == "nodeset":
        controllers.insert(0, "cloud-node-controller")
        for i in range(services):
            api.create(lb_service(i))
    transport = KubeTransport(api.transport())
    backends = Backends()
    inner = SimProvider(url="http://sim", replica="ccm", transport=cloud.transport())
    registry = prometheus_client.CollectorRegistry()
    settings = Settings(
        cloud_provider="sim",
        secure_port=0,
        leader_elect=False,
        kube_api_qps=qps,
        kube_api_burst=burst,
        controllers=tuple(controllers),
        cloud_rates=(("load_balancers", LB_RATE, LB_BURST),),
    )
    run = Run(phase, "virtual" if virtual else "wall", qps, burst, services, nodes, added)
    # Generous: a phase that never ends fails the run instead of hanging it.
    limit_s = 10 * (2 * services / qps + 2 * services / LB_RATE) + 300
    async with trio.open_nursery() as nursery:
        setup0 = trio.current_time()
        serving: Serving = await nursery.start(
            partial(
                serve,
                settings,
                RecordingProvider(inner, backends),
                connection=emulator_connection(),
                transport=transport,
                registry=registry,
                identity="ccm",
                now=now,
            )
        )
        await serving.wait_leading()
        if phase == "nodeset":
            # Provision the load balancers first (not timed), until the replica is quiet.
            transport.expect(keys)
            with trio.fail_after(limit_s):
                await transport.all_ingress.wait()
            await _wait_quiet(transport, backends, limit_s)
            run.setup_s = trio.current_time() - setup0
        mark = len(cloud.calls)
        calls0, logs0 = Counter(backends.calls), Counter(logs.counts)
        requests0, events0 = Counter(transport.requests), transport.event_writes
        budget0 = metric_sum(registry, "cloudprovider_api_budget_wait_seconds_sum")
        cpu0, wall0, t0 = time.process_time(), time.perf_counter(), trio.current_time()
        if phase == "create":
            transport.expect(keys)
            for i in range(services):
                api.create(lb_service(i))
            with trio.fail_after(limit_s):
                await transport.all_ingress.wait()
            end = trio.current_time()
            run.done_s = time.perf_counter() - wall0 if not virtual else end - t0
            done = sorted(transport.ingress_at[k] for k in keys)
            run.first_s = done[0] - t0
            run.median_s = done[len(done) // 2] - t0
            target = [(node_name(i), pids[i]) for i in range(nodes)]
        else:
            target = [(node_name(i), pids[i]) for i in range(nodes + added)]
            backends.aim(keys, target)
            for i in range(nodes, nodes + added):
                api.create(kubelet_node(i))
            with trio.fail_after(limit_s):
                await backends.names_done.wait()
            run.done_s = time.perf_counter() - wall0 if not virtual else trio.current_time() - t0
            with trio.fail_after(limit_s):
                await backends.pairs_done.wait()
            run.pairs_s = backends.pairs_at - t0
        cpu_done = time.process_time()
        await _wait_quiet(transport, backends, limit_s)
        run.cpu_s = cpu_done - cpu0
        run.settled_s = backends.last_call_at - t0
        run.events_s = transport.last_event_at - t0
        calls = cloud.calls[mark:]
        run.cloud_by_method = dict(Counter(c.method for c in calls))
        run.provider_calls = dict(Counter(backends.calls) - calls0)
        requests = Counter(transport.requests) - requests0
        run.requests = {f"{c} {w}": n for (c, w), n in sorted(requests.items())}
        writes = ("POST", "PUT", "PATCH", "DELETE")
        run.service_writes = sum(
            n
            for (c, w), n in requests.items()
            if c == "service-controller" and w.split(" ")[0] in writes
        )
        run.event_writes = transport.event_writes - events0
        run.failed_writes = dict(transport.failed_writes)
        run.logs = dict(Counter(logs.counts) - logs0)
        run.budget_wait_s = (
            metric_sum(registry, "cloudprovider_api_budget_wait_seconds_sum") - budget0
        )
        if phase == "nodeset":
            seen = [transport.pid_at.get(node_name(i)) for i in range(nodes, nodes + added)]
            if added and None not in seen:
                run.nodes_initialised_s = max(t for t in seen if t is not None) - t0
        wanted = {name for name, _ in target}
        run.cloud_lbs_complete = sum(1 for lb in cloud.load_balancers() if set(lb.nodes) == wanted)
        nursery.cancel_scope.cancel()
    await inner.aclose()
    return run


# -- the Go service controller, modelled -----------------------------------------------------
class WorkQueue:
    """client-go's workqueue without rate limiting: FIFO, a key is never queued twice, and a
    key added while it is processed is queued again when it is done."""

    def __init__(self) -> None:
        self.queue: list[str] = []
        self.dirty: set[str] = set()
        self.processing: set[str] = set()
        self.added = trio.Event()

    def add(self, key: str) -> None:
        if key in self.dirty:
            return
        self.dirty.add(key)
        if key in self.processing:
            return
        self.queue.append(key)
        self.added.set()

    async def get(self) -> str:
        await trio.lowlevel.checkpoint()
        while not self.queue:
            self.added = trio.Event()
            await self.added.wait()
        key = self.queue.pop(0)
        self.processing.add(key)
        self.dirty.discard(key)
        return key

    def done(self, key: str) -> None:
        self.processing.discard(key)
        if key in self.dirty:
            self.queue.append(key)
            self.added.set()

    def idle(self) -> bool:
        return not self.queue and not self.processing


class Broadcaster:
    """client-go's event broadcaster: a queue of 1,000 (dropped beyond), written one by one
    through the controller's client bucket."""

    def __init__(self, client: GoRateLimiter) -> None:
        self.client = client
        self.queued = 0
        self.written = 0
        self.dropped = 0
        self.wake = trio.Event()

    def emit(self) -> None:
        if self.queued >= 1000:
            self.dropped += 1
            return
        self.queued += 1
        self.wake.set()

    async def serve(self) -> None:
        while True:
            while not self.queued:
                self.wake = trio.Event()
                await self.wake.wait()
            await self.client.wait()
            self.queued -= 1
            self.written += 1


@dataclass
class GoCreate:
    services: int
    qps: float
    burst: int
    workers: int
    done_s: float = math.nan
    cloud_calls: int = 0
    patches: int = 0
    events: int = 0  # written by the time the last status was
    events_dropped: int = 0


async def go_create(services: int, qps: float, burst: int, *, workers: int = 1) -> GoCreate:
    """Upstream's service workers creating `services` load balancers (module docstring)."""
    result = GoCreate(services, qps, burst, workers)
    client = GoRateLimiter(qps, burst)  # the service-controller clientset, Events included
    events = Broadcaster(client)
    pending = iter(range(services))
    done = 0

    async def patch() -> None:
        await client.wait()
        result.patches += 1

    async def worker() -> None:
        nonlocal done
        for _service in pending:
            events.emit()  # EnsuringLoadBalancer
            await patch()  # the finalizer
            await trio.sleep(LB_LATENCY_S)  # EnsureLoadBalancer
            result.cloud_calls += 1
            events.emit()  # EnsuredLoadBalancer
            await patch()  # the status
            done += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(events.serve)
        async with trio.open_nursery() as workers_nursery:
            for _ in range(workers):
                workers_nursery.start_soon(worker)
        result.done_s = trio.current_time()
        result.events = events.written
        result.events_dropped = events.dropped
        nursery.cancel_scope.cancel()
    assert done == services
    return result


@dataclass
class GoNodeset:
    services: int
    nodes: int
    added: int
    qps: float
    burst: int
    workers: int
    names_s: float = math.nan  # every LB holds every name
    pairs_s: float = math.nan  # every LB told every Node with its provider ID
    settled_s: float = math.nan  # the last UpdateLoadBalancer ended
    nodes_initialised_s: float = math.nan
    updates: int = 0
    passes: int = 0  # syncNodes runs (node keys taken)
    passes_updating: int = 0  # of which made at least one UpdateLoadBalancer
    skipped: int = 0  # Services found "sufficiently equal"
    events: int = 0  # UpdatedLoadBalancer and Synced, written by the end


async def go_nodeset(
    services: int, nodes: int, added: int, qps: float, burst: int, *, workers: int = 1
) -> GoNodeset:
    """Upstream's node worker following `added` new Nodes (module docstring)."""
    result = GoNodeset(services, nodes, added, qps, burst, workers)
    old = [f"node-{i}" for i in range(nodes)]
    new = [f"node-{i}" for i in range(nodes, nodes + added)]
    pids = {name: f"sim://zone/i-{name}" for name in [*old, *new]}
    current: dict[str, str] = {name: pids[name] for name in old}
    version = 0  # of `current`; the listed set is cached per version
    listed: tuple[int, frozenset[tuple[str, str]]] = (-1, frozenset())
    target = frozenset(pids.items())
    target_names = frozenset(pids)
    initial = frozenset(current.items())
    last_synced = dict.fromkeys(range(services), initial)
    pending_names, pending_pairs = set(range(services)), set(range(services))
    node_queue = WorkQueue()
    service_client = GoRateLimiter(qps, burst)  # service-controller: Events only here
    service_events = Broadcaster(service_client)
    node_client = GoRateLimiter(qps, burst)  # node-controller
    node_events = Broadcaster(node_client)
    nodes_done = trio.Event()
    settled = trio.Event()

    def list_nodes() -> frozenset[tuple[str, str]]:
        nonlocal listed
        if listed[0] != version:
            listed = (version, frozenset(current.items()))
        return listed[1]

    async def node_sync_service(service: int) -> bool:
        newest = list_nodes()
        previous = last_synced[service]
        last_synced[service] = newest  # stored before the cloud call, as upstream
        if previous == newest:
            result.skipped += 1
            return False
        await trio.sleep(LB_LATENCY_S)  # UpdateLoadBalancer
        result.updates += 1
        result.settled_s = trio.current_time()
        if frozenset(name for name, _ in newest) == target_names:
            pending_names.discard(service)
            if not pending_names and math.isnan(result.names_s):
                result.names_s = trio.current_time()
        if newest == target:
            pending_pairs.discard(service)
            if not pending_pairs and math.isnan(result.pairs_s):
                result.pairs_s = trio.current_time()
        service_events.emit()  # UpdatedLoadBalancer
        return True

    async def piece(items: Iterator[int], updated: list[int]) -> None:
        for service in items:
            updated[0] += await node_sync_service(service)

    async def node_worker() -> None:
        while True:
            key = await node_queue.get()
            result.passes += 1
            items = iter(range(services))
            updated = [0]
            async with trio.open_nursery() as pieces:  # workqueue.ParallelizeUntil
                for _ in range(workers):
                    pieces.start_soon(piece, items, updated)
            result.passes_updating += updated[0] > 0
            node_queue.done(key)
            if nodes_done.is_set() and node_queue.idle():
                settled.set()

    async def cloud_node_controller() -> None:
        for name in new:  # its own queue, one worker, in the order of the adds
            await trio.sleep(INSTANCE_LATENCY_S)  # InstanceMetadata
            await node_client.wait()  # PUT: provider ID, labels, taint gone
            nonlocal version
            current[name] = pids[name]
            version += 1
            node_queue.add(name)  # providerID changed
            await node_client.wait()  # status PATCH (addresses)
            node_events.emit()  # Synced
        result.nodes_initialised_s = trio.current_time()
        nodes_done.set()
        if node_queue.idle():
            settled.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(service_events.serve)
        nursery.start_soon(node_events.serve)
        for name in new:  # the kubelets register at once
            current[name] = ""
            version += 1
            node_queue.add(name)
        nursery.start_soon(node_worker)
        nursery.start_soon(cloud_node_controller)
        await settled.wait()  # every Node initialised, and the node queue drained
        result.events = service_events.written + node_events.written
        nursery.cancel_scope.cancel()
    return result


# -- output -------------------------------------------------------------------------------------
def _fmt(value: float | int | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _table(rows: list[str], columns: list[tuple[str, list[str]]]) -> None:
    width = max(len(r) for r in rows) + 2
    col = max(16, *(len(name) + 2 for name, _ in columns))
    print("".ljust(width) + "".join(name.rjust(col) for name, _ in columns))
    for i, row in enumerate(rows):
        print(row.ljust(width) + "".join(values[i].rjust(col) for _, values in columns))


def print_create(runs: list[Run], models: list[GoCreate]) -> None:
    n = runs[0].services if runs else models[0].services
    print(f"\ncreate: {n:,} LoadBalancer Services at once")
    rows = [
        "all Services have ingress (s)",
        "first one (s)",
        "half of them (s)",
        "last Event written (s)",
        "cloud calls per Service",
        "kube writes per Service (not Events)",
        "Event writes per Service",
        "CPU (s)",
    ]
    columns = [
        (
            f"{r.qps:g}/{r.burst} {r.clock}",
            [
                _fmt(r.done_s),
                _fmt(r.first_s, 2),
                _fmt(r.median_s),
                _fmt(r.events_s),
                _fmt(r.lb_calls / r.services, 2),
                _fmt(r.service_writes / r.services, 2),
                _fmt(r.event_writes / r.services, 2),
                _fmt(r.cpu_s),
            ],
        )
        for r in runs
    ]
    columns += [
        (
            f"Go {m.qps:g}/{m.burst}" + (f" {m.workers}w" if m.workers > 1 else ""),
            [
                _fmt(m.done_s),
                "-",
                "-",
                "-",
                _fmt(m.cloud_calls / m.services, 2),
                _fmt(m.patches / m.services, 2),
                _fmt(m.events / m.services, 2),
                "-",
            ],
        )
        for m in models
    ]
    _table(rows, columns)


def print_nodeset(runs: list[Run], models: list[GoNodeset]) -> None:
    first: Run | GoNodeset = runs[0] if runs else models[0]
    print(
        f"\nnodeset: {first.services:,} LoadBalancer Services x {first.nodes:,} Nodes, "
        f"{first.added:,} Nodes added at once"
    )
    rows = [
        "every LB holds every Node (s)",
        "... told with provider IDs (s)",
        "last LB call (settled) (s)",
        "new Nodes initialised (s)",
        "SetLoadBalancerBackends calls",
        "PutLoadBalancer calls",
        "other LB calls",
        "node-set passes",
        "Event writes (both controllers)",
        "CPU (s)",
    ]
    columns = [
        (
            f"{r.qps:g}/{r.burst} {r.clock}",
            [
                _fmt(r.done_s),
                _fmt(r.pairs_s),
                _fmt(r.settled_s),
                _fmt(r.nodes_initialised_s),
                _fmt(r.cloud_by_method.get("SetLoadBalancerBackends", 0)),
                _fmt(r.cloud_by_method.get("PutLoadBalancer", 0)),
                _fmt(
                    r.lb_calls
                    - r.cloud_by_method.get("SetLoadBalancerBackends", 0)
                    - r.cloud_by_method.get("PutLoadBalancer", 0)
                ),
                _fmt(r.logs.get("service.node-set-changed", 0)),
                _fmt(r.event_writes),
                _fmt(r.cpu_s),
            ],
        )
        for r in runs
    ]
    columns += [
        (
            f"Go {m.qps:g}/{m.burst}" + (f" {m.workers}w" if m.workers > 1 else ""),
            [
                _fmt(m.names_s),
                _fmt(m.pairs_s),
                _fmt(m.settled_s),
                _fmt(m.nodes_initialised_s),
                _fmt(m.updates),
                "0",
                "0",
                f"{m.passes_updating}/{m.passes}",
                _fmt(m.events),
                "-",
            ],
        )
        for m in models
    ]
    _table(rows, columns)


def print_details(r: Run) -> None:
    print(f"\n{r.phase}, {r.label}:")
    if r.phase == "nodeset":
        print(f"  provisioning before the clock started (not timed): {r.setup_s:,.1f} s")
    print(f"  cloud calls by method: {r.cloud_by_method}")
    print(f"  provider calls by method: {r.provider_calls}")
    print(
        f"  load balancers in the cloud with every Node at the end: {r.cloud_lbs_complete:,}"
        f" of {r.services:,}; failed writes by status: {r.failed_writes or 'none'}"
    )
    print(f"  waited for the cloud budget: {r.budget_wait_s:,.1f} s in total")
    interesting = (
        "service.node-set-changed",
        "service.hosts-updated",
        "service.load-balancer-ensured",
        "service.finalizer-added",
        "service.status-updated",
        "service.load-balancer-missing",
    )
    shown = {k: r.logs[k] for k in interesting if k in r.logs}
    others = {k: v for k, v in r.logs.items() if k not in interesting and v}
    print(f"  log events: {shown}; others: {others}")
    print("  requests to the emulator by client:")
    for key, count in r.requests.items():
        print(f"    {count:>7,}  {key}")


# -- main ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (smoke check)")
    parser.add_argument("--services", type=int, help="create: Services (1000; quick 50)")
    parser.add_argument("--lb-services", type=int, help="nodeset: Services (600; quick 30)")
    parser.add_argument("--nodes", type=int, help="nodeset: Nodes before (500; quick 20)")
    parser.add_argument("--added", type=int, help="nodeset: Nodes added (50; quick 5)")
    parser.add_argument(
        "--only", choices=("create", "nodeset", "model"), action="append", help="run these"
    )
    parser.add_argument("--log-level", default="error", help="trio-ccm's logs, to stderr")
    args = parser.parse_args(argv)
    services = args.services or (50 if args.quick else 1000)
    lb_services = args.lb_services or (30 if args.quick else 600)
    nodes = args.nodes or (20 if args.quick else 500)
    added = args.added or (5 if args.quick else 50)
    phases = set(args.only or ("create", "nodeset", "model"))
    logs = quiet_logging(args.log_level)
    started = time.perf_counter()

    print(
        f"services: sim cloud {LB_LATENCY_S * 1000:g} ms per load-balancer call, "
        f"{INSTANCE_LATENCY_S * 1000:g} ms per instance call, no throttling; trio-ccm cloud "
        f"budget load_balancers {LB_RATE:g}/s burst {LB_BURST}, defaults otherwise"
    )
    print(machine_line())
    runs: dict[tuple[str, str], Run] = {}
    for phase, size in (("create", (services, CREATE_NODES, 0)), ("nodeset", None)):
        if phase not in phases:
            continue
        n, k, a = size or (lb_services, nodes, added)
        runs[(phase, "real")] = trio.run(
            partial(run_phase, phase, n, k, a, *FAST, virtual=False, logs=logs)
        )
        runs[(phase, "default")] = trio.run(
            partial(run_phase, phase, n, k, a, *DEFAULT, virtual=True, logs=logs),
            clock=trio.testing.MockClock(autojump_threshold=0),
        )
        runs[(phase, "virtual")] = trio.run(
            partial(run_phase, phase, n, k, a, *FAST, virtual=True, logs=logs),
            clock=trio.testing.MockClock(autojump_threshold=0),
        )
    creates: list[GoCreate] = []
    nodesets: list[GoNodeset] = []
    if "model" in phases:
        for workers in (1, 10):
            for qps, burst in (DEFAULT, FAST):
                creates.append(
                    trio.run(
                        partial(go_create, services, qps, burst, workers=workers),
                        clock=trio.testing.MockClock(autojump_threshold=0),
                    )
                )
                nodesets.append(
                    trio.run(
                        partial(go_nodeset, lb_services, nodes, added, qps, burst, workers=workers),
                        clock=trio.testing.MockClock(autojump_threshold=0),
                    )
                )

    order = ("real", "default", "virtual")
    create_runs = [runs[("create", o)] for o in order if ("create", o) in runs]
    nodeset_runs = [runs[("nodeset", o)] for o in order if ("nodeset", o) in runs]
    if create_runs or creates:
        print_create(create_runs, [m for m in creates if m.workers == 1])
    if nodeset_runs or nodesets:
        print_nodeset(nodeset_runs, [m for m in nodesets if m.workers == 1])
    for r in [*create_runs, *nodeset_runs]:
        print_details(r)
    for m in creates:
        print(
            f"\nGo model create {m.qps:g}/{m.burst}, {m.workers} worker(s): {m.done_s:,.1f} s; "
            f"{m.cloud_calls:,} EnsureLoadBalancer, {m.patches:,} patches, {m.events:,} Events "
            f"written by then ({m.events_dropped:,} dropped)"
        )
    for g in nodesets:
        print(
            f"\nGo model nodeset {g.qps:g}/{g.burst}, {g.workers} worker(s): every LB holds "
            f"every Node at {g.names_s:,.1f} s, with provider IDs at {g.pairs_s:,.1f} s, last "
            f"update at {g.settled_s:,.1f} s; {g.updates:,} UpdateLoadBalancer, "
            f"{g.skipped:,} Services skipped as sufficiently equal, {g.passes} syncNodes "
            f"passes ({g.passes_updating} with updates); new Nodes initialised at "
            f"{g.nodes_initialised_s:,.1f} s"
        )

    took_s = time.perf_counter() - started
    real_nodeset = runs.get(("nodeset", "real"))
    peak_mb = peak_rss_mb()
    print(f"\npeak RSS {peak_mb:,.0f} MB; the whole run took {took_s:.1f} s")
    goal_met: bool | None = None
    if real_nodeset is not None:
        goal_met = real_nodeset.done_s < GOAL_NODESET_S
        scope = (
            ""
            if (lb_services, nodes, added) == (600, 500, 50)
            else " (the goal is for 600 x 500 + 50)"
        )
        print(
            f"goal: every LB holds the new Nodes in < {GOAL_NODESET_S:g} s: "
            f"{real_nodeset.done_s:.1f} s: {'met' if goal_met else 'NOT met'}{scope}"
        )

    def num(value: float | None, digits: int = 2) -> float | None:
        if value is None or math.isnan(value):
            return None
        return round(value, digits)

    def get(phase: str, which: str) -> Run | None:
        return runs.get((phase, which))

    create_real, create_default = get("create", "real"), get("create", "default")
    create_virtual = get("create", "virtual")
    nodeset_default, nodeset_virtual = get("nodeset", "default"), get("nodeset", "virtual")
    go_create_default = creates[0] if creates else None
    go_create_fast = creates[1] if len(creates) > 1 else None
    go_nodeset_default = nodesets[0] if nodesets else None
    go_nodeset_fast = nodesets[1] if len(nodesets) > 1 else None
    create_any = create_real or create_virtual or create_default
    figures: dict[str, Any] = {
        "create_services": services,
        "nodeset_services": lb_services,
        "nodeset_nodes": nodes,
        "nodeset_added": added,
        "create_1000_s": num(create_real.done_s) if create_real else None,
        "create_1000_default_qps_s": num(create_default.done_s) if create_default else None,
        "create_1000_virtual_s": num(create_virtual.done_s) if create_virtual else None,
        "create_cloud_calls_per_service": (
            num(create_any.lb_calls / services, 3) if create_any else None
        ),
        "create_writes_per_service": (
            num(create_any.service_writes / services, 3) if create_any else None
        ),
        "create_events_per_service": (
            num(create_any.event_writes / services, 3) if create_any else None
        ),
        "create_cpu_s": num(create_real.cpu_s) if create_real else None,
        "go_model_create_s": num(go_create_default.done_s) if go_create_default else None,
        "go_model_create_fast_s": num(go_create_fast.done_s) if go_create_fast else None,
        "nodeset_600x500_s": num(real_nodeset.done_s) if real_nodeset else None,
        "nodeset_provider_ids_s": num(real_nodeset.pairs_s) if real_nodeset else None,
        "nodeset_settled_s": num(real_nodeset.settled_s) if real_nodeset else None,
        "nodeset_default_qps_s": num(nodeset_default.done_s) if nodeset_default else None,
        "nodeset_virtual_s": num(nodeset_virtual.done_s) if nodeset_virtual else None,
        "nodeset_backend_calls": (
            real_nodeset.cloud_by_method.get("SetLoadBalancerBackends", 0) if real_nodeset else None
        ),
        "nodeset_put_calls": (
            real_nodeset.cloud_by_method.get("PutLoadBalancer", 0) if real_nodeset else None
        ),
        "nodeset_passes": (
            real_nodeset.logs.get("service.node-set-changed", 0) if real_nodeset else None
        ),
        "nodeset_cpu_s": num(real_nodeset.cpu_s) if real_nodeset else None,
        "go_model_nodeset_s": num(go_nodeset_default.names_s) if go_nodeset_default else None,
        "go_model_nodeset_provider_ids_s": (
            num(go_nodeset_default.pairs_s) if go_nodeset_default else None
        ),
        "go_model_nodeset_calls": go_nodeset_default.updates if go_nodeset_default else None,
        "go_model_nodeset_fast_s": num(go_nodeset_fast.names_s) if go_nodeset_fast else None,
        "goal_met": goal_met,
        "peak_rss_mb": round(peak_mb),
        "wall_s": round(took_s, 1),
    }
    print_figures(figures)


if __name__ == "__main__":
    main()
