"""Classic ELBs, as cloud-provider-aws's EnsureLoadBalancer makes them without the nlb type.

- **Security group**: unless the `security-groups` annotation or the cloud-config's
  `ElbSecurityGroup` names one, the load balancer gets its own, `k8s-elb-<name>`
  ("Security group for Kubernetes ELB <name> (<namespace>/<name>)", cluster-tagged
  `owned`), open on each port and to ICMP fragmentation-needed from the source ranges;
  `extra-security-groups` are added after it.
- **Create / ensure**: the load balancer (listeners, subnets, groups, scheme, tags); on an
  existing one, as upstream: subnets attached and detached by difference, tags added or
  changed, listeners added and removed by difference, the groups applied when they
  differ; then the health check (ConfigureHealthCheck), the attributes (access logs,
  cross-zone, connection draining, idle timeout) and the policies (proxy protocol on the
  instance ports, the SSL negotiation policy on SSL/HTTPS listeners) set only where they
  differ; instances registered by difference. The scheme cannot change (AWS); upstream
  ignores a change of `internal`, trio-ccm refuses it (`loadbalancers.py`).
- **Instances** (`register`): only the added and removed, `INSTANCES_PER_CALL` per call,
  deregistrations first.
- **Delete**: the load balancer, then its own group (kept if anything still uses it: a
  RetryAfter while the load balancer's network interfaces detach). The Nodes' group rules
  are the provider's (`loadbalancers.py`), revoked before the group goes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from trio_ccm.cloud.aws.annotations import ClbListener, LoadBalancerPlan, refuse_scheme_change
from trio_ccm.cloud.aws.codec import Parsed
from trio_ccm.cloud.aws.ec2 import add_changed_tags, apply_difference
from trio_ccm.cloud.aws.errors import AwsError
from trio_ccm.cloud.aws.network import (
    Rule,
    choose_subnets,
    create_group,
    find_group,
    reconcile_rules,
)
from trio_ccm.cloud.aws.tags import service_tags
from trio_ccm.logs import get_logger

if TYPE_CHECKING:
    from trio_ccm.cloud.aws.context import AwsContext

__all__ = ["INSTANCES_PER_CALL", "Clb", "Clbs", "group_name"]

log = get_logger("trio_ccm.cloud.aws.elb")

INSTANCES_PER_CALL: Final = 100
PROXY_PROTOCOL_POLICY: Final = "k8s-proxyprotocol-enabled"
"""Upstream's name for the proxy-protocol backend policy."""
SSL_POLICY_PREFIX: Final = "k8s-SSLNegotiationPolicy-"
SSL_POLICY_FORMAT: Final = SSL_POLICY_PREFIX + "{}"
"""Upstream's name for an SSL negotiation policy made from a predefined one."""


def group_name(name: str) -> str:
    """The load balancer's own security group (upstream's name)."""
    return f"k8s-elb-{name}"


@dataclass(frozen=True, slots=True)
class Clb:
    """A Classic ELB as the provider knows it after an ensure."""

    name: str
    dns_name: str
    security_groups: tuple[str, ...]
    instances: frozenset[str]


def _description(answer: Parsed) -> Mapping[str, object] | None:
    items = answer.get("LoadBalancerDescriptions")
    if isinstance(items, list) and items and isinstance(items[0], Mapping):
        return items[0]
    return None


def _listener(item: Mapping[str, object]) -> ClbListener:
    return ClbListener(
        protocol=str(item.get("Protocol") or "").upper(),
        port=int(str(item.get("LoadBalancerPort") or 0)),
        instance_protocol=str(item.get("InstanceProtocol") or "").upper(),
        instance_port=int(str(item.get("InstancePort") or 0)),
        certificate=str(item.get("SSLCertificateId") or ""),
    )


def _aws_listener(listener: ClbListener) -> dict[str, object]:
    body: dict[str, object] = {
        "Protocol": listener.protocol,
        "LoadBalancerPort": listener.port,
        "InstanceProtocol": listener.instance_protocol,
        "InstancePort": listener.instance_port,
    }
    if listener.certificate:
        body["SSLCertificateId"] = listener.certificate
    return body


class Clbs:
    """The ELB (classic) calls (see the module docstring)."""

    def __init__(self, context: AwsContext) -> None:
        self._context = context

    async def describe(self, name: str) -> Mapping[str, object] | None:
        try:
            answer = await self._context.client.call(
                "elb",
                "DescribeLoadBalancers",
                {"LoadBalancerNames": [name]},
                target=f"Classic ELB {name}",
            )
        except AwsError as exc:
            if exc.code == "LoadBalancerNotFound":
                return None
            raise
        return _description(answer)

    async def _own_group(self, plan: LoadBalancerPlan, vpc_id: str) -> str:
        """The load balancer's own group, made if need be, open as the plan says."""
        client = self._context.client
        name = group_name(plan.name)
        group = await find_group(client, name=name, vpc_id=vpc_id)
        if group is None:
            group = await create_group(
                client,
                name=name,
                description=f"Security group for Kubernetes ELB {plan.name} ({plan.service})",
                vpc_id=vpc_id,
                tags=service_tags(self._context.tagging, plan.service, plan.uid, plan.extra_tags),
            )
            log.info("aws.security-group-created", group=group.id, load_balancer=plan.name)
        wanted = frozenset(
            [
                Rule("tcp", listener.port, listener.port, cidr=cidr)
                for listener in plan.clb_listeners
                for cidr in plan.source_ranges
            ]
            + [Rule("icmp", 3, 4, cidr=cidr) for cidr in plan.source_ranges]
        )
        await reconcile_rules(
            client, [group], wanted={group.id: wanted}, ours=lambda r: not r.group
        )
        return group.id

    async def ensure(self, plan: LoadBalancerPlan, instance_ids: Sequence[str]) -> Clb:
        """Create or update the Classic ELB to match `plan`, balancing to `instance_ids`."""
        context = self._context
        client = context.client
        where = f"Classic ELB {plan.name} (Service {plan.service})"
        vpc_id = await context.vpc_id()
        found = await self.describe(plan.name)
        if found is not None:
            refuse_scheme_change(plan, str(found.get("Scheme") or ""))
        groups = list(plan.security_groups)
        if not groups:
            groups = [context.config.elb_security_group or await self._own_group(plan, vpc_id)]
        groups += [g for g in plan.extra_security_groups if g not in groups]
        subnets = await choose_subnets(
            client,
            vpc_id=vpc_id,
            tagging=context.tagging,
            internal=plan.internal,
            annotated=plan.subnets,
            where=where,
            zones=context.zones,
            own_subnet=context.own_subnet,
        )
        tags = service_tags(context.tagging, plan.service, plan.uid, plan.extra_tags)
        if found is None:
            params: dict[str, object] = {
                "LoadBalancerName": plan.name,
                "Listeners": [_aws_listener(listener) for listener in plan.clb_listeners],
                "Subnets": [s.id for s in subnets],
                "SecurityGroups": groups,
                "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
            }
            if plan.internal:
                params["Scheme"] = "internal"
            await client.call("elb", "CreateLoadBalancer", params, target=where)
            log.info("aws.clb-created", load_balancer=plan.name, service=plan.service)
            found = await self.describe(plan.name)
            if found is None:
                raise AwsError(
                    "the Classic ELB just created is not listed yet; trying again",
                    service="elb",
                    action="DescribeLoadBalancers",
                    target=where,
                )
        else:
            await self._sync_subnets(plan, found, [s.id for s in subnets], where)
            await add_changed_tags(
                self._context.client, "elb", {"LoadBalancerNames": [plan.name]}, tags, where=where
            )
            await self._sync_listeners(plan, found, where)
            held = found.get("SecurityGroups")
            if [str(g) for g in (held if isinstance(held, list) else ())] != groups:
                await client.call(
                    "elb",
                    "ApplySecurityGroupsToLoadBalancer",
                    {"LoadBalancerName": plan.name, "SecurityGroups": groups},
                    target=where,
                )
        await self._sync_health(plan, found, where)
        await self._sync_attributes(plan, where)
        await self._sync_policies(plan, found, where)
        instances = found.get("Instances")
        registered = [
            str(i.get("InstanceId"))
            for i in (instances if isinstance(instances, list) else ())
            if isinstance(i, Mapping)
        ]
        await self.register(plan.name, instance_ids, registered, where=where)
        return Clb(
            name=plan.name,
            dns_name=str(found.get("DNSName") or ""),
            security_groups=tuple(groups),
            instances=frozenset(instance_ids),
        )

    async def _sync_listeners(
        self, plan: LoadBalancerPlan, found: Mapping[str, object], where: str
    ) -> None:
        described = found.get("ListenerDescriptions")
        have = {
            _listener(d["Listener"])
            for d in (described if isinstance(described, list) else ())
            if isinstance(d, Mapping) and isinstance(d.get("Listener"), Mapping)
        }
        want = set(plan.clb_listeners)
        gone = {listener.port for listener in have - want}
        client = self._context.client
        if gone:
            await client.call(
                "elb",
                "DeleteLoadBalancerListeners",
                {"LoadBalancerName": plan.name, "LoadBalancerPorts": sorted(gone)},
                target=where,
            )
        added = sorted(want - have, key=lambda listener: listener.port)
        if added:
            await client.call(
                "elb",
                "CreateLoadBalancerListeners",
                {"LoadBalancerName": plan.name, "Listeners": [_aws_listener(a) for a in added]},
                target=where,
            )

    async def _sync_subnets(
        self, plan: LoadBalancerPlan, found: Mapping[str, object], wanted: Sequence[str], where: str
    ) -> None:
        """Upstream's subnet sync: detach the subnets no longer chosen, attach the new."""
        held = found.get("Subnets")
        have = {str(s) for s in (held if isinstance(held, list) else ())}
        client = self._context.client
        gone = sorted(have - set(wanted))
        added = sorted(set(wanted) - have)
        if gone:
            await client.call(
                "elb",
                "DetachLoadBalancerFromSubnets",
                {"LoadBalancerName": plan.name, "Subnets": gone},
                target=where,
            )
        if added:
            await client.call(
                "elb",
                "AttachLoadBalancerToSubnets",
                {"LoadBalancerName": plan.name, "Subnets": added},
                target=where,
            )
        if gone or added:
            log.info("aws.clb-subnets-changed", load_balancer=plan.name, added=added, gone=gone)

    async def _sync_policies(
        self, plan: LoadBalancerPlan, found: Mapping[str, object], where: str
    ) -> None:
        """The proxy protocol on every instance port, the SSL negotiation policy on every
        SSL/HTTPS listener (upstream's policy names), each set only where it differs."""
        client = self._context.client
        policies = found.get("Policies")
        other = policies.get("OtherPolicies") if isinstance(policies, Mapping) else None
        existing = {str(p) for p in (other if isinstance(other, list) else ())}
        backends = found.get("BackendServerDescriptions")
        proxied = {
            int(str(b.get("InstancePort") or 0))
            for b in (backends if isinstance(backends, list) else ())
            if isinstance(b, Mapping) and PROXY_PROTOCOL_POLICY in (b.get("PolicyNames") or ())
        }
        if plan.proxy_protocol and PROXY_PROTOCOL_POLICY not in existing:
            await client.call(
                "elb",
                "CreateLoadBalancerPolicy",
                {
                    "LoadBalancerName": plan.name,
                    "PolicyName": PROXY_PROTOCOL_POLICY,
                    "PolicyTypeName": "ProxyProtocolPolicyType",
                    "PolicyAttributes": [
                        {"AttributeName": "ProxyProtocol", "AttributeValue": "true"}
                    ],
                },
                target=where,
            )
        ports = {listener.instance_port for listener in plan.clb_listeners}
        wanted = ports if plan.proxy_protocol else set()
        for port in sorted(wanted ^ proxied):
            await client.call(
                "elb",
                "SetLoadBalancerPoliciesForBackendServer",
                {
                    "LoadBalancerName": plan.name,
                    "InstancePort": port,
                    "PolicyNames": [PROXY_PROTOCOL_POLICY] if port in wanted else [],
                },
                target=where,
            )
        policy = SSL_POLICY_FORMAT.format(plan.ssl_policy) if plan.ssl_policy else ""
        if policy and policy not in existing:
            await client.call(
                "elb",
                "CreateLoadBalancerPolicy",
                {
                    "LoadBalancerName": plan.name,
                    "PolicyName": policy,
                    "PolicyTypeName": "SSLNegotiationPolicyType",
                    "PolicyAttributes": [
                        {
                            "AttributeName": "Reference-Security-Policy",
                            "AttributeValue": plan.ssl_policy,
                        }
                    ],
                },
                target=where,
            )
        described = found.get("ListenerDescriptions")
        held = {
            int(str(d["Listener"].get("LoadBalancerPort") or 0)): [
                str(p) for p in (d.get("PolicyNames") or ())
            ]
            for d in (described if isinstance(described, list) else ())
            if isinstance(d, Mapping) and isinstance(d.get("Listener"), Mapping)
        }
        for listener in plan.clb_listeners:
            if listener.protocol not in ("SSL", "HTTPS"):
                continue
            have = held.get(listener.port, [])
            ours = [p for p in have if p.startswith(SSL_POLICY_PREFIX)]
            if ours == ([policy] if policy else []):
                continue
            keep = [p for p in have if not p.startswith(SSL_POLICY_PREFIX)]
            await client.call(
                "elb",
                "SetLoadBalancerPoliciesOfListener",
                {
                    "LoadBalancerName": plan.name,
                    "LoadBalancerPort": listener.port,
                    "PolicyNames": keep + ([policy] if policy else []),
                },
                target=where,
            )

    async def _sync_health(
        self, plan: LoadBalancerPlan, found: Mapping[str, object], where: str
    ) -> None:
        health = plan.clb_health
        if health is None:
            return
        wanted = {
            "Target": health.target,
            "Interval": health.interval,
            "Timeout": health.timeout,
            "UnhealthyThreshold": health.unhealthy,
            "HealthyThreshold": health.healthy,
        }
        current = found.get("HealthCheck")
        if isinstance(current, Mapping) and all(current.get(k) == v for k, v in wanted.items()):
            return
        await self._context.client.call(
            "elb",
            "ConfigureHealthCheck",
            {"LoadBalancerName": plan.name, "HealthCheck": wanted},
            target=where,
        )

    async def _sync_attributes(self, plan: LoadBalancerPlan, where: str) -> None:
        client = self._context.client
        answer = await client.call(
            "elb", "DescribeLoadBalancerAttributes", {"LoadBalancerName": plan.name}, target=where
        )
        current = answer.get("LoadBalancerAttributes")
        current = current if isinstance(current, Mapping) else {}
        log_wanted: dict[str, object] = {"Enabled": plan.access_log.enabled}
        if plan.access_log.enabled:
            log_wanted["S3BucketName"] = plan.access_log.bucket
            log_wanted["S3BucketPrefix"] = plan.access_log.prefix
            log_wanted["EmitInterval"] = plan.access_log.interval or 60
        wanted: dict[str, Mapping[str, object]] = {
            "AccessLog": log_wanted,
            "CrossZoneLoadBalancing": {"Enabled": plan.cross_zone},
            "ConnectionDraining": {"Enabled": plan.draining, "Timeout": plan.draining_timeout}
            if plan.draining
            else {"Enabled": False},
            "ConnectionSettings": {"IdleTimeout": plan.idle_timeout},
        }
        change = {}
        for key, value in wanted.items():
            held = current.get(key)
            held = held if isinstance(held, Mapping) else {}
            if any(held.get(k) != v for k, v in value.items()):
                change[key] = value
        if change:
            await client.call(
                "elb",
                "ModifyLoadBalancerAttributes",
                {"LoadBalancerName": plan.name, "LoadBalancerAttributes": change},
                target=where,
            )

    async def register(
        self, name: str, wanted: Sequence[str], registered: Sequence[str], *, where: str
    ) -> None:
        """Deregister the removed, then register the added, `INSTANCES_PER_CALL` per call."""
        await apply_difference(
            self._context.client,
            "elb",
            remove="DeregisterInstancesFromLoadBalancer",
            add="RegisterInstancesWithLoadBalancer",
            registered=registered,
            wanted=wanted,
            per_call=INSTANCES_PER_CALL,
            params=lambda chunk: {
                "LoadBalancerName": name,
                "Instances": [{"InstanceId": i} for i in chunk],
            },
            where=where,
        )

    async def delete(self, name: str, *, where: str) -> bool:
        """Delete the load balancer (gone already: success); whether there was one."""
        found = await self.describe(name)
        if found is None:
            return False
        await self._context.client.call(
            "elb", "DeleteLoadBalancer", {"LoadBalancerName": name}, target=where
        )
        log.info("aws.clb-deleted", load_balancer=name)
        return True
