"""cloud-provider-aws's own e2e load-balancer scenarios (tests/e2e/loadbalancer.go), run
against moto: what upstream checks by sending traffic is checked here on what AWS holds
(listeners, targets, scheme, attributes, security groups and the Nodes' rules)."""

from __future__ import annotations

import pytest
import trio

from tests.helpers.aws import CLUSTER_ID, NAME, lbs_of, open_provider, service
from trio_ccm.cloud.aws import AwsProvider
from trio_ccm.cloud.aws.loadbalancers import nlb_group_name
from trio_ccm.cloud.provider import NodeInfo, ServicePort
from trio_ccm_testbed.aws import Instance, World, balancing

P = "service.beta.kubernetes.io/aws-load-balancer-"
NODES_GROUP = f"nodes.{CLUSTER_ID}"


def labelled(instances: list[Instance]) -> list[NodeInfo]:
    """Nodes with upstream's e2e labels: the hostname, and a role on every other one."""
    return [
        NodeInfo(
            i.private_dns_name,
            provider_id=i.provider_id,
            labels={"kubernetes.io/hostname": i.private_dns_name}
            | ({"node-role": "worker"} if n % 2 == 0 else {}),
        )
        for n, i in enumerate(instances)
    ]


@pytest.mark.parametrize(
    ("annotations", "kind", "internal", "single"),
    [
        pytest.param({}, "clb", False, False, id="CLB-default"),
        pytest.param({P + "internal": "true"}, "clb", True, True, id="CLB-internal-hairpin"),
        pytest.param({P + "type": "nlb"}, "nlb", False, False, id="NLB-default"),
    ],
)
async def test_upstream_basic_scenarios(
    world: World,
    provider: AwsProvider,
    annotations: dict[str, str],
    kind: str,
    internal: bool,
    single: bool,
) -> None:
    """The default Classic ELB and NLB balance to every Node; the internal one (pinned to a
    single Node with target-node-labels, as upstream's hairpin case) is internal and
    balances to that Node only."""
    instances = await world.add_instances(3)
    nodes = labelled(instances)
    marks = dict(annotations)
    if single:
        marks[P + "target-node-labels"] = f"kubernetes.io/hostname={instances[0].private_dns_name}"
    with trio.fail_after(60):
        status = await lbs_of(provider).ensure_load_balancer(
            CLUSTER_ID, service(annotations=marks), nodes
        )
        seen = await balancing(world)
    wanted = [instances[0].id] if single else sorted(i.id for i in instances)
    if kind == "clb":
        lb = seen.clbs[NAME]
        assert lb["instances"] == wanted
    else:
        lb = seen.nlbs[NAME]
        assert all(g["targets"] == wanted for g in seen.target_groups.values())
    assert lb["scheme"] == ("internal" if internal else "internet-facing")
    assert status.ingress[0].hostname == lb["dns"]


async def test_upstream_nlb_target_node_labels(world: World, provider: AwsProvider) -> None:
    """NLB with target-node-labels: only the labelled Nodes are targets."""
    instances = await world.add_instances(4)
    marks = {P + "type": "nlb", P + "target-node-labels": "node-role=worker"}
    with trio.fail_after(60):
        await lbs_of(provider).ensure_load_balancer(
            CLUSTER_ID, service(annotations=marks), labelled(instances)
        )
        seen = await balancing(world)
    (group,) = seen.target_groups.values()
    assert group["targets"] == sorted(i.id for i in instances[::2])


async def test_upstream_nlb_internal_with_target_group_attributes(
    world: World, provider: AwsProvider
) -> None:
    """Internal NLB pinned to one Node, with target-group attributes (client IP preservation
    off, proxy protocol v2 on): AWS holds both on every target group."""
    instances = await world.add_instances(2)
    marks = {
        P + "type": "nlb",
        P + "internal": "true",
        P + "target-node-labels": f"kubernetes.io/hostname={instances[1].private_dns_name}",
        P + "target-group-attributes": "preserve_client_ip.enabled=false,"
        "proxy_protocol_v2.enabled=true",
    }
    ports = (ServicePort("http", "TCP", 80, 30080), ServicePort("alt", "TCP", 81, 30081))
    with trio.fail_after(60):
        await lbs_of(provider).ensure_load_balancer(
            CLUSTER_ID, service(annotations=marks, ports=ports), labelled(instances)
        )
        seen = await balancing(world)
        v2 = world.client("elbv2")

        def attributes() -> list[dict[str, str]]:
            return [
                {
                    a["Key"]: a["Value"]
                    for a in v2.describe_target_group_attributes(
                        TargetGroupArn=g["TargetGroupArn"]
                    )["Attributes"]
                }
                for g in seen.target_groups.values()
            ]

        held = await trio.to_thread.run_sync(attributes)
    assert seen.nlbs[NAME]["scheme"] == "internal"
    assert len(held) == 2
    for item in held:
        assert item["preserve_client_ip.enabled"] == "false"
        assert item["proxy_protocol_v2.enabled"] == "true"
    assert all(g["targets"] == [instances[1].id] for g in seen.target_groups.values())


async def _byo_group(world: World) -> str:
    ec2 = world.client("ec2")

    def create() -> str:
        group: str = ec2.create_security_group(
            GroupName="byo-e2e", Description="BYO Security Group for NLB e2e", VpcId=world.vpc_id
        )["GroupId"]
        return group

    return await trio.to_thread.run_sync(create)


def nlb_groups(seen: object) -> list[str]:
    return list(seen.nlbs[NAME]["raw"].get("SecurityGroups", []))  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(["byo"], id="NLB-BYO-group"),
        pytest.param(["managed", "byo"], id="NLB-managed-to-BYO"),
        pytest.param(["byo", "managed"], id="NLB-BYO-to-managed"),
    ],
)
async def test_upstream_nlb_security_group_scenarios(world: World, steps: list[str]) -> None:
    """With NLBSecurityGroupMode=Managed: a BYO group named by security-groups is the NLB's
    only group; a managed group (upstream's name) is made, open on the listener ports, and
    the Nodes' group lets it in with one rule; switching to BYO detaches and deletes the
    managed group and its rule; switching back makes a managed group again."""
    instances = await world.add_instances(2)
    byo = await _byo_group(world)
    managed_name = nlb_group_name(CLUSTER_ID, "default", "web", service().uid)
    async with open_provider(world, NLBSecurityGroupMode="Managed") as provider:
        lbs = lbs_of(provider)
        for step in steps:
            marks = {P + "type": "nlb"}
            if step == "byo":
                marks[P + "security-groups"] = byo
            with trio.fail_after(60):
                await lbs.ensure_load_balancer(
                    CLUSTER_ID, service(annotations=marks), labelled(instances)
                )
                seen = await balancing(world)
            nodes_rules = seen.security_groups[NODES_GROUP]["ingress"]
            if step == "byo":
                assert nlb_groups(seen) == [byo]
                assert managed_name not in seen.security_groups
                assert not any(r[3].startswith("sg-") for r in nodes_rules)
            else:
                managed = seen.security_groups[managed_name]
                assert nlb_groups(seen) == [managed["id"]]
                assert ("tcp", 80, 80, "0.0.0.0/0", "") in managed["ingress"]
                assert ("icmp", 3, 4, "0.0.0.0/0", "") in managed["ingress"]
                assert nodes_rules == [("-1", -1, -1, managed["id"], "")]
        with trio.fail_after(60):
            await lbs.ensure_load_balancer_deleted(CLUSTER_ID, service(annotations=marks))
            gone = await balancing(world)
    assert not gone.nlbs
    assert not gone.target_groups
    assert managed_name not in gone.security_groups
    assert gone.security_groups[NODES_GROUP]["ingress"] == []
