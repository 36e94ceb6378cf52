"""Two clusters with the same `--cluster-name` on one OpenStack project, each CCM with its own
API emulator (so its own kube-system Namespace UID, which the running CCM reads and hands to
the provider): a load balancer made before the identity was known is adopted and tagged
with it (the upgrade path), the other cluster's Service of the same name is refused with a
Warning Event and its deletion leaves the load balancer alone, and neither cluster's leak
sweep touches the other's load balancers. The `load-balancer-id` annotation is written back
on the way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.openstack.lbworld import (
    CUT_REPLICA_WARNINGS,
    LbCluster,
    kube_system_uid,
    open_lb_cluster,
    provider_for,
    running,
    sdk_call,
    settled_lb,
    until,
)
from trio_ccm.cloud.openstack.provider import OpenStackProvider

pytestmark = CUT_REPLICA_WARNINGS

LB_ID = "loadbalancer.openstack.org/load-balancer-id"
OWNER = "trio-ccm.owner="
LISTING = "load-balancer:GET:/v2/lbaas/loadbalancers"
SWEEPING = (
    "--load-balancer-sweep-period=1s",
    "--delete-leaked-load-balancers",
    "--leaked-load-balancer-grace=0s",
)


class WithoutIdentity:
    """The openstack provider's capabilities in a provider object that does not implement
    `use_cluster_identity` (as before that protocol, or a third-party provider): trio-ccm
    reads and hands it nothing, and its load balancers carry no owner."""

    def __init__(self, inner: OpenStackProvider) -> None:
        self.inner = inner
        self.name = inner.name
        self.instances = inner.instances
        self.load_balancers = inner.load_balancers
        self.routes = inner.routes

    async def initialize(self) -> None:
        await self.inner.initialize()


def annotation(c: LbCluster, name: str) -> str:
    svc = c.service(name) or {}
    return str(svc.get("metadata", {}).get("annotations", {}).get(LB_ID, ""))


def listings(provider: OpenStackProvider) -> int:
    return provider.client.statistics().calls.get(LISTING, 0)


async def test_two_clusters_with_one_name_keep_apart(openstack: Any, tmp_path: Path) -> None:
    """Cluster a's load balancer, made without an identity, is adopted (same id) and tagged
    with a's kube-system UID, its id written back to the Service; cluster b (same name, its
    own emulator) is refused that one with a Warning Event, gets its own for another Service
    tagged with b's UID, a's sweep leaves it alone, and deleting b's refused Service keeps
    a's load balancer."""
    async with (
        open_lb_cluster(openstack, tmp_path / "a", "lbid") as a,
        open_lb_cluster(openstack, tmp_path / "b", "lbid") as b,
    ):
        a.add_nodes(1)
        b.add_nodes(1, start=5)
        uid_a, uid_b = kube_system_uid(a), kube_system_uid(b)
        assert uid_a != uid_b
        with trio.fail_after(900):
            # before the identity: a provider that does not take it
            old = provider_for(a)
            async with running(a, provider=WithoutIdentity(old)):  # type: ignore[arg-type]
                a.create_service("web", node_ports=(30391,))
                await until(lambda: a.ingress("web"))
                before = await settled_lb(a, "web")
            await old.aclose()
            assert not [t for t in before["tags"] if t.startswith(OWNER)]

            pa = provider_for(a)
            async with running(a, *SWEEPING, provider=pa):

                async def adopted() -> bool:
                    lb = await sdk_call(lambda: a.read_lb("web"))
                    return bool(lb) and OWNER + uid_a in lb["tags"] and lb["status"] == "ACTIVE"

                await until(adopted)
                lb_a = await settled_lb(a, "web")
                assert lb_a["id"] == before["id"]  # adopted, not made again
                await until(lambda: annotation(a, "web") == lb_a["id"])

                async with running(b):
                    b.create_service("web", node_ports=(30391,))
                    b.create_service("solo", node_ports=(30392,))

                    async def refused() -> bool:
                        events = await b.events("SyncLoadBalancerFailed")
                        return any(
                            "belongs to another cluster" in e["message"] and e["type"] == "Warning"
                            for e in events
                        )

                    await until(refused)
                    await until(lambda: b.ingress("solo"))
                    solo = await settled_lb(b, "solo")
                    assert OWNER + uid_b in solo["tags"]
                    assert b.ingress("web") == []
                    assert annotation(b, "web") == ""
                    # a's sweep lists its load balancers twice more with b's in the project
                    seen = listings(pa)
                    await until(lambda: listings(pa) >= seen + 2)
                    assert (await settled_lb(b, "solo"))["id"] == solo["id"]
                    # b's refused Service goes: its finalizer is dropped, a's LB stays
                    await b.delete("web")
                    await until(lambda: b.gone("web"))
                    assert (await settled_lb(a, "web"))["id"] == lb_a["id"]
                    await b.delete("solo")
                    await until(lambda: b.gone("solo"))
                assert a.ingress("web")
                await a.delete("web")
                await until(lambda: a.gone("web"))
            await pa.aclose()
        assert await sdk_call(lambda: a.leftovers("web")) == []
        assert await sdk_call(lambda: b.leftovers("solo")) == []
