"""AwsClient against moto behind the fault middleware: what is retried (re-signed), what is
raised at once (throttling, as ThrottledError for the budget), and what the errors say."""

from __future__ import annotations

import datetime as dt
import itertools

import httpx
import pytest
import trio

from trio_ccm.cloud import fence
from trio_ccm.cloud.aws import AwsClient, AwsError, AwsServerError, AwsThrottledError
from trio_ccm.cloud.aws.config import parse_cloud_config
from trio_ccm.cloud.aws.credentials import AwsCredentials, RefreshingCredentials, StaticSource
from trio_ccm.cloud.provider import ThrottledError
from trio_ccm.errors import NotLeadingError
from trio_ccm_testbed.aws import TEST_CREDENTIALS, Fault, World

KEYS = AwsCredentials(TEST_CREDENTIALS.access_key_id, TEST_CREDENTIALS.secret_access_key)


class Recording(httpx.AsyncBaseTransport):
    """The network, recording each request's headers."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.headers: list[httpx.Headers] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.headers.append(request.headers)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class RotatingKeys:
    """A source whose every fetch gives new keys, expiring at once (so each get refetches)."""

    description = "rotating test keys"

    def __init__(self) -> None:
        self.numbers = itertools.count(1)

    async def fetch(self) -> AwsCredentials:
        await trio.lowlevel.checkpoint()
        number = next(self.numbers)
        return AwsCredentials(
            f"AKIAROTATING{number:08d}",
            "secret",
            expiration=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1),
        )


def client_for(
    world: World,
    *,
    credentials: RefreshingCredentials | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    timeout_s: float = 30.0,
    url: str | None = None,
) -> AwsClient:
    config = world.cloud_config()
    if url is not None:
        config = config.replace(world.server.url.encode(), url.encode())
    return AwsClient(
        region=world.region,
        config=parse_cloud_config(config),
        credentials=credentials or RefreshingCredentials(StaticSource(KEYS)),
        transport=transport,
        timeout_s=timeout_s,
    )


async def test_server_errors_are_retried_each_attempt_signed_afresh(world: World) -> None:
    """Two HTTP 500s, then an answer: three requests, each signed with the credentials of
    its own attempt (keys that rotate at every fetch show a new signature each time)."""
    world.server.faults.server_error("DescribeVpcs", times=2)
    recording = Recording()
    client = client_for(
        world,
        credentials=RefreshingCredentials(RotatingKeys()),
        transport=recording,
    )
    try:
        with trio.fail_after(20):
            answer = await client.call("ec2", "DescribeVpcs", {"VpcIds": [world.vpc_id]})
    finally:
        await client.aclose()
    assert [v["VpcId"] for v in answer["Vpcs"]] == [world.vpc_id]  # type: ignore[attr-defined]
    assert world.server.faults.calls("DescribeVpcs") == 3
    keys = [h["Authorization"].split("Credential=")[1].split("/")[0] for h in recording.headers]
    assert keys == ["AKIAROTATING00000001", "AKIAROTATING00000002", "AKIAROTATING00000003"]
    assert client.statistics().retries == 2


async def test_the_leadership_fence_is_checked_before_every_attempt(world: World) -> None:
    """Under a budgeted call's guard (`trio_ccm.cloud.fence`), each attempt asks first: the
    Lease lost between a failed attempt and its retry, the retry never leaves the process."""
    world.server.faults.server_error("DescribeVpcs", times=1)
    asked = 0

    def guard() -> None:
        # Leading until the first attempt has reached the cloud (its checks before the
        # client sends and at the socket write pass); lost for every later check.
        nonlocal asked
        asked += 1
        if world.server.faults.calls("DescribeVpcs") >= 1:
            raise NotLeadingError("lost the Lease while the call was backing off")

    client = client_for(world)
    try:
        with trio.fail_after(20), fence.guarding(guard), pytest.raises(NotLeadingError):
            await client.call("ec2", "DescribeVpcs", {"VpcIds": [world.vpc_id]})
    finally:
        await client.aclose()
    assert asked >= 2  # the retry asked
    assert world.server.faults.calls("DescribeVpcs") == 1  # the retry was never sent


@pytest.mark.parametrize(
    ("service", "fault_service", "action", "code", "status"),
    [
        pytest.param(
            "ec2", "ec2", "DescribeVpcs", "RequestLimitExceeded", 503, id="ec2-RequestLimitExceeded"
        ),
        pytest.param(
            "elbv2",
            "elasticloadbalancing",
            "DescribeLoadBalancers",
            "Throttling",
            400,
            id="elb-Throttling",
        ),
    ],
)
async def test_throttling_is_raised_at_once_as_throttled_error(
    world: World, service: str, fault_service: str, action: str, code: str, status: int
) -> None:
    """EC2's RequestLimitExceeded (HTTP 503) and ELB's Throttling (HTTP 400) are raised after
    one request as AwsThrottledError, a ThrottledError (the budget slows down), not retried."""
    world.server.faults.throttle(action, service=fault_service, times=None)
    client = client_for(world)
    try:
        with trio.fail_after(20), pytest.raises(AwsThrottledError) as caught:
            await client.call(service, action)
    finally:
        await client.aclose()
    assert isinstance(caught.value, ThrottledError)
    assert (caught.value.code, caught.value.status) == (code, status)
    assert world.server.faults.calls(action) == 1
    assert client.statistics().throttles == 1


@pytest.mark.parametrize(
    "truncated", [pytest.param(False, id="html-page"), pytest.param(True, id="cut-short")]
)
async def test_garbage_answers_are_retried_then_raised_as_server_errors(
    world: World, truncated: bool
) -> None:
    """An HTML page or a truncated document with HTTP 200 is retried; when it persists,
    the call fails with AwsServerError after max_attempts requests, never a parser crash
    nor an empty answer."""
    await world.add_instances(2)
    world.server.faults.garbage("DescribeInstances", truncated=truncated, times=1)
    client = client_for(world)
    try:
        with trio.fail_after(20):
            answer = await client.call("ec2", "DescribeInstances")
            reservations = answer["Reservations"]
            assert sum(len(r["Instances"]) for r in reservations) == 2  # type: ignore[attr-defined,misc]
            world.server.faults.garbage("DescribeInstances", truncated=truncated, times=None)
            with pytest.raises(AwsServerError, match="not the XML document"):
                await client.call("ec2", "DescribeInstances")
    finally:
        await client.aclose()
    assert world.server.faults.calls("DescribeInstances") == 2 + client.max_attempts


async def test_a_slow_answer_times_out_and_is_retried(world: World) -> None:
    """An answer slower than the client's timeout is a transport failure, retried, then an
    AwsServerError naming the endpoint (30 s in production; 0.2 s here)."""
    world.server.faults.latency(1.0, "DescribeVpcs")
    client = client_for(world, timeout_s=0.2)
    try:
        with trio.fail_after(20), pytest.raises(AwsServerError, match="did not answer") as caught:
            await client.call("ec2", "DescribeVpcs")
    finally:
        await client.aclose()
    assert world.server.url in str(caught.value)
    assert world.server.faults.calls("DescribeVpcs") == client.max_attempts


async def test_an_unreachable_endpoint_is_a_server_error_naming_it(world: World) -> None:
    """A refused connection is retried, then raised as AwsServerError with the endpoint."""
    client = client_for(world, url="http://127.0.0.1:9")
    try:
        with (
            trio.fail_after(20),
            pytest.raises(AwsServerError, match=r"127\.0\.0\.1:9 did not answer"),
        ):
            await client.call("ec2", "DescribeVpcs")
    finally:
        await client.aclose()


async def test_an_expired_token_refreshes_the_credentials_once(world: World) -> None:
    """ExpiredToken makes the client drop its credentials, fetch new ones and retry once."""
    world.server.faults.add(Fault("error", "DescribeVpcs", "ec2", 1, 400, "ExpiredToken"))
    source = StaticSource(KEYS)
    credentials = RefreshingCredentials(source)
    client = client_for(world, credentials=credentials)
    try:
        with trio.fail_after(20):
            await client.call("ec2", "DescribeVpcs")
    finally:
        await client.aclose()
    assert credentials.fetches == 2
    assert world.server.faults.calls("DescribeVpcs") == 2


@pytest.mark.parametrize(
    ("code", "fix"),
    [
        pytest.param(
            "UnauthorizedOperation", "grant ec2:DescribeVpcs to the IAM role", id="iam-action"
        ),
        pytest.param("AuthFailure", "check the credentials", id="credentials"),
        pytest.param("RequestExpired", "check the host's clock", id="clock"),
    ],
)
async def test_refusals_name_the_call_the_resource_and_the_fix(
    world: World, code: str, fix: str
) -> None:
    """A refused call is an AwsError (not retried) saying the call, the resource, the code
    and what to do about it."""
    world.server.faults.add(Fault("error", "DescribeVpcs", "ec2", None, 403, code))
    client = client_for(world)
    try:
        with trio.fail_after(20), pytest.raises(AwsError) as caught:
            await client.call("ec2", "DescribeVpcs", target=f"VPC {world.vpc_id}")
    finally:
        await client.aclose()
    message = str(caught.value)
    assert message.startswith(f"EC2 DescribeVpcs (VPC {world.vpc_id}): {code}: ")
    assert fix in message
    assert not isinstance(caught.value, AwsServerError)
