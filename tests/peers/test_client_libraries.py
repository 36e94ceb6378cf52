"""The Python client libraries people use, against the emulator over TLS: lightkube, kr8s,
pykube-ng, the official client's dynamic (server-side apply) client, and a small kopf
operator.

Synchronous clients run in Trio worker threads; kopf runs its own asyncio loop in a thread.
The test stays in Trio, so it can change state while a client watches and check what each
client left on the server.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from pathlib import Path
from typing import Any

import kopf
import kubernetes
import trio

from tests.helpers.peers import Emulator, lb_service, node

NS = "default"


async def in_thread(function: Any, *args: Any, **kwargs: Any) -> Any:
    return await trio.to_thread.run_sync(functools.partial(function, *args, **kwargs))


# -- lightkube ---------------------------------------------------------------------------
async def test_lightkube(emulator: Emulator) -> None:
    """lightkube lists, creates, patches (merge and strategic), applies server-side (and sees
    the conflict), watches and deletes; a missing object is its ApiError 404."""
    from lightkube import ApiError, Client, KubeConfig
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ConfigMap, Node
    from lightkube.types import PatchType

    emulator.server.create(node("n1", ready=True))

    def scenario() -> dict[str, Any]:
        client = Client(config=KubeConfig.from_file(str(emulator.kubeconfig)), namespace=NS)
        found: dict[str, Any] = {"nodes": [n.metadata.name for n in client.list(Node)]}
        created = client.create(ConfigMap(metadata=ObjectMeta(name="lk"), data={"a": "1"}))
        client.patch(ConfigMap, "lk", {"data": {"b": "2"}}, patch_type=PatchType.MERGE)
        client.patch(
            ConfigMap, "lk", {"metadata": {"labels": {"x": "y"}}}, patch_type=PatchType.STRATEGIC
        )
        applied = client.apply(
            ConfigMap(metadata=ObjectMeta(name="lk-applied"), data={"k": "v"}),
            field_manager="lightkube",
        )
        found["applied_managers"] = [m.manager for m in applied.metadata.managedFields]
        try:
            client.apply(
                ConfigMap(metadata=ObjectMeta(name="lk"), data={"a": "9"}), field_manager="other"
            )
        except ApiError as exc:
            found["conflict"] = (exc.status.code, exc.status.reason)
        events = []
        for op, obj in client.watch(
            ConfigMap, resource_version=created.metadata.resourceVersion, server_timeout=1
        ):
            events.append((op, obj.metadata.name))
            if len(events) == 3:
                break
        found["events"] = events
        client.delete(ConfigMap, "lk")
        try:
            client.get(ConfigMap, "lk")
        except ApiError as exc:
            found["missing"] = exc.status.code
        return found

    with trio.fail_after(60):
        found = await in_thread(scenario)
    assert found["nodes"] == ["n1"]
    assert found["applied_managers"] == ["lightkube"]
    assert found["conflict"] == (409, "Conflict")
    assert found["events"] == [("MODIFIED", "lk"), ("MODIFIED", "lk"), ("ADDED", "lk-applied")]
    assert found["missing"] == 404


# -- kr8s ----------------------------------------------------------------------------------
async def test_kr8s(emulator: Emulator) -> None:
    """kr8s gets Nodes, creates, labels, patches, refreshes and deletes a Service."""
    import kr8s
    from kr8s.objects import Service

    emulator.server.create(node("n1", ready=True))

    def scenario() -> dict[str, Any]:
        api = kr8s.api(kubeconfig=str(emulator.kubeconfig))
        found: dict[str, Any] = {"nodes": [n.name for n in kr8s.get("nodes", api=api)]}
        service = Service(lb_service("k8", namespace=NS), api=api)
        service.create()
        service.label({"tier": "front"})
        service.patch({"spec": {"ports": [{"name": "http", "port": 81, "targetPort": 8080}]}})
        service.refresh()
        found["port"] = service.spec["ports"][0]["port"]
        found["labels"] = dict(service.labels)
        found["cluster_ip"] = service.spec["clusterIP"]
        service.delete()
        found["exists"] = service.exists()
        return found

    with trio.fail_after(60):
        found = await in_thread(scenario)
    assert found["nodes"] == ["n1"]
    assert found["port"] == 81
    assert found["labels"] == {"app": "k8", "tier": "front"}
    assert found["cluster_ip"].startswith("10.")
    assert found["exists"] is False


# -- pykube-ng -------------------------------------------------------------------------------
async def test_pykube_ng(emulator: Emulator) -> None:
    """pykube-ng lists Nodes by label, creates, updates, patches and deletes a ConfigMap."""
    import pykube

    emulator.server.create(node("n1", ready=True, labels={"zone": "a"}))
    emulator.server.create(node("n2", ready=True, labels={"zone": "b"}))

    def scenario() -> dict[str, Any]:
        api = pykube.HTTPClient(pykube.KubeConfig.from_file(str(emulator.kubeconfig)))
        found: dict[str, Any] = {
            "zone_a": [n.name for n in pykube.Node.objects(api).filter(selector={"zone": "a"})]
        }
        config = pykube.ConfigMap(
            api,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "pk", "namespace": NS},
                "data": {"a": "1"},
            },
        )
        config.create()
        config.obj["data"]["b"] = "2"
        config.update()
        config.patch({"data": {"c": "3"}})
        config.reload()
        found["data"] = dict(config.obj["data"])
        config.delete()
        found["exists"] = config.exists()
        return found

    with trio.fail_after(60):
        found = await in_thread(scenario)
    assert found["zone_a"] == ["n1"]
    assert found["data"] == {"a": "1", "b": "2", "c": "3"}
    assert found["exists"] is False


# -- the official client's dynamic client: server-side apply --------------------------------
async def test_kubernetes_dynamic_client_server_side_apply(emulator: Emulator) -> None:
    """The official dynamic client applies server-side; the object then carries its Apply
    entry in managedFields."""

    def scenario() -> list[tuple[str, str]]:
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(
            config_file=str(emulator.kubeconfig), client_configuration=configuration
        )
        dynamic = kubernetes.dynamic.DynamicClient(kubernetes.client.ApiClient(configuration))
        services = dynamic.resources.get(api_version="v1", kind="Service")
        applied = services.server_side_apply(
            body=lb_service("dyn", namespace=NS), field_manager="dynamic", namespace=NS
        )
        return [(e.manager, e.operation) for e in applied.metadata.managedFields]

    with trio.fail_after(60):
        managers = await in_thread(scenario)
    assert managers == [("dynamic", "Apply")]
    assert emulator.server.get("v1", "Service", "dyn", namespace=NS)["spec"]["type"] == (
        "LoadBalancer"
    )


# -- a small kopf operator -------------------------------------------------------------------
async def test_kopf_operator(emulator: Emulator, tmp_path: Path) -> None:
    """A kopf operator (standalone, one namespace) sees a labelled ConfigMap created and
    annotates it, and stops cleanly."""
    ca = tmp_path / "ca.pem"
    assert emulator.listening.ca_pem is not None
    ca.write_bytes(emulator.listening.ca_pem)
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(
            server=emulator.listening.url, ca_path=str(ca), token="kopf", default_namespace=NS
        )

    @kopf.on.create("configmaps", labels={"kopf-test": "yes"}, registry=registry)
    def created(patch: kopf.Patch, **_: Any) -> dict[str, str]:
        patch.metadata.annotations["example.com/seen-by"] = "kopf"
        return {"handled": "yes"}

    stop, ready = threading.Event(), threading.Event()

    def run_operator() -> None:
        settings = kopf.OperatorSettings()
        settings.posting.enabled = False
        asyncio.run(
            kopf.operator(
                registry=registry,
                settings=settings,
                standalone=True,
                namespaces=[NS],
                stop_flag=stop,
                ready_flag=ready,
            )
        )

    def seen() -> dict[str, Any] | None:
        found = emulator.lookup("v1", "ConfigMap", "watched", NS)
        annotations = ((found or {}).get("metadata") or {}).get("annotations") or {}
        return found if annotations.get("example.com/seen-by") == "kopf" else None

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(trio.to_thread.run_sync, run_operator))
            await in_thread(ready.wait)
            emulator.server.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": "watched",
                        "namespace": NS,
                        "labels": {"kopf-test": "yes"},
                    },
                    "data": {"a": "1"},
                }
            )
            while seen() is None:  # noqa: ASYNC110 - another loop in another thread writes it
                await trio.sleep(0.05)
            stop.set()
    result = seen()
    assert result is not None
    annotations = result["metadata"]["annotations"]
    assert "kopf.zalando.org/last-handled-configuration" in annotations
    assert "status" not in result  # a ConfigMap has none: kopf's result write is pruned
