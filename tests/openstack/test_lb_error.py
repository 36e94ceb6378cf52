"""A load balancer in ERROR is deleted and made again after the Service's replacement
backoff, with a Warning Event naming it and the wait, through the real controller against
real Octavia and Neutron.

Octavia with the noop drivers never puts a load balancer in ERROR by itself, so the test
sets Octavia's own record to ERROR in its database (`put_load_balancer_in_error`), as its
worker does when a flow fails. Everything else is real: the delete (cascade, with our
floating IP) and the new load balancer, its floating IP and its id written back to the
Service's `load-balancer-id` annotation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import trio

from tests.openstack.lbworld import (
    CUT_REPLICA_WARNINGS,
    open_lb_cluster,
    running,
    sdk_call,
    settled_lb,
    until,
)

pytestmark = CUT_REPLICA_WARNINGS

LB_ID = "loadbalancer.openstack.org/load-balancer-id"


async def test_a_load_balancer_in_error_is_replaced(openstack: Any, tmp_path: Path) -> None:
    """Seen in ERROR on the next ensure, the load balancer is deleted with its floating IP and
    a Warning Event names it and the wait before its successor (the first replacement's
    backoff, 5-10 s); then a new one is made (two creates in all), whose floating IP becomes
    the Service's ingress and whose id is written back; deleting the Service leaves
    nothing."""
    conn = openstack.sdk(admin=True)
    async with open_lb_cluster(openstack, tmp_path, "lberr") as c:
        c.add_nodes(2)
        with trio.fail_after(900):
            async with running(c):
                c.create_service("web", node_ports=(30393,))
                await until(lambda: c.ingress("web"))
                old = await settled_lb(c, "web")

                def annotation() -> str:
                    svc = c.service("web") or {}
                    return str(svc["metadata"].get("annotations", {}).get(LB_ID, ""))

                await until(lambda: annotation() == old["id"])
                openstack.put_load_balancer_in_error(old["id"])
                # a change of the Service: the controller ensures its load balancer again,
                # reads it first, and finds it in ERROR
                await c.patch("web", {"metadata": {"annotations": {"example.com/touch": "1"}}})

                async def replaced() -> bool:
                    lb = await sdk_call(lambda: c.read_lb("web"))
                    return (
                        lb is not None
                        and lb["id"] != old["id"]
                        and lb["status"] == "ACTIVE"
                        and annotation() == lb["id"]
                        and bool(c.ingress("web"))
                    )

                await until(replaced)
                new = await settled_lb(c, "web")
                events = await c.events("SyncLoadBalancerFailed")
                said = [
                    e["message"]
                    for e in events
                    if f"({old['id']}) was in ERROR" in e["message"] and e["type"] == "Warning"
                ]
                assert len(said) == 1, said
                wait = re.search(r"a new one is made in ([\d.]+) s \(replacement 1 ", said[0])
                assert wait is not None, said[0]
                assert 5 <= float(wait.group(1)) <= 10
                creates = openstack.faults.seen("load-balancer", "POST", r"/loadbalancers$")
                assert len(creates) == 2
                gone = await sdk_call(
                    lambda: conn.load_balancer.find_load_balancer(old["id"], ignore_missing=True)
                )
                assert gone is None or gone.provisioning_status in ("PENDING_DELETE", "DELETED")
                fips = await sdk_call(lambda: c.floating_ips("web"))
                assert [f["floating_ip_address"] for f in fips] == [c.ingress("web")[0]["ip"]]
                assert fips[0]["port_id"] == new["vip_port_id"]
                await c.delete("web")
                await until(lambda: c.gone("web"))
        assert await sdk_call(lambda: c.leftovers("web")) == []
