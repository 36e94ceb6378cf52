"""Drop-in: the cloud-provider-aws Helm chart's container args, with an upstream-format
cloud-config, start the real `trio-ccm` process against the emulator (over HTTP) and moto,
and it initialises the kubelets' Nodes, then exits 0 on SIGTERM."""

from __future__ import annotations

import signal
from pathlib import Path

import trio

from tests.helpers.aws import UNINITIALIZED, Cluster
from tests.helpers.processes import ccm_process, serve_kubeconfig

CHART_ARGS = Path(__file__).resolve().parents[1] / "deploy" / "fixtures" / "aws-chart-args.txt"


def chart_args() -> list[str]:
    lines = CHART_ARGS.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


async def test_the_aws_chart_args_initialise_nodes(cluster: Cluster, tmp_path: Path) -> None:
    """`--cloud-provider=aws --v=2` (the chart's args) plus `--configure-cloud-routes=false`,
    a cloud-config as cloud-provider-aws reads it and the SDK's environment variables: the
    Nodes are initialised with aws:/// provider IDs, and SIGTERM exits 0."""
    world = cluster.world
    instances = await world.add_instances(3)
    names = [cluster.register(i) for i in instances]
    (tmp_path / "cloud.conf").write_bytes(world.cloud_config())
    assert "--cloud-provider=aws" in chart_args()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            kubeconfig = await serve_kubeconfig(nursery, cluster.api, tmp_path / "kubeconfig")
            async with ccm_process(
                *chart_args(),
                "--configure-cloud-routes=false",
                f"--cloud-config={tmp_path / 'cloud.conf'}",
                f"--kubeconfig={kubeconfig}",
                home=tmp_path,
                stderr=tmp_path / "ccm.err",
                env=world.environ(),
            ) as process:
                await cluster.wait_for(
                    lambda: all(
                        UNINITIALIZED not in cluster.taints(n)
                        and cluster.node(n)["spec"].get("providerID", "").startswith("aws:///")
                        for n in names
                    )
                )
                process.send_signal(signal.SIGTERM)
                await process.wait()
            nursery.cancel_scope.cancel()
    log = (tmp_path / "ccm.err").read_text()
    assert process.returncode == 0, log[-2000:]
    assert '"event": "aws.initialized"' in log
