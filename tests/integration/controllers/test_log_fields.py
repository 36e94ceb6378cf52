"""Every controller's log lines name it: `controller` is bound for the controller's task and
everything it starts, route and lifecycle controllers included (docs/operations.md)."""

from __future__ import annotations

import structlog
import trio
import trio.testing

from tests.helpers.world import open_world
from trio_ccm.testing import make_service, wait_for

# Lines a replica logs outside any controller (start-up, caches, the Lease, Event writes).
# The start-up probe of the cloud runs on every replica, before any controller.
PROCESS_EVENTS = {
    "ccm.started",
    "ccm.stopped",
    "ccm.shutting-down",
    "cloud.reachable",
    "cloud.unreachable",
}
PROCESS_PREFIXES = ("informer.", "watch.", "lease.", "event.", "http.")


async def test_every_controller_line_carries_its_controller(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With all five controllers acting (a Node initialised, one deleted, a load balancer,
    pod CIDRs, routes), every line logged inside a controller names it, and each
    controller's own lines name that controller."""
    async with open_world() as world:
        world.cloud.add_instance("fresh")
        gone = world.cloud.add_instance("gone")
        world.register("fresh")
        world.register("gone", taints=[], ready="Unknown")
        world.cloud.terminate(gone.id)
        world.api.create(make_service("web"))
        with (
            structlog.testing.capture_logs(
                processors=[structlog.contextvars.merge_contextvars]
            ) as lines,
            trio.fail_after(60),
        ):
            async with world.running(
                "--controllers=*,nodeipam", "--allocate-node-cidrs", "--cluster-cidr=10.244.0.0/16"
            ):
                await wait_for(
                    lambda: (
                        {"route.created", "node.deleted", "node.initialized"}
                        <= {line["event"] for line in lines}
                        and bool(world.service("web")["status"].get("loadBalancer"))
                    )
                )
                await trio.sleep(1)
    owners = {
        "node.initialized": "cloud-node-controller",
        "node.deleted": "cloud-node-lifecycle-controller",
        "node.pod-cidrs-assigned": "node-ipam-controller",
        "route.created": "node-route-controller",
        "route.reconciled": "node-route-controller",
        "service.load-balancer-ensured": "service-lb-controller",
    }
    seen = {line["event"]: line.get("controller") for line in lines if line["event"] in owners}
    assert seen == owners
    unnamed = [
        line["event"]
        for line in lines
        if "controller" not in line
        and line["event"] not in PROCESS_EVENTS
        and not line["event"].startswith(PROCESS_PREFIXES)
    ]
    assert unnamed == []
