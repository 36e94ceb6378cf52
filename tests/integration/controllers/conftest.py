"""A world for controller tests: the emulator and the simulated cloud, in-process, and a
trio-ccm replica (serve()) reaching both through the real client code paths."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio
from prometheus_client import CollectorRegistry

from tests.helpers.kube import config_for
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.settings import Settings
from trio_ccm.supervisor import Serving, serve
from trio_ccm.testing.apiserver import ApiServer
from trio_ccm.testing.cloud import SimCloud

EPOCH = dt.datetime(2026, 11, 21, 10, 0, 0, tzinfo=dt.UTC)
UNINITIALIZED = {
    "key": "node.cloudprovider.kubernetes.io/uninitialized",
    "value": "true",
    "effect": "NoSchedule",
}


class CountingTransport(httpx.AsyncBaseTransport):
    """The replica's way to the emulator, counting writes per (verb, path)."""

    def __init__(self, server: ApiServer) -> None:
        self.inner = server.transport()
        self.writes: list[tuple[str, str]] = []
        self.write_times: list[float] = []  # trio time each write was sent

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method in ("POST", "PUT", "PATCH", "DELETE"):
            self.writes.append((request.method, request.url.path))
            self.write_times.append(trio.current_time())
        response: httpx.Response = await self.inner.handle_async_request(request)
        return response

    def node_writes(self, name: str) -> list[tuple[str, str]]:
        path = f"/api/v1/nodes/{name}"
        return [w for w in self.writes if w[1] in (path, path + "/status")]


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


def ready_condition(status: str) -> dict[str, str]:
    return {
        "type": "Ready",
        "status": status,
        "reason": "KubeletReady" if status == "True" else "NodeStatusUnknown",
        "lastHeartbeatTime": "2026-11-21T10:00:00Z",
        "lastTransitionTime": "2026-11-21T10:00:00Z",
    }


@dataclass
class World:
    """The emulator and the sim cloud, plus the test's own REST access (not trio-ccm's)."""

    api: ApiServer
    cloud: SimCloud
    transport: CountingTransport
    http: httpx.AsyncClient
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def node(self, name: str) -> dict[str, Any]:
        node: dict[str, Any] = self.api.get("v1", "Node", name)
        return node

    async def nodes(self) -> list[dict[str, Any]]:
        response = await self.http.get("/api/v1/nodes")
        items: list[dict[str, Any]] = response.json()["items"]
        return items

    async def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        response = await self.http.get("/api/v1/events")
        items: list[dict[str, Any]] = response.json()["items"]
        return [e for e in items if reason is None or e.get("reason") == reason]

    def register(
        self,
        name: str,
        *,
        ready: str = "True",
        taints: list[dict[str, str]] | None = None,
        provider_id: str = "",
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        addresses: list[dict[str, str]] | None = None,
    ) -> None:
        """Register a Node as kubelet --cloud-provider=external does."""
        spec: dict[str, Any] = {"taints": [UNINITIALIZED] if taints is None else taints}
        if provider_id:
            spec["providerID"] = provider_id
        self.api.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                    "annotations": annotations or {},
                },
                "spec": spec,
                "status": {
                    "conditions": [ready_condition(ready)],
                    "addresses": [{"type": "Hostname", "address": name}]
                    if addresses is None
                    else addresses,
                },
            }
        )

    async def set_ready(self, name: str, status: str) -> None:
        response = await self.http.patch(
            f"/api/v1/nodes/{name}/status",
            json={"status": {"conditions": [ready_condition(status)]}},
            headers={"content-type": "application/strategic-merge-patch+json"},
        )
        response.raise_for_status()

    def service(self, name: str, namespace: str = "default") -> dict[str, Any]:
        found: dict[str, Any] = self.api.get("v1", "Service", name, namespace)
        return found

    def taint_keys(self, name: str) -> list[str]:
        return [t["key"] for t in self.node(name)["spec"].get("taints", [])]


def lb_service(
    name: str, *, namespace: str = "default", annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    """A Service of type LoadBalancer (port 80/TCP) as a user writes it; `spec` overrides."""
    body: dict[str, Any] = {
        "type": "LoadBalancer",
        "selector": {"app": name},
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
    }
    body.update(spec)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": body}


def lb_name(service: dict[str, Any]) -> str:
    """The sim provider's load-balancer name: upstream's "a" + UID without dashes, 32 max."""
    return ("a" + service["metadata"]["uid"].replace("-", ""))[:32]


def settings(**changes: object) -> Settings:
    base: dict[str, object] = {
        "secure_port": 0,
        "leader_elect": False,
        "cloud_provider": "sim",
        "cloud_batch_window_s": 0.02,
        # Each test enables the controllers it is about (the route controller needs a
        # --cluster-cidr, the service controller watches Services).
        "controllers": ("cloud-node-controller", "cloud-node-lifecycle-controller"),
    }
    base.update(changes)
    return Settings(**base)  # type: ignore[arg-type]


@asynccontextmanager
async def running(
    world: World, cfg: Settings | None = None, *, wrap: Callable[[Any], Any] | None = None
) -> AsyncIterator[Serving]:
    """A replica running against `world` until the block ends (`wrap` may decorate the
    sim provider, as a third-party provider would behave)."""
    provider = SimProvider(url="http://sim", replica="ccm-a", transport=world.cloud.transport())
    async with trio.open_nursery() as nursery:
        serving: Serving = await nursery.start(
            lambda task_status: serve(
                cfg or settings(),
                wrap(provider) if wrap else provider,
                connection=config_for(world.api),
                transport=world.transport,
                registry=world.registry,
                identity="ccm-a",
                now=lambda: EPOCH + dt.timedelta(seconds=trio.current_time()),
                task_status=task_status,
            )
        )
        await serving.wait_leading()
        yield serving
        nursery.cancel_scope.cancel()
    await provider.aclose()


@asynccontextmanager
async def open_world() -> AsyncIterator[World]:
    api = ApiServer(seed=1, now=lambda: EPOCH + dt.timedelta(seconds=trio.current_time()))
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://emulator") as http:
        yield World(api, SimCloud(seed=1), CountingTransport(api), http)
