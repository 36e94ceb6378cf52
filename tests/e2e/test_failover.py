"""Failover in real processes: `kill -9` of the leading CCM in the middle of a Node wave.

A testbed process serves the emulator and the simulated cloud; two `trio-ccm` replicas
(each naming itself in the sim cloud's call log through its cloud-config) share the Lease.
The leader is killed with SIGKILL (no Lease release, no cleanup) while Nodes are still
being initialised; the standby must finish the wave, and the cloud's call log must show
that the two replicas never acted at the same time.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import httpx
import trio

from tests.helpers.processes import CLI, Lines, initialised, poll_until, running
from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.config import load_config
from trio_ccm.kube.errors import NotFoundError
from trio_ccm.kube.objects import LEASES
from trio_ccm_testbed.cloud import write_cloud_config

NODES = 120
LEASE_FLAGS = [
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
]


async def lease_holder(kube: KubeClient) -> bool:
    try:
        lease = await kube.get(LEASES, "cloud-controller-manager", namespace="kube-system")
    except NotFoundError:
        return False
    return bool(lease["spec"].get("holderIdentity"))


async def at_least(kube: KubeClient, count: int) -> bool:
    return len(await initialised(kube)) >= count


def ccm_argv(kubeconfig: Path, cloud_config: Path) -> list[str]:
    return [
        *CLI,
        "--cloud-provider=sim",
        f"--cloud-config={cloud_config}",
        f"--kubeconfig={kubeconfig}",
        "--secure-port=0",
        "--configure-cloud-routes=false",
        "--logging-format=json",
        *LEASE_FLAGS,
    ]


async def test_kill_9_of_the_leader_mid_wave(tmp_path: Path) -> None:
    """Every Node ends initialised after the leader is SIGKILLed mid-wave, and no call of
    the new leader precedes the old leader's last call (nor did the old one call after
    its death)."""
    kubeconfig, cloud_config = tmp_path / "kubeconfig", tmp_path / "cloud.yaml"
    testbed_argv = [
        *CLI,
        "testbed",
        f"--nodes={NODES}",
        f"--kubeconfig-out={kubeconfig}",
        f"--cloud-config-out={cloud_config}",
    ]
    with trio.fail_after(90):
        async with running(testbed_argv, stderr=tmp_path / "testbed.err") as testbed:
            assert testbed.stdout is not None
            lines = Lines(testbed.stdout)
            while "nodes registered" not in await lines.next():
                pass
            found = re.search(r"sim cloud listening on (\S+)", "\n".join(lines.seen))
            assert found is not None
            cloud_url = found.group(1)
            configs = {}
            for name in ("a", "b"):
                configs[name] = tmp_path / f"cloud-{name}.yaml"
                write_cloud_config(configs[name], url=cloud_url, replica=f"ccm-{name}")
            connection = load_config(kubeconfig=str(kubeconfig), master="")
            async with (
                open_kube_client(connection, qps=0) as kube,
                running(
                    ccm_argv(kubeconfig, configs["a"]), stderr=tmp_path / "a.err", stdout=None
                ) as a,
            ):
                # a leads (it is alone), then b starts as a warm standby.
                await poll_until(lambda: lease_holder(kube))
                async with running(
                    ccm_argv(kubeconfig, configs["b"]), stderr=tmp_path / "b.err", stdout=None
                ) as b:
                    await poll_until(lambda: at_least(kube, 10))
                    os.kill(a.pid, signal.SIGKILL)
                    killed_at = time.time()
                    await a.wait()
                    at_kill = len(await initialised(kube))
                    assert at_kill < NODES, "the wave ended before the kill: make it longer"
                    done = at_kill
                    with trio.move_on_after(60):
                        await poll_until(lambda: at_least(kube, NODES), 0.2)
                    done = len(await initialised(kube))
                    assert done == NODES, (tmp_path / "b.err").read_text()[-3000:]
                    b.send_signal(signal.SIGTERM)
                    await b.wait()
                    assert b.returncode == 0
            async with httpx.AsyncClient(base_url=cloud_url) as http:
                calls = (await http.get("/_sim/calls")).json()["calls"]
            testbed.send_signal(signal.SIGTERM)
            await testbed.wait()
    by = {name: [c["wall"] for c in calls if c["replica"] == f"ccm-{name}"] for name in "ab"}
    assert by["a"], "the killed leader made no cloud call"
    assert by["b"], "the standby never acted"
    assert max(by["a"]) <= killed_at
    # The Lease's safety, as the cloud saw it: b's first call comes after a's last one
    # (and after a's death: b could lead only once a's Lease had expired).
    assert min(by["b"]) > max(by["a"])
    assert min(by["b"]) > killed_at
