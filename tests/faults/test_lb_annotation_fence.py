"""The annotations a provider asks to write back (`LoadBalancerStatus.annotations`) are
written only inside the writer's leadership, judged by the referee: each replica's Lease
writes and its Service annotation patches are recorded as they leave it (one sequence for
both), and every patch must fall in a window of that replica's leadership. Two replicas, a
load-balancer ensure of three 2 s cloud writes and a 4 s Lease: the leader is shut down
mid-ensure (its drain finishes the step and may write, while it still renews), or freezes
past its Lease mid-ensure (it must not write when it resumes).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from tests.helpers.world import LoadBalancersDouble
from trio_ccm.cli.flags import parse_flags
from trio_ccm.cloud import LoadBalancerStatus, NodeInfo, ServiceInfo
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.supervisor import Serving, serve
from trio_ccm.testing import ApiServer, SimCloud, make_service, register_node, virtual_now
from trio_ccm.testing.harness import emulator_connection, wait_for
from trio_ccm.testing.referee import CloudRecorder, CloudWrite, LeaseRecorder, violations

LEASE = (4.0, 3.0, 1.0)  # duration, renew deadline, retry period
ANNOTATION = "example.com/load-balancer-id"
SERVICES = 4


class AnnotatingSlowEnsure(LoadBalancersDouble):
    """The sim provider's load balancers with an ensure of three cloud writes in a row (as
    an Octavia load balancer's children are made), asking for `ANNOTATION` on the Service."""

    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> LoadBalancerStatus:
        for _ in range(2):
            await self.inner.ensure_load_balancer(cluster, service, nodes)
        status = await self.inner.ensure_load_balancer(cluster, service, nodes)
        name = self.inner.load_balancer_name(cluster, service)
        return LoadBalancerStatus(status.ingress, annotations={ANNOTATION: name})


class Provider:
    def __init__(self, sim: SimProvider) -> None:
        lbs = sim.load_balancers
        assert lbs is not None
        self.name = sim.name
        self.instances = sim.instances
        self.load_balancers = AnnotatingSlowEnsure(lbs)
        self.routes = None

    async def initialize(self) -> None:
        return None


class AnnotationRecorder(httpx.AsyncBaseTransport):
    """A replica's kube transport that records, as it leaves, each patch of a Service
    object (not its status): the annotation write-back."""

    def __init__(
        self, inner: httpx.AsyncBaseTransport, replica: str, sequence: Iterator[int]
    ) -> None:
        self.inner = inner
        self.replica = replica
        self.sequence = sequence
        self.writes: list[CloudWrite] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        service = (
            request.method == "PATCH" and "/services/" in path and not path.endswith("/status")
        )
        if service:
            body = json.loads(await request.aread())
            annotations = body.get("metadata", {}).get("annotations", {})
            if ANNOTATION in annotations:
                self.writes.append(
                    CloudWrite(
                        trio.current_time(),
                        self.replica,
                        "PatchAnnotations",
                        path,
                        next(self.sequence),
                    )
                )
        response: httpx.Response = await self.inner.handle_async_request(request)
        return response


@dataclass
class Replica:
    name: str
    serving: Serving
    leases: LeaseRecorder
    annotations: AnnotationRecorder
    done: trio.Event


@dataclass
class World:
    api: ApiServer
    cloud: SimCloud
    nursery: trio.Nursery
    sequence: itertools.count[int] = field(default_factory=itertools.count)
    replicas: list[Replica] = field(default_factory=list)

    async def start(self, name: str) -> Replica:
        duration, deadline, retry = LEASE
        settings = parse_flags(
            [
                "--cloud-provider=sim",
                "--secure-port=0",
                "--controllers=service-lb-controller",
                f"--leader-elect-lease-duration={duration:g}s",
                f"--leader-elect-renew-deadline={deadline:g}s",
                f"--leader-elect-retry-period={retry:g}s",
            ]
        )
        leases = LeaseRecorder(self.api.transport(), name, self.sequence)
        annotations = AnnotationRecorder(leases, name, self.sequence)
        cloud = CloudRecorder(self.cloud.transport(), name, self.sequence)
        sim = SimProvider(url="http://sim", replica=name, transport=cloud)
        done = trio.Event()

        async def run(*, task_status: trio.TaskStatus[Serving]) -> None:
            try:
                await serve(
                    settings,
                    Provider(sim),
                    connection=emulator_connection(),
                    transport=annotations,
                    identity=name,
                    now=virtual_now(),
                    task_status=task_status,
                )
            finally:
                done.set()

        serving: Serving = await self.nursery.start(run)
        replica = Replica(name, serving, leases, annotations, done)
        self.replicas.append(replica)
        return replica

    def annotation_writes(self) -> list[CloudWrite]:
        return [w for r in self.replicas for w in r.annotations.writes]

    def violations(self) -> list[str]:
        leases = [w for r in self.replicas for w in r.leases.writes]
        found = violations(leases, self.annotation_writes(), lease_duration_s=LEASE[0])
        return [str(v) for v in found]

    def annotated(self) -> bool:
        return all(
            ANNOTATION in self.service(f"web-{i}")["metadata"].get("annotations", {})
            for i in range(SERVICES)
        )

    def service(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.api.get("v1", "Service", name, "default")
        return found


@asynccontextmanager
async def world() -> AsyncIterator[World]:
    api = ApiServer(seed=1, now=virtual_now())
    cloud = SimCloud(seed=1)
    register_node(api, "node-a", uninitialized=False)
    for i in range(SERVICES):
        api.create(make_service(f"web-{i}"))
    cloud.faults.latency("loadbalancers", fixed_s=2.0)  # each ensure: three 2 s writes
    async with trio.open_nursery() as nursery:
        yield World(api, cloud, nursery)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("disruption", "at_s"),
    [
        pytest.param("graceful-shutdown", 1.0, id="graceful-shutdown"),
        pytest.param("frozen-past-lease", 1.0, id="frozen-in-first-call"),
        # resumed with its last cloud call answered: the ensure returns into a lost term
        pytest.param("frozen-past-lease", 5.0, id="frozen-in-last-call"),
    ],
)
async def test_annotations_are_written_only_inside_leadership(
    autojump_clock: trio.testing.MockClock, disruption: str, at_s: float
) -> None:
    """The leader is shut down, or frozen 10 s past its 4 s Lease, mid-ensure (in its first
    or its last cloud call): every
    annotation patch any replica sends falls inside its own leadership, and every Service
    ends annotated by whoever leads next."""
    with trio.fail_after(300):
        async with world() as w:
            a = await w.start("ccm-a")
            await a.serving.wait_leading()
            b = await w.start("ccm-b")
            await trio.sleep(at_s)  # mid-way through the first ensures (they end at 6 s)
            if disruption == "graceful-shutdown":
                a.serving.shut_down()
                await a.done.wait()
            else:
                autojump_clock.jump(10.0)
            await b.serving.wait_leading()
            await wait_for(w.annotated, poll_s=1.0)
    assert w.annotation_writes()  # the write-back happened, and was judged
    assert w.violations() == []
