"""service-lb-controller against the emulator and the simulated cloud (both in-process)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from tests.integration.controllers.conftest import World, open_world, running, settings

FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
SERVICE_LB = settings(controllers=("service-lb-controller",))


def lb_service(name: str, *, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "LoadBalancer",
        "selector": {"app": name},
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
    }
    body.update(spec)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def lb_name(service: dict[str, Any]) -> str:
    return ("a" + service["metadata"]["uid"].replace("-", ""))[:32]


def service(world: World, name: str, namespace: str = "default") -> dict[str, Any]:
    found: dict[str, Any] = world.api.get("v1", "Service", name, namespace)
    return found


async def test_smoke(autojump_clock: trio.testing.MockClock) -> None:
    async with open_world() as world:
        world.register("node-a", taints=[])
        world.register("node-b", taints=[])
        created = world.api.create(lb_service("web"))
        async with running(world, SERVICE_LB):
            await trio.sleep(5)
            svc = service(world, "web")
            assert svc["metadata"]["finalizers"] == [FINALIZER]
            lb = world.cloud.load_balancer(lb_name(created))
            assert lb is not None
            assert lb.nodes == ("node-a", "node-b")
            assert svc["status"]["loadBalancer"]["ingress"] == [{"ip": lb.ingress_ip}]
            world.register("node-c", taints=[])
            await trio.sleep(5)
            lb = world.cloud.load_balancer(lb_name(created))
            assert lb is not None
            assert lb.nodes == ("node-a", "node-b", "node-c")
            r = await world.http.delete("/api/v1/namespaces/default/services/web")
            assert r.status_code == 200
            await trio.sleep(5)
            assert world.cloud.load_balancers() == []
            print([(e["reason"], e["message"]) for e in await world.events()])
            print(world.transport.writes)
