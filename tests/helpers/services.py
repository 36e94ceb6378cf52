"""Shared builders for service-lb-controller tests: the flags, the upstream figures, and what
"converged" means for a LoadBalancer Service.

A Service has converged when its load balancer exists on exactly the wanted Nodes, its
status carries that load balancer's ingress, and it holds the cleanup finalizer. The times
tests assert come from the records (the cloud's call log, the recording transport), never
from when a poll happened to look.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from tests.helpers.world import World
from trio_ccm.cloud import LoadBalancers
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.testing import lb_name, wait_for

FINALIZER: Final = "service.kubernetes.io/load-balancer-cleanup"
DESCRIPTION: Final = "sim.trio-ccm.dev/load-balancer-description"
SOURCE_RANGES: Final = "service.beta.kubernetes.io/load-balancer-source-ranges"
QPS, BURST = 5.0, 10
"""The load-balancer family's budget in the fault tests."""
SERVICE_LB: Final = ("--controllers=service", f"--cloud-api-rate=load_balancers={QPS}:{BURST}")
NODES: Final = ("node-a", "node-b", "node-c")
RETRY_BASE_S, RETRY_CAP_S, JITTER = 5.0, 300.0, 0.1
"""Upstream's per-Service retries, 5 s .. 300 s; our jitter only shortens one, by <= 10 %."""


def expected_delays(count: int) -> list[float]:
    """Upstream's per-Service backoff before retries 1 .. count."""
    return [min(RETRY_CAP_S, RETRY_BASE_S * 2**n) for n in range(count)]


def register_nodes(world: World, names: Sequence[str] = NODES) -> None:
    """Initialised Nodes (no uninitialized taint), Ready."""
    for name in names:
        world.register(name, taints=[])


def unconverged(world: World, names: Sequence[str], nodes: Sequence[str]) -> list[str]:
    """The Services without their load balancer on exactly `nodes`, the finalizer and the
    load balancer's ingress in their status."""
    left = []
    for name in names:
        svc = world.service(name)
        lb = world.cloud.load_balancer(lb_name(svc))
        ingress = svc.get("status", {}).get("loadBalancer", {}).get("ingress")
        if (
            lb is None
            or lb.nodes != tuple(sorted(nodes))
            or ingress != [{"ip": lb.ingress_ip}]
            or FINALIZER not in svc["metadata"].get("finalizers", [])
        ):
            left.append(name)
    return left


async def wait_converged(
    world: World, names: Sequence[str], nodes: Sequence[str], *, poll_s: float = 0.5
) -> None:
    """Wait (the caller bounds it) until every Service has converged. `poll_s` only decides
    how soon the wait notices: read the times from the records."""
    await wait_for(lambda: not unconverged(world, names, nodes), poll_s=poll_s)


class SimWithLoadBalancers:
    """A provider with the sim provider's instances and a test's own load balancers (as a
    third-party provider would be put together)."""

    def __init__(self, sim: SimProvider, lbs: LoadBalancers) -> None:
        self.name = sim.name
        self.instances = sim.instances
        self.load_balancers = lbs
        self.routes = None

    async def initialize(self) -> None:
        return None
