"""Service load balancers on AWS: Classic ELBs by default, NLBs with
`service.beta.kubernetes.io/aws-load-balancer-type: nlb`, as cloud-provider-aws.

`annotations.py` turns a Service into a plan (or a refusal), `elb.py` and `elbv2.py` carry
it out, `network.py` holds the subnets and security groups. This module adds:

- **the Nodes' security groups** (unless `DisableSecurityGroupIngress`): each target
  instance's group (its cluster-tagged one, else its only one) lets the load balancer in.
  NLB: rules described `kubernetes.io/rule/nlb/client=<name>` (the node ports from the
  source ranges) and `kubernetes.io/rule/nlb/health=<name>` (the health-check ports from
  the NLB's subnets, left out when the client rule covers them) and the shared
  `kubernetes.io/rule/nlb/mtu` (ICMP 3/4 from each client range of any NLB); Classic ELB,
  and an NLB with its managed group (`NLBSecurityGroupMode=Managed`): all traffic from the
  load balancer's group, one rule. Rules for this load balancer in groups no target uses
  any more are revoked.
- **what AWS cannot change is refused** (`ServiceRefused`, the load balancer kept): the
  type (the other type's load balancer of this Service's name exists), the scheme, an
  NLB's addresses.
- **node-set changes at the cost of the difference**: after an ensure the provider keeps
  what it registered (per load balancer: its target groups, its targets, the Nodes'
  groups it opened). `update_load_balancer` then registers and deregisters only the
  instances added and removed, 100 per call, with no describe; a Node in a group not yet
  opened costs that group's rules. Without that record (after a restart, or a failed call,
  which drops it) it runs a full ensure, which describes and records again.
- **deletion of everything made for a Service**, whatever its type annotation says now:
  the Nodes' rules, the Classic ELB, the NLB and its target groups (also those named for
  the Service's ports, so a group made just before a crash is found), the load balancer's
  own security group (only when the cluster owns it; `DependencyViolation` while the load
  balancer's interfaces detach is a `RetryAfter`).
- **`get_load_balancer`** reports a load balancer that exists, and also (with no ingress) the
  remains of one a crash left half made or half deleted, so the service controller still
  calls `ensure_load_balancer_deleted` for them.
- **the inventory** (`LoadBalancerInventory`): every NLB and Classic ELB carrying this
  cluster's `owned` tag and `kubernetes.io/service-name`, with the Service UID from
  `trio-ccm.dev/service-uid` (ours; upstream tags no UID) and its DNS name, for the sweep
  for leaked ones; when both types exist under one name, the leaked one (the address the
  Service's status does not name) is deleted alone.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

from trio_ccm.cloud.aws.annotations import (
    INTERNAL,
    LoadBalancerPlan,
    kept_as,
    kept_scheme,
    plan,
    target_nodes,
)
from trio_ccm.cloud.aws.annotations import TYPE as TYPE_ANNOTATION
from trio_ccm.cloud.aws.ec2 import Ec2Instance, chunks
from trio_ccm.cloud.aws.elb import Clbs, group_name
from trio_ccm.cloud.aws.elbv2 import Nlbs, every_page
from trio_ccm.cloud.aws.errors import AwsError
from trio_ccm.cloud.aws.instances import instance_id_from_provider_id
from trio_ccm.cloud.aws.lookup import Ref
from trio_ccm.cloud.aws.network import (
    Rule,
    SecurityGroup,
    authorize,
    create_group,
    delete_group,
    describe_groups,
    find_group,
    node_group,
    reconcile_rules,
    revoke,
)
from trio_ccm.cloud.aws.tags import SERVICE_NAME_TAG, SERVICE_UID_TAG, service_tags, tags_of
from trio_ccm.cloud.provider import (
    ImplementedElsewhere,
    LoadBalancerIngress,
    LoadBalancerStatus,
    NodeInfo,
    OwnedLoadBalancer,
    ServiceInfo,
    ServiceRefused,
    default_load_balancer_name,
)
from trio_ccm.logs import get_logger

if TYPE_CHECKING:
    from trio_ccm.cloud.aws.context import AwsContext

__all__ = [
    "NLB_CLIENT_RULE",
    "NLB_HEALTH_RULE",
    "NLB_MTU_RULE",
    "AwsLoadBalancers",
    "nlb_group_name",
]

log = get_logger("trio_ccm.cloud.aws.loadbalancers")

NLB_CLIENT_RULE: Final = "kubernetes.io/rule/nlb/client"
NLB_HEALTH_RULE: Final = "kubernetes.io/rule/nlb/health"
NLB_MTU_RULE: Final = "kubernetes.io/rule/nlb/mtu"
"""ICMP fragmentation-needed from every client range of an NLB in the group: one rule per
range, shared by every NLB (upstream's)."""
NLB_GROUP_DESCRIPTION: Final = "[k8s] Managed SecurityGroup for LoadBalancer"
_TAGS_PER_CALL: Final = 20
_GROUPS_REMEMBERED: Final = 100_000
_NOT_GROUP_NAME: Final = re.compile(r"[^a-zA-Z0-9-]")


@dataclass(frozen=True, slots=True)
class _Known:
    """What the provider registered for one load balancer at its last successful call."""

    nlb: bool
    target_groups: tuple[str, ...]  # NLB: the groups' ARNs
    targets: frozenset[str]
    node_groups: frozenset[str]
    rules: frozenset[Rule]  # what each of the Nodes' groups holds for it
    status: LoadBalancerStatus
    internal: bool = False  # its scheme


def nlb_group_name(cluster: str, namespace: str, name: str, uid: str) -> str:
    """Upstream's GetSecurityGroupNameForNLB: `k8s-<ns:8>-<name:8>-<sha256(cluster, name,
    namespace, uid):10>`."""
    digest = hashlib.sha256()
    for part in (cluster, name, namespace, uid):
        digest.update(part.encode())
    clean = _NOT_GROUP_NAME.sub
    return f"k8s-{clean('', namespace)[:8]}-{clean('', name)[:8]}-{digest.hexdigest()[:10]}"


def mtu_rules(rules: Iterable[Rule]) -> frozenset[Rule]:
    """The MTU-discovery rules the NLB client rules among `rules` call for."""
    return frozenset(
        Rule("icmp", 3, 4, cidr=r.cidr, description=NLB_MTU_RULE)
        for r in rules
        if r.cidr and ":" not in r.cidr and r.description.startswith(NLB_CLIENT_RULE + "=")
    )


def _hostname(dns_name: str) -> LoadBalancerStatus:
    return (
        LoadBalancerStatus((LoadBalancerIngress(hostname=dns_name),))
        if dns_name
        else LoadBalancerStatus()
    )


def _mappings(items: object) -> list[Mapping[str, object]]:
    return [i for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []


class AwsLoadBalancers:
    """`LoadBalancers` and `LoadBalancerInventory` on AWS (see the module docstring)."""

    def __init__(self, context: AwsContext) -> None:
        self._context = context
        self._nlbs = Nlbs(context)
        self._clbs = Clbs(context)
        self._known: dict[str, _Known] = {}
        # instance → its security groups, from every lookup (shared by the load balancers:
        # a node-set change asks EC2 about a new instance once, not once per load balancer)
        self._groups_of: OrderedDict[str, tuple[str, ...]] = OrderedDict()  # oldest first

    def load_balancer_name(self, cluster: str, service: ServiceInfo) -> str:
        return default_load_balancer_name(service)

    async def _plan(self, service: ServiceInfo) -> LoadBalancerPlan:
        await self._context.ready()
        return plan(service, self._context.config, self._context.tagging.cluster_id)

    # -- instances ---------------------------------------------------------------------------
    async def _instances(
        self, nodes: Sequence[NodeInfo], labels: Mapping[str, str]
    ) -> dict[str, Ec2Instance]:
        """The target Nodes' instances, by instance ID (Nodes without one are left out)."""
        refs = []
        for node in target_nodes(tuple(nodes), labels):
            instance_id = ""
            if node.provider_id:
                try:
                    instance_id = instance_id_from_provider_id(node.provider_id, node=node.name)
                except AwsError:
                    continue
            refs.append(Ref(node.name, instance_id))
        found = await self._context.lookup.resolve(refs)
        instances = {i.id: i for i in found.values() if i.state != "terminated"}
        self._remember(instances.values())
        return instances

    def _remember(self, instances: Iterable[Ec2Instance]) -> None:
        for instance in instances:
            self._groups_of.pop(instance.id, None)
            self._groups_of[instance.id] = instance.security_groups
        while len(self._groups_of) > _GROUPS_REMEMBERED:
            self._groups_of.popitem(last=False)

    @staticmethod
    def _target_ids(nodes: Sequence[NodeInfo], labels: Mapping[str, str]) -> list[str] | None:
        """The target instance IDs from the Nodes' provider IDs alone (None when a Node
        has none: the lookup must name it)."""
        ids = []
        for node in target_nodes(tuple(nodes), labels):
            if not node.provider_id:
                return None
            try:
                ids.append(instance_id_from_provider_id(node.provider_id, node=node.name))
            except AwsError:
                continue
        return sorted(set(ids))

    # -- the Nodes' security groups ---------------------------------------------------------
    async def _nlb_rules(
        self, lb_plan: LoadBalancerPlan, subnet_ids: Sequence[str]
    ) -> frozenset[Rule]:
        """The rules each Node group holds for an NLB (upstream's
        updateInstanceSecurityGroupsForNLB)."""
        client_desc = f"{NLB_CLIENT_RULE}={lb_plan.name}"
        health_desc = f"{NLB_HEALTH_RULE}={lb_plan.name}"
        protocol = "udp" if "udp" in lb_plan.protocols else "tcp"
        client_ports = {p.node_port for p in lb_plan.nlb_ports}
        health_ports = {
            p.node_port if p.health.port == "traffic-port" else int(p.health.port)
            for p in lb_plan.nlb_ports
        }
        rules = {
            Rule(protocol, port, port, cidr=cidr, description=client_desc)
            for port in client_ports
            for cidr in lb_plan.source_ranges
        }
        covered = (
            lb_plan.source_ranges == ("0.0.0.0/0",)
            and protocol == "tcp"
            and health_ports == client_ports
        )
        if not covered and subnet_ids:
            answer = await self._context.client.call(
                "ec2",
                "DescribeSubnets",
                {"SubnetIds": list(subnet_ids)},
                target=f"NLB {lb_plan.name}",
            )
            items = answer.get("Subnets")
            cidrs = sorted(
                str(s.get("CidrBlock"))
                for s in (items if isinstance(items, list) else ())
                if isinstance(s, Mapping) and s.get("CidrBlock")
            )
            rules |= {
                Rule("tcp", port, port, cidr=cidr, description=health_desc)
                for port in health_ports
                for cidr in cidrs
            }
        return frozenset(rules)

    @staticmethod
    def _ours(name: str, lb_group: str) -> Callable[[Rule], bool]:
        """The Nodes' group rules made for load balancer `name` (whose own security group,
        a Classic ELB's or a managed NLB's, is `lb_group`)."""
        descriptions = {f"{NLB_CLIENT_RULE}={name}", f"{NLB_HEALTH_RULE}={name}"}

        def ours(rule: Rule) -> bool:
            return rule.description in descriptions or (
                bool(lb_group) and rule.group == lb_group and rule.protocol == "-1"
            )

        return ours

    async def _sync_mtu(
        self,
        groups: Iterable[SecurityGroup],
        wanted: Mapping[str, frozenset[Rule]],
        ours: Callable[[Rule], bool],
    ) -> None:
        """Each group holds the MTU rules its NLB client rules (every NLB's) call for, once
        the rules `ours` picks out are `wanted`."""
        client = self._context.client
        for group in groups:
            after = {r for r in group.ingress if not ours(r)} | wanted.get(group.id, frozenset())
            want = mtu_rules(after)
            have = frozenset(r for r in group.ingress if r.description == NLB_MTU_RULE)
            await revoke(client, group.id, have - want)
            await authorize(client, group.id, want - have)

    async def _open_node_groups(
        self,
        lb_plan: LoadBalancerPlan,
        instances: Mapping[str, Ec2Instance],
        rules: frozenset[Rule],
        clb_group: str,
    ) -> frozenset[str]:
        """Make the Nodes' groups hold `rules` for this load balancer, and no other group."""
        context = self._context
        if context.config.disable_security_group_ingress:
            return frozenset()
        groups = await describe_groups(
            context.client,
            spec={"vpc-id": [await context.vpc_id()]},
            target=f"security groups for {lb_plan.name}",
        )
        by_id = {g.id: g for g in groups}
        missing = {g for i in instances.values() for g in i.security_groups if g not in by_id}
        if missing:
            extra = await describe_groups(
                context.client, ids=sorted(missing), target=f"security groups for {lb_plan.name}"
            )
            groups += extra
            by_id.update({g.id: g for g in extra})
        wanted: dict[str, frozenset[Rule]] = {}
        for instance in instances.values():
            group = node_group(instance, by_id, context.tagging)
            if group:
                wanted[group] = rules
            else:
                log.warning(
                    "aws.instance-without-security-group",
                    instance=instance.id,
                    load_balancer=lb_plan.name,
                )
        ours = self._ours(lb_plan.name, clb_group)
        await reconcile_rules(
            context.client,
            groups,
            wanted=wanted,
            ours=ours,
            # Classic ELB: upstream revokes its rule only from cluster-tagged groups.
            may_revoke=lambda g: not clb_group or context.tagging.has_cluster_tag(g.tags),
        )
        if lb_plan.nlb:
            await self._sync_mtu(groups, wanted, ours)
        return frozenset(wanted)

    # -- LoadBalancers -----------------------------------------------------------------------
    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> LoadBalancerStatus:
        """Create or update the Service's load balancer (see the module docstring)."""
        lb_plan, found_nlb, warnings, recorded = await self._plan_type(service)
        if not lb_plan.nlb_ports and not lb_plan.clb_listeners:
            raise ServiceRefused(f"Service {service.key}: no port to balance")
        instances = await self._instances(nodes, lb_plan.node_labels)
        ids = sorted(instances)
        if lb_plan.nlb:
            own_group = await self._nlb_group(cluster, service, lb_plan, found_nlb)
            nlb = await self._nlbs.ensure(
                lb_plan,
                ids,
                security_groups=(own_group,) if own_group else lb_plan.security_groups,
                found=found_nlb,
                find_strays=not recorded,
            )
            if own_group:
                # The NLB's own group: one rule on the Nodes' groups lets it in (as a Classic
                # ELB's), instead of a rule per port and range (see docs/aws.md, quotas).
                rules = frozenset({Rule("-1", -1, -1, group=own_group)})
            elif self._context.config.disable_security_group_ingress:
                rules = frozenset()
            else:
                rules = await self._nlb_rules(lb_plan, nlb.subnet_ids)
            opened = await self._open_node_groups(lb_plan, instances, rules, own_group)
            if not own_group and self._context.config.nlb_security_group_mode == "Managed":
                await self._drop_managed_group(cluster, service, lb_plan.name)
            status = _hostname(nlb.dns_name)
            known = _Known(
                True,
                tuple(nlb.target_groups),
                frozenset(ids),
                opened,
                rules,
                status,
                internal=lb_plan.internal,
            )
        else:
            clb = await self._clbs.ensure(lb_plan, ids)
            own = clb.security_groups[0] if clb.security_groups else ""
            rules = frozenset({Rule("-1", -1, -1, group=own)}) if own else frozenset()
            opened = await self._open_node_groups(lb_plan, instances, rules, own)
            status = _hostname(clb.dns_name)
            known = _Known(
                False, (), frozenset(ids), opened, rules, status, internal=lb_plan.internal
            )
        self._known[lb_plan.name] = known
        log.info(
            "aws.load-balancer-ensured",
            load_balancer=lb_plan.name,
            kind=lb_plan.kind,
            service=service.key,
            targets=len(ids),
            kept_type=bool(warnings),
        )
        return replace(status, warnings=warnings)

    async def _plan_type(
        self, service: ServiceInfo
    ) -> tuple[LoadBalancerPlan, Mapping[str, object] | None, tuple[str, ...], bool]:
        """The plan, the NLB found (NLB plans), the warnings for the Service's load
        balancer, and whether the provider had a record of it (`_Known`; without one, an NLB
        ensure also looks for stray target groups). A change of type AWS cannot make
        (upstream refuses it) keeps the load balancer as the type it is, planned from the
        Service as that type reads it (`kept_as`): it keeps following the Service's ports,
        source ranges and Nodes, and the refusal is a warning, not a verdict that would
        freeze it until the Service changes."""
        refusal: ServiceRefused | None = None
        try:
            lb_plan: LoadBalancerPlan | None = await self._plan(service)
        except ServiceRefused as exc:  # perhaps only as the new type (UDP on a Classic ELB)
            lb_plan, refusal = None, exc
        name = default_load_balancer_name(service)
        nlb = lb_plan.nlb if lb_plan else service.annotations.get(TYPE_ANNOTATION) == "nlb"
        before = self._known.pop(name, None)
        found_nlb = await self._nlbs.describe(name) if nlb else None
        warning = ""
        if (before is None or before.nlb != nlb) and (found_nlb is None if nlb else True):
            warning = await self._type_change(name, service.key, nlb=nlb)
        warnings: list[str] = []
        if warning:
            kept, dropped = kept_as(service, nlb=not nlb)
            if dropped:
                warning += f"; not applied to the kept load balancer: {', '.join(dropped)}"
            warnings.append(warning)
            lb_plan = await self._plan(kept)
            found_nlb = None if nlb else await self._nlbs.describe(name)
            service = kept
        elif refusal is not None:
            raise refusal
        assert lb_plan is not None
        if before is None or before.internal != lb_plan.internal:
            # The scheme, which AWS cannot change either: kept as it is, as the type.
            found = found_nlb if lb_plan.nlb else await self._clbs.describe(name)
            scheme = str(found.get("Scheme") or "") if found is not None else ""
            if scheme and (scheme == "internal") != lb_plan.internal:
                warnings.append(
                    f"Service {service.key}: annotation {INTERNAL}: the {lb_plan.kind} {name} "
                    f"is {scheme} and AWS cannot change a load balancer's scheme; it is kept "
                    f"{scheme}, following the Service's ports, source ranges and Nodes; set "
                    "the annotation back, or delete the Service and create it again (a new "
                    "load balancer, a new address)"
                )
                lb_plan = await self._plan(kept_scheme(service, internal=scheme == "internal"))
        return lb_plan, found_nlb, tuple(warnings), before is not None

    async def _type_change(self, name: str, service: str, *, nlb: bool) -> str:
        """When the Service's load balancer exists as the other type than `nlb` says (its
        type annotation changed; AWS cannot change a load balancer's type): the warning that
        says so and names the fix, else ""."""
        client = self._context.client
        if nlb:
            if await self._clbs.describe(name) is None:
                return ""
            answer = await client.call(
                "elb", "DescribeTags", {"LoadBalancerNames": [name]}, target=name
            )
        else:
            other = await self._nlbs.describe(name)
            if other is None:
                return ""
            answer = await client.call(
                "elbv2",
                "DescribeTags",
                {"ResourceArns": [str(other.get("LoadBalancerArn"))]},
                target=name,
            )
        tags: dict[str, str] = {}
        for item in _mappings(answer.get("TagDescriptions")):
            tags.update(tags_of(item.get("Tags")))
        if tags.get(SERVICE_NAME_TAG, service) != service:
            return ""  # another Service's, whose UID starts alike (names keep 31 of 32 digits)
        wanted, kept = ("an NLB", "a Classic ELB") if nlb else ("a Classic ELB", "an NLB")
        return (
            f"Service {service}: annotation {TYPE_ANNOTATION}: the Service's load balancer "
            f"{name} is {kept} and AWS cannot turn it into {wanted}; it is kept as {kept}, "
            "following the Service's ports, source ranges and Nodes; set the annotation back, "
            "or delete the Service and create it again (a new load balancer, a new address)"
        )

    async def _nlb_group(
        self,
        cluster: str,
        service: ServiceInfo,
        lb_plan: LoadBalancerPlan,
        found: Mapping[str, object] | None,
    ) -> str:
        """NLBSecurityGroupMode=Managed: the NLB's own group (upstream's name), made if need
        be, open on the listeners' ports and to ICMP fragmentation-needed from the source
        ranges. "" when not managed, or when the NLB exists without groups (AWS cannot give
        it any: it keeps the Nodes' per-port rules, with a warning)."""
        context = self._context
        if not lb_plan.managed_security_group:
            return ""
        if found is not None and not found.get("SecurityGroups"):
            log.warning(
                "aws.nlb-without-security-groups",
                load_balancer=lb_plan.name,
                service=lb_plan.service,
                fix="AWS cannot add security groups to an NLB made without; recreate the "
                "Service for a managed group",
            )
            return ""
        vpc_id = await context.vpc_id()
        name = nlb_group_name(cluster, service.namespace, service.name, service.uid)
        group = await find_group(context.client, name=name, vpc_id=vpc_id)
        if group is None:
            group = await create_group(
                context.client,
                name=name,
                description=NLB_GROUP_DESCRIPTION,
                vpc_id=vpc_id,
                tags=service_tags(
                    context.tagging, lb_plan.service, lb_plan.uid, lb_plan.extra_tags
                ),
            )
            log.info("aws.security-group-created", group=group.id, load_balancer=lb_plan.name)
        wanted = frozenset(
            [
                Rule("udp" if p.protocol == "UDP" else "tcp", p.port, p.port, cidr=cidr)
                for p in lb_plan.nlb_ports
                for cidr in lb_plan.source_ranges
            ]
            + [Rule("icmp", 3, 4, cidr=cidr) for cidr in lb_plan.source_ranges]
        )
        await reconcile_rules(
            context.client, [group], wanted={group.id: wanted}, ours=lambda r: not r.group
        )
        return group.id

    async def _drop_managed_group(self, cluster: str, service: ServiceInfo, name: str) -> None:
        """The NLB's managed group, once it uses BYO groups instead: the Nodes' rules that
        let it in are revoked, and the group deleted (upstream's removeOwnedSecurityGroups)."""
        context = self._context
        group_name_ = nlb_group_name(cluster, service.namespace, service.name, service.uid)
        groups = await self._scan_groups(name)
        own = [g for g in groups if g.name == group_name_ and context.tagging.owned(g.tags)]
        if not own:
            return
        ids = {g.id for g in own}
        await reconcile_rules(
            context.client, groups, wanted={}, ours=lambda r: r.group in ids and r.protocol == "-1"
        )
        for group in own:
            await delete_group(context.client, group.id, why=f"of NLB {name}, now BYO")

    async def update_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> None:
        """Only the targets changed: register and deregister the difference (see above)."""
        try:
            lb_plan: LoadBalancerPlan | None = await self._plan(service)
        except ServiceRefused:
            lb_plan = None  # perhaps only as a type it was switched to: ensure says
        known = self._known.get(lb_plan.name) if lb_plan else None
        if lb_plan is None or known is None or known.nlb != lb_plan.nlb:
            # (a load balancer kept as the other type after a type change is ensured in full)
            await self.ensure_load_balancer(cluster, service, nodes)
            return
        ids = self._target_ids(nodes, lb_plan.node_labels)
        instances: dict[str, Ec2Instance] | None = None
        if ids is None:
            instances = await self._instances(nodes, lb_plan.node_labels)
            ids = sorted(instances)
        wanted = frozenset(ids)
        where = f"{lb_plan.kind} {lb_plan.name} (Service {service.key})"
        try:
            if known.nlb:
                for group in known.target_groups:
                    await self._nlbs.register(group, ids, sorted(known.targets), where=where)
            else:
                await self._clbs.register(lb_plan.name, ids, sorted(known.targets), where=where)
            opened = known.node_groups
            added = wanted - known.targets
            if added and known.rules and not self._context.config.disable_security_group_ingress:
                opened = await self._open_added(lb_plan, added, instances, known)
        except BaseException:
            self._known.pop(lb_plan.name, None)  # the next call describes afresh
            raise
        self._known[lb_plan.name] = replace(known, targets=wanted, node_groups=opened)
        log.info(
            "aws.targets-updated",
            load_balancer=lb_plan.name,
            added=len(wanted - known.targets),
            removed=len(known.targets - wanted),
        )

    async def _open_added(
        self,
        lb_plan: LoadBalancerPlan,
        added: frozenset[str],
        instances: Mapping[str, Ec2Instance] | None,
        known: _Known,
    ) -> frozenset[str]:
        """The groups of instances just added that do not hold the rules yet get them."""
        context = self._context
        if instances is None:
            unknown = sorted(i for i in added if i not in self._groups_of)
            if unknown:
                found = await context.lookup.resolve([Ref(i, i) for i in unknown])
                self._remember(found.values())
            instances = {
                i: Ec2Instance(i, "running", security_groups=self._groups_of[i])
                for i in added
                if i in self._groups_of
            }
        candidates = [
            instances[i]
            for i in sorted(added)
            if i in instances and not set(instances[i].security_groups) & known.node_groups
        ]
        if not candidates:
            return known.node_groups  # the usual case: no call
        groups = await describe_groups(
            context.client,
            ids=sorted({g for i in candidates for g in i.security_groups}),
            target=f"security groups for {lb_plan.name}",
        )
        by_id = {g.id: g for g in groups}
        opened = set(known.node_groups)
        for instance in candidates:
            group = node_group(instance, by_id, context.tagging)
            if group and group not in opened and group in by_id:
                wanted = known.rules | mtu_rules(known.rules)
                await authorize(context.client, group, wanted - by_id[group].ingress)
                opened.add(group)
        return frozenset(opened)

    async def get_load_balancer(
        self, cluster: str, service: ServiceInfo
    ) -> LoadBalancerStatus | None:
        """The load balancer's status; an empty status for the remains of one; None when
        nothing made for the Service is left."""
        await self._context.ready()
        name = default_load_balancer_name(service)
        nlb_first = service.annotations.get(TYPE_ANNOTATION, "") == "nlb"
        for nlb in (nlb_first, not nlb_first):
            if nlb:
                found = await self._nlbs.describe(name)
                if found is not None:
                    return _hostname(str(found.get("DNSName") or ""))
            else:
                described = await self._clbs.describe(name)
                if described is not None:
                    return _hostname(str(described.get("DNSName") or ""))
        if await self._nlbs.target_groups_named(self._group_names(service)):
            return LoadBalancerStatus()
        groups = await self._scan_groups(name)
        ours = self._ours(name, "")
        if any(g.name == group_name(name) or any(ours(r) for r in g.ingress) for g in groups):
            return LoadBalancerStatus()
        return None

    def _group_names(self, service: ServiceInfo) -> list[str]:
        """The target groups the Service's ports would have (none when it cannot be planned)."""
        try:
            lb_plan = plan(service, self._context.config, self._context.tagging.cluster_id)
        except (ServiceRefused, ImplementedElsewhere):
            return []  # planned never, so no group was made under a port's name
        return [p.target_group for p in lb_plan.nlb_ports]

    async def _scan_groups(self, name: str) -> list[SecurityGroup]:
        context = self._context
        return await describe_groups(
            context.client,
            spec={"vpc-id": [await context.vpc_id()]},
            target=f"security groups for {name}",
        )

    async def ensure_load_balancer_deleted(self, cluster: str, service: ServiceInfo) -> None:
        """Delete everything made for the Service (see the module docstring)."""
        await self._context.ready()
        await self._delete(
            default_load_balancer_name(service),
            service.key,
            self._group_names(service),
            [nlb_group_name(cluster, service.namespace, service.name, service.uid)],
            uid=service.uid,
        )

    async def _delete(
        self,
        name: str,
        service: str,
        target_groups: Sequence[str],
        nlb_groups: Sequence[str] = (),
        *,
        only: str = "",
        uid: str = "",
    ) -> None:
        """Delete the load balancer named `name` of both types (`only`: "clb" or "nlb", that
        type alone), and what was made for it (with the Service's `uid`: also the stray
        target groups of its older ports, `Nlbs.stray_groups`)."""
        context = self._context
        where = f"load balancer {name} (Service {service})"
        self._known.pop(name, None)
        groups = await self._scan_groups(name)
        own_names = {
            *((group_name(name),) if only != "nlb" else ()),
            *(nlb_groups if only != "clb" else ()),
        }
        own = [g for g in groups if g.name in own_names and context.tagging.owned(g.tags)]
        clb = await self._clbs.describe(name) if only != "nlb" else None
        held = clb.get("SecurityGroups") if clb is not None else None
        lb_groups = [str(g) for g in held] if isinstance(held, list) else []
        refs = {g.id for g in own} | set(lb_groups[:1])
        descriptions = (
            {f"{NLB_CLIENT_RULE}={name}", f"{NLB_HEALTH_RULE}={name}"} if only != "clb" else set()
        )

        def ours(rule: Rule) -> bool:
            return rule.description in descriptions or (
                rule.group in refs and rule.protocol == "-1"
            )

        await reconcile_rules(context.client, groups, wanted={}, ours=ours)
        await self._sync_mtu(groups, {}, ours)
        existed = False
        if only != "nlb":
            existed = await self._clbs.delete(name, where=where)
        if only != "clb":
            existed = (
                await self._nlbs.delete(
                    name, target_groups, where=where, strays=(service, uid) if uid else None
                )
                or existed
            )
        for group in own:
            await delete_group(context.client, group.id, why=f"of load balancer {name}")
        log.info(
            "aws.load-balancer-deleted",
            load_balancer=name,
            service=service,
            existed=existed or bool(own),
        )

    # -- LoadBalancerInventory ---------------------------------------------------------------
    async def list_load_balancers(self, cluster: str) -> list[OwnedLoadBalancer]:
        """Every NLB and Classic ELB this cluster owns that was made for a Service."""
        await self._context.ready()
        client = self._context.client
        owned: list[OwnedLoadBalancer] = []
        nlbs = {
            str(lb.get("LoadBalancerArn")): (
                str(lb.get("LoadBalancerName")),
                str(lb.get("DNSName") or ""),
            )
            for lb in await self._all("elbv2")
            if lb.get("Type") == "network"
        }
        for chunk in chunks(sorted(nlbs), _TAGS_PER_CALL):
            answer = await client.call(
                "elbv2", "DescribeTags", {"ResourceArns": list(chunk)}, target="NLBs"
            )
            for item in _mappings(answer.get("TagDescriptions")):
                name, dns = nlbs.get(str(item.get("ResourceArn")), ("", ""))
                self._collect(owned, name, dns, tags_of(item.get("Tags")))
        clbs = {
            str(lb.get("LoadBalancerName")): str(lb.get("DNSName") or "")
            for lb in await self._all("elb")
        }
        for chunk in chunks(list(clbs), _TAGS_PER_CALL):
            answer = await client.call(
                "elb", "DescribeTags", {"LoadBalancerNames": list(chunk)}, target="Classic ELBs"
            )
            for item in _mappings(answer.get("TagDescriptions")):
                name = str(item.get("LoadBalancerName"))
                self._collect(owned, name, clbs.get(name, ""), tags_of(item.get("Tags")))
        return owned

    def _collect(
        self, owned: list[OwnedLoadBalancer], name: str, dns: str, tags: Mapping[str, str]
    ) -> None:
        service = tags.get(SERVICE_NAME_TAG, "")
        if not service or not self._context.tagging.owned(tags):
            return
        namespace, _, service_name = service.partition("/")
        owned.append(
            OwnedLoadBalancer(
                name, namespace, service_name, tags.get(SERVICE_UID_TAG, ""), address=dns
            )
        )

    async def _all(self, api: str) -> list[Mapping[str, object]]:
        """Every load balancer of one ELB API (Marker paging)."""
        key = "LoadBalancers" if api == "elbv2" else "LoadBalancerDescriptions"
        return await every_page(
            self._context.client, api, "DescribeLoadBalancers", key, "load balancers"
        )

    async def delete_leaked_load_balancer(self, cluster: str, lb: OwnedLoadBalancer) -> None:
        """Delete a listed load balancer and everything made for it."""
        await self._context.ready()
        managed = [nlb_group_name(cluster, lb.namespace, lb.service, lb.uid)] if lb.uid else []
        only = ""
        if lb.address:
            # A Classic ELB and an NLB may share the name (a type change made the second):
            # only the one at the listed address goes, with what was made for it alone.
            clb = await self._clbs.describe(lb.name)
            nlb = await self._nlbs.describe(lb.name)
            if clb is not None and nlb is not None:
                only = "clb" if str(clb.get("DNSName") or "") == lb.address else "nlb"
        await self._delete(lb.name, lb.key, (), managed, only=only)
