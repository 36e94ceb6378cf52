"""Routes: pod-network routes on the cluster's Neutron router (`[Route] router-id`), as OCCM.

- **list**: `GET /v2.0/routers/{id}`; each `routes` entry is a Route to the Node whose
  address is the next hop (named from the addresses the instance lookups saw, else from
  one listing of the servers), or, when no server has it, a blackhole whose target is the
  next hop itself (OCCM's behaviour: the route controller then deletes it if it is inside
  the cluster CIDR). The router's ports are read once to know its networks.
- **create**: the next hop is the target Node's first InternalIP of the CIDR's family
  (the controller hands the addresses over: `enable_node_addresses`). With Neutron's
  `extraroute-atomic` extension: `PUT /v2.0/routers/{id}/add_extraroutes`, which adds
  without reading (no lost update when another writer edits the router); the creates of
  one pass are **batched into one call** (they arrive together; the first waits
  `BATCH_WINDOW_S` for the others). Without it (`extraroute` only): read-modify-write of
  the router's `routes` under a lock, batched the same way. Then, with the
  `allowed-address-pairs` extension, the pod CIDR is added to the `allowed_address_pairs`
  of the Node's port on a router network (found by its fixed IP = the next hop), unless
  port security is off, so port security does not drop pod traffic; the PUT carries
  `If-Match: revision_number=N` so a concurrent edit of the port is never overwritten.
- **delete**: the mirror (`remove_extraroutes`, batched), then the pair is removed.
- No routes at all (the capability is None) when `router-id` is unset. When Neutron has
  neither extension (OCCM then offers no routes), every call fails naming the fix: the
  controllers are chosen before the provider can ask Neutron.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import trio

from trio_ccm.cloud.openstack.client import OpenStackClient
from trio_ccm.cloud.openstack.errors import ConflictError, OpenStackError, OpenStackServerError
from trio_ccm.cloud.openstack.instances import OpenStackInstances
from trio_ccm.cloud.provider import NodeAddress, Route
from trio_ccm.logs import get_logger

__all__ = ["BATCH_WINDOW_S", "OpenStackRoutes", "RouteError"]

log = get_logger("trio_ccm.cloud.openstack.routes")

BATCH_WINDOW_S: Final = 0.05
"""How long the first route change of a pass waits for the others to join its call."""
_PAIR_ATTEMPTS: Final = 3


class RouteError(OpenStackError):
    """A route cannot be made as asked (no next hop, a router that is not there)."""

    def __init__(self, message: str, *, path: str = "/v2.0/routers") -> None:
        super().__init__(message, service="network", method="PUT", path=path)


class _Batch:
    __slots__ = ("done", "error", "items")

    def __init__(self) -> None:
        self.items: list[dict[str, str]] = []
        self.done = trio.Event()
        self.error: BaseException | None = None


class _Coalescer:
    """Route changes arriving together, sent in one call (see the module docstring)."""

    def __init__(self, send: Callable[[list[dict[str, str]]], Awaitable[None]]) -> None:
        self._send = send
        self._open: _Batch | None = None

    async def submit(self, item: dict[str, str]) -> None:
        batch = self._open
        if batch is not None:
            batch.items.append(item)
            await batch.done.wait()
            if batch.error is not None:
                raise batch.error
            return
        batch = self._open = _Batch()
        batch.items.append(item)
        try:
            await trio.sleep(BATCH_WINDOW_S)
            self._open = None
            await self._send(batch.items)
        except BaseException as exc:
            if self._open is batch:
                self._open = None
            batch.error = (
                exc
                if isinstance(exc, Exception)
                else OpenStackServerError(
                    "the call carrying this route change was cancelled; retry",
                    service="network",
                    method="PUT",
                    path="/v2.0/routers",
                )
            )
            raise
        finally:
            batch.done.set()


def _first_internal(addresses: Sequence[NodeAddress], cidr: str) -> str:
    version = ipaddress.ip_network(cidr, strict=False).version
    for address in addresses:
        if address.type != "InternalIP":
            continue
        try:
            if ipaddress.ip_address(address.address).version == version:
                return address.address
        except ValueError:
            continue
    return ""


class OpenStackRoutes:
    """`Routes` on one Neutron router (see the module docstring)."""

    enable_node_addresses = True

    def __init__(
        self,
        client: OpenStackClient,
        router_id: str,
        instances: OpenStackInstances,
        *,
        atomic: bool,
        address_pairs: bool,
    ) -> None:
        self._client = client
        self.router_id = router_id
        self._instances = instances
        self.atomic = atomic
        self.address_pairs = address_pairs
        self.unavailable = ""
        """Why the router cannot take routes ("" when it can), from Neutron's extensions."""
        self._networks: tuple[str, ...] = ()
        self._rmw_lock = trio.Lock()
        self._adds = _Coalescer(self._add)
        self._removes = _Coalescer(self._remove)

    @property
    def _router_path(self) -> str:
        return f"/v2.0/routers/{self.router_id}"

    async def _router(self) -> dict[str, Any]:
        if self.unavailable:
            raise RouteError(self.unavailable, path=self._router_path)
        answer = await self._client.request("network", "GET", self._router_path)
        router = answer.get("router") if isinstance(answer, Mapping) else None
        if not isinstance(router, dict):
            raise OpenStackServerError(
                "the answer has no 'router' object",
                service="network",
                method="GET",
                path=self._router_path,
            )
        return router

    # -- Routes ---------------------------------------------------------------------------
    async def list_routes(self, cluster: str) -> Sequence[Route]:
        router = await self._router()
        entries = [
            (str(r.get("destination")), str(r.get("nexthop")))
            for r in router.get("routes") or ()
            if isinstance(r, Mapping) and r.get("destination") and r.get("nexthop")
        ]
        ports = await self._client.list(
            "network", "/v2.0/ports", "ports", params={"device_id": self.router_id}
        )
        self._networks = tuple(sorted({str(p.get("network_id")) for p in ports}))
        owners = self._owners()
        if any(hop not in owners for _, hop in entries):
            owners = await self._owners_from_servers()
        return [
            Route(
                target_node=owners.get(hop, hop),
                destination_cidr=destination,
                name=destination,
                blackhole=hop not in owners,
            )
            for destination, hop in entries
        ]

    def _owners(self) -> dict[str, str]:
        return {
            a.address: name
            for name, addresses in self._instances.addresses.items()
            for a in addresses
        }

    async def _owners_from_servers(self) -> dict[str, str]:
        servers = await self._client.list("compute", "/servers/detail", "servers", limit=1000)
        owners = self._owners()
        for server in servers:
            addresses = server.get("addresses")
            if not isinstance(addresses, Mapping):
                continue
            for entries in addresses.values():
                for entry in entries if isinstance(entries, list) else ():
                    if isinstance(entry, Mapping) and entry.get("addr"):
                        owners.setdefault(str(entry["addr"]), str(server.get("name")))
        return owners

    async def create_route(self, cluster: str, name_hint: str, route: Route) -> None:
        """Add the route (batched), then the allowed address pair on the Node's port."""
        hop = _first_internal(route.target_node_addresses, route.destination_cidr)
        if not hop:
            raise RouteError(
                f"Node {route.target_node} has no InternalIP of the family of "
                f"{route.destination_cidr}; the route needs one as its next hop (check the "
                "Node's addresses and [Networking] internal-network-name)",
                path=f"{self._router_path}/add_extraroutes",
            )
        await self._adds.submit({"destination": route.destination_cidr, "nexthop": hop})
        if self.address_pairs:
            await self._pair(hop, route.destination_cidr, add=True)

    async def delete_route(self, cluster: str, route: Route) -> None:
        """Remove the route's router entries (batched), then their allowed address pairs.

        The entries are read from the router: those to the route's destination whose next
        hop is the Node's (any of its addresses; a blackhole's target is its next hop), or
        every entry to the destination when none is."""
        router = await self._router()
        entries = [
            {"destination": str(r.get("destination")), "nexthop": str(r.get("nexthop"))}
            for r in router.get("routes") or ()
            if isinstance(r, Mapping) and r.get("destination") == route.destination_cidr
        ]
        if not entries:
            return  # gone already
        if route.blackhole:
            known = {route.target_node}
        else:
            known = {a.address for a in route.target_node_addresses} | {
                address for address, node in self._owners().items() if node == route.target_node
            }
        chosen = [e for e in entries if e["nexthop"] in known] or entries
        for entry in chosen:
            await self._removes.submit(entry)
        if self.address_pairs and not route.blackhole:
            for entry in chosen:
                await self._pair(entry["nexthop"], route.destination_cidr, add=False)

    # -- the router -----------------------------------------------------------------------
    async def _add(self, items: list[dict[str, str]]) -> None:
        if self.atomic:
            await self._client.request(
                "network",
                "PUT",
                f"{self._router_path}/add_extraroutes",
                json={"router": {"routes": _unique(items)}},
            )
        else:
            await self._rewrite(items, add=True)
        log.debug("openstack.routes-added", router=self.router_id, routes=len(items))

    async def _remove(self, items: list[dict[str, str]]) -> None:
        if self.atomic:
            await self._client.request(
                "network",
                "PUT",
                f"{self._router_path}/remove_extraroutes",
                json={"router": {"routes": _unique(items)}},
            )
        else:
            await self._rewrite(items, add=False)
        log.debug("openstack.routes-removed", router=self.router_id, routes=len(items))

    async def _rewrite(self, items: list[dict[str, str]], *, add: bool) -> None:
        """Without extraroute-atomic: read the routes, change them, write them all."""
        async with self._rmw_lock:
            router = await self._router()
            current = [
                {"destination": str(r.get("destination")), "nexthop": str(r.get("nexthop"))}
                for r in router.get("routes") or ()
                if isinstance(r, Mapping)
            ]
            if add:
                wanted = current + [i for i in _unique(items) if i not in current]
            else:
                wanted = [r for r in current if r not in items]
            if wanted == current:
                return
            await self._client.request(
                "network", "PUT", self._router_path, json={"router": {"routes": wanted}}
            )

    # -- the Node's port ------------------------------------------------------------------
    async def _pair(self, hop: str, cidr: str, *, add: bool) -> None:
        """Add (or remove) `cidr` in the allowed address pairs of the port holding `hop` on
        one of the router's networks (OCCM's updateAllowedAddressPairs)."""
        if not self._networks:
            ports = await self._client.list(
                "network", "/v2.0/ports", "ports", params={"device_id": self.router_id}
            )
            self._networks = tuple(sorted({str(p.get("network_id")) for p in ports}))
        for _ in range(_PAIR_ATTEMPTS):
            found = await self._client.list(
                "network",
                "/v2.0/ports",
                "ports",
                params={"fixed_ips": f"ip_address={hop}", "network_id": list(self._networks)},
            )
            if not found and not add:
                return  # the port is gone with its server: no pair to remove
            if len(found) != 1:
                raise RouteError(
                    f"{len(found)} ports hold the next hop {hop} on the router's networks "
                    f"({', '.join(self._networks) or 'none'}); the route's address pair needs "
                    "exactly one: check the Node's port",
                    path="/v2.0/ports",
                )
            port = found[0]
            if port.get("port_security_enabled") is False:
                return
            pairs = [
                dict(p) for p in port.get("allowed_address_pairs") or () if isinstance(p, Mapping)
            ]
            present = any(p.get("ip_address") == cidr for p in pairs)
            if add == present:
                return
            if add:
                pairs.append({"ip_address": cidr})
            else:
                pairs = [p for p in pairs if p.get("ip_address") != cidr]
            headers = {}
            if isinstance(port.get("revision_number"), int):
                headers["If-Match"] = f"revision_number={port['revision_number']}"
            path = f"/v2.0/ports/{port.get('id')}"
            try:
                await self._client.request(
                    "network",
                    "PUT",
                    path,
                    json={"port": {"allowed_address_pairs": pairs}},
                    headers=headers,
                )
            except ConflictError:
                continue
            except OpenStackError as exc:
                if exc.status == 412:  # the revision moved on: read again
                    continue
                raise
            return
        raise RouteError(
            f"the port holding {hop} kept changing under us ({_PAIR_ATTEMPTS} tries); the "
            "next pass tries again",
            path="/v2.0/ports",
        )


def _unique(items: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    seen: list[dict[str, str]] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen
