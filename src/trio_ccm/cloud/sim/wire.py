"""The simulated cloud's JSON, as the provider reads it (msgspec Structs; extra fields ignored)."""

from __future__ import annotations

from typing import Annotated

import msgspec


class InstanceWire(msgspec.Struct, frozen=True, gc=False, rename="camel"):
    # gc=False and tuples: an address sync decodes N of these per period, and none is
    # a container the garbage collector must track (they hold no cycles).
    id: str
    name: str
    instance_type: str = ""
    zone: str = ""
    region: str = ""
    internal_ips: tuple[str, ...] = msgspec.field(default=(), name="internalIPs")
    external_ips: tuple[str, ...] = msgspec.field(default=(), name="externalIPs")
    hostname: str = ""
    state: str = "running"


class InstanceListWire(msgspec.Struct, frozen=True, gc=False):
    instances: tuple[InstanceWire, ...]


class InstanceChangesWire(msgspec.Struct, frozen=True, gc=False):
    revision: Annotated[int, msgspec.Meta(ge=0)]
    instances: tuple[InstanceWire, ...] = ()


class IngressWire(msgspec.Struct, frozen=True):
    ip: str = ""
    hostname: str = ""


class LoadBalancerWire(msgspec.Struct, frozen=True):
    name: str
    status: str = "active"
    ingress: list[IngressWire] = msgspec.field(default_factory=list)
    service: str = ""


class LoadBalancerListWire(msgspec.Struct, frozen=True):
    load_balancers: list[LoadBalancerWire] = msgspec.field(
        default_factory=list, name="loadBalancers"
    )
    next_marker: str = msgspec.field(default="", name="nextMarker")


class RouteWire(msgspec.Struct, frozen=True):
    name: str
    target_node: str = msgspec.field(name="targetNode")
    destination_cidr: str = msgspec.field(name="destinationCIDR")
    blackhole: bool = False


class RouteListWire(msgspec.Struct, frozen=True):
    routes: list[RouteWire]


class ErrorDetailWire(msgspec.Struct, frozen=True):
    code: str = ""
    message: str = ""


class ErrorWire(msgspec.Struct, frozen=True):
    error: ErrorDetailWire


# -- what the provider sends -------------------------------------------------------------
class PortSpec(msgspec.Struct, frozen=True, rename="camel"):
    name: str
    protocol: str
    port: int
    node_port: int


class LoadBalancerSpec(msgspec.Struct, frozen=True, rename="camel"):
    # `nodes`: the names, or the JSON array of them encoded once (`msgspec.Raw`) and shared
    # by the load balancers given one node set (`loadbalancers.NameList`).
    service: str
    ports: list[PortSpec]
    nodes: list[str] | msgspec.Raw
    load_balancer_ip: str = msgspec.field(default="", name="loadBalancerIP")
    source_ranges: list[str] = msgspec.field(default_factory=list)
    health_check_node_port: int = 0
    session_affinity: str = "None"
    description: str = ""


class BackendsSpec(msgspec.Struct, frozen=True):
    nodes: list[str] | msgspec.Raw


class RouteSpec(msgspec.Struct, frozen=True):
    name: str
    target_node: str = msgspec.field(name="targetNode")
    destination_cidr: str = msgspec.field(name="destinationCIDR")
