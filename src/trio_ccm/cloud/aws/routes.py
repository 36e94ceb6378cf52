"""Routes: pod CIDRs routed to instances in the cluster's VPC route table.

As cloud-provider-aws (`aws_routes.go`):

- **the route table** is the one the cloud-config's `RouteTableID` names, else the one
  carrying the cluster tag; none, or several, is an error naming the fix;
- **list_routes** reports every route of the table to an instance, named
  `<cluster>-<cidr>`, and every `blackhole` route (its instance is gone) as such; IPv4 and
  IPv6 destinations both (upstream: IPv4 only);
- **create_route** turns `SourceDestCheck` off on the target instance (so it accepts
  traffic for other addresses), deletes a blackhole route to the same CIDR, then creates
  the route; a route to the same CIDR that already targets the instance is success;
- **delete_route** deletes by CIDR; a route that is gone already is success.

Instance → Node. Upstream names a route's Node through its Node informer. A provider has
none, so the provider's `NodeDirectory` (Node ↔ instance, learned from every Node the
provider is shown: initialisation, the periodic address sync, the lifecycle check) names
it. When a route's instance is not in the directory, `list_routes` first waits for the bulk
lookups under way (at start-up the address sync's first sweep runs beside the first route
pass), then asks EC2 for the instances still unnamed and takes the private DNS name, the
Node name EC2 gives by default (upstream's legacy rule). Such a guess is not learned, and
is kept for `GUESS_MAX_AGE_S`, so routes to instances that are no Nodes cost one call per
`GUESS_MAX_AGE_S`, not one per pass. A route to an instance EC2 does not know is skipped,
as upstream.

Calls: a pass lists the table once; each create costs ModifyInstanceAttribute and
CreateRoute, reusing the table the pass listed (`TABLE_MAX_AGE_S`) to find a blackhole to
the same CIDR, and describing it afresh only when CreateRoute says the route exists. Any
CreateRoute or DeleteRoute, answered or not (an unknown outcome may have landed), drops
that copy: the next create reads the table again.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import trio

from trio_ccm.cloud.aws.ec2 import RouteEntry, RouteTable, describe_by_ids, describe_route_tables
from trio_ccm.cloud.aws.errors import AwsError
from trio_ccm.cloud.provider import InstanceNotFoundError, Route
from trio_ccm.logs import get_logger

if TYPE_CHECKING:
    from trio_ccm.cloud.aws.context import AwsContext

__all__ = ["GUESS_MAX_AGE_S", "TABLE_MAX_AGE_S", "AwsRoutes", "RouteTableError"]

log = get_logger("trio_ccm.cloud.aws.routes")

TABLE_MAX_AGE_S: Final = 10.0
"""How long create_route trusts the route table list_routes read."""
GUESS_MAX_AGE_S: Final = 300.0


class RouteTableError(AwsError):
    """The cluster's route table cannot be told: none or several match."""

    def __init__(self, message: str) -> None:
        super().__init__(message, service="ec2", action="DescribeRouteTables")


@dataclass(frozen=True, slots=True)
class _Seen:
    table: RouteTable
    at: float


def _canonical(cidr: str) -> str:
    try:
        return str(ipaddress.ip_network(cidr.strip(), strict=False))
    except ValueError:
        return cidr


def _is_ipv6(cidr: str) -> bool:
    return ":" in cidr


class AwsRoutes:
    """`Routes` over a VPC route table (see the module docstring)."""

    enable_node_addresses = False

    def __init__(self, context: AwsContext) -> None:
        self._context = context
        self._seen: _Seen | None = None
        self._guesses: dict[str, tuple[str, float]] = {}  # instance → (node, at)

    # -- the table -------------------------------------------------------------------
    async def _table(self, *, max_age_s: float = 0.0) -> RouteTable:
        seen = self._seen
        if seen is not None and trio.current_time() - seen.at <= max_age_s:
            return seen.table
        context = self._context
        await context.ready()
        configured = context.config.route_table_id
        if configured:
            tables = await describe_route_tables(
                context.client,
                {"route-table-id": [configured]},
                target=f"route table {configured}",
            )
            if not tables:
                raise RouteTableError(
                    f"route table {configured} (RouteTableID in the cloud-config) does not exist "
                    f"in {context.region}; fix RouteTableID or delete it to use the cluster-tagged "
                    "table"
                )
        else:
            tagging = context.tagging
            tables = [
                table
                for table in await describe_route_tables(
                    context.client,
                    tagging.tag_key_filter(),
                    target=f"route tables tagged {tagging.key}",
                )
                if tagging.has_cluster_tag(table.tags)
            ]
            if not tables:
                raise RouteTableError(
                    f"no route table carries the cluster tag {tagging.key}; tag the cluster's "
                    "route table (value owned or shared), or set RouteTableID in the "
                    "cloud-config's [Global]"
                )
            if len(tables) > 1:
                raise RouteTableError(
                    f"several route tables carry the cluster tag {tagging.key} "
                    f"({', '.join(sorted(t.id for t in tables))}); set RouteTableID in the "
                    "cloud-config's [Global] to choose one"
                )
        table = tables[0]
        self._seen = _Seen(table, trio.current_time())
        return table

    # -- Routes ------------------------------------------------------------------------
    async def list_routes(self, cluster: str) -> Sequence[Route]:
        table = await self._table()
        names = await self._node_names(
            {r.instance_id for r in table.routes if r.instance_id and r.state != "blackhole"}
        )
        routes: list[Route] = []
        for entry in table.routes:
            name = f"{cluster}-{entry.destination}"
            if entry.state == "blackhole":
                owner = self._context.directory.node_of(entry.instance_id) or ""
                routes.append(Route(owner, entry.destination, name=name, blackhole=True))
                continue
            if not entry.instance_id:
                continue  # a gateway, NAT or interface route: not ours
            node = names.get(entry.instance_id)
            if node is None:
                log.warning(
                    "aws.route-instance-unknown",
                    route_table=table.id,
                    cidr=entry.destination,
                    instance=entry.instance_id,
                )
                continue
            routes.append(Route(node, entry.destination, name=name))
        return routes

    async def _node_names(self, instance_ids: set[str]) -> dict[str, str]:
        """Node names of the routes' instances (see the module docstring)."""
        directory = self._context.directory
        now = trio.current_time()
        names: dict[str, str] = {}
        unknown: list[str] = []
        for instance_id in sorted(instance_ids):
            node = directory.node_of(instance_id)
            guess = self._guesses.get(instance_id)
            if node is not None:
                names[instance_id] = node
            elif guess is not None and now - guess[1] <= GUESS_MAX_AGE_S:
                names[instance_id] = guess[0]
            else:
                unknown.append(instance_id)
        if unknown:
            await self._context.lookup.wait_settled()
            still = []
            for instance_id in unknown:
                node = directory.node_of(instance_id)
                if node is None:
                    still.append(instance_id)
                else:
                    names[instance_id] = node
            unknown = still
        if unknown:
            found = await describe_by_ids(
                self._context.client, unknown, target="the instances routes point at"
            )
            for instance_id, instance in found.items():
                if instance.state == "terminated" or not instance.private_dns_name:
                    continue
                names[instance_id] = instance.private_dns_name
                self._guesses[instance_id] = (instance.private_dns_name, now)
                log.info(
                    "aws.route-node-guessed",
                    instance=instance_id,
                    node=instance.private_dns_name,
                    reason="no Node with this instance was seen yet; its private DNS name",
                )
        return names

    async def create_route(self, cluster: str, name_hint: str, route: Route) -> None:
        """Create `route` (see the module docstring)."""
        context = self._context
        await context.ready()
        node = route.target_node
        instance_id = await self._instance_of(node)
        target = f"instance {instance_id} (Node {node})"
        await context.client.call(
            "ec2",
            "ModifyInstanceAttribute",
            {"InstanceId": instance_id, "SourceDestCheck": {"Value": False}},
            target=target,
        )
        cidr = _canonical(route.destination_cidr)
        table = await self._table(max_age_s=TABLE_MAX_AGE_S)
        existing = self._entry(table, cidr)
        if existing is not None and existing.state == "blackhole":
            await self._delete(table, existing.destination, why="blackhole")
        elif existing is not None and existing.instance_id == instance_id:
            return  # already there
        try:
            await self._create(table, route.destination_cidr, instance_id, target)
        except AwsError as exc:
            if exc.code != "RouteAlreadyExists":
                raise
            fresh = await self._table()
            existing = self._entry(fresh, cidr)
            if existing is not None and existing.instance_id == instance_id:
                return  # ours already (a retried create, another replica)
            if existing is None or existing.state != "blackhole":
                raise AwsError(
                    f"route table {fresh.id} routes {route.destination_cidr} to "
                    f"{_route_target(existing)}, not to {target}; delete that route, or give "
                    "the Node another pod CIDR",
                    service="ec2",
                    action="CreateRoute",
                    target=f"route table {fresh.id}",
                    code=exc.code,
                ) from exc
            await self._delete(fresh, existing.destination, why="blackhole")
            await self._create(fresh, route.destination_cidr, instance_id, target)

    async def _create(self, table: RouteTable, cidr: str, instance_id: str, target: str) -> None:
        key = "DestinationIpv6CidrBlock" if _is_ipv6(cidr) else "DestinationCidrBlock"
        try:
            await self._context.client.call(
                "ec2",
                "CreateRoute",
                {"RouteTableId": table.id, key: cidr, "InstanceId": instance_id},
                target=f"route table {table.id}, {cidr} to {target}",
            )
        finally:
            # The table changed, or may have (an unknown outcome, a cancelled call): the
            # next create reads it again rather than trust the copy from before.
            self._seen = None
        log.debug("aws.route-created", route_table=table.id, cidr=cidr, instance=instance_id)

    async def delete_route(self, cluster: str, route: Route) -> None:
        """Delete the route to `route.destination_cidr`; gone already is success."""
        table = await self._table(max_age_s=TABLE_MAX_AGE_S)
        await self._delete(table, route.destination_cidr, why="requested")

    async def _delete(self, table: RouteTable, cidr: str, *, why: str) -> None:
        key = "DestinationIpv6CidrBlock" if _is_ipv6(cidr) else "DestinationCidrBlock"
        try:
            await self._context.client.call(
                "ec2",
                "DeleteRoute",
                {"RouteTableId": table.id, key: cidr},
                target=f"route table {table.id}, {cidr}",
            )
        except AwsError as exc:
            if exc.code != "InvalidRoute.NotFound":
                raise
        finally:
            self._seen = None  # as in _create: changed, or may have
        log.info("aws.route-deleted", route_table=table.id, cidr=cidr, reason=why)

    @staticmethod
    def _entry(table: RouteTable, cidr: str) -> RouteEntry | None:
        return next((r for r in table.routes if _canonical(r.destination) == cidr), None)

    async def _instance_of(self, node: str) -> str:
        """The Node's instance: the directory, a resource-based name, or its private DNS name."""
        context = self._context
        found = context.directory.instance_of(node)
        if found:
            return found
        if node.startswith("i-"):
            return node.split(".", 1)[0]
        by_name = await context.lookup.by_names([node])
        instance = by_name.get(node)
        if instance is None:
            raise InstanceNotFoundError(
                f"Node {node}: no instance to route to: the provider has not seen the Node's "
                "provider ID and no alive cluster instance has it as private DNS name; the "
                "route is created once the Node is initialised"
            )
        context.directory.learn(node, instance.id)
        return instance.id


def _route_target(entry: RouteEntry | None) -> str:
    if entry is None:
        return "something else"
    return (
        entry.instance_id
        or entry.network_interface_id
        or entry.gateway_id
        or f"a {entry.state or 'unknown'} target"
    )
