"""Network Load Balancers (ELBv2), as cloud-provider-aws's ensureLoadBalancerv2 makes them.

- **Create**: the NLB (scheme, one subnet per zone, tags), then per Service port a target
  group (upstream's name, `annotations.target_group_name`) with every target, then its
  listener (TCP, UDP, or TLS with the certificate and policy), then the cross-zone
  attribute when asked for.
- **Ensure** (the Service changed, or a re-verification): listeners, target groups and
  targets compared with the plan; a target group whose immutable fields changed is made
  anew under its new name, the listener pointed at it (ModifyListener), the old one
  deleted; health checks changed in place (ModifyTargetGroup); listeners of ports gone are
  deleted with their target groups.
- **Targets** (`update_targets`): only the instances added and removed, in calls of at most
  `TARGETS_PER_CALL`, deregistrations first.
- **Delete**, upstream's order: the NLB, its target groups (those its listeners used and
  those named for the Service's ports, so a group made just before a crash is found too),
  then the Nodes' security-group rules. Each step succeeds when its object is gone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from trio_ccm.cloud.aws.annotations import LoadBalancerPlan, NlbPort
from trio_ccm.cloud.aws.codec import Parsed
from trio_ccm.cloud.aws.ec2 import apply_difference
from trio_ccm.cloud.aws.errors import AwsError
from trio_ccm.cloud.aws.network import Subnet, choose_subnets
from trio_ccm.cloud.aws.tags import service_tags
from trio_ccm.logs import get_logger

if TYPE_CHECKING:
    from trio_ccm.cloud.aws.context import AwsContext

__all__ = [
    "CROSS_ZONE",
    "TARGETS_PER_CALL",
    "Nlb",
    "Nlbs",
]

log = get_logger("trio_ccm.cloud.aws.elbv2")

TARGETS_PER_CALL: Final = 100
"""Upstream's register/deregister chunk size."""
CROSS_ZONE: Final = "load_balancing.cross_zone.enabled"
_GONE: Final = frozenset({"LoadBalancerNotFound", "TargetGroupNotFound", "ListenerNotFound"})


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

    # -- ensure ----------------------------------------------------------------------------
    async def ensure(self, plan: LoadBalancerPlan, instance_ids: Sequence[str]) -> Nlb:
        """Create or update the NLB to match `plan`, balancing to `instance_ids`."""
        context = self._context
        client = context.client
        where = f"NLB {plan.name} (Service {plan.service})"
        tags = service_tags(context.tagging, plan.service, plan.uid, plan.extra_tags)
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
            )
            answer = await client.call(
                "elbv2",
                "CreateLoadBalancer",
                {
                    "Name": plan.name,
                    "Type": "network",
                    "Scheme": "internal" if plan.internal else "internet-facing",
                    "SubnetMappings": [{"SubnetId": s.id} for s in subnets],
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                },
                target=where,
            )
            found = _first(answer, "LoadBalancers")
            log.info("aws.nlb-created", load_balancer=plan.name, service=plan.service)
            # A crash between the target groups and their listeners leaves groups no
            # listener names: find them by name.
            groups = await self.target_groups_named([p.target_group for p in plan.nlb_ports])
        else:
            arn = str(found.get("LoadBalancerArn") or "")
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
        await self._sync_cross_zone(arn, plan.cross_zone, created=created, where=where)
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

    async def _sync_cross_zone(self, arn: str, wanted: bool, *, created: bool, where: str) -> None:
        client = self._context.client
        value = "true" if wanted else "false"
        if created:
            if not wanted:
                return  # AWS's default
        else:
            answer = await client.call(
                "elbv2", "DescribeLoadBalancerAttributes", {"LoadBalancerArn": arn}, target=where
            )
            current = {str(a.get("Key")): str(a.get("Value")) for a in _items(answer, "Attributes")}
            if current.get(CROSS_ZONE, "false") == value:
                return
        await client.call(
            "elbv2",
            "ModifyLoadBalancerAttributes",
            {"LoadBalancerArn": arn, "Attributes": [{"Key": CROSS_ZONE, "Value": value}]},
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
    async def delete(self, name: str, group_names: Sequence[str], *, where: str) -> bool:
        """Delete the NLB and its target groups (upstream's order); whether there was
        anything to delete."""
        found = await self.describe(name)
        groups: list[Mapping[str, object]] = []
        if found is not None:
            arn = str(found.get("LoadBalancerArn") or "")
            groups = await self.target_groups_of(arn, name)
            await self._forgiving("DeleteLoadBalancer", {"LoadBalancerArn": arn}, where)
            log.info("aws.nlb-deleted", load_balancer=name)
        attached = {str(g.get("TargetGroupName")) for g in groups}
        groups += await self.target_groups_named([n for n in group_names if n not in attached])
        for group in groups:
            await self._forgiving(
                "DeleteTargetGroup", {"TargetGroupArn": str(group.get("TargetGroupArn"))}, where
            )
        return found is not None or bool(groups)
