"""Load balancers over their life, through the real controller against real Octavia and
Neutron: sharing one by `load-balancer-id` (and the refusals past `max-shared-lb`),
`spec.loadBalancerIP` adopting a user's floating IP, `keep-floatingip`, a port change; a
restart verifying every load balancer with one status read and no write; a second cluster
with the same `--cluster-name` refused; the leak sweep deleting a load balancer and its
floating IP whose Service went while no replica ran."""

from __future__ import annotations

from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import trio

from tests.openstack.lbworld import (
    CUT_REPLICA_WARNINGS,
    lb_annotations,
    open_lb_cluster,
    provider_for,
    running,
    sdk_call,
    settled_lb,
    until,
)
from trio_ccm.cloud.openstack.provider import OpenStackProvider

pytestmark = CUT_REPLICA_WARNINGS


def octavia_calls(provider: OpenStackProvider) -> Counter[str]:
    calls = provider.client.statistics().calls
    return Counter({k: v for k, v in calls.items() if k.startswith("load-balancer:")})


async def test_shared_adopted_and_kept(openstack: Any, tmp_path: Path) -> None:
    """A second Service shares the first's load balancer (its listener and tag, removed with
    it), a third one past max-shared-lb is refused; loadBalancerIP adopts a user's floating
    IP and keep-floatingip keeps ours, both left detached; a port change replaces the
    listener; in the end nothing of ours is left."""
    conn = openstack.sdk()
    user_fip = await sdk_call(
        lambda: conn.network.create_ip(
            floating_network_id=openstack.external_network_id, description="made by a user"
        )
    )
    async with open_lb_cluster(openstack, tmp_path, "lblife", **{"max-shared-lb": "2"}) as c:
        c.add_nodes(2)
        with trio.fail_after(900):
            async with running(c):
                c.create_service("owner", node_ports=(30281,))
                c.create_service(
                    "adopt", node_ports=(30282,), loadBalancerIP=user_fip.floating_ip_address
                )
                c.create_service(
                    "keep", node_ports=(30283,), annotations=lb_annotations(keep_floatingip="true")
                )
                for name in ("owner", "adopt", "keep"):
                    await until(partial(c.ingress, name))
                owner = await sdk_call(lambda: c.read_lb("owner"))
                shared = lb_annotations(load_balancer_id=owner["id"])
                c.create_service(
                    "guest",
                    ports=[{"name": "g", "port": 8080, "protocol": "TCP", "nodePort": 30284}],
                    annotations=shared,
                )
                await until(lambda: c.ingress("guest"))
                assert c.ingress("guest") == c.ingress("owner")
                tree = await sdk_call(lambda: c.read_lb("owner"))
                assert sorted(tree["listeners"]) == [("TCP", 80), ("TCP", 8080)]
                assert c.lb_name("guest") in tree["tags"]
                assert tree["listeners"][("TCP", 8080)]["tags"] == [c.lb_name("guest")]
                c.create_service(
                    "third",
                    ports=[{"name": "t", "port": 9090, "protocol": "TCP", "nodePort": 30285}],
                    annotations=shared,
                )

                async def refused() -> bool:
                    events = await c.events("SyncLoadBalancerFailed")
                    return any(
                        e["involvedObject"]["name"] == "third" and "max-shared-lb" in e["message"]
                        for e in events
                    )

                await until(refused)
                assert c.ingress("adopt") == [{"ip": user_fip.floating_ip_address, "ipMode": "VIP"}]
                # a port change: the listener follows
                await c.patch(
                    "keep",
                    {
                        "spec": {
                            "ports": [
                                {"name": "p0", "port": 81, "protocol": "TCP", "nodePort": 30283}
                            ]
                        }
                    },
                )

                async def moved() -> bool:
                    t = await sdk_call(lambda: c.read_lb("keep"))
                    return t is not None and sorted(t["listeners"]) == [("TCP", 81)]

                await until(moved)
                kept = await sdk_call(lambda: c.floating_ips("keep"))
                for name in ("guest", "third"):
                    await c.delete(name)
                await until(lambda: c.service("guest") is None)
                tree = await sdk_call(lambda: c.read_lb("owner"))
                assert sorted(tree["listeners"]) == [("TCP", 80)]
                assert c.lb_name("guest") not in tree["tags"]
                for name in ("owner", "adopt", "keep"):
                    await c.delete(name)
                for name in ("owner", "adopt", "keep", "third"):
                    await until(partial(c.gone, name))
        for name in ("owner", "guest", "adopt"):
            assert await sdk_call(partial(c.leftovers, name)) == []
        # the kept and the adopted floating IPs survive, detached
        left = await sdk_call(lambda: conn.network.get_ip(kept[0]["id"]))
        assert left.port_id is None
        adopted = await sdk_call(lambda: conn.network.get_ip(user_fip.id))
        assert adopted.port_id is None
        for fip_id in (kept[0]["id"], user_fip.id):
            await sdk_call(partial(conn.network.delete_ip, fip_id))
        assert await sdk_call(lambda: c.leftovers("keep")) == []


async def test_restart_identity_and_sweep(openstack: Any, tmp_path: Path) -> None:
    """After a restart every load balancer is verified with one status read (one listing
    for all) and nothing written; a cluster with the same name but another identity is
    refused; a Service deleted while no replica ran is swept with its floating IP."""
    async with open_lb_cluster(openstack, tmp_path / "a", "lbown") as c:
        c.add_nodes(2)
        with trio.fail_after(900):
            async with running(c):
                for name in ("one", "two"):
                    c.create_service(name, node_ports=(30291 if name == "one" else 30292,))
                for name in ("one", "two"):
                    await until(partial(c.ingress, name))
                for name in ("one", "two"):  # nothing pending when the next replica starts
                    await settled_lb(c, name)
            fresh = provider_for(c)
            async with running(c, provider=fresh):

                async def verified() -> bool:
                    return (
                        octavia_calls(fresh)[
                            "load-balancer:GET:/v2/lbaas/loadbalancers/{id}/status"
                        ]
                        >= 2
                    )

                await until(verified)
                settled = Counter(octavia_calls(fresh))
                await trio.sleep(2)  # a quiet period: any late call would show here
                assert octavia_calls(fresh) == settled
                # one listing finds both load balancers; the other is the leak sweep's
                # inventory, which runs at the start of a term
                assert dict(settled) == {
                    "load-balancer:GET:/": 1,
                    "load-balancer:GET:/v2/lbaas/loadbalancers": 2,
                    "load-balancer:GET:/v2/lbaas/loadbalancers/{id}/status": 2,
                }
            await fresh.aclose()
            # another cluster, same --cluster-name, its own identity (the kube-system UID of
            # its own emulator, read by its CCM): refused, not adopted
            async with open_lb_cluster(openstack, tmp_path / "b", "lbown") as other:
                other.add_nodes(1, start=5)
                async with running(other):
                    other.create_service("one", node_ports=(30291,))

                    async def refused() -> bool:
                        events = await other.events("SyncLoadBalancerFailed")
                        return any("belongs to another cluster" in e["message"] for e in events)

                    await until(refused)
                    assert other.ingress("one") == []
            # "two" goes while no replica runs: its finalizer is dropped by hand
            await c.patch("two", {"metadata": {"finalizers": None}})
            await c.delete("two")
            await until(lambda: c.service("two") is None)
            assert await sdk_call(lambda: c.read_lb("two")) is not None
            sweeping = (
                "--load-balancer-sweep-period=1s",
                "--delete-leaked-load-balancers",
                "--leaked-load-balancer-grace=0s",
            )
            async with running(c, *sweeping):

                async def swept() -> bool:
                    return await sdk_call(lambda: c.leftovers("two")) == []

                await until(swept)
                await c.delete("one")
                await until(lambda: c.service("one") is None)
        assert await sdk_call(lambda: c.leftovers("one")) == []
