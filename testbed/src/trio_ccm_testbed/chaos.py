"""An in-process chaos run: several replicas of the whole CCM share one emulator and one
simulated cloud, under a random workload, while a seeded schedule shuts them down
gracefully, twice in a row, kills them (no release), cuts them off the network, or
freezes the whole process (virtual time jumps with no task running). Then it checks what
must hold whatever happened:

- the referee (`trio_ccm.testing.referee`): no cloud write by a replica outside its own
  leadership, as the Lease's history shows it;
- once the disruptions stop, the cluster converges: every LoadBalancer Service has exactly
  one load balancer with its ports, the existing Nodes as backends and its address in the
  status; no load balancer without such a Service (a leak); no finalizer left on a
  Service that no longer wants a load balancer; every Node initialised, with a pod CIDR
  and a route.

`run_chaos(ChaosConfig(seed=...))` runs one schedule and returns a `ChaosReport`. Run it
under `trio.testing.MockClock(autojump_threshold=0)` (pass the clock to enable process
freezes): a schedule of several virtual minutes takes a second or two of real time.
tests/faults/test_leadership.py runs a bounded count; `bench/chaos.py --in-process` runs
hundreds.

`run_slow_cloud(SlowCloudConfig(...))` is the slow-cloud phase (issue 27): every cloud call
held past the CCM's timeout and applied late, then cleared; it reports `stale_after_s`, how
long a load balancer or route still differed from what it should be after the fault
cleared (`bench/chaos.py --slow-cloud`).
"""

from __future__ import annotations

import ipaddress
import itertools
import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

import httpx
import trio
import trio.testing

from trio_ccm.cli.flags import parse_flags
from trio_ccm.cloud.aws.loadbalancers import NLB_CLIENT_RULE, NLB_HEALTH_RULE, NLB_MTU_RULE
from trio_ccm.cloud.provider import ServiceInfo, default_load_balancer_name
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.supervisor import Serving, serve
from trio_ccm.testing.factories import TAINT_UNINITIALIZED, make_node, make_service, ready_condition
from trio_ccm.testing.harness import emulator_connection, virtual_now
from trio_ccm.testing.referee import (
    CloudRecorder,
    LeaseRecorder,
    LeaseWrite,
    violations,
)
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.cloud import SimCloud

if TYPE_CHECKING:
    from trio_ccm_testbed.aws.world import Balancing

__all__ = [
    "LEASES",
    "PROBLEM_KINDS",
    "SLOW_CLOUD_KINDS",
    "ChaosConfig",
    "ChaosReport",
    "Problem",
    "SlowCloudConfig",
    "SlowCloudReport",
    "check_invariants",
    "find_aws_problems",
    "find_openstack_problems",
    "find_problems",
    "run_chaos",
    "run_slow_cloud",
]

LEASES: Final = {"short": (4.0, 3.0, 1.0), "default": (15.0, 10.0, 2.0)}
"""Lease duration, renew deadline and retry period of each lease setting."""
CLUSTER_CIDR: Final = "10.244.0.0/16"
_CONVERGE_LIMIT_S: Final = 900.0
_FINALIZER: Final = "service.kubernetes.io/load-balancer-cleanup"

Action = Literal["graceful", "double", "kill", "partition", "freeze"]
ACTIONS: Final[tuple[Action, ...]] = ("graceful", "double", "kill", "partition", "freeze")


@dataclass(frozen=True)
class ChaosConfig:
    """One chaos run: its seed, replicas, lease setting, schedule length and load."""

    seed: int = 1
    replicas: int = 3
    lease: Literal["short", "default"] = "short"
    disruptions: int = 6
    nodes: int = 6
    services: int = 5
    cloud_faults: bool = True


@dataclass
class ChaosReport:
    """What a run did and what it found."""

    config: ChaosConfig
    actions: Counter[str] = field(default_factory=Counter)
    cloud_writes: Counter[str] = field(default_factory=Counter)
    lease_writes: int = 0
    takeovers: int = 0
    handovers_s: list[float] = field(default_factory=list)
    """Graceful shutdowns of the leader: from shut_down() to another replica's acquisition."""
    violations: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Invariants still broken when the convergence limit ran out."""
    converged_s: float = math.inf
    """From the end of the disruptions to every invariant holding."""
    virtual_s: float = 0.0
    lease_history: list[LeaseWrite] = field(default_factory=list)
    """Every successful Lease write, in time order (what the referee judged by)."""

    @property
    def ok(self) -> bool:
        return not self.violations and not self.problems


class _Link(httpx.AsyncBaseTransport):
    """One replica's way to a service: down while cut or partitioned (connection refused)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.cut = False
        self.down_until = -math.inf

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.cut or trio.current_time() < self.down_until:
            await trio.lowlevel.checkpoint()
            raise httpx.ConnectError("connection refused (chaos: link down)", request=request)
        response: httpx.Response = await self.inner.handle_async_request(request)
        return response


class _World:
    """The emulator, the cloud, and the chaos run's own access to both."""

    def __init__(self, config: ChaosConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)  # noqa: S311 - a seeded schedule, not secrets
        self.api = ApiServer(seed=config.seed, now=virtual_now())
        self.cloud = SimCloud(seed=config.seed)
        self.http = httpx.AsyncClient(transport=self.api.transport(), base_url="http://emulator")
        self.recorders: list[LeaseRecorder] = []
        self.cloud_recorders: list[CloudRecorder] = []
        self.sequence = itertools.count()
        self.graceful_leaders: list[tuple[str, float]] = []
        self.nodes = 0
        self.services = 0

    def add_node(self) -> None:
        name = f"node-{self.nodes:03}"
        self.nodes += 1
        self.cloud.add_instance(name)
        self.api.create(make_node(name))

    def add_service(self) -> None:
        name = f"svc-{self.services:03}"
        self.services += 1
        self.api.create(make_service(name, ports=self._ports()))

    def _ports(self) -> list[dict[str, Any]]:
        count = self.rng.choice((1, 1, 2))
        numbers = self.rng.sample(range(80, 90), count)
        return [{"name": f"p{n}", "port": n, "protocol": "TCP"} for n in numbers]

    async def items(self, path: str) -> list[dict[str, Any]]:
        response = await self.http.get(path)
        response.raise_for_status()
        found: list[dict[str, Any]] = response.json()["items"]
        return found

    async def service_names(self) -> list[str]:
        return sorted(
            s["metadata"]["name"]
            for s in await self.items("/api/v1/namespaces/default/services")
            if s["metadata"]["name"].startswith("svc-")
            and not s["metadata"].get("deletionTimestamp")
        )

    async def problems(self) -> list[str]:
        return check_invariants(
            await self.items("/api/v1/nodes"),
            await self.items("/api/v1/services"),
            self.cloud.state(),
        )

    async def patch(self, path: str, body: dict[str, Any], *, status: bool = False) -> None:
        response = await self.http.patch(
            path + ("/status" if status else ""),
            json=body,
            headers={"content-type": "application/merge-patch+json"},
        )
        if response.status_code not in (200, 404, 409):
            response.raise_for_status()

    async def workload_step(self) -> None:
        """One random change a user (or a cloud) makes."""
        rng = self.rng
        names = await self.service_names()
        roll = rng.random()
        if roll < 0.2 or not names:
            self.add_service()
        elif roll < 0.4:
            path = f"/api/v1/namespaces/default/services/{rng.choice(names)}"
            await self.patch(path, {"spec": {"ports": self._ports()}})
        elif roll < 0.5:
            path = f"/api/v1/namespaces/default/services/{rng.choice(names)}"
            kind = rng.choice(("ClusterIP", "LoadBalancer"))
            await self.patch(path, {"spec": {"type": kind}})
        elif roll < 0.6:
            response = await self.http.delete(
                f"/api/v1/namespaces/default/services/{rng.choice(names)}"
            )
            if response.status_code not in (200, 404):
                response.raise_for_status()
        elif roll < 0.8:
            self.add_node()
        else:
            live = [i for i in self.cloud.instances() if i.state == "running"]
            if len(live) > 2:
                instance = rng.choice(live)
                self.cloud.terminate(instance.id)
                # Its kubelet is gone: the Node turns Unknown, and the CCM deletes it.
                await self.patch(
                    f"/api/v1/nodes/{instance.name}",
                    {"status": {"conditions": [ready_condition("Unknown")]}},
                    status=True,
                )


class _Replica:
    """One CCM replica: started, shut down, killed and restarted by the schedule."""

    def __init__(self, name: str, world: _World, nursery: trio.Nursery) -> None:
        self.name = name
        self.world = world
        self.nursery = nursery
        self.serving: Serving | None = None
        self.scope: trio.CancelScope | None = None
        self.kube: _Link | None = None
        self.cloud: _Link | None = None
        self.stopped = trio.Event()
        self.stopped.set()

    @property
    def running(self) -> bool:
        return not self.stopped.is_set()

    @property
    def leading(self) -> bool:
        serving = self.serving
        return (
            self.running
            and serving is not None
            and serving.elector is not None
            and serving.elector.leading.value
        )

    async def start(self) -> None:
        world = self.world
        duration, deadline, retry = LEASES[world.config.lease]
        settings = parse_flags(
            [
                "--cloud-provider=sim",
                "--secure-port=0",
                f"--leader-elect-lease-duration={duration:g}s",
                f"--leader-elect-renew-deadline={deadline:g}s",
                f"--leader-elect-retry-period={retry:g}s",
                f"--cluster-cidr={CLUSTER_CIDR}",
                "--allocate-node-cidrs",
            ]
        )
        self.kube = _Link(world.api.transport())
        self.cloud = _Link(world.cloud.transport())
        recorder = LeaseRecorder(self.kube, self.name, world.sequence)
        world.recorders.append(recorder)
        cloud = CloudRecorder(self.cloud, self.name, world.sequence)
        world.cloud_recorders.append(cloud)
        provider = SimProvider(url="http://sim", replica=self.name, transport=cloud)
        self.stopped = trio.Event()
        self.scope = trio.CancelScope()
        rng = random.Random(world.rng.random())  # noqa: S311 - jitter, not secrets

        async def run(*, task_status: trio.TaskStatus[Serving]) -> None:
            try:
                assert self.scope is not None
                with self.scope:
                    await serve(
                        settings,
                        provider,
                        connection=emulator_connection(),
                        transport=recorder,
                        identity=self.name,
                        rng=rng,
                        now=virtual_now(),
                        task_status=task_status,
                    )
            finally:
                self.stopped.set()
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await provider.aclose()

        self.serving = await self.nursery.start(run)

    def shut_down(self, *, force: bool = False) -> None:
        if self.serving is not None and self.running:
            self.serving.shut_down(force=force)

    def kill(self) -> None:
        """SIGKILL: nothing more leaves the process, not even the Lease release."""
        if self.kube is not None and self.cloud is not None:
            self.kube.cut = self.cloud.cut = True
        if self.scope is not None:
            self.scope.cancel()

    def partition(self, seconds: float) -> None:
        if self.kube is not None and self.cloud is not None:
            until = trio.current_time() + seconds
            self.kube.down_until = self.cloud.down_until = until


@dataclass(frozen=True)
class Problem:
    """One broken invariant: its kind (a key of `PROBLEM_KINDS`) and what is wrong."""

    kind: str
    message: str

    def __str__(self) -> str:
        return self.message


PROBLEM_KINDS: Final = {
    "leaked": "a load balancer no Service of type LoadBalancer wants",
    "duplicate": "a second load balancer for a Service that has its own",
    "missing": "a LoadBalancer Service without its load balancer",
    "ports": "load balancer ports differ from the Service's",
    "backends": "load balancer backends differ from the Nodes",
    "source-ranges": "load balancer source ranges differ from the Service's",
    "status": "the Service's ingress differs from its load balancer's",
    "finalizer-missing": "a LoadBalancer Service without the cleanup finalizer",
    "finalizer-stranded": "the cleanup finalizer on a Service that wants no load balancer",
    "stale-ingress": "an ingress on a Service that wants no load balancer",
    "node-uninitialised": "a Node still tainted uninitialized",
    "node-pod-cidr": "a Node without a pod CIDR",
    "route-missing": "a Node's pod CIDR without its route",
    "route-stale": "a route to a Node that is gone",
    "rule-leaked": "a security-group rule no load balancer accounts for (aws)",
    "rule-missing": "a security-group rule a load balancer needs is missing (aws)",
}
"""Every kind of `Problem`, with what it means."""

_ALL_SOURCES: Final = ("0.0.0.0/0",)
_SOURCE_RANGES_ANNOTATION: Final = "service.beta.kubernetes.io/load-balancer-source-ranges"
_SERVICE_NAME_TAG: Final = "kubernetes.io/service-name"


def _source_ranges(svc: dict[str, Any]) -> list[str]:
    """Upstream's GetLoadBalancerSourceRanges, normalised: the field, else the annotation,
    else everywhere."""
    ranges = svc["spec"].get("loadBalancerSourceRanges") or []
    if not ranges:
        annotated = svc["metadata"].get("annotations", {}).get(_SOURCE_RANGES_ANNOTATION, "")
        ranges = [r for r in annotated.split(",") if r.strip()]
    return sorted(
        str(ipaddress.ip_network(r.strip(), strict=False)) for r in ranges or _ALL_SOURCES
    )


def _service_problems(
    services: list[dict[str, Any]],
) -> tuple[dict[str, dict[str, Any]], list[Problem]]:
    """The Services that want a load balancer, by its name (`a<uid>`), and what is wrong with
    their finalizers and ingress whatever the cloud holds."""
    problems: list[Problem] = []
    wanted: dict[str, dict[str, Any]] = {}
    for svc in services:
        meta, spec = svc["metadata"], svc["spec"]
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        finalizer = _FINALIZER in meta.get("finalizers", [])
        if spec.get("type") == "LoadBalancer" and not meta.get("deletionTimestamp"):
            info = ServiceInfo(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])
            wanted[default_load_balancer_name(info)] = svc
            if not finalizer:
                problems.append(
                    Problem("finalizer-missing", f"Service {key}: no cleanup finalizer")
                )
        elif finalizer:
            problems.append(
                Problem(
                    "finalizer-stranded",
                    f"Service {key}: a finalizer is stranded (no load balancer wanted)",
                )
            )
        elif svc.get("status", {}).get("loadBalancer", {}).get("ingress"):
            problems.append(
                Problem(
                    "stale-ingress", f"Service {key}: a stale ingress (no load balancer wanted)"
                )
            )
    return wanted, problems


def _key(svc: dict[str, Any]) -> str:
    return f"{svc['metadata']['namespace']}/{svc['metadata']['name']}"


def _live_node_names(nodes: list[dict[str, Any]]) -> list[str]:
    return sorted(
        n["metadata"]["name"] for n in nodes if not n["metadata"].get("deletionTimestamp")
    )


def _uninitialised(nodes: list[dict[str, Any]]) -> list[Problem]:
    return [
        Problem("node-uninitialised", f"Node {n['metadata']['name']}: not initialised")
        for n in nodes
        if any(t["key"] == TAINT_UNINITIALIZED for t in n["spec"].get("taints", []))
    ]


def find_problems(
    nodes: list[dict[str, Any]], services: list[dict[str, Any]], cloud: dict[str, Any]
) -> list[Problem]:
    """What is still wrong with the cluster (empty once it has converged), from the Nodes
    and Services (as the API lists them) and the simulated cloud's state (`/_sim/state`)."""
    wanted, problems = _service_problems(services)
    node_names = _live_node_names(nodes)
    lbs = {lb["name"]: lb for lb in cloud["loadBalancers"]}
    served = {_key(s) for n, s in wanted.items() if n in lbs}
    for name in sorted(set(lbs) - set(wanted)):
        owner = lbs[name]["service"]
        kind = "duplicate" if owner in served else "leaked"
        problems.append(Problem(kind, f"load balancer {name} (for {owner}): {kind}"))
    for name, svc in sorted(wanted.items()):
        key = _key(svc)
        lb = lbs.get(name)
        if lb is None:
            problems.append(Problem("missing", f"Service {key}: no load balancer"))
            continue
        have = sorted((p["port"], p["protocol"], p["nodePort"]) for p in lb["ports"])
        want = sorted(
            (p["port"], p.get("protocol", "TCP"), p.get("nodePort", 0))
            for p in svc["spec"]["ports"]
        )
        if have != want:
            problems.append(
                Problem("ports", f"Service {key}: load balancer ports {have}, Service ports {want}")
            )
        if sorted(lb["nodes"]) != node_names:
            problems.append(
                Problem(
                    "backends", f"Service {key}: backends {sorted(lb['nodes'])}, Nodes {node_names}"
                )
            )
        ranges = sorted(lb.get("sourceRanges") or _ALL_SOURCES)
        if ranges != _source_ranges(svc):
            problems.append(
                Problem(
                    "source-ranges",
                    f"Service {key}: load balancer source ranges {ranges}, Service "
                    f"{_source_ranges(svc)}",
                )
            )
        status = svc.get("status", {}).get("loadBalancer", {}).get("ingress", [])
        if [i.get("ip") for i in status] != [i["ip"] for i in lb["ingress"]]:
            problems.append(
                Problem("status", f"Service {key}: status {status}, load balancer {lb['ingress']}")
            )
    routes = {
        (r["targetNode"], r["destinationCIDR"]) for r in cloud["routes"] if not r["blackhole"]
    }
    problems += _uninitialised(nodes)
    for node in nodes:
        name, spec = node["metadata"]["name"], node["spec"]
        cidrs = spec.get("podCIDRs") or []
        if not cidrs:
            problems.append(Problem("node-pod-cidr", f"Node {name}: no pod CIDR"))
        problems += [
            Problem("route-missing", f"Node {name}: no route for {c}")
            for c in cidrs
            if (name, c) not in routes
        ]
    problems += [
        Problem("route-stale", f"route {cidr} -> {target}: the Node is gone")
        for target, cidr in sorted(routes)
        if target not in node_names
    ]
    return problems


def _hostname(svc: dict[str, Any]) -> list[str]:
    return [
        i.get("hostname", "")
        for i in svc.get("status", {}).get("loadBalancer", {}).get("ingress", [])
    ]


def find_aws_problems(
    nodes: list[dict[str, Any]],
    services: list[dict[str, Any]],
    moto: Balancing,
    *,
    node_group: str,
    running: set[str],
) -> list[Problem]:
    """`find_problems` for the aws provider on moto: from the Nodes and Services and what moto
    holds (`trio_ccm_testbed.aws.balancing`; `node_group`: the Nodes' security group's name;
    `running`: the private DNS names of the running instances).

    A Node is initialised unless its instance went before the CCM could initialise it: the
    aws provider never deletes a Node without a provider ID whose name finds no instance
    (docs/aws.md), so such a Node is left out. The backends are the instances of the Nodes
    that have a provider ID.

    Per LoadBalancer Service, one load balancer `a<uid>` of either type (a change of
    `aws-load-balancer-type` is refused and the existing one kept, docs/aws.md), with the
    Service's DNS name in its status. A Classic ELB: a TCP listener per port to its
    NodePort, every Node's instance registered, its group `k8s-elb-<name>` open on the ports
    from the source ranges and let into the Nodes' group by one rule. An NLB: a TCP
    listener per port to a target group on the NodePort holding every Node's instance,
    client rules on the Nodes' group for each NodePort from each source range. And nothing
    else: no load balancer, target group, `k8s-elb-` group or Nodes' rule that no wanted
    load balancer accounts for (`leaked`, `duplicate`, `rule-leaked`); the shared MTU rule
    exactly once per client range of the NLBs."""
    wanted, problems = _service_problems(services)
    problems += _uninitialised(
        [n for n in nodes if n["spec"].get("providerID") or n["metadata"]["name"] in running]
    )
    instances = sorted(
        str(n["spec"]["providerID"]).rsplit("/", 1)[-1]
        for n in nodes
        if n["spec"].get("providerID") and not n["metadata"].get("deletionTimestamp")
    )
    groups_by_id = {g["id"]: name for name, g in moto.security_groups.items()}
    tgs_used: set[str] = set()
    clb_groups: set[str] = set()
    nlb_ports: dict[str, set[int]] = {}
    client_ranges: set[str] = set()
    expected_node_rules: set[tuple[Any, ...]] = set()
    for name in sorted(set(moto.clbs) | set(moto.nlbs)):
        tags = (moto.clbs.get(name) or moto.nlbs[name])["tags"]
        owner = tags.get(_SERVICE_NAME_TAG, "?")
        if name in moto.clbs and name in moto.nlbs:
            problems.append(
                Problem(
                    "duplicate", f"load balancer {name} (for {owner}): a Classic ELB and an NLB"
                )
            )
        if name not in wanted:
            kind = "duplicate" if any(_key(s) == owner for s in wanted.values()) else "leaked"
            problems.append(Problem(kind, f"load balancer {name} (for {owner}): {kind}"))
    for name, svc in sorted(wanted.items()):
        key = _key(svc)
        ports = svc["spec"]["ports"]
        ranges = _source_ranges(svc)
        clb, nlb = moto.clbs.get(name), moto.nlbs.get(name)
        lb = clb or nlb
        if lb is None:
            problems.append(Problem("missing", f"Service {key}: no load balancer"))
            continue
        if _hostname(svc) != [lb["dns"]]:
            problems.append(
                Problem(
                    "status", f"Service {key}: status {_hostname(svc)}, load balancer {lb['dns']}"
                )
            )
        if clb is not None:
            have = sorted((li[1], li[3]) for li in clb["listeners"])
            want = sorted((p["port"], p.get("nodePort", 0)) for p in ports)
            if have != want:
                problems.append(
                    Problem(
                        "ports",
                        f"Service {key}: Classic ELB listeners {have}, Service ports {want}",
                    )
                )
            if clb["instances"] != instances:
                problems.append(
                    Problem(
                        "backends",
                        f"Service {key}: instances {clb['instances']}, Nodes {instances}",
                    )
                )
            group = moto.security_groups.get(f"k8s-elb-{name}")
            if group is None:
                problems.append(Problem("rule-missing", f"Service {key}: no group k8s-elb-{name}"))
                continue
            clb_groups.add(group["id"])
            opened = sorted({(r[1], r[3]) for r in group["ingress"] if r[0] == "tcp"})
            want_open = sorted({(p["port"], r) for p in ports for r in ranges})
            if opened != want_open:
                problems.append(
                    Problem(
                        "source-ranges",
                        f"Service {key}: k8s-elb-{name} opens {opened}, Service {want_open}",
                    )
                )
            expected_node_rules.add(("-1", group["id"]))
        else:
            assert nlb is not None
            have_l = sorted((li[0], li[1]) for li in nlb["listeners"])
            want_l = sorted((p["port"], p.get("protocol", "TCP")) for p in ports)
            if have_l != want_l:
                problems.append(
                    Problem(
                        "ports", f"Service {key}: NLB listeners {have_l}, Service ports {want_l}"
                    )
                )
            node_ports = {p.get("nodePort", 0) for p in ports}
            nlb_ports[name] = node_ports
            for _port, _proto, tg_name, _cert in nlb["listeners"]:
                tgs_used.add(tg_name)
                tg = moto.target_groups.get(tg_name)
                if tg is None:
                    problems.append(Problem("missing", f"Service {key}: no target group {tg_name}"))
                    continue
                if tg["Port"] not in node_ports:
                    problems.append(
                        Problem(
                            "ports",
                            f"Service {key}: target group {tg_name} on port {tg['Port']}, "
                            f"NodePorts {sorted(node_ports)}",
                        )
                    )
                if tg["targets"] != instances:
                    problems.append(
                        Problem(
                            "backends",
                            f"Service {key}: target group {tg_name} targets {tg['targets']}, "
                            f"Nodes {instances}",
                        )
                    )
            client_ranges.update(ranges)
            for np in node_ports:
                for r in ranges:
                    expected_node_rules.add(("tcp", np, r, f"{NLB_CLIENT_RULE}={name}"))
    for tg_name in sorted(set(moto.target_groups) - tgs_used):
        owner = moto.target_groups[tg_name]["tags"].get(_SERVICE_NAME_TAG, "?")
        problems.append(Problem("leaked", f"target group {tg_name} (for {owner}): leaked"))
    for group_name, group in sorted(moto.security_groups.items()):
        if group_name.startswith("k8s-elb-") and group["id"] not in clb_groups:
            problems.append(Problem("leaked", f"security group {group_name}: leaked"))
    rules = moto.security_groups.get(node_group, {"ingress": []})["ingress"]
    seen: set[tuple[Any, ...]] = set()
    mtu: set[str] = set()
    for protocol, low, _high, source, description in rules:
        if description == NLB_MTU_RULE:
            mtu.add(source)
            continue
        if source in groups_by_id:
            found: tuple[Any, ...] = (protocol, source)
        elif description.startswith(f"{NLB_HEALTH_RULE}="):
            owner = description.split("=", 1)[1]
            if low not in nlb_ports.get(owner, set()):
                problems.append(
                    Problem(
                        "rule-leaked",
                        f"Nodes' rule {protocol} {low} from {source} ({description}): "
                        "no such NLB port",
                    )
                )
            continue
        else:
            found = (protocol, low, source, description)
        seen.add(found)
        if found not in expected_node_rules:
            problems.append(
                Problem("rule-leaked", f"Nodes' rule {found}: no load balancer wants it")
            )
    problems += [
        Problem("rule-missing", f"Nodes' rule {rule}: missing")
        for rule in sorted(expected_node_rules - seen, key=str)
    ]
    if mtu != client_ranges:
        problems.append(
            Problem(
                "rule-leaked" if mtu - client_ranges else "rule-missing",
                f"Nodes' MTU rules from {sorted(mtu)}, NLB client ranges {sorted(client_ranges)}",
            )
        )
    return problems


_FIP_MARK: Final = re.compile(
    r"Floating IP for Kubernetes external service (?P<ns>[^/ ]+)/(?P<name>\S+) "
    r"from cluster (?P<cluster>\S+)"
)


def find_openstack_problems(
    nodes: list[dict[str, Any]],
    services: list[dict[str, Any]],
    lbs: list[dict[str, Any]],
    fips: list[dict[str, Any]],
    *,
    cluster: str,
) -> list[Problem]:
    """`find_problems` for the openstack provider on the real Octavia and Neutron: from the
    Nodes and Services and what OpenStack holds (`lbs`: each Octavia load balancer as
    `{id, name, provisioning_status, vip_port_id, listeners: [(port, protocol)]}`; `fips`:
    each floating IP as `{floating_ip_address, description, port_id}`).

    Per LoadBalancer Service, one load balancer `kube_service_<cluster>_<ns>_<name>`, ACTIVE,
    with one listener per port, and one floating IP made for it (OCCM's description), on its
    VIP port, whose address is the Service's ingress. And nothing else of the cluster: a
    load balancer or floating IP no Service wants is `leaked`, a second one `duplicate`."""
    wanted, problems = _service_problems(services)
    problems += _uninitialised(nodes)
    prefix = f"kube_service_{cluster}_"
    by_name: dict[str, list[dict[str, Any]]] = {}
    for lb in lbs:
        if lb["name"].startswith(prefix):
            by_name.setdefault(lb["name"], []).append(lb)
    wanted_names = {
        f"{prefix}{s['metadata']['namespace']}_{s['metadata']['name']}": s for s in wanted.values()
    }
    for name, found in sorted(by_name.items()):
        if name not in wanted_names:
            problems += [
                Problem("leaked", f"load balancer {name} ({lb['id']}): leaked") for lb in found
            ]
        elif len(found) > 1:
            ids = [lb["id"] for lb in found]
            problems.append(
                Problem("duplicate", f"load balancer {name}: {len(found)} of them {ids}")
            )
    fips_of: dict[str, list[dict[str, Any]]] = {}
    for fip in fips:
        mark = _FIP_MARK.search(fip.get("description") or "")
        if mark is None or mark["cluster"].split(" ", 1)[0] != cluster:
            continue
        key = f"{mark['ns']}/{mark['name']}"
        fips_of.setdefault(key, []).append(fip)
    keys = {_key(s) for s in wanted.values()}
    for key, found in sorted(fips_of.items()):
        if key not in keys:
            problems += [
                Problem("leaked", f"floating IP {f['floating_ip_address']} (for {key}): leaked")
                for f in found
            ]
        elif len(found) > 1:
            addresses = [f["floating_ip_address"] for f in found]
            problems.append(Problem("duplicate", f"Service {key}: floating IPs {addresses}"))
    for name, svc in sorted(wanted_names.items()):
        key = _key(svc)
        found = by_name.get(name, [])
        if not found:
            problems.append(Problem("missing", f"Service {key}: no load balancer"))
            continue
        lb = found[0]
        if lb["provisioning_status"] != "ACTIVE":
            problems.append(
                Problem("status", f"Service {key}: load balancer {lb['provisioning_status']}")
            )
        have = sorted((int(p), str(proto)) for p, proto in lb["listeners"])
        want = sorted((p["port"], p.get("protocol", "TCP")) for p in svc["spec"]["ports"])
        if have != want:
            problems.append(
                Problem("ports", f"Service {key}: listeners {have}, Service ports {want}")
            )
        mine = fips_of.get(key, [])
        if not mine:
            problems.append(Problem("missing", f"Service {key}: no floating IP"))
            continue
        if mine[0].get("port_id") != lb["vip_port_id"]:
            problems.append(
                Problem(
                    "leaked",
                    f"Service {key}: floating IP {mine[0]['floating_ip_address']} is not on "
                    "its load balancer's VIP port",
                )
            )
        ingress = [
            i.get("ip") for i in svc.get("status", {}).get("loadBalancer", {}).get("ingress", [])
        ]
        if ingress != [mine[0]["floating_ip_address"]]:
            problems.append(
                Problem(
                    "status",
                    f"Service {key}: ingress {ingress}, floating IP "
                    f"{mine[0]['floating_ip_address']}",
                )
            )
    return problems


def check_invariants(
    nodes: list[dict[str, Any]], services: list[dict[str, Any]], cloud: dict[str, Any]
) -> list[str]:
    """`find_problems`, as messages."""
    return [p.message for p in find_problems(nodes, services, cloud)]


async def run_chaos(
    config: ChaosConfig, *, clock: trio.testing.MockClock | None = None
) -> ChaosReport:
    """One chaos run; see the module docstring. `clock` enables whole-process freezes."""
    report = ChaosReport(config)
    duration, _deadline, _retry = LEASES[config.lease]
    began = trio.current_time()
    world = _World(config)
    async with world.http, trio.open_nursery() as nursery:
        for _ in range(config.nodes):
            world.add_node()
        for _ in range(config.services):
            world.add_service()
        if config.cloud_faults:
            world.cloud.faults.latency("loadbalancers", fixed_s=0.2, jitter_s=6.0)
            world.cloud.faults.error("loadbalancers", status=500, probability=0.1)
            world.cloud.faults.error("routes", status=500, probability=0.1)
        replicas = [_Replica(f"ccm-{i}", world, nursery) for i in range(config.replicas)]
        for replica in replicas:
            await replica.start()
        workload = trio.CancelScope()
        nursery.start_soon(_workload, world, workload)
        for _ in range(config.disruptions):
            await trio.sleep(world.rng.uniform(3.0, 3.0 * duration))
            await _disrupt(world, replicas, report, clock)
            for replica in replicas:
                if not replica.running and world.rng.random() < 0.7:
                    await replica.start()
        workload.cancel()
        world.cloud.faults.clear()
        for replica in replicas:
            if not replica.running:
                await replica.start()
        calm = trio.current_time()
        with trio.move_on_after(_CONVERGE_LIMIT_S):
            # State in the emulator and the cloud has no change feed to wait on: look again.
            while await world.problems():  # noqa: ASYNC110
                await trio.sleep(1.0)
            report.converged_s = trio.current_time() - calm
        report.problems = await world.problems()
        for replica in replicas:
            replica.kill()
        nursery.cancel_scope.cancel()
    lease_writes = [w for recorder in world.recorders for w in recorder.writes]
    writes = [w for recorder in world.cloud_recorders for w in recorder.writes]
    report.cloud_writes = Counter(w.replica for w in writes)
    report.lease_writes = len(lease_writes)
    report.lease_history = sorted(lease_writes, key=lambda w: w.version)
    report.takeovers = _takeovers(lease_writes)
    report.handovers_s = _handovers(world.graceful_leaders, lease_writes)
    report.violations = [
        str(v) for v in violations(lease_writes, writes, lease_duration_s=duration)
    ]
    report.virtual_s = trio.current_time() - began
    return report


_STEP_LIMIT_S: Final = 60.0  # a workload step takes no virtual time; this only bounds a hang


async def _workload(world: _World, scope: trio.CancelScope) -> None:
    with scope:
        while True:
            await trio.sleep(world.rng.uniform(0.5, 3.0))
            # A step is whole even when the workload is stopped in the middle of it: an
            # instance terminated without its Node marked Unknown (what kube-controller-
            # manager would do) is a Ready Node that no CCM deletes, with a route the cloud
            # blackholes (seed 137, short lease, about 1 run in 10 before this shield).
            with trio.CancelScope(shield=True), trio.move_on_after(_STEP_LIMIT_S):
                await world.workload_step()


async def _disrupt(
    world: _World,
    replicas: list[_Replica],
    report: ChaosReport,
    clock: trio.testing.MockClock | None,
) -> None:
    rng = world.rng
    running = [r for r in replicas if r.running]
    if not running:
        return
    actions: list[Action] = [a for a in ACTIONS if a != "freeze" or clock is not None]
    action = rng.choice(actions)
    # The leader is the interesting target most of the time.
    leaders = [r for r in running if r.leading]
    target = leaders[0] if leaders and rng.random() < 0.8 else rng.choice(running)
    report.actions[action] += 1
    if action == "graceful":
        if target.leading:
            world.graceful_leaders.append((target.name, trio.current_time()))
        target.shut_down()
    elif action == "double":
        target.shut_down()
        await trio.sleep(rng.uniform(0.0, 3.0))
        target.shut_down(force=True)
    elif action == "kill":
        target.kill()
    elif action == "partition":
        target.partition(rng.uniform(1.0, 20.0))
    elif clock is not None:  # freeze: time passes, no task runs
        clock.jump(rng.uniform(1.0, 20.0))
        await trio.lowlevel.checkpoint()


def _takeovers(lease_writes: list[LeaseWrite]) -> int:
    holders = [w.holder for w in sorted(lease_writes, key=lambda w: w.version) if w.holder]
    return sum(1 for a, b in itertools.pairwise(holders) if a != b)


def _handovers(graceful: list[tuple[str, float]], lease_writes: list[LeaseWrite]) -> list[float]:
    """For each graceful shutdown of a leader: the time until another replica acquired."""
    ordered = sorted(lease_writes, key=lambda w: w.version)
    found: list[float] = []
    for name, at in graceful:
        nxt = next((w.at for w in ordered if w.at > at and w.holder and w.holder != name), None)
        if nxt is not None:
            found.append(nxt - at)
    return found


# -- the slow cloud (issue 27) ------------------------------------------------------------
SLOW_CLOUD_KINDS: Final = frozenset(
    {"backends", "ports", "source-ranges", "missing", "leaked", "duplicate", "route-stale"}
)
"""What a slow cloud can leave wrong in the cloud itself: a load balancer or a route."""


@dataclass(frozen=True)
class SlowCloudConfig:
    """One slow-cloud run: after convergence, every cloud call is held for `hold_s` (twice
    the sim provider's 10 s timeout by default) and then applied, for `slow_s`, while the
    workload changes Services and Nodes; then the fault clears and the cloud is watched for
    `watch_s`."""

    seed: int = 1
    nodes: int = 8
    services: int = 6
    slow_s: float = 120.0
    hold_s: float = 20.0
    watch_s: float = 300.0


@dataclass
class SlowCloudReport:
    """What a slow-cloud run found."""

    config: SlowCloudConfig
    stale_after_s: float = math.inf
    """From the fault clearing to the last moment any load balancer or route differed from
    what it should be (inf: it still differed when the watch ended)."""
    landed_late: int = 0
    """Requests the cloud applied after holding them."""
    kinds: Counter[str] = field(default_factory=Counter)
    """Kinds of problem seen after the fault cleared (counted once per look)."""
    problems: list[str] = field(default_factory=list)
    """Load balancer and route problems left when the watch ended."""


async def run_slow_cloud(config: SlowCloudConfig) -> SlowCloudReport:
    """One slow-cloud run (one replica); see `SlowCloudConfig`. Run it under
    `trio.testing.MockClock(autojump_threshold=0)`."""
    report = SlowCloudReport(config)
    world = _World(ChaosConfig(seed=config.seed, replicas=1, cloud_faults=False))
    async with world.http, trio.open_nursery() as nursery:
        for _ in range(config.nodes):
            world.add_node()
        for _ in range(config.services):
            world.add_service()
        replica = _Replica("ccm-0", world, nursery)
        await replica.start()
        with trio.move_on_after(_CONVERGE_LIMIT_S):
            while await world.problems():  # noqa: ASYNC110 - no change feed to wait on
                await trio.sleep(1.0)
        slow = world.cloud.faults.late("*", delay_s=config.hold_s)
        workload = trio.CancelScope()
        nursery.start_soon(_workload, world, workload)
        await trio.sleep(config.slow_s)
        workload.cancel()
        world.cloud.faults.remove(slow)
        cleared = trio.current_time()
        last_bad: float | None = None
        left: list[Problem] = []
        while trio.current_time() < cleared + config.watch_s:
            found = find_problems(
                await world.items("/api/v1/nodes"),
                await world.items("/api/v1/services"),
                world.cloud.state(),
            )
            left = [p for p in found if p.kind in SLOW_CLOUD_KINDS]
            report.kinds.update(p.kind for p in left)
            if left:
                last_bad = trio.current_time()
            await trio.sleep(0.5)
        report.stale_after_s = math.inf if left else 0.0 if last_bad is None else last_bad - cleared
        report.problems = [p.message for p in left]
        report.landed_late = world.cloud.faults.landed_late
        replica.kill()
        nursery.cancel_scope.cancel()
    return report
