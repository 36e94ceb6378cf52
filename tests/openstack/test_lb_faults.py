"""Octavia's and Neutron's bad answers through the world's fault proxy, with the real
controller: a load balancer create whose answer is lost (applied, then 500) is found by name
and never made twice; 409 (immutable while pending) and 429 with Retry-After on the children
and the members are waited out inside the provider; a floating IP create answered 503 is
retried; the Service ends with one complete load balancer and one floating IP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.openstack.lbworld import CUT_REPLICA_WARNINGS, open_lb_cluster, running, sdk_call, until

pytestmark = CUT_REPLICA_WARNINGS


async def test_lost_and_refused_answers_end_in_one_load_balancer(
    openstack: Any, tmp_path: Path
) -> None:
    """A create applied but answered 500, listener/pool 409s, member 429s and a floating IP
    503 all end in exactly one load balancer with its listener, pool, members and one
    floating IP, and the create was sent once."""
    faults = openstack.faults
    faults.add(
        "load-balancer", method="POST", path=r"/lbaas/loadbalancers$", status=500, apply_after=True
    )
    faults.add("load-balancer", method="POST", path=r"/lbaas/listeners$", status=409, times=2)
    faults.add("load-balancer", method="POST", path=r"/lbaas/pools$", status=409, times=2)
    faults.add(
        "load-balancer", method="PUT", path=r"/members$", status=429, retry_after_s=1, times=2
    )
    faults.add("network", method="POST", path=r"/floatingips$", status=503)
    async with open_lb_cluster(openstack, tmp_path, "lbfault") as c:
        nodes = c.add_nodes(2)
        with trio.fail_after(600):
            async with running(c):
                c.create_service("web", node_ports=(30380,))
                await until(lambda: c.ingress("web"))
                lbs = await sdk_call(
                    lambda: [
                        lb
                        for lb in openstack.sdk(admin=True).load_balancer.load_balancers()
                        if lb.name == c.lb_name("web")
                    ]
                )
                assert len(lbs) == 1
                tree = await sdk_call(lambda: c.read_lb("web"))
                pool = tree["listeners"][("TCP", 80)]["pool"]
                assert [m[0] for m in pool["members"]] == sorted(nodes)
                assert len(await sdk_call(lambda: c.floating_ips("web"))) == 1
                creates = faults.seen("load-balancer", "POST", r"/lbaas/loadbalancers$")
                assert len(creates) == 1
                assert len(faults.seen("load-balancer", "POST", r"/lbaas/listeners$")) == 3
                await c.delete("web")
                await until(lambda: c.service("web") is None)
        assert await sdk_call(lambda: c.leftovers("web")) == []
