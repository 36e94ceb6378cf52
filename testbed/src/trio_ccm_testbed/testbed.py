"""A simulated fleet of kubelets over the emulator and the simulated cloud.

`Testbed(api, cloud)` plays, for every instance of the simulated cloud, the kubelet that
would run on it with `--cloud-provider=external`, plus the part of kube-controller-manager
that marks silent Nodes `Unknown`:

- a **running** instance gets its Node registered, as such a kubelet registers it: label
  `kubernetes.io/hostname`, the taint `node.cloudprovider.kubernetes.io/uninitialized=true:
  NoSchedule`, one `Hostname` address (the cloud fills in the IPs, through the CCM), node
  info, capacity, and the conditions `Ready=True` (`KubeletReady`) and `MemoryPressure`,
  `DiskPressure`, `PIDPressure` `=False`, with `lastHeartbeatTime` and `lastTransitionTime`;
- while it runs, its kubelet patches the conditions' `lastHeartbeatTime` every
  `heartbeat_s`, the first beat at a random (seeded) offset in `(0, heartbeat_s]` after
  registration (for the Nodes of the instances running at start: after all of them are
  registered, so that the beats do not slow the world's build), so a large fleet spreads its
  writes over the period;
- **stopped** or **terminated** (or gone from the cloud): the heartbeats stop and the Node's
  conditions turn `Unknown` (reason `NodeStatusUnknown`, message `Kubelet stopped posting
  node status.`), as the node lifecycle controller of kube-controller-manager writes them
  (here at once, without its 40 s grace period);
- **started** again: the kubelet starts, registers the Node again if it is gone (else finds
  it registered) and posts `Ready=True` again;
- each running kubelet keeps its **node Lease** in `kube-node-lease` (name and holder: the
  Node's name, `leaseDurationSeconds` 40, owned by its Node so that deleting the Node
  deletes it), created after registration and renewed every `node_lease_s / 4` (10 s), as
  upstream's kubelet does; a stopped kubelet stops renewing it. `node_lease_s=None` keeps
  no Leases.

`add_nodes(n, initialised=True)` has those kubelets register their Nodes as a CCM will have
left them in a running cluster (the provider ID, the instance-type, zone and region labels
and their legacy twins, the instance's IPs, no uninitialized taint), so that a large cluster
can be stood up in its steady state; other instances (the admin API's) join as new Nodes.

A kubelet whose Node is deleted while its instance runs does not register it again (a
real kubelet registers once per start). The cloud is polled every `poll_s` (1 s) through
the `SimCloud` Python API (what changed since the last poll, `SimCloud.touched_since`; any
other fleet is listed whole), so instances added, stopped, started or terminated through the
simulated cloud's HTTP admin API (docs/sim-cloud.md) take effect within that time;
`add_nodes` adds instances and takes effect at once. Kubelets write through the emulator's
in-process transport, so all of this runs under `trio.testing.MockClock`; given a
`KubeClient` instead of the emulator, they write through it (an emulator in another process,
over loopback HTTP: `trio_ccm_testbed.split`), at most `max_in_flight` (64) writes
(heartbeats, Leases) at once, and `max_registering` (as many) registrations besides: a
joining kubelet does not wait behind the fleet's heartbeats.

```python
api, cloud = ApiServer(seed=1), SimCloud(seed=1)
testbed = Testbed(api, cloud, heartbeat_s=60.0)
testbed.add_nodes(50)
await nursery.start(testbed.serve)   # returns once the 50 Nodes are registered
```

`trio-ccm testbed` serves both over loopback HTTP with such a fleet (see README.md).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, NoReturn, Protocol

import msgspec
import structlog
import trio

from trio_ccm.cloud.sim.instances import provider_id
from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.kube.errors import AlreadyExistsError, KubeError, NotFoundError
from trio_ccm.kube.objects import EVENTS, LEASES, NODES, SERVICES, Event, Node, Service
from trio_ccm.kube.patches import STRATEGIC, JSONValue, Patch
from trio_ccm.kube.wellknown import (
    CONDITION_READY,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_INSTANCE_TYPE_LEGACY,
    LABEL_REGION,
    LABEL_REGION_LEGACY,
    LABEL_ZONE,
    LABEL_ZONE_LEGACY,
    TAINT_UNINITIALIZED,
)
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.cloud import Instance, SimCloud
from trio_ccm_testbed.kubeproxy import KubeProxy

__all__ = [
    "INSTANCE_TYPES",
    "KUBELET_VERSION",
    "Census",
    "Fleet",
    "FleetInstance",
    "FleetRoute",
    "StatusWriter",
    "Testbed",
    "TestbedStatistics",
    "launch_instances",
    "node_manifest",
]

log = structlog.get_logger("trio_ccm_testbed.testbed")

KUBELET_VERSION: Final = "v1.33.0"
INSTANCE_TYPES: Final = ("sim.small", "sim.medium", "sim.large")
"""Instance types `add_nodes` cycles through."""
ZONE_SUFFIXES: Final = ("a", "b", "c")
"""`add_nodes` spreads instances over `<region>a`, `<region>b` and `<region>c`."""

_NAME_RE: Final = re.compile(r"node-(\d+)")
_REGISTER_RETRY_S: Final = 1.0  # a failed registration is tried again after this long
NODE_LEASE_S: Final = 40.0  # upstream's nodeLeaseDurationSeconds; renewed every quarter
NODE_LEASE_NAMESPACE: Final = "kube-node-lease"
_PRESSURE_CONDITIONS: Final = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)
_READY_REASON: Final = "KubeletReady"
_READY_MESSAGE: Final = "kubelet is posting ready status"
UNKNOWN_REASON: Final = "NodeStatusUnknown"
UNKNOWN_MESSAGE: Final = "Kubelet stopped posting node status."


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _format_time(moment: dt.datetime) -> str:
    """metav1.Time: RFC 3339, UTC, whole seconds."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(status: str, stamp: str, *, heartbeat: bool, transition: bool) -> list[JSONValue]:
    """The four kubelet conditions, `Ready=status` (True or Unknown) and the pressures."""
    conditions: list[JSONValue] = []
    rows = [(CONDITION_READY, _READY_REASON, _READY_MESSAGE), *_PRESSURE_CONDITIONS]
    for kind, reason, message in rows:
        if status == "Unknown":
            value, reason, message = "Unknown", UNKNOWN_REASON, UNKNOWN_MESSAGE
        else:
            value = "True" if kind == CONDITION_READY else "False"
        condition: dict[str, JSONValue] = {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
        }
        if heartbeat:
            condition["lastHeartbeatTime"] = stamp
        if transition:
            condition["lastTransitionTime"] = stamp
        conditions.append(condition)
    return conditions


class FleetInstance(Protocol):
    """An instance as its kubelet knows it: the Node is named `name`."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def hostname(self) -> str: ...
    @property
    def state(self) -> str:
        """ "running" (its kubelet runs), or anything else (it is silent)."""
        ...


class StatusWriter(Protocol):
    """A lean door for the fleet's most frequent writes: the kubelets' status patch (333 a
    second at 100,000 Nodes, where the kube client's httpx machinery cost the kubelets'
    process more than the socket did), and a join's registrations."""

    async def patch_status(self, name: str, body: bytes) -> None:
        """Send `body`, a strategic-merge patch, to Node `name`'s status subresource.
        Raises `NotFoundError` when the Node is gone, another `KubeError` when refused."""
        ...

    async def register_node(self, body: bytes) -> None:
        """Create the Node `body` (JSON). Raises `AlreadyExistsError` when it exists,
        another `KubeError` when refused."""
        ...


class FleetRoute(Protocol):
    @property
    def blackhole(self) -> bool: ...


class Fleet(Protocol):
    """The cloud whose instances the kubelets follow: `SimCloud`, or another cloud's
    instances seen through a snapshot (`trio_ccm_testbed.aws.MotoFleet`). Read on the Trio
    thread, so these must not block."""

    def instances(self) -> Sequence[FleetInstance]: ...
    def routes(self) -> Sequence[FleetRoute]: ...
    def call_counts(self) -> Mapping[str, int]:
        """The CCM's calls to the cloud so far, by method or action."""
        ...


def node_manifest(
    instance: FleetInstance, *, now: dt.datetime, initialised: bool = False
) -> dict[str, JSONValue]:
    """The Node a kubelet started with `--cloud-provider=external` registers for `instance`;
    `initialised` (a simulated cloud's instance only): as the sim provider's CCM then leaves
    it (module docstring)."""
    stamp = _format_time(now)
    hostname = instance.hostname or instance.name
    labels: dict[str, JSONValue] = {
        LABEL_HOSTNAME: hostname,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
    }
    spec: dict[str, JSONValue] = {
        "taints": [{"key": TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule"}],
    }
    addresses: list[JSONValue] = [{"type": "Hostname", "address": hostname}]
    if initialised:
        if not isinstance(instance, Instance):
            raise TypeError(
                f"initialised Nodes are for the simulated cloud's instances: {instance!r}"
            )
        for current, legacy, value in (
            (LABEL_INSTANCE_TYPE, LABEL_INSTANCE_TYPE_LEGACY, instance.instance_type),
            (LABEL_ZONE, LABEL_ZONE_LEGACY, instance.zone),
            (LABEL_REGION, LABEL_REGION_LEGACY, instance.region),
        ):
            labels[current] = labels[legacy] = value
        spec = {"providerID": provider_id(instance.zone, instance.id)}
        cloud: list[JSONValue] = [
            {"type": kind, "address": ip}
            for kind, ips in (
                ("InternalIP", instance.internal_ips),
                ("ExternalIP", instance.external_ips),
            )
            for ip in ips
        ]
        addresses = cloud + addresses
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": instance.name,
            "labels": labels,
        },
        "spec": spec,
        "status": {
            "addresses": addresses,
            "conditions": _conditions("True", stamp, heartbeat=True, transition=True),
            "capacity": {"cpu": "2", "memory": "4012836Ki", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "3910436Ki", "pods": "110"},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": instance.id,
                "systemUUID": instance.id,
                "bootID": instance.id,
                "kernelVersion": "6.8.0-sim",
                "osImage": "Sim Linux 1.0",
                "containerRuntimeVersion": "containerd://2.0.0",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def launch_instances(cloud: SimCloud, count: int) -> list[Instance]:
    """Launch `count` running instances `node-NNNN` in `cloud` (numbered on from the highest
    such name), spread over three zones and three instance types (`Testbed.add_nodes`). Two
    clouds of the same seed and pools launch the same instances (ids, IPs)."""
    if count < 0:
        raise ValueError(f"count={count}: cannot add a negative number of nodes")
    highest = 0
    for instance in cloud.instances():
        match = _NAME_RE.fullmatch(instance.name)
        if match:
            highest = max(highest, int(match.group(1)))
    added = []
    for number in range(highest + 1, highest + 1 + count):
        index = number - 1
        added.append(
            cloud.add_instance(
                f"node-{number:04d}",
                zone=f"{cloud.region}{ZONE_SUFFIXES[index % len(ZONE_SUFFIXES)]}",
                instance_type=INSTANCE_TYPES[index % len(INSTANCE_TYPES)],
            )
        )
    return added


@dataclass(frozen=True)
class TestbedStatistics:
    """What the simulated kubelets have done so far."""

    __test__ = False  # not a pytest test class, despite the name

    instances: int
    """Instances of the cloud being tracked (not gone)."""
    running: int
    """Kubelets running (their instance runs)."""
    registered: int
    """Kubelets whose Node is registered and which post heartbeats."""
    registrations: int
    """Nodes created (or found already there) so far."""
    heartbeats: int
    """Heartbeat status patches written so far."""
    heartbeat_failures: int
    """Heartbeat patches that failed (retried at the next period)."""
    unknown: int
    """Times a Node was marked Ready=Unknown because its instance stopped or went away."""


@dataclass(frozen=True)
class Census:
    """A count of the cluster and the cloud, as the demo shows it."""

    nodes: int
    """Nodes in the API."""
    initialised: int
    """Nodes without the uninitialized taint and with a provider ID."""
    cloud_calls: Counter[str]
    """The CCM's calls to the cloud, by method (the simulated cloud's call log) or by
    `service:action` (moto's counters)."""
    events: Counter[str]
    """Event objects in the API, by reason."""
    event_count: int
    """Sum of the Events' `count` (aggregated repeats included)."""
    zones: Counter[str]
    """Initialised Nodes by `topology.kubernetes.io/zone`."""
    load_balancers: int = 0
    """Services of type LoadBalancer (without a loadBalancerClass)."""
    external_ips: dict[str, str] = field(default_factory=dict)
    """"namespace/name" -> first ingress IP or hostname, for those that have one."""
    pod_cidrs: int = 0
    """Nodes with spec.podCIDRs."""
    routes: int = 0
    """Routes in the cloud that are not blackholes."""


@dataclass(eq=False)
class _Kubelet:
    """The simulated kubelet of one instance."""

    instance_id: str
    name: str
    offset_s: float
    running: bool = False
    registered: bool = False
    ready: str = ""  # the Ready status this kubelet (or the "KCM") last wrote
    scope: trio.CancelScope | None = None
    up: trio.Event = field(default_factory=trio.Event)  # registered (or gave up) this start
    done: trio.Event = field(default_factory=trio.Event)  # this start's task has ended


class Testbed:
    """Kubelets for the instances of `cloud`, registering Nodes in `api` (module docstring).

    `api` is the emulator (written to in-process), or a client of one (`KubeClient`).
    `cloud` is the simulated cloud, or any `Fleet` (`add_nodes` needs the simulated cloud).

    `token` is the bearer token to present when `api` requires one. `now` is the wall clock
    written into condition timestamps. `seed` seeds the heartbeat offsets. `status_writer`,
    when given, sends the status patches (heartbeats, Ready=Unknown) and the registrations
    (creates of Nodes) instead of `api`.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        api: ApiServer | KubeClient,
        cloud: Fleet,
        *,
        heartbeat_s: float = 60.0,
        poll_s: float = 1.0,
        seed: int = 0,
        token: str | None = None,
        now: Callable[[], dt.datetime] = _utc_now,
        node_lease_s: float | None = NODE_LEASE_S,
        pods: int | None = None,
        max_in_flight: int = 64,
        status_writer: StatusWriter | None = None,
        max_registering: int | None = None,
    ) -> None:
        if not (math.isfinite(heartbeat_s) and heartbeat_s > 0):
            raise ValueError(f"heartbeat_s={heartbeat_s!r}: must be a positive number of seconds")
        if not (math.isfinite(poll_s) and poll_s > 0):
            raise ValueError(f"poll_s={poll_s!r}: must be a positive number of seconds")
        self.api = api if isinstance(api, ApiServer) else None
        self.cloud = cloud
        if node_lease_s is not None and not (math.isfinite(node_lease_s) and node_lease_s >= 1):
            raise ValueError(f"node_lease_s={node_lease_s!r}: must be at least 1 second, or None")
        self.heartbeat_s = heartbeat_s
        self.poll_s = poll_s
        self.node_lease_s = node_lease_s
        self._now = now
        self._rng = random.Random(f"{seed}/testbed")  # noqa: S311 - spread, not secrets
        self._kube = (
            api
            if isinstance(api, KubeClient)
            else KubeClient(
                ConnectionConfig(
                    server="http://emulator",
                    credentials=StaticCredentials(token=token),
                    source="trio-ccm testbed (in-process)",
                ),
                qps=0,  # kubelets each have their own budget; the fleet's is not limited
                component="testbed-kubelets",
                transport=api.transport(),
            )
        )
        # Writes in flight at once: a fleet of 100,000 kubelets registering together over
        # HTTP would queue 100,000 requests in the client's connection pool (whose queue
        # is walked on every release); a real API server's clients are as many processes.
        # Registrations have slots of their own: a kubelet that joins does not queue behind
        # the fleet's heartbeats (333 a second at 100,000 Nodes), as a real one does not.
        self._writes = trio.CapacityLimiter(max_in_flight)
        self._registering = trio.CapacityLimiter(max_registering or max_in_flight)
        self._status_writer = status_writer
        self.kube_proxy: KubeProxy | None = None
        """kube-proxy and the pods on every Node (`pods`: the default replica count per
        Service; needs the simulated cloud with a loopback internal network)."""
        if pods is not None:
            if not isinstance(cloud, SimCloud):
                raise TypeError(f"pods are served on the simulated cloud's Nodes, not {cloud!r}")
            self.kube_proxy = KubeProxy(self._kube, cloud, replicas=pods)
        self._kubelets: dict[str, _Kubelet] = {}
        self._initialised: set[str] = set()  # instances whose Node registers initialised
        self._registered: set[str] = set()  # instances whose Node a world builder registered
        self._cursor: int | None = None  # the simulated cloud's changes read so far
        self._wake = trio.Event()
        self._built = trio.Event()  # the Nodes of the instances running at start registered
        self._registrations = 0
        self._heartbeats = 0
        self._heartbeat_failures = 0
        self._unknown = 0

    @property
    def kube(self) -> KubeClient:
        """The kubelets' client of the emulator (in-process), for the testbed's own tools."""
        return self._kube

    # -- the fleet ------------------------------------------------------------------------
    def add_nodes(
        self, count: int, *, initialised: bool = False, registered: bool = False
    ) -> list[Instance]:
        """Launch `count` running instances `node-NNNN` (numbered on from the highest such
        name), spread over three zones and three instance types; their Nodes register as
        soon as `serve` sees them (at once when it runs), `initialised` or as new Nodes.
        `registered`: their Nodes are in the API already (`register_nodes` put them there,
        for the same instances of a cloud with the same seed): each kubelet starts as one
        restarting on its registered Node, and only heartbeats."""
        cloud = self.cloud
        if not isinstance(cloud, SimCloud):
            raise TypeError(
                f"add_nodes launches instances in the simulated cloud, not in {cloud!r}: "
                "launch them in that cloud (the testbed follows within poll_s)"
            )
        added = launch_instances(cloud, count)
        if initialised:
            self._initialised.update(instance.id for instance in added)
        if registered:
            self._registered.update(instance.id for instance in added)
        self._wake.set()
        return added

    async def add_load_balancer_services(
        self, count: int, *, namespace: str = "default", prefix: str = "demo-web"
    ) -> list[str]:
        """Create `count` Services of type LoadBalancer (`demo-web-N`, port 80 -> 8080), as a
        user would; returns their names."""
        names = []
        for index in range(count):
            name = f"{prefix}-{index}"
            await self._kube.create(
                SERVICES,
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {
                        "type": "LoadBalancer",
                        "selector": {"app": name},
                        "ports": [
                            {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}
                        ],
                    },
                },
                namespace=namespace,
            )
            names.append(name)
        return names

    def statistics(self) -> TestbedStatistics:
        kubelets = list(self._kubelets.values())
        return TestbedStatistics(
            instances=len(kubelets),
            running=sum(k.running for k in kubelets),
            registered=sum(k.registered for k in kubelets),
            registrations=self._registrations,
            heartbeats=self._heartbeats,
            heartbeat_failures=self._heartbeat_failures,
            unknown=self._unknown,
        )

    async def census(self) -> Census:
        """Count the Nodes (initialised or not) and the Events in the API, and the cloud calls."""
        nodes = await self._kube.list(NODES, type=Node)
        events = await self._kube.list(EVENTS, type=Event)
        initialised = [
            node
            for node in nodes.items
            if node.spec.provider_id
            and not any(t.key == TAINT_UNINITIALIZED for t in node.spec.taints)
        ]
        services = await self._kube.list(SERVICES, type=Service)
        wanted = [
            svc
            for svc in services.items
            if svc.spec.type == "LoadBalancer" and svc.spec.load_balancer_class is None
        ]
        external = {
            svc.key: ingress[0].ip or ingress[0].hostname
            for svc in wanted
            if (ingress := svc.status.load_balancer.ingress)
        }
        return Census(
            pod_cidrs=sum(1 for node in nodes.items if node.spec.pod_cidrs),
            routes=sum(1 for route in self.cloud.routes() if not route.blackhole),
            load_balancers=len(wanted),
            external_ips=external,
            nodes=len(nodes.items),
            initialised=len(initialised),
            cloud_calls=Counter(self.cloud.call_counts()),
            events=Counter(event.reason for event in events.items),
            event_count=sum(max(event.count, 1) for event in events.items),
            zones=Counter(node.metadata.labels.get(LABEL_ZONE, "") for node in initialised),
        )

    # -- running ----------------------------------------------------------------------------
    async def serve(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Run the kubelets until cancelled; `task_status.started()` once the Nodes of the
        instances running at start are registered."""
        try:
            async with trio.open_nursery() as nursery:
                await self._sync(nursery)
                async with trio.open_nursery() as progress:
                    progress.start_soon(self._log_registering)
                    for kubelet in list(self._kubelets.values()):
                        if kubelet.running:
                            await kubelet.up.wait()
                    progress.cancel_scope.cancel()
                if self.kube_proxy is not None:
                    await nursery.start(self.kube_proxy.serve)
                log.info(
                    "testbed.started", nodes=sum(k.registered for k in self._kubelets.values())
                )
                self._built.set()
                task_status.started()
                while True:
                    with trio.move_on_after(self.poll_s):
                        await self._wake.wait()
                    self._wake = trio.Event()
                    await self._sync(nursery)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await self._kube.aclose()

    async def _log_registering(self) -> None:
        """Every 5 s until the Nodes at start are registered: how many are (a world of
        100,000 Nodes takes minutes to build; bench/scale.py shows these lines)."""
        while True:
            await trio.sleep(5.0)
            log.info(
                "testbed.registering",
                registered=sum(k.registered for k in self._kubelets.values()),
                kubelets=len(self._kubelets),
            )

    def _changes(self) -> tuple[Sequence[FleetInstance], list[str]]:
        """The instances to compare with their kubelets, and the ids of kubelets whose
        instance is gone. From the simulated cloud, only what changed since the last call
        (`SimCloud.touched_since`: a walk of 100,000 instances every `poll_s` held this
        process half a second a second); from any other fleet, every instance."""
        cloud = self.cloud
        if isinstance(cloud, SimCloud):
            if self._cursor is not None:
                self._cursor, changed = cloud.touched_since(self._cursor)
                present: list[FleetInstance] = [i for i in changed.values() if i is not None]
                gone = [i for i, found in changed.items() if found is None and i in self._kubelets]
                return present, gone
            self._cursor = cloud.touches  # before the listing: later changes are read next
        listed = {instance.id: instance for instance in cloud.instances()}
        return list(listed.values()), [i for i in self._kubelets if i not in listed]

    async def _sync(self, nursery: trio.Nursery) -> None:
        """Compare the cloud's instances with the kubelets and act on every difference."""
        present, gone_ids = self._changes()
        for instance in present:
            kubelet = self._kubelets.get(instance.id)
            if kubelet is None:
                kubelet = _Kubelet(
                    instance.id,
                    instance.name,
                    offset_s=self.heartbeat_s * (1.0 - self._rng.random()),  # (0, period]
                )
                self._kubelets[instance.id] = kubelet
            if instance.state == "running" and not kubelet.running:
                self._boot(kubelet, instance, nursery)
            elif instance.state != "running" and kubelet.running:
                await self._halt(kubelet, instance.state)
        for gone in gone_ids:
            kubelet = self._kubelets.pop(gone)
            if kubelet.running:
                await self._halt(kubelet, "gone")

    def _boot(self, kubelet: _Kubelet, instance: FleetInstance, nursery: trio.Nursery) -> None:
        kubelet.running = True
        kubelet.registered = False
        kubelet.up = trio.Event()
        kubelet.done = trio.Event()
        kubelet.scope = trio.CancelScope()
        nursery.start_soon(self._run_kubelet, kubelet, instance, name=f"kubelet/{instance.name}")

    async def _halt(self, kubelet: _Kubelet, state: str) -> None:
        """The instance stopped: its kubelet falls silent and the Node turns Unknown."""
        kubelet.running = False
        if kubelet.scope is not None:
            kubelet.scope.cancel()
            await kubelet.done.wait()  # no heartbeat may land after the Unknown below
        was_registered, kubelet.registered = kubelet.registered, False
        if not was_registered or kubelet.ready == "Unknown":
            return
        stamp = _format_time(self._now())
        try:
            await self._patch_status(
                kubelet.name,
                _conditions("Unknown", stamp, heartbeat=False, transition=True),
            )
        except NotFoundError:
            return
        except KubeError as exc:
            log.warning("node.status-unknown-failed", node=kubelet.name, error=str(exc))
            return
        kubelet.ready = "Unknown"
        self._unknown += 1
        log.info(
            "node.status-unknown", node=kubelet.name, instance=kubelet.instance_id, state=state
        )

    async def _run_kubelet(self, kubelet: _Kubelet, instance: FleetInstance) -> None:
        assert kubelet.scope is not None
        try:
            with kubelet.scope:
                await self._register(kubelet, instance)
                async with trio.open_nursery() as nursery:
                    if self.node_lease_s is not None:
                        nursery.start_soon(self._renew_lease_forever, kubelet, self.node_lease_s)
                    await self._heartbeat_forever(kubelet)
                    nursery.cancel_scope.cancel()
        finally:
            kubelet.up.set()
            kubelet.done.set()

    async def _register(self, kubelet: _Kubelet, instance: FleetInstance) -> None:
        """Create the Node (retrying failures); if it exists, post Ready=True on it."""
        if instance.id in self._registered:  # registered by the world's builder, Ready
            self._registered.discard(instance.id)  # (a later start registers as usual)
            kubelet.registered = True
            kubelet.ready = "True"
            self._registrations += 1
            kubelet.up.set()
            return
        while True:
            try:
                manifest = node_manifest(
                    instance, now=self._now(), initialised=instance.id in self._initialised
                )
                async with self._registering:
                    if self._status_writer is not None:
                        await self._status_writer.register_node(_encode(manifest))
                    else:
                        await self._kube.create(NODES, manifest)
            except AlreadyExistsError:
                try:
                    await self._post_ready(kubelet, transition=kubelet.ready != "True")
                except KubeError as exc:
                    log.warning("kubelet.register-failed", node=kubelet.name, error=str(exc))
                    await trio.sleep(_REGISTER_RETRY_S)
                    continue
                how = "found"
            except KubeError as exc:
                log.warning("kubelet.register-failed", node=kubelet.name, error=str(exc))
                await trio.sleep(_REGISTER_RETRY_S)
                continue
            else:
                how = "created"
            kubelet.registered = True
            kubelet.ready = "True"
            self._registrations += 1
            kubelet.up.set()
            log.info(
                "kubelet.registered", node=kubelet.name, instance=kubelet.instance_id, node_was=how
            )
            return

    async def _heartbeat_forever(self, kubelet: _Kubelet) -> None:
        # The world's first beats count from when it is built, not from each registration:
        # building 100,000 Nodes takes minutes, and beats meanwhile only slowed the build.
        await self._built.wait()
        due = trio.current_time() + kubelet.offset_s
        while True:
            await trio.sleep_until(due)
            due += self.heartbeat_s
            try:
                await self._post_ready(kubelet, transition=kubelet.ready != "True")
            except NotFoundError:
                # Deleted while running: a kubelet registers once per start, so it only
                # logs (as a real one does) until its instance is restarted.
                log.warning("kubelet.node-missing", node=kubelet.name)
                kubelet.registered = False
                return
            except KubeError as exc:
                self._heartbeat_failures += 1
                log.warning("kubelet.heartbeat-failed", node=kubelet.name, error=str(exc))
                continue
            self._heartbeats += 1
            log.debug("kubelet.heartbeat", node=kubelet.name)

    async def _renew_lease_forever(self, kubelet: _Kubelet, duration_s: float) -> None:
        """Create the node Lease (owned by the Node), then renew it every quarter of its
        duration, as upstream's kubelet does; failures are retried at the next renewal."""
        period_s = duration_s / 4
        due = trio.current_time()
        while True:
            try:
                await self._renew_lease(kubelet, duration_s)
            except NotFoundError:
                return  # the Node is gone: its kubelet stops (see _heartbeat_forever)
            except KubeError as exc:
                log.warning("kubelet.lease-failed", node=kubelet.name, error=str(exc))
            due += period_s
            await trio.sleep_until(due)

    async def _renew_lease(self, kubelet: _Kubelet, duration_s: float) -> None:
        renew = self._now().astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            async with self._writes:
                await self._kube.patch(
                    LEASES,
                    kubelet.name,
                    Patch(STRATEGIC, {"spec": {"renewTime": renew}}),
                    namespace=NODE_LEASE_NAMESPACE,
                )
            return
        except NotFoundError:
            pass
        async with self._writes:
            node = await self._kube.get(NODES, kubelet.name, type=Node)
        lease: dict[str, JSONValue] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": kubelet.name,
                "namespace": NODE_LEASE_NAMESPACE,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": kubelet.name,
                        "uid": node.metadata.uid,
                    }
                ],
            },
            "spec": {
                "holderIdentity": kubelet.name,
                "leaseDurationSeconds": int(duration_s),
                "renewTime": renew,
            },
        }
        with contextlib.suppress(AlreadyExistsError):  # created meanwhile: patched next time
            async with self._writes:
                await self._kube.create(LEASES, lease, namespace=NODE_LEASE_NAMESPACE)

    async def _post_ready(self, kubelet: _Kubelet, *, transition: bool) -> None:
        stamp = _format_time(self._now())
        await self._patch_status(
            kubelet.name, _conditions("True", stamp, heartbeat=True, transition=transition)
        )
        kubelet.ready = "True"

    async def _patch_status(self, name: str, conditions: Sequence[JSONValue]) -> None:
        document: dict[str, JSONValue] = {"status": {"conditions": list(conditions)}}
        async with self._writes:
            if self._status_writer is not None:
                await self._status_writer.patch_status(name, _encode(document))
            else:
                await self._kube.patch(
                    NODES, name, Patch(STRATEGIC, document), subresource="status"
                )


_encode = msgspec.json.Encoder().encode
