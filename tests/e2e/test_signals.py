"""Signals, in real processes: a first SIGTERM drains (the Lease renewed meanwhile); a
second stops at once and the process exits within a second, whatever is still in flight
(issue 17 item 1: it took 7.7-8.4 s and kept writing to the cloud)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import trio

from tests.helpers.processes import CLI, Lines, initialised, poll_until, running
from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.config import load_config
from trio_ccm.kube.objects import SERVICES, Service
from trio_ccm.testing.factories import make_service


async def test_a_second_sigterm_exits_within_a_second(tmp_path: Path) -> None:
    """With load-balancer calls taking 30 s, a first SIGTERM leaves the CCM draining; a
    second one makes it exit (code 1) less than a second later."""
    kubeconfig, cloud_config = tmp_path / "kubeconfig", tmp_path / "cloud.yaml"
    testbed_argv = [
        *CLI,
        "testbed",
        "--nodes=3",
        f"--kubeconfig-out={kubeconfig}",
        f"--cloud-config-out={cloud_config}",
    ]
    ccm_argv = [
        *CLI,
        "--cloud-provider=sim",
        f"--cloud-config={cloud_config}",
        f"--kubeconfig={kubeconfig}",
        "--secure-port=0",
        "--configure-cloud-routes=false",
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=1s",
        "--logging-format=json",
    ]
    with trio.fail_after(60):
        async with running(testbed_argv, stderr=tmp_path / "testbed.err") as testbed:
            assert testbed.stdout is not None
            lines = Lines(testbed.stdout)
            while "nodes registered" not in await lines.next():
                pass
            cloud_url = next(
                line.rsplit(" ", 1)[1] for line in lines.seen if "sim cloud listening" in line
            )
            async with (
                httpx.AsyncClient(base_url=cloud_url) as cloud,
                open_kube_client(load_config(kubeconfig=str(kubeconfig), master=""), qps=0) as kube,
                running(ccm_argv, stderr=tmp_path / "ccm.err", stdout=None) as ccm,
            ):
                await poll_until(lambda: _all_initialised(kube))
                slow = {"method": "loadbalancers", "fixedSeconds": 30}
                (await cloud.post("/_sim/faults/latency", json=slow)).raise_for_status()
                for i in range(3):
                    await kube.create(SERVICES, make_service(f"web-{i}"), namespace="default")
                # The finalizer is added right before the (30 s) PutLoadBalancer goes out.
                await poll_until(lambda: _finalized(kube, 3))
                ccm.send_signal(signal.SIGTERM)
                await trio.sleep(1.0)
                assert ccm.returncode is None  # draining: the calls take 30 s
                forced = time.monotonic()
                ccm.send_signal(signal.SIGTERM)
                with trio.fail_after(5):
                    await ccm.wait()
                took = time.monotonic() - forced
            testbed.send_signal(signal.SIGTERM)
            await testbed.wait()
    assert ccm.returncode == 1
    assert took < 1.0, f"the second SIGTERM took {took:.2f} s"


async def _all_initialised(kube: object) -> bool:
    return len(await initialised(kube)) == 3  # type: ignore[arg-type]


async def _finalized(kube: KubeClient, count: int) -> bool:
    services = (await kube.list(SERVICES, type=Service, namespace="default")).items
    return sum(bool(s.metadata.finalizers) for s in services) >= count
