"""The simulated cloud's resources and its call log: frozen values, replaced on change."""

from __future__ import annotations

from dataclasses import dataclass

JSON = None | bool | int | float | str | list["JSON"] | dict[str, "JSON"]
"""A JSON value, as the simulated cloud reads and writes it."""

INSTANCE_STATES = ("running", "stopped", "terminated")


@dataclass(frozen=True, slots=True)
class Instance:
    """A virtual machine. `visible_at` is when lookups first see it (eventual consistency);
    `revision` is the cloud's revision when it last changed (or became visible)."""

    id: str
    name: str
    instance_type: str
    zone: str
    region: str
    internal_ips: tuple[str, ...]
    external_ips: tuple[str, ...]
    hostname: str
    state: str
    created_at: float
    visible_at: float
    terminated_at: float | None = None
    revision: int = 0

    def to_json(self) -> dict[str, JSON]:
        return {
            "id": self.id,
            "name": self.name,
            "instanceType": self.instance_type,
            "zone": self.zone,
            "region": self.region,
            "internalIPs": list(self.internal_ips),
            "externalIPs": list(self.external_ips),
            "hostname": self.hostname,
            "state": self.state,
            "revision": self.revision,
        }


@dataclass(frozen=True, slots=True)
class LoadBalancerPort:
    """A listener of a load balancer, forwarding `port` to every backend's `node_port`."""

    name: str
    protocol: str
    port: int
    node_port: int

    def to_json(self) -> dict[str, JSON]:
        return {
            "name": self.name,
            "protocol": self.protocol,
            "port": self.port,
            "nodePort": self.node_port,
        }


@dataclass(frozen=True, slots=True)
class LoadBalancer:
    """A load balancer, named uniquely in the cloud and owned by one cluster's Service."""

    name: str
    cluster: str
    service: str
    ports: tuple[LoadBalancerPort, ...]
    nodes: tuple[str, ...]
    ingress_ip: str
    hostname: str
    created_at: float
    ready_at: float
    source_ranges: tuple[str, ...] = ()
    health_check_node_port: int = 0
    session_affinity: str = "None"
    description: str = ""

    def to_json(self, now: float) -> dict[str, JSON]:
        provisioning = now < self.ready_at
        ingress: list[JSON] = []
        if not provisioning:
            ingress.append({"ip": self.ingress_ip, "hostname": self.hostname})
        body: dict[str, JSON] = {
            "name": self.name,
            "cluster": self.cluster,
            "service": self.service,
            "ports": [port.to_json() for port in self.ports],
            "nodes": list(self.nodes),
            "sourceRanges": list(self.source_ranges),
            "healthCheckNodePort": self.health_check_node_port,
            "sessionAffinity": self.session_affinity,
            "description": self.description,
            "status": "provisioning" if provisioning else "active",
            "ingress": ingress,
        }
        if provisioning:
            body["readyInSeconds"] = self.ready_at - now
        return body


@dataclass(frozen=True, slots=True)
class CloudRoute:
    """A pod-network route of one cluster; `blackhole` when its target instance is gone."""

    name: str
    cluster: str
    target_node: str
    destination_cidr: str
    blackhole: bool = False

    def to_json(self) -> dict[str, JSON]:
        return {
            "name": self.name,
            "cluster": self.cluster,
            "targetNode": self.target_node,
            "destinationCIDR": self.destination_cidr,
            "blackhole": self.blackhole,
        }


@dataclass(frozen=True, slots=True)
class Call:
    """One API call as the cloud saw it: when it arrived, who made it, how it was answered.

    `time` is Trio's clock when the request arrived (before any injected latency), `wall`
    the wall clock then: the kernel's receive time over a socket (Linux), and then
    `read_wall` is the clock when the server began handling it (later than `wall` by
    however long a busy testbed took to get to the request; None otherwise);
    `replica` is the `X-Sim-Replica` header ("" without one).
    """

    time: float
    wall: float
    replica: str
    method: str
    target: str
    status: int
    read_wall: float | None = None

    def to_json(self) -> dict[str, JSON]:
        found: dict[str, JSON] = {
            "time": self.time,
            "wall": self.wall,
            "replica": self.replica,
            "method": self.method,
            "target": self.target,
            "status": self.status,
        }
        if self.read_wall is not None:
            found["readWall"] = self.read_wall
        return found
