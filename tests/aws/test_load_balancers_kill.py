"""`kill -9` of a real `trio-ccm --cloud-provider=aws` process in the middle of making or
deleting a load balancer (issue 13 item 7): once a new process runs, the Service deleted,
no load balancer, target group or security group is left in moto.

moto runs in this process (its fault middleware stalls the chosen call, so the kill lands
while that call is in flight); the emulator is served to the CCM over loopback HTTP."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio

from tests.helpers.aws import Cluster, until
from tests.helpers.processes import ccm_process, serve_kubeconfig
from trio_ccm.cloud.aws.annotations import TYPE
from trio_ccm.testing import make_service
from trio_ccm_testbed.apiserver import ApiError
from trio_ccm_testbed.aws import balancing


def ccm_flags(cluster: Cluster, tmp_path: Path, kubeconfig: Path) -> list[str]:
    """The service controller alone, with the world's cloud-config."""
    config = tmp_path / "cloud.conf"
    config.write_bytes(cluster.world.cloud_config())
    return [
        "--cloud-provider=aws",
        f"--cloud-config={config}",
        f"--kubeconfig={kubeconfig}",
        "--controllers=service-lb-controller",
        "--leader-elect=false",
    ]


@pytest.mark.parametrize(
    ("kind", "stall"),
    [
        pytest.param("nlb", "CreateListener", id="nlb-mid-create"),
        pytest.param("clb", "DeleteSecurityGroup", id="clb-mid-delete"),
    ],
)
async def test_kill_9_midway_then_a_new_process_leaves_nothing_behind(
    cluster: Cluster, tmp_path: Path, kind: str, stall: str
) -> None:
    """SIGKILL while `stall` is in flight, then the Service deleted (if it was not already)
    and a new process started: the Service goes (its finalizer removed) and moto holds no
    load balancer, target group or security group made for it."""
    world = cluster.world
    for instance in await world.add_instances(2):
        manifest = world.node_manifest(instance, provider_id=True)
        manifest["spec"]["taints"] = []
        cluster.api.create(manifest)
    annotations = {TYPE: "nlb"} if kind == "nlb" else {}
    deleting = stall.startswith("Delete")
    faults = world.server.faults

    def gone() -> bool:
        try:
            cluster.api.get("v1", "Service", "web", "default")
        except ApiError as exc:
            if exc.code == 404:
                return True
            raise
        return False

    def has_hostname() -> bool:
        svc = cluster.api.get("v1", "Service", "web", "default")
        return bool(svc.get("status", {}).get("loadBalancer", {}).get("ingress"))

    async def delete() -> None:
        response = await cluster.http.delete("/api/v1/namespaces/default/services/web")
        response.raise_for_status()

    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            kubeconfig = await serve_kubeconfig(nursery, cluster.api, tmp_path / "kubeconfig")
            flags = ccm_flags(cluster, tmp_path, kubeconfig)
            env = world.environ()
            cluster.api.create(
                make_service(
                    "web",
                    annotations=annotations,
                    ports=[{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}],
                )
            )
            async with ccm_process(
                *flags, home=tmp_path, stderr=tmp_path / "first.err", env=env
            ) as first:
                if deleting:
                    await until(has_hostname)
                    faults.latency(5.0, stall, times=1)
                    await delete()
                else:
                    faults.latency(5.0, stall, times=1)
                await until(lambda: faults.calls(stall) >= 1)
                first.send_signal(signal.SIGKILL)
                await first.wait()
            assert first.returncode == -signal.SIGKILL
            made = await balancing(world)
            assert not made.empty  # the kill left something behind for the next process
            if not deleting:
                await delete()
            assert not gone()  # the finalizer holds it
            async with ccm_process(*flags, home=tmp_path, stderr=tmp_path / "second.err", env=env):

                async def emptied() -> bool:
                    return gone() and (await balancing(world)).empty

                await until(emptied)
            nursery.cancel_scope.cancel()
