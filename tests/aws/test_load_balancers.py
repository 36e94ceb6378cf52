"""The aws provider's load balancers against moto: Classic ELB and NLB made, updated,
their targets changed by difference, deleted with everything made for them, refusals,
and the inventory the leak sweep reads."""

from __future__ import annotations

import pytest
import trio

from tests.helpers.aws import CLUSTER_ID, NAME, UID, lbs_of, nodes, service
from trio_ccm.cloud.aws import AwsProvider
from trio_ccm.cloud.aws.annotations import TYPE
from trio_ccm.cloud.provider import (
    ImplementedElsewhere,
    LoadBalancerInventory,
    ServicePort,
    ServiceRefused,
)
from trio_ccm.errors import RetryAfter
from trio_ccm_testbed.aws import Fault, World, balancing

NLB = {TYPE: "nlb"}


async def test_a_classic_elb_is_made_updated_by_difference_and_deleted(
    world: World, provider: AwsProvider
) -> None:
    """Without annotations: a Classic ELB with its k8s-elb group, the Nodes' group open to
    it, every instance registered; a node change registers only the difference with no
    describe; deletion leaves nothing."""
    instances = await world.add_instances(4)
    lbs = lbs_of(provider)
    with trio.fail_after(30):
        status = await lbs.ensure_load_balancer(CLUSTER_ID, service(), nodes(instances[:3]))
        seen = await balancing(world)
        faults = world.server.faults
        faults.reset_counts()
        await lbs.update_load_balancer(CLUSTER_ID, service(), nodes(instances[1:]))
        counts = {k: v for k, v in faults.counts().items() if k.startswith("elastic")}
        after = await balancing(world)
        await lbs.ensure_load_balancer_deleted(CLUSTER_ID, service())
        assert await lbs.get_load_balancer(CLUSTER_ID, service()) is None
        gone = await balancing(world)
    clb = seen.clbs[NAME]
    assert status.ingress[0].hostname == clb["dns"]
    assert clb["listeners"] == [("TCP", 80, "TCP", 30080)]
    assert clb["instances"] == sorted(i.id for i in instances[:3])
    own = seen.security_groups[f"k8s-elb-{NAME}"]
    assert clb["security_groups"] == [own["id"]]
    assert own["tags"][f"kubernetes.io/cluster/{CLUSTER_ID}"] == "owned"
    assert own["tags"]["kubernetes.io/service-name"] == "default/web"
    assert ("tcp", 80, 80, "0.0.0.0/0", "") in own["ingress"]
    assert seen.security_groups[f"nodes.{CLUSTER_ID}"]["ingress"] == [("-1", -1, -1, own["id"], "")]
    assert clb["health_check"]["Target"] == "TCP:30080"
    assert after.clbs[NAME]["instances"] == sorted(i.id for i in instances[1:])
    assert counts == {
        "elasticloadbalancing:DeregisterInstancesFromLoadBalancer": 1,
        "elasticloadbalancing:RegisterInstancesWithLoadBalancer": 1,
    }
    assert gone.empty, gone


async def test_an_nlb_is_made_updated_by_difference_and_deleted(
    world: World, provider: AwsProvider
) -> None:
    """type nlb: an NLB, a listener and a target group per port (upstream's name), client
    rules and the shared MTU-discovery rule on the Nodes' group; a node change costs one
    register and one deregister per target group; deletion leaves nothing."""
    instances = await world.add_instances(4)
    lbs = lbs_of(provider)
    svc = service(
        annotations=NLB,
        ports=(ServicePort("http", "TCP", 80, 30080), ServicePort("https", "TCP", 443, 30443)),
    )
    with trio.fail_after(30):
        status = await lbs.ensure_load_balancer(CLUSTER_ID, svc, nodes(instances[:3]))
        seen = await balancing(world)
        faults = world.server.faults
        faults.reset_counts()
        await lbs.update_load_balancer(CLUSTER_ID, svc, nodes(instances[1:]))
        counts = {k: v for k, v in faults.counts().items() if k.startswith("elastic")}
        after = await balancing(world)
        await lbs.ensure_load_balancer_deleted(CLUSTER_ID, svc)
        gone = await balancing(world)
    nlb = seen.nlbs[NAME]
    assert status.ingress[0].hostname == nlb["dns"]
    assert nlb["scheme"] == "internet-facing"
    assert [(p, proto) for p, proto, _, _ in nlb["listeners"]] == [(80, "TCP"), (443, "TCP")]
    assert sorted(seen.target_groups) == sorted(entry[2] for entry in nlb["listeners"])
    for group in seen.target_groups.values():
        assert group["TargetGroupName"].startswith("k8s-default-web-")
        assert group["targets"] == sorted(i.id for i in instances[:3])
        assert group["HealthCheckProtocol"] == "TCP"
        assert group["HealthCheckIntervalSeconds"] == 30
    rules = seen.security_groups[f"nodes.{CLUSTER_ID}"]["ingress"]
    assert rules == [
        ("icmp", 3, 4, "0.0.0.0/0", "kubernetes.io/rule/nlb/mtu"),
        ("tcp", 30080, 30080, "0.0.0.0/0", f"kubernetes.io/rule/nlb/client={NAME}"),
        ("tcp", 30443, 30443, "0.0.0.0/0", f"kubernetes.io/rule/nlb/client={NAME}"),
    ]
    for group in after.target_groups.values():
        assert group["targets"] == sorted(i.id for i in instances[1:])
    assert counts == {
        "elasticloadbalancing:DeregisterTargets": 2,
        "elasticloadbalancing:RegisterTargets": 2,
    }
    assert gone.empty, gone


async def test_a_group_still_in_use_is_retried_after_not_an_error(
    world: World, provider: AwsProvider
) -> None:
    """DeleteSecurityGroup answering DependencyViolation (the ELB's interfaces detaching) is
    a RetryAfter of 5 s; the next call finishes the deletion."""
    instances = await world.add_instances(1)
    lbs = lbs_of(provider)
    world.server.faults.add(
        Fault("error", "DeleteSecurityGroup", "ec2", 1, 400, "DependencyViolation")
    )
    with trio.fail_after(30):
        await lbs.ensure_load_balancer(CLUSTER_ID, service(), nodes(instances))
        with pytest.raises(RetryAfter) as caught:
            await lbs.ensure_load_balancer_deleted(CLUSTER_ID, service())
        assert await lbs.get_load_balancer(CLUSTER_ID, service()) is not None  # the group
        await lbs.ensure_load_balancer_deleted(CLUSTER_ID, service())
        assert (await balancing(world)).empty
    assert caught.value.delay_s == 5.0


async def test_the_inventory_lists_what_this_cluster_made_for_services(
    world: World, provider: AwsProvider
) -> None:
    """list_load_balancers returns the NLBs and Classic ELBs tagged for this cluster with
    their Service and UID; a load balancer without the tags is not listed."""
    lbs = lbs_of(provider)
    assert isinstance(lbs, LoadBalancerInventory)
    other = "99999999-2222-3333-4444-555555555555"
    with trio.fail_after(30):
        await lbs.ensure_load_balancer(CLUSTER_ID, service(), [])
        await lbs.ensure_load_balancer(
            CLUSTER_ID, service(name="api", uid=other, annotations=NLB), []
        )
        await trio.to_thread.run_sync(
            lambda: world.client("elb").create_load_balancer(
                LoadBalancerName="someone-elses",
                Listeners=[{"Protocol": "tcp", "LoadBalancerPort": 80, "InstancePort": 30000}],
                Subnets=[next(iter(world.subnet_ids.values()))],
            )
        )
        listed = await lbs.list_load_balancers(CLUSTER_ID)
    assert sorted((o.name, o.key, o.uid) for o in listed) == sorted(
        [
            (NAME, "default/web", UID),
            (("a" + other.replace("-", ""))[:32], "default/api", other),
        ]
    )


@pytest.mark.parametrize(
    ("annotations", "raised"),
    [
        pytest.param({TYPE: "external"}, ImplementedElsewhere, id="external"),
        pytest.param({TYPE: "nlb-ip"}, ImplementedElsewhere, id="nlb-ip"),
        pytest.param(
            {"service.beta.kubernetes.io/aws-load-balancer-eip-allocations": "eipalloc-1"},
            ServiceRefused,
            id="eip-allocations",
        ),
    ],
)
async def test_types_owned_elsewhere_and_refusals_make_nothing(
    world: World, provider: AwsProvider, annotations: dict[str, str], raised: type[Exception]
) -> None:
    """external / nlb-ip belong to the AWS Load Balancer Controller; a refused Service makes
    nothing either."""
    lbs = lbs_of(provider)
    with trio.fail_after(30), pytest.raises(raised):
        await lbs.ensure_load_balancer(CLUSTER_ID, service(annotations=annotations), [])
    assert (await balancing(world)).empty
