"""The EC2 side of load balancers: which subnets they live in, and security groups.

**Subnets** (upstream's findELBSubnets): the VPC's subnets that carry this cluster's tag or
no cluster tag at all; for an internet-facing load balancer only public ones (the route
table associated with the subnet, else the VPC's main one, routes to an `igw-`); one per
zone, ties broken by the role tag (`kubernetes.io/role/elb`, or `role/internal-elb` for an
internal one), then the cluster tag, then the smallest ID. The `aws-load-balancer-subnets`
annotation (IDs or `Name` tags) replaces the discovery.

**Security groups**: rules are compared as single (protocol, ports, source, description)
entries, authorised and revoked by difference, so a rule someone else added in the same
group is never touched. Deleting a group that a load balancer's network interfaces still
use fails with `DependencyViolation` for a minute or two after the load balancer is gone:
that is a `RetryAfter`, not an error storm.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from trio_ccm.cloud.aws.client import AwsClient
from trio_ccm.cloud.aws.codec import Parsed
from trio_ccm.cloud.aws.ec2 import Ec2Instance, filters
from trio_ccm.cloud.aws.errors import AwsError
from trio_ccm.cloud.aws.tags import CLUSTER_TAG_PREFIX, LEGACY_CLUSTER_TAG, ClusterTagging, tags_of
from trio_ccm.errors import RetryAfter
from trio_ccm.logs import get_logger

if TYPE_CHECKING:
    from trio_ccm.cloud.aws.lookup import ZoneCache

__all__ = [
    "ROLE_ELB",
    "ROLE_INTERNAL_ELB",
    "Rule",
    "SecurityGroup",
    "Subnet",
    "authorize",
    "choose_subnets",
    "create_group",
    "delete_group",
    "describe_groups",
    "find_group",
    "node_group",
    "reconcile_rules",
    "revoke",
]

ROLE_ELB: Final = "kubernetes.io/role/elb"
ROLE_INTERNAL_ELB: Final = "kubernetes.io/role/internal-elb"
DEPENDENCY_RETRY_S: Final = 5.0
"""Upstream polls a group still in use every 5 s."""


log = get_logger("trio_ccm.cloud.aws.network")

REGULAR_ZONE: Final = "availability-zone"
"""The zone type load balancers live in (not local-zone, wavelength-zone)."""


@dataclass(frozen=True, slots=True)
class Subnet:
    id: str
    zone: str
    cidr: str
    vpc_id: str
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, order=True)
class Rule:
    """One ingress rule: from `cidr` or from security group `group` (one of the two)."""

    protocol: str  # tcp, udp, icmp, -1
    from_port: int
    to_port: int
    cidr: str = ""
    group: str = ""
    description: str = ""


@dataclass(frozen=True, slots=True)
class SecurityGroup:
    id: str
    name: str
    vpc_id: str
    tags: Mapping[str, str]
    ingress: frozenset[Rule]


# -- subnets ---------------------------------------------------------------------------------
def _subnets(pages: Iterable[Parsed]) -> list[Subnet]:
    found = []
    for page in pages:
        items = page.get("Subnets")
        for item in items if isinstance(items, list) else ():
            if isinstance(item, Mapping) and item.get("SubnetId"):
                found.append(
                    Subnet(
                        id=str(item["SubnetId"]),
                        zone=str(item.get("AvailabilityZone") or ""),
                        cidr=str(item.get("CidrBlock") or ""),
                        vpc_id=str(item.get("VpcId") or ""),
                        tags=tags_of(item.get("Tags")),
                    )
                )
    return found


async def _public_subnets(client: AwsClient, vpc_id: str) -> set[str]:
    """The VPC's subnets whose route table (theirs, else the main one) routes to an igw-."""
    pages = await client.paginate(
        "ec2",
        "DescribeRouteTables",
        {"Filters": filters({"vpc-id": [vpc_id]}), "MaxResults": 100},
        target=f"route tables of {vpc_id}",
    )
    explicit: dict[str, bool] = {}
    main_public = False
    for page in pages:
        tables = page.get("RouteTables")
        for table in tables if isinstance(tables, list) else ():
            if not isinstance(table, Mapping):
                continue
            routes = table.get("Routes")
            public = any(
                isinstance(r, Mapping) and str(r.get("GatewayId") or "").startswith("igw")
                for r in (routes if isinstance(routes, list) else ())
            )
            associations = table.get("Associations")
            for association in associations if isinstance(associations, list) else ():
                if not isinstance(association, Mapping):
                    continue
                if association.get("Main"):
                    main_public = public
                elif association.get("SubnetId"):
                    explicit[str(association["SubnetId"])] = public
    subnets = await client.paginate(
        "ec2",
        "DescribeSubnets",
        {"Filters": filters({"vpc-id": [vpc_id]})},
        target=f"subnets of {vpc_id}",
    )
    return {s.id for s in _subnets(subnets) if explicit.get(s.id, main_public)}


async def choose_subnets(
    client: AwsClient,
    *,
    vpc_id: str,
    tagging: ClusterTagging,
    internal: bool,
    annotated: Sequence[str],
    where: str,
    zones: ZoneCache | None = None,
    own_subnet: Callable[[], Awaitable[str]] | None = None,
) -> list[Subnet]:
    """The load balancer's subnets (see the module docstring); an AwsError naming the fix
    when there are none."""
    if annotated:
        return await _annotated_subnets(client, annotated, vpc_id=vpc_id, where=where)
    pages = await client.paginate(
        "ec2",
        "DescribeSubnets",
        {"Filters": filters({"vpc-id": [vpc_id]})},
        target=f"subnets of {vpc_id}",
    )
    candidates = [
        s
        for s in _subnets(pages)
        if tagging.has_cluster_tag(s.tags)
        or not any(k.startswith(CLUSTER_TAG_PREFIX) or k == LEGACY_CLUSTER_TAG for k in s.tags)
    ]
    if not candidates and own_subnet is not None:
        # Upstream's fallback: no subnet may be the cluster's, so this instance's own.
        own = await own_subnet()
        if own:
            log.warning("aws.subnets-fallback", vpc=vpc_id, subnet=own, where=where)
            candidates = _subnets(
                [await client.call("ec2", "DescribeSubnets", {"SubnetIds": [own]}, target=where)]
            )
    if not internal:
        public = await _public_subnets(client, vpc_id)
        candidates = [s for s in candidates if s.id in public]
    role = ROLE_INTERNAL_ELB if internal else ROLE_ELB
    by_zone: dict[str, Subnet] = {}
    for subnet in sorted(candidates, key=lambda s: s.id):
        if not subnet.zone:
            continue
        held = by_zone.get(subnet.zone)
        if held is None or (
            (role in subnet.tags, tagging.has_cluster_tag(subnet.tags))
            > (role in held.tags, tagging.has_cluster_tag(held.tags))
        ):
            by_zone[subnet.zone] = subnet
    if zones is not None and by_zone:
        # Upstream's: Local, Wavelength and Outposts zones carry no NLB or Classic ELB.
        types = await zones.zone_types(by_zone)
        by_zone = {z: s for z, s in by_zone.items() if types.get(z, REGULAR_ZONE) == REGULAR_ZONE}
    if not by_zone:
        kind = "internal" if internal else "internet-facing (routed to an internet gateway)"
        raise AwsError(
            f"no {kind} subnet of {vpc_id} for the load balancer; tag one per zone "
            f"{role}=1 (and {tagging.key}), or name them in the "
            "service.beta.kubernetes.io/aws-load-balancer-subnets annotation",
            service="ec2",
            action="DescribeSubnets",
            target=where,
        )
    return [by_zone[zone] for zone in sorted(by_zone)]


async def _annotated_subnets(
    client: AwsClient, names: Sequence[str], *, vpc_id: str, where: str
) -> list[Subnet]:
    ids = [n for n in names if n.startswith("subnet-")]
    tagged = [n for n in names if not n.startswith("subnet-")]
    found: list[Subnet] = []
    if ids:
        found += _subnets(
            [await client.call("ec2", "DescribeSubnets", {"SubnetIds": ids}, target=where)]
        )
    if tagged:
        answer = await client.call(
            "ec2",
            "DescribeSubnets",
            {"Filters": filters({"tag:Name": tagged, "vpc-id": [vpc_id]})},  # upstream's scope
            target=where,
        )
        found += _subnets([answer])
    known = {s.id for s in found} | {s.tags.get("Name", "") for s in found}
    missing = [n for n in names if n not in known]
    if missing:
        raise AwsError(
            f"the subnets annotation names subnets EC2 does not know ({', '.join(missing)}); "
            "fix service.beta.kubernetes.io/aws-load-balancer-subnets",
            service="ec2",
            action="DescribeSubnets",
            target=where,
        )
    return list({s.id: s for s in found}.values())


# -- security groups ---------------------------------------------------------------------------
def _rules(items: object) -> frozenset[Rule]:
    rules: set[Rule] = set()
    for perm in items if isinstance(items, list) else ():
        if not isinstance(perm, Mapping):
            continue
        protocol = str(perm.get("IpProtocol") or "")
        low = perm.get("FromPort")
        high = perm.get("ToPort")
        low = low if isinstance(low, int) else -1
        high = high if isinstance(high, int) else -1
        ranges = perm.get("IpRanges")
        for r in ranges if isinstance(ranges, list) else ():
            if isinstance(r, Mapping) and r.get("CidrIp"):
                rules.add(
                    Rule(
                        protocol,
                        low,
                        high,
                        cidr=str(r["CidrIp"]),
                        description=str(r.get("Description") or ""),
                    )
                )
        pairs = perm.get("UserIdGroupPairs")
        for p in pairs if isinstance(pairs, list) else ():
            if isinstance(p, Mapping) and p.get("GroupId"):
                rules.add(
                    Rule(
                        protocol,
                        low,
                        high,
                        group=str(p["GroupId"]),
                        description=str(p.get("Description") or ""),
                    )
                )
    return frozenset(rules)


def _groups(pages: Iterable[Parsed]) -> list[SecurityGroup]:
    found = []
    for page in pages:
        items = page.get("SecurityGroups")
        for item in items if isinstance(items, list) else ():
            if isinstance(item, Mapping) and item.get("GroupId"):
                found.append(
                    SecurityGroup(
                        id=str(item["GroupId"]),
                        name=str(item.get("GroupName") or ""),
                        vpc_id=str(item.get("VpcId") or ""),
                        tags=tags_of(item.get("Tags")),
                        ingress=_rules(item.get("IpPermissions")),
                    )
                )
    return found


async def describe_groups(
    client: AwsClient,
    *,
    ids: Sequence[str] = (),
    spec: Mapping[str, Sequence[str]] | None = None,
    target: str,
) -> list[SecurityGroup]:
    """Security groups by ID (unknown ones left out) or by filters."""
    if ids:
        wanted = sorted(set(ids))
        answer = await client.paginate(
            "ec2",
            "DescribeSecurityGroups",
            {"Filters": filters({"group-id": wanted})},
            target=target,
        )
        return _groups(answer)
    params: dict[str, object] = {"MaxResults": 1000}
    if spec:
        params["Filters"] = filters(spec)
    return _groups(await client.paginate("ec2", "DescribeSecurityGroups", params, target=target))


async def find_group(client: AwsClient, *, name: str, vpc_id: str) -> SecurityGroup | None:
    found = await describe_groups(
        client, spec={"group-name": [name], "vpc-id": [vpc_id]}, target=f"security group {name}"
    )
    return found[0] if found else None


async def create_group(
    client: AwsClient, *, name: str, description: str, vpc_id: str, tags: Mapping[str, str]
) -> SecurityGroup:
    """A new group (TagSpecifications: it is never untagged); a group of that name made
    meanwhile (a retried call, another replica) is taken instead."""
    try:
        answer = await client.call(
            "ec2",
            "CreateSecurityGroup",
            {
                "GroupName": name,
                "Description": description,
                "VpcId": vpc_id,
                "TagSpecifications": [
                    {
                        "ResourceType": "security-group",
                        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                    }
                ],
            },
            target=f"security group {name}",
        )
    except AwsError as exc:
        if exc.code != "InvalidGroup.Duplicate":
            raise
        found = await find_group(client, name=name, vpc_id=vpc_id)
        if found is None:
            raise
        return found
    return SecurityGroup(str(answer.get("GroupId") or ""), name, vpc_id, dict(tags), frozenset())


def _permissions(rules: Iterable[Rule]) -> list[dict[str, object]]:
    perms: list[dict[str, object]] = []
    for rule in sorted(rules):
        perm: dict[str, object] = {"IpProtocol": rule.protocol}
        if rule.protocol != "-1":
            perm["FromPort"] = rule.from_port
            perm["ToPort"] = rule.to_port
        source: dict[str, object] = {}
        if rule.description:
            source["Description"] = rule.description
        if rule.group:
            perm["UserIdGroupPairs"] = [{"GroupId": rule.group, **source}]
        else:
            perm["IpRanges"] = [{"CidrIp": rule.cidr, **source}]
        perms.append(perm)
    return perms


async def _ingress(client: AwsClient, action: str, group: str, rules: Sequence[Rule]) -> None:
    """One `AuthorizeSecurityGroupIngress` or `RevokeSecurityGroupIngress` call for `rules`."""
    await client.call(
        "ec2",
        action,
        {"GroupId": group, "IpPermissions": _permissions(rules)},
        target=f"security group {group}",
    )


async def authorize(client: AwsClient, group: str, rules: Iterable[Rule]) -> None:
    """Add `rules` to `group` (one call; rules it has already are success)."""
    wanted = list(rules)
    if not wanted:
        return
    try:
        await _ingress(client, "AuthorizeSecurityGroupIngress", group, wanted)
    except AwsError as exc:
        if exc.code != "InvalidPermission.Duplicate":
            raise
        for rule in wanted:  # one at a time: the duplicate alone is skipped
            try:
                await _ingress(client, "AuthorizeSecurityGroupIngress", group, [rule])
            except AwsError as again:
                if again.code != "InvalidPermission.Duplicate":
                    raise


async def revoke(client: AwsClient, group: str, rules: Iterable[Rule]) -> None:
    """Remove `rules` from `group` (gone already: success)."""
    wanted = list(rules)
    if not wanted:
        return
    try:
        await _ingress(client, "RevokeSecurityGroupIngress", group, wanted)
    except AwsError as exc:
        if exc.code not in ("InvalidPermission.NotFound", "InvalidGroup.NotFound"):
            raise


async def delete_group(client: AwsClient, group: str, *, why: str) -> None:
    """Delete `group`; gone already is success; still in use (a load balancer's network
    interfaces are detaching) is RetryAfter(DEPENDENCY_RETRY_S)."""
    try:
        await client.call(
            "ec2", "DeleteSecurityGroup", {"GroupId": group}, target=f"security group {group}"
        )
    except AwsError as exc:
        if exc.code == "InvalidGroup.NotFound":
            return
        if exc.code == "DependencyViolation":
            raise RetryAfter(
                DEPENDENCY_RETRY_S,
                f"security group {group} ({why}) is still in use, most likely by the network "
                "interfaces of a load balancer being deleted; trying again",
            ) from exc
        raise


def node_group(
    instance: Ec2Instance, groups: Mapping[str, SecurityGroup], tagging: ClusterTagging
) -> str:
    """Upstream's findSecurityGroupForInstance: the instance's cluster-tagged group, else
    its only group; "" when it has none. An AwsError when that is ambiguous."""
    tagged = [
        g
        for g in instance.security_groups
        if g in groups and tagging.has_cluster_tag(groups[g].tags)
    ]
    if len(tagged) > 1:
        raise AwsError(
            f"instance {instance.id} has several cluster-tagged security groups "
            f"({', '.join(tagged)}); tag only the Nodes' group with {tagging.key}",
            service="ec2",
            action="DescribeSecurityGroups",
        )
    if tagged:
        return tagged[0]
    if len(instance.security_groups) > 1:
        raise AwsError(
            f"instance {instance.id} has several security groups and none carries the cluster "
            f"tag; tag the Nodes' group with {tagging.key}",
            service="ec2",
            action="DescribeSecurityGroups",
        )
    return instance.security_groups[0] if instance.security_groups else ""


async def reconcile_rules(
    client: AwsClient,
    groups: Iterable[SecurityGroup],
    *,
    wanted: Mapping[str, frozenset[Rule]],
    ours: Callable[[Rule], bool],
    may_revoke: Callable[[SecurityGroup], bool] = lambda _g: True,
) -> None:
    """Make the rules `ours` picks out in each group exactly `wanted[group]` (none for a
    group not in `wanted`, when `may_revoke` allows): authorise what is missing, revoke
    what is left over, nothing else."""
    for group in groups:
        have = frozenset(r for r in group.ingress if ours(r))
        want = wanted.get(group.id, frozenset())
        if group.id not in wanted and not may_revoke(group):
            continue
        await revoke(client, group.id, have - want)
        await authorize(client, group.id, want - have)
