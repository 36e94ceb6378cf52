"""Signals, in real processes: a first SIGTERM drains (the Lease renewed meanwhile); a
second stops at once and the process exits, whatever is still in flight (issue 17 item 1:
it took 7.7-8.4 s and kept writing to the cloud)."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import trio

from tests.helpers.processes import CLI, Lines, initialised, poll_until, running
from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.config import load_config
from trio_ccm.kube.objects import SERVICES, Service
from trio_ccm.testing.factories import make_service


async def test_a_second_sigterm_exits_at_once(tmp_path: Path) -> None:
    """With load-balancer calls taking 30 s, a first SIGTERM leaves the CCM draining them; a
    second one makes it exit (code 1, "stopping at once") with the calls still in
    flight, long before they could have finished."""
    kubeconfig, cloud_config = tmp_path / "kubeconfig", tmp_path / "cloud.yaml"
    ccm_log = tmp_path / "ccm.err"
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
                running(ccm_argv, stderr=ccm_log, stdout=None) as ccm,
            ):
                await poll_until(lambda: _all_initialised(kube))
                slow = {"method": "loadbalancers", "fixedSeconds": 30}
                (await cloud.post("/_sim/faults/latency", json=slow)).raise_for_status()
                for i in range(3):
                    await kube.create(SERVICES, make_service(f"web-{i}"), namespace="default")
                # The finalizer is added right before the (30 s) PutLoadBalancer goes out.
                await poll_until(lambda: _finalized(kube, 3))
                ccm.send_signal(signal.SIGTERM)
                await poll_until(lambda: _logged(ccm_log, "ccm.shutting-down"))
                assert ccm.returncode is None  # draining: the calls take 30 s
                ccm.send_signal(signal.SIGTERM)
                # Well inside the 30 s the calls in flight take: the drain is not awaited.
                with trio.fail_after(10):
                    await ccm.wait()
            testbed.send_signal(signal.SIGTERM)
            await testbed.wait()
    assert ccm.returncode == 1
    assert await _logged(ccm_log, "stopping at once")


async def _logged(path: Path, text: str) -> bool:
    """Whether the process's log (a file it writes) holds `text` yet."""
    log = trio.Path(path)
    return await log.exists() and text in await log.read_text(errors="replace")


async def _all_initialised(kube: object) -> bool:
    return len(await initialised(kube)) == 3  # type: ignore[arg-type]


async def _finalized(kube: KubeClient, count: int) -> bool:
    services = (await kube.list(SERVICES, type=Service, namespace="default")).items
    return sum(bool(s.metadata.finalizers) for s in services) >= count
