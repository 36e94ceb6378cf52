"""The credential chain, in the SDKs' order, each source through its real path: moto's STS
for web identity and AssumeRole, loopback stand-ins for the metadata service and the
container endpoint; refresh before expiry, one refresh shared by concurrent callers, and
no secret in any log line."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
import structlog
import trio
import trio.testing

from tests.helpers.aws import open_provider, serve_wsgi, utc
from trio_ccm.cloud.aws import AwsClient, AwsCredentials, AwsCredentialsError
from trio_ccm.cloud.aws.config import parse_cloud_config
from trio_ccm.cloud.aws.credentials import (
    ContainerSource,
    CredentialChain,
    RefreshingCredentials,
)
from trio_ccm.cloud.aws.imds import Imds, ImdsError
from trio_ccm_testbed.aws import World

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
EXPIRES = "2026-11-21T16:00:00Z"


class Recording(httpx.AsyncBaseTransport):
    """The network, keeping each request (headers and body)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.requests: list[tuple[httpx.Headers, bytes]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        self.requests.append((request.headers, body))
        return await self.inner.handle_async_request(request)

    def actions(self) -> list[dict[str, list[str]]]:
        return [parse_qs(body.decode()) for _, body in self.requests if b"Action=" in body]


# -- stand-ins ---------------------------------------------------------------------------------
class MetadataService:
    """IMDSv2 as EC2 serves it: a token from PUT, every GET refused without it."""

    def __init__(self, *, role: str = "ccm-role", expiration: str = EXPIRES) -> None:
        self.role = role
        self.expiration = expiration
        self.credential_reads = 0
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        path, method = environ["PATH_INFO"], environ["REQUEST_METHOD"]
        if path == "/latest/api/token":
            if method != "PUT" or not environ.get("HTTP_X_AWS_EC2_METADATA_TOKEN_TTL_SECONDS"):
                return self.answer(start, 400, "")
            return self.answer(start, 200, "imds-token")
        if environ.get("HTTP_X_AWS_EC2_METADATA_TOKEN") != "imds-token":
            return self.answer(start, 401, "")
        if path == "/latest/meta-data/placement/region":
            return self.answer(start, 200, "eu-west-1")
        if path == "/latest/meta-data/instance-id":
            return self.answer(start, 200, "i-0123456789abcdef0")
        if path == "/latest/meta-data/iam/security-credentials/":
            return self.answer(start, 200, f"{self.role}\n" if self.role else "")
        if path == f"/latest/meta-data/iam/security-credentials/{self.role}":
            with self.lock:
                self.credential_reads += 1
                number = self.credential_reads
            body = {
                "Code": "Success",
                "AccessKeyId": f"ASIAIMDS{number:012d}",
                "SecretAccessKey": SECRET,
                "Token": "imds-session-token",
                "Expiration": self.expiration,
            }
            return self.answer(start, 200, json.dumps(body))
        return self.answer(start, 404, "")

    @staticmethod
    def answer(start: Callable[..., Any], status: int, body: str) -> list[bytes]:
        start(f"{status} X", [("Content-Type", "text/plain")])
        return [body.encode()]


@pytest.fixture
def imds() -> Iterator[tuple[MetadataService, str]]:
    service = MetadataService()
    with serve_wsgi(service) as url:
        yield service, url


def container_app(token: str) -> Callable[..., Iterable[bytes]]:
    def app(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("HTTP_AUTHORIZATION") != token:
            start("401 Unauthorized", [("Content-Type", "application/json")])
            return [b'{"code": "AccessDenied", "message": "bad token"}']
        start("200 OK", [("Content-Type", "application/json")])
        body = {
            "AccessKeyId": "ASIACONTAINER0000001",
            "SecretAccessKey": SECRET,
            "Token": "pod-identity-token",
            "Expiration": EXPIRES,
        }
        return [json.dumps(body).encode()]

    return app


def client_for(world: World, transport: httpx.AsyncBaseTransport | None = None) -> AwsClient:
    return AwsClient(
        region=world.region, config=parse_cloud_config(world.cloud_config()), transport=transport
    )


def chain(client: AwsClient, environ: dict[str, str], imds_url: str = "") -> CredentialChain:
    return CredentialChain(
        environ=environ,
        sts=client,
        http=client.http,
        imds=Imds(http=client.http, endpoint=imds_url or "http://127.0.0.1:9"),
        now=lambda: utc(),
    )


def base_environ(tmp_path: Path) -> dict[str, str]:
    """No credentials anywhere: HOME is an empty folder (no ~/.aws)."""
    return {"HOME": str(tmp_path)}


# -- the sources ---------------------------------------------------------------------------
async def test_environment_keys(tmp_path: Path) -> None:
    """AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN) come first."""
    client = AwsClient(region="us-east-1")
    environ = {
        **base_environ(tmp_path),
        "AWS_ACCESS_KEY_ID": "AKIAENV",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_SESSION_TOKEN": "session",
    }
    try:
        found = await chain(client, environ).fetch()
    finally:
        await client.aclose()
    assert (found.access_key_id, found.secret_access_key, found.session_token) == (
        "AKIAENV",
        SECRET,
        "session",
    )
    assert found.source == "environment (AWS_ACCESS_KEY_ID)"


async def test_half_set_environment_keys_name_the_missing_one(tmp_path: Path) -> None:
    """One key without the other is an error naming the missing variable."""
    client = AwsClient(region="us-east-1")
    environ = {**base_environ(tmp_path), "AWS_ACCESS_KEY_ID": "AKIAENV"}
    try:
        with pytest.raises(AwsCredentialsError, match="AWS_SECRET_ACCESS_KEY is empty"):
            await chain(client, environ).fetch()
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    ("profile", "credentials", "config", "key"),
    [
        pytest.param(
            None,
            "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = s\n",
            "",
            "AKIADEFAULT",
            id="default-credentials-file",
        ),
        pytest.param(
            "ops",
            "",
            "[profile ops]\naws_access_key_id = AKIAOPS\naws_secret_access_key = s\n",
            "AKIAOPS",
            id="named-profile-config-file",
        ),
        pytest.param(
            "ops",
            "[ops]\naws_access_key_id = AKIAFROMCREDS\naws_secret_access_key = s\n",
            "[profile ops]\naws_access_key_id = AKIAFROMCONFIG\naws_secret_access_key = s\n"
            "region = eu-west-1\n",
            "AKIAFROMCREDS",
            id="credentials-file-wins",
        ),
    ],
)
async def test_shared_file_profiles(
    tmp_path: Path, profile: str | None, credentials: str, config: str, key: str
) -> None:
    """Static keys of AWS_PROFILE (else default), the credentials file before the config
    file, found at AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE."""
    (tmp_path / "creds").write_text(credentials)
    (tmp_path / "config").write_text(config)
    environ = {
        **base_environ(tmp_path),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "creds"),
        "AWS_CONFIG_FILE": str(tmp_path / "config"),
    }
    if profile:
        environ["AWS_PROFILE"] = profile
    client = AwsClient(region="us-east-1")
    try:
        found = await chain(client, environ).fetch()
    finally:
        await client.aclose()
    assert found.access_key_id == key


async def test_a_missing_named_profile_is_an_error_naming_the_files(tmp_path: Path) -> None:
    """AWS_PROFILE naming no profile fails with the profile and both files, never falling
    through to another source."""
    environ = {**base_environ(tmp_path), "AWS_PROFILE": "nope"}
    client = AwsClient(region="us-east-1")
    try:
        with pytest.raises(AwsCredentialsError, match=r"AWS_PROFILE=nope: no such profile"):
            await chain(client, environ).fetch()
    finally:
        await client.aclose()


async def test_a_profile_role_is_assumed_with_its_source_profile(
    world: World, tmp_path: Path
) -> None:
    """role_arn + source_profile: STS AssumeRole signed with the source profile's keys."""
    (tmp_path / "config").write_text(
        "[profile base]\naws_access_key_id = AKIABASE\naws_secret_access_key = s\n"
        "[profile ccm]\nrole_arn = arn:aws:iam::123456789012:role/ccm\nsource_profile = base\n"
    )
    environ = {
        **base_environ(tmp_path),
        "AWS_CONFIG_FILE": str(tmp_path / "config"),
        "AWS_PROFILE": "ccm",
    }
    recording = Recording()
    client = client_for(world, recording)
    try:
        with trio.fail_after(20):
            found = await chain(client, environ).fetch()
    finally:
        await client.aclose()
    assert found.access_key_id.startswith("ASIA")
    assert found.session_token
    assert found.source == "assumed role arn:aws:iam::123456789012:role/ccm (from profile base)"
    headers, _ = recording.requests[0]
    assert "Credential=AKIABASE/" in headers["Authorization"]
    assert recording.actions()[0]["Action"] == ["AssumeRole"]


async def test_web_identity_reads_the_token_file_at_every_refresh(
    world: World, tmp_path: Path
) -> None:
    """IRSA: AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE give AssumeRoleWithWebIdentity,
    unsigned, with the token as the file holds it at each refresh (the kubelet rotates it)."""
    token = tmp_path / "token"
    token.write_text("first-token\n")
    environ = {
        **base_environ(tmp_path),
        "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/irsa",
        "AWS_WEB_IDENTITY_TOKEN_FILE": str(token),
        "AWS_ROLE_SESSION_NAME": "ccm-session",
    }
    recording = Recording()
    client = client_for(world, recording)
    credentials = RefreshingCredentials(chain(client, environ))
    try:
        with trio.fail_after(20):
            first = await credentials.get()
            token.write_text("second-token\n")
            credentials.invalidate()
            second = await credentials.get()
    finally:
        await client.aclose()
    assert first.access_key_id.startswith("ASIA")
    assert first.expiration is not None
    assert second.access_key_id != first.access_key_id
    calls = recording.actions()
    assert [c["Action"] for c in calls] == [["AssumeRoleWithWebIdentity"]] * 2
    assert [c["WebIdentityToken"] for c in calls] == [["first-token"], ["second-token"]]
    assert calls[0]["RoleSessionName"] == ["ccm-session"]
    assert all("Authorization" not in headers for headers, _ in recording.requests)


async def test_the_container_endpoint_with_a_token_file(tmp_path: Path) -> None:
    """EKS Pod Identity: AWS_CONTAINER_CREDENTIALS_FULL_URI, with the token file's content
    as the Authorization header."""
    (tmp_path / "token").write_text("pod-token\n")
    with serve_wsgi(container_app("pod-token")) as url:
        environ = {
            **base_environ(tmp_path),
            "AWS_CONTAINER_CREDENTIALS_FULL_URI": f"{url}/v1/credentials",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(tmp_path / "token"),
        }
        client = AwsClient(region="us-east-1")
        try:
            with trio.fail_after(20):
                found = await chain(client, environ).fetch()
        finally:
            await client.aclose()
    assert (found.access_key_id, found.session_token) == (
        "ASIACONTAINER0000001",
        "pod-identity-token",
    )
    assert found.expiration == dt.datetime(2026, 11, 21, 16, 0, tzinfo=dt.UTC)


def test_plain_http_container_endpoints_must_be_local() -> None:
    """A plain-HTTP full URI elsewhere than loopback or the container endpoints is refused;
    the relative URI is resolved against 169.254.170.2."""
    http = httpx.AsyncClient()
    with pytest.raises(AwsCredentialsError, match="plain HTTP is allowed only"):
        ContainerSource.from_environ(
            {"AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://10.0.0.1/creds"}, http=http
        )
    relative = ContainerSource.from_environ(
        {"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/abc"}, http=http
    )
    assert relative is not None
    assert relative.url == "http://169.254.170.2/v2/credentials/abc"


async def test_instance_metadata_v2_gives_the_role_credentials(
    imds: tuple[MetadataService, str], tmp_path: Path
) -> None:
    """Last in the chain: IMDSv2 (a session token, then the role's credentials)."""
    _service, url = imds
    client = AwsClient(region="us-east-1")
    try:
        with trio.fail_after(20):
            found = await chain(client, base_environ(tmp_path), url).fetch()
            region = await Imds(http=client.http, endpoint=url).region()
    finally:
        await client.aclose()
    assert found.access_key_id == "ASIAIMDS000000000001"
    assert found.source == "instance metadata (role ccm-role)"
    assert region == "eu-west-1"


async def test_no_metadata_service_says_what_to_set(tmp_path: Path) -> None:
    """Off EC2 with no other source, the error says so and names the hop limit."""
    client = AwsClient(region="us-east-1")
    try:
        with trio.fail_after(20), pytest.raises(ImdsError, match="HttpPutResponseHopLimit"):
            await chain(client, base_environ(tmp_path)).fetch()
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    ("present", "chosen"),
    [
        pytest.param(("env", "profile", "irsa", "container"), "environment", id="env-first"),
        pytest.param(("profile", "irsa", "container"), "profile default", id="profile-second"),
        pytest.param(("irsa", "container"), "web identity", id="irsa-third"),
        pytest.param(("container",), "container endpoint", id="container-fourth"),
        pytest.param((), "instance metadata", id="imds-last"),
    ],
)
async def test_the_chain_takes_the_first_configured_source(
    tmp_path: Path, imds: tuple[MetadataService, str], present: tuple[str, ...], chosen: str
) -> None:
    """Environment, shared files, web identity, container endpoint, instance metadata."""
    environ = base_environ(tmp_path)
    if "env" in present:
        environ |= {"AWS_ACCESS_KEY_ID": "AKIAENV", "AWS_SECRET_ACCESS_KEY": SECRET}
    if "profile" in present:
        (tmp_path / ".aws").mkdir()
        (tmp_path / ".aws" / "credentials").write_text(
            "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = s\n"
        )
    if "irsa" in present:
        (tmp_path / "token").write_text("t")
        environ |= {
            "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/irsa",
            "AWS_WEB_IDENTITY_TOKEN_FILE": str(tmp_path / "token"),
        }
    if "container" in present:
        environ["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "http://127.0.0.1:9/creds"
    client = AwsClient(region="us-east-1")
    try:
        source = await chain(client, environ, imds[1]).choose()
    finally:
        await client.aclose()
    assert source.description.startswith(chosen)


async def test_the_cloud_config_role_arn_is_assumed_with_source_headers(world: World) -> None:
    """RoleARN (+ SourceARN) in the cloud-config: every call is signed with the role's
    credentials from AssumeRole, which carries x-amz-source-account / x-amz-source-arn."""
    recording = Recording()
    async with open_provider(
        world,
        transport=recording,
        RoleARN="arn:aws:iam::210987654321:role/ccm",
        SourceARN="arn:aws:eks:us-east-1:123456789012:cluster/prod",
    ) as provider:
        with trio.fail_after(20):
            await provider.initialize()
    assume, zones = recording.requests[0], recording.requests[1]
    assert b"Action=AssumeRole&" in assume[1]
    assert assume[0]["x-amz-source-account"] == "210987654321"
    assert assume[0]["x-amz-source-arn"] == "arn:aws:eks:us-east-1:123456789012:cluster/prod"
    assert "Credential=AKIATEST" in assume[0]["Authorization"]
    assert b"Action=DescribeAvailabilityZones" in zones[1]
    assert "Credential=ASIA" in zones[0]["Authorization"]


# -- refreshing --------------------------------------------------------------------------------
class CountingSource:
    """Credentials expiring `lifetime` after `now()`, the fetch gated by `gate`."""

    description = "counting source"

    def __init__(self, now: Callable[[], dt.datetime], lifetime_s: float = 3600.0) -> None:
        self.now = now
        self.lifetime = dt.timedelta(seconds=lifetime_s)
        self.fetches = 0
        self.gate: trio.Event | None = None
        self.fail = False

    async def fetch(self) -> AwsCredentials:
        if self.gate is not None:
            await self.gate.wait()
        await trio.lowlevel.checkpoint()
        if self.fail:
            raise AwsCredentialsError("the source is down")
        self.fetches += 1
        return AwsCredentials(
            f"AKIA{self.fetches:016d}", SECRET, "token", expiration=self.now() + self.lifetime
        )


async def test_credentials_are_refreshed_five_minutes_before_they_expire(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Cached until 5 minutes before expiry, then fetched again."""
    now = lambda: utc(trio.current_time())  # noqa: E731
    source = CountingSource(now)
    credentials = RefreshingCredentials(source, now=now)
    first = await credentials.get()
    await trio.sleep(3600 - 301)
    assert await credentials.get() is first
    await trio.sleep(2)
    second = await credentials.get()
    assert second is not first
    assert source.fetches == 2


async def test_concurrent_callers_share_one_refresh(autojump_clock: trio.testing.MockClock) -> None:
    """Ten callers asking while a fetch is under way all get its result: one fetch."""
    now = lambda: utc(trio.current_time())  # noqa: E731
    source = CountingSource(now)
    source.gate = trio.Event()
    credentials = RefreshingCredentials(source, now=now)
    got: list[AwsCredentials] = []

    async def ask() -> None:
        got.append(await credentials.get())

    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        source.gate.set()
    assert source.fetches == 1
    assert len({id(c) for c in got}) == 1


async def test_a_failed_refresh_keeps_valid_credentials_and_fails_expired_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Inside the 5-minute margin a failed refresh keeps the still-valid keys (warning);
    once they have expired, the failure is raised."""
    now = lambda: utc(trio.current_time())  # noqa: E731
    source = CountingSource(now, lifetime_s=600)
    credentials = RefreshingCredentials(source, now=now)
    first = await credentials.get()
    source.fail = True
    await trio.sleep(400)
    with structlog.testing.capture_logs() as logs:
        assert await credentials.get() is first
    assert [e["event"] for e in logs] == ["aws.credentials-refresh-failed"]
    await trio.sleep(300)
    with pytest.raises(AwsCredentialsError, match="the source is down"):
        await credentials.get()


async def test_no_secret_is_logged_or_shown(world: World, tmp_path: Path) -> None:
    """Through a chain choice, a fetch and a signed call, no log line holds the secret key
    or the session token, and the credentials' repr hides them."""
    environ = {
        **base_environ(tmp_path),
        "AWS_ACCESS_KEY_ID": "AKIASECRETTEST",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_SESSION_TOKEN": "very-secret-session-token",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    with structlog.testing.capture_logs() as logs, trio.fail_after(20):
        async with open_provider(world, environ=environ) as provider:
            await provider.initialize()
            credentials = provider.context.client.credentials
            assert credentials is not None
            shown = repr(await credentials.get())
    text = repr(logs)
    assert "aws.credentials" in text
    for secret in (SECRET, "very-secret-session-token"):
        assert secret not in text
        assert secret not in shown
