"""A live Service's load balancer changed after creation, against moto: every field
upstream applies to an existing Classic ELB (subnets, tags, listeners, health check,
attributes, policies), the NLB's access logs, addresses and managed security group, and
the changes AWS cannot make: type and scheme kept as they are with a warning while the load
balancer keeps following the Service, addresses refused with the load balancer kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio

from tests.helpers.aws import CLUSTER_ID, NAME, lbs_of, nodes, open_provider, serve_wsgi, service
from trio_ccm.cloud.aws import AwsProvider
from trio_ccm.cloud.aws.errors import AwsError
from trio_ccm.cloud.provider import LoadBalancerInventory, ServicePort, ServiceRefused
from trio_ccm_testbed.aws import Balancing, Fault, World, balancing, certificate

P = "service.beta.kubernetes.io/aws-load-balancer-"


def clb(seen: Balancing) -> dict[str, Any]:
    return seen.clbs[NAME]


def backend_policies(seen: Balancing) -> dict[int, list[str]]:
    return {
        b["InstancePort"]: b["PolicyNames"]
        for b in clb(seen)["raw"].get("BackendServerDescriptions", [])
        if b["PolicyNames"]
    }


def listener_policies(seen: Balancing) -> dict[int, list[str]]:
    return {
        d["Listener"]["LoadBalancerPort"]: d["PolicyNames"]
        for d in clb(seen)["raw"]["ListenerDescriptions"]
    }


Case = tuple[dict[str, Any], dict[str, Any], Callable[[Balancing, World], bool]]


CLB_CHANGES: list[Any] = [
    pytest.param(
        {},
        {"annotations": {P + "additional-resource-tags": "team=web,cost=7"}},
        lambda seen, _w: clb(seen)["tags"]["team"] == "web" and clb(seen)["tags"]["cost"] == "7",
        id="tags",
    ),
    pytest.param(
        {},
        {"ports": (ServicePort("http", "TCP", 80, 30080), ServicePort("alt", "TCP", 8080, 30081))},
        lambda seen, _w: (
            clb(seen)["listeners"] == [("TCP", 80, "TCP", 30080), ("TCP", 8080, "TCP", 30081)]
        ),
        id="listeners",
    ),
    pytest.param(
        {},
        {
            "annotations": {
                P + "healthcheck-interval": "30",
                P + "healthcheck-unhealthy-threshold": "3",
            }
        },
        lambda seen, _w: (
            clb(seen)["health_check"]["Interval"] == 30
            and clb(seen)["health_check"]["UnhealthyThreshold"] == 3
        ),
        id="health-check",
    ),
    pytest.param(
        {},
        {
            "annotations": {
                P + "connection-idle-timeout": "300",
                P + "cross-zone-load-balancing-enabled": "true",
            }
        },
        lambda seen, _w: (
            clb(seen)["attributes"]["ConnectionSettings"]["IdleTimeout"] == 300
            and clb(seen)["attributes"]["CrossZoneLoadBalancing"]["Enabled"]
        ),
        id="attributes",
    ),
    pytest.param(
        {},
        {
            "annotations": {
                P + "access-log-enabled": "true",
                P + "access-log-s3-bucket-name": "logs",
                P + "access-log-emit-interval": "5",
            }
        },
        lambda seen, _w: (
            clb(seen)["attributes"]["AccessLog"]["Enabled"]
            and clb(seen)["attributes"]["AccessLog"]["S3BucketName"] == "logs"
            and clb(seen)["attributes"]["AccessLog"]["EmitInterval"] == 5
        ),
        id="access-logs",
    ),
    pytest.param(
        {},
        {"annotations": {P + "proxy-protocol": "*"}},
        lambda seen, _w: backend_policies(seen) == {30080: ["k8s-proxyprotocol-enabled"]},
        id="proxy-protocol-on",
    ),
    pytest.param(
        {"annotations": {P + "proxy-protocol": "*"}},
        {},
        lambda seen, _w: backend_policies(seen) == {},
        id="proxy-protocol-off",
    ),
    pytest.param(
        {},
        {"annotations": {P + "subnets": "SUBNET0"}},
        lambda seen, w: clb(seen)["raw"]["Subnets"] == [sorted(w.subnet_ids.values())[0]],
        id="subnets",
    ),
]


def _resolve(tweaks: dict[str, Any], world: World) -> dict[str, Any]:
    marks = tweaks.get("annotations")
    if marks and marks.get(P + "subnets") == "SUBNET0":
        marks = {**marks, P + "subnets": sorted(world.subnet_ids.values())[0]}
        return {**tweaks, "annotations": marks}
    return tweaks


@pytest.mark.parametrize(("before", "after", "check"), CLB_CHANGES)
async def test_a_classic_elb_takes_each_change_after_creation(
    world: World, provider: AwsProvider, before: dict[str, Any], after: dict[str, Any], check: Any
) -> None:
    """A field changed on a live Service's Classic ELB is applied by the next ensure (as
    upstream's ensureLoadBalancer), on the same load balancer."""
    instances = await world.add_instances(2)
    lbs = lbs_of(provider)
    with trio.fail_after(60):
        await lbs.ensure_load_balancer(
            CLUSTER_ID, service(**_resolve(before, world)), nodes(instances)
        )
        first = await balancing(world)
        await lbs.ensure_load_balancer(
            CLUSTER_ID, service(**_resolve(after, world)), nodes(instances)
        )
        seen = await balancing(world)
    assert clb(seen)["dns"] == clb(first)["dns"]
    assert check(seen, world), clb(seen)


async def test_a_classic_elb_takes_an_ssl_negotiation_policy(
    world: World, provider: AwsProvider
) -> None:
    """ssl-negotiation-policy makes upstream's k8s-SSLNegotiationPolicy-<name> and sets it on
    the SSL listeners only; removing the annotation takes it off again."""
    instances = await world.add_instances(1)
    cert = await certificate(world)
    marks = {P + "ssl-cert": cert, P + "ssl-ports": "443"}
    ports = (ServicePort("http", "TCP", 80, 30080), ServicePort("https", "TCP", 443, 30443))
    policy = "ELBSecurityPolicy-TLS-1-2-2017-01"
    lbs = lbs_of(provider)
    with trio.fail_after(60):
        await lbs.ensure_load_balancer(
            CLUSTER_ID,
            service(ports=ports, annotations={**marks, P + "ssl-negotiation-policy": policy}),
            nodes(instances),
        )
        on = await balancing(world)
        await lbs.ensure_load_balancer(
            CLUSTER_ID, service(ports=ports, annotations=marks), nodes(instances)
        )
        off = await balancing(world)
    assert listener_policies(on) == {80: [], 443: [f"k8s-SSLNegotiationPolicy-{policy}"]}
    assert listener_policies(off) == {80: [], 443: []}


async def test_a_scheme_change_keeps_the_load_balancer_following_the_service(
    world: World, provider: AwsProvider
) -> None:
    """A scheme change (which AWS cannot make; upstream ignores it) keeps the load balancer
    with its scheme and a warning naming the annotation and the fix, also from a restarted
    provider (nothing remembered); nothing new is made, and a Node added afterwards
    reaches it."""
    instances = await world.add_instances(2)
    internal = service(annotations={P + "internal": "true"})
    with trio.fail_after(60):
        await lbs_of(provider).ensure_load_balancer(CLUSTER_ID, service(), nodes(instances[:1]))
        before = await balancing(world)
        async with open_provider(world) as fresh:
            status = await lbs_of(fresh).ensure_load_balancer(
                CLUSTER_ID, internal, nodes(instances)
            )
        after = await balancing(world)
    (warning,) = status.warnings
    assert "cannot change a load balancer's scheme" in warning
    assert P + "internal" in warning
    assert (sorted(after.clbs), sorted(after.nlbs)) == (sorted(before.clbs), sorted(before.nlbs))
    assert sorted(after.security_groups) == sorted(before.security_groups)
    assert after.clbs[NAME]["scheme"] == "internet-facing"
    assert after.clbs[NAME]["instances"] == sorted(i.id for i in instances)


def client_ranges(seen: Balancing) -> list[str]:
    """The source ranges of the NLB's client rules on the Nodes' group."""
    return sorted(
        r[3]
        for g in seen.security_groups.values()
        for r in g["ingress"]
        if r[4] == f"kubernetes.io/rule/nlb/client={NAME}"
    )


def kept_follows(seen: Balancing, kept: str, ids: list[str]) -> bool:
    """The kept load balancer serves port 8080 to `ids` from 10.1.0.0/16 only."""
    if kept == "clb":
        clb = seen.clbs[NAME]
        (own,) = [g for n, g in seen.security_groups.items() if n == f"k8s-elb-{NAME}"]
        return (
            clb["instances"] == ids
            and clb["listeners"] == [("TCP", 8080, "TCP", 30080)]
            and [(r[1], r[3]) for r in own["ingress"] if r[0] == "tcp"] == [(8080, "10.1.0.0/16")]
        )
    ((_port, _protocol, group, _cert),) = seen.nlbs[NAME]["listeners"]
    return seen.target_groups[group]["targets"] == ids and client_ranges(seen) == ["10.1.0.0/16"]


@pytest.mark.parametrize(
    ("first", "then", "kept", "dropped"),
    [
        pytest.param(
            {},
            {P + "type": "nlb", P + "target-group-attributes": "preserve_client_ip.enabled=true"},
            "clb",
            "target-group-attributes",
            id="clb-to-nlb",
        ),
        pytest.param(
            {P + "type": "nlb"},
            {P + "connection-idle-timeout": "300"},
            "nlb",
            "connection-idle-timeout",
            id="nlb-to-clb",
        ),
    ],
)
async def test_a_refused_type_switch_keeps_the_load_balancer_following_the_service(
    world: World,
    provider: AwsProvider,
    first: dict[str, str],
    then: dict[str, str],
    kept: str,
    dropped: str,
) -> None:
    """A type change AWS cannot make (upstream refuses it) keeps the load balancer as the
    type it is, with a warning naming the annotation and the fix, and it keeps following the
    Service: Nodes added and removed, ports and source ranges changed afterwards (also from
    a restarted provider) reach it; the other type's own annotations are not applied, and
    nothing of the other type is made."""
    instances = await world.add_instances(3)
    lbs = lbs_of(provider)
    switched = service(
        annotations=then,
        ports=(ServicePort("http", "TCP", 8080, 30080),),
        load_balancer_source_ranges=("10.1.0.0/16",),
    )
    with trio.fail_after(60):
        await lbs.ensure_load_balancer(CLUSTER_ID, service(annotations=first), nodes(instances[:1]))
        status = await lbs.ensure_load_balancer(CLUSTER_ID, switched, nodes(instances[:2]))
        await lbs.update_load_balancer(CLUSTER_ID, switched, nodes(instances[1:]))
        grown = await balancing(world)
        async with open_provider(world) as fresh:
            again = await lbs_of(fresh).ensure_load_balancer(
                CLUSTER_ID, switched, nodes(instances[2:])
            )
        shrunk = await balancing(world)
    (warning,) = status.warnings
    assert P + "type" in warning
    assert "set the annotation back, or delete the Service and create it again" in warning
    assert warning.endswith(f"not applied to the kept load balancer: {P}{dropped}")
    assert again.warnings == status.warnings
    assert status.ingress == again.ingress
    assert kept_follows(grown, kept, sorted(i.id for i in instances[1:]))
    assert kept_follows(shrunk, kept, [instances[2].id])
    assert (sorted(shrunk.clbs), sorted(shrunk.nlbs)) == (
        ([NAME], []) if kept == "clb" else ([], [NAME])
    )


async def test_nlb_access_logs_tags_and_static_addresses(
    world: World, provider: AwsProvider
) -> None:
    """An internet-facing NLB gets its Elastic IPs (one per subnet, in order), access logs
    and tags added on a live Service; a changed allocation list is refused."""
    instances = await world.add_instances(1)
    ec2 = world.client("ec2")

    def allocate() -> list[str]:
        return [ec2.allocate_address(Domain="vpc")["AllocationId"] for _ in range(3)]

    eips = await trio.to_thread.run_sync(allocate)
    marks = {P + "type": "nlb", P + "eip-allocations": ",".join(eips)}
    lbs = lbs_of(provider)
    with trio.fail_after(60):
        await lbs.ensure_load_balancer(CLUSTER_ID, service(annotations=marks), nodes(instances))
        more = {
            **marks,
            P + "access-log-enabled": "true",
            P + "access-log-s3-bucket-name": "logs",
            P + "access-log-s3-bucket-prefix": "web",
            P + "additional-resource-tags": "team=web",
        }
        await lbs.ensure_load_balancer(CLUSTER_ID, service(annotations=more), nodes(instances))
        seen = await balancing(world)
        with pytest.raises(ServiceRefused, match="eip-allocations"):
            await lbs.ensure_load_balancer(
                CLUSTER_ID,
                service(annotations={**more, P + "eip-allocations": ",".join(eips[:2] + eips[:1])}),
                nodes(instances),
            )
    nlb = seen.nlbs[NAME]
    held = sorted(
        a["AllocationId"]
        for z in nlb["raw"]["AvailabilityZones"]
        for a in z["LoadBalancerAddresses"]
    )
    assert held == sorted(eips)
    assert nlb["attributes"]["access_logs.s3.enabled"] == "true"
    assert nlb["attributes"]["access_logs.s3.bucket"] == "logs"
    assert nlb["attributes"]["access_logs.s3.prefix"] == "web"
    assert nlb["tags"]["team"] == "web"


async def test_eip_count_must_match_the_subnets(world: World, provider: AwsProvider) -> None:
    """Two Elastic IPs for three subnets are refused naming both counts; nothing is made."""
    instances = await world.add_instances(1)
    marks = {P + "type": "nlb", P + "eip-allocations": "eipalloc-1,eipalloc-2"}
    with trio.fail_after(30), pytest.raises(ServiceRefused, match="2 given for 3 subnets"):
        await lbs_of(provider).ensure_load_balancer(
            CLUSTER_ID, service(annotations=marks), nodes(instances)
        )
    assert (await balancing(world)).empty


async def test_a_second_load_balancer_of_the_other_type_is_listed_and_deleted_alone(
    world: World, provider: AwsProvider
) -> None:
    """An NLB of the Service's name beside its Classic ELB (what an older CCM left after a
    type change) is listed with its own address, so the sweep can tell which one the
    Service's status names; deleting the leaked one leaves the other and its group."""
    instances = await world.add_instances(1)
    lbs = lbs_of(provider)
    assert isinstance(lbs, LoadBalancerInventory)
    with trio.fail_after(60):
        status = await lbs.ensure_load_balancer(CLUSTER_ID, service(), nodes(instances))
        tags = [
            {"Key": f"kubernetes.io/cluster/{CLUSTER_ID}", "Value": "owned"},
            {"Key": "kubernetes.io/service-name", "Value": "default/web"},
            {"Key": "trio-ccm.dev/service-uid", "Value": service().uid},
        ]
        v2 = world.client("elbv2")
        await trio.to_thread.run_sync(
            lambda: v2.create_load_balancer(
                Name=NAME, Type="network", Subnets=sorted(world.subnet_ids.values()), Tags=tags
            )
        )
        listed = await lbs.list_load_balancers(CLUSTER_ID)
        (leaked,) = [o for o in listed if o.address != status.ingress[0].hostname]
        await lbs.delete_leaked_load_balancer(CLUSTER_ID, leaked)
        seen = await balancing(world)
    assert sorted((o.name, o.key) for o in listed) == [(NAME, "default/web")] * 2
    assert len({o.address for o in listed}) == 2
    assert not seen.nlbs
    assert seen.clbs[NAME]["dns"] == status.ingress[0].hostname
    assert f"k8s-elb-{NAME}" in seen.security_groups


async def test_subnet_discovery_leaves_out_local_zones(world: World, provider: AwsProvider) -> None:
    """A cluster subnet in a Local Zone is not chosen for a load balancer (upstream's filter:
    NLBs and Classic ELBs do not run there); the regular zones' subnets are."""
    from moto.ec2.models.availability_zones_and_regions import RegionsAndZonesBackend, Zone

    zones = RegionsAndZonesBackend.zones[world.region]
    local = Zone("us-east-1-bos-1a", world.region, "use1-bos1-az1", zone_type="local-zone")
    zones.append(local)  # moto lists no Local Zone; taken out again below
    try:
        ec2 = world.client("ec2")
        subnet = await trio.to_thread.run_sync(
            lambda: ec2.create_subnet(
                VpcId=world.vpc_id,
                CidrBlock="10.0.96.0/24",
                AvailabilityZone=local.name,
                TagSpecifications=world.tag_specifications("subnet"),
            )["Subnet"]["SubnetId"]
        )
        instances = await world.add_instances(1)
        with trio.fail_after(60):
            await lbs_of(provider).ensure_load_balancer(
                CLUSTER_ID, service(annotations={P + "type": "nlb"}), nodes(instances)
            )
            seen = await balancing(world)
    finally:
        zones.remove(local)
    assert subnet not in seen.nlbs[NAME]["subnets"]
    assert seen.nlbs[NAME]["subnets"] == sorted(world.subnet_ids.values())


async def test_without_a_cluster_subnet_the_ccms_own_subnet_is_used(world: World) -> None:
    """When every subnet of the VPC belongs to another cluster, the load balancer goes to
    the subnet of the instance trio-ccm runs on (upstream's fallback; its ID from IMDSv2)."""
    instances = await world.add_instances(1)
    own = instances[0]
    ec2 = world.client("ec2")

    def retag() -> None:
        for subnet in world.subnet_ids.values():
            ec2.delete_tags(
                Resources=[subnet], Tags=[{"Key": f"kubernetes.io/cluster/{CLUSTER_ID}"}]
            )
            ec2.create_tags(
                Resources=[subnet], Tags=[{"Key": "kubernetes.io/cluster/other", "Value": "owned"}]
            )

    await trio.to_thread.run_sync(retag)

    def metadata(environ: dict[str, Any], start: Any) -> list[bytes]:
        path = environ["PATH_INFO"]
        body = {"/latest/api/token": "token", "/latest/meta-data/instance-id": own.id}.get(path)
        start("200 OK" if body else "404 Not Found", [("Content-Type", "text/plain")])
        return [(body or "").encode()]

    with serve_wsgi(metadata) as url:
        environ = {k: v for k, v in world.environ().items() if k != "AWS_EC2_METADATA_DISABLED"}
        environ["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = url
        async with open_provider(world, environ=environ) as provider:
            with trio.fail_after(60):
                await lbs_of(provider).ensure_load_balancer(CLUSTER_ID, service(), nodes(instances))
                seen = await balancing(world)
    assert clb(seen)["raw"]["Subnets"] == [own.subnet_id]


@pytest.mark.parametrize("then", ["ports-change", "delete"])
async def test_a_target_group_left_by_a_cut_ensure_is_found_and_deleted(
    world: World, provider: AwsProvider, then: str
) -> None:
    """An NLB's port change cut between CreateTargetGroup and CreateListener leaves a
    target group no listener uses; when the ports change again, the next ensure (with no
    record of what was made) finds it by the Service's name prefix and UID tag and deletes
    it, leaving only the current port's group; deleting the Service deletes it too."""
    instances = await world.add_instances(1)
    lbs = lbs_of(provider)
    marks = {P + "type": "nlb"}

    def on(port: int, node_port: int) -> Any:
        return service(annotations=marks, ports=(ServicePort("p", "TCP", port, node_port),))

    with trio.fail_after(60):
        await lbs.ensure_load_balancer(CLUSTER_ID, on(80, 30080), nodes(instances))
        world.server.faults.add(
            Fault("error", "CreateListener", "elasticloadbalancing", 1, 400, "ValidationError")
        )
        with pytest.raises(AwsError, match="ValidationError"):
            await lbs.ensure_load_balancer(CLUSTER_ID, on(8080, 30081), nodes(instances))
        cut = await balancing(world)
        if then == "delete":
            await lbs.ensure_load_balancer_deleted(CLUSTER_ID, on(9090, 30082))
        else:
            await lbs.ensure_load_balancer(CLUSTER_ID, on(9090, 30082), nodes(instances))
        after = await balancing(world)
    assert len(cut.target_groups) == 2  # the stray one, and the one the listener still uses
    if then == "delete":
        assert after.empty
    else:
        ((port, _protocol, group, _cert),) = after.nlbs[NAME]["listeners"]
        assert (port, list(after.target_groups)) == (9090, [group])
