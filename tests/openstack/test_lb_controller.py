"""The real service controller with the openstack provider against real Octavia and Neutron:
a Service gets OCCM's load balancer (names, tags, one listener and pool per port, members
on the NodePorts, a floating IP as its EXTERNAL-IP), follows port and Node changes, and
leaves no load balancer, listener, pool, monitor or floating IP once deleted."""

from __future__ import annotations

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


async def test_a_service_gets_occms_load_balancer_and_leaves_nothing(
    openstack: Any, tmp_path: Path
) -> None:
    """A Service gets a fully populated load balancer named as OCCM names it, with members
    on its NodePort and a floating IP in its status; a Node added joins the pool; deleting
    the Service leaves nothing in Octavia or Neutron and drops the finalizer."""
    async with open_lb_cluster(openstack, tmp_path, "lbbasic") as c:
        nodes = c.add_nodes(2)
        with trio.fail_after(600):
            async with running(c):
                c.create_service("web", node_ports=(30080,))
                await until(lambda: c.ingress("web"))
                lb = await settled_lb(c, "web")
                name = c.lb_name("web")
                assert lb["description"] == (
                    f"Kubernetes external service default/web from cluster {c.cluster}"
                )
                assert name in lb["tags"]
                listener = lb["listeners"][("TCP", 80)]
                assert listener["name"] == f"listener_0_{name}"
                assert listener["allowed_cidrs"] == ["0.0.0.0/0"]
                assert listener["timeouts"] == (50000, 5000, 50000, 0)
                pool = listener["pool"]
                assert pool["name"] == f"pool_0_{name}"
                assert pool["protocol"] == "TCP"
                assert pool["lb_algorithm"] == "ROUND_ROBIN"
                assert pool["members"] == sorted((n, c.node_ips[n], 30080, None) for n in nodes)
                assert pool["monitor"] is None
                fips = await sdk_call(lambda: c.floating_ips("web"))
                assert [f["port_id"] for f in fips] == [lb["vip_port_id"]]
                assert c.ingress("web") == [{"ip": fips[0]["floating_ip_address"], "ipMode": "VIP"}]
                more = c.add_nodes(1, start=2)

                async def grown() -> bool:
                    tree = await sdk_call(lambda: c.read_lb("web"))
                    members = tree["listeners"][("TCP", 80)]["pool"]["members"] if tree else []
                    return [m[0] for m in members] == sorted(nodes + more)

                await until(grown)
                await c.delete("web")
                await until(lambda: c.service("web") is None)
                left = await sdk_call(lambda: c.leftovers("web"))
                assert left == []
