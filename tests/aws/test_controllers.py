"""trio-ccm's real controllers with the aws provider, against the emulator and moto:
initialisation, the address sync, lifecycle deletion and the shutdown taint, routes and
NetworkUnavailable, and all of it converging while moto throttles (both codes), fails,
dawdles and answers garbage."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.helpers.aws import (
    SHUTDOWN,
    UNINITIALIZED,
    Cluster,
    metric,
    running,
)
from trio_ccm.cloud.aws import LABEL_ZONE_ID
from trio_ccm_testbed.aws import Fault, Instance

ROUTES = "node-route-controller"


def initialised(cluster: Cluster, name: str) -> bool:
    node = cluster.node(name)
    return UNINITIALIZED not in cluster.taints(name) and bool(node["spec"].get("providerID"))


def addresses(cluster: Cluster, name: str) -> list[tuple[str, str]]:
    return [(a["type"], a["address"]) for a in cluster.node(name)["status"].get("addresses", [])]


def network_unavailable(cluster: Cluster, name: str) -> str | None:
    for condition in cluster.node(name)["status"].get("conditions", []):
        if condition["type"] == "NetworkUnavailable":
            return str(condition["status"])
    return None


def expected_labels(instance: Instance) -> dict[str, str]:
    return {
        "node.kubernetes.io/instance-type": "m5.large",
        "beta.kubernetes.io/instance-type": "m5.large",
        "topology.kubernetes.io/zone": instance.zone,
        "failure-domain.beta.kubernetes.io/zone": instance.zone,
        "topology.kubernetes.io/region": "us-east-1",
        "failure-domain.beta.kubernetes.io/region": "us-east-1",
    }


async def test_nodes_are_initialised_from_ec2(cluster: Cluster) -> None:
    """Nodes named by private DNS name, with a kubelet-set provider ID, or named by
    instance ID get their provider ID, labels (zone ID included) and addresses, and lose
    the uninitialized taint, in a handful of DescribeInstances; a Node without an
    instance stays tainted (and is not deleted)."""
    world = cluster.world
    instances = await world.add_instances(4)
    names = [
        cluster.register(instances[0]),
        cluster.register(instances[1]),
        cluster.register(instances[2], provider_id=True),
        cluster.register(instances[3], name=instances[3].id),
    ]
    lost = cluster.register(instances[0], name="ip-10-9-9-9.ec2.internal")
    with trio.fail_after(30):
        async with running(cluster):
            await cluster.wait_for(lambda: all(initialised(cluster, n) for n in names))
    for name, instance in zip(names, instances, strict=True):
        node = cluster.node(name)
        assert node["spec"]["providerID"] == instance.provider_id
        labels = node["metadata"]["labels"]
        assert expected_labels(instance).items() <= labels.items()
        assert labels[LABEL_ZONE_ID].startswith("use1-az")
        assert addresses(cluster, name) == [
            ("InternalIP", instance.private_ip),
            ("InternalDNS", instance.private_dns_name),
            ("Hostname", instance.private_dns_name),
        ]
    assert UNINITIALIZED in cluster.taints(lost)
    assert cluster.has_node(lost)
    assert world.server.faults.calls("DescribeAvailabilityZones") == 1


async def test_the_address_sync_follows_the_instance(cluster: Cluster) -> None:
    """A second network interface attached after initialisation shows in the Node's
    addresses at the next periodic sync (one bulk call per period)."""
    world = cluster.world
    (instance,) = await world.add_instances(1, zone="a")
    name = cluster.register(instance, provider_id=True)

    def attach() -> list[str]:
        ec2 = world.client("ec2")
        eni = ec2.create_network_interface(
            SubnetId=instance.subnet_id, SecondaryPrivateIpAddressCount=1
        )["NetworkInterface"]
        ec2.attach_network_interface(
            NetworkInterfaceId=eni["NetworkInterfaceId"], InstanceId=instance.id, DeviceIndex=1
        )
        return [p["PrivateIpAddress"] for p in eni["PrivateIpAddresses"]]

    with trio.fail_after(30):
        async with running(cluster, ["--node-status-update-frequency=1s"]):
            await cluster.wait_for(lambda: initialised(cluster, name))
            extra = await trio.to_thread.run_sync(attach)
            await cluster.wait_for(
                lambda: (
                    [a for t, a in addresses(cluster, name) if t == "InternalIP"]
                    == [instance.private_ip, *extra]
                )
            )


async def test_lifecycle_deletes_gone_nodes_and_taints_stopped_ones(cluster: Cluster) -> None:
    """NotReady Nodes: terminated instance → the Node is deleted (Event DeletingNode);
    stopped → the shutdown taint, removed once the Node is Ready again; running → nothing."""
    world = cluster.world
    gone, stopped, slow = await world.add_instances(3)
    names = [cluster.register(i, provider_id=True, ready=False) for i in (gone, stopped, slow)]
    await world.terminate(gone.id)
    await world.stop(stopped.id)
    with trio.fail_after(30):
        async with running(
            cluster, ["--node-monitor-period=1s"], controllers="cloud-node-lifecycle-controller"
        ):
            await cluster.wait_for(
                lambda: not cluster.has_node(names[0]) and SHUTDOWN in cluster.taints(names[1])
            )
            await cluster.set_ready(names[1], True)
            await cluster.wait_for(lambda: SHUTDOWN not in cluster.taints(names[1]))
    assert SHUTDOWN not in cluster.taints(names[2])
    assert cluster.has_node(names[2])
    deleting = await cluster.events("DeletingNode")
    assert [e["involvedObject"]["name"] for e in deleting] == [names[0]]


async def test_routes_are_created_and_a_blackhole_replaced(cluster: Cluster) -> None:
    """Every Node's pod CIDR is routed to its instance (SourceDestCheck off), a blackhole
    route to a CIDR a Node now has is replaced, and NetworkUnavailable turns False."""
    world = cluster.world
    first, second, dead = await world.add_instances(3)
    await world.add_route("10.244.2.0/24", dead.id)
    await world.terminate(dead.id)
    names = [
        cluster.register(first, provider_id=True, pod_cidr="10.244.1.0/24"),
        cluster.register(second, provider_id=True, pod_cidr="10.244.2.0/24"),
    ]
    with trio.fail_after(30):
        async with running(
            cluster,
            ["--cluster-cidr=10.244.0.0/16", "--route-reconciliation-period=1s"],
            controllers=f"cloud-node-controller,{ROUTES}",
        ):
            await cluster.wait_for(
                lambda: all(network_unavailable(cluster, n) == "False" for n in names)
            )
    routes = await world.routes()
    assert sorted((r["DestinationCidrBlock"], r["InstanceId"], r["State"]) for r in routes) == [
        ("10.244.1.0/24", first.id, "active"),
        ("10.244.2.0/24", second.id, "active"),
    ]
    assert not await world.source_dest_check(first.id)
    assert not await world.source_dest_check(second.id)


FAULTS = [
    pytest.param(
        lambda f: f.throttle("DescribeInstances", times=3), True, id="RequestLimitExceeded-503"
    ),
    pytest.param(
        lambda f: f.add(Fault("throttle", "DescribeInstances", "ec2", 3, 400, "Throttling")),
        True,
        id="Throttling-400",
    ),
    pytest.param(lambda f: f.server_error("DescribeInstances", times=4), False, id="http-500"),
    pytest.param(lambda f: f.latency(0.3, "DescribeInstances"), False, id="latency"),
    pytest.param(lambda f: f.garbage("DescribeInstances", times=4), False, id="html-body"),
    pytest.param(
        lambda f: f.garbage("DescribeInstances", truncated=True, times=4),
        False,
        id="truncated-body",
    ),
]


@pytest.mark.parametrize(("inject", "throttles"), FAULTS)
async def test_initialisation_converges_under_faults(
    cluster: Cluster, inject: Any, throttles: bool
) -> None:
    """A wave of Nodes is initialised although moto throttles (both codes: the budget slows
    the instances family down), fails, answers slowly or answers garbage."""
    world = cluster.world
    instances = await world.add_instances(6)
    names = [cluster.register(i) for i in instances]
    inject(world.server.faults)
    with trio.fail_after(40):
        async with running(cluster):
            await cluster.wait_for(lambda: all(initialised(cluster, n) for n in names))
    throttled = metric(
        cluster.registry, "cloudprovider_api_throttles_total", method="instances_metadata"
    )
    assert (throttled > 0) == throttles
    assert world.server.faults.faulted()


async def test_everything_converges_with_every_call_faulted(cluster: Cluster) -> None:
    """Initialisation, routes and the lifecycle check together, while every EC2 action they
    use is throttled, fails with HTTP 500 and answers garbage before it works."""
    world = cluster.world
    instances = await world.add_instances(4)
    gone = instances[3]
    names = [cluster.register(i, pod_cidr=f"10.244.{n}.0/24") for n, i in enumerate(instances[:3])]
    doomed = cluster.register(gone, provider_id=True, ready=False)
    await world.terminate(gone.id)
    faults = world.server.faults
    for action in (
        "DescribeInstances",
        "DescribeAvailabilityZones",
        "DescribeRouteTables",
        "CreateRoute",
        "ModifyInstanceAttribute",
    ):
        faults.throttle(action, times=1)
        faults.server_error(action, times=1)
        faults.garbage(action, times=1)
    with trio.fail_after(45):
        async with running(
            cluster,
            [
                "--cluster-cidr=10.244.0.0/16",
                "--route-reconciliation-period=1s",
                "--node-monitor-period=1s",
            ],
            controllers=f"cloud-node-controller,cloud-node-lifecycle-controller,{ROUTES}",
        ):
            await cluster.wait_for(
                lambda: (
                    all(
                        initialised(cluster, n) and network_unavailable(cluster, n) == "False"
                        for n in names
                    )
                    and not cluster.has_node(doomed)
                )
            )
    assert len(await world.routes()) == 3
    assert sum(faults.faulted().values()) == 15
