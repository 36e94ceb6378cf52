"""What providers are shown of the Nodes (NodeInfo) follows the Nodes: a label or address
change reaches the next ensure, also for a Node that left the set and came back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import trio
import trio.testing

from tests.helpers.services import SimWithLoadBalancers
from trio_ccm.cloud import LoadBalancerIngress, LoadBalancerStatus, NodeInfo, ServiceInfo
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.kube.wellknown import LABEL_EXCLUDE_FROM_LB
from trio_ccm.testing import ApiServer, SimCloud, make_service, register_node, run_ccm, virtual_now


class RecordingLoadBalancers:
    """A provider's load balancers that remember the Nodes each ensure was given."""

    def __init__(self) -> None:
        self.seen: list[dict[str, NodeInfo]] = []
        self.ensured = trio.Event()

    async def get_load_balancer(self, cluster: str, service: ServiceInfo) -> None:
        return None

    def load_balancer_name(self, cluster: str, service: ServiceInfo) -> str:
        return service.name

    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> LoadBalancerStatus:
        self.seen.append({n.name: n for n in nodes})
        self.ensured.set()
        return LoadBalancerStatus((LoadBalancerIngress(ip="192.0.2.10"),))

    async def update_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> None:
        self.seen.append({n.name: n for n in nodes})

    async def ensure_load_balancer_deleted(self, cluster: str, service: ServiceInfo) -> None:
        return None

    async def next_ensure(self) -> dict[str, NodeInfo]:
        self.ensured = trio.Event()
        await self.ensured.wait()
        return self.seen[-1]


async def patch(api: ApiServer, path: str, body: dict[str, Any]) -> None:
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://emulator") as http:
        response = await http.patch(
            path, json=body, headers={"Content-Type": "application/merge-patch+json"}
        )
        response.raise_for_status()


async def test_a_changed_node_label_reaches_the_next_ensure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Node's new label is in the view of the next ensure; so is the label a Node got while
    excluded from load balancers, once it is back."""
    api = ApiServer(seed=1, now=virtual_now())
    cloud = SimCloud(seed=1)
    for name in ("node-a", "node-b"):
        register_node(api, name, uninitialized=False, labels={"team": "red"})
    api.create(make_service("web"))
    lbs = RecordingLoadBalancers()
    sim = SimProvider(url="http://sim", replica="ccm", transport=cloud.transport())
    with trio.fail_after(300):
        async with run_ccm(
            api, SimWithLoadBalancers(sim, lbs), "--controllers=service-lb-controller"
        ):
            first = await lbs.next_ensure()
            assert {n: v.labels.get("team") for n, v in first.items()} == {
                "node-a": "red",
                "node-b": "red",
            }
            await patch(api, "/api/v1/nodes/node-a", {"metadata": {"labels": {"team": "blue"}}})
            excluded = {"metadata": {"labels": {LABEL_EXCLUDE_FROM_LB: "true", "team": "blue"}}}
            await patch(api, "/api/v1/nodes/node-b", excluded)
            await trio.sleep(15)  # the node-set change (node-b out) is pushed
            back = {"metadata": {"labels": {LABEL_EXCLUDE_FROM_LB: None, "team": "green"}}}
            await patch(api, "/api/v1/nodes/node-b", back)
            await trio.sleep(15)
            service_change = {"metadata": {"annotations": {"touched": "1"}}}
            await patch(api, "/api/v1/namespaces/default/services/web", service_change)
            latest = await lbs.next_ensure()
    await sim.aclose()
    assert {n: v.labels.get("team") for n, v in latest.items()} == {
        "node-a": "blue",
        "node-b": "green",
    }
