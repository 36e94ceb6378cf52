"""cloud-node-controller: initialise Nodes from the cloud, then keep their addresses current.

Contract:
- A Node carrying `node.cloudprovider.kubernetes.io/uninitialized` gets, from the cloud's
  instance metadata, its provider ID (only if it has none), addresses, instance-type,
  zone and region labels (GA and beta names) and additional labels, and only then loses
  the taint: two writes (status, then one JSON patch guarded by the taints seen), so the
  taint goes last and a taint someone else added meanwhile is never lost. Event `Synced`.
- No metadata, no provider ID on either side, or an invalid provided-node-ip leaves the
  Node tainted and retried with backoff (`KeyedActors`), never half-initialised.
- A provider ID the provider calls invalid (malformed, another cloud's), or an instance
  another Node already claims, gets one Warning Event (`InvalidProviderID`,
  `DuplicateProviderID`) and leaves the Node tainted; it is looked at again only when
  the Node changes (its provider ID cannot: the fix is to delete the Node). Of two
  uninitialised Nodes claiming one instance, the newer is refused.
- An instance the cloud says does not exist: a Warning Event (`InstanceNotFound`, repeats
  aggregated), the Node stays tainted and is retried with backoff.
- Initialised Nodes: the legacy labels are reconciled (the beta one is the truth), and every
  `--node-status-update-frequency` (sliding) their addresses are synced, in bulk lookups
  when the provider offers them; one Node's failure never fails the others.
- Kube writes are capped by `--concurrent-node-syncs`; lookups are batched
  (`cloud/batching.py`) and paced by the cloud budget.

Upstream's rules kept and what trio-ccm does better: docs/controllers.md.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Container, Sequence
from functools import partial
from typing import Final

import prometheus_client
import trio

from trio_ccm.actors.address_sync import AddressSync, addresses_for
from trio_ccm.actors.backoff import NODE_RETRY_BASE_S, NODE_RETRY_CAP_S, Backoff
from trio_ccm.actors.controller import Controller, ControllerContext, ControllerSetup, info, warn
from trio_ccm.actors.keyed import Message
from trio_ccm.actors.passes import serve_passes
from trio_ccm.actors.views import has_taint, node_addresses, node_info
from trio_ccm.cloud.provider import (
    InstanceMetadata,
    InstanceNotFoundError,
    Instances,
    InvalidProviderIDError,
    NodeAddress,
)
from trio_ccm.errors import CcmError
from trio_ccm.kube.informer import Gone, Update
from trio_ccm.kube.objects import NODES, Node
from trio_ccm.kube.patches import Patch, initialize_node, set_labels, set_node_addresses
from trio_ccm.kube.wellknown import (
    CLOUD_NODE_CONTROLLER,
    COMPONENT_CLOUD_NODE,
    LABEL_INSTANCE_TYPE,
    LABEL_INSTANCE_TYPE_LEGACY,
    LABEL_REGION,
    LABEL_REGION_LEGACY,
    LABEL_ZONE,
    LABEL_ZONE_LEGACY,
    REASON_DUPLICATE_PROVIDER_ID,
    REASON_INSTANCE_NOT_FOUND,
    REASON_INVALID_PROVIDER_ID,
    REASON_SYNCED,
    TAINT_UNINITIALIZED,
)
from trio_ccm.logs import get_logger

__all__ = ["CloudNodeController", "NodeMetrics"]

log = get_logger("trio_ccm.actors.cloud_node")

_KUBERNETES_NAMESPACED: Final = re.compile(r"(^|\.)(kubernetes|k8s)\.io/")
# (beta label, GA label): the beta one is the source of truth on initialised Nodes.
_LEGACY_LABELS: Final = (
    (LABEL_ZONE_LEGACY, LABEL_ZONE),
    (LABEL_REGION_LEGACY, LABEL_REGION),
    (LABEL_INSTANCE_TYPE_LEGACY, LABEL_INSTANCE_TYPE),
)
# The most Node actors that look up at once with a bulk lookup (then wait for a write slot).
# Each holds short-lived objects (its coroutines, a batch entry, its part of an answer) among
# the long-lived ones; 2,000 at once (twice `--cloud-batch-size=1000`) left pymalloc holding
# 43 MB of emptied arenas after a 5,000-Node wave, 400 a few MB (docs/benchmarks.md).
WAVE_LOOKUPS_CAP: Final = 100
# Upstream's buckets (ExponentialBuckets(1, 4, 6)), so existing dashboards keep working.
_DELAY_BUCKETS: Final = (1, 4, 16, 64, 256, 1024)


class NodeMetrics:
    """Upstream's node controller metrics (created once per registry)."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        self.taint_removal_delay = prometheus_client.Histogram(
            "node_controller_cloud_provider_taint_removal_delay_seconds",
            "Number of seconds after node creation when NodeController removed the cloud-provider "
            "taint of a single node.",
            buckets=_DELAY_BUCKETS,
            registry=registry,
        )
        self.initial_sync_delay = prometheus_client.Histogram(
            "node_controller_initial_node_sync_delay_seconds",
            "Number of seconds after node creation when NodeController finished the initial "
            "synchronization of a single node.",
            buckets=_DELAY_BUCKETS,
            registry=registry,
        )
        self.address_updates = prometheus_client.Counter(
            "node_controller_address_updates",
            "Node status.addresses patches written (at initialisation and by the periodic sync).",
            registry=registry,
        )


class CloudNodeController(Controller):
    """cloud-node-controller; see the module docstring."""

    name = CLOUD_NODE_CONTROLLER
    informers = frozenset({"nodes"})
    client_name = "node-controller"
    event_component = COMPONENT_CLOUD_NODE
    capability = "instances"

    def __init__(self, setup: ControllerSetup) -> None:
        super().__init__(setup)
        self.metrics = NodeMetrics(setup.registry)

    async def run(self, ctx: ControllerContext) -> None:
        """Per-Node initialisation actors, and the periodic address sync."""
        instances = ctx.cloud.instances
        assert instances is not None  # the capability is checked before a term starts
        term = _CloudNodeTerm(ctx, instances, self.metrics)
        # With a bulk lookup, as many Node actors as make two full batches may look up at
        # once, never more than WAVE_LOOKUPS_CAP (that is what fills the batches; cloud
        # calls are capped by the budget); kube writes stay capped by
        # --concurrent-node-syncs (write_limiter). Without one, lookups are capped too.
        # Not every Node of a wave at once: 5,000 handler calls in flight (each a stack of
        # coroutines, a batch entry, a request) made a peak whose memory the allocator
        # kept long after the wave (docs/benchmarks.md, the wave).
        syncs = ctx.settings.concurrent_node_syncs
        concurrency = (
            max(syncs, min(2 * ctx.batcher.max_batch, WAVE_LOOKUPS_CAP))
            if ctx.batcher is not None
            else syncs
        )
        actors = ctx.keyed(
            term.sync,
            limiter=trio.CapacityLimiter(concurrency),
            backoff=Backoff(NODE_RETRY_BASE_S, NODE_RETRY_CAP_S),
        )
        admit = partial(term.admit, actors)
        async with ctx.nodes.subscription() as mailbox, trio.open_nursery() as nursery:
            nursery.start_soon(partial(actors.serve, mailbox, admit=admit))
            # Upstream's loop: --node-status-update-frequency after each run ended (sliding).
            nursery.start_soon(
                partial(
                    serve_passes,
                    term.addresses.sync,
                    name=ctx.name,
                    period_s=ctx.settings.node_status_update_frequency_s,
                    sliding=True,
                )
            )


def _legacy_labels_wanted(node: Node) -> dict[str, str]:
    """The GA topology labels a Node lacks while it has their beta twins."""
    labels = node.metadata.labels
    return {
        ga: labels[beta]
        for beta, ga in _LEGACY_LABELS
        if beta in labels and labels.get(ga) != labels[beta]
    }


class _CloudNodeTerm:
    """One term of leadership: initialise Nodes, sync their addresses."""

    def __init__(self, ctx: ControllerContext, instances: Instances, metrics: NodeMetrics) -> None:
        self.ctx = ctx
        self.instances = instances
        self.metrics = metrics
        self.write_limiter = trio.CapacityLimiter(ctx.settings.concurrent_node_syncs)
        # The periodic address sync's parallelism (upstream: 0 means --concurrent-node-syncs).
        self.status_workers = (
            ctx.settings.concurrent_node_status_updates or ctx.settings.concurrent_node_syncs
        )
        # The periodic address sync (actors/address_sync.py): it learns of Node changes
        # from `has_work` and `forget`.
        self.addresses = AddressSync(
            ctx,
            instances,
            owners=self.owners,
            write=self.write_addresses,
            workers=self.status_workers,
        )
        # Per Node: its spec.providerID (and the reverse index), and the provider ID a
        # refusal Warning was given for. Seeded from the cache, kept by `sync`, dropped by
        # `forget`.
        self.provider_ids: dict[str, str] = {}
        # Nodes per provider ID: almost always one, so its name itself, else a tuple of
        # names (a set would cost 216 bytes per Node, a 1-tuple 48: at 100,000 Nodes...).
        self.claims: dict[str, str | tuple[str, ...]] = {}
        self.refused: dict[str, str] = {}
        for node in ctx.nodes.items():
            self.note(node)

    def note(self, node: Node) -> None:
        """Index the Node's provider ID (it is immutable once set)."""
        name, provider_id = node.metadata.name, node.spec.provider_id
        if provider_id and self.provider_ids.get(name) != provider_id:
            self.forget_claim(name)
            self.provider_ids[name] = provider_id
            owners = self.owners(provider_id)
            if name not in owners:
                self.claims[provider_id] = (*owners, name) if owners else name

    def owners(self, provider_id: str) -> tuple[str, ...]:
        """The Nodes that claim `provider_id`."""
        claim = self.claims.get(provider_id, ())
        return (claim,) if isinstance(claim, str) else claim

    def forget_claim(self, name: str) -> None:
        provider_id = self.provider_ids.pop(name, None)
        if provider_id is not None:
            owners = tuple(n for n in self.owners(provider_id) if n != name)
            if owners:
                self.claims[provider_id] = owners if len(owners) > 1 else owners[0]
            else:
                self.claims.pop(provider_id, None)

    def forget(self, name: str) -> None:
        """The Node is gone: drop all that is kept about it."""
        self.forget_claim(name)
        self.refused.pop(name, None)
        self.addresses.forget(name)

    # -- cloud lookups -----------------------------------------------------------------
    async def metadata(self, node: Node) -> InstanceMetadata:
        info = node_info(node)
        if self.ctx.batcher is not None:
            try:
                return await self.ctx.batcher.instance_metadata(info)
            except InstanceNotFoundError:
                if not node.spec.provider_id:
                    raise
                # Missing from the bulk answer: the provider's own verdict tells an invalid
                # provider ID (no cloud call) from a missing instance.
        found = await self.instances.instance_metadata(info)
        if found is None:
            raise CcmError(
                f"Node {node.metadata.name}: the cloud provider returned no instance metadata; "
                "the Node stays tainted and is asked again with backoff"
            )
        return found

    # -- one Node ------------------------------------------------------------------------
    def admit(self, actors: Container[str], name: str, update: Update[Node]) -> Update[Node] | None:
        """Only Nodes with work to do reach the actors (or whose actor is alive, so it never
        works on a stale value): an initialised Node's heartbeats are noted here, without an
        actor (at 100,000 Nodes they would otherwise keep thousands of actors alive)."""
        return update if name in actors or self.has_work(update) else None

    def has_work(self, update: Update[Node]) -> bool:
        """What `sync` would act on: a Node gone, one to initialise or with legacy labels
        to reconcile. Notes the provider ID of the others, as `sync` would."""
        if isinstance(update, Gone):
            return True
        node = update.obj
        self.note(node)
        if node.metadata.deletion_timestamp:
            return False
        if has_taint(node, TAINT_UNINITIALIZED):
            return True
        self.addresses.node_changed(node.metadata.name)  # compared by the next address sync
        return bool(_legacy_labels_wanted(node))

    async def sync(self, name: str, message: Message[Node]) -> str | None:
        """One Node: initialise it while it carries the uninitialized taint, else reconcile
        its legacy labels. Returns the resourceVersion of our last write (echo check)."""
        if isinstance(message, Gone):
            self.forget(name)
            return None
        node = message.obj
        self.note(node)
        if node.metadata.deletion_timestamp:
            return None
        if not has_taint(node, TAINT_UNINITIALIZED):
            self.addresses.node_changed(name)  # compared by the next address sync
            return await self.reconcile_legacy_labels(node)
        if name in self.refused and self.refused[name] == node.spec.provider_id:
            return None  # refused with a Warning already; waits for the Node to change
        return await self.initialize(node)

    async def reconcile_legacy_labels(self, node: Node) -> str | None:
        wanted = _legacy_labels_wanted(node)
        if not wanted:
            return None
        async with self.write_limiter:
            written = await self.patch(node.metadata.name, set_labels(wanted))
        log.info("node.labels-reconciled", node=node.metadata.name, labels=wanted)
        return written

    async def initialize(self, node: Node) -> str | None:
        name = node.metadata.name
        log.debug("node.initializing", node=name)
        try:
            metadata = await self.metadata(node)
        except InvalidProviderIDError as exc:
            self.refuse(
                node,
                REASON_INVALID_PROVIDER_ID,
                f"{exc}; the Node stays uninitialised: delete it so that its kubelet registers "
                f"it again with a provider ID of this cloud ({self.ctx.cloud.name})",
            )
            return None
        except InstanceNotFoundError as exc:
            message = (
                f"Node {name}: the cloud has no instance for it ({exc}); it stays tainted and "
                "is retried (the lifecycle controller deletes it if the instance is gone)"
            )
            # Seen by `kubectl describe node` (repeats are aggregated into one Event's count).
            warn(self.ctx, node, reason=REASON_INSTANCE_NOT_FOUND, message=message)
            raise CcmError(message) from exc
        provider_id = ""
        if not node.spec.provider_id:
            provider_id = metadata.provider_id
            if not provider_id:
                raise CcmError(
                    f"Node {name}: cloud provider does not set node provider ID for node {name}; "
                    "it stays tainted"
                )
        rival = self.rival(node, provider_id or node.spec.provider_id)
        if rival is not None:
            self.refuse(
                node,
                REASON_DUPLICATE_PROVIDER_ID,
                f"Node {name}: its instance {provider_id or node.spec.provider_id} is claimed "
                f"by Node {rival} too; this Node stays uninitialised: delete the Node that "
                "does not belong to this instance",
            )
            return None
        async with self.write_limiter:
            # Built once the slot is ours: the Nodes waiting for one (up to
            # WAVE_LOOKUPS_CAP) hold their answer, not their bodies too.
            addresses = addresses_for(node, metadata)
            if addresses is not None:
                await self.write_addresses(node, addresses)
            patch = initialize_node(
                taints=node.spec.taints,
                remove_taint_key=TAINT_UNINITIALIZED,
                provider_id=provider_id or None,
                labels_seen=node.metadata.labels,
                labels=self.labels_for(node, metadata),
            )
            written = await self.patch(name, patch)
        age = self.age_s(node)
        if age is not None:
            self.metrics.taint_removal_delay.observe(age)
            self.metrics.initial_sync_delay.observe(age)
        info(self.ctx, node, reason=REASON_SYNCED, message="Node synced successfully")
        log.info(
            "node.initialized",
            node=name,
            provider_id=provider_id or node.spec.provider_id,
            instance_type=metadata.instance_type,
            zone=metadata.zone,
        )
        return written

    def rival(self, node: Node, provider_id: str) -> str | None:
        """Another Node that keeps `provider_id`'s instance from this one: one already
        initialised, or an older uninitialised one."""
        mine = (node.metadata.creation_timestamp, node.metadata.name)
        for other_name in sorted(set(self.owners(provider_id)) - {node.metadata.name}):
            other = self.ctx.nodes.get(other_name)
            if other is None or other.metadata.deletion_timestamp:
                continue
            if not has_taint(other, TAINT_UNINITIALIZED):
                return other_name
            if (other.metadata.creation_timestamp, other_name) < mine:
                return other_name
        return None

    def refuse(self, node: Node, reason: str, message: str) -> None:
        """One Warning Event and one log line; no retry until the Node changes."""
        name = node.metadata.name
        self.refused[name] = node.spec.provider_id
        warn(self.ctx, node, reason=reason, message=message)
        log.warning("node.refused", node=name, reason=reason, message=message)

    def labels_for(self, node: Node, metadata: InstanceMetadata) -> dict[str, str]:
        name = node.metadata.name
        labels: dict[str, str] = {}
        if metadata.instance_type:
            labels[LABEL_INSTANCE_TYPE] = labels[LABEL_INSTANCE_TYPE_LEGACY] = (
                metadata.instance_type
            )
        if metadata.zone:
            labels[LABEL_ZONE] = labels[LABEL_ZONE_LEGACY] = metadata.zone
        if metadata.region:
            labels[LABEL_REGION] = labels[LABEL_REGION_LEGACY] = metadata.region
        for key, value in metadata.additional_labels.items():
            if _KUBERNETES_NAMESPACED.search(key):
                log.warning(
                    "node.label-refused",
                    node=name,
                    label=key,
                    reason="additional labels in a Kubernetes namespace are not applied",
                )
            elif key in node.metadata.labels:
                if node.metadata.labels[key] != value:
                    log.warning(
                        "node.label-kept",
                        node=name,
                        label=key,
                        node_value=node.metadata.labels[key],
                        cloud_value=value,
                    )
            else:
                labels[key] = value
        return {k: v for k, v in labels.items() if node.metadata.labels.get(k) != v}

    async def write_addresses(self, node: Node, addresses: Sequence[NodeAddress]) -> None:
        if tuple(addresses) == node_addresses(node):
            return
        patch = set_node_addresses({"type": a.type, "address": a.address} for a in addresses)
        await self.patch(node.metadata.name, patch, subresource="status")
        self.metrics.address_updates.inc()
        log.info(
            "node.addresses-updated",
            node=node.metadata.name,
            addresses=[a.address for a in addresses],
        )

    async def patch(self, name: str, patch: Patch, *, subresource: str = "") -> str:
        """Write; returns the resourceVersion written."""
        written = await self.ctx.kube.patch(NODES, name, patch, subresource=subresource)
        return written.metadata.resource_version

    def age_s(self, node: Node) -> float | None:
        created = node.metadata.creation_timestamp
        if not created:
            return None
        try:
            moment = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
        except ValueError:
            return None
        return max(0.0, (self.ctx.now() - moment).total_seconds())
