"""moto in auth mode: every request's SigV4 signature verified and its action authorised
against an IAM policy of exactly `IAM_ACTIONS`, through the provider's real paths."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.helpers.aws import CLUSTER_ID, open_provider
from trio_ccm.cloud.aws import IAM_ACTIONS, AwsError
from trio_ccm.cloud.provider import BulkInstances, NodeInfo, Route
from trio_ccm_testbed.aws import StaticKeys, World

DOCS = Path(__file__).resolve().parents[2] / "docs" / "aws.md"


def environ_for(keys: StaticKeys, *, secret: str | None = None) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": keys.access_key_id,
        "AWS_SECRET_ACCESS_KEY": secret or keys.secret_access_key,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


async def test_the_documented_policy_is_enough_and_signatures_verify(world: World) -> None:
    """With only IAM_ACTIONS allowed and signatures checked, the provider initialises, looks
    Nodes up, and lists, creates and deletes routes."""
    instances = await world.add_instances(2)
    with world.server.auth_mode(IAM_ACTIONS) as keys:
        environ = environ_for(keys)
        async with open_provider(world, environ=environ) as provider:
            bulk, routes = provider.instances, provider.routes
            assert isinstance(bulk, BulkInstances)
            assert routes is not None
            with trio.fail_after(30):
                await provider.initialize()
                found = await bulk.instances_metadata(
                    [NodeInfo(i.private_dns_name) for i in instances]
                )
                route = Route(instances[0].private_dns_name, "10.244.0.0/24")
                await routes.create_route(CLUSTER_ID, "uid", route)
                assert len(await routes.list_routes(CLUSTER_ID)) == 1
                await routes.delete_route(CLUSTER_ID, route)
    assert len(found) == 2


async def test_a_wrong_secret_fails_its_signature(world: World) -> None:
    """A request signed with the wrong secret is refused (AuthFailure), and the error says
    to check the credentials."""
    with world.server.auth_mode(IAM_ACTIONS) as keys:
        environ = environ_for(keys, secret="not-the-secret")
        async with open_provider(world, environ=environ) as provider:
            with trio.fail_after(30), pytest.raises(AwsError) as caught:
                await provider.initialize()
    assert caught.value.code == "AuthFailure"
    assert "check the credentials" in str(caught.value)


async def test_an_action_outside_the_policy_names_the_grant(world: World) -> None:
    """Without ec2:CreateRoute in the policy, creating a route fails naming the action to
    grant."""
    (instance,) = await world.add_instances(1)
    allowed = [a for a in IAM_ACTIONS if a != "ec2:CreateRoute"]
    with world.server.auth_mode(allowed) as keys:
        environ = environ_for(keys)
        async with open_provider(world, environ=environ) as provider:
            assert provider.routes is not None
            with trio.fail_after(30), pytest.raises(AwsError, match="grant ec2:CreateRoute"):
                await provider.routes.create_route(
                    CLUSTER_ID, "uid", Route(instance.private_dns_name, "10.244.0.0/24")
                )


def test_the_docs_list_every_action_of_the_policy() -> None:
    """docs/aws.md's IAM policy names every action the provider calls."""
    text = DOCS.read_text()
    for action in IAM_ACTIONS:
        assert f'"{action}"' in text, action


async def test_the_documented_policy_is_enough_for_load_balancers(world: World) -> None:
    """With only IAM_ACTIONS allowed and signatures checked, a Classic ELB and an NLB are
    made, their targets changed, listed for the sweep and deleted."""
    from trio_ccm.cloud.provider import LoadBalancerInventory, ServiceInfo, ServicePort

    instances = await world.add_instances(2)
    targets = [NodeInfo(i.private_dns_name, provider_id=i.provider_id) for i in instances]
    services = [
        ServiceInfo("default", "classic", "11111111-0000-0000-0000-000000000001",
                    ports=(ServicePort("http", "TCP", 80, 30080),)),
        ServiceInfo("default", "network", "11111111-0000-0000-0000-000000000002",
                    annotations={"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"},
                    ports=(ServicePort("http", "TCP", 80, 30081),)),
    ]  # fmt: skip
    with world.server.auth_mode(IAM_ACTIONS) as keys:
        async with open_provider(world, environ=environ_for(keys)) as provider:
            lbs = provider.load_balancers
            assert isinstance(lbs, LoadBalancerInventory)
            assert provider.load_balancers is not None
            with trio.fail_after(30):
                await provider.initialize()
                for service in services:
                    await provider.load_balancers.ensure_load_balancer(
                        CLUSTER_ID, service, targets[:1]
                    )
                    await provider.load_balancers.update_load_balancer(CLUSTER_ID, service, targets)
                listed = await lbs.list_load_balancers(CLUSTER_ID)
                for service in services:
                    await provider.load_balancers.ensure_load_balancer_deleted(CLUSTER_ID, service)
    assert len(listed) == 2
