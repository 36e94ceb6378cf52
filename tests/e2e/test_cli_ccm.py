"""End to end, in real processes: `trio-ccm testbed` and `trio-ccm [flags]` over loopback.

The testbed process serves the emulator and the simulated cloud with 20 kubelets; a CCM
process initialises the Nodes and, on SIGTERM, drains, releases its Lease and exits 0.
Everything is bounded by real-time deadlines.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.helpers.processes import CLI, Lines, initialised, running
from trio_ccm.kube.client import open_kube_client
from trio_ccm.kube.config import load_config
from trio_ccm.kube.objects import LEASES, Node

NODE_COUNT = 20


def json_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


async def test_ccm_initialises_testbed_nodes_and_releases_the_lease_on_sigterm(
    tmp_path: Path,
) -> None:
    """A CCM process pointed at a testbed process initialises all 20 Nodes, then on SIGTERM
    exits 0 with the Lease released (empty holder); the testbed stops with exit 0 too."""
    kubeconfig, cloud_config = tmp_path / "kubeconfig", tmp_path / "cloud.yaml"
    testbed_argv = [
        *CLI,
        "testbed",
        f"--nodes={NODE_COUNT}",
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
        "--profiling",
    ]
    with trio.fail_after(30):
        async with running(testbed_argv, stderr=tmp_path / "testbed.err") as testbed:
            assert testbed.stdout is not None
            lines = Lines(testbed.stdout)
            with trio.fail_after(10):
                while "nodes registered" not in (line := await lines.next()):
                    pass
            assert line.startswith(f"{NODE_COUNT} nodes registered")
            printed = "\n".join(lines.seen)
            assert re.search(r"apiserver listening on http://127\.0\.0\.1:\d+", printed)
            assert re.search(r"sim cloud listening on http://127\.0\.0\.1:\d+", printed)
            assert f"kubeconfig written to {kubeconfig}" in printed
            assert f"cloud config for --cloud-provider=sim written to {cloud_config}" in printed
            ccm_err = tmp_path / "ccm.err"
            async with (
                open_kube_client(load_config(kubeconfig=str(kubeconfig), master=""), qps=0) as kube,
                running(ccm_argv, stderr=ccm_err, stdout=None) as ccm,
            ):
                done: list[Node] = []
                with trio.move_on_after(15):
                    while len(done) < NODE_COUNT:
                        await trio.sleep(0.2)
                        done = await initialised(kube)
                assert len(done) == NODE_COUNT, ccm_err.read_text()[-3000:]
                assert {n.metadata.labels["topology.kubernetes.io/zone"] for n in done} == {
                    "sim-region-1a",
                    "sim-region-1b",
                    "sim-region-1c",
                }
                lease = await kube.get(LEASES, "cloud-controller-manager", namespace="kube-system")
                assert lease["spec"]["holderIdentity"]
                ccm.send_signal(signal.SIGTERM)
                with trio.fail_after(15):
                    await ccm.wait()
                assert ccm.returncode == 0, ccm_err.read_text()[-3000:]
                lease = await kube.get(LEASES, "cloud-controller-manager", namespace="kube-system")
                assert lease["spec"].get("holderIdentity", "") == ""
            events = json_events(ccm_err)
            names = [e["event"] for e in events]
            assert names.count("ccm.flags") == 1
            assert [e["flag"] for e in events if e["event"] == "flag.ignored"] == ["--profiling"]
            assert "lease.released" in names
            assert events[-1]["event"] == "ccm.exit"
            assert events[-1]["exit_code"] == 0
            assert sum(e["event"] == "node.initialized" for e in events) == NODE_COUNT
            testbed.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                await testbed.wait()
            assert testbed.returncode == 0


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        pytest.param(["--kube-api-qps=abc"], "--kube-api-qps=abc: not a number", id="bad-value"),
        pytest.param(
            ["--cloud-provider=sim", "--node-monitor-period", "0s"],
            "--node-monitor-period=0s: must be more than 0s and at most 24h0m0s",
            id="zero-period",
        ),
    ],
)
async def test_bad_flags_exit_2_naming_the_flag(argv: list[str], fragment: str) -> None:
    """A rejected command line makes the process exit 2 with the flag named on stderr."""
    with trio.fail_after(20):
        result = await trio.run_process([*CLI, *argv], capture_stderr=True, check=False)
    assert result.returncode == 2
    err = result.stderr.decode()
    assert err.startswith("trio-ccm: ")
    assert fragment in err


async def test_demo_runs_to_completion_and_cleans_up(tmp_path: Path) -> None:
    """`trio-ccm demo --exit-when-done` initialises every Node, gives each LoadBalancer
    Service a loopback EXTERNAL-IP that pods answer through, prints the summary (and, with
    kubectl installed, the Node and Service tables), removes its kubeconfig and exits 0."""
    kubeconfig = tmp_path / "demo.kubeconfig"
    argv = [*CLI, "demo", "--nodes=10", f"--kubeconfig-out={kubeconfig}", "--exit-when-done"]
    with trio.fail_after(30):
        result = await trio.run_process(
            argv,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "COLUMNS": "200"},
        )
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert "all 10 Nodes initialised and routed, 3 load balancers ready in" in out
    assert re.search(r"^pod CIDRs\s+10 Nodes$", out, re.MULTILINE)
    assert re.search(r"^routes\s+10$", out, re.MULTILINE)
    assert re.search(r"^load balancers\s+3/3$", out, re.MULTILINE)
    assert re.search(r"^  default/demo-web-0\s+127\.\d+\.\d+\.\d+$", out, re.MULTILINE)
    for index in range(3):
        assert re.search(
            rf"^  default/demo-web-{index}\s+http://127\.[\d.]+:80/\s+4/4 answered: "
            rf"demo-web-{index}-\d on node-\d+ \(\d\)",
            out,
            re.MULTILINE,
        ), out
    assert re.search(r"^  PutLoadBalancer\s+3$", out, re.MULTILINE)
    assert re.search(r"^initialised\s+10\b", out, re.MULTILINE)
    assert re.search(r"^  ListInstances\s+\d+$", out, re.MULTILINE)
    assert re.search(r"^  Synced\s+10$", out, re.MULTILINE)
    if shutil.which("kubectl"):
        assert re.search(r"^node-0010\s+Ready\s", out, re.MULTILINE)
        assert re.search(
            r"^default\s+demo-web-2\s+LoadBalancer\s+\S+\s+127\.[\d.]+\s+80:",
            out,
            re.MULTILINE,
        )
    assert not kubeconfig.exists()
