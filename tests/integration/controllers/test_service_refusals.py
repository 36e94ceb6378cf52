"""A provider that refuses a Service (`ServiceRefused`), or answers with an ingress of an
IP family the Service does not ask for: one Warning, one log line without a traceback, no
wrong status, and no retry until the Service changes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import trio
import trio.testing
from structlog.testing import capture_logs

from tests.helpers.services import SimWithLoadBalancers
from trio_ccm.cloud import (
    LoadBalancerIngress,
    LoadBalancerStatus,
    NodeInfo,
    ServiceInfo,
    ServiceRefused,
)
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.testing import ApiServer, SimCloud, make_service, register_node, run_ccm, virtual_now


class FixedAddressLoadBalancers:
    """A third-party-style provider's load balancers: always 192.0.2.10, whatever the
    Service asks for; UDP is refused."""

    def __init__(self) -> None:
        self.ensured: list[tuple[float, str]] = []

    async def get_load_balancer(self, cluster: str, service: ServiceInfo) -> LoadBalancerStatus:
        return LoadBalancerStatus((LoadBalancerIngress(ip="192.0.2.10"),))

    def load_balancer_name(self, cluster: str, service: ServiceInfo) -> str:
        return service.name

    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> LoadBalancerStatus:
        self.ensured.append((trio.current_time(), service.key))
        if any(p.protocol == "UDP" for p in service.ports):
            raise ServiceRefused(f"Service {service.key}: UDP ports are not offered here")
        return LoadBalancerStatus((LoadBalancerIngress(ip="192.0.2.10"),))

    async def update_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> None:
        return None

    async def ensure_load_balancer_deleted(self, cluster: str, service: ServiceInfo) -> None:
        return None


async def events_for(api: ApiServer, name: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://emulator") as http:
        items: list[dict[str, Any]] = (await http.get("/api/v1/events")).json()["items"]
    return [e for e in items if e["involvedObject"]["name"] == name]


async def test_an_ingress_of_the_wrong_family_is_not_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An IPv6-only Service answered with an IPv4 address gets one Warning naming both and
    no status; it is not ensured again until it changes."""
    api = ApiServer(seed=1, now=virtual_now())
    cloud = SimCloud(seed=1)
    register_node(api, "node-a", uninitialized=False)
    api.create(make_service("v6", ipFamilies=["IPv6"], ipFamilyPolicy="SingleStack"))
    lbs = FixedAddressLoadBalancers()
    sim = SimProvider(url="http://sim", replica="ccm", transport=cloud.transport())
    with trio.fail_after(700):
        async with run_ccm(
            api, SimWithLoadBalancers(sim, lbs), "--controllers=service-lb-controller"
        ):
            await trio.sleep(600)
    await sim.aclose()
    assert lbs.ensured == [(0.0, "default/v6")]
    assert api.get("v1", "Service", "v6", "default")["status"].get("loadBalancer", {}) == {}
    warnings = [e for e in await events_for(api, "v6") if e["type"] == "Warning"]
    assert [(e["reason"], e["count"]) for e in warnings] == [("SyncLoadBalancerFailed", 1)]
    assert (
        "the cloud gave IPv4 addresses (192.0.2.10) but spec.ipFamilies asks for IPv6"
        in (warnings[0]["message"])
    )


async def test_a_refusal_is_one_warning_and_one_log_line_without_a_traceback(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A provider's ServiceRefused: one Warning Event, one warning log line with the
    reason and no traceback, no retry for ten minutes; fixed, the Service is served."""
    api = ApiServer(seed=1, now=virtual_now())
    cloud = SimCloud(seed=1)
    register_node(api, "node-a", uninitialized=False)
    udp = [{"name": "dns", "port": 53, "protocol": "UDP"}]
    api.create(make_service("dns", ports=udp))
    lbs = FixedAddressLoadBalancers()
    sim = SimProvider(url="http://sim", replica="ccm", transport=cloud.transport())
    with capture_logs() as logs, trio.fail_after(900):
        async with run_ccm(
            api, SimWithLoadBalancers(sim, lbs), "--controllers=service-lb-controller"
        ):
            await trio.sleep(600)
            async with httpx.AsyncClient(
                transport=api.transport(), base_url="http://emulator"
            ) as http:
                response = await http.patch(
                    "/api/v1/namespaces/default/services/dns",
                    json={"spec": {"ports": [{"name": "dns", "port": 53, "protocol": "TCP"}]}},
                    headers={"content-type": "application/merge-patch+json"},
                )
                response.raise_for_status()
            await trio.sleep(1)
    await sim.aclose()
    assert [t for t, _ in lbs.ensured] == [0.0, 600.0]
    refused = [e for e in logs if e["event"] == "service.refused"]
    assert [(e["log_level"], e["reason"]) for e in refused] == [
        ("warning", "Service default/dns: UDP ports are not offered here")
    ]
    assert all("exc_info" not in e for e in logs)
    assert not any(e["event"] == "actor.failed" for e in logs)
    ingress = api.get("v1", "Service", "dns", "default")["status"]["loadBalancer"]["ingress"]
    assert ingress == [{"ip": "192.0.2.10"}]
