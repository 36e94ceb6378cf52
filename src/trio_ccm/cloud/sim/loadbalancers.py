"""One simulated load balancer per Service, under `/v1/clusters/{cluster}/loadbalancers`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from trio_ccm.cloud.provider import (
    LoadBalancerIngress,
    LoadBalancerStatus,
    NodeInfo,
    OwnedLoadBalancer,
    ServiceInfo,
    ServiceRefused,
    default_load_balancer_name,
)
from trio_ccm.cloud.sim.client import SimClient, segment
from trio_ccm.cloud.sim.errors import SimCloudError
from trio_ccm.cloud.sim.wire import (
    BackendsSpec,
    LoadBalancerListWire,
    LoadBalancerSpec,
    LoadBalancerWire,
    PortSpec,
)

# Upstream's v1.AnnotationLoadBalancerSourceRangesKey (providers sit beside the kube layer,
# so the name is repeated here rather than imported from trio_ccm.kube.wellknown).
ANNOTATION_LB_SOURCE_RANGES = "service.beta.kubernetes.io/load-balancer-source-ranges"
ANNOTATION_DESCRIPTION = "sim.trio-ccm.dev/load-balancer-description"
"""A Service annotation the sim provider copies into its load balancer's description."""


def source_ranges(service: ServiceInfo) -> list[str]:
    """Upstream's GetLoadBalancerSourceRanges: the field, else the annotation, else all."""
    if service.load_balancer_source_ranges:
        return [r.strip() for r in service.load_balancer_source_ranges]
    annotated = service.annotations.get(ANNOTATION_LB_SOURCE_RANGES, "").strip()
    if annotated:
        return [r.strip() for r in annotated.split(",")]
    return ["0.0.0.0/0"]


def _status(lb: LoadBalancerWire) -> LoadBalancerStatus:
    return LoadBalancerStatus(
        tuple(LoadBalancerIngress(ip=i.ip, hostname=i.hostname) for i in lb.ingress)
    )


LIST_PAGE: Final = 10
"""Load balancers asked for per `ListLoadBalancers` page (the sweep's listing)."""


class NameList:
    """The JSON array of a node set's names, encoded once per node set.

    The load balancer controller hands every load balancer of one pass the same sequence
    of views (`actors/stable_nodes.py`: rebuilt at most once a second); at 100,000 Nodes
    a list of the names and its encoding were a few milliseconds of CPU per call, 250
    times a pass. The last tuple is kept (by reference: its identity is the key, and
    holding it keeps that identity from being reused) with its names encoded; another
    replaces it. Only a tuple (of frozen views) is kept: a list could change under the
    same identity, so it is encoded each time.

    `backends_body` is the whole body of `SetLoadBalancerBackends` for that node set, also
    encoded once: the calls of a pass share one `bytes` rather than each holding its own
    copy while it waits for its answer (at 100,000 Nodes, 1.5 MB a call; a slow cloud keeps
    up to the controller's concurrency of them in flight)."""

    def __init__(self) -> None:
        self._nodes: Sequence[NodeInfo] | None = None
        self._encoded = msgspec.Raw(b"[]")
        self._body: bytes | None = None
        self.encodings = 0  # how many sequences were encoded (a test reads it)
        self.bodies = 0  # how many backends bodies were encoded (a test reads it)

    def __call__(self, nodes: Sequence[NodeInfo]) -> msgspec.Raw:
        if nodes is not self._nodes:
            encoded = msgspec.Raw(msgspec.json.encode([node.name for node in nodes]))
            self.encodings += 1
            if not isinstance(nodes, tuple):
                return encoded
            self._nodes, self._encoded, self._body = nodes, encoded, None
        return self._encoded

    def backends_body(self, nodes: Sequence[NodeInfo]) -> bytes:
        """The JSON body `{"nodes": [...]}` of `nodes`' names."""
        names = self(nodes)
        if nodes is self._nodes and self._body is not None:
            return self._body
        body = msgspec.json.encode(BackendsSpec(names))
        self.bodies += 1
        if nodes is self._nodes:
            self._body = body
        return body


class SimLoadBalancers:
    """LoadBalancers over the simulated cloud (a load balancer still provisioning: RetryAfter)."""

    def __init__(self, client: SimClient) -> None:
        self._client = client
        self.names = NameList()

    def load_balancer_name(self, cluster: str, service: ServiceInfo) -> str:
        return default_load_balancer_name(service)

    def _where(self, cluster: str, service: ServiceInfo) -> tuple[str, str]:
        name = self.load_balancer_name(cluster, service)
        path = f"/v1/clusters/{segment(cluster)}/loadbalancers/{segment(name)}"
        return f"{cluster}/{name}", path

    async def get_load_balancer(
        self, cluster: str, service: ServiceInfo
    ) -> LoadBalancerStatus | None:
        """The status (no ingress while provisioning), or None when there is none."""
        target, path = self._where(cluster, service)
        response = await self._client.request(
            "GetLoadBalancer", target, "GET", path, missing_ok=True
        )
        if response is None:
            return None
        return _status(self._client.decode("GetLoadBalancer", target, response, LoadBalancerWire))

    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> LoadBalancerStatus:
        """Create or update the load balancer; RetryAfter while it is provisioning;
        ServiceRefused for what the simulated cloud cannot serve (IPv6-only Services, and
        what it answers 400 to: SCTP, TCP and UDP on one port, bad source ranges, ...)."""
        target, path = self._where(cluster, service)
        if service.ip_families and "IPv4" not in service.ip_families:
            raise ServiceRefused(
                f"Service {service.key}: spec.ipFamilies {list(service.ip_families)}: the sim "
                "cloud's load balancers are IPv4 only; add IPv4 to spec.ipFamilies (or set "
                "spec.ipFamilyPolicy: PreferDualStack)"
            )
        spec = LoadBalancerSpec(
            service=service.key,
            ports=[PortSpec(p.name, p.protocol, p.port, p.node_port) for p in service.ports],
            nodes=self.names(nodes),
            load_balancer_ip=service.load_balancer_ip,
            source_ranges=source_ranges(service),
            health_check_node_port=(
                service.health_check_node_port if service.external_traffic_policy == "Local" else 0
            ),
            session_affinity=service.session_affinity,
            description=service.annotations.get(ANNOTATION_DESCRIPTION, ""),
        )
        try:
            response = await self._client.request("PutLoadBalancer", target, "PUT", path, body=spec)
        except SimCloudError as exc:
            if exc.status == 400:  # the Service as written, not a passing fault
                raise ServiceRefused(f"Service {service.key}: {exc}") from exc
            raise
        assert response is not None
        return _status(self._client.decode("PutLoadBalancer", target, response, LoadBalancerWire))

    async def update_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> None:
        """Set the backends to `nodes`."""
        target, path = self._where(cluster, service)
        await self._client.request(
            "SetLoadBalancerBackends",
            target,
            "PUT",
            f"{path}/backends",
            body=self.names.backends_body(nodes),
        )

    async def ensure_load_balancer_deleted(self, cluster: str, service: ServiceInfo) -> None:
        """Delete the load balancer; done already when the cloud has none."""
        target, path = self._where(cluster, service)
        await self._client.request("DeleteLoadBalancer", target, "DELETE", path, missing_ok=True)

    # -- LoadBalancerInventory: the sweep for leaked load balancers --------------------------
    async def list_load_balancers(self, cluster: str) -> list[OwnedLoadBalancer]:
        """The cluster's load balancers, each with the Service (namespace/name) it serves,
        read `LIST_PAGE` at a time: each carries its node names (1.5 MB apiece at 100,000
        Nodes), and the sweep's one listing of 250 was a 375 MB answer."""
        path = f"/v1/clusters/{segment(cluster)}/loadbalancers"
        owned = []
        marker = ""
        while True:
            params = {"limit": str(LIST_PAGE), **({"marker": marker} if marker else {})}
            response = await self._client.request(
                "ListLoadBalancers", cluster, "GET", path, params=params
            )
            assert response is not None
            listing = self._client.decode(
                "ListLoadBalancers", cluster, response, LoadBalancerListWire
            )
            for lb in listing.load_balancers:
                namespace, _, name = lb.service.partition("/")
                owned.append(OwnedLoadBalancer(lb.name, namespace, name))
            if not listing.next_marker:
                return owned
            if listing.next_marker <= marker:
                raise SimCloudError(
                    f"sim cloud ListLoadBalancers {cluster}: the page after {marker!r} "
                    f"names {listing.next_marker!r} as the next; a listing that does not "
                    "move on would never end (check the simulated cloud)",
                    method="ListLoadBalancers",
                    target=cluster,
                )
            marker = listing.next_marker

    async def delete_leaked_load_balancer(self, cluster: str, lb: OwnedLoadBalancer) -> None:
        """Delete a listed load balancer by its name; done already when it is gone."""
        path = f"/v1/clusters/{segment(cluster)}/loadbalancers/{segment(lb.name)}"
        await self._client.request(
            "DeleteLoadBalancer", f"{cluster}/{lb.name}", "DELETE", path, missing_ok=True
        )
