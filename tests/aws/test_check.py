"""The aws provider's start-up probe, `check()`: one read-only call every replica makes at
start, leading or not, against moto (reachable, a dead endpoint, refused credentials)."""

from __future__ import annotations

import datetime as dt
import socket
from functools import partial

import pytest
import trio
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from tests.helpers.aws import CLUSTER_ID, Cluster
from trio_ccm.cli.flags import parse_flags
from trio_ccm.cloud.aws import IAM_ACTIONS, AwsError, AwsProvider, parse_cloud_config
from trio_ccm.supervisor import Serving, serve
from trio_ccm.testing.factories import make_lease
from trio_ccm.testing.harness import emulator_connection, wait_for
from trio_ccm_testbed.aws import World


def dead_url() -> str:
    """A loopback URL nothing listens on (a port bound, then closed)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def provider_at(world: World, url: str, environ: dict[str, str] | None = None) -> AwsProvider:
    """The aws provider of the world's cloud-config with every endpoint moved to `url`."""
    text = world.cloud_config().decode().replace(world.server.url, url)
    return AwsProvider(parse_cloud_config(text.encode()), environ=environ or world.environ())


async def test_the_probe_is_one_read_that_initialize_reuses(world: World) -> None:
    """check() makes exactly one call, DescribeAvailabilityZones, and initialize() after it
    does not list the zones again."""
    provider = provider_at(world, world.server.url)
    try:
        with trio.fail_after(20):
            await provider.check()
            probed = dict(provider.context.client.statistics().calls)
            await provider.initialize()
    finally:
        await provider.aclose()
    assert probed == {"ec2:DescribeAvailabilityZones": 1}
    assert world.server.faults.calls("DescribeAvailabilityZones") == 1


async def test_a_standby_with_a_dead_endpoint_says_so_at_start(cluster: Cluster) -> None:
    """A standby replica (another holds the Lease) whose EC2 endpoint is a closed loopback
    port logs `cloud.unreachable` at start, naming the provider, the endpoint and the fix;
    it sends nothing but the probe's read and stays a standby."""
    url = dead_url()
    provider = provider_at(cluster.world, url)
    cluster.api.create(make_lease("other", lease_duration_s=3600, renewed=dt.datetime.now(dt.UTC)))
    settings = parse_flags(
        [
            "--secure-port=0",
            "--leader-elect=true",
            "--cloud-provider=aws",
            "--controllers=cloud-node-controller",
            f"--cluster-name={CLUSTER_ID}",
        ]
    )
    try:
        with trio.fail_after(30), capture_logs() as logs:
            async with trio.open_nursery() as host:
                serving: Serving = await host.start(
                    partial(
                        serve,
                        settings,
                        provider,
                        connection=emulator_connection(),
                        transport=cluster.api.transport(),
                        registry=CollectorRegistry(),
                        identity="standby",
                    )
                )
                await wait_for(lambda: any(e["event"] == "cloud.unreachable" for e in logs))
                assert not serving.leading
                host.cancel_scope.cancel()
    finally:
        await provider.aclose()
    (said,) = [e for e in logs if e["event"] == "cloud.unreachable"]
    assert said["log_level"] == "error"
    assert said["provider"] == "aws"
    assert url in said["error"]
    assert "check the network path" in said["error"]
    assert "endpoint" in said["fix"]
    assert set(provider.context.client.statistics().calls) == {"ec2:DescribeAvailabilityZones"}


@pytest.mark.parametrize(
    ("key_id", "secret", "code"),
    [
        pytest.param("", "not-the-secret", "AuthFailure", id="wrong-secret"),
        pytest.param("AKIANOSUCHKEY0000000", "", "AuthFailure", id="unknown-key"),
    ],
)
async def test_refused_credentials_name_the_fix(
    world: World, key_id: str, secret: str, code: str
) -> None:
    """With signatures checked, credentials AWS refuses make check() raise the AWS error
    code and the advice to check the credentials."""
    with world.server.auth_mode(IAM_ACTIONS) as keys:
        environ = {
            "AWS_ACCESS_KEY_ID": key_id or keys.access_key_id,
            "AWS_SECRET_ACCESS_KEY": secret or keys.secret_access_key,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        provider = provider_at(world, world.server.url, environ)
        try:
            with trio.fail_after(20), pytest.raises(AwsError) as caught:
                await provider.check()
        finally:
            await provider.aclose()
    assert caught.value.code == code
    assert caught.value.action == "DescribeAvailabilityZones"
    assert "check the credentials" in str(caught.value)
