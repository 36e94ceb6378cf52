"""The periodic address sync (actors/address_sync.py) against the emulator and the simulated
cloud: with the sim provider's change feed it compares only what changed; without one, or
when the feed fails or answers garbage, it compares every Node and loses nothing.

A term's first pass compares every Node (a full pass); the tests act from the third pass on
(t=120 with a period of one minute), and the first one shows that the second pass is
already a change pass (the term's first notice of every Node is not taken for a change).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
import trio
import trio.testing
from structlog.testing import capture_logs

from tests.helpers.world import ProviderDouble, World, open_world
from trio_ccm.actors.address_sync import FULL_PASS_S
from trio_ccm.cloud.provider import (
    InstanceChanges,
    InstanceMetadata,
    NodeInfo,
    StaleCursorError,
    bulk_instances,
    change_feed,
)
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.testing import wait_for
from trio_ccm.testing.harness import Write
from trio_ccm_testbed.cloud import SimCloud
from trio_ccm_testbed.cloud.model import Instance

NODE_CONTROLLERS = "--controllers=cloud-node"
PERIOD = "--node-status-update-frequency=1m"
NODES = 10


class BulkOnlyInstances:
    """A provider's instances with bulk lookups and no change feed (as aws and openstack)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def instance_metadata(self, node: NodeInfo) -> InstanceMetadata | None:
        result: InstanceMetadata | None = await self.inner.instance_metadata(node)
        return result

    async def instance_exists(self, node: NodeInfo) -> bool:
        return bool(await self.inner.instance_exists(node))

    async def instance_shutdown(self, node: NodeInfo) -> bool:
        return bool(await self.inner.instance_shutdown(node))

    async def instances_metadata(self, nodes: Sequence[NodeInfo]) -> Mapping[str, InstanceMetadata]:
        result: Mapping[str, InstanceMetadata] = await self.inner.instances_metadata(nodes)
        return result


class GarbageFeedInstances(BulkOnlyInstances):
    """A feed whose cursor is fine and whose change answers are `answer` (or raise it)."""

    def __init__(self, inner: Any, answer: object) -> None:
        super().__init__(inner)
        self.answer = answer

    async def instances_cursor(self) -> str:
        cursor: str = await self.inner.instances_cursor()
        return cursor

    async def instances_changed_since(self, cursor: str) -> Any:
        await self.inner.instances_changed_since(cursor)  # the call is made, its answer dropped
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _world_nodes(world: World) -> list[Instance]:
    """NODES initialised Nodes n0..n9 with their instances, as a running cluster has them."""
    instances = []
    for i in range(NODES):
        instance = world.cloud.add_instance(f"n{i}")
        instances.append(instance)
        world.register(
            f"n{i}",
            taints=[],
            provider_id=f"sim://{instance.zone}/{instance.id}",
            addresses=[
                {"type": "InternalIP", "address": instance.internal_ips[0]},
                {"type": "Hostname", "address": f"n{i}"},
            ],
        )
    return instances


def _calls(cloud: SimCloud) -> list[tuple[float, str, str]]:
    return [(c.time, c.method, c.target) for c in cloud.calls_by("instances")]


async def _until(t: float) -> None:
    await trio.sleep_until(t)


async def _n3_changes_at_100(
    world: World, wrap: Callable[[SimProvider], ProviderDouble], until: float
) -> int:
    """Run the node controllers on `world` (10 initialised Nodes) through `wrap`'s provider
    until `until`, the cloud's calls cleared at t=100 and n3's instance given a new address
    then; the number of kube writes made before it."""
    instances = _world_nodes(world)
    async with world.running(NODE_CONTROLLERS, PERIOD, wrap=wrap):
        await _until(100)
        world.cloud.clear_calls()
        writes = len(world.transport.writes)
        world.cloud.set_addresses(instances[3].id, internal=["10.9.9.9"])
        await _until(until)
    return writes


async def test_only_the_nodes_whose_instance_changed_are_compared(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With the change feed, after the term's first (full) pass a pass asks only what
    changed since the last one: nothing changed, one call and no lookup (the term's notice of
    every Node included); one instance's new address, that Node alone patched."""
    async with open_world() as world:
        instances = _world_nodes(world)
        with trio.fail_after(400):
            async with world.running(NODE_CONTROLLERS, PERIOD):
                await _until(10)
                assert [m for _, m, _ in _calls(world.cloud)] == [
                    "ListInstanceChanges",
                    "ListInstances",
                ]
                world.cloud.clear_calls()
                writes = len(world.transport.writes)
                await _until(170)
                quiet = _calls(world.cloud)
                world.cloud.set_addresses(instances[3].id, internal=["10.9.9.9"])
                await _until(190)
    assert [(t, m) for t, m, _ in quiet] == [
        (60.0, "ListInstanceChanges"),
        (120.0, "ListInstanceChanges"),
    ]
    assert world.transport.writes[writes:] == [Write(180.0, "PATCH", "/api/v1/nodes/n3/status")]
    assert world.node("n3")["status"]["addresses"] == [
        {"type": "InternalIP", "address": "10.9.9.9"},
        {"type": "Hostname", "address": "n3"},
    ]
    assert [(t, m) for t, m, _ in _calls(world.cloud)] == [
        (t, "ListInstanceChanges") for t in (60.0, 120.0, 180.0)
    ]


async def test_a_node_edited_on_the_kubernetes_side_is_compared_and_set_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Node whose addresses someone else changed is looked up alone (its instance did not
    change) at the next pass, and its addresses set back to the cloud's."""
    async with open_world() as world:
        instances = _world_nodes(world)
        with trio.fail_after(400):
            async with world.running(NODE_CONTROLLERS, PERIOD):
                await _until(130)
                world.cloud.clear_calls()
                writes = len(world.transport.writes)
                response = await world.http.patch(
                    "/api/v1/nodes/n5/status",
                    json={"status": {"addresses": [{"type": "InternalIP", "address": "1.2.3.4"}]}},
                    headers={"content-type": "application/merge-patch+json"},
                )
                response.raise_for_status()
                await wait_for(
                    lambda: (
                        world.node("n5")["status"]["addresses"][0]["address"]
                        == instances[5].internal_ips[0]
                    ),
                    poll_s=1,
                )
    assert [(t, m) for t, m, _ in _calls(world.cloud)][:2] == [
        (180.0, "ListInstanceChanges"),
        (180.0, "ListInstances"),
    ]
    assert _calls(world.cloud)[1][2] == f"ids={instances[5].id}"
    assert world.transport.writes[writes:] == [Write(180.0, "PATCH", "/api/v1/nodes/n5/status")]


async def test_a_provider_without_a_feed_compares_every_node_every_pass(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A provider with bulk lookups and no change feed keeps working as before: every pass
    lists every Node in one bulk call, and a changed instance's Node is patched."""

    def bulk_only(provider: SimProvider) -> ProviderDouble:
        double = ProviderDouble(provider, instances=BulkOnlyInstances(provider.instances))
        assert change_feed(double.instances) is None
        assert bulk_instances(double.instances) is not None
        return double

    async with open_world() as world:
        with trio.fail_after(400):
            writes = await _n3_changes_at_100(world, bulk_only, 190)
    assert [(t, m) for t, m, _ in _calls(world.cloud)] == [
        (120.0, "ListInstances"),
        (180.0, "ListInstances"),
    ]
    assert world.transport.writes[writes:] == [Write(120.0, "PATCH", "/api/v1/nodes/n3/status")]


@pytest.mark.parametrize(
    ("answer", "logged"),
    [
        pytest.param(
            StaleCursorError("the change log was trimmed"),
            "the change log was trimmed",
            id="stale-cursor",
        ),
        pytest.param(
            InstanceChanges(cursor="", changed={}),
            "returned the cursor '', not a non-empty string",
            id="empty-cursor",
        ),
        pytest.param(
            {"changed": "everything"}, "returned dict, not InstanceChanges", id="not-changes"
        ),
        pytest.param(
            InstanceChanges(cursor="7", changed=["sim://a/i-1"]),  # type: ignore[arg-type]
            "returned changes of type list, not a mapping",
            id="changes-not-a-mapping",
        ),
    ],
)
async def test_a_feed_that_fails_or_answers_garbage_falls_back_to_every_node(
    autojump_clock: trio.testing.MockClock, answer: object, logged: str
) -> None:
    """A change answer that is an error or garbage is logged, naming what is wrong, and that
    pass compares every Node instead: the changed instance's Node is still patched."""

    def garbage(provider: SimProvider) -> ProviderDouble:
        return ProviderDouble(provider, instances=GarbageFeedInstances(provider.instances, answer))

    async with open_world() as world:
        with trio.fail_after(400), capture_logs() as logs:
            writes = await _n3_changes_at_100(world, garbage, 130)
    assert [(t, m) for t, m, _ in _calls(world.cloud)] == [
        (120.0, "ListInstanceChanges"),  # the answer dropped for garbage
        (120.0, "ListInstanceChanges"),  # the full pass's new cursor
        (120.0, "ListInstances"),  # every Node
    ]
    assert world.transport.writes[writes:] == [Write(120.0, "PATCH", "/api/v1/nodes/n3/status")]
    failed = [e for e in logs if e["event"] == "node.address-changes-failed"]
    assert failed
    assert logged in failed[-1]["error"]


async def test_a_full_pass_runs_once_an_hour_even_with_a_feed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With a feed, every Node is still compared once every FULL_PASS_S (a resync)."""
    async with open_world() as world:
        _world_nodes(world)
        with trio.fail_after(2 * FULL_PASS_S):
            async with world.running(NODE_CONTROLLERS, "--node-status-update-frequency=20m"):
                await _until(FULL_PASS_S + 10)
    listings = [t for t, m, _ in _calls(world.cloud) if m == "ListInstances"]
    assert listings[0] == 0.0
    assert listings[-1] == FULL_PASS_S


class BadCursorInstances(GarbageFeedInstances):
    """A feed whose cursor is garbage (an empty string)."""

    async def instances_cursor(self) -> str:
        await self.inner.instances_cursor()
        return ""


async def test_a_garbage_cursor_leaves_every_pass_a_full_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A cursor that is no cursor is logged, naming it; each pass then compares every Node
    (a changed instance's Node is patched) and asks for a cursor again."""

    def bad_cursor(provider: SimProvider) -> ProviderDouble:
        return ProviderDouble(provider, instances=BadCursorInstances(provider.instances, None))

    async with open_world() as world:
        with trio.fail_after(400), capture_logs() as logs:
            writes = await _n3_changes_at_100(world, bad_cursor, 130)
    assert [(t, m) for t, m, _ in _calls(world.cloud)] == [
        (120.0, "ListInstanceChanges"),
        (120.0, "ListInstances"),
    ]
    assert world.transport.writes[writes:] == [Write(120.0, "PATCH", "/api/v1/nodes/n3/status")]
    failed = [e for e in logs if e["event"] == "node.address-cursor-failed"]
    assert "instances_cursor returned '', not a non-empty string" in failed[-1]["error"]
