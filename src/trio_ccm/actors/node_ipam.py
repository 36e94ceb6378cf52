"""node-ipam-controller: give every Node pod CIDRs (`spec.podCIDR`, `spec.podCIDRs`) carved
out of `--cluster-cidr`, as kube-controller-manager's RangeAllocator does.

Contract:
- One CIDR set per cluster CIDR (dual stack: one per family), Node prefixes from
  `--node-cidr-mask-size[-ipv4|-ipv6]`; `--service-cluster-ip-range` is never handed out.
- **No CIDR is given twice**: every Node's existing CIDRs are marked from a fresh list
  before anything is allocated; a CIDR is chosen and marked before any write (no await in
  between); the write is a JSON patch whose tests hold only while the Node has no pod CIDRs
  and the UID it was chosen for.
- A failed write is settled by reading the Node back: its CIDRs are released only if it
  really has none. A deleted Node's CIDRs are released; a Node left without CIDRs (range
  exhausted, write failed) is retried with backoff. Events `CIDRNotAvailable`,
  `CIDRAssignmentFailed`; a pod CIDR found outside `--cluster-cidr` is not tracked and
  gets a Warning `PodCIDROutsideClusterCIDR` naming the fix.
- What each Node holds is one `_Claim` per Node name, dropped by `_Allocator.forget`.

Upstream's rules kept and what trio-ccm does better: docs/controllers.md.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import prometheus_client
import trio

from trio_ccm.actors.backoff import NODE_RETRY_BASE_S, NODE_RETRY_CAP_S, Backoff
from trio_ccm.actors.cidr_set import CidrSet, IPNetwork, NoCidrLeftError
from trio_ccm.actors.controller import Controller, ControllerContext, ControllerSetup, info, warn
from trio_ccm.actors.keyed import Message
from trio_ccm.base.pacing import Paced
from trio_ccm.cloud.provider import CloudProvider
from trio_ccm.errors import CcmError, RetryAfter
from trio_ccm.kube.errors import InvalidError, KubeError, NotFoundError
from trio_ccm.kube.informer import Gone
from trio_ccm.kube.objects import NODES, Node
from trio_ccm.kube.patches import set_pod_cidrs
from trio_ccm.kube.wellknown import (
    COMPONENT_IPAM,
    NODE_IPAM_CONTROLLER,
    REASON_CIDR_ASSIGNMENT_FAILED,
    REASON_CIDR_NOT_AVAILABLE,
    REASON_POD_CIDR_OUTSIDE_CLUSTER,
)
from trio_ccm.logs import get_logger
from trio_ccm.settings import Settings, cidrs_of, node_mask_sizes

__all__ = ["IpamMetrics", "NodeIpamController"]

log = get_logger("trio_ccm.actors.node_ipam")

CIDR_UPDATE_WORKERS: Final = 30  # upstream's cidrUpdateWorkers: Node writes at once
CIDR_UPDATE_ATTEMPTS: Final = 3  # upstream's cidrUpdateRetries: attempts per write
# A Node waiting for a free CIDR looks again after 1 s, 2 s, ... at most every 60 s: a CIDR
# freed by a deleted Node is used within a minute.
RANGE_FULL_RETRY_BASE_S: Final = 1.0
RANGE_FULL_RETRY_CAP_S: Final = 60.0
# The list of Nodes at start is retried until it succeeds: nothing may be allocated before
# every Node's CIDRs are known.
LIST_RETRY_BASE_S: Final = 1.0
LIST_RETRY_CAP_S: Final = 30.0

ClaimState = Literal["chosen", "written", "held"]


class IpamMetrics:
    """Upstream's CIDR set metrics, labelled by cluster CIDR (created once per registry)."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        self.allocations = prometheus_client.Counter(
            "node_ipam_controller_cidrset_cidrs_allocations_total",
            "Counter measuring total number of CIDR allocations.",
            ["clusterCIDR"],
            registry=registry,
        )
        self.releases = prometheus_client.Counter(
            "node_ipam_controller_cidrset_cidrs_releases_total",
            "Counter measuring total number of CIDR releases.",
            ["clusterCIDR"],
            registry=registry,
        )
        self.usage = prometheus_client.Gauge(
            "node_ipam_controller_cidrset_usage_cidrs",
            "Gauge measuring percentage of allocated CIDRs.",
            ["clusterCIDR"],
            registry=registry,
        )
        # Upstream's spelling ("cirdset"), so existing dashboards keep working.
        self.max_cidrs = prometheus_client.Gauge(
            "node_ipam_controller_cirdset_max_cidrs",
            "Maximum number of CIDRs that can be allocated.",
            ["clusterCIDR"],
            registry=registry,
        )


@dataclass(slots=True)
class _Claim:
    """The pod CIDRs of one Node (by uid): chosen by us and not yet written, written and
    not yet seen in the cache, or held (seen on the Node)."""

    uid: str
    cidrs: tuple[IPNetwork, ...]
    state: ClaimState


def _pod_cidrs(node: Node) -> tuple[str, ...]:
    spec = node.spec
    return spec.pod_cidrs or ((spec.pod_cidr,) if spec.pod_cidr else ())


class NodeIpamController(Controller):
    """node-ipam-controller; see the module docstring."""

    name = NODE_IPAM_CONTROLLER
    informers = frozenset({"nodes"})
    client_name = "node-controller"
    event_component = COMPONENT_IPAM

    @classmethod
    def requires(cls, cloud: CloudProvider, settings: Settings) -> str | None:
        """Acts only with --allocate-node-cidrs (settings checked --cluster-cidr and the
        masks)."""
        if not settings.allocate_node_cidrs:
            return "--allocate-node-cidrs=false (Node pod CIDRs are assigned by someone else)"
        return None

    def __init__(self, setup: ControllerSetup) -> None:
        super().__init__(setup)
        self.metrics = IpamMetrics(setup.registry)

    async def run(self, ctx: ControllerContext) -> None:
        """Mark the CIDRs Nodes have, then one actor per Node."""
        allocator = _Allocator(ctx, self.metrics)
        async with ctx.nodes.subscription() as mailbox:
            await allocator.occupy_existing()
            actors = ctx.keyed(
                allocator.sync,
                limiter=trio.CapacityLimiter(CIDR_UPDATE_WORKERS),
                backoff=Backoff(NODE_RETRY_BASE_S, NODE_RETRY_CAP_S),
            )
            await actors.serve(mailbox)


class _Allocator:
    """One term of leadership: the CIDR sets and what each Node holds (one `_Claim` per
    Node name, dropped by `forget`)."""

    def __init__(self, ctx: ControllerContext, metrics: IpamMetrics) -> None:
        self.ctx = ctx
        self.metrics = metrics
        sizes = node_mask_sizes(ctx.settings)
        self.sets = [CidrSet(c, sizes[c.version]) for c in cidrs_of(ctx.settings.cluster_cidr)]
        self.services = cidrs_of(ctx.settings.service_cluster_ip_range)
        self.claims: dict[str, _Claim] = {}
        # Who holds each CIDR: released in its set only when nobody does any more.
        # Almost always one Node: its name itself, else a tuple of names (a set per CIDR
        # cost 216 bytes a Node).
        self.owners: dict[IPNetwork, str | tuple[str, ...]] = {}
        self.range_full = Backoff(RANGE_FULL_RETRY_BASE_S, RANGE_FULL_RETRY_CAP_S)
        for cidr_set in self.sets:
            self.metrics.max_cidrs.labels(str(cidr_set.cluster)).set(cidr_set.size)
        self.reserve_services()

    # -- the sets --------------------------------------------------------------------------
    def reserve_services(self) -> None:
        for service in self.services:
            for cidr_set in self.sets:
                if cidr_set.contains(service):
                    blocks = cidr_set.reserve(service)
                    self.observe(cidr_set, allocated=blocks)
                    log.info(
                        "ipam.service-range-excluded",
                        service_cidr=str(service),
                        cluster_cidr=str(cidr_set.cluster),
                        node_cidrs=blocks,
                    )

    def set_for(self, cidr: IPNetwork) -> CidrSet | None:
        for cidr_set in self.sets:
            if cidr_set.contains(cidr):
                return cidr_set
        return None

    def observe(self, cidr_set: CidrSet, *, allocated: int = 0, released: int = 0) -> None:
        label = str(cidr_set.cluster)
        if allocated:
            self.metrics.allocations.labels(label).inc(allocated)
        if released:
            self.metrics.releases.labels(label).inc(released)
        self.metrics.usage.labels(label).set(cidr_set.used / cidr_set.size)

    def take(self, node: Node, cidr: IPNetwork) -> None:
        """Record that `node` holds `cidr` (seen on it; chosen CIDRs are taken in choose),
        and mark it used."""
        name = node.metadata.name
        cidr_set = self.set_for(cidr)
        if cidr_set is None:
            clusters = [str(s.cluster) for s in self.sets]
            fix = (
                "add its range to --cluster-cidr, or delete the Node so it registers again "
                "and gets a CIDR from --cluster-cidr"
            )
            warn(
                self.ctx,
                node,
                reason=REASON_POD_CIDR_OUTSIDE_CLUSTER,
                message=f"Node {name}: pod CIDR {cidr} is outside --cluster-cidr "
                f"({', '.join(clusters)}), so it is not tracked: {fix}",
            )
            log.warning(
                "node.pod-cidr-outside-cluster",
                node=name,
                pod_cidr=str(cidr),
                cluster_cidrs=clusters,
                fix=fix,
            )
            return
        owners = self.holders(cidr)
        others = sorted(set(owners) - {name})
        if name not in owners:
            self.owners[cidr] = (*owners, name) if owners else name
        if others:
            log.warning(
                "node.pod-cidr-shared",
                node=name,
                pod_cidr=str(cidr),
                other_nodes=others,
                fix="pods on these Nodes get the same addresses: delete all but one of them "
                "so they register again and get their own CIDRs",
            )
        overlapping = [str(s) for s in self.services if s.overlaps(cidr)]
        if overlapping:
            log.warning(
                "node.pod-cidr-overlaps-services",
                node=name,
                pod_cidr=str(cidr),
                service_cidrs=overlapping,
                fix="pods and Services share addresses: delete the Node so it registers again "
                "and gets a CIDR outside --service-cluster-ip-range",
            )
        if not others:
            self.observe(cidr_set, allocated=cidr_set.occupy(cidr))

    def holders(self, cidr: IPNetwork) -> tuple[str, ...]:
        """The Nodes that hold `cidr`."""
        owners = self.owners.get(cidr, ())
        return (owners,) if isinstance(owners, str) else owners

    def give_back(self, name: str, cidr: IPNetwork) -> None:
        """Node `name` no longer holds `cidr`: free it if nobody else does."""
        if cidr not in self.owners:
            return
        owners = tuple(n for n in self.holders(cidr) if n != name)
        if owners:
            self.owners[cidr] = owners if len(owners) > 1 else owners[0]
            return
        del self.owners[cidr]
        cidr_set = self.set_for(cidr)
        if cidr_set is not None:
            self.observe(cidr_set, released=cidr_set.release(cidr))

    # -- what each Node holds ----------------------------------------------------------------
    def hold(self, node: Node, texts: Sequence[str]) -> None:
        """The Node has these pod CIDRs: record and mark them (and free ours it lacks)."""
        name = node.metadata.name
        held: list[IPNetwork] = []
        for text in texts:
            try:
                held.append(ipaddress.ip_network(text, strict=False))
            except ValueError:
                log.warning(
                    "node.pod-cidr-unreadable",
                    node=name,
                    pod_cidr=text,
                    fix="it is not tracked; delete the Node so it registers again",
                )
        cidrs = tuple(held)
        claim = self.claims.get(name)
        if claim is not None and claim.uid != node.metadata.uid:
            self.forget(name, "the Node registered again under the same name")
            claim = None
        if claim is not None and claim.cidrs == cidrs:
            claim.state = "held"
            return
        previous = claim.cidrs if claim is not None else ()
        self.claims[name] = _Claim(node.metadata.uid, cidrs, "held")
        for cidr in cidrs:
            if cidr not in previous:
                self.take(node, cidr)
        for cidr in previous:
            if cidr not in cidrs:
                self.give_back(name, cidr)
        if claim is not None:
            log.info(
                "node.pod-cidrs-set-elsewhere",
                node=name,
                pod_cidrs=[str(c) for c in cidrs],
                released=[str(c) for c in previous if c not in cidrs],
            )
        else:
            log.debug("node.pod-cidrs-occupied", node=name, pod_cidrs=[str(c) for c in cidrs])

    def forget(self, name: str, reason: str) -> None:
        """Release what Node `name` held or was given (it is gone, or the write failed)."""
        self.range_full.reset(name)
        claim = self.claims.pop(name, None)
        if claim is None:
            return
        for cidr in claim.cidrs:
            self.give_back(name, cidr)
        if claim.cidrs:
            log.info(
                "node.pod-cidrs-released",
                node=name,
                pod_cidrs=[str(c) for c in claim.cidrs],
                reason=reason,
            )

    def choose(self, node: Node) -> _Claim:
        """One free CIDR per cluster CIDR, marked used at once (no await in here: two Nodes
        can never be given the same one)."""
        name = node.metadata.name
        chosen: list[IPNetwork] = []
        for cidr_set in self.sets:
            try:
                chosen.append(cidr_set.allocate_next())
            except NoCidrLeftError:
                for taken, taken_from in zip(chosen, self.sets, strict=False):
                    taken_from.release(taken)
                raise self.range_exhausted(node, cidr_set) from None
        claim = self.claims[name] = _Claim(node.metadata.uid, tuple(chosen), "chosen")
        for cidr, cidr_set in zip(chosen, self.sets, strict=True):
            owners = self.holders(cidr)
            if name not in owners:
                self.owners[cidr] = (*owners, name) if owners else name
            self.observe(cidr_set, allocated=1)
        self.range_full.reset(name)
        return claim

    def range_exhausted(self, node: Node, cidr_set: CidrSet) -> RetryAfter:
        name = node.metadata.name
        first = self.range_full.failures(name) == 0
        delay = self.range_full.next_delay(name)
        info(
            self.ctx,
            node,
            reason=REASON_CIDR_NOT_AVAILABLE,
            message=f"Node {name} status is now: {REASON_CIDR_NOT_AVAILABLE}",
        )
        message = (
            f"Node {name}: the cluster CIDR {cidr_set.cluster} has no free "
            f"/{cidr_set.node_prefix} left: enlarge --cluster-cidr or delete Nodes"
        )
        (log.warning if first else log.debug)(
            "node.pod-cidr-unavailable",
            node=name,
            cluster_cidr=str(cidr_set.cluster),
            node_prefix=cidr_set.node_prefix,
            retry_in_s=round(delay, 3),
            fix="enlarge --cluster-cidr, raise --node-cidr-mask-size (smaller Node CIDRs for "
            "new Nodes), or delete Nodes",
        )
        return RetryAfter(delay, message)

    # -- one Node --------------------------------------------------------------------------
    async def sync(self, name: str, message: Message[Node]) -> str | None:
        if isinstance(message, Gone):
            self.forget(name, "the Node was deleted")
            return None
        node = message.obj
        claim = self.claims.get(name)
        if claim is not None and claim.uid != node.metadata.uid:
            self.forget(name, "the Node registered again under the same name")
            claim = None
        texts = _pod_cidrs(node)
        if texts:
            self.hold(node, texts)
            return None
        if node.metadata.deletion_timestamp:
            if claim is not None and claim.state == "chosen":
                self.forget(name, "the Node is being deleted")
            return None
        if claim is None:
            claim = self.choose(node)
        elif claim.state != "chosen":
            return None  # a cache entry older than our write: its echo is on the way
        return await self.write(node, claim)

    async def write(self, node: Node, claim: _Claim) -> str | None:
        """Write the chosen CIDRs (3 attempts); the resourceVersion written, if it was."""
        name = node.metadata.name
        texts = [str(c) for c in claim.cidrs]
        patch = set_pod_cidrs(texts, uid=claim.uid)
        error: KubeError | None = None
        for attempt in range(1, CIDR_UPDATE_ATTEMPTS + 1):
            try:
                written = await self.ctx.kube.patch(NODES, name, patch)
            except NotFoundError:
                self.forget(name, "the Node was deleted")
                return None
            except InvalidError as exc:  # a test failed (or the write was refused): look
                error = exc
                break
            except KubeError as exc:
                error = exc
                log.debug("node.pod-cidrs-write-failed", node=name, attempt=attempt, error=str(exc))
            else:
                claim.state = "written"
                log.info("node.pod-cidrs-assigned", node=name, pod_cidrs=texts)
                return written.metadata.resource_version
        assert error is not None
        await self.settle(node, claim, error)
        return None

    async def settle(self, node: Node, claim: _Claim, error: KubeError) -> None:
        """After a failed write: read the Node back and act on what it really holds."""
        name = node.metadata.name
        texts = [str(c) for c in claim.cidrs]
        try:
            current: Node = await self.ctx.kube.get(NODES, name, type=Node)
        except NotFoundError:
            self.forget(name, "the Node was deleted")
            return
        except KubeError as exc:
            raise CcmError(
                f"Node {name}: writing spec.podCIDRs {texts} failed ({error}) and reading the "
                f"Node back failed too ({exc}); the CIDRs stay reserved for it and the same "
                "write is retried with backoff"
            ) from error
        if current.metadata.uid != claim.uid:
            self.forget(name, "the Node registered again under the same name")
            return
        have = _pod_cidrs(current)
        if have:
            self.hold(current, have)
            return
        self.forget(name, "writing them to the Node failed")
        info(
            self.ctx,
            node,
            reason=REASON_CIDR_ASSIGNMENT_FAILED,
            message=f"Node {name} status is now: {REASON_CIDR_ASSIGNMENT_FAILED}",
        )
        raise CcmError(
            f"Node {name}: writing spec.podCIDRs {texts} failed after "
            f"{CIDR_UPDATE_ATTEMPTS} attempts ({error}); they were released and the Node is "
            "retried with backoff (check the API server and this controller's RBAC for "
            "patching nodes)"
        ) from error

    # -- start -------------------------------------------------------------------------------
    async def occupy_existing(self) -> None:
        """Mark the pod CIDRs every Node has: from a fresh list (the cache may lag writes
        made just before this term), merged with the cache."""
        latest = {n.metadata.name: n for n in self.ctx.nodes.items()}
        latest.update((n.metadata.name, n) for n in await self.list_nodes())
        paced = Paced()  # a term that starts among 100,000 Nodes holds no step for long
        for node in latest.values():
            texts = _pod_cidrs(node)
            if texts:
                self.hold(node, texts)
            await paced.step()
        log.info(
            "ipam.started",
            nodes=len(latest),
            nodes_with_cidrs=len(self.claims),
            cidr_sets=[
                {
                    "cluster_cidr": str(s.cluster),
                    "node_prefix": s.node_prefix,
                    "used": s.used,
                    "size": s.size,
                }
                for s in self.sets
            ],
        )

    async def list_nodes(self) -> list[Node]:
        backoff = Backoff(LIST_RETRY_BASE_S, LIST_RETRY_CAP_S)
        while True:
            try:
                return await self._list_nodes()
            except KubeError as exc:
                delay = backoff.next_delay("list")
                log.warning(
                    "ipam.list-failed",
                    error=str(exc),
                    retry_in_s=round(delay, 3),
                    reason="no CIDR is allocated before every Node's CIDRs are known",
                )
                await trio.sleep(delay)

    async def _list_nodes(self) -> list[Node]:
        nodes: list[Node] = []
        token = ""
        while True:
            page = await self.ctx.kube.list(NODES, type=Node, limit=500, continue_token=token)
            nodes += page.items
            token = page.metadata.continue_
            if not token:
                return nodes
