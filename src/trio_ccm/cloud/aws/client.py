"""AwsClient: EC2, ELB (classic), ELBv2 and STS calls from Trio.

botocore is only the codec (`codec.py`); httpx does the I/O, so a call is cancelled the
moment its Trio scope is (the Lease lost, a deadline). One `call()`:

1. takes the credentials (`RefreshingCredentials`: cached, shared, refreshed early),
2. serialises and **signs the request afresh for every attempt** (a retried request must
   carry a new `X-Amz-Date`),
3. sends it with a **30 s timeout** (cloud-provider-aws's HTTP client timeout),
4. parses the answer; answers over `PARSE_INLINE_MAX_BYTES` are parsed in a worker thread
   under one shared limiter (a 1,000-instance DescribeInstances page takes about 0.5 s of
   CPU: on the Trio thread it would stall every other task; see docs/aws.md),
5. retries what is transient, up to `max_attempts` in all, with capped exponential
   backoff and full jitter: HTTP 5xx, a connection failure, a timeout, an answer that is
   no AWS answer (`AwsServerError`). An expired session token refreshes the credentials
   once and retries.

**Unknown outcomes** (issue 27): a mutating action (anything but `Describe*`, `List*`,
`Get*` and STS) whose request went out and then timed out, lost its connection, or got a
5xx is *not* retried here: AWS may still apply it, later than any retry, so it is raised at
once as `AwsOutcomeUnknownError` (an `OutcomeUnknownError`, `late_landing_s` = the
timeout + `LATE_LANDING_MARGIN_S`) and the controller re-verifies once it can no longer
land. A failure before sending (connect error, connect or pool timeout) is retried as
before; reads are retried as before. ELB/EC2 offer no precondition (ETag, revision) for
these writes, so none is used.

Throttling (`RequestLimitExceeded`, `Throttling`, HTTP 429, ...) is *not* retried here: it
is raised at once as `AwsThrottledError`, a `ThrottledError`, so the shared cloud budget
(`cloud/budget.py`) halves the method family's rate and the controller retries the object
with its backoff. Retrying inside would hide the throttle from the budget and keep
hammering an account whose bucket is empty.

Endpoints: `https://{ec2|elasticloadbalancing|sts}.{region}.amazonaws.com` (`.com.cn` in
China regions), or a cloud-config `[ServiceOverride]` (URL, SigningRegion, SigningName).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import httpx
import trio

from trio_ccm import httpsend
from trio_ccm.cloud import fence
from trio_ccm.cloud.attempts import Attempts, Resend, Retry, explain
from trio_ccm.cloud.aws.codec import USER_AGENT, Codec, Parsed
from trio_ccm.cloud.aws.config import CloudConfig
from trio_ccm.cloud.aws.credentials import (
    AwsCredentials,
    AwsCredentialsError,
    RefreshingCredentials,
)
from trio_ccm.cloud.aws.errors import AwsError, AwsServerError, AwsThrottledError
from trio_ccm.cloud.provider import OutcomeUnknownError
from trio_ccm.logs import get_logger

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "LATE_LANDING_MARGIN_S",
    "PARSE_INLINE_MAX_BYTES",
    "SERVICES",
    "AwsClient",
    "AwsOutcomeUnknownError",
    "ClientStatistics",
    "Endpoint",
    "endpoint_for",
]

log = get_logger("trio_ccm.cloud.aws.client")

SERVICES: Final = ("ec2", "elb", "elbv2", "sts")
"""The client's services, by botocore's names."""
DEFAULT_TIMEOUT_S: Final = 30.0
PARSE_INLINE_MAX_BYTES: Final = 32 * 1024
"""Answers larger than this (about 3 ms of parsing) are parsed in a worker thread."""
LATE_LANDING_MARGIN_S: Final = 30.0
"""How long after the client's timeout AWS may still apply a request it received (its
API front ends queue briefly; no documented bound, so a generous one)."""
_READ_PREFIXES: Final = ("Describe", "List", "Get")
_NOT_SENT: Final = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_HOSTS: Final = {"ec2": "ec2", "elb": "elasticloadbalancing", "elbv2": "elasticloadbalancing"}
_EXPIRED: Final = frozenset({"ExpiredToken", "ExpiredTokenException", "RequestExpired"})


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a service is called and how requests to it are signed."""

    url: str
    signing_region: str
    signing_name: str = ""  # "" = the service model's


def endpoint_for(service: str, region: str, config: CloudConfig | None = None) -> Endpoint:
    """The endpoint of `service` in `region`: the cloud-config's override, or AWS's own."""
    override = config.override_for(service, region) if config is not None else None
    if override is not None:
        return Endpoint(override.url, override.signing_region, override.signing_name)
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return Endpoint(f"https://{_HOSTS.get(service, service)}.{region}.{suffix}", region)


@dataclass(frozen=True, slots=True)
class ClientStatistics:
    """Calls made (attempts included), by `service:action`, and retries and throttles."""

    calls: Mapping[str, int]
    retries: int
    throttles: int


class AwsClient:
    """Calls AWS APIs under Trio (see the module docstring).

    `region` may be set after construction (the provider learns it in `initialize()`);
    `credentials` too (the credential chain itself calls STS through this client).
    `transport` replaces the network (tests); `rng` the jitter's randomness.
    """

    def __init__(
        self,
        *,
        region: str = "",
        config: CloudConfig | None = None,
        credentials: RefreshingCredentials | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_attempts: int = 3,
        rng: random.Random | None = None,
        parse_limiter: trio.CapacityLimiter | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"AwsClient: max_attempts must be at least 1, got {max_attempts}")
        self.region = region
        self.config = config or CloudConfig()
        self.credentials = credentials
        self.timeout_s = timeout_s
        self.http = httpx.AsyncClient(
            # The fence also runs at each socket write (trio_ccm.cloud.fence.http_transport).
            transport=transport or fence.http_transport(),
            timeout=httpx.Timeout(timeout_s),
            headers={"User-Agent": USER_AGENT},
            http2=False,
        )
        self._attempts = Attempts(cloud="aws", max_attempts=max_attempts, rng=rng)
        # One parse at a time off the Trio thread: parsing holds the GIL, so a second
        # thread would only compete with the first (and with the Trio thread).
        self._parse_limiter = parse_limiter or trio.CapacityLimiter(1)
        self._codecs: dict[str, Codec] = {}
        self._codec_lock = trio.Lock()

    @property
    def max_attempts(self) -> int:
        """Requests sent for one call at the most (retries included)."""
        return self._attempts.max_attempts

    async def aclose(self) -> None:
        await self.http.aclose()

    def statistics(self) -> ClientStatistics:
        attempts = self._attempts
        return ClientStatistics(
            calls=dict(attempts.calls), retries=attempts.retries, throttles=attempts.throttles
        )

    def endpoint(self, service: str) -> Endpoint:
        if not self.region:
            raise AwsError(
                "the region is not known yet (the provider learns it in initialize()): set "
                "Region in the cloud-config or AWS_REGION",
                service=service,
                action="(any)",
            )
        return endpoint_for(service, self.region, self.config)

    async def codec(self, service: str) -> Codec:
        """The service's codec (its model is loaded once, in a worker thread)."""
        found = self._codecs.get(service)
        if found is not None:
            return found
        async with self._codec_lock:
            found = self._codecs.get(service)
            if found is None:
                found = await trio.to_thread.run_sync(Codec, service)
                self._codecs[service] = found
            return found

    async def call(
        self,
        service: str,
        action: str,
        params: Mapping[str, object] | None = None,
        *,
        target: str = "",
        credentials: AwsCredentials | None = None,
        unsigned: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> Parsed:
        """Call `action` of `service` with `params`; the parsed answer, or an AwsError.

        `target` names the resource in errors ("instance i-0abc", "route table rtb-1").
        `credentials` overrides the client's (an AssumeRole call signs with the source
        credentials); `unsigned` sends no signature (AssumeRoleWithWebIdentity).
        """
        codec = await self.codec(service)
        endpoint = self.endpoint(service)
        refreshed = False

        async def once() -> Parsed:
            nonlocal refreshed
            signing = None if unsigned else (credentials or await self._credentials(service))
            request = codec.request(
                action,
                params or {},
                endpoint_url=endpoint.url,
                region=endpoint.signing_region,
                signing_name=endpoint.signing_name,
                credentials=signing,
                headers=headers,
            )
            self._attempts.leaving(f"{service}:{action}")
            started = trio.current_time()
            try:
                response = await httpsend.send(
                    self.http,
                    self.http.build_request(
                        request.method,
                        request.url,
                        headers=dict(request.headers),
                        content=request.body,
                    ),
                )
                body = response.content
            except httpx.TransportError as exc:
                if _mutating(service, action) and not isinstance(exc, _NOT_SENT):
                    raise self._unknown(
                        service, action, target, f"{endpoint.url}: {explain(exc)}"
                    ) from exc
                error = AwsServerError(
                    f"{endpoint.url} did not answer: {explain(exc)}; check the network path "
                    "to AWS (VPC endpoints, proxy, security groups) or the endpoint override",
                    service=service,
                    action=action,
                    target=target,
                )
                raise Retry(error) from exc
            try:
                answer = await self._parse(codec, action, response, body, target)
            except AwsThrottledError:
                self._attempts.throttled()
                log.debug("aws.throttled", service=service, action=action, target=target)
                raise
            except AwsServerError as exc:
                if _mutating(service, action) and response.status_code >= 500:
                    raise self._unknown(service, action, target, str(exc)) from exc
                raise Retry(exc) from exc.__cause__
            except AwsError as exc:
                if (
                    exc.code in _EXPIRED
                    and not refreshed
                    and credentials is None
                    and not unsigned
                    and self.credentials is not None
                ):
                    refreshed = True
                    self.credentials.invalidate()
                    raise Resend(counted=True) from exc
                raise
            log.debug(
                "aws.called",
                service=service,
                action=action,
                target=target,
                status=response.status_code,
                took_s=trio.current_time() - started,
            )
            return answer

        return await self._attempts.run(once, service=service, action=action)

    def _unknown(self, service: str, action: str, target: str, why: str) -> AwsOutcomeUnknownError:
        return AwsOutcomeUnknownError(
            f"{why}; the request was sent and AWS may still apply it, so it is not retried "
            "here (the controller re-verifies)",
            service=service,
            action=action,
            target=target,
            late_landing_s=self.timeout_s + LATE_LANDING_MARGIN_S,
        )

    async def _credentials(self, service: str) -> AwsCredentials:
        if self.credentials is None:
            raise AwsCredentialsError(
                f"{service}: the client has no credentials; build it with the provider "
                "(from_config), which sets up the credential chain"
            )
        return await self.credentials.get()

    async def _parse(
        self, codec: Codec, action: str, response: httpx.Response, body: bytes, target: str
    ) -> Parsed:
        headers = dict(response.headers)
        if len(body) <= PARSE_INLINE_MAX_BYTES:
            return codec.parse(action, response.status_code, headers, body, target=target)

        def parse() -> Parsed:
            return codec.parse(action, response.status_code, headers, body, target=target)

        return await trio.to_thread.run_sync(
            parse, limiter=self._parse_limiter, abandon_on_cancel=True
        )

    async def paginate(
        self,
        service: str,
        action: str,
        params: Mapping[str, object] | None = None,
        *,
        target: str = "",
        token_key: str = "NextToken",  # noqa: S107 - a parameter name, no secret
        max_pages: int = 10_000,
    ) -> list[Parsed]:
        """Every page of a paginated action (following `token_key`), in order."""
        pages: list[Parsed] = []
        token: object = None
        while True:
            asked = dict(params or {})
            if token:
                asked[token_key] = token
            page = await self.call(service, action, asked, target=target)
            pages.append(page)
            token = page.get(token_key)
            if not token:
                return pages
            if len(pages) >= max_pages:
                raise AwsServerError(
                    f"more than {max_pages} pages: the service keeps answering with a "
                    f"{token_key}; stopped",
                    service=service,
                    action=action,
                    target=target,
                )


class AwsOutcomeUnknownError(AwsServerError, OutcomeUnknownError):
    """A mutating AWS call was sent and its outcome is unknown (see the module docstring)."""

    def __init__(
        self,
        message: str,
        *,
        service: str,
        action: str,
        target: str = "",
        late_landing_s: float | None = None,
    ) -> None:
        AwsServerError.__init__(self, message, service=service, action=action, target=target)
        self.late_landing_s = late_landing_s


def _mutating(service: str, action: str) -> bool:
    """Whether `action` may change something in the account (STS only hands out tokens)."""
    return service != "sts" and not action.startswith(_READ_PREFIXES)
