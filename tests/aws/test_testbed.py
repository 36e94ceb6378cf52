"""`trio-ccm testbed --cloud=aws` and `demo --cloud=aws` (issue 12 item 7): moto in-process
with EC2 instances in a cluster-tagged VPC, kubelets naming their Nodes by private DNS
name, and the aws provider initialising them; and `MotoFleet`, what those kubelets follow.

The processes run on real time over loopback, bounded by deadlines."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import trio

from tests.helpers.processes import CLI, Lines, initialised, running
from trio_ccm.kube.client import open_kube_client
from trio_ccm.kube.config import load_config
from trio_ccm_testbed.aws import MotoFleet, World

DNS_NAME = re.compile(r"^ip-10-0-\d+-\d+\.ec2\.internal$")


async def test_the_fleet_follows_instances_and_routes(world: World) -> None:
    """A snapshot names each instance by its private DNS name; a stop, a termination and a
    route to a terminated instance (a blackhole) show at the next refresh, and the
    harness's own reads are not counted as the CCM's calls."""
    first, second = await world.add_instances(2)
    fleet = MotoFleet(world)
    with trio.fail_after(20):
        await fleet.refresh()
        assert {(i.id, i.name, i.state) for i in fleet.instances()} == {
            (first.id, first.private_dns_name, "running"),
            (second.id, second.private_dns_name, "running"),
        }
        assert all(i.hostname == i.name for i in fleet.instances())
        await world.add_route("10.244.1.0/24", second.id)
        await world.stop(first.id)
        await world.terminate(second.id)
        await fleet.refresh()
    states = {i.id: i.state for i in fleet.instances()}
    assert states == {first.id: "stopped", second.id: "terminated"}
    (route,) = fleet.routes()
    assert (route.destination, route.target) == ("10.244.1.0/24", second.id)
    assert route.blackhole
    assert fleet.call_counts() == {}


async def test_demo_on_aws_initialises_and_routes_every_node(tmp_path: Path) -> None:
    """`trio-ccm demo --cloud=aws --exit-when-done` initialises and routes every Node (named
    by private DNS name, across three zones) through the aws provider against moto, gives
    its three LoadBalancer Services a Classic ELB each (their DNS names as hostnames), and
    exits 0."""
    kubeconfig = tmp_path / "demo.kubeconfig"
    argv = [
        *CLI,
        "demo",
        "--cloud=aws",
        "--nodes=6",
        f"--kubeconfig-out={kubeconfig}",
        "--exit-when-done",
    ]
    with trio.fail_after(90):
        result = await trio.run_process(
            argv,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "COLUMNS": "200"},
        )
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert re.search(r"^moto \(EC2\) http://127\.0\.0\.1:\d+$", out, re.MULTILINE)
    assert "all 6 Nodes initialised and routed, 3 load balancers ready in" in out
    elb = r"a[0-9a-f]{31}\.us-east-1\.elb\.amazonaws\.com"
    assert re.search(rf"^  default/demo-web-0\s+{elb}$", out, re.MULTILINE)
    assert re.search(r"^  elasticloadbalancing:CreateLoadBalancer\s+3$", out, re.MULTILINE)
    assert re.search(
        r"^initialised\s+6  \(us-east-1a 2, us-east-1b 2, us-east-1c 2\)$", out, re.MULTILINE
    )
    assert re.search(r"^routes\s+6$", out, re.MULTILINE)
    assert re.search(r"^  ec2:CreateRoute\s+6$", out, re.MULTILINE)
    # Lookups are batched for the Nodes; each load-balancer ensure resolves its backends in
    # one more call, so the count depends on how the two interleave (bench/aws.py counts the
    # Node wave's calls exactly).
    assert re.search(r"^  ec2:DescribeInstances\s+\d+$", out, re.MULTILINE)
    assert not kubeconfig.exists()


async def test_a_ccm_process_initialises_an_aws_testbed(tmp_path: Path) -> None:
    """A `trio-ccm --cloud-provider=aws` process given the testbed's cloud-config and the
    environment it prints initialises every Node of `trio-ccm testbed --cloud=aws`."""
    kubeconfig, cloud_config = tmp_path / "kubeconfig", tmp_path / "cloud.conf"
    testbed_argv = [
        *CLI,
        "testbed",
        "--cloud=aws",
        "--nodes=4",
        f"--kubeconfig-out={kubeconfig}",
        f"--cloud-config-out={cloud_config}",
    ]
    with trio.fail_after(90):
        async with running(testbed_argv, stderr=tmp_path / "testbed.err") as testbed:
            assert testbed.stdout is not None
            lines = Lines(testbed.stdout)
            while "nodes registered" not in (line := await lines.next()):
                pass
            assert line.startswith("4 nodes registered")
            printed = "\n".join(lines.seen)
            assert re.search(r"^moto \(EC2\) listening on http://127\.0\.0\.1:\d+$", printed, re.M)
            assert f"--cloud-provider=aws written to {cloud_config}" in printed
            exports = re.search(r"^the CCM's environment: export (.+)$", printed, re.M)
            assert exports is not None
            environ = dict(item.split("=", 1) for item in exports.group(1).split())
            assert environ["AWS_EC2_METADATA_DISABLED"] == "true"
            assert "[Global]" in cloud_config.read_text()
            ccm_argv = [
                *CLI,
                "--cloud-provider=aws",
                f"--cloud-config={cloud_config}",
                f"--kubeconfig={kubeconfig}",
                "--secure-port=0",
                "--leader-elect=false",
                "--configure-cloud-routes=false",
            ]
            ccm_err = tmp_path / "ccm.err"
            async with (
                open_kube_client(load_config(kubeconfig=str(kubeconfig), master=""), qps=0) as kube,
                running(
                    ccm_argv, stderr=ccm_err, stdout=None, env={**os.environ, **environ}
                ) as ccm,
            ):
                aws = {"provider_ids": "aws:///", "region": "us-east-1"}
                done = await initialised(kube, **aws)
                while len(done) < 4:
                    await trio.sleep(0.2)
                    done = await initialised(kube, **aws)
                assert all(DNS_NAME.match(n.metadata.name) for n in done)
                assert all(n.spec.provider_id.startswith("aws:///us-east-1") for n in done)
                ccm.send_signal(signal.SIGTERM)
                await ccm.wait()
                assert ccm.returncode == 0, ccm_err.read_text()[-3000:]
            testbed.send_signal(signal.SIGTERM)
            await testbed.wait()
            assert testbed.returncode == 0
