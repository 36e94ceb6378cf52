"""The official Python clients against the emulator over TLS: `kubernetes` and
`kubernetes_asyncio` run one table of scenarios through a common adapter.

The sync client runs in worker threads (`trio.to_thread.run_sync`); the asyncio client runs
each call in a fresh `asyncio.run` loop on a worker thread. The test itself stays in Trio,
so it can wait on the server's events and change state while a client watches.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, TypeVar

import kubernetes
import kubernetes_asyncio
import pytest
import trio

from tests.helpers.peers import NODE_PORTS, Emulator, lb_service, node

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
T = TypeVar("T")


class Peer(Protocol):
    """What a scenario needs from an official client, whichever one it is."""

    name: str
    models: ModuleType  # the client's `client` package: V1Service, V1ObjectMeta, ...
    api_exception: type[Exception]
    configuration: Any

    async def core(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call a `CoreV1Api` method; returns the client's model object."""
        ...

    async def watch_nodes(
        self, resource_version: str, timeout_seconds: int, until: str
    ) -> list[tuple[str, Any]]:
        """Watch nodes from `resource_version` until an event of type `until`."""
        ...

    async def aclose(self) -> None: ...


class SyncPeer:
    """`kubernetes` (blocking, urllib3): every call in a Trio worker thread."""

    name = "kubernetes"
    models = kubernetes.client
    api_exception = kubernetes.client.exceptions.ApiException

    def __init__(self, configuration: Any) -> None:
        self.configuration = configuration
        self.api = kubernetes.client.ApiClient(configuration)

    @classmethod
    async def connect(cls, kubeconfig: Path) -> SyncPeer:
        def load() -> Any:
            configuration = kubernetes.client.Configuration()
            kubernetes.config.load_kube_config(
                config_file=str(kubeconfig), client_configuration=configuration
            )
            return configuration

        return cls(await trio.to_thread.run_sync(load))

    async def core(self, method: str, *args: Any, **kwargs: Any) -> Any:
        call = getattr(kubernetes.client.CoreV1Api(self.api), method)
        return await trio.to_thread.run_sync(functools.partial(call, *args, **kwargs))

    async def watch_nodes(
        self, resource_version: str, timeout_seconds: int, until: str
    ) -> list[tuple[str, Any]]:
        def stream() -> list[tuple[str, Any]]:
            events: list[tuple[str, Any]] = []
            watch = kubernetes.watch.Watch()
            frames = watch.stream(
                kubernetes.client.CoreV1Api(self.api).list_node,
                resource_version=resource_version,
                timeout_seconds=timeout_seconds,
            )
            try:
                for event in frames:
                    events.append((event["type"], event["object"]))
                    if event["type"] == until:
                        break
            finally:
                watch.stop()
                frames.close()
            return events

        return await trio.to_thread.run_sync(stream, abandon_on_cancel=True)

    async def aclose(self) -> None:
        await trio.to_thread.run_sync(self.api.close)


async def in_asyncio(
    make: Callable[[], Coroutine[Any, Any, T]], *, abandon_on_cancel: bool = False
) -> T:
    """Run `make()` to completion in a fresh asyncio loop on a Trio worker thread."""
    return await trio.to_thread.run_sync(
        lambda: asyncio.run(make()), abandon_on_cancel=abandon_on_cancel
    )


class AsyncioPeer:
    """`kubernetes_asyncio` (aiohttp): each call in its own `asyncio.run` on a worker thread."""

    name = "kubernetes_asyncio"
    models = kubernetes_asyncio.client
    api_exception = kubernetes_asyncio.client.exceptions.ApiException

    def __init__(self, configuration: Any) -> None:
        self.configuration = configuration

    @classmethod
    async def connect(cls, kubeconfig: Path) -> AsyncioPeer:
        async def load() -> Any:
            configuration = kubernetes_asyncio.client.Configuration()
            await kubernetes_asyncio.config.load_kube_config(
                config_file=str(kubeconfig), client_configuration=configuration
            )
            return configuration

        return cls(await in_asyncio(load))

    async def core(self, method: str, *args: Any, **kwargs: Any) -> Any:
        async def call() -> Any:
            async with kubernetes_asyncio.client.ApiClient(self.configuration) as api:
                bound = getattr(kubernetes_asyncio.client.CoreV1Api(api), method)
                return await bound(*args, **kwargs)

        return await in_asyncio(call)

    async def watch_nodes(
        self, resource_version: str, timeout_seconds: int, until: str
    ) -> list[tuple[str, Any]]:
        async def stream() -> list[tuple[str, Any]]:
            events: list[tuple[str, Any]] = []
            async with (
                kubernetes_asyncio.client.ApiClient(self.configuration) as api,
                kubernetes_asyncio.watch.Watch() as watch,
            ):
                frames = watch.stream(
                    kubernetes_asyncio.client.CoreV1Api(api).list_node,
                    resource_version=resource_version,
                    timeout_seconds=timeout_seconds,
                )
                async for event in frames:
                    events.append((event["type"], event["object"]))
                    if event["type"] == until:
                        break
                # Watch.close() only releases a half-read response to a pool that closes
                # after it; close its socket here, and let the loop run the transport's
                # close, or the socket is left for the garbage collector to warn about.
                if watch.resp is not None:
                    watch.resp.close()
                await asyncio.sleep(0)
            return events

        return await in_asyncio(stream, abandon_on_cancel=True)

    async def aclose(self) -> None:
        return None


@pytest.fixture(
    params=[
        pytest.param(SyncPeer, id="kubernetes"),
        pytest.param(AsyncioPeer, id="kubernetes_asyncio"),
    ]
)
async def peer(request: pytest.FixtureRequest, emulator: Emulator) -> AsyncIterator[Peer]:
    """An official client configured by its own kubeconfig loader, TLS verification on."""
    with trio.fail_after(30):
        connected: Peer = await request.param.connect(emulator.kubeconfig)
    configuration = connected.configuration
    assert configuration.host == emulator.listening.url
    assert configuration.host.startswith("https://")
    assert configuration.verify_ssl
    assert configuration.ssl_ca_cert
    try:
        yield connected
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            await connected.aclose()


def status_of(error: Exception) -> dict[str, Any]:
    """The `Status` body of an ApiException."""
    body: Any = getattr(error, "body", None)
    result: dict[str, Any] = json.loads(body)
    return result


def field(obj: Any, name: str) -> Any:
    """A field of a decoded response, whether the client returned a model or a dict."""
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


def web_service(m: ModuleType) -> Any:
    """The LoadBalancer Service `web`, built from the client's own models."""
    return m.V1Service(
        api_version="v1",
        kind="Service",
        metadata=m.V1ObjectMeta(name="web", labels={"app": "web"}),
        spec=m.V1ServiceSpec(
            type="LoadBalancer",
            selector={"app": "web"},
            ports=[m.V1ServicePort(name="http", port=80, target_port=8080)],
        ),
    )


# -- scenarios -------------------------------------------------------------------------
async def list_and_get_nodes(peer: Peer, em: Emulator) -> None:
    """list_node returns every node (and honours a label selector); read_node returns one."""
    em.server.create(node("node-2"))
    em.server.create(node("node-1", labels={"zone": "a"}))
    listed = await peer.core("list_node")
    assert [n.metadata.name for n in listed.items] == ["node-1", "node-2"]
    assert int(listed.metadata.resource_version) > 0
    selected = await peer.core("list_node", label_selector="zone=a")
    assert [n.metadata.name for n in selected.items] == ["node-1"]
    got = await peer.core("read_node", "node-1")
    assert got.metadata.labels == {"kubernetes.io/hostname": "node-1", "zone": "a"}
    assert got.metadata.uid == em.server.get("v1", "Node", "node-1")["metadata"]["uid"]
    assert [(a.type, a.address) for a in got.status.addresses] == [("Hostname", "node-1")]
    assert got.status.node_info.kubelet_version == "v1.33.1"


async def create_load_balancer(peer: Peer, em: Emulator) -> None:
    """create_namespaced_service of a LoadBalancer gets a cluster IP and a node port assigned."""
    created = await peer.core("create_namespaced_service", "default", web_service(peer.models))
    spec = created.spec
    assert spec.type == "LoadBalancer"
    assert ipaddress.ip_address(spec.cluster_ip) in SERVICE_CIDR
    assert spec.cluster_ip != "10.96.0.1"  # the `kubernetes` Service holds the first one
    assert spec.cluster_ips == [spec.cluster_ip]
    (port,) = spec.ports
    assert port.node_port in NODE_PORTS
    assert (port.name, port.port, port.protocol) == ("http", 80, "TCP")
    stored = em.server.get("v1", "Service", "web", namespace="default")
    assert stored["spec"]["clusterIP"] == spec.cluster_ip
    assert stored["spec"]["ports"][0]["nodePort"] == port.node_port
    assert stored["metadata"]["resourceVersion"] == created.metadata.resource_version


async def patch_node_labels(peer: Peer, em: Emulator) -> None:
    """patch_node with a dict (a strategic merge patch) adds a label and keeps the others."""
    em.server.create(node("node-1", labels={"zone": "a"}))
    patched = await peer.core("patch_node", "node-1", {"metadata": {"labels": {"tier": "edge"}}})
    expected = {"kubernetes.io/hostname": "node-1", "zone": "a", "tier": "edge"}
    assert patched.metadata.labels == expected
    assert em.server.get("v1", "Node", "node-1")["metadata"]["labels"] == expected


async def patch_node_status_addresses(peer: Peer, em: Emulator) -> None:
    """patch_node_status merges addresses by type: a new InternalIP keeps the Hostname."""
    em.server.create(
        node(
            "node-1",
            addresses=[
                {"type": "InternalIP", "address": "10.0.0.1"},
                {"type": "Hostname", "address": "node-1"},
            ],
        )
    )
    patched = await peer.core(
        "patch_node_status",
        "node-1",
        {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.9"}]}},
    )
    expected = [("InternalIP", "10.0.0.9"), ("Hostname", "node-1")]
    assert [(a.type, a.address) for a in patched.status.addresses] == expected
    stored = em.server.get("v1", "Node", "node-1")["status"]["addresses"]
    assert [(a["type"], a["address"]) for a in stored] == expected


async def create_twice(peer: Peer, em: Emulator) -> None:
    """Creating an existing Service raises ApiException 409 AlreadyExists."""
    em.server.create(lb_service(namespace="default"))
    with pytest.raises(peer.api_exception) as caught:
        await peer.core("create_namespaced_service", "default", web_service(peer.models))
    assert getattr(caught.value, "status", None) == 409
    status = status_of(caught.value)
    assert status["reason"] == "AlreadyExists"
    assert status["message"] == 'services "web" already exists'
    assert status["details"] == {"name": "web", "kind": "services"}


async def replace_stale(peer: Peer, em: Emulator) -> None:
    """replace_node with a stale resourceVersion raises ApiException 409 Conflict."""
    em.server.create(node("node-1"))
    stale = await peer.core("read_node", "node-1")
    await em.patch("/api/v1/nodes/node-1", {"metadata": {"labels": {"moved": "on"}}})
    stale.metadata.labels["mine"] = "yes"
    with pytest.raises(peer.api_exception) as caught:
        await peer.core("replace_node", "node-1", stale)
    assert getattr(caught.value, "status", None) == 409
    status = status_of(caught.value)
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on nodes "node-1": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert status["details"] == {"name": "node-1", "kind": "nodes"}
    labels = em.server.get("v1", "Node", "node-1")["metadata"]["labels"]
    assert labels == {"kubernetes.io/hostname": "node-1", "moved": "on"}


async def watch_sees_modified(peer: Peer, em: Emulator) -> None:
    """A watch from a list's resourceVersion replays later events, then sees a live MODIFIED."""
    em.server.create(node("node-1"))
    listed = await peer.core("list_node")
    em.server.create(node("node-2"))  # after the list: the watch must replay it
    watching = em.server.store.watch_started
    events: list[tuple[str, Any]] = []
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            events.extend(
                await peer.watch_nodes(
                    listed.metadata.resource_version, timeout_seconds=45, until="MODIFIED"
                )
            )
            # If the watch ended before it was registered, stop waiting for it.
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        await watching.wait()
        await em.patch("/api/v1/nodes/node-1", {"metadata": {"labels": {"watched": "yes"}}})
    assert [(kind, obj.metadata.name) for kind, obj in events] == [
        ("ADDED", "node-2"),
        ("MODIFIED", "node-1"),
    ]
    modified = events[-1][1]
    assert modified.metadata.labels["watched"] == "yes"
    stored = em.server.get("v1", "Node", "node-1")
    assert modified.metadata.resource_version == stored["metadata"]["resourceVersion"]


async def delete_then_get(peer: Peer, em: Emulator) -> None:
    """Deletes return the Service (or a Status for a Node); a later read raises 404 NotFound."""
    em.server.create(lb_service(namespace="default"))
    em.server.create(node("node-1"))
    deleted = await peer.core("delete_namespaced_service", "web", "default")
    assert deleted.metadata.name == "web"
    assert deleted.kind == "Service"
    # A Node delete answers a Status: kubernetes_asyncio decodes it as V1Status, while
    # kubernetes 37 declares the response as `object` and hands back the plain dict.
    gone = await peer.core("delete_node", "node-1")
    details = field(gone, "details")
    assert field(gone, "status") == "Success"
    assert (field(details, "name"), field(details, "kind")) == ("node-1", "nodes")
    with pytest.raises(peer.api_exception) as caught:
        await peer.core("read_namespaced_service", "web", "default")
    assert getattr(caught.value, "status", None) == 404
    status = status_of(caught.value)
    assert status["reason"] == "NotFound"
    assert status["message"] == 'services "web" not found'
    assert em.lookup("v1", "Service", "web", "default") is None
    assert em.lookup("v1", "Node", "node-1") is None


Scenario = Callable[[Peer, Emulator], Awaitable[None]]

SCENARIOS = [
    pytest.param(list_and_get_nodes, id="list-get-nodes"),
    pytest.param(create_load_balancer, id="create-load-balancer"),
    pytest.param(patch_node_labels, id="patch-node-labels"),
    pytest.param(patch_node_status_addresses, id="patch-node-status-addresses"),
    pytest.param(create_twice, id="create-already-exists"),
    pytest.param(replace_stale, id="replace-stale-conflict"),
    pytest.param(watch_sees_modified, id="watch-modified"),
    pytest.param(delete_then_get, id="delete-then-404"),
]


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_python_client(scenario: Scenario, peer: Peer, emulator: Emulator) -> None:
    """Each official Python client runs the scenario against the emulator over TLS."""
    with trio.fail_after(60):
        await scenario(peer, emulator)
