"""Unknown outcomes with the aws provider against moto (issue 27): a mutating call that AWS
applies but whose answer is lost (the fault middleware's `server_error(landed=True)`: moto
handles the request, the client gets HTTP 500) raises `OutcomeUnknownError` with
`late_landing_s`, is not sent again by the client, and the controller looks again once the
call can no longer land."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import pytest
import trio
from structlog.testing import capture_logs

from tests.helpers.aws import (
    CLUSTER_ID,
    Cluster,
    lbs_of,
    nodes,
    running,
    service,
    until,
)
from trio_ccm.cloud.aws import AwsProvider
from trio_ccm.cloud.aws.annotations import TYPE
from trio_ccm.cloud.aws.client import (
    DEFAULT_TIMEOUT_S,
    LATE_LANDING_MARGIN_S,
    AwsOutcomeUnknownError,
)
from trio_ccm.cloud.provider import OutcomeUnknownError, Route
from trio_ccm.testing import lb_name, make_service
from trio_ccm_testbed.aws import World, balancing

LATE_S = DEFAULT_TIMEOUT_S + LATE_LANDING_MARGIN_S  # what the provider says: 60 s


@pytest.mark.parametrize(
    ("annotations", "kind"),
    [
        pytest.param({}, "clbs", id="classic-elb"),
        pytest.param({TYPE: "nlb"}, "nlbs", id="nlb"),
    ],
)
async def test_a_lost_create_answer_is_an_unknown_outcome_that_landed(
    world: World, provider: AwsProvider, annotations: dict[str, str], kind: str
) -> None:
    """CreateLoadBalancer is applied but answered with HTTP 500: the provider raises
    OutcomeUnknownError with late_landing_s = timeout + margin after one request; the load
    balancer exists, and the next ensure adopts it without creating another."""
    instances = await world.add_instances(2)
    faults = world.server.faults
    faults.server_error("CreateLoadBalancer", service="elasticloadbalancing", landed=True)
    wanted = service(annotations=annotations)
    lbs = lbs_of(provider)
    with trio.fail_after(30):
        with pytest.raises(OutcomeUnknownError) as caught:
            await lbs.ensure_load_balancer(CLUSTER_ID, wanted, nodes(instances))
        landed = getattr(await balancing(world), kind)
        await lbs.ensure_load_balancer(CLUSTER_ID, wanted, nodes(instances))
        after = getattr(await balancing(world), kind)
    assert isinstance(caught.value, AwsOutcomeUnknownError)
    assert caught.value.action == "CreateLoadBalancer"
    assert caught.value.late_landing_s == LATE_S
    assert "may still apply it" in str(caught.value)
    assert len(landed) == 1
    assert after.keys() == landed.keys()
    assert faults.calls("CreateLoadBalancer") == 1


async def test_a_lost_create_route_answer_is_an_unknown_outcome_that_landed(
    world: World, provider: AwsProvider
) -> None:
    """CreateRoute is applied but answered with HTTP 500: OutcomeUnknownError after one
    request, the route is in the table, and creating it again reads the table afresh (the
    copy from before the lost answer is not trusted) and is success without a second
    CreateRoute (the route it finds is ours), leaving one route."""
    (instance,) = await world.add_instances(1)
    route = Route(instance.private_dns_name, "10.244.1.0/24")
    faults = world.server.faults
    faults.server_error("CreateRoute", service="ec2", landed=True)
    assert provider.routes is not None
    with trio.fail_after(30):
        with pytest.raises(OutcomeUnknownError) as caught:
            await provider.routes.create_route(CLUSTER_ID, "uid", route)
        sent = faults.calls("CreateRoute")
        landed = [r for r in await world.routes() if r.get("InstanceId") == instance.id]
        await provider.routes.create_route(CLUSTER_ID, "uid", route)
        after = [r for r in await world.routes() if r.get("InstanceId") == instance.id]
    assert caught.value.late_landing_s == LATE_S
    assert sent == 1
    assert faults.calls("CreateRoute") == 1
    assert [r.get("DestinationCidrBlock") for r in landed] == ["10.244.1.0/24"]
    assert after == landed


async def test_the_controller_looks_again_once_the_lost_create_cannot_land(
    cluster: Cluster,
) -> None:
    """The service controller's CreateLoadBalancer lands with its answer lost: it logs the
    unknown outcome with the moment it may land until (its start + 60 s), its retry adopts
    the load balancer and sets the Service's hostname, and it ensures the load balancer once
    more at that moment, not before (real time: this test waits about a minute)."""
    world = cluster.world
    instances = await world.add_instances(2)
    for instance in instances:
        manifest = world.node_manifest(instance, provider_id=True)
        manifest["spec"]["taints"] = []
        cluster.api.create(manifest)
    faults = world.server.faults
    faults.server_error("CreateLoadBalancer", service="elasticloadbalancing", landed=True)
    checked_at: list[float] = []
    with trio.fail_after(LATE_S + 60), capture_logs() as logs:
        async with running(cluster, controllers="service-lb-controller"):
            created = cluster.api.create(
                make_service("web", ports=[{"name": "http", "port": 80, "nodePort": 30080}])
            )
            name = lb_name(created)

            def said(event: str) -> list[MutableMapping[str, Any]]:
                return [e for e in logs if e["event"] == event]

            async def adopted() -> bool:
                seen = await balancing(world)
                got = cluster.api.get("v1", "Service", "web", namespace="default")
                ingress = got.get("status", {}).get("loadBalancer", {}).get("ingress") or [{}]
                return name in seen.clbs and ingress[0].get("hostname") == seen.clbs[name]["dns"]

            await until(lambda: bool(said("service.outcome-unknown")))
            await until(adopted)
            await until(lambda: bool(said("service.late-landing-check")))
            checked_at.append(trio.current_time())
    (unknown,) = said("service.outcome-unknown")
    may_land_until = unknown["may_land_until"]
    assert isinstance(may_land_until, float)
    assert checked_at[0] >= may_land_until
    assert said("service.late-landing-check")[0]["service"] == "default/web"
    assert faults.calls("CreateLoadBalancer") == 1
    assert list((await balancing(world)).clbs) == [name]
