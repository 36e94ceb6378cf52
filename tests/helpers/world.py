"""A world for controller tests: the emulator and the simulated cloud, in-process, and a
trio-ccm replica run by the public harness (`trio_ccm.testing.run_ccm`), reaching both
through the real client code paths.

Everything runs under the test's `MockClock`, so what the recording transport (the
replica's writes) and the cloud's call log (its cloud calls) hold are exact virtual times.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
from prometheus_client import CollectorRegistry

from trio_ccm.cloud.provider import (
    CloudProvider,
    LoadBalancers,
    LoadBalancerStatus,
    NodeInfo,
    ServiceInfo,
)
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.supervisor import Serving
from trio_ccm.testing.factories import ready_condition
from trio_ccm.testing.harness import RecordingTransport, register_node, run_ccm, virtual_now
from trio_ccm_testbed.apiserver import ApiError, ApiServer
from trio_ccm_testbed.cloud import SimCloud

REPLICA: Final = "ccm-a"
"""The replica's identity, and the name the sim cloud's call log records its calls under."""
BATCH_WINDOW: Final = "--cloud-batch-window=20ms"
"""Per-Node cloud lookups wait 20 ms to be batched: the first Node writes come at t=0.02."""
NO_SWEEP: Final = "--load-balancer-sweep-period=0s"
"""The leak sweep's ListLoadBalancers at the start of each term is left out of exact call
logs; tests of the sweep pass their own period, which wins (the last flag does)."""


def moments(times: Iterable[float]) -> list[float]:
    """Virtual times to the microsecond: a sum of float delays (0.02 + 0.05 + ...) carries
    noise in the 15th digit, which an exact assertion should not see."""
    return [round(t, 6) for t in times]


class ProviderDouble:
    """The sim provider with some capabilities replaced (`routes=`, `load_balancers=`), as a
    third-party provider built on it would be; trio-ccm's own code is never patched."""

    def __init__(self, inner: Any, **replaced: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.instances = replaced.pop("instances", inner.instances)
        self.load_balancers = replaced.pop("load_balancers", inner.load_balancers)
        self.routes = replaced.pop("routes", inner.routes)
        if replaced:
            raise TypeError(f"ProviderDouble: no capability {', '.join(replaced)}")

    async def initialize(self) -> None:
        await self.inner.initialize()


class LoadBalancersDouble:
    """A provider's load balancers passed through to `inner`, for a double that replaces
    one method (say a slower or annotating `ensure_load_balancer`) and keeps the rest."""

    def __init__(self, inner: LoadBalancers) -> None:
        self.inner = inner

    async def get_load_balancer(
        self, cluster: str, service: ServiceInfo
    ) -> LoadBalancerStatus | None:
        return await self.inner.get_load_balancer(cluster, service)

    def load_balancer_name(self, cluster: str, service: ServiceInfo) -> str:
        return self.inner.load_balancer_name(cluster, service)

    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> LoadBalancerStatus:
        return await self.inner.ensure_load_balancer(cluster, service, nodes)

    async def update_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> None:
        await self.inner.update_load_balancer(cluster, service, nodes)

    async def ensure_load_balancer_deleted(self, cluster: str, service: ServiceInfo) -> None:
        await self.inner.ensure_load_balancer_deleted(cluster, service)


@dataclass
class World:
    """The emulator and the sim cloud, the recording transport the replica writes through,
    and the test's own REST access (not trio-ccm's)."""

    api: ApiServer
    cloud: SimCloud
    transport: RecordingTransport
    http: httpx.AsyncClient
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    @asynccontextmanager
    async def running(
        self, *flags: str, wrap: Callable[[SimProvider], Any] | None = None
    ) -> AsyncIterator[Serving]:
        """A replica (`run_ccm` with the Go CCM's `flags`, after a 20 ms batch window) for
        the block; `wrap` may decorate the sim provider, as a third-party provider would."""
        provider = SimProvider(url="http://sim", replica=REPLICA, transport=self.cloud.transport())
        cloud: CloudProvider = wrap(provider) if wrap is not None else provider
        try:
            async with run_ccm(
                self.api,
                cloud,
                BATCH_WINDOW,
                NO_SWEEP,
                *flags,
                transport=self.transport,
                registry=self.registry,
                identity=REPLICA,
            ) as serving:
                yield serving
        finally:
            await provider.aclose()

    def register(self, name: str, **fields: Any) -> dict[str, Any]:
        """Register a Node as a kubelet does (`trio_ccm.testing.factories.make_node`'s
        keywords: `taints=[]` for one already initialised)."""
        return register_node(self.api, name, **fields)

    def node(self, name: str) -> dict[str, Any]:
        node: dict[str, Any] = self.api.get("v1", "Node", name)
        return node

    def service(self, name: str, namespace: str = "default") -> dict[str, Any]:
        found: dict[str, Any] = self.api.get("v1", "Service", name, namespace)
        return found

    def service_exists(self, name: str, namespace: str = "default") -> bool:
        try:
            self.service(name, namespace)
        except ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def taint_keys(self, name: str) -> list[str]:
        return [t["key"] for t in self.node(name)["spec"].get("taints", [])]

    async def nodes(self) -> list[dict[str, Any]]:
        response = await self.http.get("/api/v1/nodes")
        items: list[dict[str, Any]] = response.json()["items"]
        return items

    async def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        response = await self.http.get("/api/v1/events")
        items: list[dict[str, Any]] = response.json()["items"]
        return [e for e in items if reason is None or e.get("reason") == reason]

    async def set_ready(self, name: str, status: str) -> None:
        """The kubelet's (or the node lifecycle's) Ready condition update."""
        response = await self.http.patch(
            f"/api/v1/nodes/{name}/status",
            json={"status": {"conditions": [ready_condition(status)]}},
            headers={"content-type": "application/strategic-merge-patch+json"},
        )
        response.raise_for_status()


@asynccontextmanager
async def open_world() -> AsyncIterator[World]:
    """An empty world (the emulator's clock follows Trio's) for the block."""
    api = ApiServer(seed=1, now=virtual_now())
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://emulator") as http:
        yield World(api, SimCloud(seed=1), RecordingTransport(api), http)
