"""moto fidelity patches: where moto 5.2.5 answers differently from AWS in ways the aws
provider depends on. Applied to this process's moto (the test world only; never at
runtime), once, by `apply_patches()`; each is listed in docs/aws.md ("moto patches").

1. **Blackhole routes.** moto reports every route `active`; AWS reports a route whose
   target instance is terminated as `blackhole` (cloud-provider-aws lists and replaces
   those).
2. **DescribeInstances pages count instances.** moto counts `MaxResults` in reservations;
   AWS counts instances, so a page of a 5,000-instance listing holds at most 1,000
   instances however they were launched (bench figures depend on it).
3. **DescribeInstances with InstanceIds is not paginated.** moto pages it by 100
   reservations; AWS answers every ID in one response (it forbids `MaxResults` there).
4. **`InvalidInstanceID.NotFound` names every unknown ID**, as AWS does ("The instance
   IDs 'i-1, i-2' do not exist"); moto names only the first.

6. **DescribeTargetGroups by LoadBalancerArn** answers the groups the load balancer's
   listeners forward to now, and an empty list when there are none. moto records the
   association when a listener is created and never updates it (ModifyListener,
   DeleteListener), and fails with `TargetGroupNotFound` on none.
7. **ModifyListener takes TLS, UDP and TCP_UDP** (with the TLS certificate and policy), as
   AWS does for NLB listeners; moto refuses every protocol but HTTP, HTTPS and TCP.

8. **CreateLoadBalancerListeners gives a new instance port a backend**, as CreateLoadBalancer
   does: moto keeps backend policies (the proxy protocol) on "backends" it makes only at
   creation, and silently drops SetLoadBalancerPoliciesForBackendServer for a port added
   later; AWS takes it for any instance port.
9. **An NLB's SubnetMappings keep their AllocationId and PrivateIPv4Address**, answered in
   `AvailabilityZones[].LoadBalancerAddresses` (with the Elastic IP's address), as AWS does;
   moto drops both. An unknown allocation ID is refused (`InvalidAllocationID.NotFound`).

10. **DescribeInstanceTopology** (which moto does not have) answers, for the running
    instances of the types AWS documents topology for (`p*`, `trn*`, `hpc*`), three network
    nodes: one per zone, one per zone and type, one per instance's subnet (stable names);
    no entry for other types, as AWS.

And one for speed, answers unchanged:

5. **A resource's tags are read from its own entry.** moto finds an EC2 resource's tags by
   scanning every tag in the region (`describe_tags` filtered by resource ID), for every
   resource it filters or renders: quadratic, 5 s to filter 3,000 instances by a tag, and
   10-20 s per 1,000-instance page at 5,000 instances. AWS answers such a page in about
   a second; without this the benchmark would time moto.

The patches depend on moto's internals, hence moto's exact pin in pyproject.toml.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["PATCHES", "apply_patches"]

PATCHES: Final = (
    "route state is blackhole when the route's instance is terminated",
    "DescribeInstances MaxResults counts instances, not reservations",
    "DescribeInstances with InstanceIds returns every instance in one page",
    "InvalidInstanceID.NotFound names every unknown instance ID",
    "a resource's tags are read from its own entry, not by scanning every tag (speed)",
    "DescribeTargetGroups(LoadBalancerArn) answers the groups its listeners use, [] for none",
    "ModifyListener takes TLS, UDP and TCP_UDP (with TLS certificates)",
    "CreateLoadBalancerListeners gives a new instance port a backend (for its policies)",
    "an NLB's SubnetMappings keep AllocationId and PrivateIPv4Address (LoadBalancerAddresses)",
    "DescribeInstanceTopology answers p*/trn*/hpc* running instances with three network nodes",
    "DeleteLoadBalancerListeners deletes every port it names (moto: none, given two or more)",
)
_MARK: Final = "_trio_ccm_patched"
_PAGE_DEFAULT: Final = 1000


def apply_patches() -> None:
    """Apply the patches to moto (idempotent)."""
    from moto.ec2.models.core import TaggedEC2Resource
    from moto.ec2.models.route_tables import Route
    from moto.ec2.responses.instances import InstanceResponse
    from moto.elbv2.models import ELBv2Backend

    if getattr(Route, _MARK, False):
        return
    original_describe = ELBv2Backend.describe_target_groups
    original_modify = ELBv2Backend.modify_listener

    def describe_target_groups(
        self: Any, load_balancer_arn: Any, target_group_arns: Any, names: Any
    ) -> Any:
        if not load_balancer_arn or target_group_arns or names:
            return original_describe(self, load_balancer_arn, target_group_arns, names)
        from moto.elbv2.exceptions import LoadBalancerNotFoundError

        balancer = self.load_balancers.get(load_balancer_arn)
        if balancer is None:
            raise LoadBalancerNotFoundError()
        used = {
            action.data.get("TargetGroupArn")
            for listener in balancer.listeners.values()
            for action in listener.default_actions
        }
        return sorted(
            (tg for arn, tg in self.target_groups.items() if arn in used), key=lambda t: t.name
        )

    def modify_listener(
        self: Any,
        arn: str,
        port: Any = None,
        protocol: Any = None,
        ssl_policy: Any = None,
        certificates: Any = None,
        actions: Any = None,
    ) -> Any:
        if protocol not in ("TLS", "UDP", "TCP_UDP"):
            return original_modify(self, arn, port, protocol, ssl_policy, certificates, actions)
        listener = original_modify(self, arn, port, None, ssl_policy, certificates, actions)
        listener.protocol = protocol
        if protocol == "TLS" and certificates:
            listener.certificate = certificates[0]["CertificateArn"]
            listener.certificates = [c["CertificateArn"] for c in certificates]
        return listener

    _patch_topology()
    _patch_backends()
    _patch_delete_listeners()
    _patch_subnet_mappings()
    setattr(ELBv2Backend, "describe_target_groups", describe_target_groups)  # noqa: B010
    setattr(ELBv2Backend, "modify_listener", modify_listener)  # noqa: B010
    setattr(Route, "state", property(_route_state))  # noqa: B010 - a property on moto's class
    setattr(InstanceResponse, "describe_instances", _describe_instances)  # noqa: B010
    setattr(TaggedEC2Resource, "get_tags", _get_tags)  # noqa: B010
    setattr(Route, _MARK, True)


def _route_state(route: Any) -> str:
    instance = route.instance
    if instance is not None and instance.state == "terminated":
        return "blackhole"
    return "active"


def _get_tags(resource: Any) -> list[dict[str, str]]:
    """moto's TaggedEC2Resource.get_tags, from the resource's own entry (patch 5)."""
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

    if not resource.id:
        return []
    kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(resource.id), "")
    tags = resource.ec2_backend.tags.get(resource.id) or {}
    return [
        {"resource_id": resource.id, "key": key, "value": value, "resource_type": kind}
        for key, value in tags.items()
    ]


def _describe_instances(self: Any) -> Any:
    """moto's InstanceResponse.describe_instances, with patches 2-4."""
    import copy

    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import InvalidInstanceIdError, InvalidParameterCombination
    from moto.ec2.utils import filter_reservations

    self.error_on_dryrun()
    if "InstanceId.1" in self.data and "MaxResults" in self.data:
        raise InvalidParameterCombination(
            "The parameter instancesSet cannot be used with the parameter maxResults"
        )
    filter_dict = self._filters_from_querystring()
    instance_ids = self._get_param("InstanceIds", [])
    reservations = [copy.copy(r) for r in self.ec2_backend.reservations.copy().values()]
    if instance_ids:
        wanted = set(instance_ids)
        found: set[str] = set()
        for reservation in reservations:
            reservation.instances = [i for i in reservation.instances if i.id in wanted]
            found.update(i.id for i in reservation.instances)
        missing = [i for i in dict.fromkeys(instance_ids) if i not in found]
        if missing:
            raise InvalidInstanceIdError(missing)
        reservations = [r for r in reservations if r.instances]
        if filter_dict:
            reservations = filter_reservations(reservations, filter_dict)
        return ActionResult({"Reservations": reservations, "NextToken": None})
    if filter_dict:
        reservations = filter_reservations(reservations, filter_dict)
    token = self._get_param("NextToken")
    start = int(token) if token else 0
    limit = int(self._get_param("MaxResults", _PAGE_DEFAULT))
    page: list[Any] = []
    seen = taken = 0
    for reservation in reservations:
        instances = reservation.instances
        if seen + len(instances) <= start:
            seen += len(instances)
            continue
        skip = max(0, start - seen)
        room = limit - taken
        part = instances[skip : skip + room]
        seen += len(instances)
        if not part:
            break
        piece = copy.copy(reservation)
        piece.instances = part
        page.append(piece)
        taken += len(part)
        if taken >= limit:
            break
    total = sum(len(r.instances) for r in reservations)
    next_token = str(start + taken) if start + taken < total else None
    return ActionResult({"Reservations": page, "NextToken": next_token})


def _patch_backends() -> None:
    """Patch 8: a backend for every instance port a listener added later uses."""
    from moto.elb.models import ELBBackend, FakeBackend

    original = ELBBackend.create_load_balancer_listeners

    def create_load_balancer_listeners(self: Any, name: str, ports: list[dict[str, Any]]) -> Any:
        balancer = original(self, name, ports)
        if balancer is not None:
            have = {int(b.instance_port) for b in balancer.backends}
            for port in ports:
                if int(port["InstancePort"]) not in have:
                    balancer.backends.append(FakeBackend(instance_port=port["InstancePort"]))
                    have.add(int(port["InstancePort"]))
        return balancer

    setattr(ELBBackend, "create_load_balancer_listeners", create_load_balancer_listeners)  # noqa: B010


def _patch_delete_listeners() -> None:
    """Patch 11: DeleteLoadBalancerListeners removes the listeners of every port it names.
    moto loops over the ports and keeps each listener that differs from the port at hand,
    so given ports [84, 89] it keeps both listeners (and duplicates others)."""
    from moto.elb.models import ELBBackend

    def delete_load_balancer_listeners(self: Any, name: str, ports: list[Any]) -> Any:
        balancer = self.get_load_balancer(name)
        if balancer is not None:
            gone = {int(port) for port in ports}
            balancer.listeners = [
                listener
                for listener in balancer.listeners
                if int(listener.load_balancer_port) not in gone
            ]
        return balancer

    setattr(ELBBackend, "delete_load_balancer_listeners", delete_load_balancer_listeners)  # noqa: B010


def _patch_subnet_mappings() -> None:
    """Patch 9: an NLB's addresses per subnet (LoadBalancerAddresses)."""
    from moto.elbv2.exceptions import ELBClientError as RESTError
    from moto.elbv2.models import AvailabilityZone, ELBv2Backend, FakeLoadBalancer

    original = ELBv2Backend.create_load_balancer

    def create_load_balancer(self: Any, *args: Any, **kwargs: Any) -> Any:
        addresses: dict[str, list[dict[str, str]]] = {}
        for mapping in kwargs.get("subnet_mappings") or []:
            entry: dict[str, str] = {}
            if mapping.get("AllocationId"):
                allocation = mapping["AllocationId"]
                found = [
                    a
                    for a in self.ec2_backend.addresses
                    if getattr(a, "allocation_id", "") == allocation
                ]
                if not found:
                    raise RESTError(
                        "InvalidAllocationID.NotFound",
                        f"The allocation ID '{allocation}' does not exist",
                    )
                entry["AllocationId"] = allocation
                entry["IpAddress"] = found[0].public_ip
            if mapping.get("PrivateIPv4Address"):
                entry["PrivateIPv4Address"] = mapping["PrivateIPv4Address"]
            if entry:
                addresses[mapping["SubnetId"]] = [entry]
        balancer = original(self, *args, **kwargs)
        setattr(balancer, "trio_ccm_addresses", addresses)  # noqa: B010 - moto has no slot
        return balancer

    def availability_zones(balancer: Any) -> list[Any]:
        zones = []
        addresses = getattr(balancer, "trio_ccm_addresses", {})
        for subnet in balancer.subnets:
            zone = AvailabilityZone(subnet)
            if subnet.id in addresses:
                zone.load_balancer_addresses = addresses[subnet.id]  # type: ignore[attr-defined]
            zones.append(zone)
        return zones

    setattr(ELBv2Backend, "create_load_balancer", create_load_balancer)  # noqa: B010
    setattr(FakeLoadBalancer, "availability_zones", property(availability_zones))  # noqa: B010


def _patch_topology() -> None:
    """Patch 10: DescribeInstanceTopology."""
    import hashlib
    import re

    from moto.core.responses import ActionResult
    from moto.ec2.responses.instances import InstanceResponse

    types = re.compile(r"^(hpc|trn|p)[0-9]+[a-z]*(-[a-z0-9]+)?(\.[0-9a-z]*)$")

    def node(*parts: str) -> str:
        return "nn-" + hashlib.sha256("/".join(parts).encode()).hexdigest()[:17]

    def describe_instance_topology(self: Any) -> Any:
        wanted = set(self._get_param("InstanceIds", []))
        found = []
        for reservation in self.ec2_backend.reservations.values():
            for instance in reservation.instances:
                if wanted and instance.id not in wanted:
                    continue
                if instance.state != "running" or not types.match(instance.instance_type):
                    continue
                zone = str(instance.placement.zone)
                found.append(
                    {
                        "InstanceId": instance.id,
                        "InstanceType": instance.instance_type,
                        "NetworkNodes": [
                            node(zone),
                            node(zone, instance.instance_type),
                            node(zone, instance.instance_type, instance.subnet_id),
                        ],
                        "AvailabilityZone": zone,
                    }
                )
        return ActionResult({"Instances": found})

    setattr(InstanceResponse, "describe_instance_topology", describe_instance_topology)  # noqa: B010
