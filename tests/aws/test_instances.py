"""The aws provider's instances against moto: every provider-ID form, lookups by provider ID,
resource-based name and private DNS name, addresses, the zone-ID label, exists/shutdown,
cluster-tag scoping, and the bulk lookups (few calls, unknown IDs never failing a batch)."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
import trio

from tests.helpers.aws import CLUSTER_ID, open_provider
from trio_ccm.cloud.aws import (
    LABEL_ZONE_ID,
    AwsProvider,
    ProviderIdError,
    instance_id_from_provider_id,
    parse_cloud_config,
)
from trio_ccm.cloud.provider import (
    BulkInstances,
    InstanceNotFoundError,
    Instances,
    NodeAddress,
    NodeInfo,
)
from trio_ccm_testbed.aws import Fault, Instance, World

UNKNOWN_ID = "i-0123456789abcdef0"


def instances_of(provider: AwsProvider) -> Instances:
    assert provider.instances is not None
    return provider.instances


def bulk_of(provider: AwsProvider) -> BulkInstances:
    found = provider.instances
    assert isinstance(found, BulkInstances)
    return found


@pytest.mark.parametrize(
    ("value", "instance_id"),
    [
        pytest.param("aws:///us-east-1a/i-0abc", "i-0abc", id="zone-and-id"),
        pytest.param("aws:////i-0abc", "i-0abc", id="no-zone"),
        pytest.param("i-0abc", "i-0abc", id="bare-id"),
        pytest.param(
            "aws:///us-east-1a/fargate-ip-10-0-1-2.ec2.internal",
            "fargate-ip-10-0-1-2.ec2.internal",
            id="fargate",
        ),
    ],
)
def test_every_provider_id_form_upstream_accepts(value: str, instance_id: str) -> None:
    """The forms cloud-provider-aws maps to an instance ID map to the same one here."""
    assert instance_id_from_provider_id(value) == instance_id


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("gce://project/zone/vm", id="other-cloud"),
        pytest.param("aws:///us-east-1a/vol-0abc", id="not-an-instance"),
        pytest.param("aws:///us-east-1a/", id="no-id"),
        pytest.param("sim://zone/i-0abc", id="other-scheme"),
    ],
)
def test_other_provider_ids_are_refused_naming_the_node_and_the_forms(value: str) -> None:
    """A provider ID naming no EC2 instance is refused, naming the Node and the forms."""
    with pytest.raises(ProviderIdError, match=r"Node n1: provider ID .* names no EC2 instance"):
        instance_id_from_provider_id(value, node="n1")


@pytest.fixture
async def three(world: World) -> list[Instance]:
    return await world.add_instances(3)


@pytest.mark.parametrize(
    "form",
    [
        pytest.param("zone-and-id", id="aws:///zone/id"),
        pytest.param("no-zone", id="aws:////id"),
        pytest.param("bare", id="bare-id"),
        pytest.param("rbn", id="resource-name"),
        pytest.param("rbn-fqdn", id="resource-name-fqdn"),
        pytest.param("dns", id="private-dns-name"),
    ],
)
async def test_metadata_by_every_form(
    provider: AwsProvider, three: list[Instance], form: str
) -> None:
    """Each way of naming the instance finds it: its type, zone, region, addresses and
    zone-ID label; a Node's own provider ID is kept, else aws:///<zone>/<id> is given."""
    target = three[1]
    node = {
        "zone-and-id": NodeInfo("n", provider_id=target.provider_id),
        "no-zone": NodeInfo("n", provider_id=f"aws:////{target.id}"),
        "bare": NodeInfo("n", provider_id=target.id),
        "rbn": NodeInfo(target.id),
        "rbn-fqdn": NodeInfo(f"{target.id}.us-east-1.compute.internal"),
        "dns": NodeInfo(target.private_dns_name),
    }[form]
    with trio.fail_after(20):
        metadata = await instances_of(provider).instance_metadata(node)
        assert metadata is not None
    assert metadata.provider_id == (node.provider_id or target.provider_id)
    assert (metadata.instance_type, metadata.zone, metadata.region) == (
        "m5.large",
        "us-east-1b",
        "us-east-1",
    )
    assert metadata.node_addresses == (
        NodeAddress("InternalIP", target.private_ip),
        NodeAddress("InternalDNS", target.private_dns_name),
        NodeAddress("Hostname", target.private_dns_name),
    )
    assert metadata.additional_labels == {LABEL_ZONE_ID: "use1-az1"}
    assert metadata.shutdown is False


async def test_a_node_without_an_instance(provider: AwsProvider, three: list[Instance]) -> None:
    """A Node whose name finds no instance: metadata raises InstanceNotFoundError saying how
    Nodes must be named, and `instance_exists` raises too (never read as gone: the name may
    just not be a DNS name); an unknown provider ID is gone (False)."""
    nameless = NodeInfo("worker-7")
    instances = instances_of(provider)
    with trio.fail_after(20):
        with pytest.raises(InstanceNotFoundError, match="name Nodes by private DNS name"):
            await instances.instance_metadata(nameless)
        with pytest.raises(InstanceNotFoundError):
            await instances.instance_exists(nameless)
        unknown = NodeInfo("n", provider_id=f"aws:///us-east-1a/{UNKNOWN_ID}")
        assert await instances.instance_exists(unknown) is False
        assert await instances.instance_shutdown(unknown) is False
        with pytest.raises(InstanceNotFoundError, match=f"EC2 has no instance {UNKNOWN_ID}"):
            await instances.instance_metadata(unknown)


async def test_exists_and_shutdown_follow_the_instance_state(
    world: World, provider: AwsProvider, three: list[Instance]
) -> None:
    """running: exists, not shut down; stopped: exists, shut down; terminated: gone."""
    running, stopped, terminated = three
    await world.stop(stopped.id)
    await world.terminate(terminated.id)
    instances = instances_of(provider)
    with trio.fail_after(20):
        states = [
            (
                await instances.instance_exists(NodeInfo("n", provider_id=i.provider_id)),
                await instances.instance_shutdown(NodeInfo("n", provider_id=i.provider_id)),
            )
            for i in three
        ]
        listed = await bulk_of(provider).instances_metadata(
            [NodeInfo(i.id, provider_id=i.provider_id) for i in three]
        )
    assert states == [(True, False), (True, True), (False, False)]
    assert {name: m.shutdown for name, m in listed.items()} == {running.id: False, stopped.id: True}


async def test_a_malformed_instance_id_is_never_taken_for_gone(provider: AwsProvider) -> None:
    """An i- ID AWS would call malformed is not asked about: exists raises (Node kept)."""
    node = NodeInfo("n", provider_id="aws:///us-east-1a/i-notanid")
    with trio.fail_after(20), pytest.raises(ProviderIdError, match="does not have the form"):
        await instances_of(provider).instance_exists(node)


async def test_fargate_nodes_are_refused_with_the_reason(provider: AwsProvider) -> None:
    """Fargate provider IDs are recognised and refused (EKS manages those Nodes)."""
    node = NodeInfo(
        "fargate-ip-10-0-1-2.ec2.internal",
        provider_id="aws:///us-east-1a/fargate-ip-10-0-1-2.ec2.internal",
    )
    with trio.fail_after(20), pytest.raises(ProviderIdError, match="Fargate"):
        await instances_of(provider).instance_metadata(node)


# -- addresses -------------------------------------------------------------------------------
def _dual_stack_instance(world: World) -> dict[str, Any]:
    """An instance with a public IP, an IPv6 address and a second ENI (two private IPs)."""
    ec2 = world.client("ec2")
    subnet = world.subnet_ids["us-east-1a"]
    ec2.modify_subnet_attribute(SubnetId=subnet, MapPublicIpOnLaunch={"Value": True})
    block = ec2.associate_vpc_cidr_block(VpcId=world.vpc_id, AmazonProvidedIpv6CidrBlock=True)
    network = ipaddress.ip_network(block["Ipv6CidrBlockAssociation"]["Ipv6CidrBlock"])
    ec2.associate_subnet_cidr_block(
        SubnetId=subnet, Ipv6CidrBlock=str(next(network.subnets(new_prefix=64)))
    )
    instance = ec2.run_instances(
        ImageId=world.image_id,
        MinCount=1,
        MaxCount=1,
        SubnetId=subnet,
        Ipv6AddressCount=1,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [{"Key": k, "Value": v} for k, v in world.cluster_tags.items()],
            }
        ],
    )["Instances"][0]
    eni = ec2.create_network_interface(SubnetId=subnet, SecondaryPrivateIpAddressCount=1)
    ec2.attach_network_interface(
        NetworkInterfaceId=eni["NetworkInterface"]["NetworkInterfaceId"],
        InstanceId=instance["InstanceId"],
        DeviceIndex=1,
    )
    found: dict[str, Any] = ec2.describe_instances(InstanceIds=[instance["InstanceId"]])[
        "Reservations"
    ][0]["Instances"][0]
    return found


@pytest.mark.parametrize(
    "families",
    [
        pytest.param(("ipv4",), id="ipv4"),
        pytest.param(("ipv6",), id="ipv6"),
        pytest.param(("ipv6", "ipv4"), id="ipv6-then-ipv4"),
    ],
)
async def test_addresses_by_device_index_and_node_ip_families(
    world: World, families: tuple[str, ...]
) -> None:
    """ipv4: each in-use ENI's private IPs by device index, the public IP, the private DNS
    name (InternalDNS and Hostname), the public DNS name; ipv6: the first IPv6 address of
    each in-use ENI; NodeIPFamilies chooses and orders them."""
    raw = await trio.to_thread.run_sync(_dual_stack_instance, world)
    by_index = sorted(raw["NetworkInterfaces"], key=lambda n: n["Attachment"]["DeviceIndex"])
    ipv4 = [
        *(
            NodeAddress("InternalIP", p["PrivateIpAddress"])
            for eni in by_index
            for p in eni["PrivateIpAddresses"]
        ),
        NodeAddress("ExternalIP", raw["PublicIpAddress"]),
        NodeAddress("InternalDNS", raw["PrivateDnsName"]),
        NodeAddress("Hostname", raw["PrivateDnsName"]),
        NodeAddress("ExternalDNS", raw["PublicDnsName"]),
    ]
    ipv6 = [
        NodeAddress("InternalIP", str(ipaddress.ip_address(eni["Ipv6Addresses"][0]["Ipv6Address"])))
        for eni in by_index
        if eni.get("Ipv6Addresses")
    ]
    assert len([a for a in ipv4 if a.type == "InternalIP"]) == 3
    assert len(ipv6) == 1
    lines = "\n".join(f"NodeIPFamilies = {f}" for f in families)
    config = world.cloud_config().replace(b"[Global]\n", f"[Global]\n{lines}\n".encode())
    provider = AwsProvider(parse_cloud_config(config), environ=world.environ())
    try:
        with trio.fail_after(20):
            metadata = await instances_of(provider).instance_metadata(
                NodeInfo(raw["PrivateDnsName"])
            )
    finally:
        await provider.aclose()
    expected = [a for family in families for a in (ipv4 if family == "ipv4" else ipv6)]
    assert metadata is not None
    assert list(metadata.node_addresses) == expected


# -- zone IDs, cluster tags ------------------------------------------------------------------
async def test_zone_ids_come_from_one_cached_describe(
    world: World, provider: AwsProvider, three: list[Instance]
) -> None:
    """The zone-ID label comes from DescribeAvailabilityZones, called once at start-up and
    not per Node; a Node that has the label already is not given it again."""
    bulk = bulk_of(provider)
    with trio.fail_after(20):
        await provider.initialize()
        answer = await bulk.instances_metadata([NodeInfo(i.private_dns_name) for i in three])
        labelled = NodeInfo(three[0].private_dns_name, labels={LABEL_ZONE_ID: "use1-az6"})
        again = await bulk.instances_metadata([labelled])
    assert {m.additional_labels[LABEL_ZONE_ID] for m in answer.values()} == {
        "use1-az6",
        "use1-az1",
        "use1-az2",
    }
    assert again[labelled.name].additional_labels == {}
    assert world.server.faults.calls("DescribeAvailabilityZones") == 1


async def test_name_lookups_are_scoped_to_the_cluster(world: World, provider: AwsProvider) -> None:
    """An instance without the cluster tag is not found by its DNS name (it is someone
    else's), but is by its provider ID (ID lookups are not scoped, as upstream)."""
    (foreign,) = await world.add_instances(1, tagged=False)
    instances = instances_of(provider)
    with trio.fail_after(20):
        with pytest.raises(
            InstanceNotFoundError, match=f"cluster tag kubernetes.io/cluster/{CLUSTER_ID}"
        ):
            await instances.instance_metadata(NodeInfo(foreign.private_dns_name))
        found = await instances.instance_metadata(NodeInfo("n", provider_id=foreign.provider_id))
    assert found is not None
    assert found.zone == foreign.zone


async def test_the_legacy_cluster_tag_scopes_too(moto: Any) -> None:
    """KubernetesClusterTag (legacy `KubernetesCluster=<id>` tags) finds the cluster's
    instances by name."""
    world = await World.create(moto, cluster_id="legacy", legacy_tag=True)
    (instance,) = await world.add_instances(1)
    async with open_provider(world) as provider:
        with trio.fail_after(20):
            found = await instances_of(provider).instance_metadata(
                NodeInfo(instance.private_dns_name)
            )
    assert found is not None
    assert found.provider_id == instance.provider_id
    assert provider.context.tagging.legacy


# -- bulk ---------------------------------------------------------------------------------------
async def test_unknown_ids_never_fail_a_batch(
    world: World, provider: AwsProvider, three: list[Instance]
) -> None:
    """Unknown instance IDs in a bulk lookup are only missing from the answer: AWS's
    InvalidInstanceID.NotFound names them, they are dropped, the rest asked again."""
    nodes = [NodeInfo(f"n{i}", provider_id=inst.provider_id) for i, inst in enumerate(three)]
    nodes += [
        NodeInfo("gone-1", provider_id=f"aws:///us-east-1a/{UNKNOWN_ID}"),
        NodeInfo("gone-2", provider_id="aws:///us-east-1a/i-0fedcba9876543210"),
        NodeInfo("not-ours", provider_id="gce://p/z/vm"),
    ]
    with trio.fail_after(20):
        await provider.initialize()
        answer = await bulk_of(provider).instances_metadata(nodes)
    assert sorted(answer) == ["n0", "n1", "n2"]
    assert world.server.faults.calls("DescribeInstances") == 2


async def test_a_large_batch_costs_one_call(world: World, provider: AwsProvider) -> None:
    """250 Nodes by provider ID: one DescribeInstances (up to 1,000 IDs per call); the same
    250 by DNS name: one cluster listing instead of two 150-name filter calls; a third ask
    within 10 s: no call (the listing's snapshot answers)."""
    launched = await world.add_instances(250)
    bulk = bulk_of(provider)
    faults = world.server.faults
    with trio.fail_after(60):
        await provider.initialize()
        by_id = await bulk.instances_metadata(
            [NodeInfo(f"n{i}", provider_id=x.provider_id) for i, x in enumerate(launched)]
        )
        assert faults.calls("DescribeInstances") == 1
        by_name = await bulk.instances_metadata([NodeInfo(x.private_dns_name) for x in launched])
        assert faults.calls("DescribeInstances") == 2
        again = await bulk.instances_metadata([NodeInfo(x.private_dns_name) for x in launched[:5]])
        assert faults.calls("DescribeInstances") == 2
    assert len(by_id) == len(by_name) == 250
    assert len(again) == 5
    assert provider.context.lookup.statistics().listings == 1


async def test_concurrent_bulk_lookups_share_one_listing(
    world: World, provider: AwsProvider
) -> None:
    """Two bulk lookups of 160 names at once (a wave's batches) are answered by one
    cluster listing (one call) instead of four 150-name filter calls."""
    launched = await world.add_instances(320)
    bulk = bulk_of(provider)
    answers: list[int] = []

    async def ask(part: list[Instance]) -> None:
        found = await bulk.instances_metadata([NodeInfo(x.private_dns_name) for x in part])
        answers.append(len(found))

    with trio.fail_after(60):
        await provider.initialize()
        async with trio.open_nursery() as nursery:
            for start in range(0, 320, 160):
                nursery.start_soon(ask, launched[start : start + 160])
    assert answers == [160, 160]
    assert world.server.faults.calls("DescribeInstances") == 1


async def test_many_small_batches_turn_into_one_listing(
    world: World, provider: AwsProvider
) -> None:
    """Rent or buy: a wave asked for in small batches goes direct until those calls would
    outnumber a listing's pages, then lists once; the snapshot answers the rest. Thirty
    batches of ten names cost two DescribeInstances, not thirty."""
    launched = await world.add_instances(300)
    bulk = bulk_of(provider)
    found = 0
    with trio.fail_after(60):
        await provider.initialize()
        for start in range(0, 300, 10):
            answer = await bulk.instances_metadata(
                [NodeInfo(x.private_dns_name) for x in launched[start : start + 10]]
            )
            found += len(answer)
    assert found == 300
    assert world.server.faults.calls("DescribeInstances") == 2
    assert provider.context.lookup.statistics().listings == 1


# -- network topology labels -------------------------------------------------------------------
async def test_topology_labels_come_from_one_batched_call(
    world: World, provider: AwsProvider
) -> None:
    """Nodes of a topology type get topology.k8s.aws/network-node-layer-1..3 from one
    DescribeInstanceTopology for the whole batch; a type AWS has no topology for is
    remembered, and labelled Nodes are not asked again."""
    gpus = await world.add_instances(2, instance_type="p4d.24xlarge")
    plain = await world.add_instances(2)
    bulk = bulk_of(provider)
    faults = world.server.faults
    with trio.fail_after(30):
        await provider.initialize()
        answer = await bulk.instances_metadata([NodeInfo(i.private_dns_name) for i in gpus + plain])
        first = faults.calls("DescribeInstanceTopology")
        again = await bulk.instances_metadata(
            [
                NodeInfo(i.private_dns_name, labels=answer[i.private_dns_name].additional_labels)
                for i in gpus
            ]
            + [NodeInfo(i.private_dns_name) for i in plain]
        )
    layers = [f"topology.k8s.aws/network-node-layer-{n}" for n in (1, 2, 3)]
    for instance in gpus:
        labels = answer[instance.private_dns_name].additional_labels
        assert all(labels[layer].startswith("nn-") for layer in layers), labels
    for instance in plain:
        assert not set(layers) & set(answer[instance.private_dns_name].additional_labels)
    assert first == 1
    assert faults.calls("DescribeInstanceTopology") == 1
    assert all(not set(layers) & set(m.additional_labels) for m in again.values())


async def test_topology_not_allowed_is_a_warning_and_asked_no_more(
    world: World, provider: AwsProvider
) -> None:
    """DescribeInstanceTopology refused (UnauthorizedOperation) leaves the labels out with a
    warning, and the region is not asked again (upstream's day-long memory)."""
    gpus = await world.add_instances(1, instance_type="p4d.24xlarge")
    world.server.faults.add(
        Fault("error", "DescribeInstanceTopology", "ec2", 1, 403, "UnauthorizedOperation")
    )
    bulk = bulk_of(provider)
    with trio.fail_after(30):
        await provider.initialize()
        nodes = [NodeInfo(i.private_dns_name) for i in gpus]
        answer = await bulk.instances_metadata(nodes)
        await bulk.instances_metadata(nodes)
    assert not any(
        k.startswith("topology.k8s.aws/network") for k in answer[nodes[0].name].additional_labels
    )
    assert world.server.faults.calls("DescribeInstanceTopology") == 1
