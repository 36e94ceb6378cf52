"""service-lb-controller's rules: which Services want a load balancer, what makes one
impossible, what a change of a Service is, and `plan`, the one decision of a sync (pure:
the term's record, the Service and the node set in, one `Step` out; `_LbTerm` in
`service_lb.py` carries it out). Table-tested in tests/unit/actors/test_lb_rules.py.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from trio_ccm.actors.stable_nodes import NodeSet
from trio_ccm.cloud.provider import LoadBalancerIngress, NodeInfo
from trio_ccm.kube.objects import Service
from trio_ccm.kube.wellknown import ANNOTATION_LB_SOURCE_RANGES, FINALIZER_LB_CLEANUP

__all__ = [
    "Record",
    "Step",
    "Synced",
    "family_mismatch",
    "fingerprint",
    "has_finalizer",
    "node_names",
    "plan",
    "problems",
    "wants_load_balancer",
]

_NODE_NAMES_LIMIT: Final = 20


# -- upstream's predicates ---------------------------------------------------------------
def wants_load_balancer(service: Service) -> bool:
    return service.spec.type == "LoadBalancer" and service.spec.load_balancer_class is None


def has_finalizer(service: Service) -> bool:
    return FINALIZER_LB_CLEANUP in service.metadata.finalizers


def fingerprint(service: Service) -> tuple[object, ...]:
    """What upstream's needsUpdate compares: a change of any of these re-ensures."""
    spec = service.spec
    return (
        service.metadata.uid,
        spec.type,
        spec.load_balancer_class,
        tuple(spec.load_balancer_source_ranges),
        tuple(
            (p.name, p.protocol, p.port, p.node_port, p.target_port, p.app_protocol)
            for p in spec.ports
        ),
        spec.session_affinity,
        repr(spec.session_affinity_config),
        spec.load_balancer_ip,
        tuple(spec.external_ips),
        tuple(sorted(service.metadata.annotations.items())),
        spec.external_traffic_policy,
        spec.health_check_node_port,
        len(spec.ip_families),
    )


def problems(service: Service) -> list[str]:
    """What makes any load balancer impossible, with the fix (no cloud call is made)."""
    found = []
    if not service.spec.ports:
        found.append("spec.ports is empty: a load balancer needs at least one port")
    ranges = list(service.spec.load_balancer_source_ranges)
    where = "spec.loadBalancerSourceRanges"
    if not ranges and service.metadata.annotations.get(ANNOTATION_LB_SOURCE_RANGES, "").strip():
        where = f"annotation {ANNOTATION_LB_SOURCE_RANGES}"
        ranges = service.metadata.annotations[ANNOTATION_LB_SOURCE_RANGES].split(",")
    for value in ranges:
        try:
            ipaddress.ip_network(value.strip(), strict=False)
        except ValueError:
            found.append(f"{where}: {value.strip()!r} is not a CIDR (e.g. 203.0.113.0/24)")
    return found


def family_mismatch(service: Service, ingress: Sequence[LoadBalancerIngress]) -> str:
    """Why the provider's ingress cannot be the Service's ("" when it can): its addresses
    are all of IP families the Service does not ask for."""
    wanted = set(service.spec.ip_families)
    families = set()
    for entry in ingress:
        try:
            families.add(f"IPv{ipaddress.ip_address(entry.ip).version}" if entry.ip else "")
        except ValueError:
            families.add("")
    families.discard("")
    if not wanted or not families or families & wanted:
        return ""
    return (
        f"the cloud gave {', '.join(sorted(families))} addresses "
        f"({', '.join(e.ip for e in ingress if e.ip)}) but spec.ipFamilies asks for "
        f"{', '.join(service.spec.ip_families)}; the status is not written: the provider cannot "
        "serve this IP family, add one it can to spec.ipFamilies"
    )


def node_names(nodes: Sequence[NodeInfo]) -> str:
    """Upstream's node list in messages: at most 20 names, then how many more."""
    names = [n.name for n in nodes[:_NODE_NAMES_LIMIT]]
    more = len(nodes) - len(names)
    return "[" + " ".join(names) + (f" <{more} more>" if more else "") + "]"


# -- the plan -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Synced:
    """What the cloud was last told, successfully, for one Service (this term only)."""

    uid: str
    fingerprint: tuple[object, ...]
    nodes: NodeSet
    ingress: tuple[LoadBalancerIngress, ...]


Action = Literal["forget", "clean-up", "skip", "refuse", "update-hosts", "ensure"]


@dataclass(frozen=True, slots=True)
class Step:
    """What one sync does with a Service (`reason` says why, for skip and refuse; `quiet`:
    a re-verification, without the Normal Events unless the status changes)."""

    action: Action
    reason: str = ""
    quiet: bool = False


def plan(
    service: Service,
    *,
    synced: Synced | None,
    invalid: tuple[object, ...] | None,
    unknown: bool,
    nodes: NodeSet,
    force: bool,
) -> Step:
    """The one decision of a sync, from what the term recorded (`synced`: what the cloud
    was last told; `invalid`: the fingerprint refused; `unknown`: a call whose outcome is
    unknown may still land), the Service, the node set and whether this is a
    re-verification (`force`)."""
    if not wants_load_balancer(service) or service.metadata.deletion_timestamp:
        if has_finalizer(service) or synced is not None:
            return Step("clean-up")
        return Step("forget")
    wanted = fingerprint(service)
    if invalid == wanted:
        return Step("skip", "refused already: waits for a change of the Service")
    found = problems(service)
    if found:
        return Step("refuse", "; ".join(found))
    matches = (
        synced is not None
        and synced.fingerprint == wanted
        and synced.ingress == service.status.load_balancer.ingress
        and has_finalizer(service)
    )
    if matches and not force and not unknown:
        assert synced is not None
        if synced.nodes != nodes:
            return Step("update-hosts")
        return Step("skip", "up to date")
    return Step("ensure", quiet=force and matches)


@dataclass(slots=True)
class Record:
    """What this term knows of one Service; `_LbTerm.forget` drops it (and its place in the
    re-verification queue, the late-landing checks and the node-sync pass)."""

    handled: Service | None = None
    """The Service as last handled (upstream's cache): deleting its load balancer needs it."""
    synced: Synced | None = None
    invalid: tuple[object, ...] | None = None
    """The fingerprint a Warning was given for: no cloud call until it changes."""
    intent: tuple[object, ...] | None = None
    """What the owner last asked for (admission's: a change expedites a retry)."""
    routed: bool = False
    """Admission has handed it on: only a first sighting may be deferred after a restart."""
    reverify: bool = False
    """A Reverify is on its way: a Changed that overtakes it is upgraded, not lost."""
    unknown_until: float | None = None
    """Trio time until which a call whose outcome is unknown may still land (None: none)."""
    failing: str = ""
    """What the sync in flight is doing, for the failure's Event ("": syncing)."""
    waiting: str = ""
    """The `RetryAfter` last told with a Warning in this streak, its numbers left out (say
    "load balancer ... is PENDING_CREATE; looking again in # s"): rounds that say the same
    are logged, not Events, until the sync succeeds or says something else, so waiting does
    not use up the Service's Event budget."""
    gone: bool = False
    """The sync in flight handles a Gone (its failure is reported as a delete only)."""
    orphaned: bool = False
    """Re-made for a late-landing check of a Service forgotten: its load balancer may exist."""
