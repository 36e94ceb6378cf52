"""The aws provider's routes against moto: the cluster's route table, SourceDestCheck,
blackhole routes reported and replaced (moto patch 1), idempotent creates and deletes,
IPv6, and instance → Node names without a Node informer."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from tests.helpers.aws import CLUSTER_ID, open_provider
from trio_ccm.cloud.aws import AwsError, AwsProvider, RouteTableError
from trio_ccm.cloud.provider import BulkInstances, NodeInfo, Route, Routes
from trio_ccm_testbed.aws import Instance, MotoServer, World


def routes_of(provider: AwsProvider) -> Routes:
    assert provider.routes is not None
    return provider.routes


def table(routes: list[dict[str, object]]) -> list[tuple[str, str, str]]:
    return sorted(
        (
            str(r.get("DestinationCidrBlock") or r.get("DestinationIpv6CidrBlock")),
            str(r.get("InstanceId")),
            str(r.get("State")),
        )
        for r in routes
    )


@pytest.fixture
async def two(world: World) -> list[Instance]:
    return await world.add_instances(2)


async def test_create_turns_source_dest_check_off_and_adds_the_route(
    world: World, provider: AwsProvider, two: list[Instance]
) -> None:
    """CreateRoute to the Node's instance (found by its DNS name), SourceDestCheck off first;
    list_routes then reports it as `<cluster>-<cidr>` to that Node."""
    target = two[0]
    routes = routes_of(provider)
    assert await world.source_dest_check(target.id) is True
    with trio.fail_after(20):
        await routes.create_route(
            CLUSTER_ID, "uid-1", Route(target.private_dns_name, "10.244.1.0/24")
        )
        listed = await routes.list_routes(CLUSTER_ID)
    assert await world.source_dest_check(target.id) is False
    assert table(await world.routes()) == [("10.244.1.0/24", target.id, "active")]
    assert listed == [
        Route(target.private_dns_name, "10.244.1.0/24", name=f"{CLUSTER_ID}-10.244.1.0/24")
    ]


async def test_an_existing_route_with_our_target_is_success(
    world: World, provider: AwsProvider, two: list[Instance]
) -> None:
    """Creating a route that exists already (a retry, another replica) succeeds without a
    second CreateRoute; deleting one that is gone already succeeds too."""
    route = Route(two[0].private_dns_name, "10.244.1.0/24")
    routes = routes_of(provider)
    with trio.fail_after(20):
        await routes.create_route(CLUSTER_ID, "uid", route)
        await routes.create_route(CLUSTER_ID, "uid", route)
        await routes.delete_route(CLUSTER_ID, route)
        await routes.delete_route(CLUSTER_ID, route)
    faults = world.server.faults
    assert (faults.calls("CreateRoute"), faults.calls("DeleteRoute")) == (1, 2)
    assert await world.routes() == []


async def test_a_blackhole_route_is_reported_and_replaced(
    world: World, provider: AwsProvider, two: list[Instance]
) -> None:
    """A route whose instance was terminated is listed as a blackhole; creating the route
    for the same CIDR to another Node deletes the blackhole first (upstream's order)."""
    old, new = two
    routes = routes_of(provider)
    with trio.fail_after(20):
        await routes.create_route(CLUSTER_ID, "u1", Route(old.private_dns_name, "10.244.1.0/24"))
        await world.terminate(old.id)
        listed = await routes.list_routes(CLUSTER_ID)
        assert [(r.destination_cidr, r.blackhole) for r in listed] == [("10.244.1.0/24", True)]
        await routes.create_route(CLUSTER_ID, "u2", Route(new.private_dns_name, "10.244.1.0/24"))
    assert table(await world.routes()) == [("10.244.1.0/24", new.id, "active")]
    assert world.server.faults.calls("DeleteRoute") == 1


async def test_a_route_someone_else_points_elsewhere_is_an_error_naming_both(
    world: World, provider: AwsProvider, two: list[Instance]
) -> None:
    """A live route to the CIDR that targets another instance is not overwritten: the error
    names the table, the CIDR, the other target and the fix."""
    other, mine = two
    await world.add_route("10.244.9.0/24", other.id)
    with trio.fail_after(20), pytest.raises(AwsError, match="delete that route") as caught:
        await routes_of(provider).create_route(
            CLUSTER_ID, "u", Route(mine.private_dns_name, "10.244.9.0/24")
        )
    message = str(caught.value)
    assert f"routes 10.244.9.0/24 to {other.id}, not to instance {mine.id}" in message
    assert world.route_table_id in message


async def test_ipv6_routes(world: World, provider: AwsProvider, two: list[Instance]) -> None:
    """An IPv6 pod CIDR is routed with DestinationIpv6CidrBlock and listed back."""
    routes = routes_of(provider)
    with trio.fail_after(20):
        await routes.create_route(
            CLUSTER_ID, "u", Route(two[0].private_dns_name, "fd00:10:244:1::/64")
        )
        listed = await routes.list_routes(CLUSTER_ID)
    assert [(r.target_node, r.destination_cidr) for r in listed] == [
        (two[0].private_dns_name, "fd00:10:244:1::/64")
    ]


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        pytest.param(0, "no route table carries the cluster tag", id="none"),
        pytest.param(2, "several route tables carry the cluster tag", id="several"),
    ],
)
async def test_the_route_table_must_be_one(moto: MotoServer, tables: int, message: str) -> None:
    """No cluster-tagged route table, or several, is an error naming the tag and the fix
    (RouteTableID); RouteTableID chooses among several."""
    world = await World.create(moto, cluster_id=CLUSTER_ID, route_table=tables > 0)
    chosen = world.route_table_id
    if tables > 1:
        await trio.to_thread.run_sync(
            lambda: world.client("ec2").create_route_table(
                VpcId=world.vpc_id, TagSpecifications=world.tag_specifications("route-table")
            )
        )
    async with open_provider(world) as provider:
        with trio.fail_after(20), pytest.raises(RouteTableError, match=message) as caught:
            await routes_of(provider).list_routes(CLUSTER_ID)
    assert "RouteTableID" in str(caught.value)
    if tables > 1:
        async with open_provider(world, RouteTableID=chosen) as provider:
            with trio.fail_after(20):
                assert await routes_of(provider).list_routes(CLUSTER_ID) == []


async def test_routes_name_nodes_the_provider_has_seen(
    world: World, provider: AwsProvider, two: list[Instance]
) -> None:
    """A Node named by instance ID, seen in a lookup, names its instance's routes; an
    instance no Node was seen for is named by its private DNS name (EC2's default Node
    name), with one DescribeInstances, kept for the next passes."""
    seen, unseen = two
    await world.add_route("10.244.1.0/24", seen.id)
    await world.add_route("10.244.2.0/24", unseen.id)
    bulk = provider.instances
    assert isinstance(bulk, BulkInstances)
    routes = routes_of(provider)
    faults = world.server.faults
    with trio.fail_after(20):
        await bulk.instances_metadata([NodeInfo(seen.id)])
        before = faults.calls("DescribeInstances")
        first = await routes.list_routes(CLUSTER_ID)
        assert faults.calls("DescribeInstances") == before + 1
        second = await routes.list_routes(CLUSTER_ID)
        assert faults.calls("DescribeInstances") == before + 1
    assert sorted((r.destination_cidr, r.target_node) for r in first) == [
        ("10.244.1.0/24", seen.id),
        ("10.244.2.0/24", unseen.private_dns_name),
    ]
    assert first == second


async def test_list_routes_waits_for_the_lookups_under_way(
    world: World, provider: AwsProvider, two: list[Instance]
) -> None:
    """At start-up the address sync's bulk lookup and the first route pass run together:
    list_routes waits for the lookup under way, so a Node named by instance ID names its
    route (rather than a guess from the DNS name)."""
    target = two[0]
    await world.add_route("10.244.1.0/24", target.id)
    bulk = provider.instances
    assert isinstance(bulk, BulkInstances)
    await provider.initialize()
    world.server.faults.latency(0.5, "DescribeInstances", times=1)
    listed: list[Route] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bulk.instances_metadata, [NodeInfo(target.id)])
            await trio.testing.wait_all_tasks_blocked()
            listed.extend(await routes_of(provider).list_routes(CLUSTER_ID))
    assert [r.target_node for r in listed] == [target.id]
