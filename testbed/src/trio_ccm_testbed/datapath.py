"""A whole cluster whose load balancers carry traffic, in one process, on loopback.

`open_datapath_world()` starts the emulator, the simulated cloud with its load balancers and
Nodes on a random 127.x.y.0/24 of their own (the first half for load-balancer addresses, the
second for Nodes, so parallel runs on one machine do not collide), the testbed's kubelets,
kube-proxy and pods, the cloud's data plane, and one CCM replica (`run_ccm`). It runs on
the real clock: traffic crosses real sockets. The end-to-end tests and `bench/datapath.py`
judge the CCM by the requests that succeed through it.

```python
async with open_datapath_world(nodes=3) as world:
    key = await world.create_service("web", ports=[{"port": 8080, "protocol": "TCP"}])
    ip = await world.wait_external_ip(key)
    answers = await world.send(ip, 8080, count=10)
```
"""

from __future__ import annotations

import ipaddress
import random
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, TypedDict

import msgspec
import trio

from trio_ccm.cloud.sim import SimProvider
from trio_ccm.kube.objects import NODES, SERVICES, Service
from trio_ccm.kube.patches import MERGE, Patch
from trio_ccm.supervisor import Serving
from trio_ccm.testing.harness import run_ccm
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.cloud import SimCloud
from trio_ccm_testbed.cloud.dataplane import DataPlane
from trio_ccm_testbed.kubeproxy import REPLICAS_ANNOTATION, KubeProxy
from trio_ccm_testbed.loopback import LOOPBACK_NETWORK, random_loopback_network
from trio_ccm_testbed.testbed import Testbed
from trio_ccm_testbed.traffic import Answer, TrafficError, http_get, udp_ask

__all__ = [
    "DatapathWorld",
    "Outcome",
    "Pools",
    "open_datapath_world",
    "show_traffic",
    "traffic_pools",
]

_REQUEST_S: Final = 5.0
_POLL_S: Final = 0.05


@dataclass(frozen=True)
class Outcome:
    """What `count` requests got: the answers, and the errors of those that failed."""

    answers: list[Answer]
    errors: list[str]

    def nodes(self) -> set[str]:
        """The Nodes of the pods that answered."""
        return {a.node for a in self.answers}

    def pods(self) -> set[str]:
        return {a.pod for a in self.answers}


@dataclass
class DatapathWorld:
    api: ApiServer
    cloud: SimCloud
    testbed: Testbed
    plane: DataPlane
    serving: Serving

    @property
    def kube_proxy(self) -> KubeProxy:
        assert self.testbed.kube_proxy is not None
        return self.testbed.kube_proxy

    async def create_service(
        self,
        name: str,
        *,
        ports: Sequence[Mapping[str, Any]] = ({"port": 8080, "protocol": "TCP"},),
        replicas: int | None = None,
        namespace: str = "default",
        **spec: Any,
    ) -> str:
        """Create a LoadBalancer Service (as `kubectl create` would); its "namespace/name"."""
        annotations = {} if replicas is None else {REPLICAS_ANNOTATION: str(replicas)}
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
            "spec": {"type": "LoadBalancer", "selector": {"app": name}, "ports": list(ports)}
            | spec,
        }
        await self.testbed.kube.create(SERVICES, body, namespace=namespace)
        return f"{namespace}/{name}"

    async def patch_service(self, key: str, spec: Mapping[str, Any]) -> None:
        namespace, _, name = key.partition("/")
        await self.testbed.kube.patch(
            SERVICES, name, Patch(MERGE, {"spec": dict(spec)}), namespace=namespace
        )

    async def label_node(self, name: str, labels: Mapping[str, str | None]) -> None:
        await self.testbed.kube.patch(
            NODES, name, Patch(MERGE, {"metadata": {"labels": dict(labels)}})
        )

    async def service(self, key: str) -> Service:
        namespace, _, name = key.partition("/")
        found: Service = await self.testbed.kube.get(
            SERVICES, name, namespace=namespace, type=Service
        )
        return found

    async def wait_external_ip(self, key: str) -> str:
        """The Service's first ingress IP, once the CCM has written one."""
        while True:
            ingress = (await self.service(key)).status.load_balancer.ingress
            if ingress and ingress[0].ip:
                return ingress[0].ip
            await trio.sleep(_POLL_S)

    async def load_balancer_name(self, key: str) -> str:
        svc = await self.service(key)
        return ("a" + svc.metadata.uid.replace("-", ""))[:32]  # upstream's default name

    async def backends(self, key: str) -> dict[str, dict[str, Any]]:
        """The data plane's view of the Service's load balancer, by Node."""
        found = self.plane.balancer(await self.load_balancer_name(key)) or {}
        rows = found.get("backends", [])
        assert isinstance(rows, list)
        return {str(row["node"]): row for row in rows if isinstance(row, dict)}

    async def wait_backends(self, key: str, check: Any) -> dict[str, dict[str, Any]]:
        """Wait until `check(backends)` holds for the Service's load balancer (`backends`)."""
        while True:
            found = await self.backends(key)
            if check(found):
                return found
            await trio.sleep(_POLL_S)

    async def send(
        self,
        address: str,
        port: int,
        *,
        count: int = 10,
        protocol: str = "TCP",
        source: str | None = None,
    ) -> Outcome:
        """`count` requests (each a new connection, or a datagram) to `address:port`."""
        return await _sample(address, port, protocol, count, source=source)

    async def wait_traffic(
        self,
        address: str,
        port: int,
        check: Any,
        *,
        count: int = 10,
        protocol: str = "TCP",
        source: str | None = None,
    ) -> Outcome:
        """Send `count` requests again and again until `check(outcome)` holds; the last."""
        while True:
            outcome = await self.send(address, port, count=count, protocol=protocol, source=source)
            if check(outcome):
                return outcome
            await trio.sleep(_POLL_S)


@asynccontextmanager
async def open_datapath_world(
    *,
    nodes: int = 3,
    pods: int = 2,
    health_interval_s: float = 0.1,
    drain_s: float = 2.0,
    ccm_flags: Sequence[str] = (),
    seed: int | None = None,
) -> AsyncIterator[DatapathWorld]:
    """The world of the module docstring, for the block."""
    rng = random.Random(seed) if seed is not None else None  # noqa: S311 - addresses, not secrets
    network = random_loopback_network(rng)
    vips, node_ips = network.subnets(1)
    api = ApiServer(seed=seed)
    cloud = SimCloud(seed=seed or 0, lb_network=str(vips), internal_network=str(node_ips))
    testbed = Testbed(api, cloud, pods=pods, heartbeat_s=10.0, poll_s=0.1)
    testbed.add_nodes(nodes)
    plane = DataPlane(cloud, health_interval_s=health_interval_s, drain_s=drain_s)
    provider = SimProvider(url="http://sim", replica="ccm-0", transport=cloud.transport())
    async with trio.open_nursery() as nursery:
        await nursery.start(testbed.serve)
        await nursery.start(plane.serve)
        async with run_ccm(
            api,
            provider,
            "--configure-cloud-routes=false",
            "--node-monitor-period=1s",
            *ccm_flags,
        ) as serving:
            yield DatapathWorld(api, cloud, testbed, plane, serving)
        nursery.cancel_scope.cancel()


class Pools(TypedDict, total=False):
    """`SimCloud` keywords: the load-balancer pool and the Nodes' internal network."""

    lb_network: str
    internal_network: str


def traffic_pools(lb_network: str | None, node_network: str | None) -> Pools:
    """The simulated cloud's address pools (`SimCloud` keywords) for the commands' flags.

    A loopback `lb_network` makes load balancers carry traffic, with the Nodes' internal
    IPs from `node_network` (default: the /16 after the pool's, 127.241.0.0/16 for
    127.240.0.0/24); any other pool carries none (and `node_network` is refused). Raises
    `ValueError` naming the flag and the fix.
    """
    if lb_network is None:
        if node_network is not None:
            raise ValueError("--node-network needs a loopback --lb-network")
        return {}
    vips = ipaddress.IPv4Network(lb_network)
    if not vips.subnet_of(LOOPBACK_NETWORK):
        if node_network is not None:
            raise ValueError(
                f"--node-network {node_network}: Nodes carry traffic only behind a loopback "
                f"--lb-network, not {vips}"
            )
        return {"lb_network": str(vips)}
    if node_network is None:
        second = vips.network_address.packed[1]
        second = second + 1 if second < 255 else second - 1
        node_network = f"127.{second}.0.0/16"
    nodes = ipaddress.IPv4Network(node_network)
    if not nodes.subnet_of(LOOPBACK_NETWORK) or nodes.overlaps(vips):
        raise ValueError(
            f"--node-network {nodes}: must be in 127.0.0.0/8 and apart from the load-balancer "
            f"pool {vips}"
        )
    return {"lb_network": str(vips), "internal_network": str(nodes)}


async def show_traffic(
    testbed: Testbed, cloud: SimCloud, *, requests: int = 4, patience_s: float = 15.0
) -> list[str]:
    """Send `requests` to each port of each LoadBalancer Service's EXTERNAL-IP (trying again
    for up to `patience_s` while some fail) and describe who answered, for the demo."""
    listed = await testbed.kube.list(SERVICES, type=Service)
    lines = [f"traffic through the load balancers ({requests} requests per port):"]
    for svc in sorted(listed.items, key=lambda s: s.key):
        ingress = svc.status.load_balancer.ingress
        if svc.spec.type != "LoadBalancer" or not ingress or not ingress[0].ip:
            continue
        address = ingress[0].ip
        for port in svc.spec.ports:
            shown = (
                f"{port.port}/UDP" if port.protocol == "UDP" else f"http://{address}:{port.port}/"
            )
            outcome = Outcome([], [])
            with trio.move_on_after(patience_s):
                while True:
                    outcome = await _sample(address, port.port, port.protocol, requests)
                    if not outcome.errors:
                        break
                    await trio.sleep(0.5)
            who = Counter(f"{a.pod} on {a.node}" for a in outcome.answers)
            answered = ", ".join(f"{name} ({n})" for name, n in sorted(who.items()))
            lines.append(
                f"  {svc.key:<24} {shown:<28} {len(outcome.answers)}/{requests} answered"
                + (f": {answered}" if answered else "")
            )
            if outcome.errors:
                lines.append(f"    failed: {outcome.errors[-1]}")
                lines += [f"    {why}" for why in _listener_errors(cloud, address)]
    return lines


async def _sample(
    address: str, port: int, protocol: str, count: int, *, source: str | None = None
) -> Outcome:
    answers, errors = [], []
    for _ in range(count):
        try:
            with trio.fail_after(_REQUEST_S):
                if protocol == "UDP":
                    raw = await udp_ask(address, port, source=source)
                    answers.append(msgspec.json.decode(raw, type=Answer))
                else:
                    answers.append((await http_get(address, port, source=source)).answer())
        except (TrafficError, trio.TooSlowError, msgspec.DecodeError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    return Outcome(answers, errors)


def _listener_errors(cloud: SimCloud, address: str) -> list[str]:
    state = cloud.dataplane.to_json() if cloud.dataplane is not None else {}
    found = []
    balancers = state.get("loadBalancers", [])
    for lb in balancers if isinstance(balancers, list) else []:
        if not isinstance(lb, dict) or lb.get("ip") != address:
            continue
        listeners = lb.get("listeners", [])
        for listener in listeners if isinstance(listeners, list) else []:
            if isinstance(listener, dict) and listener.get("error"):
                found.append(f"load balancer: {listener['error']}")
    return found
