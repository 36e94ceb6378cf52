"""The real service controller with the aws provider against the emulator and moto: Services
get their Classic ELB or NLB and its hostname, follow port, node and type changes, are
refused with one Warning naming the field, leave nothing behind when deleted (also after
their replica was cancelled mid-create or mid-delete; test_load_balancers_kill.py does it
with kill -9 of a real process), converge while both ELB APIs throttle, and leaked load
balancers are swept."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from prometheus_client import CollectorRegistry

from tests.helpers.aws import CLUSTER_ID, Cluster, metric, running, until
from trio_ccm.cloud.aws import AwsProvider, parse_cloud_config
from trio_ccm.cloud.aws.annotations import (
    HC_INTERVAL,
    INTERNAL,
    SSL_CERT,
    TARGET_NODE_LABELS,
    TYPE,
)
from trio_ccm.cloud.provider import ServiceInfo, ServicePort
from trio_ccm.testing import lb_name, make_service
from trio_ccm_testbed.aws import Balancing, Fault, Instance, balancing, certificate

CONTROLLERS = "service-lb-controller"
FINALIZER = "service.kubernetes.io/load-balancer-cleanup"


def register(cluster: Cluster, instances: list[Instance], **labels: str) -> None:
    for instance in instances:
        manifest = cluster.world.node_manifest(instance, provider_id=True)
        manifest["spec"]["taints"] = []
        manifest["metadata"]["labels"].update(labels)
        cluster.api.create(manifest)


def create(cluster: Cluster, name: str, *, node_port: int = 30080, **tweaks: Any) -> str:
    ports = tweaks.pop(
        "ports", [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": node_port}]
    )
    created = cluster.api.create(make_service(name, ports=ports, **tweaks))
    return lb_name(created)


def svc(cluster: Cluster, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.api.get("v1", "Service", name, namespace="default")
    return found


def hostname(cluster: Cluster, name: str) -> str:
    ingress = svc(cluster, name).get("status", {}).get("loadBalancer", {}).get("ingress") or [{}]
    return str(ingress[0].get("hostname", ""))


def gone(cluster: Cluster, name: str) -> bool:
    try:
        svc(cluster, name)
    except Exception:  # the emulator's not-found error
        return True
    return False


async def patch(cluster: Cluster, name: str, body: dict[str, Any]) -> None:
    response = await cluster.http.patch(
        f"/api/v1/namespaces/default/services/{name}",
        json=body,
        headers={"content-type": "application/merge-patch+json"},
    )
    response.raise_for_status()


async def delete(cluster: Cluster, name: str) -> None:
    response = await cluster.http.delete(f"/api/v1/namespaces/default/services/{name}")
    response.raise_for_status()


async def test_a_classic_elb_follows_its_service(cluster: Cluster) -> None:
    """A Service gets a Classic ELB and its DNS name as hostname; a port change, a new Node
    and the switch to ClusterIP follow; at the end nothing is left and the finalizer is
    gone."""
    world = cluster.world
    instances = await world.add_instances(3)
    register(cluster, instances[:2])
    with trio.fail_after(40):
        async with running(cluster, controllers=CONTROLLERS):
            name = create(cluster, "web")

            async def made() -> bool:
                seen = await balancing(world)
                return name in seen.clbs and hostname(cluster, "web") == seen.clbs[name]["dns"]

            await until(made)
            await patch(
                cluster,
                "web",
                {
                    "spec": {
                        "ports": [
                            {"name": "http", "port": 8080, "protocol": "TCP", "nodePort": 30080}
                        ]
                    }
                },
            )

            async def moved() -> bool:
                return (await balancing(world)).clbs[name]["listeners"] == [
                    ("TCP", 8080, "TCP", 30080)
                ]

            await until(moved)
            register(cluster, instances[2:])

            async def grown() -> bool:
                return (await balancing(world)).clbs[name]["instances"] == sorted(
                    i.id for i in instances
                )

            await until(grown)
            await patch(cluster, "web", {"spec": {"type": "ClusterIP"}})

            async def emptied() -> bool:
                return (await balancing(world)).empty and FINALIZER not in svc(cluster, "web")[
                    "metadata"
                ].get("finalizers", [])

            await until(emptied)
    assert not svc(cluster, "web").get("status", {}).get("loadBalancer", {}).get("ingress")


async def test_an_internal_tls_nlb_with_local_policy_and_source_ranges(cluster: Cluster) -> None:
    """type nlb, internal, a certificate, externalTrafficPolicy Local, source ranges and a
    target-node label: an internal NLB with a TLS listener, an HTTP /healthz health check on
    the health-check node port, client rules from the source ranges and health rules from
    the subnets, only the labelled Nodes as targets; deleting the Service leaves nothing."""
    world = cluster.world
    instances = await world.add_instances(3)
    register(cluster, instances[:2], pool="web")
    register(cluster, instances[2:])
    cert = await certificate(world)
    annotations = {
        TYPE: "nlb",
        INTERNAL: "true",
        SSL_CERT: cert,
        TARGET_NODE_LABELS: "pool=web",
        HC_INTERVAL: "10",
    }
    with trio.fail_after(40):
        async with running(cluster, controllers=CONTROLLERS):
            name = create(
                cluster,
                "secure",
                node_port=30443,
                annotations=annotations,
                externalTrafficPolicy="Local",
                healthCheckNodePort=32000,
                loadBalancerSourceRanges=["203.0.113.0/24"],
            )

            async def made() -> bool:
                return hostname(cluster, "secure") != "" and name in (await balancing(world)).nlbs

            await until(made)
            seen = await balancing(world)
            await delete(cluster, "secure")

            async def emptied() -> bool:
                return gone(cluster, "secure") and (await balancing(world)).empty

            await until(emptied)
    nlb = seen.nlbs[name]
    assert nlb["scheme"] == "internal"
    ((port, protocol, group_name, used_cert),) = nlb["listeners"]
    assert (port, protocol, used_cert) == (80, "TLS", cert)
    group = seen.target_groups[group_name]
    assert (group["HealthCheckProtocol"], group["HealthCheckPort"], group["HealthCheckPath"]) == (
        "HTTP",
        "32000",
        "/healthz",
    )
    assert group["targets"] == sorted(i.id for i in instances[:2])
    rules = seen.security_groups[f"nodes.{CLUSTER_ID}"]["ingress"]
    client = f"kubernetes.io/rule/nlb/client={name}"
    health = f"kubernetes.io/rule/nlb/health={name}"
    assert ("tcp", 30443, 30443, "203.0.113.0/24", client) in rules
    assert {r[3] for r in rules if r[4] == health} == {
        "10.0.0.0/19",
        "10.0.32.0/19",
        "10.0.64.0/19",
    }
    assert {r[1] for r in rules if r[4] == health} == {32000}


REFUSALS: list[tuple[str, dict[str, Any], str]] = [
    # (what, the Service's tweaks, words its Warning must hold)
    ("load-balancer-ip", {"loadBalancerIP": "203.0.113.7"}, "spec.loadBalancerIP"),
    ("session-affinity", {"sessionAffinity": "ClientIP"}, "spec.sessionAffinity"),
    (
        "mixed-protocols",
        {
            "ports": [
                {"name": "a", "port": 53, "protocol": "UDP", "nodePort": 30153},
                {"name": "b", "port": 80, "protocol": "TCP", "nodePort": 30154},
            ],
            "annotations": {TYPE: "nlb"},
        },
        "mixes protocols",
    ),
    (
        "udp-on-classic",
        {"ports": [{"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053}]},
        "TCP only",
    ),
    ("bad-annotation", {"annotations": {HC_INTERVAL: "often"}}, HC_INTERVAL),
    (
        "classic-only-on-nlb",
        {
            "annotations": {
                TYPE: "nlb",
                "service.beta.kubernetes.io/aws-load-balancer-extra-security-groups": "sg-1",
            }
        },
        "extra-security-groups",
    ),
]


async def test_refusals_are_one_warning_naming_the_field(cluster: Cluster) -> None:
    """Each Service AWS cannot serve as written gets a SyncLoadBalancerFailed Warning naming
    the field or annotation, and nothing is made; `external` is left to another
    controller, without an Event."""
    world = cluster.world
    register(cluster, await world.add_instances(1))
    expected = {}
    with trio.fail_after(40):
        async with running(cluster, controllers=CONTROLLERS):
            for n, (what, tweaks, words) in enumerate(REFUSALS):
                create(cluster, what, node_port=30100 + n, **tweaks)
                expected[what] = words
            create(cluster, "elsewhere", node_port=30099, annotations={TYPE: "external"})

            async def warned() -> bool:
                events = await cluster.events("SyncLoadBalancerFailed")
                named = {e["involvedObject"]["name"] for e in events}
                return set(expected) <= named

            await until(warned)
    events = await cluster.events("SyncLoadBalancerFailed")
    for name, words in expected.items():
        (event,) = [e for e in events if e["involvedObject"]["name"] == name]
        assert words in event["message"], event["message"]
    assert "elsewhere" not in {e["involvedObject"]["name"] for e in events}
    assert (await balancing(world)).empty


@pytest.mark.parametrize(
    ("kind", "stall"),
    [
        pytest.param("nlb", "CreateListener", id="nlb-mid-create"),
        pytest.param("clb", "CreateLoadBalancer", id="clb-mid-create"),
        pytest.param("nlb", "DeleteTargetGroup", id="nlb-mid-delete"),
        pytest.param("clb", "DeleteSecurityGroup", id="clb-mid-delete"),
    ],
)
async def test_a_replica_cancelled_midway_leaves_nothing_behind(
    cluster: Cluster, kind: str, stall: str
) -> None:
    """A replica cancelled in the middle of making or deleting a load balancer (its call in
    flight abandoned, as a kill -9 leaves it), then the Service deleted: the next replica
    finishes the deletion and no load balancer, target group or security group is left."""
    world = cluster.world
    register(cluster, await world.add_instances(2))
    annotations = {TYPE: "nlb"} if kind == "nlb" else {}
    faults = world.server.faults
    deleting = stall.startswith("Delete")
    with trio.fail_after(60):
        async with running(cluster, controllers=CONTROLLERS):
            create(cluster, "web", annotations=annotations)
            if deleting:

                async def made() -> bool:
                    return hostname(cluster, "web") != ""

                await until(made)
                faults.latency(3.0, stall, times=1)
                await delete(cluster, "web")
            else:
                faults.latency(3.0, stall, times=1)

            async def stalled() -> bool:
                return faults.calls(stall) >= 1

            await until(stalled)
        # cancelled mid-call; moto finishes the abandoned request on its own
        if not deleting:

            async def landed() -> bool:
                return not (await balancing(world)).empty

            # The abandoned create lands before the next replica looks (as after a kill -9
            # whose request had reached the cloud); one that looked first would find nothing
            # to delete, a race this test is not about.
            await until(landed)
            await delete(cluster, "web")
        assert not gone(cluster, "web")  # the finalizer holds it
        cluster.registry = CollectorRegistry()  # a new process's metrics
        async with running(cluster, controllers=CONTROLLERS):

            async def emptied() -> bool:
                return gone(cluster, "web") and (await balancing(world)).empty

            await until(emptied)


async def test_throttling_of_both_elb_apis_converges(cluster: Cluster) -> None:
    """While ELB (ConfigureHealthCheck) and ELBv2 (CreateTargetGroup) answer Throttling, a
    Classic ELB and an NLB are still made, and the budget saw the throttles."""
    world = cluster.world
    register(cluster, await world.add_instances(2))
    faults = world.server.faults
    faults.throttle("ConfigureHealthCheck", service="elasticloadbalancing", times=1)  # ELB
    faults.throttle("CreateTargetGroup", service="elasticloadbalancing", times=1)  # ELBv2
    with trio.fail_after(60):
        async with running(
            cluster, ["--cloud-api-rate=load_balancers=50:50"], controllers=CONTROLLERS
        ):
            classic = create(cluster, "classic")
            network = create(cluster, "network", node_port=30081, annotations={TYPE: "nlb"})

            async def made() -> bool:
                seen = await balancing(world)
                return (
                    classic in seen.clbs
                    and network in seen.nlbs
                    and bool(hostname(cluster, "classic"))
                    and bool(hostname(cluster, "network"))
                )

            await until(made)
    assert (
        metric(cluster.registry, "cloudprovider_api_throttles_total", method="ensure_load_balancer")
        > 0
    )
    assert faults.faulted() == {
        "elasticloadbalancing:ConfigureHealthCheck": 1,
        "elasticloadbalancing:CreateTargetGroup": 1,
    }


async def test_a_leaked_load_balancer_is_swept(cluster: Cluster) -> None:
    """A load balancer made for a Service that no longer exists (listed by its cluster and
    service-name tags) is deleted by the sweep with --delete-leaked-load-balancers, with
    its security group; the live Service's stays."""
    world = cluster.world
    instances = await world.add_instances(1)
    register(cluster, instances)
    provider = AwsProvider(parse_cloud_config(world.cloud_config()), environ=world.environ())
    try:
        assert provider.load_balancers is not None
        orphan = ServiceInfo(
            "default",
            "orphan",
            "99999999-0000-0000-0000-000000000000",
            ports=(ServicePort("http", "TCP", 80, 30099),),
        )
        with trio.fail_after(60):
            await provider.initialize()
            await provider.load_balancers.ensure_load_balancer(CLUSTER_ID, orphan, [])
            flags = [
                "--load-balancer-sweep-period=1s",
                "--delete-leaked-load-balancers=true",
                "--leaked-load-balancer-grace=0s",
            ]
            async with running(cluster, flags, controllers=CONTROLLERS, provider=provider):
                live = create(cluster, "live")

                async def swept() -> bool:
                    seen: Balancing = await balancing(world)
                    return list(seen.clbs) == [live] and bool(hostname(cluster, "live"))

                await until(swept)
        seen = await balancing(world)
        assert not any(
            n.endswith(provider.load_balancers.load_balancer_name(CLUSTER_ID, orphan))
            for n in seen.security_groups
        )
    finally:
        await provider.aclose()


async def test_the_sweep_deletes_the_load_balancer_a_live_service_no_longer_points_at(
    cluster: Cluster,
) -> None:
    """A Classic ELB left beside the NLB a live Service's status names (an older CCM's type
    change) is found by the sweep and deleted; the NLB the Service uses stays."""
    world = cluster.world
    register(cluster, await world.add_instances(1))
    name = create(cluster, "web", annotations={TYPE: "nlb"})
    flags = (
        "--load-balancer-sweep-period=1s",
        "--delete-leaked-load-balancers",
        "--leaked-load-balancer-grace=0s",
    )
    with trio.fail_after(60):
        async with running(cluster, controllers=CONTROLLERS):
            await until(lambda: bool(svc(cluster, "web")["status"]["loadBalancer"].get("ingress")))
        uid = svc(cluster, "web")["metadata"]["uid"]
        elb = world.client("elb")
        await trio.to_thread.run_sync(
            lambda: elb.create_load_balancer(
                LoadBalancerName=name,
                Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}],
                Subnets=[next(iter(world.subnet_ids.values()))],
                Tags=[
                    {"Key": f"kubernetes.io/cluster/{CLUSTER_ID}", "Value": "owned"},
                    {"Key": "kubernetes.io/service-name", "Value": "default/web"},
                    {"Key": "trio-ccm.dev/service-uid", "Value": uid},
                ],
            )
        )
        assert name in (await balancing(world)).clbs
        cluster.registry = CollectorRegistry()  # a new process's metrics
        async with running(cluster, flags, controllers=CONTROLLERS):

            def names() -> list[str]:
                found = elb.describe_load_balancers()["LoadBalancerDescriptions"]
                return [lb["LoadBalancerName"] for lb in found]

            async def clb_gone() -> bool:
                # one call: a full balancing() read races the deletion it waits for
                return name not in await trio.to_thread.run_sync(names)

            await until(clb_gone)
        seen = await balancing(world)
    hostname = svc(cluster, "web")["status"]["loadBalancer"]["ingress"][0]["hostname"]
    assert seen.nlbs[name]["dns"] == hostname


async def test_a_rule_quota_error_is_an_event_naming_the_quota_and_the_fixes(
    cluster: Cluster,
) -> None:
    """AWS refusing a Nodes' group rule for its quota gives the Service a Warning naming the
    quota and the fixes (Managed mode among them)."""
    world = cluster.world
    register(cluster, await world.add_instances(1))
    world.server.faults.add(
        Fault(
            "error", "AuthorizeSecurityGroupIngress", "ec2", 1, 400,
            "RulesPerSecurityGroupLimitExceeded",
        )
    )  # fmt: skip
    create(cluster, "web", annotations={TYPE: "nlb"})
    with trio.fail_after(60):
        async with running(cluster, controllers=CONTROLLERS):

            async def warned() -> bool:
                return bool(await cluster.events("SyncLoadBalancerFailed"))

            await until(warned)
    (event,) = await cluster.events("SyncLoadBalancerFailed")
    assert "Inbound or outbound rules per security group" in event["message"]
    assert "NLBSecurityGroupMode=Managed" in event["message"]


async def test_a_refused_type_switch_keeps_the_classic_elb_following_the_service(
    cluster: Cluster,
) -> None:
    """A Classic ELB's Service annotated nlb later gets one Warning naming the annotation
    and the fix, no NLB is made, and the kept Classic ELB still follows the Nodes added and
    removed and the source ranges set afterwards."""
    world = cluster.world
    instances = await world.add_instances(3)
    register(cluster, instances[:1])
    with trio.fail_after(60):
        async with running(cluster, controllers=CONTROLLERS):
            name = create(cluster, "web")
            await until(lambda: bool(hostname(cluster, "web")))
            await patch(cluster, "web", {"metadata": {"annotations": {TYPE: "nlb"}}})

            async def warned() -> bool:
                return any(
                    TYPE in e["message"] for e in await cluster.events("SyncLoadBalancerFailed")
                )

            await until(warned)
            register(cluster, instances[1:])
            response = await cluster.http.delete(f"/api/v1/nodes/{instances[0].private_dns_name}")
            response.raise_for_status()
            await patch(cluster, "web", {"spec": {"loadBalancerSourceRanges": ["10.1.0.0/16"]}})

            async def followed() -> bool:
                seen = await balancing(world)
                own = seen.security_groups.get(f"k8s-elb-{name}", {"ingress": []})
                return seen.clbs[name]["instances"] == sorted(i.id for i in instances[1:]) and {
                    r[3] for r in own["ingress"]
                } == {"10.1.0.0/16"}

            await until(followed)
        seen = await balancing(world)
    (event,) = [e for e in await cluster.events("SyncLoadBalancerFailed") if TYPE in e["message"]]
    assert "is a Classic ELB and AWS cannot turn it into an NLB" in event["message"]
    assert "delete the Service and create it again" in event["message"]
    assert not seen.nlbs
    assert not seen.target_groups
    assert hostname(cluster, "web") == seen.clbs[name]["dns"]
