"""The request bodies the simulated cloud reads, as msgspec Structs (unknown fields refused)."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from trio_ccm_testbed.cloud.errors import bad_request

T = TypeVar("T")


class PortBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    protocol: str
    port: int
    node_port: int = 0
    name: str = ""


class LoadBalancerBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    service: str
    ports: list[PortBody]
    nodes: list[str] = []
    load_balancer_ip: str = msgspec.field(default="", name="loadBalancerIP")
    source_ranges: list[str] = []
    health_check_node_port: int = 0
    session_affinity: str = "None"
    description: str = ""


class BackendsBody(msgspec.Struct, forbid_unknown_fields=True):
    nodes: list[str]


class RouteBody(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    target_node: str = msgspec.field(name="targetNode")
    destination_cidr: str = msgspec.field(name="destinationCIDR")


class InstanceBody(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    instance_type: str = msgspec.field(default="sim.small", name="instanceType")
    zone: str | None = None
    internal_ips: list[str] | None = msgspec.field(default=None, name="internalIPs")
    external_ips: list[str] | None = msgspec.field(default=None, name="externalIPs")
    hostname: str | None = None
    state: str = "running"


class InstanceBatchBody(msgspec.Struct, forbid_unknown_fields=True):
    instances: list[InstanceBody]


class AddressesBody(msgspec.Struct, forbid_unknown_fields=True):
    internal: list[str] | None = None
    external: list[str] | None = None


class LatencyBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    method: str = "*"
    fixed_seconds: float = 0.05
    jitter_seconds: float = 0.0


class ErrorBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    method: str
    status: int = 500
    probability: float | None = None
    count: int | None = None
    retry_after_seconds: float | None = None


class ThrottleBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    target: str
    rate_per_second: float = 20.0
    burst: int = 100


class LateBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    method: str
    delay_seconds: float
    count: int | None = None


class SettingsBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    consistency_delay_seconds: float | None = None
    lb_provisioning_seconds: float | None = None
    terminated_retention_seconds: float | None = None
    lb_hostnames: bool | None = None


def decode(body: bytes, into: type[T], what: str) -> T:
    """Decode a JSON request body; a 400 naming the problem when it does not fit `into`."""
    try:
        return msgspec.json.decode(body or b"{}", type=into)
    except msgspec.DecodeError as exc:
        raise bad_request(f"{what}: the body is not valid JSON ({exc})") from exc
    except msgspec.ValidationError as exc:
        raise bad_request(f"{what}: {exc}") from exc
