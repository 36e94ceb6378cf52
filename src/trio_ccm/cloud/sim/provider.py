"""SimProvider: the `sim` cloud provider, a client of trio_ccm_testbed.cloud over HTTP."""

from __future__ import annotations

from typing import Final

import httpx
import trio

from trio_ccm.cloud.provider import Instances, LoadBalancers, Routes
from trio_ccm.cloud.sim.client import SimClient
from trio_ccm.cloud.sim.errors import SimCloudError
from trio_ccm.cloud.sim.instances import SimInstances
from trio_ccm.cloud.sim.loadbalancers import SimLoadBalancers
from trio_ccm.cloud.sim.routes import SimRoutes
from trio_ccm.logs import get_logger

log = get_logger("trio_ccm.cloud.sim.provider")

_RETRY_BASE_S: Final = 1.0
_RETRY_CAP_S: Final = 30.0


class SimProvider:
    """The `sim` provider: instances (with bulk lookups), load balancers and routes.

    Every request carries `X-Sim-Replica: <replica>`, so the simulated cloud's call log
    tells which CCM replica made each call. `transport` replaces the network (tests pass
    `SimCloud.transport()`); the HTTP client is created on first use and closed by
    `aclose()`.
    """

    name = "sim"

    def __init__(
        self,
        *,
        url: str,
        replica: str,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.url = url
        self.replica = replica
        self._client = SimClient(url=url, replica=replica, transport=transport, timeout_s=timeout_s)
        # Typed as the protocol declares them: its attributes are settable, hence invariant.
        self.instances: Instances | None = SimInstances(self._client)
        self.load_balancers: LoadBalancers | None = SimLoadBalancers(self._client)
        self.routes: Routes | None = SimRoutes(self._client)
        self._answered = False  # the cloud has answered an `initialize` once

    async def initialize(self) -> None:
        """Check that the simulated cloud answers; SimCloudError saying where it was sought.

        Only the first check can fail: once the cloud has answered, a later term's check
        that gets no answer or a 5xx (a busy or restarting cloud) is waited out, with capped
        backoff and a warning per attempt, rather than stopping the process."""
        delay = _RETRY_BASE_S
        while True:
            try:
                await self.check()
            except SimCloudError as exc:
                if not self._answered or (exc.status is not None and exc.status < 500):
                    raise
                log.warning("sim.initialize-failed", error=str(exc), retry_in_s=delay)
                await trio.sleep(delay)
                delay = min(_RETRY_CAP_S, delay * 2)
                continue
            self._answered = True
            return

    async def check(self) -> None:
        """The cloud answers its health endpoint (a read: any replica may ask), or
        SimCloudError saying where it was sought and how to fix it."""
        try:
            await self._client.request("Health", "", "GET", "/v1/health")
        except SimCloudError as exc:
            raise SimCloudError(
                f"sim cloud at {self.url} is not usable: {exc}. Start it (e.g. with "
                "trio_ccm_testbed.cloud.serve_sim_cloud) and point the cloud config's "
                "`url` at it.",
                method=exc.method,
                target=exc.target,
                status=exc.status,
                code=exc.code,
            ) from exc

    async def aclose(self) -> None:
        """Close the HTTP client (a later call opens a new one)."""
        await self._client.aclose()

    def __repr__(self) -> str:
        return f"SimProvider(url={self.url!r}, replica={self.replica!r})"
