"""What `bench/chaos.py --cloud aws` judges moto by: `find_aws_problems` names every kind of
leftover, duplicate or missing piece (load balancers, listeners, target groups, security
groups and rules), and passes a cluster that is right; and the moto patch the chaos run
found (DeleteLoadBalancerListeners with several ports)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import trio

from trio_ccm.cloud.aws.loadbalancers import NLB_CLIENT_RULE, NLB_HEALTH_RULE, NLB_MTU_RULE
from trio_ccm.testing import make_service
from trio_ccm_testbed.aws import Balancing, MotoServer
from trio_ccm_testbed.chaos import find_aws_problems

NODE_GROUP = "nodes.chaos"
NODE_GROUP_ID = "sg-nodes"
CLB_UID = "11111111-2222-3333-4444-555555555555"
NLB_UID = "66666666-7777-8888-9999-000000000000"
CLB = "a" + CLB_UID.replace("-", "")[:31]
NLB = "a" + NLB_UID.replace("-", "")[:31]
TG = "k8s-default-net-0123456789"


def service(name: str, uid: str, lb: str, *, nlb: bool) -> dict[str, Any]:
    svc = make_service(
        name,
        annotations={"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"} if nlb else {},
        ports=[{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}],
    )
    svc["metadata"]["uid"] = uid
    svc["metadata"]["finalizers"] = ["service.kubernetes.io/load-balancer-cleanup"]
    svc["status"] = {"loadBalancer": {"ingress": [{"hostname": f"{lb}.elb"}]}}
    return svc


NODES = [
    {
        "metadata": {"name": "ip-10-0-0-4.ec2.internal"},
        "spec": {"providerID": "aws:///us-east-1a/i-1"},
    }
]
SERVICES = [service("web", CLB_UID, CLB, nlb=False), service("net", NLB_UID, NLB, nlb=True)]


def right() -> Balancing:
    """moto as it should be for SERVICES and NODES."""
    client = f"{NLB_CLIENT_RULE}={NLB}"
    return Balancing(
        nlbs={
            NLB: {
                "dns": f"{NLB}.elb",
                "listeners": [(80, "TCP", TG, "")],
                "tags": {"kubernetes.io/service-name": "default/net"},
            }
        },
        clbs={
            CLB: {
                "dns": f"{CLB}.elb",
                "listeners": [("TCP", 80, "TCP", 30080)],
                "instances": ["i-1"],
                "tags": {"kubernetes.io/service-name": "default/web"},
            }
        },
        target_groups={TG: {"Port": 30080, "targets": ["i-1"], "tags": {}}},
        security_groups={
            NODE_GROUP: {
                "id": NODE_GROUP_ID,
                "tags": {},
                "ingress": [
                    ("-1", -1, -1, "sg-clb", ""),
                    ("icmp", 3, 4, "0.0.0.0/0", NLB_MTU_RULE),
                    ("tcp", 30080, 30080, "0.0.0.0/0", client),
                ],
            },
            f"k8s-elb-{CLB}": {
                "id": "sg-clb",
                "tags": {},
                "ingress": [("icmp", 3, 4, "0.0.0.0/0", ""), ("tcp", 80, 80, "0.0.0.0/0", "")],
            },
        },
    )


def rules(moto: Balancing) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = moto.security_groups[NODE_GROUP]["ingress"]
    return found


def kinds(moto: Balancing, services: list[dict[str, Any]] = SERVICES) -> list[str]:
    problems = find_aws_problems(
        NODES, services, moto, node_group=NODE_GROUP, running={"ip-10-0-0-4.ec2.internal"}
    )
    return sorted(p.kind for p in problems)


def test_a_cluster_that_is_right_has_no_problem() -> None:
    """One Classic ELB and one NLB, each with exactly its listeners, targets and rules: []."""
    assert kinds(right()) == []


def _second_type(moto: Balancing) -> None:
    moto.nlbs[CLB] = {**moto.nlbs[NLB], "listeners": [], "tags": {}}


def _stray_lb(moto: Balancing) -> None:
    moto.clbs["agone"] = {**moto.clbs[CLB], "tags": {"kubernetes.io/service-name": "default/x"}}


def _stale_listener(moto: Balancing) -> None:
    moto.clbs[CLB]["listeners"] = [*moto.clbs[CLB]["listeners"], ("TCP", 81, "TCP", 30081)]


def _stray_target_group(moto: Balancing) -> None:
    moto.target_groups["k8s-default-net-old"] = moto.target_groups[TG]


def _stale_target(moto: Balancing) -> None:
    moto.target_groups[TG]["targets"] = ["i-1", "i-gone"]


def _stray_group(moto: Balancing) -> None:
    moto.security_groups["k8s-elb-agone"] = {"id": "sg-gone", "tags": {}, "ingress": []}


def _rule_of_a_gone_nlb(moto: Balancing) -> None:
    rules(moto).append(("tcp", 31000, 31000, "0.0.0.0/0", f"{NLB_CLIENT_RULE}=agone"))


def _health_rule_off_port(moto: Balancing) -> None:
    rules(moto).append(("tcp", 31999, 31999, "10.0.0.0/19", f"{NLB_HEALTH_RULE}={NLB}"))


def _no_client_rule(moto: Balancing) -> None:
    rules(moto).remove(("tcp", 30080, 30080, "0.0.0.0/0", f"{NLB_CLIENT_RULE}={NLB}"))


def _no_mtu_rule(moto: Balancing) -> None:
    rules(moto).remove(("icmp", 3, 4, "0.0.0.0/0", NLB_MTU_RULE))


def _no_clb_rule(moto: Balancing) -> None:
    rules(moto).remove(("-1", -1, -1, "sg-clb", ""))


def _clb_gone(moto: Balancing) -> None:
    del moto.clbs[CLB]
    del moto.security_groups[f"k8s-elb-{CLB}"]
    rules(moto).remove(("-1", -1, -1, "sg-clb", ""))


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(_second_type, ["duplicate"], id="a-clb-and-an-nlb-for-one-service"),
        pytest.param(_stray_lb, ["leaked"], id="a-load-balancer-no-service-wants"),
        pytest.param(_stale_listener, ["ports"], id="a-listener-of-a-removed-port"),
        pytest.param(_stray_target_group, ["leaked"], id="a-target-group-no-listener-uses"),
        pytest.param(_stale_target, ["backends"], id="a-target-that-is-no-node"),
        pytest.param(_stray_group, ["leaked"], id="a-k8s-elb-group-of-no-load-balancer"),
        pytest.param(_rule_of_a_gone_nlb, ["rule-leaked"], id="a-client-rule-of-a-gone-nlb"),
        pytest.param(_health_rule_off_port, ["rule-leaked"], id="a-health-rule-off-the-ports"),
        pytest.param(_no_client_rule, ["rule-missing"], id="no-client-rule"),
        pytest.param(_no_mtu_rule, ["rule-missing"], id="no-mtu-rule"),
        pytest.param(_no_clb_rule, ["rule-missing"], id="no-rule-for-the-clb-group"),
        pytest.param(_clb_gone, ["missing"], id="a-service-without-its-load-balancer"),
    ],
)
def test_each_leftover_or_gap_is_named(
    change: Callable[[Balancing], None], expected: list[str]
) -> None:
    """Each change to a right cluster is found, as its kind (and nothing else)."""
    moto = copy.deepcopy(right())
    change(moto)
    assert kinds(moto) == expected


def test_a_refused_type_switch_keeps_the_existing_load_balancer_right() -> None:
    """A Service annotated nlb whose Classic ELB was kept (the switch refused) is no problem."""
    switched = copy.deepcopy(SERVICES)
    annotations = switched[0]["metadata"].setdefault("annotations", {})
    annotations["service.beta.kubernetes.io/aws-load-balancer-type"] = "nlb"
    assert kinds(right(), switched) == []


async def test_delete_load_balancer_listeners_deletes_every_port_named(
    moto: MotoServer,
) -> None:
    """moto patch 11: DeleteLoadBalancerListeners with two ports deletes both listeners."""

    def run() -> list[int]:
        elb = moto.client("elb")
        listeners = [
            {"Protocol": "TCP", "LoadBalancerPort": port, "InstancePort": 30000 + port}
            for port in (80, 84, 89)
        ]
        elb.create_load_balancer(
            LoadBalancerName="x", Listeners=listeners, AvailabilityZones=["us-east-1a"]
        )
        elb.delete_load_balancer_listeners(LoadBalancerName="x", LoadBalancerPorts=[84, 89])
        described = elb.describe_load_balancers()["LoadBalancerDescriptions"][0]
        return [d["Listener"]["LoadBalancerPort"] for d in described["ListenerDescriptions"]]

    assert await trio.to_thread.run_sync(run) == [80]
