"""Network Load Balancers (ELBv2), as cloud-provider-aws's ensureLoadBalancerv2 makes them.

- **Create**: the NLB (scheme, one subnet per zone, tags), then per Service port a target
  group (upstream's name, `annotations.target_group_name`) with every target, then its
  listener (TCP, UDP, or TLS with the certificate and policy), then the cross-zone
  attribute when asked for.
- **Create** also takes the Elastic IPs / private addresses (one per subnet, in order) and
  the security groups (NLBSecurityGroupMode=Managed); an existing NLB's scheme and
  addresses cannot change (AWS): a changed annotation is refused.
- **Ensure** (the Service changed, or a re-verification): security groups (SetSecurityGroups),
  tags added or changed, access logs and cross-zone attributes; listeners, target groups and
  targets compared with the plan; a target group whose immutable fields changed is made
  anew under its new name, the listener pointed at it (ModifyListener), the old one
  deleted; health checks changed in place (ModifyTargetGroup); listeners of ports gone are
  deleted with their target groups. With `find_strays` (the caller has no record of what it
  made: a restart, a failure) it also lists the target groups named with the Service's
  prefix, attached to no load balancer and tagged with its UID: what a replica cut between
  CreateTargetGroup and CreateListener left under ports the Service no longer has; they
  are deleted like any group no port uses (one listing of every target group, 400 a page,
  and DescribeTags for the candidates alone).
- **Targets** (`update_targets`): only the instances added and removed, in calls of at most
  `TARGETS_PER_CALL`, deregistrations first.
- **Delete**, upstream's order: the NLB, its target groups (those its listeners used,
  those named for the Service's ports, so a group made just before a crash is found too,
  and, given the Service's UID, its stray groups), then the Nodes' security-group rules.
  Each step succeeds when its object is gone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from trio_ccm.cloud.aws.annotations import (
    EIP_ALLOCATIONS,
    PRIVATE_IPV4_ADDRESSES,
    SUBNETS,
    LoadBalancerPlan,
    NlbPort,
    refuse_scheme_change,
    target_group_prefix,
)
from trio_ccm.cloud.aws.codec import Parsed
from trio_ccm.cloud.aws.ec2 import add_changed_tags, apply_difference, chunks
from trio_ccm.cloud.aws.errors import AwsError
from trio_ccm.cloud.aws.network import Subnet, choose_subnets
from trio_ccm.cloud.aws.tags import SERVICE_UID_TAG, service_tags, tags_of
from trio_ccm.cloud.provider import ServiceRefused
from trio_ccm.logs import get_logger

if TYPE_CHECKING:
    from trio_ccm.cloud.aws.client import AwsClient
    from trio_ccm.cloud.aws.context import AwsContext

__all__ = [
    "CROSS_ZONE",
    "TARGETS_PER_CALL",
    "Nlb",
    "Nlbs",
    "every_page",
]

log = get_logger("trio_ccm.cloud.aws.elbv2")

TARGETS_PER_CALL: Final = 100
"""Upstream's register/deregister chunk size."""
CROSS_ZONE: Final = "load_balancing.cross_zone.enabled"
ACCESS_LOGS: Final = "access_logs.s3.enabled"
ACCESS_LOGS_BUCKET: Final = "access_logs.s3.bucket"
ACCESS_LOGS_PREFIX: Final = "access_logs.s3.prefix"
_GONE: Final = frozenset({"LoadBalancerNotFound", "TargetGroupNotFound", "ListenerNotFound"})
_PAGE_SIZE: Final = 400
_TAGS_PER_CALL: Final = 20


@dataclass(frozen=True, slots=True)
class Nlb:
    """An NLB as the provider knows it after an ensure: its target groups (ARN → name)."""

    arn: str
    name: str
    dns_name: str
    vpc_id: str
    subnet_ids: tuple[str, ...]
    target_groups: Mapping[str, str]


def _first(answer: Parsed, key: str) -> Mapping[str, object]:
    items = answer.get(key)
    if isinstance(items, list) and items and isinstance(items[0], Mapping):
        return items[0]
    return {}


def _items(answer: Parsed, key: str) -> list[Mapping[str, object]]:
    items = answer.get(key)
    return [i for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []


async def every_page(
    client: AwsClient, api: str, action: str, key: str, target: str
) -> list[Mapping[str, object]]:
    """Every item under `key` of an ELB API listing (`elb` or `elbv2`), Marker paging, 400
    a page."""
    found: list[Mapping[str, object]] = []
    marker = ""
    while True:
        params: dict[str, object] = {"PageSize": _PAGE_SIZE}
        if marker:
            params["Marker"] = marker
        answer = await client.call(api, action, params, target=target)
        found += _items(answer, key)
        marker = str(answer.get("NextMarker") or "")
        if not marker:
            return found


def _nlb(item: Mapping[str, object], target_groups: Mapping[str, str]) -> Nlb:
    zones = item.get("AvailabilityZones")
    return Nlb(
        arn=str(item.get("LoadBalancerArn") or ""),
        name=str(item.get("LoadBalancerName") or ""),
        dns_name=str(item.get("DNSName") or ""),
        vpc_id=str(item.get("VpcId") or ""),
        subnet_ids=tuple(
            str(z["SubnetId"])
            for z in (zones if isinstance(zones, list) else ())
            if isinstance(z, Mapping) and z.get("SubnetId")
        ),
        target_groups=dict(target_groups),
    )


def _subnet_mappings(plan: LoadBalancerPlan, subnet_ids: Sequence[str]) -> list[dict[str, str]]:
    """Upstream's createSubnetMappings: the i-th Elastic IP / private address to the i-th
    subnet; a count that differs is refused (nothing is made)."""
    for key, values in (
        (EIP_ALLOCATIONS, plan.eip_allocations),
        (PRIVATE_IPV4_ADDRESSES, plan.private_ipv4_addresses),
    ):
        if values and len(values) != len(subnet_ids):
            raise ServiceRefused(
                f"Service {plan.service}: annotation {key}: {len(values)} given for "
                f"{len(subnet_ids)} subnets ({', '.join(subnet_ids)}); give one per subnet, "
                f"in that order (or choose the subnets with {SUBNETS})"
            )
    mappings = []
    for index, subnet in enumerate(subnet_ids):
        mapping = {"SubnetId": subnet}
        if plan.eip_allocations:
            mapping["AllocationId"] = plan.eip_allocations[index]
        if plan.private_ipv4_addresses:
            mapping["PrivateIPv4Address"] = plan.private_ipv4_addresses[index]
        mappings.append(mapping)
    return mappings


def _refuse_address_change(plan: LoadBalancerPlan, found: Mapping[str, object]) -> None:
    """An NLB's addresses are fixed at creation: a changed annotation is refused."""
    zones = found.get("AvailabilityZones")
    eips: list[str] = []
    addresses: list[str] = []
    for zone in zones if isinstance(zones, list) else ():
        items = zone.get("LoadBalancerAddresses") if isinstance(zone, Mapping) else None
        for item in items if isinstance(items, list) else ():
            if isinstance(item, Mapping):
                if item.get("AllocationId"):
                    eips.append(str(item["AllocationId"]))
                if item.get("PrivateIPv4Address"):
                    addresses.append(str(item["PrivateIPv4Address"]))
    for key, wanted, held in (
        (EIP_ALLOCATIONS, plan.eip_allocations, eips),
        (PRIVATE_IPV4_ADDRESSES, plan.private_ipv4_addresses, addresses),
    ):
        # AWS answers the private address it chose for an internal NLB: only a chosen one
        # is compared (an Elastic IP is always the user's).
        if (wanted or key == EIP_ALLOCATIONS) and sorted(wanted) != sorted(held):
            raise ServiceRefused(
                f"Service {plan.service}: annotation {key}: the NLB {plan.name} has "
                f"{', '.join(held) or 'none'} and AWS cannot change an NLB's addresses; set "
                "the annotation back, or delete the Service and create it again"
            )


class Nlbs:
    """The ELBv2 calls (see the module docstring)."""

    def __init__(self, context: AwsContext) -> None:
        self._context = context

    async def describe(self, name: str) -> Mapping[str, object] | None:
        """The NLB named `name` (DescribeLoadBalancers), None when there is none."""
        try:
            answer = await self._context.client.call(
                "elbv2", "DescribeLoadBalancers", {"Names": [name]}, target=f"NLB {name}"
            )
        except AwsError as exc:
            if exc.code == "LoadBalancerNotFound":
                return None
            raise
        found = _first(answer, "LoadBalancers")
        return found or None

    async def target_groups_of(self, arn: str, name: str) -> list[Mapping[str, object]]:
        answer = await self._context.client.call(
            "elbv2", "DescribeTargetGroups", {"LoadBalancerArn": arn}, target=f"NLB {name}"
        )
        return _items(answer, "TargetGroups")

    async def target_groups_named(self, names: Sequence[str]) -> list[Mapping[str, object]]:
        """The target groups among `names` that exist (one call per name: AWS fails the
        whole call when one is missing)."""
        found = []
        for name in names:
            try:
                answer = await self._context.client.call(
                    "elbv2",
                    "DescribeTargetGroups",
                    {"Names": [name]},
                    target=f"target group {name}",
                )
            except AwsError as exc:
                if exc.code == "TargetGroupNotFound":
                    continue
                raise
            found += _items(answer, "TargetGroups")
        return found

    async def stray_groups(
        self, service: str, uid: str, besides: Sequence[Mapping[str, object]]
    ) -> list[Mapping[str, object]]:
        """Target groups named with the prefix of the Service `service` (its key), attached
        to no load balancer, tagged with its UID `uid`, other than those in `besides` (see
        the module docstring)."""
        client = self._context.client
        prefix = target_group_prefix(service)
        known = {str(g.get("TargetGroupArn")) for g in besides}
        candidates = [
            g
            for g in await every_page(
                client, "elbv2", "DescribeTargetGroups", "TargetGroups", f"target groups {prefix}*"
            )
            if str(g.get("TargetGroupName") or "").startswith(prefix)
            and not g.get("LoadBalancerArns")
            and str(g.get("TargetGroupArn")) not in known
        ]
        by_arn = {str(g.get("TargetGroupArn")): g for g in candidates}
        strays = []
        for chunk in chunks(sorted(by_arn), _TAGS_PER_CALL):
            answer = await client.call(
                "elbv2", "DescribeTags", {"ResourceArns": list(chunk)}, target=f"{prefix}*"
            )
            for item in _items(answer, "TagDescriptions"):
                tags = tags_of(item.get("Tags"))
                if tags.get(SERVICE_UID_TAG) == uid and self._context.tagging.owned(tags):
                    strays.append(by_arn[str(item.get("ResourceArn"))])
        return strays

    # -- ensure ----------------------------------------------------------------------------
    async def ensure(
        self,
        plan: LoadBalancerPlan,
        instance_ids: Sequence[str],
        *,
        security_groups: Sequence[str] = (),
        found: Mapping[str, object] | None = None,
        find_strays: bool = False,
    ) -> Nlb:
        """Create or update the NLB to match `plan`, balancing to `instance_ids`, with
        `security_groups` (none: the NLB has no group; `found`: its description, if the
        caller has it)."""
        context = self._context
        client = context.client
        where = f"NLB {plan.name} (Service {plan.service})"
        tags = service_tags(context.tagging, plan.service, plan.uid, plan.extra_tags)
        if found is None:
            found = await self.describe(plan.name)
        listeners: list[Mapping[str, object]] = []
        groups: list[Mapping[str, object]] = []
        created = found is None
        if found is None:
            vpc_id = await context.vpc_id()
            subnets: list[Subnet] = await choose_subnets(
                client,
                vpc_id=vpc_id,
                tagging=context.tagging,
                internal=plan.internal,
                annotated=plan.subnets,
                where=where,
                zones=context.zones,
                own_subnet=context.own_subnet,
            )
            params: dict[str, object] = {
                "Name": plan.name,
                "Type": "network",
                "Scheme": "internal" if plan.internal else "internet-facing",
                "SubnetMappings": _subnet_mappings(plan, [s.id for s in subnets]),
                "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
            }
            if security_groups:
                params["SecurityGroups"] = list(security_groups)
            answer = await client.call("elbv2", "CreateLoadBalancer", params, target=where)
            found = _first(answer, "LoadBalancers")
            log.info("aws.nlb-created", load_balancer=plan.name, service=plan.service)
            # A crash between the target groups and their listeners leaves groups no
            # listener names: find them by name.
            groups = await self.target_groups_named([p.target_group for p in plan.nlb_ports])
        else:
            refuse_scheme_change(plan, str(found.get("Scheme") or ""))
            _refuse_address_change(plan, found)
            arn = str(found.get("LoadBalancerArn") or "")
            held = found.get("SecurityGroups")
            have = [str(g) for g in (held if isinstance(held, list) else ())]
            if security_groups and set(have) != set(security_groups):
                await client.call(
                    "elbv2",
                    "SetSecurityGroups",
                    {"LoadBalancerArn": arn, "SecurityGroups": list(security_groups)},
                    target=where,
                )
            await add_changed_tags(
                self._context.client, "elbv2", {"ResourceArns": [arn]}, tags, where=where
            )
            listeners = _items(
                await client.call(
                    "elbv2", "DescribeListeners", {"LoadBalancerArn": arn}, target=where
                ),
                "Listeners",
            )
            groups = await self.target_groups_of(arn, plan.name)
            attached = {str(g.get("TargetGroupName")) for g in groups}
            groups += await self.target_groups_named(
                [p.target_group for p in plan.nlb_ports if p.target_group not in attached]
            )
            if find_strays:
                groups += await self.stray_groups(plan.service, plan.uid, groups)
        arn = str(found.get("LoadBalancerArn") or "")
        vpc_id = str(found.get("VpcId") or "") or await context.vpc_id()
        by_name = {str(g.get("TargetGroupName")): g for g in groups}
        by_port = {int(str(listener.get("Port") or 0)): listener for listener in listeners}
        used: dict[str, str] = {}
        for port in plan.nlb_ports:
            group = by_name.get(port.target_group)
            if group is None:
                group_arn = await self._create_group(plan, port, vpc_id, tags, where)
                await self.register(group_arn, instance_ids, [], where=where)
            else:
                group_arn = str(group.get("TargetGroupArn") or "")
                await self._sync_group(group, port, instance_ids, where)
            if plan.target_group_attributes:
                await client.call(
                    "elbv2",
                    "ModifyTargetGroupAttributes",
                    {
                        "TargetGroupArn": group_arn,
                        "Attributes": [
                            {"Key": k, "Value": v} for k, v in plan.target_group_attributes.items()
                        ],
                    },
                    target=where,
                )
            used[group_arn] = port.target_group
            await self._sync_listener(arn, by_port.pop(port.port, None), port, group_arn, where)
        for listener in by_port.values():  # ports the Service no longer has
            await self._forgiving(
                "DeleteListener", {"ListenerArn": str(listener.get("ListenerArn"))}, where
            )
        for name, group in by_name.items():
            group_arn = str(group.get("TargetGroupArn") or "")
            if group_arn not in used:
                await self._forgiving("DeleteTargetGroup", {"TargetGroupArn": group_arn}, where)
                log.info("aws.target-group-deleted", target_group=name, load_balancer=plan.name)
        await self._sync_attributes(arn, plan, created=created, where=where)
        return _nlb(found, used)

    async def _create_group(
        self,
        plan: LoadBalancerPlan,
        port: NlbPort,
        vpc_id: str,
        tags: Mapping[str, str],
        where: str,
    ) -> str:
        health = port.health
        params: dict[str, object] = {
            "Name": port.target_group,
            "Protocol": port.target_protocol,
            "Port": port.node_port,
            "VpcId": vpc_id,
            "TargetType": "instance",
            "HealthCheckProtocol": health.protocol,
            "HealthCheckPort": health.port,
            "HealthCheckIntervalSeconds": health.interval,
            "HealthCheckTimeoutSeconds": health.timeout,
            "HealthyThresholdCount": health.healthy,
            "UnhealthyThresholdCount": health.unhealthy,
            "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
        }
        if health.protocol != "TCP":
            params["HealthCheckPath"] = health.path
        try:
            answer = await self._context.client.call(
                "elbv2", "CreateTargetGroup", params, target=where
            )
        except AwsError as exc:
            if exc.code != "DuplicateTargetGroupName":
                raise
            existing = await self.target_groups_named([port.target_group])
            if not existing:
                raise
            return str(existing[0].get("TargetGroupArn") or "")
        log.info(
            "aws.target-group-created", target_group=port.target_group, load_balancer=plan.name
        )
        return str(_first(answer, "TargetGroups").get("TargetGroupArn") or "")

    async def _sync_group(
        self,
        group: Mapping[str, object],
        port: NlbPort,
        instance_ids: Sequence[str],
        where: str,
    ) -> None:
        """Targets and the health check's mutable fields of a group kept."""
        client = self._context.client
        group_arn = str(group.get("TargetGroupArn") or "")
        health = port.health
        change: dict[str, object] = {}
        if str(group.get("HealthCheckPort") or "") != health.port:
            change["HealthCheckPort"] = health.port
        if group.get("HealthCheckTimeoutSeconds") != health.timeout:
            change["HealthCheckTimeoutSeconds"] = health.timeout
        if (group.get("HealthyThresholdCount"), group.get("UnhealthyThresholdCount")) != (
            health.healthy,
            health.unhealthy,
        ):
            change["HealthyThresholdCount"] = health.healthy
            change["UnhealthyThresholdCount"] = health.unhealthy
        if health.protocol != "TCP" and str(group.get("HealthCheckPath") or "") != health.path:
            change["HealthCheckPath"] = health.path
        if change:
            await client.call(
                "elbv2", "ModifyTargetGroup", {"TargetGroupArn": group_arn, **change}, target=where
            )
        answer = await client.call(
            "elbv2", "DescribeTargetHealth", {"TargetGroupArn": group_arn}, target=where
        )
        registered = []
        for item in _items(answer, "TargetHealthDescriptions"):
            target = item.get("Target")
            health_state = item.get("TargetHealth")
            reason = health_state.get("Reason") if isinstance(health_state, Mapping) else None
            if isinstance(target, Mapping) and reason != "Target.DeregistrationInProgress":
                registered.append(str(target.get("Id") or ""))
        await self.register(group_arn, instance_ids, registered, where=where)

    async def register(
        self, group_arn: str, wanted: Sequence[str], registered: Sequence[str], *, where: str
    ) -> None:
        """Make the group's targets `wanted`, knowing it holds `registered`: deregister the
        removed, then register the added, `TARGETS_PER_CALL` per call."""
        await apply_difference(
            self._context.client,
            "elbv2",
            remove="DeregisterTargets",
            add="RegisterTargets",
            registered=registered,
            wanted=wanted,
            per_call=TARGETS_PER_CALL,
            params=lambda chunk: {
                "TargetGroupArn": group_arn,
                "Targets": [{"Id": i} for i in chunk],
            },
            where=where,
        )

    async def _sync_listener(
        self,
        arn: str,
        listener: Mapping[str, object] | None,
        port: NlbPort,
        group_arn: str,
        where: str,
    ) -> None:
        params: dict[str, object] = {
            "Port": port.port,
            "Protocol": port.protocol,
            "DefaultActions": [{"Type": "forward", "TargetGroupArn": group_arn}],
        }
        if port.protocol == "TLS":
            params["Certificates"] = [{"CertificateArn": port.certificate}]
            if port.ssl_policy:
                params["SslPolicy"] = port.ssl_policy
        client = self._context.client
        if listener is None:
            await client.call(
                "elbv2", "CreateListener", {"LoadBalancerArn": arn, **params}, target=where
            )
            return
        actions = listener.get("DefaultActions")
        forwards = [
            str(a.get("TargetGroupArn") or "")
            for a in (actions if isinstance(actions, list) else ())
            if isinstance(a, Mapping)
        ]
        certificates = listener.get("Certificates")
        certificate = ""
        if isinstance(certificates, list) and certificates and isinstance(certificates[0], Mapping):
            certificate = str(certificates[0].get("CertificateArn") or "")
        same = (
            listener.get("Protocol") == port.protocol
            and forwards == [group_arn]
            and certificate == port.certificate
            and (
                port.protocol != "TLS"
                or not port.ssl_policy
                or listener.get("SslPolicy") == port.ssl_policy
            )
        )
        if not same:
            await client.call(
                "elbv2",
                "ModifyListener",
                {"ListenerArn": str(listener.get("ListenerArn")), **params},
                target=where,
            )

    async def _sync_attributes(
        self, arn: str, plan: LoadBalancerPlan, *, created: bool, where: str
    ) -> None:
        """Upstream's reconcileLBAttributes: cross-zone and access logs (the bucket and
        prefix only while logs are on: AWS refuses an empty bucket)."""
        client = self._context.client
        logs = plan.access_log
        wanted = {
            CROSS_ZONE: "true" if plan.cross_zone else "false",
            ACCESS_LOGS: "true" if logs.enabled else "false",
        }
        if logs.enabled:
            wanted[ACCESS_LOGS_BUCKET] = logs.bucket
            wanted[ACCESS_LOGS_PREFIX] = logs.prefix
        if created:
            current = {CROSS_ZONE: "false", ACCESS_LOGS: "false"}  # AWS's defaults
        else:
            answer = await client.call(
                "elbv2", "DescribeLoadBalancerAttributes", {"LoadBalancerArn": arn}, target=where
            )
            current = {str(a.get("Key")): str(a.get("Value")) for a in _items(answer, "Attributes")}
            current.setdefault(CROSS_ZONE, "false")
            current.setdefault(ACCESS_LOGS, "false")
        change = [{"Key": k, "Value": v} for k, v in wanted.items() if current.get(k, "") != v]
        if not change:
            return
        await client.call(
            "elbv2",
            "ModifyLoadBalancerAttributes",
            {"LoadBalancerArn": arn, "Attributes": change},
            target=where,
        )

    async def _forgiving(self, action: str, params: Mapping[str, object], where: str) -> None:
        """`action`, gone already being success."""
        try:
            await self._context.client.call("elbv2", action, params, target=where)
        except AwsError as exc:
            if exc.code not in _GONE:
                raise

    # -- delete ----------------------------------------------------------------------------
    async def delete(
        self,
        name: str,
        group_names: Sequence[str],
        *,
        where: str,
        strays: tuple[str, str] | None = None,
    ) -> bool:
        """Delete the NLB and its target groups (upstream's order; `strays`: the Service's
        key and UID, to also delete its stray groups); whether there was anything to
        delete."""
        found = await self.describe(name)
        groups: list[Mapping[str, object]] = []
        if found is not None:
            arn = str(found.get("LoadBalancerArn") or "")
            groups = await self.target_groups_of(arn, name)
            await self._forgiving("DeleteLoadBalancer", {"LoadBalancerArn": arn}, where)
            log.info("aws.nlb-deleted", load_balancer=name)
        attached = {str(g.get("TargetGroupName")) for g in groups}
        groups += await self.target_groups_named([n for n in group_names if n not in attached])
        if strays is not None:
            groups += await self.stray_groups(*strays, groups)
        for group in groups:
            await self._forgiving(
                "DeleteTargetGroup", {"TargetGroupArn": str(group.get("TargetGroupArn"))}, where
            )
        return found is not None or bool(groups)
