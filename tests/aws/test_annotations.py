"""Every annotation cloud-provider-aws reads, on both load-balancer types: what the plan
makes of it, or the refusal that names it (one row per annotation and type; no AWS call:
`annotations.plan` is pure). The moto tests that carry these plans out are
test_load_balancer_updates.py and test_e2e_scenarios.py."""

# ruff: noqa: E501 - the table reads as one row per annotation and type, one line each

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from trio_ccm.cloud.aws.annotations import ANNOTATIONS, LoadBalancerPlan, plan
from trio_ccm.cloud.aws.config import CloudConfig
from trio_ccm.cloud.provider import ImplementedElsewhere, ServiceInfo, ServicePort, ServiceRefused

P = "service.beta.kubernetes.io/aws-load-balancer-"
CERT = "arn:aws:acm:us-east-1:123456789012:certificate/x"
MANAGED = CloudConfig(nlb_security_group_mode="Managed")


def service(kind: str, annotations: dict[str, str], **tweaks: Any) -> ServiceInfo:
    marks = dict(annotations)
    if kind == "nlb":
        marks.setdefault(P + "type", "nlb")
    fields: dict[str, Any] = {
        "namespace": "default",
        "name": "web",
        "uid": "11111111-2222-3333-4444-555555555555",
        "annotations": marks,
        "ports": (ServicePort("http", "TCP", 80, 30080), ServicePort("https", "TCP", 443, 30443)),
    }
    fields.update(tweaks)
    return ServiceInfo(**fields)


Check = Callable[[LoadBalancerPlan], bool]

# (id, type, annotations, the plan's check or the words of the refusal, cloud-config)
ROWS: list[Any] = [
    pytest.param("clb", {}, lambda p: not p.nlb, None, id="type-absent-clb"),
    pytest.param("nlb", {}, lambda p: p.nlb and len(p.nlb_ports) == 2, None, id="type-nlb"),
    pytest.param("clb", {P + "internal": "true"}, lambda p: p.internal, None, id="internal-clb"),
    pytest.param("nlb", {P + "internal": "0.0.0.0/0"}, lambda p: p.internal, None, id="internal-nlb"),
    pytest.param("clb", {P + "internal": "false"}, lambda p: not p.internal, None, id="internal-false"),
    pytest.param("clb", {P + "proxy-protocol": "*"}, lambda p: p.proxy_protocol, None, id="proxy-protocol-clb"),
    pytest.param("clb", {P + "proxy-protocol": "80"}, P + "proxy-protocol", None, id="proxy-protocol-clb-not-star"),
    pytest.param("nlb", {P + "proxy-protocol": "*"}, "proxy_protocol_v2.enabled=true", None, id="proxy-protocol-nlb"),
    pytest.param("clb", {P + "access-log-enabled": "true", P + "access-log-s3-bucket-name": "logs", P + "access-log-s3-bucket-prefix": "web", P + "access-log-emit-interval": "5"}, lambda p: (p.access_log.enabled, p.access_log.bucket, p.access_log.prefix, p.access_log.interval) == (True, "logs", "web", 5), None, id="access-logs-clb"),
    pytest.param("nlb", {P + "access-log-enabled": "true", P + "access-log-s3-bucket-name": "logs", P + "access-log-s3-bucket-prefix": "web"}, lambda p: (p.access_log.enabled, p.access_log.bucket, p.access_log.prefix) == (True, "logs", "web"), None, id="access-logs-nlb"),
    pytest.param("clb", {P + "access-log-enabled": "true"}, P + "access-log-s3-bucket-name", None, id="access-log-enabled-without-bucket"),
    pytest.param("clb", {P + "access-log-enabled": "maybe"}, P + "access-log-enabled", None, id="access-log-enabled-garbage"),
    pytest.param("clb", {P + "access-log-emit-interval": "7"}, "5 or 60", None, id="access-log-emit-interval-clb-bad"),
    pytest.param("nlb", {P + "access-log-emit-interval": "5"}, "every 5 minutes", None, id="access-log-emit-interval-nlb"),
    pytest.param("clb", {P + "access-log-s3-bucket-name": "logs"}, lambda p: p.access_log == p.access_log.__class__(False, "logs", "", 0), None, id="access-log-bucket-kept-while-off"),
    pytest.param("clb", {P + "connection-draining-enabled": "true", P + "connection-draining-timeout": "30"}, lambda p: p.draining and p.draining_timeout == 30, None, id="connection-draining-clb"),
    pytest.param("nlb", {P + "connection-draining-enabled": "true"}, P + "connection-draining-enabled", None, id="connection-draining-enabled-nlb"),
    pytest.param("nlb", {P + "connection-draining-timeout": "30"}, P + "connection-draining-timeout", None, id="connection-draining-timeout-nlb"),
    pytest.param("clb", {P + "connection-idle-timeout": "120"}, lambda p: p.idle_timeout == 120, None, id="connection-idle-timeout-clb"),
    pytest.param("nlb", {P + "connection-idle-timeout": "120"}, P + "connection-idle-timeout", None, id="connection-idle-timeout-nlb"),
    pytest.param("clb", {P + "cross-zone-load-balancing-enabled": "true"}, lambda p: p.cross_zone, None, id="cross-zone-clb"),
    pytest.param("nlb", {P + "cross-zone-load-balancing-enabled": "true"}, lambda p: p.cross_zone, None, id="cross-zone-nlb"),
    pytest.param("clb", {P + "extra-security-groups": "sg-1,sg-2"}, lambda p: p.extra_security_groups == ("sg-1", "sg-2"), None, id="extra-security-groups-clb"),
    pytest.param("nlb", {P + "extra-security-groups": "sg-1"}, P + "extra-security-groups", None, id="extra-security-groups-nlb"),
    pytest.param("clb", {P + "security-groups": "sg-1"}, lambda p: p.security_groups == ("sg-1",), None, id="security-groups-clb"),
    pytest.param("nlb", {P + "security-groups": "sg-1"}, "NLBSecurityGroupMode=Managed", None, id="security-groups-nlb-unmanaged"),
    pytest.param("nlb", {P + "security-groups": "sg-1"}, lambda p: p.security_groups == ("sg-1",) and not p.managed_security_group, MANAGED, id="security-groups-nlb-managed"),
    pytest.param("nlb", {}, lambda p: p.managed_security_group, MANAGED, id="nlb-managed-own-group"),
    pytest.param("clb", {P + "ssl-cert": CERT}, lambda p: [c.protocol for c in p.clb_listeners] == ["SSL", "SSL"], None, id="ssl-cert-clb"),
    pytest.param("nlb", {P + "ssl-cert": CERT}, lambda p: [x.protocol for x in p.nlb_ports] == ["TLS", "TLS"], None, id="ssl-cert-nlb"),
    pytest.param("clb", {P + "ssl-cert": CERT, P + "ssl-ports": "443"}, lambda p: [c.protocol for c in p.clb_listeners] == ["TCP", "SSL"], None, id="ssl-ports-clb"),
    pytest.param("nlb", {P + "ssl-cert": CERT, P + "ssl-ports": "https"}, lambda p: [x.protocol for x in p.nlb_ports] == ["TCP", "TLS"], None, id="ssl-ports-nlb"),
    pytest.param("clb", {P + "ssl-cert": CERT, P + "ssl-negotiation-policy": "ELBSecurityPolicy-TLS-1-2-2017-01"}, lambda p: p.ssl_policy == "ELBSecurityPolicy-TLS-1-2-2017-01", None, id="ssl-negotiation-policy-clb"),
    pytest.param("nlb", {P + "ssl-cert": CERT, P + "ssl-negotiation-policy": "ELBSecurityPolicy-TLS13-1-2-2021-06"}, lambda p: p.nlb_ports[0].ssl_policy == "ELBSecurityPolicy-TLS13-1-2-2021-06", None, id="ssl-negotiation-policy-nlb"),
    pytest.param("clb", {P + "ssl-cert": CERT, P + "backend-protocol": "http"}, lambda p: [(c.protocol, c.instance_protocol) for c in p.clb_listeners] == [("HTTPS", "HTTP")] * 2, None, id="backend-protocol-clb"),
    pytest.param("nlb", {P + "ssl-cert": CERT, P + "backend-protocol": "ssl"}, lambda p: [x.target_protocol for x in p.nlb_ports] == ["TLS", "TLS"], None, id="backend-protocol-nlb"),
    pytest.param("clb", {P + "backend-protocol": "quic"}, P + "backend-protocol", None, id="backend-protocol-garbage"),
    pytest.param("clb", {P + "additional-resource-tags": "team=web,cost=1"}, lambda p: dict(p.extra_tags) == {"team": "web", "cost": "1"}, None, id="additional-resource-tags-clb"),
    pytest.param("nlb", {P + "additional-resource-tags": "team=web"}, lambda p: dict(p.extra_tags) == {"team": "web"}, None, id="additional-resource-tags-nlb"),
    pytest.param("clb", {P + "healthcheck-protocol": "http", P + "healthcheck-path": "/ready", P + "healthcheck-port": "8080"}, lambda p: p.clb_health is not None and p.clb_health.target == "HTTP:8080/ready", None, id="healthcheck-protocol-path-port-clb"),
    pytest.param("nlb", {P + "healthcheck-protocol": "http", P + "healthcheck-path": "/ready", P + "healthcheck-port": "8080"}, lambda p: (p.nlb_ports[0].health.protocol, p.nlb_ports[0].health.path, p.nlb_ports[0].health.port) == ("HTTP", "/ready", "8080"), None, id="healthcheck-protocol-path-port-nlb"),
    pytest.param("clb", {P + "healthcheck-interval": "20", P + "healthcheck-timeout": "7", P + "healthcheck-healthy-threshold": "3", P + "healthcheck-unhealthy-threshold": "4"}, lambda p: p.clb_health is not None and (p.clb_health.interval, p.clb_health.timeout, p.clb_health.healthy, p.clb_health.unhealthy) == (20, 7, 3, 4), None, id="healthcheck-numbers-clb"),
    pytest.param("nlb", {P + "healthcheck-interval": "20", P + "healthcheck-timeout": "7", P + "healthcheck-healthy-threshold": "3", P + "healthcheck-unhealthy-threshold": "4"}, lambda p: (p.nlb_ports[0].health.interval, p.nlb_ports[0].health.timeout, p.nlb_ports[0].health.healthy, p.nlb_ports[0].health.unhealthy) == (20, 7, 3, 4), None, id="healthcheck-numbers-nlb"),
    pytest.param("clb", {P + "healthcheck-interval": "often"}, P + "healthcheck-interval", None, id="healthcheck-interval-garbage"),
    pytest.param("nlb", {P + "target-group-attributes": "preserve_client_ip.enabled=false,proxy_protocol_v2.enabled=true"}, lambda p: dict(p.target_group_attributes) == {"preserve_client_ip.enabled": "false", "proxy_protocol_v2.enabled": "true"}, None, id="target-group-attributes-nlb"),
    pytest.param("nlb", {P + "target-group-attributes": "stickiness.enabled=true"}, "stickiness.enabled is not supported", None, id="target-group-attributes-unknown"),
    pytest.param("nlb", {P + "target-group-attributes": "proxy_protocol_v2.enabled=yes"}, "is not true or false", None, id="target-group-attributes-garbage"),
    pytest.param("clb", {P + "target-group-attributes": "proxy_protocol_v2.enabled=true"}, P + "target-group-attributes", None, id="target-group-attributes-clb"),
    pytest.param("nlb", {P + "eip-allocations": "eipalloc-1,eipalloc-2"}, lambda p: p.eip_allocations == ("eipalloc-1", "eipalloc-2"), None, id="eip-allocations-nlb"),
    pytest.param("nlb", {P + "eip-allocations": "eipalloc-1", P + "internal": "true"}, "internet-facing", None, id="eip-allocations-internal"),
    pytest.param("nlb", {P + "eip-allocations": "10.0.0.1"}, "is not an allocation ID", None, id="eip-allocations-garbage"),
    pytest.param("clb", {P + "eip-allocations": "eipalloc-1"}, P + "eip-allocations", None, id="eip-allocations-clb"),
    pytest.param("nlb", {P + "private-ipv4-addresses": "10.0.1.10", P + "internal": "true"}, lambda p: p.private_ipv4_addresses == ("10.0.1.10",), None, id="private-ipv4-addresses-nlb"),
    pytest.param("nlb", {P + "private-ipv4-addresses": "10.0.1.10"}, "for internal NLBs", None, id="private-ipv4-addresses-internet-facing"),
    pytest.param("nlb", {P + "private-ipv4-addresses": "ten", P + "internal": "true"}, "is not an IPv4 address", None, id="private-ipv4-addresses-garbage"),
    pytest.param("clb", {P + "private-ipv4-addresses": "10.0.1.10"}, P + "private-ipv4-addresses", None, id="private-ipv4-addresses-clb"),
    pytest.param("clb", {P + "target-node-labels": "role=web,spot"}, lambda p: dict(p.node_labels) == {"role": "web", "spot": ""}, None, id="target-node-labels-clb"),
    pytest.param("nlb", {P + "target-node-labels": "role=web"}, lambda p: dict(p.node_labels) == {"role": "web"}, None, id="target-node-labels-nlb"),
    pytest.param("clb", {P + "subnets": "subnet-1,public-a"}, lambda p: p.subnets == ("subnet-1", "public-a"), None, id="subnets-clb"),
    pytest.param("nlb", {P + "subnets": "subnet-1"}, lambda p: p.subnets == ("subnet-1",), None, id="subnets-nlb"),
    pytest.param("clb", {"service.beta.kubernetes.io/load-balancer-source-ranges": "10.0.0.0/8"}, lambda p: p.source_ranges == ("10.0.0.0/8",), None, id="source-ranges-clb"),
    pytest.param("nlb", {"service.beta.kubernetes.io/load-balancer-source-ranges": "10.0.0.0/8"}, lambda p: p.source_ranges == ("10.0.0.0/8",), None, id="source-ranges-nlb"),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "annotations", "expected", "config"), ROWS)
def test_each_annotation_is_honoured_or_refused_by_name(
    kind: str, annotations: dict[str, str], expected: Check | str, config: CloudConfig | None
) -> None:
    """The annotation shapes the plan as upstream's does, or the plan is refused with a
    message naming the annotation and the fix."""
    svc = service(kind, annotations)
    if isinstance(expected, str):
        with pytest.raises(ServiceRefused, match="default/web") as caught:
            plan(svc, config or CloudConfig(), "cluster")
        assert expected in str(caught.value), caught.value
    else:
        assert expected(plan(svc, config or CloudConfig(), "cluster"))


def test_every_annotation_has_a_row() -> None:
    """The table above names every annotation upstream reads (31 with the source ranges)."""
    seen = {key for row in ROWS for key in row.values[1]}
    seen |= {P + "type"}
    assert set(ANNOTATIONS) | {"service.beta.kubernetes.io/load-balancer-source-ranges"} <= seen
    assert len(ANNOTATIONS) + 1 == 31


@pytest.mark.parametrize("kind", ["external", "nlb-ip"])
def test_the_load_balancer_controllers_types_are_left_to_it(kind: str) -> None:
    """type external / nlb-ip belong to the AWS Load Balancer Controller, as upstream."""
    with pytest.raises(ImplementedElsewhere):
        plan(service("clb", {P + "type": kind}), CloudConfig(), "cluster")


def test_client_ip_preservation_cannot_be_turned_off_for_udp() -> None:
    """preserve_client_ip.enabled=false on a UDP Service is refused (AWS's rule)."""
    svc = service(
        "nlb",
        {P + "target-group-attributes": "preserve_client_ip.enabled=false"},
        ports=(ServicePort("dns", "UDP", 53, 30053),),
    )
    with pytest.raises(ServiceRefused, match="UDP"):
        plan(svc, CloudConfig(), "cluster")
