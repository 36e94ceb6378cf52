"""Instances: metadata, existence and shutdown of Nodes' EC2 instances, one by one and in bulk.

Semantics, as cloud-provider-aws's InstancesV2:

- **provider ID** `aws:///<zone>/<instance-id>` for a Node that has none; a Node's own is
  kept. Accepted forms: `aws:///<zone>/<i-id>`, `aws:////<i-id>`, `<i-id>`, and
  `aws:///<zone>/fargate-<ip>` (recognised, refused: Fargate Nodes are EKS's own);
- **metadata**: instance type, zone (`Placement.AvailabilityZone`), region (the
  provider's), the label `topology.k8s.aws/zone-id` (from a cached
  DescribeAvailabilityZones; not when the Node has it already), addresses (below),
  and `shutdown` = stopped;
- **addresses**, per `NodeIPFamilies` in its order. ipv4: the ENIs in use, by device index:
  each private IP an InternalIP; then the public IP an ExternalIP; the private DNS name an
  InternalDNS and the Hostname; the public DNS name an ExternalDNS. ipv6: the first IPv6
  address of each ENI in use, an InternalIP;
- **exists** = AWS knows the instance and it is not terminated; **shutdown** = stopped.
  A Node without a provider ID whose name finds no instance is not "gone": that could as
  well be a name that is no private DNS name, so `instance_exists` raises (never deletes).

**Beyond upstream**: `instances_metadata` answers many Nodes at once (`lookup.py`: up to
1,000 IDs per DescribeInstances, a shared cluster listing for large batches); an unknown ID
never fails the batch, it is only missing from the answer.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from trio_ccm.cloud.aws.ec2 import Ec2Instance, describe_by_ids, is_instance_id
from trio_ccm.cloud.aws.errors import AwsError
from trio_ccm.cloud.aws.lookup import Ref
from trio_ccm.cloud.aws.topology import LABEL_PREFIX, Topology
from trio_ccm.cloud.provider import (
    InstanceMetadata,
    InstanceNotFoundError,
    NodeAddress,
    NodeInfo,
)
from trio_ccm.logs import get_logger

if TYPE_CHECKING:
    from trio_ccm.cloud.aws.context import AwsContext

__all__ = [
    "LABEL_ZONE_ID",
    "AwsInstances",
    "ProviderIdError",
    "instance_id_from_provider_id",
    "node_addresses",
    "provider_id",
]

log = get_logger("trio_ccm.cloud.aws.instances")

LABEL_ZONE_ID: Final = "topology.k8s.aws/zone-id"
SCHEME: Final = "aws"
_UPSTREAM_ID: Final = re.compile(r"^i-[^/]*$")  # cloud-provider-aws's awsInstanceRegMatch
_FARGATE_PREFIX: Final = "fargate-"
_FORMS: Final = "aws:///<zone>/<instance-id>, aws:////<instance-id> or <instance-id>"


class ProviderIdError(AwsError):
    """A Node's provider ID that names no EC2 instance."""

    def __init__(self, message: str) -> None:
        super().__init__(message, service="ec2", action="DescribeInstances")


def provider_id(zone: str, instance_id: str) -> str:
    """The provider ID of an instance: `aws:///<zone>/<instance-id>`."""
    return f"{SCHEME}:///{zone}/{instance_id}"


def instance_id_from_provider_id(value: str, *, node: str = "") -> str:
    """The instance ID in a provider ID (every form upstream accepts; Fargate's included).

    ProviderIdError naming the Node and the accepted forms when it names none.
    """
    who = f"Node {node}: " if node else ""
    # Upstream's rule: a bare value is a path under an empty host (aws:////<value>). Ours:
    # another scheme's ID (gce://..., sim://...) is refused, not read as a path.
    bare = not value.startswith(f"{SCHEME}://") and "://" not in value
    parts = urlsplit(f"{SCHEME}:////{value}" if bare else value)
    tokens = [t for t in parts.path.strip("/").split("/") if t] if parts.scheme == SCHEME else []
    found = tokens[-1] if tokens else ""
    known = bool(_UPSTREAM_ID.match(found)) or found.startswith(_FARGATE_PREFIX)
    if parts.scheme != SCHEME or not known:
        raise ProviderIdError(
            f"{who}provider ID {value!r} names no EC2 instance; the forms are {_FORMS}. "
            "Was the Node registered by another cloud provider?"
        )
    return found


def _resource_name_id(name: str) -> str:
    """The instance ID in a resource-based Node name (`i-…` or `i-….<region>.compute.internal`)."""
    return name.split(".", 1)[0] if name.startswith("i-") else ""


def node_addresses(instance: Ec2Instance, families: Sequence[str]) -> tuple[NodeAddress, ...]:
    """The instance's Node addresses (see the module docstring)."""
    in_use = sorted(
        (eni for eni in instance.network_interfaces if eni.status == "in-use"),
        key=lambda eni: (eni.device_index is None, eni.device_index or 0),
    )
    addresses: list[NodeAddress] = []
    for family in families:
        if family == "ipv4":
            for eni in in_use:
                addresses.extend(
                    NodeAddress("InternalIP", ip) for ip in _valid(eni.private_ips, instance)
                )
            addresses.extend(
                NodeAddress("ExternalIP", ip) for ip in _valid((instance.public_ip,), instance)
            )
            if instance.private_dns_name:
                addresses.append(NodeAddress("InternalDNS", instance.private_dns_name))
                addresses.append(NodeAddress("Hostname", instance.private_dns_name))
            if instance.public_dns_name:
                addresses.append(NodeAddress("ExternalDNS", instance.public_dns_name))
        elif family == "ipv6":
            for eni in in_use:
                addresses.extend(
                    NodeAddress("InternalIP", ip) for ip in _valid(eni.ipv6_addresses[:1], instance)
                )
    return tuple(addresses)


def _valid(ips: Sequence[str], instance: Ec2Instance) -> list[str]:
    valid = []
    for ip in ips:
        if not ip:
            continue
        try:
            valid.append(str(ipaddress.ip_address(ip)))
        except ValueError:
            log.warning("aws.address-invalid", instance=instance.id, address=ip)
    return valid


class AwsInstances:
    """`Instances` and `BulkInstances` over EC2 (see the module docstring)."""

    def __init__(self, context: AwsContext) -> None:
        self._context = context
        self._topology = Topology(context)

    # -- identifying ------------------------------------------------------------------
    def _ref(self, node: NodeInfo) -> Ref:
        """How to find the Node's instance; ProviderIdError for a provider ID that names
        none, and for Fargate Nodes."""
        directory = self._context.directory
        if node.provider_id:
            instance_id = instance_id_from_provider_id(node.provider_id, node=node.name)
            if instance_id.startswith(_FARGATE_PREFIX):
                raise ProviderIdError(
                    f"Node {node.name}: provider ID {node.provider_id!r} is a Fargate Node; "
                    "trio-ccm's aws provider does not manage Fargate Nodes (EKS does). Exclude "
                    "them, or run the EKS-managed controller for them"
                )
            directory.learn(node.name, instance_id)
            return Ref(node.name, instance_id)
        # Not the directory: a name seen before may now be another instance's (AWS reuses
        # private IPs, hence private DNS names), and a Node must never be taken for the
        # instance of the Node that had its name before.
        return Ref(node.name, _resource_name_id(node.name))

    # -- BulkInstances -----------------------------------------------------------------
    async def instances_metadata(self, nodes: Sequence[NodeInfo]) -> Mapping[str, InstanceMetadata]:
        """Metadata of the Nodes whose instance exists and is not terminated, by Node name.

        Nodes with a provider ID that names no EC2 instance are left out (and logged).
        """
        await self._context.ready()
        refs: list[Ref] = []
        shown: dict[str, NodeInfo] = {}
        for node in nodes:
            try:
                refs.append(self._ref(node))
            except ProviderIdError as exc:
                log.warning("aws.provider-id-refused", node=node.name, error=str(exc))
                continue
            shown[node.name] = node
        found = await self._context.lookup.resolve(refs)
        live = {name: i for name, i in found.items() if i.state != "terminated"}
        zone_ids = await self._context.zones.zone_ids(i.zone for i in live.values())
        layers = await self._layers([(shown[name], i) for name, i in live.items()])
        return {
            name: self._metadata(shown[name], instance, zone_ids, layers)
            for name, instance in live.items()
        }

    async def _layers(
        self, pairs: Sequence[tuple[NodeInfo, Ec2Instance]]
    ) -> Mapping[str, tuple[str, ...]]:
        """The network nodes of the instances whose Node has no topology labels yet."""
        wanted = [i for node, i in pairs if f"{LABEL_PREFIX}1" not in node.labels]
        return await self._topology.layers(wanted) if wanted else {}

    def _metadata(
        self,
        node: NodeInfo,
        instance: Ec2Instance,
        zone_ids: Mapping[str, str],
        layers: Mapping[str, tuple[str, ...]],
    ) -> InstanceMetadata:
        labels: dict[str, str] = self._topology.labels(layers.get(instance.id, ()))
        if LABEL_ZONE_ID not in node.labels:
            zone_id = zone_ids.get(instance.zone)
            if zone_id:
                labels[LABEL_ZONE_ID] = zone_id
            else:
                log.warning(
                    "aws.zone-id-unknown",
                    node=node.name,
                    zone=instance.zone,
                    reason="DescribeAvailabilityZones does not list the zone",
                )
        return InstanceMetadata(
            provider_id=node.provider_id or provider_id(instance.zone, instance.id),
            instance_type=instance.instance_type,
            node_addresses=node_addresses(instance, self._context.config.node_ip_families),
            zone=instance.zone,
            region=self._context.region,
            additional_labels=labels,
            shutdown=instance.state == "stopped",
        )

    # -- Instances ---------------------------------------------------------------------
    async def instance_metadata(self, node: NodeInfo) -> InstanceMetadata:
        """The Node's metadata; InstanceNotFoundError when it has no live instance."""
        await self._context.ready()
        ref = self._ref(node)
        found = (await self._context.lookup.resolve([ref])).get(node.name)
        if found is None or found.state == "terminated":
            raise InstanceNotFoundError(self._not_found(node, ref, found))
        zone_ids = await self._context.zones.zone_ids([found.zone])
        layers = await self._layers([(node, found)])
        return self._metadata(node, found, zone_ids, layers)

    async def _find(self, node: NodeInfo) -> tuple[Ref, Ec2Instance | None]:
        """The Node's instance, read now (no snapshot), terminated ones included."""
        await self._context.ready()
        ref = self._ref(node)
        if ref.instance_id and not is_instance_id(ref.instance_id):
            raise ProviderIdError(
                f"Node {node.name}: {ref.instance_id!r} does not have the form of an EC2 "
                "instance ID (i- and 8 or 17 hex digits), so AWS cannot be asked about it; "
                "the Node is kept"
            )
        if ref.instance_id:
            found = await describe_by_ids(
                self._context.client, [ref.instance_id], target=f"Node {node.name}"
            )
            instance = found.get(ref.instance_id)
            if instance is not None:
                self._context.directory.learn(node.name, instance.id)
            return ref, instance
        by_name = await self._context.lookup.by_names([node.name])
        instance = by_name.get(node.name)
        if instance is not None:
            self._context.directory.learn(node.name, instance.id)
        return ref, instance

    async def instance_exists(self, node: NodeInfo) -> bool:
        """False when AWS does not know the instance or it is terminated (see the module
        docstring for Nodes without a provider ID)."""
        ref, instance = await self._find(node)
        if instance is None and not ref.instance_id:
            raise InstanceNotFoundError(self._not_found(node, ref, None))
        return instance is not None and instance.state != "terminated"

    async def instance_shutdown(self, node: NodeInfo) -> bool:
        """True when the instance exists and is stopped."""
        _ref, instance = await self._find(node)
        return instance is not None and instance.state == "stopped"

    def _not_found(self, node: NodeInfo, ref: Ref, found: Ec2Instance | None) -> str:
        if found is not None:
            return f"Node {node.name}: instance {found.id} is terminated"
        if ref.instance_id:
            return f"Node {node.name}: EC2 has no instance {ref.instance_id}"
        return (
            f"Node {node.name}: no alive instance of the cluster has the private DNS name "
            f"{node.name} (nor does the Node name an instance ID); name Nodes by private DNS "
            "name or instance ID, give them a provider ID (kubelet --provider-id), and check "
            f"the instance carries the cluster tag {self._context.lookup.tagging.key}"
        )
