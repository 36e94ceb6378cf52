"""Service load balancers on OpenStack: Octavia load balancers built as OCCM builds them,
their floating IPs, and the leaked-load-balancer sweep's inventory.

`lbconfig.py` turns a Service into a plan (or a refusal), `octavia.py` holds the calls,
`floatingips.py` the floating IPs. This module decides, per call of the service controller:

- **Find** the load balancer: by the id this process made or saw, else by the annotation
  `loadbalancer.openstack.org/load-balancer-id`, else by OCCM's name (then the legacy
  `a<uid>` name); `DELETED` / `PENDING_DELETE` ones are ignored, as OCCM does.
- **Create** the load balancer (tagged with its name (OCCM), `trio-ccm.owner=<cluster
  identity>`, `trio-ccm.uid=<service uid>` and `trio-ccm.service=<ns>/<name>`) and return at
  once: `PENDING_*` is a `RetryAfter` with capped, jittered backoff, never a wait in the
  worker, so other Services go on. Its children are then added one by one (listener, pool,
  one batch of members, monitor), each write waiting out the 409 of the one before. Not
  OCCM's single fully-populated POST: on Octavia 11 (Zed) that POST commits the load
  balancer before its children and the worker can read it in between, leaving listeners,
  pools and members in `PENDING_CREATE` for ever under an `ACTIVE` load balancer (seen on
  the test world), and a listener or pool POST with children inline answers 500.
- **Verify cheaply**: once `ACTIVE`, the tag `trio-ccm.applied=<hash>` (the plan and the
  address, written with the last change) equal to the current plan's means only the
  members may differ: with the pools and members this process applied, nothing is read;
  after a restart or a takeover, one `GET .../status` (the status tree: listeners, pools,
  members) per load balancer, and the load balancers themselves come from one listing
  for all of them (`trio-ccm.owner` tag, or the project's). Otherwise the children are read
  and each difference fixed (listener PUT, pool re-created on a protocol change, one batch
  member PUT per pool, monitor create/update/delete, stale listeners and pools deleted),
  then the tag is written.
- **Node-set changes** (`update_load_balancer`): with the members this process applied
  known, one batch member PUT per pool whose members changed, and no read.
- **ERROR**: a load balancer this cluster owns found in ERROR is deleted (with our
  floating IP) and a `RetryAfter` says so, naming it and when the new one is made (the
  controller's Warning Event); the new one is made only after a per-Service backoff that
  grows with each replacement (`replace_backoff_s`: 5-10 s, doubling up to 150-300 s,
  jittered; counted again from the start once a replacement is an hour old), so a cloud
  that puts load balancers in ERROR because it is overloaded is not fed 50 new creates
  every few seconds (docs/benchmarks.md: 250 replacements in 7.5 minutes, before).
- **Creates in flight**: at most 8 load balancers of this provider are being
  created at once (`[LoadBalancer] trio-ccm-max-creates-in-flight`), from the POST until
  the load balancer is seen out of `PENDING_CREATE` (or the Service is deleted, or
  `CREATE_SLOT_TTL_S` passes). A create waits for a slot within `WRITE_PATIENCE_S`, then
  is a `RetryAfter`: Octavia's worker builds every load balancer it is given at once, and
  the test world's one worker put them in ERROR when given 50.
- **Polls are one listing**: a Service waiting out `PENDING_*` reads its load balancer
  from one listing of the cluster's load balancers shared by every Service polling within
  `BOARD_TTL_S` (falling back to its own `GET` when it is not in it), not one `GET` each:
  50 Services polling their own made Octavia's one API process (serial) the bottleneck.
- **A create whose outcome is unknown** (timed out, or a 5xx after it was sent) may still
  be made by Octavia until its `late_landing_s` (the client's timeout) and a margin
  (`UNSURE_MARGIN_S`: it may wait in the API's queue meanwhile): until then, a Service
  whose load balancer is not found by name makes none (a `RetryAfter`, looking again), so
  the lost answer never becomes a second load balancer; the first one, once it lands, is
  found by name and adopted. The create slot stays held meanwhile.
- **Written back** (`LoadBalancerStatus.annotations`, set on the Service by the
  controller): `load-balancer-id` and `load-balancer-address`, as OCCM. The id annotation
  naming the Service's own load balancer is no change of its plan (`_as_applied`); after a
  restart it is found in the one listing. When the load balancer it names is gone, a
  deletion has nothing to do; an ensure makes one again by name if the Service also carries
  the written-back `load-balancer-address` (it was the Service's own: replaced after ERROR,
  or deleted while the Service wanted none), else refuses (a user's id that names nothing).
- **Ownership**: the cluster identity comes from the running CCM (`use_cluster_identity`,
  the kube-system Namespace UID). A load balancer tagged with another cluster's identity is
  refused (`ServiceRefused`), even with the same `--cluster-name`, and a deletion leaves it
  alone (it is none of this Service's); one carrying no owner tag (made by OCCM, or by
  trio-ccm before the identity was known) is adopted and tagged on its next full
  reconcile. Shared load balancers (`load-balancer-id` naming another Service's or
  a user's) get only this Service's listeners (tagged with its name) and its name tag, up
  to `max-shared-lb`; they are never deleted by a Service that does not own them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from trio_ccm.cloud.openstack.errors import NotFoundError, OpenStackOutcomeUnknownError
from trio_ccm.cloud.openstack.floatingips import FloatingIps
from trio_ccm.cloud.openstack.lbconfig import (
    LB_ADDRESS,
    LB_ID,
    LbOptions,
    LbPlan,
    Member,
    PortPlan,
    lb_name,
    members,
    plan,
)
from trio_ccm.cloud.openstack.octavia import (
    WRITE_PATIENCE_S,
    Api,
    Features,
    Octavia,
    acquire_by,
    backoff_s,
)
from trio_ccm.cloud.openstack.secgroups import SecurityGroups
from trio_ccm.cloud.provider import (
    LoadBalancerIngress,
    LoadBalancerStatus,
    NodeInfo,
    OwnedLoadBalancer,
    ServiceInfo,
    ServicePort,
    ServiceRefused,
)
from trio_ccm.errors import CcmError, RetryAfter
from trio_ccm.logs import get_logger

__all__ = ["OWNER_TAG", "OpenStackLoadBalancers", "replace_backoff_s"]

log = get_logger("trio_ccm.cloud.openstack.loadbalancers")

OWNER_TAG: Final = "trio-ccm.owner="
SERVICE_TAG: Final = "trio-ccm.service="
UID_TAG: Final = "trio-ccm.uid="
APPLIED_TAG: Final = "trio-ccm.applied="
ADDRESS_TAG: Final = "trio-ccm.address="
OCCM_PREFIX: Final = "kube_service_"
LISTING_TTL_S: Final = 60.0
CREATE_SLOT_TTL_S: Final = 600.0
"""A create slot held longer than this is taken back (its Service was never seen again)."""
UNSURE_LANDING_S: Final = 60.0
"""How long a create with an unknown outcome may land when the error does not say."""
UNSURE_MARGIN_S: Final = 60.0
"""Added to a lost create's `late_landing_s` (the client's timeout): a request that timed
out at the client may still wait in the API's queue, or be half done, when it fires."""
BOARD_TTL_S: Final = 1.0
"""How old a listing a polling Service may read its load balancer's state from."""
_REPLACE_BASE_S: Final = 10.0
_REPLACE_CAP_S: Final = 300.0
_REPLACE_RESET_S: Final = 3600.0
_GONE: Final = frozenset({"DELETED", "PENDING_DELETE"})
_OURS: Final = (OWNER_TAG, SERVICE_TAG, UID_TAG, APPLIED_TAG, ADDRESS_TAG)


def replace_backoff_s(replaced: int, rng: random.Random) -> float:
    """How long after its `replaced`-th replacement (0 for the first) a load balancer found
    in ERROR is made again: 5-10 s, doubling up to 150-300 s (the upper half of the step,
    jittered, so replacements of many Services never line up)."""
    step = min(_REPLACE_CAP_S, _REPLACE_BASE_S * 2.0 ** min(replaced, 16))
    return step / 2 + rng.random() * step / 2


@dataclass(slots=True)
class _Tries:
    """Where one Service is in its tries: the PENDING polls in a row, the ERROR
    replacements, a create whose outcome is unknown, and whether it holds a create slot."""

    waits: int = 0  # PENDING rounds in a row
    replaced: int = 0  # ERROR replacements (counted again after _REPLACE_RESET_S)
    replaced_at: float = -math.inf
    create_after: float = -math.inf  # no new load balancer before (trio time)
    unsure_until: float = -math.inf  # a create with an unknown outcome may land until
    slot_since: float | None = None  # holds a create slot since
    polling: bool = False  # waiting out PENDING_*: read from the shared listing


@dataclass(slots=True)
class _Known:
    """What this process applied to one load balancer (dropped on any doubt)."""

    lb_id: str
    plan: LbPlan
    pools: dict[int, str] = field(default_factory=dict)  # port index -> pool id
    members: dict[str, tuple[Member, ...]] = field(default_factory=dict)  # pool id -> members
    status: LoadBalancerStatus = field(default_factory=LoadBalancerStatus)


def _as_applied(p: LbPlan, lb_id: str) -> LbPlan:
    """The plan as applied to load balancer `lb_id`: a `load-balancer-id` annotation that
    names it (the one written back) changes nothing about what it should be."""
    return dataclasses.replace(p, shared_lb_id="") if p.shared_lb_id == lb_id else p


def _tag(tags: Sequence[str], prefix: str) -> str:
    return next((t[len(prefix) :] for t in tags if t.startswith(prefix)), "")


def _tags(lb: Mapping[str, Any]) -> list[str]:
    tags = lb.get("tags")
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def _member_key(m: Mapping[str, Any] | Member) -> tuple[str, str, int, int]:
    if isinstance(m, Member):
        return (m.name, m.address, m.protocol_port, m.monitor_port or 0)
    return (
        str(m.get("name") or ""),
        str(m.get("address") or ""),
        int(m.get("protocol_port") or 0),
        int(m.get("monitor_port") or 0),
    )


def _l4(protocol: str) -> str:
    """The transport a listener protocol takes its port on (HTTP and TLS listen on TCP)."""
    return "TCP" if protocol in ("HTTP", "HTTPS", "TERMINATED_HTTPS", "TCP") else protocol


def _pools_in_tree(
    tree: Mapping[str, Any], p: LbPlan
) -> dict[int, tuple[str, tuple[Member, ...]]] | None:
    """Port index -> (pool id, members) from Octavia's status tree, for this plan's
    listeners (by name); None when one is missing or has no single pool."""
    lb = tree.get("statuses", {}).get("loadbalancer", {}) if isinstance(tree, Mapping) else {}
    by_name = {str(x.get("name")): x for x in lb.get("listeners") or [] if isinstance(x, dict)}
    out: dict[int, tuple[str, tuple[Member, ...]]] = {}
    for port in p.ports:
        listener = by_name.get(port.listener_name)
        pools = (listener or {}).get("pools") or []
        if len(pools) != 1 or pools[0].get("provisioning_status") != "ACTIVE":
            return None
        ms = []
        for m in pools[0].get("members") or []:
            if "address" not in m or "protocol_port" not in m:
                return None
            ms.append(Member(str(m.get("name") or ""), str(m["address"]), int(m["protocol_port"])))
        out[port.index] = (str(pools[0]["id"]), tuple(ms))
    return out


class OpenStackLoadBalancers:
    """`LoadBalancers` and `LoadBalancerInventory` on Octavia (see the module docstring).

    `cluster_identity` is what tells this cluster from another with the same
    `--cluster-name` (the `kube-system` namespace UID); "" tags no owner and adopts any
    load balancer with this cluster's OCCM name, as OCCM does.
    """

    def __init__(
        self,
        api: Api,
        options: LbOptions,
        *,
        cluster_identity: str = "",
        rng: random.Random | None = None,
    ) -> None:
        self.options = options
        self.identity = cluster_identity
        self.rng = rng if rng is not None else random.Random()  # noqa: S311 - jitter
        self.octavia = Octavia(api, rng=self.rng, max_writes=options.max_writes_in_flight)
        self._creates = trio.CapacityLimiter(options.max_creates_in_flight)
        self.fips = FloatingIps(self.octavia, identity=cluster_identity)
        self.groups = SecurityGroups(api)
        self._known: dict[str, _Known] = {}  # Service uid -> what we applied
        self._tries: dict[str, _Tries] = {}  # Service uid -> where its tries are
        self._board: dict[str, dict[str, Any]] = {}  # lb id -> as last listed for polls
        self._board_at = -math.inf
        self._board_lock = trio.Lock()
        self._board_listings = 0
        self._listing: dict[str, list[dict[str, Any]]] | None = None
        self._listed_at = 0.0
        self._listing_lock = trio.Lock()

    def use_cluster_identity(self, identity: str) -> None:
        """From now on, tag and find load balancers (and floating IPs) with `identity`."""
        if identity == self.identity:
            return
        self.identity = identity
        self.fips.identity = identity
        self._listing = None  # listed under the other identity

    def load_balancer_name(self, cluster: str, service: ServiceInfo) -> str:
        return lb_name(cluster, service)

    # -- the plan --------------------------------------------------------------------------
    def _plan(self, cluster: str, service: ServiceInfo) -> LbPlan:
        return plan(service, self.options, cluster)

    def _plan_to_find(self, cluster: str, service: ServiceInfo) -> LbPlan:
        """The plan, or for a Service refused as written now, one that still names (and so
        finds) the load balancer it may have from before."""
        try:
            return self._plan(cluster, service)
        except ServiceRefused:
            bare = ServiceInfo(
                service.namespace,
                service.name,
                service.uid,
                annotations={k: v for k, v in service.annotations.items() if k == LB_ID},
                ports=(ServicePort("", "TCP", 1, 0),),
            )
            return plan(bare, self.options, cluster)

    @staticmethod
    def _check_features(p: LbPlan, feats: Features, service: ServiceInfo) -> None:
        for port in p.ports:
            if port.service_protocol == "SCTP" and not feats.sctp:
                raise ServiceRefused(
                    f"Service {service.key}: port {port.port} is SCTP and this Octavia "
                    f"(API {feats.version[0]}.{feats.version[1]}) needs 2.23 for it"
                )
            if port.pool_protocol == "PROXYV2" and not feats.proxy_v2:
                raise ServiceRefused(
                    f"Service {service.key}: proxy-protocol v2 needs Octavia API 2.22; write "
                    '"true" (v1) instead'
                )

    def _wanted(
        self, p: LbPlan, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> dict[int, tuple[Member, ...]]:
        health = service.health_check_node_port if service.external_traffic_policy == "Local" else 0
        return {port.index: members(p, port, nodes, health) for port in p.ports}

    @staticmethod
    def _applied(p: LbPlan, lb_id: str, address: str) -> str:
        """The hash of what a load balancer was last made to be (not its members: a
        node-set change writes them alone, and the status tree reads them back)."""
        return hashlib.sha256(repr((_as_applied(p, lb_id), address)).encode()).hexdigest()[:16]

    def _pending(self, service: ServiceInfo, what: str) -> RetryAfter:
        tries = self._tries.setdefault(service.uid, _Tries())
        delay = backoff_s(tries.waits, self.rng)
        tries.waits += 1
        tries.polling = True
        return RetryAfter(delay, f"{what}; looking again in {delay:.1f} s")

    async def _polled(self, lb_id: str) -> dict[str, Any] | None:
        """The load balancer as the shared listing (at most `BOARD_TTL_S` old) has it, or
        from its own GET when the listing has it not (made since, or not tagged ours)."""
        async with self._board_lock:
            if trio.current_time() - self._board_at >= BOARD_TTL_S:
                lbs = await (
                    self.octavia.find_lbs(tags=OWNER_TAG + self.identity)
                    if self.identity
                    else self.octavia.find_lbs()
                )
                self._board = {str(lb.get("id")): lb for lb in lbs}
                self._board_at = trio.current_time()
                self._board_listings += 1
        lb = self._board.get(lb_id)
        return lb if lb is not None else await self.octavia.get_lb(lb_id)

    # -- creating, paced ---------------------------------------------------------------------
    def statistics(self) -> dict[str, int]:
        """Octavia writes and load-balancer creates in flight, and how often a write found
        every slot taken."""
        return {
            "writes_in_flight": self.octavia.writes_in_flight,
            "write_slot_waits": self.octavia.slot_waits,
            "creates_in_flight": int(self._creates.borrowed_tokens),
            "replacements": sum(t.replaced for t in self._tries.values()),
            "poll_listings": self._board_listings,
        }

    def _may_create(self, p: LbPlan, service: ServiceInfo) -> None:
        """Raise `RetryAfter` while the Service may not make a load balancer yet: one in
        ERROR was just replaced (its backoff), or a create whose answer was lost may still
        land (looked up by name again on the next try, never made twice)."""
        tries = self._tries.get(service.uid)
        if tries is None:
            return
        now = trio.current_time()
        if now < tries.unsure_until:
            delay = min(tries.unsure_until - now, backoff_s(min(tries.waits, 3), self.rng))
            tries.waits += 1
            raise RetryAfter(
                delay,
                f"load balancer {p.name}: the answer to its create was lost and Octavia may "
                f"still make it (for {tries.unsure_until - now:.0f} s more); not making "
                f"another, looking it up again in {delay:.1f} s",
            )
        if tries.unsure_until > -math.inf:
            tries.unsure_until = -math.inf  # it did not land: made again below
            log.warning("openstack.lb-create-lost", service=service.key, name=p.name)
            self._release_create(service.uid)
        if now < tries.create_after:
            delay = tries.create_after - now
            raise RetryAfter(
                delay,
                f"load balancer {p.name} was replaced after ERROR (replacement "
                f"{tries.replaced}); the new one is made in {delay:.1f} s",
            )

    async def _create_slot(self, p: LbPlan, service: ServiceInfo) -> None:
        """Hold one of the create slots for the Service (kept until its load balancer is
        out of PENDING_CREATE), waiting for one within `WRITE_PATIENCE_S`."""
        tries = self._tries.setdefault(service.uid, _Tries())
        if tries.slot_since is not None:
            return
        now = trio.current_time()
        for uid, other in self._tries.items():  # slots of Services never seen again
            if other.slot_since is not None and now - other.slot_since > CREATE_SLOT_TTL_S:
                self._release_create(uid)
        if not await acquire_by(self._creates, now + WRITE_PATIENCE_S, service.uid):
            delay = backoff_s(3, self.rng)
            raise RetryAfter(
                delay,
                f"load balancer {p.name}: {self._creates.total_tokens:g} load balancers "
                "are being created ([LoadBalancer] trio-ccm-max-creates-in-flight); "
                f"trying again in {delay:.1f} s",
            )
        tries.slot_since = trio.current_time()

    def _release_create(self, uid: str) -> None:
        tries = self._tries.get(uid)
        if tries is not None and tries.slot_since is not None:
            tries.slot_since = None
            self._creates.release_on_behalf_of(uid)

    # -- finding ---------------------------------------------------------------------------
    async def _listed(self, name: str = "", *, lb_id: str = "") -> list[dict[str, Any]] | None:
        """The load balancers named `name` (or the one with id `lb_id`) in the listing made
        once after this process started (one call for all of them: a restart or takeover
        then costs no call per load balancer to find it); None past `LISTING_TTL_S` or
        when it has none."""
        async with self._listing_lock:
            now = trio.current_time()
            if self._listing is None:
                lbs = await (
                    self.octavia.find_lbs(tags=OWNER_TAG + self.identity)
                    if self.identity
                    else self.octavia.find_lbs()
                )
                self._listing = {}
                for lb in lbs:
                    self._listing.setdefault(str(lb.get("name") or ""), []).append(lb)
                self._listed_at = now
            if now - self._listed_at > LISTING_TTL_S:
                return None
            if lb_id:
                for lbs in self._listing.values():
                    found = [lb for lb in lbs if lb.get("id") == lb_id]
                    if found:
                        lbs.remove(found[0])
                        return found
                return None
            return self._listing.pop(name, None)

    async def _by_name(
        self, p: LbPlan, service: ServiceInfo, gone: frozenset[str] = _GONE, *, refuse: bool = True
    ) -> dict[str, Any] | None:
        """The load balancer by OCCM's name (then the legacy one). One owned by another
        cluster is refused (`ServiceRefused`), or with `refuse=False` (deleting) is none of
        this Service's: never deleted, and no finalizer waits for it."""
        for name in (p.name, p.legacy_name):
            listed = await self._listed(name)
            found = [
                lb
                for lb in (listed if listed else await self.octavia.find_lbs(name=name))
                if lb.get("provisioning_status") not in gone
            ]
            if not found:
                continue
            if self.identity:
                mine = [lb for lb in found if _tag(_tags(lb), OWNER_TAG) == self.identity]
                unowned = [lb for lb in found if not _tag(_tags(lb), OWNER_TAG)]
                if mine or unowned:
                    found = mine or unowned
                elif not refuse:
                    return None
                else:
                    owner = _tag(_tags(found[0]), OWNER_TAG)
                    raise ServiceRefused(
                        f"Service {service.key}: load balancer {name} ({found[0].get('id')}) "
                        f"belongs to another cluster (tag {OWNER_TAG}{owner}); give this "
                        "cluster its own --cluster-name or delete that load balancer"
                    )
            if len(found) > 1:
                ids = ", ".join(str(lb.get("id")) for lb in found)
                raise CcmError(
                    f"Service {service.key}: {len(found)} load balancers are named {name} "
                    f"({ids}); delete the extra ones"
                )
            return found[0]
        return None

    async def _find(
        self, p: LbPlan, service: ServiceInfo, *, deleting: bool = False
    ) -> tuple[dict[str, Any] | None, bool]:
        """(the load balancer or None, whether this Service owns it). `deleting` also finds
        one in PENDING_DELETE (a deletion is done only once Octavia answers 404)."""
        gone = frozenset({"DELETED"}) if deleting else _GONE
        known = self._known.get(service.uid)
        if known is not None:
            tries = self._tries.get(service.uid)
            lb = await (
                self._polled(known.lb_id)
                if tries is not None and tries.polling
                else self.octavia.get_lb(known.lb_id)
            )
            if lb is not None and lb.get("provisioning_status") not in gone:
                return lb, lb.get("name") in (p.name, p.legacy_name)
            self._known.pop(service.uid, None)
        if p.shared_lb_id:
            # the one written back is in the listing after a restart (no call of its own)
            listed = await self._listed(lb_id=p.shared_lb_id)
            lb = listed[0] if listed else await self.octavia.get_lb(p.shared_lb_id)
            if lb is None and deleting:
                return None, False  # nothing to delete, whatever the annotation says
            if lb is None and LB_ADDRESS in service.annotations:
                # written back with the address: the Service's own, gone (replaced after
                # ERROR, or deleted while the Service did not want one): made again by name
                return await self._by_name(p, service, gone), True
            if lb is None:
                raise ServiceRefused(
                    f"Service {service.key}: annotation loadbalancer.openstack.org/"
                    f"load-balancer-id names {p.shared_lb_id}, which does not exist; remove "
                    "the annotation to have a load balancer made"
                )
            owned = lb.get("name") in (p.name, p.legacy_name)
            owner = _tag(_tags(lb), OWNER_TAG)
            if self.identity and owner and owner != self.identity:
                if deleting:
                    return None, False
                raise ServiceRefused(
                    f"Service {service.key}: load balancer {p.shared_lb_id} belongs to another "
                    f"cluster (tag {OWNER_TAG}{owner}); remove the annotation"
                )
            return lb, owned
        return await self._by_name(p, service, gone, refuse=not deleting), True

    # -- LoadBalancers ---------------------------------------------------------------------
    async def get_load_balancer(
        self, cluster: str, service: ServiceInfo
    ) -> LoadBalancerStatus | None:
        p = self._plan_to_find(cluster, service)
        lb, owned = await self._find(p, service, deleting=True)
        if lb is None:
            return None
        if not owned and p.name not in _tags(lb):
            return None  # shared, and this Service never joined it
        address = _tag(_tags(lb), ADDRESS_TAG) or str(lb.get("vip_address") or "")
        return self._status(p, address)

    def _status(self, p: LbPlan, address: str) -> LoadBalancerStatus:
        if not address:
            return LoadBalancerStatus()
        if p.hostname:
            return LoadBalancerStatus((LoadBalancerIngress(hostname=p.hostname),))
        if p.proxy and self.options.enable_ingress_hostname:
            host = f"{address}.{self.options.ingress_hostname_suffix}"
            return LoadBalancerStatus((LoadBalancerIngress(hostname=host),))
        mode = "Proxy" if p.proxy else "VIP"
        return LoadBalancerStatus((LoadBalancerIngress(ip=address, ip_mode=mode),))

    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> LoadBalancerStatus:
        """Make the load balancer what the Service asks for; its status carries the
        annotations to write back (as OCCM): `load-balancer-id`, naming the load balancer
        the Service uses, so that it is found by id from then on, and
        `load-balancer-address`, the address it serves at (useful behind a hostname)."""
        lb_id, address, status = await self._ensure(cluster, service, nodes)
        annotations = {LB_ID: lb_id} | ({LB_ADDRESS: address} if address else {})
        return dataclasses.replace(status, annotations=annotations)

    async def _ensure(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[str, str, LoadBalancerStatus]:
        p = self._plan(cluster, service)
        feats = await self.octavia.features()
        self._check_features(p, feats, service)
        wanted = self._wanted(p, service, nodes)
        lb, owned = await self._find(p, service)
        if lb is None:
            self._may_create(p, service)
            await self._create_slot(p, service)
            started = trio.current_time()
            try:
                lb = await self._create(p, service, wanted, feats)
            except OpenStackOutcomeUnknownError as exc:
                # the slot stays held: the load balancer may be being made
                landing = UNSURE_LANDING_S if exc.late_landing_s is None else exc.late_landing_s
                self._tries[service.uid].unsure_until = started + landing + UNSURE_MARGIN_S
                raise
            except BaseException:
                self._release_create(service.uid)
                raise
            raise self._pending(service, f"load balancer {p.name} ({lb['id']}) is being created")
        lb_id = str(lb["id"])
        state = str(lb.get("provisioning_status") or "")
        tries = self._tries.get(service.uid)
        if tries is not None:
            tries.unsure_until = -math.inf  # found: whatever was lost has landed
            if state != "PENDING_CREATE":
                self._release_create(service.uid)
        if state == "ERROR":
            if owned:
                await self._replace(p, lb, service)
            raise CcmError(
                f"shared load balancer {lb_id} is in ERROR; its owner must fix or delete it"
            )
        if state != "ACTIVE":
            raise self._pending(service, f"load balancer {p.name} ({lb_id}) is {state}")
        if tries is not None:
            tries.waits = 0
            tries.polling = False
        tags = _tags(lb)
        if owned:
            self._check_owned(p, lb, service)
            address = _tag(tags, ADDRESS_TAG)
            fresh = _tag(tags, APPLIED_TAG) == self._applied(p, lb_id, address)
            if address and fresh and _tag(tags, OWNER_TAG) == self.identity:
                # what we last wrote is what is wanted now: only the members may differ
                # (a load balancer made before this cluster's identity was known is
                # reconciled once, which tags it as ours)
                status = self._status(p, address)
                if await self._members_only(service, lb_id, p, wanted, status):
                    if p.manage_security_groups:
                        await self.groups.ensure(p, service, nodes, wanted)
                    return lb_id, address, status
        else:
            self._check_shared(p, lb, service)
        pools = await self._reconcile(p, lb, wanted, feats, owned=owned)
        address = await self._address(p, lb, owned=owned, service=service)
        if p.manage_security_groups:
            await self.groups.ensure(p, service, nodes, wanted)
        else:
            await self.groups.delete(p, service)
        new_tags = [t for t in tags if not t.startswith(_OURS)]
        if p.name not in new_tags:
            new_tags.append(p.name)
        if owned:
            if self.identity:
                new_tags.append(OWNER_TAG + self.identity)
            new_tags += [
                UID_TAG + service.uid,
                SERVICE_TAG + service.key,
                APPLIED_TAG + self._applied(p, lb_id, address),
                ADDRESS_TAG + address,
            ]
        if sorted(new_tags) != sorted(tags):
            await self.octavia.update_lb(lb_id, {"tags": new_tags})
        status = self._status(p, address)
        self._known[service.uid] = _Known(
            lb_id,
            _as_applied(p, lb_id),
            pools=pools,
            members={pools[i]: m for i, m in wanted.items() if i in pools},
            status=status,
        )
        log.info("openstack.lb-ensured", service=service.key, lb=lb_id, address=address)
        return lb_id, address, status

    async def _replace(self, p: LbPlan, lb: Mapping[str, Any], service: ServiceInfo) -> None:
        """Delete the Service's load balancer found in ERROR; the new one is made after the
        Service's replacement backoff (module docstring). Raises the `RetryAfter` that says
        so (the controller's Warning Event)."""
        await self._delete_owned(p, lb, keep_fip=p.keep_floating_ip)
        self._known.pop(service.uid, None)
        tries = self._tries.setdefault(service.uid, _Tries())
        now = trio.current_time()
        if now - tries.replaced_at > _REPLACE_RESET_S:
            tries.replaced = 0
        delay = replace_backoff_s(tries.replaced, self.rng)
        tries.replaced += 1
        tries.replaced_at = now
        tries.create_after = now + delay
        tries.waits = 0
        tries.polling = False
        log.warning(
            "openstack.lb-replaced",
            service=service.key,
            lb=lb.get("id"),
            name=p.name,
            replacement=tries.replaced,
            create_in_s=round(delay, 1),
        )
        raise RetryAfter(
            delay,
            f"load balancer {p.name} ({lb.get('id')}) was in ERROR: deleted it; a new one is "
            f"made in {delay:.1f} s (replacement {tries.replaced} of this Service, each "
            "waiting longer)",
        )

    async def _members_only(
        self,
        service: ServiceInfo,
        lb_id: str,
        p: LbPlan,
        wanted: Mapping[int, tuple[Member, ...]],
        status: LoadBalancerStatus,
    ) -> bool:
        """Bring the members of a load balancer whose tag says the rest is as planned to
        `wanted`: with no read when this process knows its pools and members, else with one
        read of the status tree. False when the tree does not show every pool (then the
        caller reconciles it whole)."""
        known = self._known.get(service.uid)
        p = _as_applied(p, lb_id)
        if known is not None and known.lb_id == lb_id and known.plan == p and known.pools:
            pools, have = known.pools, dict(known.members)
        else:
            tree = await self.octavia.status_tree(lb_id)
            found = _pools_in_tree(tree, p)
            if found is None:
                return False
            pools = {i: pool_id for i, (pool_id, _) in found.items()}
            have = dict(found.values())
        if len(pools) != len(p.ports):
            return False
        self._known[service.uid] = known = _Known(lb_id, p, pools=pools, status=status)
        for port in p.ports:
            pool_id = pools[port.index]
            ms = wanted[port.index]
            current = have.get(pool_id)
            if current is None or sorted(map(_member_key, current)) != sorted(map(_member_key, ms)):
                await self.octavia.replace_members(pool_id, [m.body() for m in ms])
            known.members[pool_id] = ms
        return True

    def _check_owned(self, p: LbPlan, lb: Mapping[str, Any], service: ServiceInfo) -> None:
        owner = _tag(_tags(lb), OWNER_TAG)
        if self.identity and owner and owner != self.identity:
            raise ServiceRefused(
                f"Service {service.key}: load balancer {lb.get('id')} belongs to another "
                f"cluster (tag {OWNER_TAG}{owner}); give this cluster its own --cluster-name"
            )

    def _check_shared(self, p: LbPlan, lb: Mapping[str, Any], service: ServiceInfo) -> None:
        if p.internal:
            raise ServiceRefused(
                f"Service {service.key}: an internal Service cannot share load balancer "
                f"{lb.get('id')}; remove the load-balancer-id annotation or the internal one"
            )
        tags = _tags(lb)
        users = [t for t in tags if t.startswith(OCCM_PREFIX)]
        if p.name not in users and len(users) + 1 > self.options.max_shared_lb:
            raise ServiceRefused(
                f"Service {service.key}: load balancer {lb.get('id')} already serves "
                f"{len(users)} Services (max-shared-lb = {self.options.max_shared_lb}); "
                "raise [LoadBalancer] max-shared-lb or use another load balancer"
            )

    # -- creating --------------------------------------------------------------------------
    def _listener_body(self, port: PortPlan, p: LbPlan, feats: Features) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": port.listener_name,
            "protocol": port.protocol,
            "protocol_port": port.port,
            "connection_limit": port.connection_limit,
        }
        if feats.tags:
            body["tags"] = [p.name]
        if p.provider != "ovn":
            body |= dict(
                zip(
                    (
                        "timeout_client_data",
                        "timeout_member_connect",
                        "timeout_member_data",
                        "timeout_tcp_inspect",
                    ),
                    port.timeouts_ms,
                    strict=True,
                )
            )
            if feats.allowed_cidrs:
                body["allowed_cidrs"] = list(port.allowed_cidrs)
        if port.insert_xff:
            body["insert_headers"] = {"X-Forwarded-For": "true"}
        if port.tls_ref:
            body["default_tls_container_ref"] = port.tls_ref
        return body

    def _pool_body(self, port: PortPlan, p: LbPlan, feats: Features) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": port.pool_name,
            "protocol": port.pool_protocol,
            "lb_algorithm": port.lb_method,
        }
        if feats.tags:
            body["tags"] = [p.name]
        if port.source_ip_persistence:
            body["session_persistence"] = {"type": "SOURCE_IP"}
        return body

    async def _create(
        self,
        p: LbPlan,
        service: ServiceInfo,
        wanted: Mapping[int, tuple[Member, ...]],
        feats: Features,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": p.name,
            "description": p.description,
            "provider": p.provider,
        }
        if feats.tags:
            body["tags"] = [p.name, UID_TAG + service.uid, SERVICE_TAG + service.key] + (
                [OWNER_TAG + self.identity] if self.identity else []
            )
        if p.vip_port_id:
            body["vip_port_id"] = p.vip_port_id
        else:
            if p.vip_subnet_id:
                body["vip_subnet_id"] = p.vip_subnet_id
            if p.vip_network_id:
                body["vip_network_id"] = p.vip_network_id
            if not p.vip_subnet_id and not p.vip_network_id:
                raise ServiceRefused(
                    f"Service {service.key}: no VIP subnet or network is known; set "
                    "[LoadBalancer] subnet-id (or network-id), or the annotation "
                    "loadbalancer.openstack.org/subnet-id"
                )
        if p.vip_address:
            body["vip_address"] = p.vip_address
        if p.flavor_id:
            body["flavor_id"] = p.flavor_id
        if p.availability_zone and feats.availability_zones:
            body["availability_zone"] = p.availability_zone
        lb = await self.octavia.create_lb(body)
        self._known[service.uid] = _Known(str(lb["id"]), p)
        log.info("openstack.lb-created", service=service.key, lb=lb["id"], name=p.name)
        return lb

    # -- reconciling the children ------------------------------------------------------------
    async def _reconcile(
        self,
        p: LbPlan,
        lb: Mapping[str, Any],
        wanted: Mapping[int, tuple[Member, ...]],
        feats: Features,
        *,
        owned: bool,
    ) -> dict[int, str]:
        """Make the listeners, pools, members and monitors this Service owns on `lb` what
        the plan says; returns the pool id per port index. Each write waits out the 409 of
        the previous one (octavia.write)."""
        lb_id = str(lb["id"])
        listeners = await self.octavia.listeners(lb_id)
        pools = {str(x["id"]): x for x in await self.octavia.pools(lb_id)}

        def mine(listener: Mapping[str, Any]) -> bool:
            tags = _tags(listener)
            if p.name in tags:
                return True
            return owned and not any(t.startswith(OCCM_PREFIX) for t in tags)

        ours = {
            (str(x.get("protocol")), int(x.get("protocol_port") or 0)): x
            for x in listeners
            if mine(x)
        }
        others = {
            (_l4(str(x.get("protocol"))), int(x.get("protocol_port") or 0))
            for x in listeners
            if not mine(x)
        }
        result: dict[int, str] = {}
        for port in p.ports:
            if (_l4(port.protocol), port.port) in others:
                raise ServiceRefused(
                    f"load balancer {lb_id} already has a listener on port {port.port} for "
                    "another Service; use another port or load balancer"
                )
            listener = ours.pop(port.key, None)
            ms = wanted[port.index]
            if listener is None:
                listener = await self.octavia.create(
                    "listener", self._listener_body(port, p, feats) | {"loadbalancer_id": lb_id}
                )
            else:
                await self._listener(listener, port, p, feats)
            pool = pools.get(str(listener.get("default_pool_id") or ""))
            if pool is not None and pool.get("protocol") != port.pool_protocol:
                await self.octavia.delete("pool", str(pool["id"]))
                pool = None
            have: list[dict[str, Any]] = []
            if pool is None:
                pool = await self.octavia.create(
                    "pool", self._pool_body(port, p, feats) | {"listener_id": listener["id"]}
                )
            else:
                if pool.get("lb_algorithm") != port.lb_method:
                    await self.octavia.update(
                        "pool", str(pool["id"]), {"lb_algorithm": port.lb_method}
                    )
                have = await self.octavia.members(str(pool["id"]))
            pool_id = str(pool["id"])
            if sorted(map(_member_key, have)) != sorted(map(_member_key, ms)):
                await self.octavia.replace_members(pool_id, [m.body() for m in ms])
            await self._monitor(pool, port)
            result[port.index] = pool_id
        for listener in ours.values():  # this Service's listeners no port asks for now
            await self.octavia.delete("listener", str(listener["id"]))
            if listener.get("default_pool_id"):
                await self.octavia.delete("pool", str(listener["default_pool_id"]))
        used = {str(x.get("default_pool_id")) for x in listeners}
        for pool_id, pool in pools.items():
            name = str(pool.get("name") or "")
            if pool_id not in used and name.startswith("pool_") and name.endswith("_" + p.name):
                await self.octavia.delete("pool", pool_id)
        return result

    async def _listener(
        self, listener: Mapping[str, Any], port: PortPlan, p: LbPlan, feats: Features
    ) -> None:
        want = self._listener_body(port, p, feats)
        change: dict[str, Any] = {}
        for key, value in want.items():
            if key in ("name", "protocol", "protocol_port"):
                continue
            have = listener.get(key)
            if key in ("allowed_cidrs", "tags"):
                if sorted(have or []) != sorted(value):
                    change[key] = sorted(set(have or []) | set(value)) if key == "tags" else value
            elif key == "insert_headers":
                if (have or {}).get("X-Forwarded-For") != "true":
                    change[key] = value
            elif have != value:
                change[key] = value
        if not port.insert_xff and (listener.get("insert_headers") or {}).get("X-Forwarded-For"):
            change["insert_headers"] = {}
        if change:
            await self.octavia.update("listener", str(listener["id"]), change)

    async def _monitor(self, pool: Mapping[str, Any], port: PortPlan) -> None:
        monitor_id = str(pool.get("healthmonitor_id") or "")
        want = port.monitor
        if not monitor_id:
            if want is not None:
                await self.octavia.create("healthmonitor", want.body(str(pool["id"])))
            return
        if want is None:
            await self.octavia.delete("healthmonitor", monitor_id)
            return
        have = await self.octavia.monitor(monitor_id)
        if have is None or have.get("type") != want.type:
            await self.octavia.delete("healthmonitor", monitor_id)
            await self.octavia.create("healthmonitor", want.body(str(pool["id"])))
            return
        body = want.body()
        change = {k: v for k, v in body.items() if k not in ("type",) and have.get(k) != v}
        if change:
            await self.octavia.update("healthmonitor", monitor_id, change)

    # -- addresses ---------------------------------------------------------------------------
    async def _address(
        self, p: LbPlan, lb: Mapping[str, Any], *, owned: bool, service: ServiceInfo
    ) -> str:
        vip = str(lb.get("vip_address") or "")
        port_id = str(lb.get("vip_port_id") or "")
        if p.ipv6:
            return vip  # IPv6 VIPs get no floating IP (OCCM)
        if p.internal:
            if owned:
                await self.fips.release(port_id, keep=p.keep_floating_ip)
            return vip
        return await self.fips.ensure(p, port_id, owned=owned, service=service) or vip

    # -- node-set changes --------------------------------------------------------------------
    async def update_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> None:
        p = self._plan(cluster, service)
        known = self._known.get(service.uid)
        if (
            known is None
            or known.plan != _as_applied(p, known.lb_id)
            or len(known.pools) != len(p.ports)
        ):
            await self.ensure_load_balancer(cluster, service, nodes)
            return
        wanted = self._wanted(p, service, nodes)
        for port in p.ports:
            pool_id = known.pools[port.index]
            ms = wanted[port.index]
            if known.members.get(pool_id) == ms:
                continue
            known.members.pop(pool_id, None)  # unknown until Octavia says yes
            try:
                await self.octavia.replace_members(pool_id, [m.body() for m in ms])
            except NotFoundError:
                self._known.pop(service.uid, None)
                raise
            known.members[pool_id] = ms
        if p.manage_security_groups:
            await self.groups.ensure(p, service, nodes, wanted)
        log.info("openstack.lb-members-updated", service=service.key, lb=known.lb_id)

    # -- deleting ----------------------------------------------------------------------------
    async def ensure_load_balancer_deleted(self, cluster: str, service: ServiceInfo) -> None:
        p = self._plan_to_find(cluster, service)
        lb, owned = await self._find(p, service, deleting=True)
        await self.groups.delete(p, service)
        if lb is None:
            self._forget(service)
            return
        lb_id = str(lb["id"])
        tags = _tags(lb)
        others = [t for t in tags if t.startswith(OCCM_PREFIX) and t != p.name]
        state = str(lb.get("provisioning_status") or "")
        if state == "PENDING_DELETE":
            raise self._pending(service, f"load balancer {lb_id} is being deleted")
        if state not in ("ACTIVE", "ERROR"):
            raise self._pending(service, f"load balancer {lb_id} is {state}; deleting it after")
        # OCCM: the last Service using a load balancer it made (named kube_service_...)
        # deletes it, owner or not; one a user made is never deleted
        made_by_us = owned or str(lb.get("name") or "").startswith(OCCM_PREFIX)
        if made_by_us and not others:
            await self._delete_owned(p, lb, keep_fip=p.keep_floating_ip)
            raise self._pending(service, f"load balancer {lb_id} is being deleted")
        # shared, or made by someone else: only this Service's listeners and its tag
        for listener in await self.octavia.listeners(lb_id):
            if p.name in _tags(listener):
                await self.octavia.delete("listener", str(listener["id"]))
                if listener.get("default_pool_id"):
                    await self.octavia.delete("pool", str(listener["default_pool_id"]))
        if p.name in tags:
            keep = [t for t in tags if t != p.name]
            await self.octavia.update_lb(lb_id, {"tags": keep})
        self._forget(service)

    def _forget(self, service: ServiceInfo) -> None:
        self._known.pop(service.uid, None)
        self._release_create(service.uid)
        self._tries.pop(service.uid, None)

    async def _delete_owned(self, p: LbPlan, lb: Mapping[str, Any], *, keep_fip: bool) -> None:
        port_id = str(lb.get("vip_port_id") or "")
        if port_id:
            await self.fips.release(port_id, keep=keep_fip)
        await self.octavia.delete_lb(str(lb["id"]), cascade=self.options.cascade_delete)
        log.info("openstack.lb-deleting", lb=lb["id"], name=p.name)

    # -- LoadBalancerInventory -------------------------------------------------------------
    async def list_load_balancers(self, cluster: str) -> Sequence[OwnedLoadBalancer]:
        """Our load balancers (tagged with this cluster's identity, or with its OCCM name
        prefix and a service tag when no identity is set) and our floating IPs left on no
        port (named `floatingip/<id>`)."""
        if self.identity:
            lbs = await self.octavia.find_lbs(tags=OWNER_TAG + self.identity)
        else:
            prefix = f"{OCCM_PREFIX}{cluster}_"
            lbs = [
                lb
                for lb in await self.octavia.find_lbs()
                if str(lb.get("name") or "").startswith(prefix)
            ]
        out = []
        for lb in lbs:
            if lb.get("provisioning_status") in _GONE:
                continue
            tags = _tags(lb)
            key = _tag(tags, SERVICE_TAG)
            if "/" not in key:
                continue
            namespace, name = key.split("/", 1)
            out.append(OwnedLoadBalancer(str(lb["name"]), namespace, name, _tag(tags, UID_TAG)))
        out += await self.fips.leaked(cluster)
        return out

    async def delete_leaked_load_balancer(self, cluster: str, lb: OwnedLoadBalancer) -> None:
        if lb.name.startswith("floatingip/"):
            await self.octavia.delete_floating_ip(lb.name.removeprefix("floatingip/"))
            return
        for found in await self.octavia.find_lbs(name=lb.name):
            tags = _tags(found)
            if self.identity and _tag(tags, OWNER_TAG) != self.identity:
                continue
            if _tag(tags, SERVICE_TAG) != lb.key or found.get("provisioning_status") in _GONE:
                continue
            port_id = str(found.get("vip_port_id") or "")
            if port_id:
                await self.fips.release(port_id, keep=False)
            await self.octavia.delete_lb(str(found["id"]), cascade=True)
