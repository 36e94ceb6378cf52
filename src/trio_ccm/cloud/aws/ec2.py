"""EC2 calls the provider makes, shaped: instances, zones, route tables.

Limits AWS enforces and moto does not, kept here (cloud-study §5):

- `InstanceIds`: at most 1,000 per DescribeInstances call (AWS's guidance), and never
  together with `MaxResults`;
- filter values: 150 per call (AWS allows 200 in all; cloud-provider-aws uses 150 so the
  state filter fits beside a name chunk);
- `MaxResults`: 5 to 1,000.

An unknown instance ID makes AWS fail the whole DescribeInstances call
(`InvalidInstanceID.NotFound`, naming the unknown IDs). `describe_by_ids` therefore drops
the IDs the error names and asks again (at most `_NOT_FOUND_ROUNDS` times), and falls back
to the `instance-id` filter (which ignores unknown IDs) when the message names none it
asked for. An unknown ID thus never fails a batch; it is only absent from the answer. IDs
that are not EC2 instance IDs at all are never sent (AWS would fail the call with
`InvalidInstanceID.Malformed`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

import trio

from trio_ccm.cloud.aws.client import AwsClient
from trio_ccm.cloud.aws.codec import Parsed
from trio_ccm.cloud.aws.errors import AwsError
from trio_ccm.cloud.aws.tags import tags_of

__all__ = [
    "ALIVE_STATES",
    "FILTER_VALUES_MAX",
    "IDS_PER_CALL_MAX",
    "Ec2Instance",
    "NetworkInterface",
    "RouteEntry",
    "RouteTable",
    "add_changed_tags",
    "apply_difference",
    "chunks",
    "describe_availability_zones",
    "describe_by_filters",
    "describe_by_ids",
    "describe_route_tables",
    "filters",
    "is_instance_id",
]

IDS_PER_CALL_MAX: Final = 1000
FILTER_VALUES_MAX: Final = 150
PAGE_SIZE: Final = 1000
ALIVE_STATES: Final = ("pending", "running", "shutting-down", "stopping", "stopped")
"""Every state but terminated (cloud-provider-aws's aliveFilter)."""

_INSTANCE_ID: Final = re.compile(r"^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
_NAMED_ID: Final = re.compile(r"\bi-[0-9a-zA-Z]+\b")
_NOT_FOUND: Final = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})
_NOT_FOUND_ROUNDS: Final = 3
_CONVERT_INLINE_MAX: Final = 100

T = TypeVar("T")


def is_instance_id(value: str) -> bool:
    """Whether `value` has the form of an EC2 instance ID (i- and 8 or 17 hex digits)."""
    return bool(_INSTANCE_ID.match(value))


def chunks(items: Sequence[T], size: int) -> Iterable[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def apply_difference(
    client: AwsClient,
    service: str,
    *,
    remove: str,
    add: str,
    registered: Iterable[str],
    wanted: Iterable[str],
    per_call: int,
    params: Callable[[Sequence[str]], Mapping[str, object]],
    where: str,
) -> None:
    """Make a member list (a load balancer's instances, a target group's targets) `wanted`,
    knowing it holds `registered`: action `remove` for the removed, then `add` for the added,
    `per_call` members per call (`params(chunk)` is the call's parameters)."""
    have, want = set(registered), set(wanted)
    for action, members in ((remove, have - want), (add, want - have)):
        for chunk in chunks(sorted(members), per_call):
            await client.call(service, action, params(chunk), target=where)


async def add_changed_tags(
    client: AwsClient,
    service: str,
    resource: Mapping[str, object],
    wanted: Mapping[str, str],
    *,
    where: str,
) -> None:
    """Set the tags of a load balancer that `wanted` adds or changes (a tag no longer wanted
    stays, as upstream: it may be someone else's). `resource` names it in both DescribeTags
    and AddTags: `{"LoadBalancerNames": [name]}` (elb) or `{"ResourceArns": [arn]}` (elbv2)."""
    answer = await client.call(service, "DescribeTags", resource, target=where)
    items = answer.get("TagDescriptions")
    held: dict[str, str] = {}
    for item in items if isinstance(items, list) else ():
        if isinstance(item, Mapping):
            held.update(tags_of(item.get("Tags")))
    change = {k: v for k, v in wanted.items() if held.get(k) != v}
    if change:
        tags = [{"Key": k, "Value": v} for k, v in change.items()]
        await client.call(service, "AddTags", {**resource, "Tags": tags}, target=where)


def filters(spec: Mapping[str, Sequence[str]]) -> list[dict[str, object]]:
    """EC2 `Filters` from {name: values}."""
    return [{"Name": name, "Values": list(values)} for name, values in spec.items()]


# -- instances ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NetworkInterface:
    """The parts of an instance's ENI that give Node addresses."""

    status: str
    device_index: int | None
    private_ips: tuple[str, ...] = ()
    ipv6_addresses: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Ec2Instance:
    """What the provider reads of an EC2 instance."""

    id: str
    state: str
    instance_type: str = ""
    zone: str = ""
    private_dns_name: str = ""
    public_dns_name: str = ""
    private_ip: str = ""
    public_ip: str = ""
    vpc_id: str = ""
    subnet_id: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)
    network_interfaces: tuple[NetworkInterface, ...] = ()
    security_groups: tuple[str, ...] = ()

    @classmethod
    def from_parsed(cls, item: Mapping[str, object]) -> Ec2Instance:
        state = item.get("State")
        placement = item.get("Placement")
        enis = item.get("NetworkInterfaces")
        groups = item.get("SecurityGroups")
        return cls(
            id=str(item.get("InstanceId") or ""),
            state=str(state.get("Name") or "") if isinstance(state, Mapping) else "",
            instance_type=str(item.get("InstanceType") or ""),
            zone=str(placement.get("AvailabilityZone") or "")
            if isinstance(placement, Mapping)
            else "",
            private_dns_name=str(item.get("PrivateDnsName") or ""),
            public_dns_name=str(item.get("PublicDnsName") or ""),
            private_ip=str(item.get("PrivateIpAddress") or ""),
            public_ip=str(item.get("PublicIpAddress") or ""),
            vpc_id=str(item.get("VpcId") or ""),
            subnet_id=str(item.get("SubnetId") or ""),
            tags=tags_of(item.get("Tags")),
            network_interfaces=tuple(
                _eni(eni)
                for eni in (enis if isinstance(enis, list) else ())
                if isinstance(eni, Mapping)
            ),
            security_groups=tuple(
                str(g["GroupId"])
                for g in (groups if isinstance(groups, list) else ())
                if isinstance(g, Mapping) and g.get("GroupId")
            ),
        )


def _eni(item: Mapping[str, object]) -> NetworkInterface:
    attachment = item.get("Attachment")
    index = attachment.get("DeviceIndex") if isinstance(attachment, Mapping) else None
    privates = item.get("PrivateIpAddresses")
    ipv6 = item.get("Ipv6Addresses")
    return NetworkInterface(
        status=str(item.get("Status") or ""),
        device_index=index if isinstance(index, int) else None,
        private_ips=tuple(
            str(p["PrivateIpAddress"])
            for p in (privates if isinstance(privates, list) else ())
            if isinstance(p, Mapping) and p.get("PrivateIpAddress")
        ),
        ipv6_addresses=tuple(
            str(a["Ipv6Address"])
            for a in (ipv6 if isinstance(ipv6, list) else ())
            if isinstance(a, Mapping) and a.get("Ipv6Address")
        ),
    )


async def _converted(pages: Sequence[Parsed]) -> list[Ec2Instance]:
    """`_instances(pages)`, in a worker thread when there are many (13 ms per 1,000)."""
    count = 0
    for page in pages:
        reservations = page.get("Reservations")
        for reservation in reservations if isinstance(reservations, list) else ():
            if isinstance(reservation, Mapping):
                items = reservation.get("Instances")
                count += len(items) if isinstance(items, list) else 0
    if count <= _CONVERT_INLINE_MAX:
        return _instances(pages)
    return await trio.to_thread.run_sync(_instances, pages, abandon_on_cancel=True)


def _instances(pages: Iterable[Parsed]) -> list[Ec2Instance]:
    found: list[Ec2Instance] = []
    for page in pages:
        reservations = page.get("Reservations")
        for reservation in reservations if isinstance(reservations, list) else ():
            if not isinstance(reservation, Mapping):
                continue
            items = reservation.get("Instances")
            for item in items if isinstance(items, list) else ():
                if isinstance(item, Mapping) and item.get("InstanceId"):
                    found.append(Ec2Instance.from_parsed(item))
    return found


async def describe_by_filters(
    client: AwsClient, spec: Mapping[str, Sequence[str]], *, target: str
) -> list[Ec2Instance]:
    """Every instance matching the filters, page by page (1,000 per page)."""
    pages = await client.paginate(
        "ec2",
        "DescribeInstances",
        {"Filters": filters(spec), "MaxResults": PAGE_SIZE},
        target=target,
    )
    return await _converted(pages)


async def describe_by_ids(
    client: AwsClient, ids: Iterable[str], *, target: str = ""
) -> dict[str, Ec2Instance]:
    """The instances among `ids` that exist, by ID (see the module docstring)."""
    wanted = list(dict.fromkeys(i for i in ids if is_instance_id(i)))
    found: dict[str, Ec2Instance] = {}
    for chunk in chunks(wanted, IDS_PER_CALL_MAX):
        found.update(await _describe_chunk(client, list(chunk), target=target))
    return found


async def _describe_chunk(
    client: AwsClient, ids: list[str], *, target: str
) -> dict[str, Ec2Instance]:
    remaining = ids
    what = target or (f"instance {ids[0]}" if len(ids) == 1 else f"{len(ids)} instances")
    for _ in range(_NOT_FOUND_ROUNDS):
        try:
            pages = await client.paginate(
                "ec2", "DescribeInstances", {"InstanceIds": remaining}, target=what
            )
        except AwsError as exc:
            if exc.code not in _NOT_FOUND:
                raise
            named = set(_NAMED_ID.findall(exc.aws_message)) & set(remaining)
            if not named:
                break  # the message names none we asked for: ask by filter instead
            remaining = [i for i in remaining if i not in named]
            if not remaining:
                return {}
            continue
        return {instance.id: instance for instance in await _converted(pages) if instance.id in ids}
    found: dict[str, Ec2Instance] = {}
    for chunk in chunks(remaining, FILTER_VALUES_MAX):
        for instance in await describe_by_filters(
            client, {"instance-id": list(chunk)}, target=what
        ):
            found[instance.id] = instance
    return found


# -- zones ---------------------------------------------------------------------------------------
async def describe_availability_zones(client: AwsClient) -> dict[str, tuple[str, str]]:
    """Zone name → (zone ID, zone type) of the zones the account can use in the region."""
    answer = await client.call("ec2", "DescribeAvailabilityZones", {}, target="the region's zones")
    zones: dict[str, tuple[str, str]] = {}
    items = answer.get("AvailabilityZones")
    for zone in items if isinstance(items, list) else ():
        if isinstance(zone, Mapping) and zone.get("ZoneName"):
            zones[str(zone["ZoneName"])] = (
                str(zone.get("ZoneId") or ""),
                str(zone.get("ZoneType") or ""),
            )
    return zones


# -- route tables ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RouteEntry:
    """One route of a route table (IPv4 or IPv6 destination)."""

    destination: str
    ipv6: bool
    state: str
    instance_id: str = ""
    network_interface_id: str = ""
    gateway_id: str = ""


@dataclass(frozen=True, slots=True)
class RouteTable:
    id: str
    vpc_id: str
    tags: Mapping[str, str]
    routes: tuple[RouteEntry, ...]


def _route(item: Mapping[str, object]) -> RouteEntry | None:
    v4 = str(item.get("DestinationCidrBlock") or "")
    v6 = str(item.get("DestinationIpv6CidrBlock") or "")
    if not v4 and not v6:
        return None  # a prefix-list route: never ours
    return RouteEntry(
        destination=v4 or v6,
        ipv6=not v4,
        state=str(item.get("State") or ""),
        instance_id=str(item.get("InstanceId") or ""),
        network_interface_id=str(item.get("NetworkInterfaceId") or ""),
        gateway_id=str(item.get("GatewayId") or ""),
    )


async def describe_route_tables(
    client: AwsClient, spec: Mapping[str, Sequence[str]], *, target: str
) -> list[RouteTable]:
    """The route tables matching the filters, with their routes."""
    params: dict[str, object] = {"MaxResults": 100}
    if spec:
        params["Filters"] = filters(spec)
    pages = await client.paginate("ec2", "DescribeRouteTables", params, target=target)
    tables: list[RouteTable] = []
    for page in pages:
        items = page.get("RouteTables")
        for item in items if isinstance(items, list) else ():
            if not isinstance(item, Mapping):
                continue
            routes = item.get("Routes")
            tables.append(
                RouteTable(
                    id=str(item.get("RouteTableId") or ""),
                    vpc_id=str(item.get("VpcId") or ""),
                    tags=tags_of(item.get("Tags")),
                    routes=tuple(
                        entry
                        for entry in (
                            _route(r)
                            for r in (routes if isinstance(routes, list) else ())
                            if isinstance(r, Mapping)
                        )
                        if entry is not None
                    ),
                )
            )
    return tables
