"""The sweep for leaked load balancers (issue 17 item 5; kubernetes/kubernetes#53451): load
balancers whose Service was force-deleted while no CCM ran, recreated under the same name,
or retyped without its finalizer are reported, and deleted only with
--delete-leaked-load-balancers, once they have stayed leaked for the grace period."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio
import trio.testing
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from trio_ccm.cloud.sim import SimProvider
from trio_ccm.testing import (
    ApiServer,
    SimCloud,
    lb_name,
    make_service,
    register_node,
    run_ccm,
    virtual_now,
    wait_for,
)

SWEEP = ("--controllers=service-lb-controller", "--load-balancer-sweep-period=1m")
DELETE = ("--delete-leaked-load-balancers", "--leaked-load-balancer-grace=5m")


@asynccontextmanager
async def world() -> AsyncIterator[tuple[ApiServer, SimCloud, httpx.AsyncClient]]:
    api = ApiServer(seed=1, now=virtual_now())
    cloud = SimCloud(seed=1)
    register_node(api, "node-a", uninitialized=False)
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://emulator") as http:
        yield api, cloud, http


@asynccontextmanager
async def ccm(
    api: ApiServer, cloud: SimCloud, *flags: str, registry: CollectorRegistry | None = None
) -> AsyncIterator[None]:
    provider = SimProvider(url="http://sim", replica="ccm", transport=cloud.transport())
    async with run_ccm(api, provider, *SWEEP, *flags, registry=registry):
        yield
    await provider.aclose()


async def force(http: httpx.AsyncClient, name: str, *, delete: bool = True, **spec: Any) -> None:
    """What an impatient user does while no CCM runs: drop the finalizer (and delete)."""
    path = f"/api/v1/namespaces/default/services/{name}"
    body: dict[str, Any] = {"metadata": {"finalizers": None}}
    if spec:
        body["spec"] = spec
    patch = await http.patch(
        path, json=body, headers={"content-type": "application/merge-patch+json"}
    )
    patch.raise_for_status()
    if delete:
        (await http.delete(path)).raise_for_status()


async def provisioned(api: ApiServer, cloud: SimCloud, *names: str) -> list[dict[str, Any]]:
    """Services with their load balancers, made by a CCM that then stops."""
    services = [api.create(make_service(name)) for name in names]
    async with ccm(api, cloud):
        await wait_for(lambda: all(cloud.load_balancer(lb_name(s)) for s in services))
    return services


def leaked_gauge(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("service_controller_leaked_load_balancers")


async def test_a_force_deleted_services_load_balancer_is_found_and_deleted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Service force-deleted while no CCM ran leaves its load balancer: the next CCM
    reports it at once (warning, gauge 1); with --delete-leaked-load-balancers it is
    deleted at the first sweep past the 5 min grace (t=300)."""
    async with world() as (api, cloud, http):
        [web, keep] = await provisioned(api, cloud, "web", "keep")
        await force(http, "web")
        registry = CollectorRegistry()
        with capture_logs() as logs, trio.fail_after(4000):
            start = trio.current_time()
            async with ccm(api, cloud, *DELETE, registry=registry):
                await trio.sleep(1)
                assert leaked_gauge(registry) == 1.0
                await wait_for(lambda: cloud.load_balancer(lb_name(web)) is None, poll_s=1.0)
                gone_at = trio.current_time() - start
            assert cloud.load_balancer(lb_name(keep)) is not None
        reported = [e for e in logs if e["event"] == "service.load-balancer-leaked"]
        assert [(e["service"], e["reason"]) for e in reported] == [
            ("default/web", "its Service no longer exists")
        ]
        assert 300 <= gone_at <= 301
        assert leaked_gauge(registry) == 1.0  # as of the sweep that deleted it


async def test_without_the_flag_a_leak_is_only_reported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Report-only (the default): the leak is logged once and counted, and its load
    balancer is still there an hour later."""
    async with world() as (api, cloud, http):
        [web] = await provisioned(api, cloud, "web")
        await force(http, "web")
        registry = CollectorRegistry()
        with capture_logs() as logs, trio.fail_after(4000):
            async with ccm(api, cloud, registry=registry):
                await trio.sleep(3600)
                assert leaked_gauge(registry) == 1.0
        assert cloud.load_balancer(lb_name(web)) is not None
        assert sum(e["event"] == "service.load-balancer-leaked" for e in logs) == 1
        assert not any(e["event"] == "service.leaked-load-balancer-deleted" for e in logs)


async def test_a_service_recreated_while_no_ccm_ran_loses_only_its_old_load_balancer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Deleted (its finalizer forced off) and created again under the same name: the new
    Service gets its own load balancer; the old one, leaked, goes after the grace."""
    async with world() as (api, cloud, http):
        [old] = await provisioned(api, cloud, "web")
        await force(http, "web")
        new = api.create(make_service("web"))
        with capture_logs() as logs, trio.fail_after(4000):
            async with ccm(api, cloud, *DELETE):
                await wait_for(lambda: cloud.load_balancer(lb_name(old)) is None, poll_s=1.0)
                assert cloud.load_balancer(lb_name(new)) is not None
        reasons = [e["reason"] for e in logs if e["event"] == "service.load-balancer-leaked"]
        assert reasons == [f"its Service was recreated (its load balancer is now {lb_name(new)})"]


async def test_a_service_retyped_without_its_finalizer_is_a_leak(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Retyped to ClusterIP with the finalizer forced off while no CCM ran: its load
    balancer is a leak; a LoadBalancer Service beside it never is."""
    async with world() as (api, cloud, http):
        [retyped, kept] = await provisioned(api, cloud, "retyped", "kept")
        await force(http, "retyped", delete=False, type="ClusterIP")
        with capture_logs() as logs, trio.fail_after(4000):
            async with ccm(api, cloud, *DELETE):
                await wait_for(lambda: cloud.load_balancer(lb_name(retyped)) is None, poll_s=1.0)
                await trio.sleep(600)
        assert cloud.load_balancer(lb_name(kept)) is not None
        leaked = [e["service"] for e in logs if e["event"] == "service.load-balancer-leaked"]
        assert leaked == ["default/retyped"]
