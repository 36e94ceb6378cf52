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
    "AccessLog",
    "ClbHealthCheck",
    "ClbListener",
    "LoadBalancerPlan",
    "NlbHealthCheck",
    "NlbPort",
    "kept_as",
    "kept_scheme",
    "key_values",
    "plan",
    "refuse_scheme_change",
    "target_group_name",
    "target_group_prefix",
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
class AccessLog:
    """Access logs to S3 (both types; `interval` is the Classic ELB's, 5 or 60 minutes)."""

    enabled: bool = False
    bucket: str = ""
    prefix: str = ""
    interval: int = 0  # 0: AWS's default (60)


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
    access_log: AccessLog = AccessLog()
    proxy_protocol: bool = False  # Classic ELB: the backend policy on every instance port
    ssl_policy: str = ""  # Classic ELB: the predefined policy of its SSL/HTTPS listeners
    eip_allocations: tuple[str, ...] = ()  # NLB: one per subnet, in the subnets' order
    private_ipv4_addresses: tuple[str, ...] = ()  # NLB: one per subnet
    managed_security_group: bool = False  # NLB: NLBSecurityGroupMode=Managed, no BYO groups

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


def target_group_prefix(service: str) -> str:
    """What every target group name of the Service `namespace/name` starts with."""
    namespace, _, name = service.partition("/")
    return f"k8s-{_NOT_ALNUM.sub('', namespace)[:8]}-{_NOT_ALNUM.sub('', name)[:8]}-"


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


CLASSIC_ONLY: Final = (
    PROXY_PROTOCOL, ACCESS_LOG_EMIT_INTERVAL, DRAINING_ENABLED, DRAINING_TIMEOUT, IDLE_TIMEOUT,
    EXTRA_SECURITY_GROUPS,
)  # fmt: skip
"""Annotations an NLB has no setting for: refused on one (upstream ignores all but
`extra-security-groups`, which it refuses too)."""
NLB_ONLY: Final = (TARGET_GROUP_ATTRIBUTES, EIP_ALLOCATIONS, PRIVATE_IPV4_ADDRESSES)
"""Annotations a Classic ELB has no setting for: refused on one (upstream refuses
`target-group-attributes` and ignores the two others)."""
_CLASSIC_ONLY_FIX: Final = "applies to Classic ELBs only (an NLB has no such setting); remove it"
_CLASSIC_ONLY_WHY: Final = {
    PROXY_PROTOCOL: "applies to Classic ELBs only; for an NLB set "
    f"{TARGET_GROUP_ATTRIBUTES}: proxy_protocol_v2.enabled=true instead",
    ACCESS_LOG_EMIT_INTERVAL: "applies to Classic ELBs only (an NLB writes its logs every "
    "5 minutes); remove it",
    EXTRA_SECURITY_GROUPS: "an NLB takes no extra security groups (as upstream); remove it, "
    f"or name every group in {SECURITY_GROUPS} with NLBSecurityGroupMode=Managed",
}


def kept_as(service: ServiceInfo, *, nlb: bool) -> tuple[ServiceInfo, tuple[str, ...]]:
    """The Service as its existing load balancer's type reads it, after a type change AWS
    cannot make: the type annotation set back, the other type's own annotations dropped
    (returned, sorted, for the warning to name)."""
    other_only = NLB_ONLY if not nlb else CLASSIC_ONLY
    annotations = {
        k: v for k, v in service.annotations.items() if k != TYPE and k not in other_only
    }
    if nlb:
        annotations[TYPE] = "nlb"
    dropped = tuple(sorted(k for k in service.annotations if k in other_only))
    return replace(service, annotations=annotations), dropped


def kept_scheme(service: ServiceInfo, *, internal: bool) -> ServiceInfo:
    """The Service as its existing load balancer's scheme reads it, after a change of the
    internal annotation AWS cannot make."""
    annotations = {k: v for k, v in service.annotations.items() if k != INTERNAL}
    if internal:
        annotations[INTERNAL] = "true"
    return replace(service, annotations=annotations)


def refuse_scheme_change(lb_plan: LoadBalancerPlan, scheme: str) -> None:
    """ServiceRefused when the existing load balancer's scheme is not the plan's: AWS cannot
    change it (upstream ignores the change; here it is said)."""
    if not scheme or (scheme == "internal") == lb_plan.internal:
        return
    raise ServiceRefused(
        f"Service {lb_plan.service}: annotation {INTERNAL}: the {lb_plan.kind} {lb_plan.name} "
        f"is {scheme} and AWS cannot change a load balancer's scheme; set the annotation back, "
        "or delete the Service and create it again (a new load balancer, a new address)"
    )


def internal_of(service: ServiceInfo) -> bool:
    """Upstream's reading of the internal annotation: anything but "" and "false"."""
    return service.annotations.get(INTERNAL, "") not in ("", "false")


def _target_group_attributes(read: _Reader, service: ServiceInfo) -> dict[str, str]:
    """Upstream's validateServiceAnnotationTargetGroupAttributes."""
    raw = read.text(TARGET_GROUP_ATTRIBUTES)
    attributes: dict[str, str] = {}
    for item in raw.split(","):
        key, _, value = (part.strip() for part in item.partition("="))
        if not key:
            continue
        where = f"annotation {TARGET_GROUP_ATTRIBUTES}"
        if key in attributes:
            read.problems.append(f"{where}: {key} is set twice")
        elif key not in _TG_ATTRIBUTES:
            read.problems.append(
                f"{where}: {key} is not supported (only {', '.join(sorted(_TG_ATTRIBUTES))})"
            )
        elif value not in ("true", "false"):
            read.problems.append(f"{where}: {key}={value!r} is not true or false")
        elif (
            key == "preserve_client_ip.enabled"
            and value == "false"
            and any(p.protocol == "UDP" for p in service.ports)
        ):
            read.problems.append(
                f"{where}: client IP preservation cannot be turned off for UDP ports (AWS)"
            )
        attributes[key] = value
    return attributes


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
    internal = internal_of(service)
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
    access_log = AccessLog(
        enabled=read.boolean(ACCESS_LOG_ENABLED, False),
        bucket=read.text(ACCESS_LOG_BUCKET).strip(),
        prefix=read.text(ACCESS_LOG_PREFIX).strip(),
    )
    if access_log.enabled and not access_log.bucket:
        problems.append(
            f"annotation {ACCESS_LOG_ENABLED}: access logs need an S3 bucket; set "
            f"{ACCESS_LOG_BUCKET} (and optionally {ACCESS_LOG_PREFIX})"
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
        access_log=access_log,
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
    managed = config.nlb_security_group_mode == "Managed"
    groups = _list(read.text(SECURITY_GROUPS))
    if groups and not managed:
        read.problems.append(
            f"annotation {SECURITY_GROUPS}: an NLB takes security groups only with the "
            "cloud-config's NLBSecurityGroupMode=Managed; set it there, or remove the annotation"
        )
    for key in CLASSIC_ONLY:
        read.refuse(key, _CLASSIC_ONLY_WHY.get(key, _CLASSIC_ONLY_FIX))
    health = _nlb_health(read, service, config)
    attributes = _target_group_attributes(read, service)
    eips = _list(read.text(EIP_ALLOCATIONS))
    addresses = _list(read.text(PRIVATE_IPV4_ADDRESSES))
    if eips and internal_of(service):
        read.problems.append(
            f"annotation {EIP_ALLOCATIONS}: Elastic IPs are for internet-facing NLBs; remove "
            f"it, or {INTERNAL}"
        )
    if addresses and not internal_of(service):
        read.problems.append(
            f"annotation {PRIVATE_IPV4_ADDRESSES}: private addresses are for internal NLBs; "
            f'set {INTERNAL}: "true", or remove it'
        )
    for value in addresses:
        try:
            ipaddress.IPv4Address(value)
        except ValueError:
            read.problems.append(
                f"annotation {PRIVATE_IPV4_ADDRESSES}: {value!r} is not an IPv4 address"
            )
    for value in eips:
        if not value.startswith("eipalloc-"):
            read.problems.append(
                f"annotation {EIP_ALLOCATIONS}: {value!r} is not an allocation ID (eipalloc-...)"
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
    return replace(
        base,
        nlb_ports=tuple(mapped),
        target_group_attributes=attributes,
        security_groups=groups if managed else (),
        eip_allocations=eips,
        private_ipv4_addresses=addresses,
        managed_security_group=managed and not groups,
    )


def _clb(
    read: _Reader,
    service: ServiceInfo,
    config: CloudConfig,
    ports: Sequence[ServicePort],
    secured: Secured,
    base: LoadBalancerPlan,
) -> LoadBalancerPlan:
    for key in NLB_ONLY:
        read.refuse(key, f"applies to NLBs only; remove it, or set {TYPE}: nlb")
    proxy = read.text(PROXY_PROTOCOL)
    if proxy not in ("", "*"):
        read.problems.append(
            f"annotation {PROXY_PROTOCOL}: {proxy!r}: the only value is '*' (every listener)"
        )
    interval = read.text(ACCESS_LOG_EMIT_INTERVAL).strip()
    if interval not in ("", "5", "60"):
        read.problems.append(
            f"annotation {ACCESS_LOG_EMIT_INTERVAL}: {interval!r}: AWS takes 5 or 60 (minutes)"
        )
        interval = ""
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
        access_log=replace(base.access_log, interval=int(interval or 0)),
        proxy_protocol=proxy == "*",
        ssl_policy=read.text(SSL_NEGOTIATION_POLICY).strip(),
        draining=read.boolean(DRAINING_ENABLED, False),
        draining_timeout=read.integer(DRAINING_TIMEOUT, 300, 1, 3600),
        idle_timeout=read.integer(IDLE_TIMEOUT, 60, 1, 4000),
    )
