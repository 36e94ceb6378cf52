"""The aws test world's plumbing (its fixtures are in `tests/aws/conftest.py`): the
provider pointed at moto, the emulator beside it, and trio-ccm replicas (`run_ccm`).

moto answers from a thread over loopback, so these tests run on real time: each is bounded
by `trio.fail_after` and waits on conditions (a watch on the emulator's Nodes, re-checking
after every change), never on fixed sleeps.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio
from prometheus_client import CollectorRegistry

from trio_ccm.cloud.aws import AwsProvider, parse_cloud_config
from trio_ccm.cloud.provider import LoadBalancers, NodeInfo, ServiceInfo, ServicePort
from trio_ccm.supervisor import Serving
from trio_ccm.testing.harness import run_ccm
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.aws import Instance, World, ready_condition

CLUSTER_ID = "test-cluster"
UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
SHUTDOWN = "node.cloudprovider.kubernetes.io/shutdown"


@asynccontextmanager
async def open_provider(
    world: World,
    *,
    environ: dict[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    **global_keys: str,
) -> AsyncIterator[AwsProvider]:
    """The aws provider from the world's cloud-config (plus `global_keys`)."""
    provider = AwsProvider(
        parse_cloud_config(world.cloud_config(**global_keys)),
        environ=environ if environ is not None else world.environ(),
        transport=transport,
    )
    try:
        yield provider
    finally:
        await provider.aclose()


# -- controller-level: the emulator, and trio-ccm replicas -------------------------------------
@dataclass
class Cluster:
    """The emulator beside the moto world, and the test's own REST access to it."""

    api: ApiServer
    world: World
    http: httpx.AsyncClient
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def node(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.api.get("v1", "Node", name)
        return found

    def has_node(self, name: str) -> bool:
        try:
            self.api.get("v1", "Node", name)
        except Exception:  # the emulator's not-found error
            return False
        return True

    def taints(self, name: str) -> list[str]:
        return [t["key"] for t in self.node(name)["spec"].get("taints", [])]

    def register(self, instance: Instance, **tweaks: Any) -> str:
        """The kubelet's Node on `instance` (World.node_manifest); returns its name."""
        manifest = World.node_manifest(instance, **tweaks)
        self.api.create(manifest)
        name: str = manifest["metadata"]["name"]
        return name

    async def set_ready(self, name: str, ready: bool) -> None:
        response = await self.http.patch(
            f"/api/v1/nodes/{name}/status",
            json={"status": {"conditions": [ready_condition(ready)]}},
            headers={"content-type": "application/strategic-merge-patch+json"},
        )
        response.raise_for_status()

    async def events(self, reason: str) -> list[dict[str, Any]]:
        response = await self.http.get("/api/v1/events")
        items: list[dict[str, Any]] = response.json()["items"]
        return [e for e in items if e.get("reason") == reason]

    async def wait_for(self, check: Callable[[], Awaitable[bool] | bool]) -> None:
        """Return once `check()` holds, checking again at every Node change (a watch)."""

        async def holds() -> bool:
            result = check()
            return bool(await result) if not isinstance(result, bool) else result

        while True:
            listing = await self.http.get("/api/v1/nodes")
            if await holds():
                return
            version = listing.json()["metadata"]["resourceVersion"]
            async with self.http.stream(
                "GET",
                "/api/v1/nodes",
                params={"watch": "1", "resourceVersion": version, "timeoutSeconds": "2"},
            ) as stream:
                async for _line in stream.aiter_lines():
                    if await holds():
                        return


@asynccontextmanager
async def open_cluster(world: World) -> AsyncIterator[Cluster]:
    api = ApiServer(seed=1)
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://emulator") as http:
        yield Cluster(api, world, http)


@asynccontextmanager
async def running(
    cluster: Cluster,
    flags: Sequence[str] = (),
    *,
    controllers: str = "cloud-node-controller,cloud-node-lifecycle-controller",
    provider: AwsProvider | None = None,
) -> AsyncIterator[Serving]:
    """A trio-ccm replica with the aws provider, as `trio-ccm --cloud-provider=aws ...` runs,
    against the emulator (in-process transport) and moto (loopback HTTP), on real time."""
    own = provider is None
    if provider is None:
        provider = AwsProvider(
            parse_cloud_config(cluster.world.cloud_config()), environ=cluster.world.environ()
        )
    try:
        async with run_ccm(
            cluster.api,
            provider,
            f"--controllers={controllers}",
            f"--cluster-name={CLUSTER_ID}",
            *flags,
            registry=cluster.registry,
            identity="ccm-aws",
            now=lambda: dt.datetime.now(dt.UTC),
        ) as serving:
            yield serving
    finally:
        if own:
            await provider.aclose()


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample's value (0 when absent)."""
    value = registry.get_sample_value(name, labels)
    return value if value is not None else 0.0


def utc(seconds: float = 0.0) -> dt.datetime:
    return dt.datetime(2026, 11, 21, 10, 0, 0, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)


# -- loopback stand-ins (the metadata service, the container credentials endpoint) ---------
@contextmanager
def serve_wsgi(app: Callable[..., Any]) -> Iterator[str]:
    """`app` served on 127.0.0.1 from a thread for the block; yields its base URL."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


POLL_S = 0.1


async def until(check: Callable[[], Awaitable[bool] | bool]) -> None:
    """Return once `check()` holds (moto and the emulator have no watch in common: look
    again every POLL_S; the caller bounds the wait)."""
    while True:
        result = check()
        if await result if not isinstance(result, bool) else result:
            return
        await trio.sleep(POLL_S)


# -- load-balancer builders shared by the aws load-balancer suites --------------------------
UID = "11111111-2222-3333-4444-555555555555"
NAME = "a11111111222233334444555555555555"[:32]


def lbs_of(provider: AwsProvider) -> LoadBalancers:
    assert provider.load_balancers is not None
    return provider.load_balancers


def service(**tweaks: object) -> ServiceInfo:
    fields: dict[str, object] = {
        "namespace": "default",
        "name": "web",
        "uid": UID,
        "ports": (ServicePort("http", "TCP", 80, 30080),),
    }
    fields.update(tweaks)
    return ServiceInfo(**fields)  # type: ignore[arg-type]


def nodes(instances: list[Instance]) -> list[NodeInfo]:
    return [NodeInfo(i.private_dns_name, provider_id=i.provider_id) for i in instances]
