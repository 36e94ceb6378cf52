"""OpenStackProvider: the `openstack` cloud provider (instances, routes; load balancers
are added beside them by the load-balancer part)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

import httpx
import trio

from trio_ccm.cloud.openstack.client import OpenStackClient
from trio_ccm.cloud.openstack.config import CloudConfig
from trio_ccm.cloud.openstack.errors import (
    OpenStackServerError,
    OpenStackThrottledError,
)
from trio_ccm.cloud.openstack.instances import OpenStackInstances
from trio_ccm.cloud.openstack.lbconfig import LbOptions
from trio_ccm.cloud.openstack.loadbalancers import OpenStackLoadBalancers
from trio_ccm.cloud.openstack.routes import OpenStackRoutes
from trio_ccm.cloud.provider import Instances, LoadBalancers, Routes
from trio_ccm.logs import get_logger

__all__ = ["REGIONAL_ENV", "OpenStackProvider", "client_for"]

log = get_logger("trio_ccm.cloud.openstack")

REGIONAL_ENV: Final = "OS_CCM_REGIONAL"
"""OCCM's switch to regional provider IDs (`openstack://<region>/<id>`), read as "true"."""
_INIT_RETRY_BASE_S: Final = 1.0
_INIT_RETRY_CAP_S: Final = 30.0


def client_for(
    config: CloudConfig, *, transport: httpx.AsyncBaseTransport | None = None
) -> OpenStackClient:
    """The OpenStack client the cloud.conf describes."""
    return OpenStackClient(
        config.credentials(),
        region=config.region,
        interface=config.os_endpoint_type or "public",
        ca_file=config.ca_file,
        cert_file=config.cert_file,
        key_file=config.key_file,
        tls_insecure=config.tls_insecure,
        timeout_s=config.request_timeout_s,
        transport=transport,
    )


class OpenStackProvider:
    """The `openstack` provider: Nova instances (with bulk lookups) and Neutron routes.

    `environ` replaces the process environment (`OS_CCM_REGIONAL`); `transport` the
    network; `cluster_identity` tells this cluster's load balancers from another's with the
    same `--cluster-name` (the kube-system namespace UID; "" adopts by name, as OCCM); the
    running CCM sets it through `use_cluster_identity` (trio_ccm.cloud.ClusterIdentityAware).
    `initialize()` authenticates and reads Neutron's extensions (routes exist only with
    `[Route] router-id` and the extraroute extension, as in OCCM). Load balancers (Octavia)
    are there unless `[LoadBalancer] enabled = false`.
    """

    name = "openstack"

    def __init__(
        self,
        config: CloudConfig,
        *,
        environ: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        cluster_identity: str = "",
    ) -> None:
        env = os.environ if environ is None else environ
        self.config = config
        self.client = client_for(config, transport=transport)
        self.regional = env.get(REGIONAL_ENV) == "true"
        self._instances = OpenStackInstances(self.client, config, regional=self.regional)
        # Typed as the protocol declares them: its attributes are settable, hence invariant.
        self.instances: Instances | None = self._instances
        lb_options = LbOptions.from_config(config)  # a bad [LoadBalancer] key fails here
        self._lbs = (
            OpenStackLoadBalancers(self.client, lb_options, cluster_identity=cluster_identity)
            if lb_options.enabled
            else None
        )
        self.load_balancers: LoadBalancers | None = self._lbs
        # The controllers are chosen before initialize(): with a router-id the routes exist
        # from the start; initialize() reads which Neutron extensions they may use.
        self._routes: OpenStackRoutes | None = None
        if config.router_id:
            self._routes = OpenStackRoutes(
                self.client, config.router_id, self._instances, atomic=False, address_pairs=False
            )
        else:
            log.info("openstack.routes-off", reason="[Route] router-id is not set")
        self.routes: Routes | None = self._routes
        self.extensions: frozenset[str] = frozenset()
        for warning in config.warnings:
            log.warning("openstack.config", warning=warning)

    def use_cluster_identity(self, identity: str) -> None:
        """`ClusterIdentityAware`: the running CCM hands over the kube-system Namespace UID
        (before `initialize()`); the load balancers are tagged and found with it."""
        if self._lbs is not None:
            self._lbs.use_cluster_identity(identity)

    async def initialize(self) -> None:
        """Authenticate and read Neutron's extensions; the cloud failing or throttling is
        waited out (capped backoff, a warning per attempt), anything else is raised."""
        delay = _INIT_RETRY_BASE_S
        while True:
            try:
                await self.client.token()
                answer = await self.client.request("network", "GET", "/v2.0/extensions")
            except (OpenStackServerError, OpenStackThrottledError) as exc:
                log.warning("openstack.initialize-failed", error=str(exc), retry_in_s=delay)
                await trio.sleep(delay)
                delay = min(_INIT_RETRY_CAP_S, delay * 2)
                continue
            break
        self.extensions = _aliases(answer)
        self._set_routes()

    async def check(self) -> None:
        """The start-up probe every replica makes, leading or not (supervisor
        `probe_cloud`): a Keystone token (the credentials and the catalog; the cached one
        when it is still valid) and Nova's version document (`GET /` on the compute
        endpoint), both read-only. Raises what failed: `OpenStackAuthError` naming the
        config keys, `OpenStackServerError` naming the endpoint that did not answer."""
        await self.client.token()
        await self.client.request("compute", "GET", "/")

    def _set_routes(self) -> None:
        routes = self._routes
        if routes is None:
            return
        routes.atomic = "extraroute-atomic" in self.extensions
        routes.address_pairs = "allowed-address-pairs" in self.extensions
        routes.unavailable = (
            ""
            if routes.atomic or "extraroute" in self.extensions
            else "Neutron has neither the extraroute nor the extraroute-atomic extension, so "
            "the router cannot hold pod routes: enable one, or delete [Route] router-id and "
            "run with --configure-cloud-routes=false"
        )
        if routes.unavailable:
            log.error("openstack.routes-unavailable", router=routes.router_id)

    async def aclose(self) -> None:
        await self.client.aclose()

    def __repr__(self) -> str:
        return f"OpenStackProvider(region={self.config.region!r})"


def _aliases(answer: Any) -> frozenset[str]:
    items = answer.get("extensions") if isinstance(answer, Mapping) else None
    return frozenset(
        str(e.get("alias")) for e in items or () if isinstance(e, Mapping) and e.get("alias")
    )
