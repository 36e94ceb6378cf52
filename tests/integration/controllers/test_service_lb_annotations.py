"""service-lb-controller writing back the annotations a provider asks for
(`LoadBalancerStatus.annotations`, as OCCM writes `loadbalancer.openstack.org/load-balancer-id`),
against the emulator and the simulated cloud: one merge patch of the Service only when a
value differs, the Service's other annotations kept, no second ensure for the echo, and
nothing extra written for a provider that asks for none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import trio
import trio.testing

from tests.helpers.world import LoadBalancersDouble, ProviderDouble, World, open_world
from trio_ccm.cloud import LoadBalancers, LoadBalancerStatus, NodeInfo, ServiceInfo
from trio_ccm.testing import make_service, wait_for
from trio_ccm.testing.harness import Write

SERVICE_LB = "--controllers=service"
SERVICE = "/api/v1/namespaces/default/services/web"
QUIET_S = 10.0
LB_ID = "example.com/load-balancer-id"


class Annotating(LoadBalancersDouble):
    """The sim provider's load balancers, whose ensure also asks for `wanted` (as a
    third-party provider's would)."""

    def __init__(self, inner: LoadBalancers, wanted: Mapping[str, str]) -> None:
        super().__init__(inner)
        self.wanted = dict(wanted)

    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> LoadBalancerStatus:
        status = await self.inner.ensure_load_balancer(cluster, service, nodes)
        return LoadBalancerStatus(status.ingress, annotations=self.wanted)


def annotating(wanted: Mapping[str, str]) -> Any:
    def wrap(sim: Any) -> ProviderDouble:
        return ProviderDouble(sim, load_balancers=Annotating(sim.load_balancers, wanted))

    return wrap


def object_writes(world: World) -> list[Write]:
    """Writes to the Service object itself (not its status)."""
    return [w for w in world.transport.writes if w.path == SERVICE]


@pytest.mark.parametrize(
    ("wanted", "present", "writes", "expected"),
    [
        pytest.param({}, {}, 0, {"team": "a"}, id="none-asked"),
        pytest.param({LB_ID: "lb-1"}, {}, 1, {"team": "a", LB_ID: "lb-1"}, id="written"),
        pytest.param(
            {LB_ID: "lb-1"}, {LB_ID: "lb-1"}, 0, {"team": "a", LB_ID: "lb-1"}, id="already-there"
        ),
        pytest.param(
            {LB_ID: "lb-1"}, {LB_ID: "lb-0"}, 1, {"team": "a", LB_ID: "lb-1"}, id="replaced"
        ),
    ],
)
async def test_annotations_written_once_when_they_differ(
    autojump_clock: trio.testing.MockClock,
    wanted: dict[str, str],
    present: dict[str, str],
    writes: int,
    expected: dict[str, str],
) -> None:
    """The annotations the provider asks for are merged into the Service with one patch of
    the object (at t=0, beside the status writes) only when a value differs; the user's
    annotations stay, the echo costs no second ensure, and a later node change is a
    backends update, not a full ensure."""
    with trio.fail_after(120):
        async with open_world() as world:
            world.register("node-a", taints=[])
            world.api.create(make_service("web", annotations={"team": "a", **present}))
            async with world.running(SERVICE_LB, wrap=annotating(wanted)):
                await wait_for(
                    lambda: bool(world.service("web").get("status", {}).get("loadBalancer"))
                )
                await trio.sleep(QUIET_S)  # the echoes of every write
                assert world.service("web")["metadata"]["annotations"] == expected
                assert object_writes(world) == [Write(0.0, "PATCH", SERVICE)] * writes
                assert len(world.cloud.calls_by("PutLoadBalancer")) == 1
                world.register("node-b", taints=[])
                await wait_for(lambda: bool(world.cloud.calls_by("SetLoadBalancerBackends")))
                await trio.sleep(QUIET_S)
                assert len(world.cloud.calls_by("PutLoadBalancer")) == 1
                assert len(object_writes(world)) == writes
