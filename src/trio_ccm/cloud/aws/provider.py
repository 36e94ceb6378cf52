"""AwsProvider: the `aws` cloud provider (instances, load balancers, routes)."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Mapping
from typing import Final

import httpx
import trio

from trio_ccm.cloud.aws.config import CloudConfig
from trio_ccm.cloud.aws.context import AwsContext
from trio_ccm.cloud.aws.credentials import utc_now
from trio_ccm.cloud.aws.errors import AwsServerError, AwsThrottledError
from trio_ccm.cloud.aws.instances import AwsInstances
from trio_ccm.cloud.aws.loadbalancers import AwsLoadBalancers
from trio_ccm.cloud.aws.routes import AwsRoutes
from trio_ccm.cloud.provider import Instances, LoadBalancers, Routes
from trio_ccm.logs import get_logger

__all__ = ["AwsProvider"]

log = get_logger("trio_ccm.cloud.aws")

_INIT_RETRY_BASE_S: Final = 1.0
_INIT_RETRY_CAP_S: Final = 30.0


class AwsProvider:
    """The `aws` provider: EC2 instances (with bulk lookups), Service load balancers (Classic
    ELB and NLB, with the leak sweep's inventory) and VPC routes.

    `environ` replaces the process environment (credentials, region, metadata endpoint);
    `transport` the network (tests); `now` the wall clock credential expiry is read with.
    Nothing is called before `check()` (the start-up probe), `initialize()` or the first
    provider call settles the region; `aclose()` closes the HTTP client.
    """

    name = "aws"

    def __init__(
        self,
        config: CloudConfig | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        now: Callable[[], dt.datetime] = utc_now,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config or CloudConfig()
        self.context = AwsContext(
            self.config, environ=environ, transport=transport, now=now, rng=rng
        )
        # Typed as the protocol declares them: its attributes are settable, hence invariant.
        self.instances: Instances | None = AwsInstances(self.context)
        self.load_balancers: LoadBalancers | None = AwsLoadBalancers(self.context)
        self.routes: Routes | None = AwsRoutes(self.context)

    async def initialize(self) -> None:
        """Settle the region, the cluster ID and the zones (once; see `context.py`).

        AWS failing or throttling (AwsServerError, AwsThrottledError) is waited out, with
        capped backoff and a warning per attempt: the controllers start once AWS answers.
        Anything else (a bad config, refused credentials, no region) is raised: the process
        exits naming the fix.
        """
        delay = _INIT_RETRY_BASE_S
        while True:
            try:
                await self.context.ready()
            except (AwsServerError, AwsThrottledError) as exc:
                log.warning("aws.initialize-failed", error=str(exc), retry_in_s=delay)
                await trio.sleep(delay)
                delay = min(_INIT_RETRY_CAP_S, delay * 2)
                continue
            return

    async def check(self) -> None:
        """The start-up probe every replica makes, leading or not: one read-only call,
        DescribeAvailabilityZones in the configured region (the call `initialize()` needs
        anyway; its answer is kept). Raises what failed: an unreachable endpoint
        (AwsServerError naming the URL), refused credentials (AwsError naming the fix), no
        region (ConfigError)."""
        await self.context.probe()

    async def aclose(self) -> None:
        await self.context.aclose()

    def __repr__(self) -> str:
        region = self.context.region or self.config.configured_region or "?"
        return f"AwsProvider(region={region!r})"
