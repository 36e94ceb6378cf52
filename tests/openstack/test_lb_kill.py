"""`kill -9` of a real `trio-ccm --cloud-provider=openstack` process while a load balancer is
being made or deleted (the fault proxy holds the chosen call in flight): once a new
process runs and the Service is deleted, Octavia and Neutron hold nothing made for it."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.helpers.processes import ccm_process, serve_kubeconfig
from tests.openstack.lbworld import (
    CUT_REPLICA_WARNINGS,
    LbCluster,
    open_lb_cluster,
    sdk_call,
    until,
)

pytestmark = CUT_REPLICA_WARNINGS


def ccm_flags(c: LbCluster, kubeconfig: Path) -> list[str]:
    """The service controller alone, with the cluster's cloud.conf."""
    return [
        "--cloud-provider=openstack",
        f"--cloud-config={c.conf}",
        f"--kubeconfig={kubeconfig}",
        "--controllers=service-lb-controller",
        f"--cluster-name={c.cluster}",
        "--leader-elect=false",
    ]


@pytest.mark.parametrize(
    ("method", "path", "deleting"),
    [
        pytest.param("POST", r"/lbaas/pools$", False, id="mid-create"),
        pytest.param("DELETE", r"/v2\.0/floatingips/", True, id="mid-delete"),
    ],
)
async def test_kill_9_midway_then_a_new_process_leaves_nothing(
    openstack: Any, tmp_path: Path, method: str, path: str, deleting: bool
) -> None:
    """SIGKILL while `method path` is held in flight, the Service deleted, a new process
    started: the Service goes and nothing made for it is left."""
    service = "network" if "floatingips" in path else "load-balancer"
    cluster = "lbkill" + ("d" if deleting else "c")
    async with open_lb_cluster(openstack, tmp_path, cluster) as c:
        c.add_nodes(2)
        with trio.fail_after(900):
            async with trio.open_nursery() as nursery:
                kubeconfig = await serve_kubeconfig(nursery, c.api, tmp_path / "kubeconfig")
                flags = ccm_flags(c, kubeconfig)
                async with ccm_process(
                    *flags, home=tmp_path, stderr=tmp_path / "first.err"
                ) as first:
                    if not deleting:
                        openstack.faults.add(service, method=method, path=path, delay_s=30)
                    c.create_service("web", node_ports=(30580,))
                    if deleting:
                        await until(lambda: c.ingress("web"))
                        openstack.faults.add(service, method=method, path=path, delay_s=30)
                        await c.delete("web")
                    await until(lambda: openstack.faults.seen(service, method, path))
                    first.send_signal(signal.SIGKILL)
                    await first.wait()
                assert first.returncode == -signal.SIGKILL
                assert await sdk_call(lambda: c.leftovers("web")) != []
                if not deleting:
                    await c.delete("web")
                assert c.service("web") is not None  # the finalizer holds it
                async with ccm_process(*flags, home=tmp_path, stderr=tmp_path / "second.err"):

                    async def emptied() -> bool:
                        if c.service("web") is not None:
                            return False
                        return await sdk_call(lambda: c.leftovers("web")) == []

                    await until(emptied)
                nursery.cancel_scope.cancel()
