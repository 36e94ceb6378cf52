"""What a Service asks of its AWS load balancer: cloud-provider-aws's annotations read into a
`LoadBalancerPlan`, with no cloud call (plan here, act in `elb.py` / `elbv2.py`).

`plan()` is pure: the Service, the cloud-config and the cluster ID in, the plan out, or

- `ImplementedElsewhere` for `aws-load-balancer-type: external` or `nlb-ip` (the AWS Load
  Balancer Controller's), as upstream;
- `ServiceRefused` naming the field or annotation and the fix, for what upstream refuses
  (`spec.loadBalancerIP`, session affinity, mixed protocols, a protocol the load balancer
  type cannot carry, an annotation value that cannot mean anything) and for what trio-ccm
  does not do yet (docs/aws.md's annotations table says which).

Names and defaults are upstream's (pkg/providers/v1, read at 63ec440c): the load balancer
is `default_load_balancer_name`; a target group is
`k8s-<namespace:8>-<name:8>-<sha1(cluster, namespace, name, port, nodePort, protocol,
"instance", health-check protocol, health-check interval):10>` (non-alphanumerics dropped
from the names), so a cluster moving from the Go CCM adopts its target groups.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from trio_ccm.cloud.aws.config import CloudConfig
from trio_ccm.cloud.provider import (
    ImplementedElsewhere,
    NodeInfo,
    ServiceInfo,
    ServicePort,
    ServiceRefused,
    default_load_balancer_name,
)

Secured = Callable[[str, int], bool]

__all__ = [
    "ANNOTATIONS",
    "ClbHealthCheck",
    "ClbListener",
    "LoadBalancerPlan",
    "NlbHealthCheck",
    "NlbPort",
    "key_values",
    "plan",
    "target_group_name",
    "target_nodes",
]

_PREFIX: Final = "service.beta.kubernetes.io/aws-load-balancer-"
TYPE: Final = _PREFIX + "type"
INTERNAL: Final = _PREFIX + "internal"
PROXY_PROTOCOL: Final = _PREFIX + "proxy-protocol"
ACCESS_LOG_EMIT_INTERVAL: Final = _PREFIX + "access-log-emit-interval"
ACCESS_LOG_ENABLED: Final = _PREFIX + "access-log-enabled"
ACCESS_LOG_BUCKET: Final = _PREFIX + "access-log-s3-bucket-name"
ACCESS_LOG_PREFIX: Final = _PREFIX + "access-log-s3-bucket-prefix"
DRAINING_ENABLED: Final = _PREFIX + "connection-draining-enabled"
DRAINING_TIMEOUT: Final = _PREFIX + "connection-draining-timeout"
IDLE_TIMEOUT: Final = _PREFIX + "connection-idle-timeout"
CROSS_ZONE: Final = _PREFIX + "cross-zone-load-balancing-enabled"
EXTRA_SECURITY_GROUPS: Final = _PREFIX + "extra-security-groups"
SECURITY_GROUPS: Final = _PREFIX + "security-groups"
SSL_CERT: Final = _PREFIX + "ssl-cert"
SSL_PORTS: Final = _PREFIX + "ssl-ports"
SSL_NEGOTIATION_POLICY: Final = _PREFIX + "ssl-negotiation-policy"
BACKEND_PROTOCOL: Final = _PREFIX + "backend-protocol"
ADDITIONAL_TAGS: Final = _PREFIX + "additional-resource-tags"
HC_PROTOCOL: Final = _PREFIX + "healthcheck-protocol"
HC_PORT: Final = _PREFIX + "healthcheck-port"
HC_PATH: Final = _PREFIX + "healthcheck-path"
HC_HEALTHY: Final = _PREFIX + "healthcheck-healthy-threshold"
HC_UNHEALTHY: Final = _PREFIX + "healthcheck-unhealthy-threshold"
HC_TIMEOUT: Final = _PREFIX + "healthcheck-timeout"
HC_INTERVAL: Final = _PREFIX + "healthcheck-interval"
TARGET_GROUP_ATTRIBUTES: Final = _PREFIX + "target-group-attributes"
EIP_ALLOCATIONS: Final = _PREFIX + "eip-allocations"
PRIVATE_IPV4_ADDRESSES: Final = _PREFIX + "private-ipv4-addresses"
TARGET_NODE_LABELS: Final = _PREFIX + "target-node-labels"
SUBNETS: Final = _PREFIX + "subnets"
SOURCE_RANGES: Final = "service.beta.kubernetes.io/load-balancer-source-ranges"

ANNOTATIONS: Final = (
    TYPE, INTERNAL, PROXY_PROTOCOL, ACCESS_LOG_EMIT_INTERVAL, ACCESS_LOG_ENABLED,
    ACCESS_LOG_BUCKET, ACCESS_LOG_PREFIX, DRAINING_ENABLED, DRAINING_TIMEOUT, IDLE_TIMEOUT,
    CROSS_ZONE, EXTRA_SECURITY_GROUPS, SECURITY_GROUPS, SSL_CERT, SSL_PORTS,
    SSL_NEGOTIATION_POLICY, BACKEND_PROTOCOL, ADDITIONAL_TAGS, HC_PROTOCOL, HC_PORT, HC_PATH,
    HC_HEALTHY, HC_UNHEALTHY, HC_TIMEOUT, HC_INTERVAL, TARGET_GROUP_ATTRIBUTES,
    EIP_ALLOCATIONS, PRIVATE_IPV4_ADDRESSES, TARGET_NODE_LABELS, SUBNETS,
)  # fmt: skip
"""Every annotation cloud-provider-aws documents (docs/aws.md says what each does here)."""

TRAFFIC_PORT: Final = "traffic-port"
_TG_ATTRIBUTES: Final = frozenset({"preserve_client_ip.enabled", "proxy_protocol_v2.enabled"})
_NOT_ALNUM: Final = re.compile(r"[^A-Za-z0-9]")
_BACKEND_TO_LISTENER: Final = {"https": "https", "http": "https", "ssl": "ssl", "tcp": "ssl"}
_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@dataclass(frozen=True, slots=True)
class NlbHealthCheck:
    protocol: str  # TCP, HTTP, HTTPS
    port: str  # "traffic-port" or a number
    path: str
    interval: int
    timeout: int
    healthy: int
    unhealthy: int


@dataclass(frozen=True, slots=True)
class NlbPort:
    """One listener of an NLB and the target group it forwards to."""

    name: str
    port: int
    protocol: str  # the listener's: TCP, UDP, TLS
    node_port: int
    target_protocol: str  # the target group's: TCP, UDP, TLS
    health: NlbHealthCheck
    certificate: str = ""
    ssl_policy: str = ""
    target_group: str = ""


@dataclass(frozen=True, slots=True)
class ClbListener:
    protocol: str  # TCP, SSL, HTTP, HTTPS (as AWS answers them)
    port: int
    instance_protocol: str
    instance_port: int
    certificate: str = ""


@dataclass(frozen=True, slots=True)
class ClbHealthCheck:
    target: str  # "TCP:30080", "HTTP:32000/healthz"
    interval: int
    timeout: int
    healthy: int
    unhealthy: int


@dataclass(frozen=True, slots=True)
class LoadBalancerPlan:
    """What the Service's load balancer should be (see the module docstring)."""

    service: str  # namespace/name
    uid: str
    name: str
    nlb: bool
    internal: bool
    subnets: tuple[str, ...]  # the subnets annotation (IDs or Name tags); () = discover
    source_ranges: tuple[str, ...]
    extra_tags: Mapping[str, str]
    cross_zone: bool
    node_labels: Mapping[str, str]
    nlb_ports: tuple[NlbPort, ...] = ()
    target_group_attributes: Mapping[str, str] = field(default_factory=dict)
    clb_listeners: tuple[ClbListener, ...] = ()
    clb_health: ClbHealthCheck | None = None
    security_groups: tuple[str, ...] = ()  # the security-groups annotation (replaces ours)
    extra_security_groups: tuple[str, ...] = ()
    draining: bool = False
    draining_timeout: int = 300
    idle_timeout: int = 60
    protocols: tuple[str, ...] = ()  # the Service ports' protocols, lower-case (node rules)

    @property
    def kind(self) -> str:
        return "NLB" if self.nlb else "Classic ELB"


def key_values(value: str) -> dict[str, str]:
    """Upstream's "Key1=Val1,Key2=Val2,KeyNoVal1=,KeyNoVal2" lists."""
    found: dict[str, str] = {}
    for item in value.split(","):
        key, _, val = item.strip().partition("=")
        if key.strip():
            found[key.strip()] = val.strip()
    return found


def _list(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


class _Reader:
    """Annotation values, each problem named with the fix; problems pile up in `problems`."""

    def __init__(self, service: ServiceInfo) -> None:
        self.service = service
        self.annotations = service.annotations
        self.problems: list[str] = []

    def text(self, key: str, default: str = "") -> str:
        return self.annotations.get(key, default)

    def integer(self, key: str, default: int, low: int, high: int) -> int:
        raw = self.annotations.get(key)
        if raw is None:
            return default
        try:
            value = int(raw.strip())
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            self.problems.append(
                f"annotation {key}: {raw!r} is not a whole number from {low} to {high}"
            )
            return default
        return value

    def boolean(self, key: str, default: bool) -> bool:
        raw = self.annotations.get(key)
        if raw is None or raw == "":
            return default
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        self.problems.append(f"annotation {key}: {raw!r} is not true or false")
        return default

    def refuse(self, key: str, why: str) -> None:
        if key in self.annotations:
            self.problems.append(f"annotation {key}: {why}")


def target_group_name(
    cluster_id: str, service: ServiceInfo, port: int, node_port: int, protocol: str,
    health: NlbHealthCheck,
) -> str:  # fmt: skip
    """Upstream's buildTargetGroupName (see the module docstring)."""
    digest = hashlib.sha1(usedforsecurity=False)
    for part in (
        cluster_id,
        service.namespace,
        service.name,
        str(port),
        str(node_port),
        protocol,
        "instance",
        health.protocol,
        str(health.interval),
    ):
        digest.update(part.encode())
    namespace = _NOT_ALNUM.sub("", service.namespace)[:8]
    name = _NOT_ALNUM.sub("", service.name)[:8]
    return f"k8s-{namespace}-{name}-{digest.hexdigest()[:10]}"


def source_ranges(service: ServiceInfo) -> tuple[str, ...]:
    """Upstream's GetLoadBalancerSourceRanges: the field, else the annotation, else all."""
    raw = service.load_balancer_source_ranges or _list(service.annotations.get(SOURCE_RANGES, ""))
    ranges = []
    for value in raw:
        try:
            ranges.append(str(ipaddress.ip_network(value.strip(), strict=False)))
        except ValueError:
            continue  # the controller refuses such a Service before any provider call
    return tuple(dict.fromkeys(ranges)) or ("0.0.0.0/0",)


def target_nodes(nodes: tuple[NodeInfo, ...], labels: Mapping[str, str]) -> list[NodeInfo]:
    """Upstream's filterTargetNodes: Nodes carrying every label (an empty value: any)."""
    if not labels:
        return list(nodes)
    return [
        node
        for node in nodes
        if all(k in node.labels and (not v or node.labels[k] == v) for k, v in labels.items())
    ]


def plan(service: ServiceInfo, config: CloudConfig, cluster_id: str) -> LoadBalancerPlan:
    """The Service's load balancer (see the module docstring)."""
    where = f"Service {service.key}"
    kind = service.annotations.get(TYPE, "")
    if kind in ("external", "nlb-ip"):
        raise ImplementedElsewhere(
            f"{where}: {TYPE}={kind} belongs to the AWS Load Balancer Controller"
        )
    nlb = kind == "nlb"
    read = _Reader(service)
    problems = read.problems
    if service.load_balancer_ip:
        problems.append(
            "spec.loadBalancerIP cannot be set for AWS load balancers (AWS chooses their "
            "addresses); remove it"
        )
    if service.session_affinity not in ("", "None"):
        problems.append(
            f"spec.sessionAffinity {service.session_affinity} is not supported by AWS "
            "load balancers; set it to None"
        )
    protocols = {p.protocol for p in service.ports}
    if len(protocols) > 1:
        problems.append(
            f"spec.ports mixes protocols ({', '.join(sorted(protocols))}): AWS load balancers "
            "serve one; split the Service"
        )
    allowed = ("TCP", "UDP") if nlb else ("TCP",)
    for port in service.ports:
        if port.protocol not in allowed:
            problems.append(
                f"spec.ports {port.port}/{port.protocol}: a {'NLB' if nlb else 'Classic ELB'} "
                f"carries {' and '.join(allowed)} only"
                + ("" if nlb else f" (set {TYPE}: nlb for UDP)")
            )
    ports = [p for p in service.ports if p.node_port]
    if service.ports and not ports:
        problems.append("spec.ports: no port has a nodePort yet; the API server assigns them")
    internal = read.text(INTERNAL) not in ("", "false")
    certificate = read.text(SSL_CERT)
    ssl_ports = _list(read.text(SSL_PORTS, "*"))
    backend = read.text(BACKEND_PROTOCOL).lower()
    if backend and backend not in _BACKEND_TO_LISTENER:
        problems.append(
            f"annotation {BACKEND_PROTOCOL}: {backend!r} is not http, https, ssl or tcp"
        )

    def secured(name: str, number: int) -> bool:
        return bool(certificate) and (
            "*" in ssl_ports or str(number) in ssl_ports or name in ssl_ports
        )

    cross_zone = read.boolean(CROSS_ZONE, False)
    tags = key_values(read.text(ADDITIONAL_TAGS))
    node_labels = key_values(read.text(TARGET_NODE_LABELS))
    if read.boolean(ACCESS_LOG_ENABLED, False):
        problems.append(
            f"annotation {ACCESS_LOG_ENABLED}: access logs are not supported by trio-ccm yet; "
            "remove it, or turn them on in the AWS console"
        )
    read.refuse(EIP_ALLOCATIONS, "static addresses are not supported by trio-ccm yet; remove it")
    read.refuse(
        PRIVATE_IPV4_ADDRESSES, "static addresses are not supported by trio-ccm yet; remove it"
    )
    base = LoadBalancerPlan(
        service=service.key,
        uid=service.uid,
        name=default_load_balancer_name(service),
        nlb=nlb,
        internal=internal,
        subnets=_list(read.text(SUBNETS)),
        source_ranges=source_ranges(service),
        extra_tags=tags,
        cross_zone=cross_zone,
        node_labels=node_labels,
        protocols=tuple(sorted(p.lower() for p in protocols)),
    )
    if nlb:
        result = _nlb(read, service, config, cluster_id, ports, secured, base)
    else:
        result = _clb(read, service, config, ports, secured, base)
    if problems:
        raise ServiceRefused(f"{where}: " + "; ".join(problems))
    return result


def _nlb_health(read: _Reader, service: ServiceInfo, config: CloudConfig) -> NlbHealthCheck:
    """Upstream's buildNLBHealthCheckConfiguration."""
    local = service.external_traffic_policy == "Local"
    if local:
        port, path, protocol = str(service.health_check_node_port), "/healthz", "HTTP"
        interval, timeout, threshold = 10, 10, 2
    else:
        port, path, protocol = TRAFFIC_PORT, "/", "TCP"
        interval, timeout, threshold = 30, 10, 3
    protocol = read.text(HC_PROTOCOL, protocol).upper()
    if protocol in ("HTTP", "HTTPS"):
        path = read.text(HC_PATH, path)
    elif protocol == "TCP":
        path = ""
    else:
        read.problems.append(f"annotation {HC_PROTOCOL}: {protocol!r} is not tcp, http or https")
    port = read.text(HC_PORT, port)
    if config.cluster_service_load_balancer_health_probe_mode == "Shared" and not local:
        protocol, path = "HTTP", config.cluster_service_shared_load_balancer_health_probe_path
        port = str(config.cluster_service_shared_load_balancer_health_probe_port)
    if port != TRAFFIC_PORT and not (port.isdigit() and 1 <= int(port) <= 65535):
        read.problems.append(f"annotation {HC_PORT}: {port!r} is not traffic-port or a port number")
        port = TRAFFIC_PORT
    return NlbHealthCheck(
        protocol=protocol,
        port=port,
        path=path,
        interval=read.integer(HC_INTERVAL, interval, 5, 300),
        timeout=read.integer(HC_TIMEOUT, timeout, 2, 120),
        healthy=read.integer(HC_HEALTHY, threshold, 2, 10),
        unhealthy=read.integer(HC_UNHEALTHY, threshold, 2, 10),
    )


def _nlb(
    read: _Reader,
    service: ServiceInfo,
    config: CloudConfig,
    cluster_id: str,
    ports: Sequence[ServicePort],
    secured: Secured,
    base: LoadBalancerPlan,
) -> LoadBalancerPlan:
    if config.nlb_security_group_mode == "Managed":
        read.problems.append(
            "the cloud-config's NLBSecurityGroupMode=Managed is not supported by trio-ccm yet; "
            "remove it (NLBs then open the Nodes' security groups, as before)"
        )
    read.refuse(SECURITY_GROUPS, "needs NLBSecurityGroupMode=Managed, not supported yet; remove it")
    read.refuse(PROXY_PROTOCOL, f"applies to Classic ELBs; use {TARGET_GROUP_ATTRIBUTES}")
    health = _nlb_health(read, service, config)
    attributes = key_values(read.text(TARGET_GROUP_ATTRIBUTES))
    for key, value in attributes.items():
        if key not in _TG_ATTRIBUTES or value not in ("true", "false"):
            read.problems.append(
                f"annotation {TARGET_GROUP_ATTRIBUTES}: {key}={value} is not one of "
                f"{', '.join(sorted(_TG_ATTRIBUTES))} set to true or false"
            )
    backend = read.text(BACKEND_PROTOCOL).lower()
    mapped = []
    for port in ports:
        protocol = target = port.protocol
        certificate = policy = ""
        if port.protocol != "UDP" and secured(port.name, port.port):
            protocol, certificate = "TLS", read.text(SSL_CERT)
            policy = read.text(SSL_NEGOTIATION_POLICY)
            target = "TLS" if backend == "ssl" else target
        mapped.append(
            NlbPort(
                name=port.name,
                port=port.port,
                protocol=protocol,
                node_port=port.node_port,
                target_protocol=target,
                health=health,
                certificate=certificate,
                ssl_policy=policy,
                target_group=target_group_name(
                    cluster_id, service, port.port, port.node_port, target, health
                ),
            )
        )
    return replace(base, nlb_ports=tuple(mapped), target_group_attributes=attributes)


def _clb(
    read: _Reader,
    service: ServiceInfo,
    config: CloudConfig,
    ports: Sequence[ServicePort],
    secured: Secured,
    base: LoadBalancerPlan,
) -> LoadBalancerPlan:
    read.refuse(
        PROXY_PROTOCOL,
        "the proxy protocol on Classic ELBs is not supported by trio-ccm yet; remove it "
        "(or use an NLB with proxy_protocol_v2 in "
        f"{TARGET_GROUP_ATTRIBUTES})",
    )
    read.refuse(
        SSL_NEGOTIATION_POLICY,
        "SSL negotiation policies on Classic ELBs are not supported by trio-ccm yet; remove it",
    )
    backend = read.text(BACKEND_PROTOCOL).lower()
    listeners = []
    for port in ports:
        protocol = instance = "tcp"
        certificate = ""
        if secured(port.name, port.port):
            certificate = read.text(SSL_CERT)
            if backend:
                instance, protocol = backend, _BACKEND_TO_LISTENER.get(backend, "ssl")
            else:
                protocol = "ssl"
        elif backend == "http":
            protocol = instance = "http"
        listeners.append(
            ClbListener(protocol.upper(), port.port, instance.upper(), port.node_port, certificate)
        )
    health = None
    if listeners:
        first = listeners[0].instance_port
        if service.external_traffic_policy == "Local" and service.health_check_node_port:
            protocol, port_number, path = "HTTP", service.health_check_node_port, "/healthz"
            if read.text(HC_PORT) == TRAFFIC_PORT:
                port_number = first
        else:
            protocol = "SSL" if backend in ("https", "ssl") else "TCP"
            port_number, path = first, ""
            if config.cluster_service_load_balancer_health_probe_mode == "Shared":
                protocol = "HTTP"
                path = config.cluster_service_shared_load_balancer_health_probe_path
                port_number = config.cluster_service_shared_load_balancer_health_probe_port
        protocol = read.text(HC_PROTOCOL, protocol).upper()
        raw_port = read.text(HC_PORT, TRAFFIC_PORT)
        if raw_port != TRAFFIC_PORT:
            if raw_port.isdigit() and 1 <= int(raw_port) <= 65535:
                port_number = int(raw_port)
            else:
                read.problems.append(
                    f"annotation {HC_PORT}: {raw_port!r} is not traffic-port or a port number"
                )
        if protocol in ("HTTP", "HTTPS"):
            path = read.text(HC_PATH) or path or "/"
        elif protocol in ("TCP", "SSL"):
            path = ""
        else:
            read.problems.append(
                f"annotation {HC_PROTOCOL}: {protocol!r} is not tcp, ssl, http or https"
            )
        health = ClbHealthCheck(
            target=f"{protocol}:{port_number}{path}",
            interval=read.integer(HC_INTERVAL, 10, 5, 300),
            timeout=read.integer(HC_TIMEOUT, 5, 2, 60),
            healthy=read.integer(HC_HEALTHY, 2, 2, 10),
            unhealthy=read.integer(HC_UNHEALTHY, 6, 2, 10),
        )
    return replace(
        base,
        clb_listeners=tuple(listeners),
        clb_health=health,
        security_groups=_list(read.text(SECURITY_GROUPS)),
        extra_security_groups=_list(read.text(EXTRA_SECURITY_GROUPS)),
        draining=read.boolean(DRAINING_ENABLED, False),
        draining_timeout=read.integer(DRAINING_TIMEOUT, 300, 1, 3600),
        idle_timeout=read.integer(IDLE_TIMEOUT, 60, 1, 4000),
    )
