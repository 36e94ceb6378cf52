"""Crash safety of the service-lb-controller, in real processes: `kill -9` mid-operation.

A testbed process serves the emulator and the simulated cloud (whose load-balancer calls
are slowed down, so that a kill lands while some are in flight). 50 Services of type
LoadBalancer are created, then some are changed (ports and an annotation, or the type
back to ClusterIP), then some are deleted; during each phase the CCM is killed with
SIGKILL twice, at seeded-random points of its progress (after the N-th load-balancer
write the cloud answered), and started again. After the last start converges, the cloud
must hold exactly one load balancer per Service that wants one, with that Service's
current ports, and nothing else; no Service may be left with a stranded finalizer.

Leader election is off: the test is about what a SIGKILL leaves behind in the cloud and
the API, not about the Lease (tests/e2e/test_failover.py covers that). A restarted
replica with a new identity would have to wait for the dead one's Lease to expire (4 s
per restart with the short flags); with one replica that is provably dead (we wait for
its exit status) before the next starts, nothing can act twice. Each generation names
itself in the cloud's call log (`ccm-<n>`), so the log tells what each one did.
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.helpers.processes import CLI, Lines, poll_until, running
from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.config import load_config
from trio_ccm.kube.errors import NotFoundError
from trio_ccm.kube.objects import NODES, SERVICES, Node, Service
from trio_ccm.kube.patches import MERGE, Patch
from trio_ccm.testing.factories import make_service
from trio_ccm_testbed.cloud import write_cloud_config

SEED = 20261121
SERVICE_COUNT = 50
KILLS_PER_PHASE = 2
CONVERGE_S = 45.0  # a passing run converges within 3 s; the rest is room for a loaded machine
FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
LB_WRITES = frozenset({"PutLoadBalancer", "SetLoadBalancerBackends", "DeleteLoadBalancer"})
# Every load-balancer call takes 0.2-0.3 s in the cloud: at any kill, some are in flight.
LATENCY_S = 0.2
LATENCY = {"method": "loadbalancers", "fixedSeconds": LATENCY_S, "jitterSeconds": 0.1}
PORTS = [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]
UPDATED_PORTS = [
    {"name": "http", "port": 8080, "protocol": "TCP", "targetPort": 8080},
    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353},
]


def ccm_argv(kubeconfig: Path, cloud_config: Path) -> list[str]:
    return [
        *CLI,
        "--cloud-provider=sim",
        f"--cloud-config={cloud_config}",
        f"--kubeconfig={kubeconfig}",
        "--secure-port=0",
        "--configure-cloud-routes=false",
        "--controllers=service-lb-controller,cloud-node-controller",
        "--leader-elect=false",
        # A restart re-verifies every provisioned load balancer at half this rate.
        "--cloud-api-rate=load_balancers=50:50",
        "--logging-format=json",
    ]


def lb_name(uid: str) -> str:
    """Upstream's DefaultLoadBalancerName."""
    return ("a" + uid.replace("-", ""))[:32]


class Cloud:
    """The simulated cloud's admin API (never faulted, never logged)."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def load_balancers(self) -> list[dict[str, Any]]:
        response = await self.http.get("/_sim/state")
        response.raise_for_status()
        found: list[dict[str, Any]] = response.json()["loadBalancers"]
        return found

    async def calls(self) -> list[dict[str, Any]]:
        response = await self.http.get("/_sim/calls", params={"method": "loadbalancers"})
        response.raise_for_status()
        found: list[dict[str, Any]] = response.json()["calls"]
        return found

    async def writes_by(self, replica: str) -> int:
        """The load-balancer writes the cloud answered to `replica`."""
        response = await self.http.get(
            "/_sim/calls", params={"method": "loadbalancers", "replica": replica}
        )
        response.raise_for_status()
        return sum(c["method"] in LB_WRITES for c in response.json()["calls"])


def problems(services: Iterable[Service], lbs: list[dict[str, Any]], nodes: list[str]) -> list[str]:
    """Everything that keeps the cloud and the API from the converged state ([] if none)."""
    found = []
    by_name = {lb["name"]: lb for lb in lbs}
    owners = [lb["service"] for lb in lbs]
    for owner in sorted({o for o in owners if owners.count(o) > 1}):
        found.append(f"{owner}: {owners.count(owner)} load balancers")
    wanted = set()
    for service in services:
        key = f"{service.metadata.namespace}/{service.metadata.name}"
        name = lb_name(service.metadata.uid)
        lb = by_name.get(name)
        if service.metadata.deletion_timestamp:
            found.append(f"{key}: being deleted, finalizers {service.metadata.finalizers}")
            continue
        if service.spec.type != "LoadBalancer":
            if lb is not None:
                found.append(f"{key}: type {service.spec.type} but load balancer {name}")
            if FINALIZER in service.metadata.finalizers:
                found.append(f"{key}: type {service.spec.type} but the finalizer")
            if service.status.load_balancer.ingress:
                found.append(f"{key}: type {service.spec.type} but an ingress")
            continue
        wanted.add(name)
        if lb is None:
            found.append(f"{key}: no load balancer {name}")
            continue
        ports = [(p.name, p.protocol, p.port, p.node_port) for p in service.spec.ports]
        lb_ports = [(p["name"], p["protocol"], p["port"], p["nodePort"]) for p in lb["ports"]]
        if lb_ports != ports:
            found.append(f"{key}: load balancer ports {lb_ports}, Service ports {ports}")
        if lb["service"] != key:
            found.append(f"{key}: load balancer {name} is for {lb['service']}")
        if sorted(lb["nodes"]) != nodes:
            found.append(f"{key}: load balancer nodes {lb['nodes']}, Nodes {nodes}")
        ingress = [
            {"ip": i.ip, "hostname": i.hostname} for i in service.status.load_balancer.ingress
        ]
        if not lb["ingress"] or ingress != lb["ingress"]:
            found.append(f"{key}: status ingress {ingress}, load balancer {lb['ingress']}")
        if FINALIZER not in service.metadata.finalizers:
            found.append(f"{key}: a load balancer but no finalizer")
    for lb in lbs:
        if lb["name"] not in wanted:
            found.append(f"leaked load balancer {lb['name']} of {lb['service']}")
    return found


async def current_problems(kube: KubeClient, cloud: Cloud) -> list[str]:
    services = (await kube.list(SERVICES, type=Service, namespace="default")).items
    nodes = sorted(n.metadata.name for n in (await kube.list(NODES, type=Node)).items)
    return problems(
        [s for s in services if s.metadata.name.startswith("svc-")],
        await cloud.load_balancers(),
        nodes,
    )


class Crashes:
    """CCM generations against one testbed: each one is SIGKILLed after its N-th answered
    load-balancer write, or (the last of a phase) left to converge and then SIGTERMed."""

    def __init__(
        self, tmp_path: Path, kubeconfig: Path, cloud_url: str, kube: KubeClient, cloud: Cloud
    ) -> None:
        self.tmp_path = tmp_path
        self.kubeconfig = kubeconfig
        self.cloud_url = cloud_url
        self.kube = kube
        self.cloud = cloud
        self.started = 0
        self.killed: dict[str, float] = {}  # replica: wall time of its SIGKILL
        self.converge_s: list[float] = []  # how long each phase's last CCM took
        self.left: dict[str, list[str]] = {}  # problems after each phase's convergence

    async def generation(self, writes: int | None, *, task_status: trio.TaskStatus[None]) -> None:
        """Run the next CCM until the cloud answered `writes` load-balancer writes to it,
        then SIGKILL it; with None, until all converged (at most CONVERGE_S), then SIGTERM."""
        self.started += 1
        replica = f"ccm-{self.started}"
        config = self.tmp_path / f"{replica}.yaml"
        write_cloud_config(config, url=self.cloud_url, replica=replica)
        err = self.tmp_path / f"{replica}.err"
        async with running(ccm_argv(self.kubeconfig, config), stderr=err, stdout=None) as ccm:
            task_status.started()

            async def reached() -> bool:
                assert ccm.returncode is None, err.read_text()[-3000:]
                if writes is None:
                    return not await current_problems(self.kube, self.cloud)
                return await self.cloud.writes_by(replica) >= writes

            if writes is None:
                started = trio.current_time()
                with trio.move_on_after(CONVERGE_S):
                    await poll_until(reached, 0.1)
                self.converge_s.append(round(trio.current_time() - started, 1))
                ccm.send_signal(signal.SIGTERM)
            else:
                await poll_until(reached, 0.02)
                self.killed[replica] = time.time()
                os.kill(ccm.pid, signal.SIGKILL)
            await ccm.wait()
        assert ccm.returncode == (0 if writes is None else -signal.SIGKILL), err.read_text()[-3000:]

    async def phase(
        self, name: str, action: Callable[[], Awaitable[None]], kill_points: list[int]
    ) -> None:
        """`action` while a CCM runs; a SIGKILL at each kill point (a new CCM after each);
        then a CCM that converges. What is left unconverged is kept in `left`."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.generation, kill_points[0])
            await action()
        for writes in kill_points[1:]:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.generation, writes)
        async with trio.open_nursery() as nursery:
            await nursery.start(self.generation, None)
        self.left[name] = await current_problems(self.kube, self.cloud)


async def test_kill_9_during_create_update_delete_leaks_nothing(tmp_path: Path) -> None:
    """SIGKILLs at seeded-random points while 50 Services are created, changed and deleted
    leave, once a last CCM converges, one load balancer per Service that wants one (its
    name, current ports, all Nodes, the ingress in its status), no leaked or duplicate load
    balancer, no Service stuck on the cleanup finalizer and no stale status."""
    rng = random.Random(SEED)
    kubeconfig = tmp_path / "kubeconfig"
    testbed_argv = [
        *CLI,
        "testbed",
        "--nodes=3",
        f"--seed={SEED}",
        f"--kubeconfig-out={kubeconfig}",
        f"--cloud-config-out={tmp_path / 'cloud.yaml'}",
    ]
    names = [f"svc-{i:02d}" for i in range(SERVICE_COUNT)]
    shuffled = rng.sample(names, len(names))
    retyped = shuffled[:5]  # back to ClusterIP: their load balancers go
    changed = shuffled[5:25]  # new ports and an annotation
    deleted = shuffled[15:40]  # ten of them changed before

    async def create() -> None:
        for name in names:
            await kube.create(SERVICES, make_service(name, ports=PORTS), namespace="default")

    async def update() -> None:
        for name in changed:
            patch: dict[str, Any] = {
                "metadata": {"annotations": {"crash-test/changed": "yes"}},
                "spec": {"ports": UPDATED_PORTS},
            }
            await kube.patch(SERVICES, name, Patch(MERGE, patch), namespace="default")
        for name in retyped:
            patch = {"spec": {"type": "ClusterIP", "ports": UPDATED_PORTS[:1]}}
            await kube.patch(SERVICES, name, Patch(MERGE, patch), namespace="default")

    async def delete() -> None:
        for name in deleted:
            await kube.delete(SERVICES, name, namespace="default")

    with trio.fail_after(150):
        async with running(testbed_argv, stderr=tmp_path / "testbed.err") as testbed:
            assert testbed.stdout is not None
            lines = Lines(testbed.stdout)
            while "nodes registered" not in await lines.next():
                pass
            found = re.search(r"sim cloud listening on (\S+)", "\n".join(lines.seen))
            assert found is not None
            cloud_url = found.group(1)
            connection = load_config(kubeconfig=str(kubeconfig), master="")
            async with (
                httpx.AsyncClient(base_url=cloud_url) as http,
                open_kube_client(connection, qps=0) as kube,
            ):
                (await http.post("/_sim/faults/latency", json=LATENCY)).raise_for_status()
                crashes = Crashes(tmp_path, kubeconfig, cloud_url, kube, Cloud(http))
                # Kill points: the second CCM of a phase re-verifies every load balancer
                # (45, then 20 at least), so it always reaches its point.
                await crashes.phase(
                    "create", create, [rng.randint(1, 40) for _ in range(KILLS_PER_PHASE)]
                )
                await crashes.phase(
                    "update", update, [rng.randint(1, 20) for _ in range(KILLS_PER_PHASE)]
                )
                await crashes.phase(
                    "delete", delete, [rng.randint(1, 12) for _ in range(KILLS_PER_PHASE)]
                )
                still_there = []
                for name in deleted:
                    try:
                        await kube.get(SERVICES, name, namespace="default")
                    except NotFoundError:
                        continue
                    still_there.append(name)
                calls = await crashes.cloud.calls()
            testbed.send_signal(signal.SIGTERM)
            await testbed.wait()
    # Calls arrive (`wall`) at least LATENCY's fixed seconds before they are answered: those
    # arriving later than that before a kill were still in flight when it landed.
    in_flight = 0
    for replica, killed_at in crashes.killed.items():
        arrived = [c["wall"] for c in calls if c["replica"] == replica]
        in_flight += sum(a > killed_at - LATENCY_S for a in arrived)
    print(
        f"{len(crashes.killed)} SIGKILLs with {in_flight} load-balancer calls in flight; "
        f"converged in {crashes.converge_s} s"
    )
    assert in_flight > 0
    assert not any(crashes.left.values()), crashes.left
    assert still_there == []
    assert len(crashes.killed) == 3 * KILLS_PER_PHASE
