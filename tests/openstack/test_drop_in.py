"""Drop-in: OCCM's DaemonSet container args (manifests/controller-manager/
openstack-cloud-controller-manager-ds.yaml), with an OCCM-format cloud.conf, start the real
`trio-ccm` process against the emulator (over HTTP) and the real OpenStack; it initialises
the kubelets' Nodes with openstack:/// provider IDs, then exits 0 on SIGTERM."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import trio

from tests.helpers.aws import UNINITIALIZED, open_cluster
from tests.helpers.openstack import boot, delete, manifest
from tests.helpers.processes import ccm_process, serve_kubeconfig

# OCCM's DaemonSet args, $(CLUSTER_NAME) and $(CLOUD_CONFIG) expanded below.
OCCM_ARGS = (
    "--v=1",
    "--cluster-name=kubernetes",
    "--cloud-config={cloud_config}",
    "--cloud-provider=openstack",
    "--use-service-account-credentials=false",
    "--bind-address=127.0.0.1",
)


async def test_occm_daemonset_args_initialise_nodes(openstack: Any, tmp_path: Path) -> None:
    """OCCM's args and cloud.conf (with [Networking], [Route], [Metadata] and an
    [LoadBalancer] section) run trio-ccm unchanged: the Nodes get openstack:/// provider
    IDs, and SIGTERM exits 0."""
    servers = await boot(openstack, "test-dropin-a", "test-dropin-b")
    conf = openstack.write_cloud_conf(
        tmp_path / "cloud.conf",
        extra={
            "Networking": {"ipv6-support-disabled": "false"},
            "Metadata": {"search-order": "configDrive,metadataService", "request-timeout": "60s"},
            "LoadBalancer": {"subnet-id": openstack.subnet_id},
        },
    )
    names = [s["name"] for s in servers]
    try:
        async with open_cluster(openstack) as cluster:
            for name in names:
                cluster.api.create(manifest(name))
            with trio.fail_after(120):
                async with trio.open_nursery() as nursery:
                    kubeconfig = await serve_kubeconfig(
                        nursery, cluster.api, tmp_path / "kubeconfig"
                    )
                    async with ccm_process(
                        *(a.format(cloud_config=conf) for a in OCCM_ARGS),
                        "--configure-cloud-routes=false",
                        f"--kubeconfig={kubeconfig}",
                        home=tmp_path,
                        stderr=tmp_path / "ccm.err",
                    ) as process:
                        await cluster.wait_for(
                            lambda: all(
                                UNINITIALIZED not in cluster.taints(n)
                                and cluster.node(n)["spec"]["providerID"]
                                == f"openstack:///{s['id']}"
                                for n, s in zip(names, servers, strict=True)
                            )
                        )
                        process.send_signal(signal.SIGTERM)
                        await process.wait()
                    nursery.cancel_scope.cancel()
        log = (tmp_path / "ccm.err").read_text()
        assert process.returncode == 0, log[-2000:]
    finally:
        await delete(openstack, servers)
