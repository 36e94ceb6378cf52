"""Finding Nodes' instances: one engine for per-Node and bulk lookups, a cluster listing that
concurrent bulk lookups share, the Node ↔ instance directory, and the zone-ID cache.

How a Node's instance is identified (cloud-provider-aws's order):

1. its provider ID (`aws:///<zone>/<i-id>`, `aws:////<i-id>`, `<i-id>`; see
   `instances.instance_id_from_provider_id`);
2. a resource-based name (`i-0123456789abcdef0` or `i-0123456789abcdef0.<region>.compute.internal`):
   the text before the first dot;
3. its name as the instance's private DNS name (`private-dns-name` filter, alive states
   only, cluster-tagged instances only).

**A bulk lookup** (`resolve`) answers many Nodes with as few DescribeInstances calls as it
can, in one of two ways:

- *direct*: the IDs in calls of up to 1,000, the names in filter calls of up to 150;
- *listing*: every alive, cluster-tagged instance, 1,000 per page; its page count is
  estimated from the cluster's size (the last listing's, the Nodes the provider has seen,
  the Nodes asked for).

A listing is kept as a snapshot for `SNAPSHOT_MAX_AGE_S` and answers every later lookup it
covers without a call; a lookup that arrives while a listing is under way waits for it (one
listing, however many callers). Which way: rent or buy. A lookup goes direct until the
direct calls of the last `SNAPSHOT_MAX_AGE_S` (the ones a listing would have answered) plus
its own would exceed the listing's pages; then it takes the listing. Lookups come in
batches whose size and rhythm the provider cannot know in advance (a wave's first batches
are small while its Node actors start; a periodic sweep asks in `--cloud-batch-size`
chunks, one after the other), and this way never costs more than twice the better of the
two. So a wave of 5,000 new Nodes costs one listing of 5 pages (and a call or two before
it), not 34 filter calls; a sweep of 5,000 Nodes in chunks of 1,000 IDs costs 5 calls, in
chunks of 200 at most 10 (not 25); a few new Nodes in a large cluster go direct. What a
listing does not cover is asked for directly: an ID of an instance without the cluster tag
(an ID lookup is not scoped to the cluster, as upstream), or a Node that appeared since.

The **directory** maps Node names to instance IDs and back, learned from every Node the
provider is shown with a provider ID and from every lookup that found one. The routes need
it (upstream reads it from its Node informer; see `routes.py`); Nodes' own lookups above do
not use it, since AWS reuses private IPs and so private DNS names: a Node must never be
taken for the instance of the Node that had its name before. It holds at most
`DIRECTORY_CAPACITY` entries (oldest forgotten first).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import trio

from trio_ccm.cloud.aws.client import AwsClient
from trio_ccm.cloud.aws.ec2 import (
    ALIVE_STATES,
    FILTER_VALUES_MAX,
    IDS_PER_CALL_MAX,
    PAGE_SIZE,
    Ec2Instance,
    chunks,
    describe_availability_zones,
    describe_by_filters,
    describe_by_ids,
)
from trio_ccm.cloud.aws.tags import ClusterTagging
from trio_ccm.logs import get_logger

__all__ = [
    "DIRECTORY_CAPACITY",
    "SNAPSHOT_MAX_AGE_S",
    "ZONE_REFILL_S",
    "InstanceLookup",
    "LookupStatistics",
    "NodeDirectory",
    "Ref",
    "Snapshot",
    "ZoneCache",
]

log = get_logger("trio_ccm.cloud.aws.lookup")

SNAPSHOT_MAX_AGE_S: Final = 10.0
"""How long a cluster listing answers later bulk lookups."""
DIRECTORY_CAPACITY: Final = 100_000
ZONE_REFILL_S: Final = 300.0
"""A zone DescribeAvailabilityZones did not list is asked about again after this long."""


class NodeDirectory:
    """Node name ↔ instance ID (see the module docstring)."""

    def __init__(self, capacity: int = DIRECTORY_CAPACITY) -> None:
        self.capacity = capacity
        # node → instance, oldest first (an OrderedDict: evicting the oldest is O(1))
        self._instance: OrderedDict[str, str] = OrderedDict()
        self._node: dict[str, str] = {}  # instance → node

    def __len__(self) -> int:
        return len(self._instance)

    def learn(self, node: str, instance_id: str) -> None:
        if not node or not instance_id or self._instance.get(node) == instance_id:
            return
        old = self._instance.pop(node, None)
        if old is not None and self._node.get(old) == node:
            del self._node[old]
        previous = self._node.get(instance_id)
        if previous is not None and previous != node:
            self._instance.pop(previous, None)  # the instance now backs another Node
        self._instance[node] = instance_id
        self._node[instance_id] = node
        while len(self._instance) > self.capacity:
            oldest, gone = self._instance.popitem(last=False)
            if self._node.get(gone) == oldest:
                del self._node[gone]

    def instance_of(self, node: str) -> str | None:
        return self._instance.get(node)

    def node_of(self, instance_id: str) -> str | None:
        return self._node.get(instance_id)


class ZoneCache:
    """Zone name → zone ID (DescribeAvailabilityZones), filled once and again when a zone it
    does not know appears (an account given a new zone), at most once per
    `ZONE_REFILL_S` for the same unknown zone; concurrent fills are one call."""

    def __init__(self, client: AwsClient) -> None:
        self._client = client
        self._zones: dict[str, tuple[str, str]] = {}
        self._missing: dict[str, float] = {}  # zone → when a fill last failed to list it
        self._lock = trio.Lock()
        self._fills = 0

    async def zone_ids(self, zones: Iterable[str]) -> dict[str, str]:
        """The IDs of `zones` (zones AWS does not list are left out)."""
        wanted = {z for z in zones if z}
        now = trio.current_time()
        unknown = {
            z
            for z in wanted - self._zones.keys()
            if now - self._missing.get(z, -ZONE_REFILL_S) >= ZONE_REFILL_S
        }
        if unknown:
            seen = self._fills
            async with self._lock:
                if self._fills == seen:
                    await self._fill()
                    for zone in unknown - self._zones.keys():
                        self._missing[zone] = trio.current_time()
        return {z: self._zones[z][0] for z in wanted if z in self._zones and self._zones[z][0]}

    async def zone_types(self, zones: Iterable[str]) -> dict[str, str]:
        """The types of `zones` ("availability-zone", "local-zone", "wavelength-zone"; zones
        AWS does not list are left out)."""
        wanted = {z for z in zones if z}
        await self.zone_ids(wanted)
        return {z: self._zones[z][1] for z in wanted if z in self._zones and self._zones[z][1]}

    async def fill(self) -> None:
        async with self._lock:
            await self._fill()

    async def _fill(self) -> None:
        self._zones.update(await describe_availability_zones(self._client))
        self._fills += 1


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every alive, cluster-tagged instance at `taken_at` (Trio time)."""

    taken_at: float
    by_id: Mapping[str, Ec2Instance]
    by_name: Mapping[str, Ec2Instance | None]  # private DNS name → instance; None: several


@dataclass(frozen=True, slots=True)
class LookupStatistics:
    listings: int
    snapshot_hits: int
    direct_ids: int
    direct_names: int


def _direct_cost(refs: Sequence[Ref]) -> int:
    """DescribeInstances calls a direct lookup of `refs` takes."""
    ids = sum(1 for ref in refs if ref.instance_id)
    return math.ceil(ids / IDS_PER_CALL_MAX) + math.ceil((len(refs) - ids) / FILTER_VALUES_MAX)


@dataclass(frozen=True, slots=True)
class Ref:
    """How to find one Node's instance: by ID, or else by name."""

    node: str
    instance_id: str = ""


class InstanceLookup:
    """The lookup engine (see the module docstring). `tagging` is set at initialisation."""

    def __init__(self, client: AwsClient, directory: NodeDirectory) -> None:
        self._client = client
        self.directory = directory
        self.tagging = ClusterTagging("")
        self.snapshot_max_age_s = SNAPSHOT_MAX_AGE_S
        self._snapshot: Snapshot | None = None
        self._listing: trio.Event | None = None  # set when the listing under way ends
        self._in_flight = 0
        self._settled = trio.Event()
        self._settled.set()
        self._listings = 0
        self._snapshot_hits = 0
        self._direct_ids = 0
        self._direct_names = 0
        self._direct_calls: deque[tuple[float, int]] = deque()  # (when, calls) lately

    def statistics(self) -> LookupStatistics:
        return LookupStatistics(
            self._listings, self._snapshot_hits, self._direct_ids, self._direct_names
        )

    async def wait_settled(self) -> None:
        """Return once no bulk lookup is under way (the directory is as complete as it gets)."""
        await self._settled.wait()

    # -- bulk -------------------------------------------------------------------------------
    async def resolve(self, refs: Sequence[Ref]) -> dict[str, Ec2Instance]:
        """The instances of `refs`, by Node name (alive or not; absent when not found)."""
        self._in_flight += 1
        self._settled = trio.Event() if self._in_flight == 1 else self._settled
        try:
            return await self._resolve(refs)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._settled.set()

    async def _resolve(self, refs: Sequence[Ref]) -> dict[str, Ec2Instance]:
        found: dict[str, Ec2Instance] = {}
        pending = list(refs)
        snapshot = self._fresh_snapshot()
        if snapshot is not None:
            pending = self._from_snapshot(snapshot, pending, found)
        if pending and self._listing_pays(pending):
            listed = await self._listed()
            if listed is not None:
                pending = self._from_snapshot(listed, pending, found)
                # Names the fresh listing lacks are not alive cluster instances: only IDs
                # (not scoped to the cluster) are worth a direct call.
                pending = [ref for ref in pending if ref.instance_id]
        if pending:
            await self._direct(pending, found)
        for name, instance in found.items():
            self.directory.learn(name, instance.id)
        return found

    def _fresh_snapshot(self) -> Snapshot | None:
        snapshot = self._snapshot
        if snapshot is None or trio.current_time() - snapshot.taken_at > self.snapshot_max_age_s:
            return None
        return snapshot

    def _from_snapshot(
        self, snapshot: Snapshot, refs: Sequence[Ref], found: dict[str, Ec2Instance]
    ) -> list[Ref]:
        missing: list[Ref] = []
        for ref in refs:
            instance = (
                snapshot.by_id.get(ref.instance_id)
                if ref.instance_id
                else snapshot.by_name.get(ref.node)
            )
            if instance is None:
                missing.append(ref)
            else:
                found[ref.node] = instance
                self._snapshot_hits += 1
        return missing

    def _listing_pays(self, refs: Sequence[Ref]) -> bool:
        """Rent or buy (see the module docstring)."""
        if self._listing is not None:
            return True  # one is under way: waiting for it costs no call
        size = max(
            len(self._snapshot.by_id) if self._snapshot is not None else 0,
            len(self.directory),
            len(refs),
        )
        return self._recent_direct_calls() + _direct_cost(refs) > math.ceil(size / PAGE_SIZE)

    def _recent_direct_calls(self) -> int:
        horizon = trio.current_time() - self.snapshot_max_age_s
        while self._direct_calls and self._direct_calls[0][0] < horizon:
            self._direct_calls.popleft()
        return sum(calls for _, calls in self._direct_calls)

    async def _listed(self) -> Snapshot | None:
        """A listing taken for this caller or shared with the one under way; None when the
        one waited for failed (its taker reports the error; this caller asks directly)."""
        running = self._listing
        if running is not None:
            before = self._snapshot
            await running.wait()
            snapshot = self._snapshot
            return snapshot if snapshot is not None and snapshot is not before else None
        self._listing = done = trio.Event()
        try:
            return await self._take_listing()
        finally:
            self._listing = None
            done.set()

    async def _take_listing(self) -> Snapshot:
        spec: dict[str, Sequence[str]] = {"instance-state-name": ALIVE_STATES}
        spec.update(self.tagging.tag_key_filter())
        instances = await describe_by_filters(self._client, spec, target="the cluster's instances")
        self._listings += 1
        by_id: dict[str, Ec2Instance] = {}
        by_name: dict[str, Ec2Instance | None] = {}
        for instance in instances:
            if not self.tagging.has_cluster_tag(instance.tags):
                continue
            by_id[instance.id] = instance
            name = instance.private_dns_name
            if name:
                by_name[name] = None if name in by_name else instance
        snapshot = Snapshot(trio.current_time(), by_id, by_name)
        self._snapshot = snapshot
        log.debug("aws.instances-listed", instances=len(by_id))
        return snapshot

    async def _direct(self, refs: Sequence[Ref], found: dict[str, Ec2Instance]) -> None:
        self._direct_calls.append((trio.current_time(), _direct_cost(refs)))
        ids = [ref for ref in refs if ref.instance_id]
        names = [ref.node for ref in refs if not ref.instance_id]
        if ids:
            by_id = await describe_by_ids(self._client, [ref.instance_id for ref in ids])
            self._direct_ids += len(ids)
            for ref in ids:
                instance = by_id.get(ref.instance_id)
                if instance is not None:
                    found[ref.node] = instance
        if names:
            found.update(await self.by_names(names))
            self._direct_names += len(names)

    async def by_names(self, names: Sequence[str]) -> dict[str, Ec2Instance]:
        """Alive, cluster-tagged instances whose private DNS name is one of `names`.

        A name two instances share is left out (and logged): upstream refuses it too.
        """
        matches: dict[str, list[Ec2Instance]] = {}
        distinct = list(dict.fromkeys(names))
        for chunk in chunks(distinct, FILTER_VALUES_MAX):
            target = f"Node {chunk[0]}" if len(chunk) == 1 else f"{len(chunk)} Node names"
            for instance in await describe_by_filters(
                self._client,
                {"private-dns-name": list(chunk), "instance-state-name": ALIVE_STATES},
                target=target,
            ):
                if self.tagging.has_cluster_tag(instance.tags):
                    matches.setdefault(instance.private_dns_name, []).append(instance)
        found: dict[str, Ec2Instance] = {}
        for name, instances in matches.items():
            if len(instances) == 1:
                found[name] = instances[0]
            else:
                log.warning(
                    "aws.name-ambiguous",
                    node=name,
                    instances=[i.id for i in instances],
                    fix="give each Node a provider ID, or terminate the duplicate instance",
                )
        return found
