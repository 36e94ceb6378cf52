"""Instances: metadata, existence and shutdown of Nodes' Nova servers, as OCCM's InstancesV2,
one by one and in bulk.

Semantics (OCCM pkg/openstack/instances.go, instances_addresses.go):

- **provider ID** `openstack:///<server-id>`, or `openstack://<region>/<server-id>` when
  `OS_CCM_REGIONAL=true`. Parsing: a value without `://` gets `openstack://` put in front
  (kubernetes#85731), then `^openstack://([^/]*)/([^/]+)$`; so `openstack:///id`,
  `openstack://Region/id`, `/id`, `Region/id` are accepted, `openstack://id`, a bare `id`
  and other schemes are refused (`InvalidProviderIDError`). A region that is not ours is
  an error, never "not found" (the Node is never deleted for it).
- **lookup**: by provider ID (`GET /servers/{id}`), else by exact server name (Nova's name
  filter is a regex: `^<escaped name>$`); two servers with the Node's name is an error.
- **exists** = Nova does not answer 404 (SHUTOFF, ERROR, SHELVED... all exist). A Node
  without a provider ID whose name finds no server is an error, not "gone" (OCCM's
  snapshot does the same), so it is never deleted for a name that is not its server's.
- **shutdown** = status `SHUTOFF`.
- **metadata**: instance type = the flavor's name (its ID when the name is no valid label
  value, or when the flavor was deleted: OCCM fails the Node then); zone = the sanitised
  `OS-EXT-AZ:availability_zone`; region = the configured one; the label
  `topology.openstack.org/host-id` from the server's `hostId`; addresses (`node_addresses`).

**Beyond OCCM**: `instances_metadata` answers a whole batch with one listing of servers
(`GET /servers/detail`, in pages of 1,000), one of flavors (cached), and one Neutron port
query per 100 servers (`device_id` repeated); a handful of Nodes is answered by ID. OCCM
makes three calls per Node, at initialisation and every 5 minutes.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import trio

from trio_ccm.cloud.openstack.client import OpenStackClient
from trio_ccm.cloud.openstack.config import CloudConfig
from trio_ccm.cloud.openstack.errors import NotFoundError, OpenStackError
from trio_ccm.cloud.provider import (
    InstanceMetadata,
    InstanceNotFoundError,
    InvalidProviderIDError,
    NodeAddress,
    NodeInfo,
)
from trio_ccm.errors import CcmError
from trio_ccm.logs import get_logger

__all__ = [
    "LABEL_HOST_ID",
    "SCHEME",
    "ForeignRegionError",
    "Networking",
    "OpenStackInstances",
    "node_addresses",
    "parse_provider_id",
    "provider_id",
    "sanitize_label",
]

log = get_logger("trio_ccm.cloud.openstack.instances")

SCHEME: Final = "openstack"
LABEL_HOST_ID: Final = "topology.openstack.org/host-id"
SHUTOFF: Final = "SHUTOFF"
BY_ID_MAX: Final = 5
"""Batches of at most this many Nodes with provider IDs are answered by ID, not a listing."""
PORTS_PER_QUERY: Final = 100
"""`device_id`s in one Neutron query (about 4.7 kB of query string)."""
SERVERS_PAGE: Final = 1000
_PROVIDER_ID: Final = re.compile(r"^openstack://([^/]*)/([^/]+)$")
_LABEL_BAD: Final = re.compile(r"[^-A-Za-z0-9_.]+")
_LABEL_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class ForeignRegionError(CcmError):
    """A Node's provider ID names another region than the configured one."""


@dataclass(frozen=True, slots=True)
class Networking:
    """OCCM's [Networking] options."""

    ipv6_support_disabled: bool = False
    public_network_names: tuple[str, ...] = ()
    internal_network_names: tuple[str, ...] = ()
    address_sort_order: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: CloudConfig) -> Networking:
        return cls(
            config.ipv6_support_disabled,
            config.public_network_names,
            config.internal_network_names,
            config.address_sort_order,
        )


def provider_id(server_id: str, *, region: str = "", regional: bool = False) -> str:
    """The provider ID of a server (OCCM's makeInstanceID)."""
    return f"{SCHEME}://{region if regional else ''}/{server_id}"


def parse_provider_id(value: str, *, node: str = "") -> tuple[str, str]:
    """(server ID, region) of a provider ID in every form OCCM accepts; InvalidProviderIDError
    naming the Node and the forms otherwise."""
    candidate = value
    if candidate and "://" not in candidate:
        candidate = f"{SCHEME}://{candidate}"
    found = _PROVIDER_ID.match(candidate)
    if found is None:
        raise InvalidProviderIDError(
            f"Node {node or '?'}: provider ID {value!r} is not an OpenStack one; the forms are "
            "openstack:///<server-id> and openstack://<region>/<server-id>: fix the kubelet's "
            "--provider-id"
        )
    return found.group(2), found.group(1)


def sanitize_label(value: str) -> str:
    """OCCM's util.SanitizeLabel: runs of characters a label value cannot hold become "-",
    leading/trailing "-_." are trimmed, at most 63 characters."""
    cleaned = _LABEL_BAD.sub("-", value).strip("-_.")
    return cleaned[:63].strip("-_.")


def _is_ipv6(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).version == 6
    except ValueError:
        return False


def node_addresses(
    server: Mapping[str, Any], ports: Sequence[Mapping[str, Any]], networking: Networking
) -> tuple[NodeAddress, ...]:
    """The Node's addresses in OCCM's order (nodeAddresses): the ACTIVE ports' fixed IPs
    (InternalIP), the access IPs (ExternalIP), the metadata hostname (Hostname), then Nova's
    addresses by network name in alphabetical order: floating ExternalIP; on a
    public-network-name network ExternalIP (the same address from the ports dropped); on an
    internal-network-name network (or any, when none is set) InternalIP; otherwise the
    address is dropped everywhere. Then address-sort-order, when set.

    `server["addresses"]` may carry trunk sub-ports' addresses already merged in."""
    no_v6 = networking.ipv6_support_disabled
    addrs: list[NodeAddress] = []

    def add(kind: str, address: str) -> None:
        item = NodeAddress(kind, address)
        if item not in addrs:
            addrs.append(item)

    def remove(address: str) -> None:
        addrs[:] = [a for a in addrs if a.address != address]

    for port in ports:
        if port.get("status") != "ACTIVE":
            continue
        for fixed in port.get("fixed_ips") or ():
            ip = str(fixed.get("ip_address") or "") if isinstance(fixed, Mapping) else ""
            if ip and not (no_v6 and _is_ipv6(ip)):
                add("InternalIP", ip)
    v4 = server.get("accessIPv4")
    if isinstance(v4, str) and v4:
        add("ExternalIP", v4)
    v6 = server.get("accessIPv6")
    if isinstance(v6, str) and v6 and not no_v6:
        add("ExternalIP", v6)
    metadata = server.get("metadata")
    hostname = metadata.get("hostname") if isinstance(metadata, Mapping) else None
    if isinstance(hostname, str) and hostname:
        add("Hostname", hostname)
    addresses = server.get("addresses")
    if isinstance(addresses, Mapping):
        for network in sorted(addresses):
            entries = addresses[network]
            if not isinstance(entries, list):
                continue
            for entry in entries:
                if not isinstance(entry, Mapping):
                    continue
                ip = str(entry.get("addr") or "")
                if not ip:
                    continue
                if entry.get("OS-EXT-IPS:type") == "floating":
                    kind = "ExternalIP"
                elif network in networking.public_network_names:
                    kind = "ExternalIP"
                    remove(ip)
                elif (
                    not networking.internal_network_names
                    or network in networking.internal_network_names
                ):
                    kind = "InternalIP"
                else:
                    remove(ip)
                    continue
                if not (no_v6 and _is_ipv6(ip)):
                    add(kind, ip)
    if networking.address_sort_order:
        addrs = _sorted(addrs, networking.address_sort_order)
    return tuple(addrs)


def _sorted(addrs: list[NodeAddress], order: Sequence[str]) -> list[NodeAddress]:
    """OCCM's sortNodeAddresses: a stable sort, addresses in an earlier CIDR first, those in
    one CIDR by their bytes; addresses in no CIDR keep their order, after the others."""
    cidrs = [ipaddress.ip_network(c, strict=False) for c in order]

    def priority(address: str) -> int:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return 0
        for index, cidr in enumerate(cidrs):
            if ip.version == cidr.version and ip in cidr:
                return len(cidrs) - index
        return 0

    def key(item: tuple[int, NodeAddress]) -> tuple[int, int, bytes, int]:
        position, address = item
        rank = priority(address.address)
        if rank == 0:
            return (0, 0, b"", position)
        packed = ipaddress.ip_address(address.address)
        # Go compares the 16-byte forms: an IPv4 address is ::ffff:a.b.c.d there.
        raw = packed.packed if packed.version == 6 else b"\x00" * 10 + b"\xff\xff" + packed.packed
        return (-rank, 0, raw, position)

    ranked = sorted(enumerate(addrs), key=key)
    return [address for _, address in ranked]


def _server_name_filter(name: str) -> str:
    return f"^{re.escape(name)}$"


class OpenStackInstances:
    """`Instances` and `BulkInstances` over Nova and Neutron (see the module docstring)."""

    def __init__(
        self,
        client: OpenStackClient,
        config: CloudConfig,
        *,
        regional: bool = False,
    ) -> None:
        self._client = client
        self._config = config
        self._networking = Networking.from_config(config)
        self._regional = regional
        self._flavors: dict[str, str] = {}
        self._flavor_lock = trio.Lock()
        self.addresses: dict[str, tuple[NodeAddress, ...]] = {}
        """The last addresses answered per Node name (routes map next hops with it)."""

    @property
    def region(self) -> str:
        return self._config.region

    # -- identifying ----------------------------------------------------------------------
    def _server_id(self, node: NodeInfo) -> str:
        """The Node's server ID from its provider ID ("" when it has none)."""
        if not node.provider_id:
            return ""
        server_id, region = parse_provider_id(node.provider_id, node=node.name)
        if region and region != self.region:
            raise ForeignRegionError(
                f"Node {node.name}: provider ID {node.provider_id!r} names region {region!r}, "
                f"not this CCM's ({self.region or 'none set'}): set [Global] region, or run a "
                "CCM for that region; the Node is left alone"
            )
        return server_id

    async def _by_name(self, name: str) -> dict[str, Any] | None:
        found = await self._client.list(
            "compute", "/servers/detail", "servers", params={"name": _server_name_filter(name)}
        )
        exact = [s for s in found if s.get("name") == name]
        if len(exact) > 1:
            ids = ", ".join(str(s.get("id", "?")) for s in exact)
            raise OpenStackError(
                f"{len(exact)} servers are named {name!r} ({ids}); "
                "rename all but one, or give the Node a provider ID (kubelet --provider-id)",
                service="compute",
                method="GET",
                path="/servers/detail",
            )
        return exact[0] if exact else None

    async def _by_id(self, server_id: str) -> dict[str, Any] | None:
        try:
            answer = await self._client.request("compute", "GET", f"/servers/{server_id}")
        except NotFoundError:
            return None
        server = answer.get("server") if isinstance(answer, Mapping) else None
        if not isinstance(server, dict):
            raise OpenStackError(
                "the answer has no 'server' object",
                service="compute",
                method="GET",
                path=f"/servers/{server_id}",
            )
        return server

    async def _find(self, node: NodeInfo) -> dict[str, Any] | None:
        server_id = self._server_id(node)
        if server_id:
            return await self._by_id(server_id)
        return await self._by_name(node.name)

    # -- what a batch needs -------------------------------------------------------------
    async def _flavor_names(self, ids: Iterable[str]) -> dict[str, str]:
        wanted = set(ids)
        if wanted - set(self._flavors):
            async with self._flavor_lock:
                if wanted - set(self._flavors):
                    flavors = await self._client.list(
                        "compute", "/flavors/detail", "flavors", params={"is_public": "None"}
                    )
                    for flavor in flavors:
                        fid, name = flavor.get("id"), flavor.get("name")
                        if isinstance(fid, str):
                            self._flavors[fid] = name if isinstance(name, str) else ""
        return {fid: self._flavors.get(fid, "") for fid in wanted}

    async def _ports(self, server_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        by_device: dict[str, list[dict[str, Any]]] = {sid: [] for sid in server_ids}
        ids = list(server_ids)
        for start in range(0, len(ids), PORTS_PER_QUERY):
            chunk = ids[start : start + PORTS_PER_QUERY]
            ports = await self._client.list(
                "network", "/v2.0/ports", "ports", params={"device_id": chunk}
            )
            for port in ports:
                device = port.get("device_id")
                if isinstance(device, str) and device in by_device:
                    by_device[device].append(port)
        return by_device

    async def _trunk_addresses(
        self, ports: Iterable[dict[str, Any]]
    ) -> dict[str, list[tuple[str, str]]]:
        """Trunk sub-ports' fixed IPs by parent port ID, with their network's name (OCCM
        reads each sub-port and its network one by one; two queries here)."""
        parent_of: dict[str, str] = {}
        for port in ports:
            trunk = port.get("trunk_details")
            if isinstance(trunk, Mapping):
                for sub in trunk.get("sub_ports") or ():
                    if isinstance(sub, Mapping) and isinstance(sub.get("port_id"), str):
                        parent_of[sub["port_id"]] = str(port.get("id"))
        if not parent_of:
            return {}
        subs = await self._client.list(
            "network", "/v2.0/ports", "ports", params={"id": sorted(parent_of)}
        )
        net_ids = sorted({str(p.get("network_id")) for p in subs if p.get("network_id")})
        nets = await self._client.list(
            "network", "/v2.0/networks", "networks", params={"id": net_ids}
        )
        names = {str(n.get("id")): str(n.get("name") or "") for n in nets}
        found: dict[str, list[tuple[str, str]]] = {}
        for sub in subs:
            network = names.get(str(sub.get("network_id")), "")
            for fixed in sub.get("fixed_ips") or ():
                if isinstance(fixed, Mapping) and fixed.get("ip_address"):
                    found.setdefault(parent_of.get(str(sub.get("id")), ""), []).append(
                        (network, str(fixed["ip_address"]))
                    )
        return found

    async def _describe(
        self, pairs: Sequence[tuple[NodeInfo, dict[str, Any]]]
    ) -> dict[str, InstanceMetadata]:
        """Metadata of (Node, server) pairs: flavors and ports read once for all."""
        if not pairs:
            return {}
        flavor_ids = {_flavor_id(server) for _, server in pairs} - {""}
        flavors = await self._flavor_names(flavor_ids)
        ports = await self._ports([str(server["id"]) for _, server in pairs])
        trunks = await self._trunk_addresses(p for group in ports.values() for p in group)
        answer: dict[str, InstanceMetadata] = {}
        for node, server in pairs:
            server_ports = ports.get(str(server["id"]), [])
            view = server
            extra = [a for p in server_ports for a in trunks.get(str(p.get("id")), [])]
            if extra:
                merged = {k: list(v) for k, v in (server.get("addresses") or {}).items()}
                for network, ip in extra:
                    if not (self._networking.ipv6_support_disabled and _is_ipv6(ip)):
                        merged.setdefault(network, []).append(
                            {"addr": ip, "OS-EXT-IPS:type": "fixed"}
                        )
                view = {**server, "addresses": merged}
            addresses = node_addresses(view, server_ports, self._networking)
            self.addresses[node.name] = addresses
            answer[node.name] = self._metadata(node, server, flavors, addresses)
        return answer

    def _metadata(
        self,
        node: NodeInfo,
        server: Mapping[str, Any],
        flavors: Mapping[str, str],
        addresses: tuple[NodeAddress, ...],
    ) -> InstanceMetadata:
        flavor_id = _flavor_id(server)
        name = flavors.get(flavor_id, "")
        if not name:
            log.warning(
                "openstack.flavor-unknown",
                node=node.name,
                flavor=flavor_id,
                reason="the flavor is not listed (deleted?): its ID is the instance type",
            )
        instance_type = name if name and _LABEL_VALUE.match(name) and len(name) <= 63 else flavor_id
        labels: dict[str, str] = {}
        host = sanitize_label(str(server.get("hostId") or ""))
        if host:
            labels[LABEL_HOST_ID] = host
        return InstanceMetadata(
            provider_id=node.provider_id
            or provider_id(str(server["id"]), region=self.region, regional=self._regional),
            instance_type=instance_type,
            node_addresses=addresses,
            zone=sanitize_label(str(server.get("OS-EXT-AZ:availability_zone") or "")),
            region=self.region,
            additional_labels=labels,
            shutdown=server.get("status") == SHUTOFF,
        )

    # -- BulkInstances --------------------------------------------------------------------
    async def instances_metadata(self, nodes: Sequence[NodeInfo]) -> Mapping[str, InstanceMetadata]:
        """Metadata of the Nodes whose server exists, by Node name. Nodes whose provider ID
        is not OpenStack's or names another region are left out (and logged)."""
        wanted: list[tuple[NodeInfo, str]] = []
        for node in nodes:
            try:
                wanted.append((node, self._server_id(node)))
            except (InvalidProviderIDError, ForeignRegionError) as exc:
                log.warning("openstack.provider-id-refused", node=node.name, error=str(exc))
        pairs: list[tuple[NodeInfo, dict[str, Any]]] = []
        if len(wanted) <= BY_ID_MAX and all(sid for _, sid in wanted):
            for node, sid in wanted:
                server = await self._by_id(sid)
                if server is not None:
                    pairs.append((node, server))
        else:
            servers = await self._client.list(
                "compute", "/servers/detail", "servers", limit=SERVERS_PAGE
            )
            by_id = {str(s.get("id")): s for s in servers}
            by_name: dict[str, list[dict[str, Any]]] = {}
            for server in servers:
                by_name.setdefault(str(server.get("name")), []).append(server)
            for node, sid in wanted:
                if sid:
                    found = by_id.get(sid)
                    if found is not None:
                        pairs.append((node, found))
                    continue
                named = by_name.get(node.name, [])
                if len(named) == 1:
                    pairs.append((node, named[0]))
                elif len(named) > 1:
                    log.warning(
                        "openstack.server-name-ambiguous",
                        node=node.name,
                        servers=[s.get("id") for s in named],
                        fix="rename all but one, or give the Node a provider ID",
                    )
        answered = {node.name for node, _ in pairs}
        for node, _ in wanted:
            if node.name not in answered:
                self.addresses.pop(node.name, None)  # no server: its addresses are no hop
        return await self._describe(pairs)

    # -- Instances ------------------------------------------------------------------------
    async def instance_metadata(self, node: NodeInfo) -> InstanceMetadata:
        """The Node's metadata; InstanceNotFoundError when it has no server."""
        server = await self._find(node)
        if server is None:
            raise InstanceNotFoundError(self._not_found(node))
        return (await self._describe([(node, server)]))[node.name]

    async def instance_exists(self, node: NodeInfo) -> bool:
        """False when Nova answers 404 for the Node's server (see the module docstring for
        Nodes without a provider ID)."""
        server = await self._find(node)
        if server is None and not node.provider_id:
            raise InstanceNotFoundError(self._not_found(node))
        return server is not None

    async def instance_shutdown(self, node: NodeInfo) -> bool:
        """True when the server's status is SHUTOFF."""
        server = await self._find(node)
        if server is None:
            raise InstanceNotFoundError(self._not_found(node))
        return server.get("status") == SHUTOFF

    def _not_found(self, node: NodeInfo) -> str:
        if node.provider_id:
            return f"Node {node.name}: Nova has no server {node.provider_id}"
        return (
            f"Node {node.name}: no Nova server is named {node.name!r} (nor has the Node a "
            "provider ID); name Nodes like their servers, or set kubelet --provider-id="
            "openstack:///<server-id>"
        )


def _flavor_id(server: Mapping[str, Any]) -> str:
    flavor = server.get("flavor")
    if isinstance(flavor, Mapping):
        fid = flavor.get("id")
        if isinstance(fid, str):
            return fid
    return ""
