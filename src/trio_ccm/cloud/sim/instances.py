"""Instance metadata, existence and shutdown, per Node and in bulk (one listing call), and
the instances changed since a revision (the simulated cloud's change log)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from trio_ccm.cloud.provider import (
    InstanceChanges,
    InstanceMetadata,
    InstanceNotFoundError,
    InvalidProviderIDError,
    NodeAddress,
    NodeInfo,
    StaleCursorError,
)
from trio_ccm.cloud.sim.client import SimClient, segment
from trio_ccm.cloud.sim.errors import SimCloudError
from trio_ccm.cloud.sim.wire import InstanceChangesWire, InstanceListWire, InstanceWire

SCHEME = "sim://"
BULK_QUERY_LIMIT = 64 * 1024
"""Longest names+ids query a bulk lookup sends (the simulated cloud takes request lines of
up to 1 MiB); beyond it, it lists every instance. 64 KiB holds about 5,000 instance IDs, so a
batch of `--cloud-batch-size` up to that many is one listing of just those instances (an
address sync of 100,000 Nodes in batches of 1,000 would otherwise be 100 listings of every
instance)."""


def provider_id(zone: str, instance_id: str) -> str:
    """The provider ID of an instance: `sim://<zone>/<instance-id>`."""
    return f"{SCHEME}{zone}/{instance_id}"


def instance_id_of(node: NodeInfo) -> str:
    """The instance ID in the Node's provider ID; InvalidProviderIDError when it is not a
    sim one."""
    value = node.provider_id
    instance_id = value[len(SCHEME) :].rpartition("/")[2] if value.startswith(SCHEME) else ""
    if not instance_id:
        raise InvalidProviderIDError(
            f"Node {node.name}: provider ID {value!r} is not a sim provider ID "
            "(sim://<zone>/<instance-id>); was the Node registered by another cloud?"
        )
    return instance_id


def metadata(instance: InstanceWire) -> InstanceMetadata:
    addresses = (
        *(NodeAddress("InternalIP", ip) for ip in instance.internal_ips),
        *(NodeAddress("ExternalIP", ip) for ip in instance.external_ips),
        *((NodeAddress("Hostname", instance.hostname),) if instance.hostname else ()),
    )
    return InstanceMetadata(
        provider_id=provider_id(instance.zone, instance.id),
        instance_type=instance.instance_type,
        node_addresses=addresses,
        zone=instance.zone,
        region=instance.region,
        shutdown=instance.state == "stopped",
    )


def _live(instances: Iterable[InstanceWire]) -> Iterable[InstanceWire]:
    return (instance for instance in instances if instance.state != "terminated")


class SimInstances:
    """Instances and BulkInstances over the simulated cloud's `/v1/instances`, and
    InstanceChangeFeed over its `/v1/instance-changes` (a cursor is a revision)."""

    def __init__(self, client: SimClient) -> None:
        self._client = client

    async def _find(self, node: NodeInfo) -> InstanceWire | None:
        """The Node's live instance: by provider ID when it has one, else by name."""
        if node.provider_id:
            instance_id = instance_id_of(node)
            response = await self._client.request(
                "GetInstance",
                instance_id,
                "GET",
                f"/v1/instances/{segment(instance_id)}",
                missing_ok=True,
            )
            if response is None:
                return None
            found = self._client.decode("GetInstance", instance_id, response, InstanceWire)
            return None if found.state == "terminated" else found
        target = f"name={node.name}"
        response = await self._client.request(
            "ListInstances", target, "GET", "/v1/instances", params={"name": node.name}
        )
        assert response is not None
        listing = self._client.decode("ListInstances", target, response, InstanceListWire)
        return next((i for i in _live(listing.instances) if i.name == node.name), None)

    async def instance_metadata(self, node: NodeInfo) -> InstanceMetadata:
        """The Node's instance metadata; InstanceNotFoundError when it has no live instance."""
        found = await self._find(node)
        if found is None:
            looked_up = node.provider_id or f"the name {node.name}"
            raise InstanceNotFoundError(
                f"Node {node.name}: the sim cloud has no live instance for {looked_up}"
            )
        return metadata(found)

    async def instance_exists(self, node: NodeInfo) -> bool:
        """False only when the cloud says the instance is absent or terminated."""
        return await self._find(node) is not None

    async def instance_shutdown(self, node: NodeInfo) -> bool:
        """True when the instance exists and is stopped."""
        found = await self._find(node)
        return found is not None and found.state == "stopped"

    async def instances_metadata(self, nodes: Sequence[NodeInfo]) -> Mapping[str, InstanceMetadata]:
        """Metadata for `nodes` from one listing call, keyed by Node name (absent ones omitted).

        Nodes with a provider ID are matched by instance ID, the others by name; a Node
        whose provider ID is not a sim one is omitted.
        """
        wanted_ids: dict[str, str] = {}
        wanted_names: list[str] = []
        for node in nodes:
            if not node.provider_id:
                wanted_names.append(node.name)
                continue
            try:
                wanted_ids[node.name] = instance_id_of(node)
            except InvalidProviderIDError:
                continue
        if not wanted_ids and not wanted_names:
            return {}
        params = {"names": ",".join(wanted_names), "ids": ",".join(wanted_ids.values())}
        params = {key: value for key, value in params.items() if value}
        if sum(len(value) for value in params.values()) > BULK_QUERY_LIMIT:
            params = {}
        target = f"{len(nodes)} nodes"
        response = await self._client.request(
            "ListInstances", target, "GET", "/v1/instances", params=params
        )
        assert response is not None
        listing = self._client.decode("ListInstances", target, response, InstanceListWire)
        live = list(_live(listing.instances))
        by_id = {instance.id: instance for instance in live}
        by_name = {instance.name: instance for instance in live}
        answer: dict[str, InstanceMetadata] = {}
        for node in nodes:
            instance_id = wanted_ids.get(node.name)
            if instance_id is not None:
                found = by_id.get(instance_id)
            elif node.provider_id:
                found = None
            else:
                found = by_name.get(node.name)
            if found is not None:
                answer[node.name] = metadata(found)
        return answer

    async def instances_cursor(self) -> str:
        """The cloud's revision now."""
        return str((await self._changes("")).revision)

    async def instances_changed_since(self, cursor: str) -> InstanceChanges:
        """The live instances changed after revision `cursor`, by provider ID.

        StaleCursorError when `cursor` is not a revision or the cloud has none so high
        (it restarted); SimCloudError when its answer goes back before `cursor`.
        """
        if not cursor.isdigit():
            raise StaleCursorError(
                f"sim cloud: cursor {cursor!r} is not a revision of the simulated cloud"
            )
        answer = await self._changes(cursor)
        if answer.revision < int(cursor):
            raise SimCloudError(
                f"sim cloud ListInstanceChanges {cursor}: the cloud answered revision "
                f"{answer.revision}, older than the {cursor} asked from; its change log "
                "cannot be trusted",
                method="ListInstanceChanges",
                target=cursor,
            )
        changed = {
            provider_id(instance.zone, instance.id): metadata(instance)
            for instance in _live(answer.instances)
        }
        return InstanceChanges(cursor=str(answer.revision), changed=changed)

    async def _changes(self, since: str) -> InstanceChangesWire:
        try:
            response = await self._client.request(
                "ListInstanceChanges",
                since,
                "GET",
                "/v1/instance-changes",
                params={"since": since} if since else None,
            )
        except SimCloudError as exc:
            if exc.status == 410:
                raise StaleCursorError(str(exc)) from exc
            raise
        assert response is not None
        return self._client.decode("ListInstanceChanges", since, response, InstanceChangesWire)
