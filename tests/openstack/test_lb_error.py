"""A load balancer in ERROR is deleted and made again, with a Warning Event, through the real
controller against real Octavia and Neutron.

Octavia with the noop drivers never puts a load balancer in ERROR by itself, so the test
world's fault proxy answers one `GET /v2/lbaas/loadbalancers/<id>` with Octavia's own answer
for that load balancer, `provisioning_status` changed to ERROR (a body rule: the request
reaches Octavia, its answer is rewritten). Everything else is real: the delete (cascade, with
our floating IP) and the new load balancer, its floating IP and its id written back to the
Service's `load-balancer-id` annotation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.openstack.lbworld import open_lb_cluster, running, sdk_call, settled_lb, until

# A replica cancelled at the end of its block with a request to OpenStack in flight leaves
# httpcore's socket to the garbage collector (ResourceWarning), not a fault of the test.
pytestmark = pytest.mark.filterwarnings(
    "ignore:unclosed <socket:ResourceWarning",
    "ignore::pytest.PytestUnraisableExceptionWarning",
)

LB_ID = "loadbalancer.openstack.org/load-balancer-id"


async def test_a_load_balancer_in_error_is_replaced(openstack: Any, tmp_path: Path) -> None:
    """Seen in ERROR on the next ensure, the load balancer is deleted with its floating IP and
    a Warning Event names it; the next try makes a new one, whose floating IP becomes the
    Service's ingress and whose id is written back; deleting the Service leaves nothing."""
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
                answer = await sdk_call(
                    lambda: conn.load_balancer.get(f"/lbaas/loadbalancers/{old['id']}").json()
                )
                answer["loadbalancer"]["provisioning_status"] = "ERROR"
                path = rf"/lbaas/loadbalancers/{old['id']}$"
                rule = openstack.faults.add(
                    "load-balancer", method="GET", path=path, body=json.dumps(answer).encode()
                )
                # a change of the Service: the controller ensures its load balancer again,
                # reads it first, and meets the rewritten answer (no read of ours meanwhile)
                await c.patch("web", {"metadata": {"annotations": {"example.com/touch": "1"}}})
                await until(lambda: rule.hits == 1)

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
                assert any(
                    "was in ERROR" in e["message"]
                    and old["id"] in e["message"]
                    and e["type"] == "Warning"
                    for e in events
                )
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
