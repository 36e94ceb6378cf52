"""The sweep for leaked load balancers (service-lb-controller, when the provider offers a
`LoadBalancerInventory`).

Every `--load-balancer-sweep-period` the load balancers the provider made for this cluster
are compared with the Services: one whose Service is gone, was recreated (another name for
the same namespace/name), or no longer wants one and has no finalizer left is reported (a
warning and `service_controller_leaked_load_balancers`); with
`--delete-leaked-load-balancers` it is deleted once it has stayed leaked for
`--leaked-load-balancer-grace`. Never while the Service cache is not synced.
"""

from __future__ import annotations

from collections.abc import Callable

import prometheus_client
import trio

from trio_ccm.actors.passes import own_failure
from trio_ccm.actors.views import service_info
from trio_ccm.cloud.provider import LoadBalancerInventory, LoadBalancers, OwnedLoadBalancer
from trio_ccm.kube.informer import Informer
from trio_ccm.kube.objects import Service
from trio_ccm.logs import get_logger
from trio_ccm.settings import Settings

__all__ = ["LeakSweep"]

log = get_logger("trio_ccm.actors.service_lb")


class LeakSweep:
    """One term's sweep: what was seen leaked, and since when."""

    def __init__(
        self,
        *,
        services: Informer[Service],
        lbs: LoadBalancers,
        inventory: LoadBalancerInventory,
        settings: Settings,
        keeps: Callable[[Service], bool],
        leaked: prometheus_client.Gauge,
        deleted: prometheus_client.Counter,
    ) -> None:
        self.services = services
        self.lbs = lbs
        self.inventory = inventory
        self.settings = settings
        self.cluster = settings.cluster_name
        self.keeps = keeps  # whether a Service keeps its load balancer (wanted, or finalizer)
        self.leaked = leaked
        self.deleted = deleted
        self.since: dict[str, float] = {}  # load balancer name -> first seen leaked

    async def sweep(self) -> None:
        if not self.services.synced:
            log.info("service.sweep-skipped", reason="the Service cache is not synced")
            return
        owned = await self.inventory.list_load_balancers(self.cluster)
        now = trio.current_time()
        leaks = {lb.name: (lb, why) for lb in owned if (why := self.leaked_because(lb))}
        self.since = {name: self.since.get(name, now) for name in leaks}
        self.leaked.set(len(leaks))
        settings = self.settings
        for name, (lb, why) in sorted(leaks.items()):
            age = now - self.since[name]
            if age == 0:
                log.warning(
                    "service.load-balancer-leaked",
                    load_balancer=name,
                    service=lb.key,
                    reason=why,
                    fix="deleted after --leaked-load-balancer-grace"
                    if settings.delete_leaked_load_balancers
                    else "delete it, or run with --delete-leaked-load-balancers",
                )
            if (
                settings.delete_leaked_load_balancers
                and age >= settings.leaked_load_balancer_grace_s
            ):
                await self.delete(lb, why)

    def leaked_because(self, lb: OwnedLoadBalancer) -> str:
        """Why `lb` serves no Service any more ("" when it does, or may soon)."""
        service = self.services.get(lb.key)
        if service is None:
            return "its Service no longer exists"
        if lb.uid and lb.uid != service.metadata.uid:
            return f"its Service was recreated (uid {service.metadata.uid}, not {lb.uid})"
        name = self.lbs.load_balancer_name(self.cluster, service_info(service))
        if name != lb.name:
            return f"its Service was recreated (its load balancer is now {name})"
        if not self.keeps(service):
            return "its Service no longer wants a load balancer and has no finalizer"
        held = {i.hostname or i.ip for i in service.status.load_balancer.ingress}
        if lb.address and held and lb.address not in held:
            return f"its Service now points at {', '.join(sorted(held))}, not at it ({lb.address})"
        return ""

    async def delete(self, lb: OwnedLoadBalancer, why: str) -> None:
        # One leak's failure is its own: the next sweep tries again.
        with own_failure(
            "service.leak-delete-failed", load_balancer=lb.name, service=lb.key
        ) as failure:
            await self.inventory.delete_leaked_load_balancer(self.cluster, lb)
        if failure.error is not None:
            return
        self.since.pop(lb.name, None)
        self.deleted.inc()
        log.info(
            "service.leaked-load-balancer-deleted",
            load_balancer=lb.name,
            service=lb.key,
            reason=why,
        )
