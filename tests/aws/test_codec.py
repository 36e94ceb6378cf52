"""The botocore codec, pinned: botocore's serialiser, signer and parser, keyed on each
service model's protocol, round-trip real calls against moto for every service the aws
provider speaks. A botocore upgrade that breaks the internals we use fails here."""

from __future__ import annotations

import botocore
import pytest
import trio

from trio_ccm.cloud.aws import AwsClient, AwsError, AwsServerError, AwsThrottledError
from trio_ccm.cloud.aws.codec import Codec
from trio_ccm.cloud.aws.config import parse_cloud_config
from trio_ccm.cloud.aws.credentials import AwsCredentials, RefreshingCredentials, StaticSource
from trio_ccm_testbed.aws import TEST_CREDENTIALS, MotoServer, World

KEYS = AwsCredentials(TEST_CREDENTIALS.access_key_id, TEST_CREDENTIALS.secret_access_key)


def client_for(world: World) -> AwsClient:
    return AwsClient(
        region=world.region,
        config=parse_cloud_config(world.cloud_config()),
        credentials=RefreshingCredentials(StaticSource(KEYS)),
    )


def test_botocore_is_the_pinned_series() -> None:
    """The codec runs on the botocore series pyproject.toml pins (1.44.x)."""
    assert botocore.__version__.startswith("1.44.")


@pytest.mark.parametrize(
    ("service", "protocol", "signing_name"),
    [
        pytest.param("ec2", "ec2", "ec2", id="ec2"),
        pytest.param("elb", "query", "elasticloadbalancing", id="elb"),
        pytest.param("elbv2", "query", "elasticloadbalancing", id="elbv2"),
        pytest.param("sts", "query", "sts", id="sts"),
    ],
)
def test_each_service_model_has_the_protocol_the_codec_expects(
    service: str, protocol: str, signing_name: str
) -> None:
    """botocore's models still say EC2 speaks `ec2` and ELB, ELBv2, STS speak `query`."""
    codec = Codec(service)
    assert (codec.protocol, codec.signing_name) == (protocol, signing_name)


async def test_every_service_round_trips_against_moto(world: World) -> None:
    """A signed call per service is accepted by moto and its answer parsed into botocore's
    output shape (EC2, ELB, ELBv2, STS)."""
    client = client_for(world)
    with trio.fail_after(30):
        try:
            zones = await client.call("ec2", "DescribeAvailabilityZones")
            classic = await client.call("elb", "DescribeLoadBalancers")
            network = await client.call("elbv2", "DescribeLoadBalancers")
            identity = await client.call("sts", "GetCallerIdentity")
            vpcs = await client.call("ec2", "DescribeVpcs", {"VpcIds": [world.vpc_id]})
        finally:
            await client.aclose()
    assert {z["ZoneName"] for z in zones["AvailabilityZones"]} >= set(world.zones)  # type: ignore[attr-defined]
    assert classic["LoadBalancerDescriptions"] == []
    assert network["LoadBalancers"] == []
    assert identity["Account"] == "123456789012"
    assert [v["VpcId"] for v in vpcs["Vpcs"]] == [world.vpc_id]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("service", "action", "params", "code"),
    [
        pytest.param(
            "ec2",
            "DescribeInstances",
            {"InstanceIds": ["i-0123456789abcdef0"]},
            "InvalidInstanceID.NotFound",
            id="ec2-error-document",
        ),
        pytest.param(
            "elbv2",
            "DescribeLoadBalancers",
            {"Names": ["missing"]},
            "LoadBalancerNotFound",
            id="query-error-response",
        ),
    ],
)
async def test_error_documents_become_aws_errors_with_their_code(
    world: World, service: str, action: str, params: dict[str, object], code: str
) -> None:
    """Both error formats (EC2's Response/Errors, the query protocol's ErrorResponse) parse
    into an AwsError with the code, HTTP status and request ID."""
    client = client_for(world)
    try:
        with trio.fail_after(30), pytest.raises(AwsError) as caught:
            await client.call(service, action, params, target="the thing")
    finally:
        await client.aclose()
    error = caught.value
    assert (error.code, error.status) == (code, 400)
    assert not isinstance(error, AwsServerError | AwsThrottledError)
    assert error.request_id
    assert "(the thing)" in str(error)


def test_a_non_aws_answer_is_a_transient_server_error() -> None:
    """An HTML page or a body that is not the action's XML document (even with HTTP 200)
    is an AwsServerError, never an empty answer."""
    codec = Codec("ec2")
    for status, body in [
        (200, b"<html><body>hello</body></html>"),
        (200, b'<?xml version="1.0"?><DescribeInstancesResponse><reservationSet><item>'),
        (500, b"<html><body>Internal Server Error</body></html>"),
        (400, b"not xml at all"),
    ]:
        with pytest.raises(AwsServerError, match="not the XML document"):
            codec.parse("DescribeInstances", status, {}, body)


def test_invalid_parameters_name_the_action() -> None:
    """Parameters the model refuses are an AwsError naming the action (never sent)."""
    codec = Codec("ec2")
    with pytest.raises(AwsError, match=r"DescribeInstances.*parameters are invalid"):
        codec.request(
            "DescribeInstances",
            {"InstanceIds": "i-1"},
            endpoint_url="http://127.0.0.1:1",
            region="us-east-1",
            credentials=KEYS,
        )


def test_requests_are_signed_and_unsigned_actions_are_not(moto_server: MotoServer) -> None:
    """SigV4 headers are added for signed actions; AssumeRoleWithWebIdentity goes unsigned."""
    codec = Codec("sts")
    signed = codec.request(
        "GetCallerIdentity", {}, endpoint_url=moto_server.url, region="us-east-1", credentials=KEYS
    )
    unsigned = codec.request(
        "AssumeRoleWithWebIdentity",
        {
            "RoleArn": "arn:aws:iam::123456789012:role/r",
            "RoleSessionName": "session",
            "WebIdentityToken": "a-token",
        },
        endpoint_url=moto_server.url,
        region="us-east-1",
        credentials=KEYS,
    )
    assert signed.headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIATEST")
    assert "/us-east-1/sts/aws4_request" in signed.headers["Authorization"]
    assert "Authorization" not in unsigned.headers
    assert b"Action=AssumeRoleWithWebIdentity" in unsigned.body
