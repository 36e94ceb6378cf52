"""Drop-in: trio-ccm takes the place of a Go cloud-controller-manager unchanged.

1. **Args.** The arguments of the Kubernetes docs' DaemonSet example and of the AWS Helm
   chart's values (tests/deploy/fixtures, sources in their headers) parse, and the real
   `trio-ccm` process starts with them against a testbed process (only `--cloud-provider`,
   `--cloud-config` and `--kubeconfig` pointed at the testbed, plus a free `--secure-port`)
   and exits 0 on SIGTERM; or it refuses them with a message naming the flag, where the Go
   CCM refuses them too.
2. **Lease.** A "Go CCM" stand-in runs client-go's leader election (tryAcquireOrRenew, the
   renew loop, ReleaseOnCancel) through the official `kubernetes` client over real HTTP,
   on the Lease trio-ccm uses; a rolling swap either way never has two leaders.
3. **Metrics.** Upstream's metric names, types, labels and buckets, where upstream has them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import math
import random
import re
import signal
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx
import kubernetes
import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.processes import CLI, Lines, free_port, initialised, poll_until, running
from trio_ccm.actors.builtin import BUILTIN_CONTROLLERS
from trio_ccm.cli.flags import parse_flags, usage
from trio_ccm.cloud.registry import available_providers
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.config import load_config
from trio_ccm.kube.errors import NotFoundError
from trio_ccm.kube.objects import LEASES, NODES, Node
from trio_ccm.kube.wellknown import CONTROLLER_ALIASES
from trio_ccm.settings import Settings
from trio_ccm.supervisor import Serving, resolve_controllers, serve
from trio_ccm.testing.factories import make_node, make_service, ready_condition
from trio_ccm.testing.harness import EPOCH, emulator_connection, virtual_now
from trio_ccm_testbed.apiserver import ApiServer, Listening, serve_apiserver
from trio_ccm_testbed.cloud import SimCloud

T = TypeVar("T")

FIXTURES = Path(__file__).parent / "fixtures"
UPSTREAM_EXAMPLE = "upstream-example-args.txt"
AWS_CHART = "aws-chart-args.txt"
TESTBED_NODES = 3
ALL_CONTROLLERS = [
    "cloud-node-controller",
    "cloud-node-lifecycle-controller",
    "service-lb-controller",
    "node-route-controller",
    "node-ipam-controller",
]
LEASE_NAMESPACE, LEASE_NAME = "kube-system", "cloud-controller-manager"
# client-go's `<hostname>_<uuid4>` identity (leaderelection in k8s.io/cloud-provider's app).
GO_IDENTITY_RE = re.compile(
    r"^(?P<host>.+)_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
)
MICRO_TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def published_args(name: str) -> list[str]:
    """A fixture's arguments: its lines that are neither blank nor comments."""
    lines = (FIXTURES / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def flag_name(arg: str) -> str:
    return arg.split("=", 1)[0]


# -- 1. the published arguments ----------------------------------------------------------

VERDICTS: dict[str, str] = {
    # Every flag the published lists use, what trio-ccm does with it, and why.
    "--cloud-provider": "effective: the provider's name (entry point); a name that is not "
    "installed is refused, exit 2, naming the flag (the Go CCM exits too)",
    "--leader-elect": "effective: campaign for kube-system/cloud-controller-manager",
    "--use-service-account-credentials": "accepted without effect: every controller uses "
    "the CCM's own identity (docs/operations.md, 'Accepted without effect')",
    "--allocate-node-cidrs": "effective: node-ipam-controller assigns spec.podCIDRs",
    "--configure-cloud-routes": "effective: node-route-controller on; with no "
    "--cluster-cidr the start fails naming both flags, as the Go CCM's route controller",
    "--cluster-cidr": "effective: the pod range of IPAM and routes",
    "--v": "effective: 0 logs info, 1 and more debug",
}
IGNORED = {flag for flag, verdict in VERDICTS.items() if verdict.startswith("accepted without")}
OPERATIONS_DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.mark.parametrize("name", [UPSTREAM_EXAMPLE, AWS_CHART])
def test_every_published_flag_has_a_verdict(name: str) -> None:
    """Each flag of the published lists has a verdict, and `trio-ccm --help` and
    docs/operations.md agree with it: an effective flag is in the help's flag list, one
    accepted without effect is in the help's compatibility note and the docs' table."""
    flags = [flag_name(arg) for arg in published_args(name)]
    assert len(flags) == len(set(flags))
    assert set(flags) <= set(VERDICTS)
    effective, compatibility = usage().split("Accepted for compatibility")
    doc = OPERATIONS_DOC.read_text()
    without_effect = doc.split("## Accepted without effect", 1)[1].split("\n## ", 1)[0]
    for flag in flags:
        if flag in IGNORED:
            assert re.search(rf"{flag}[,.]", compatibility), flag
            assert f"| `{flag}` |" in without_effect, flag
        else:
            assert re.search(rf"^ *(-v, )?{flag} ", effective, re.MULTILINE), flag


@pytest.mark.parametrize(
    ("name", "expected", "controllers"),
    [
        pytest.param(
            UPSTREAM_EXAMPLE,
            {
                "cloud_provider": "[YOUR_CLOUD_PROVIDER]",
                "leader_elect": True,
                "allocate_node_cidrs": True,
                "configure_cloud_routes": True,
                "cluster_cidr": "172.17.0.0/16",
                "ignored_flags": ("--use-service-account-credentials",),
            },
            ALL_CONTROLLERS,
            id="upstream-example",
        ),
        pytest.param(
            AWS_CHART,
            {"cloud_provider": "aws", "verbosity": 2},
            ALL_CONTROLLERS,
            id="aws-chart",
        ),
    ],
)
def test_parse_flags_accepts_each_published_list(
    name: str, expected: dict[str, Any], controllers: list[str]
) -> None:
    """The list parses to exactly the defaults plus what it says; the flags accepted
    without effect are recorded as such; `*` enables every built-in controller."""
    settings = parse_flags(published_args(name), controller_aliases=CONTROLLER_ALIASES)
    assert settings == replace(Settings(), **expected)
    assert set(settings.ignored_flags) == IGNORED & {flag_name(a) for a in published_args(name)}
    enabled = resolve_controllers(settings, BUILTIN_CONTROLLERS, [])
    assert [c.name for c in enabled] == controllers


async def test_the_published_placeholder_provider_is_refused_naming_the_flag() -> None:
    """The upstream example's placeholder `--cloud-provider` is no installed provider: the
    process exits 2 and stderr names `--cloud-provider=<value>`. (The aws chart's args run
    the aws provider: tests/aws/test_drop_in.py.)"""
    args = published_args(UPSTREAM_EXAMPLE)
    provider = next(a for a in args if flag_name(a) == "--cloud-provider").split("=", 1)[1]
    assert provider not in available_providers()
    with trio.fail_after(20):
        result = await trio.run_process([*CLI, *args], capture_stderr=True, check=False)
    assert result.returncode == 2
    err = result.stderr.decode()
    assert err.startswith(f"trio-ccm: --cloud-provider={provider}: unknown cloud provider")


def for_testbed(args: list[str], kubeconfig: Path, cloud_config: Path) -> list[str]:
    """`args` with the provider, its config and the kubeconfig pointed at the testbed
    (replaced in place, or added), and a free secure port on loopback so runs never clash
    (still TLS with the in-memory self-signed pair, as upstream)."""
    ours = {
        "--cloud-provider": "sim",
        "--cloud-config": str(cloud_config),
        "--kubeconfig": str(kubeconfig),
    }
    out = [f"{flag_name(a)}={ours[flag_name(a)]}" if flag_name(a) in ours else a for a in args]
    out += [f"{k}={v}" for k, v in ours.items() if k not in {flag_name(a) for a in args}]
    return [*out, f"--secure-port={free_port()}", "--bind-address=127.0.0.1"]


def log_events(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines the process has written so far."""
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.split("\n")[:-1] if line.startswith("{")]


def port_of(argv: list[str]) -> int:
    return int(next(a for a in argv if a.startswith("--secure-port=")).split("=")[1])


@dataclass
class Bed:
    kubeconfig: Path
    cloud_config: Path
    kube: KubeClient


@asynccontextmanager
async def open_testbed(tmp_path: Path) -> AsyncIterator[Bed]:
    """`trio-ccm testbed` (emulator, sim cloud, kubelets) in its own process; SIGTERM at
    the end, which must exit it 0."""
    kubeconfig, cloud_config = tmp_path / "kubeconfig", tmp_path / "cloud.yaml"
    argv = [
        *CLI,
        "testbed",
        f"--nodes={TESTBED_NODES}",
        f"--kubeconfig-out={kubeconfig}",
        f"--cloud-config-out={cloud_config}",
    ]
    async with running(argv, stderr=tmp_path / "testbed.err") as testbed:
        assert testbed.stdout is not None
        lines = Lines(testbed.stdout)
        while "nodes registered" not in await lines.next():
            pass
        connection = load_config(kubeconfig=str(kubeconfig), master="")
        async with open_kube_client(connection, qps=0) as kube:
            yield Bed(kubeconfig, cloud_config, kube)
        testbed.send_signal(signal.SIGTERM)
        await testbed.wait()
        assert testbed.returncode == 0


async def lease_spec(kube: KubeClient) -> dict[str, Any] | None:
    try:
        lease = await kube.get(LEASES, LEASE_NAME, namespace=LEASE_NAMESPACE)
    except NotFoundError:
        return None
    spec: dict[str, Any] = lease["spec"]
    return spec


async def routed(kube: KubeClient) -> list[Node]:
    """The Nodes whose NetworkUnavailable condition says the route controller made a route."""
    nodes = (await kube.list(NODES, type=Node)).items
    return [
        n
        for n in nodes
        if any(
            c.type == "NetworkUnavailable" and c.status == "False" and c.reason == "RouteCreated"
            for c in n.status.conditions
        )
    ]


async def scrape(port: int) -> dict[str, Any]:
    """The process's /metrics over HTTPS (self-signed), as metric families by name."""
    async with httpx.AsyncClient(verify=False) as http:  # noqa: S501 - its in-memory self-signed pair
        response = await http.get(f"https://127.0.0.1:{port}/metrics")
    assert response.status_code == 200
    return {f.name: f for f in text_string_to_metric_families(response.text)}


async def stop(ccm: trio.Process, err: Path) -> None:
    ccm.send_signal(signal.SIGTERM)
    with trio.fail_after(20):
        await ccm.wait()
    assert ccm.returncode == 0, (await trio.Path(err).read_text())[-3000:]


async def test_the_upstream_example_starts_trio_ccm(tmp_path: Path) -> None:
    """With the docs' example args, every controller runs: the three Nodes get pod CIDRs
    from 172.17.0.0/16, routes and their cloud data; the Lease is held under a
    `<hostname>_<uuid>` identity; --use-service-account-credentials is reported as without
    effect; /metrics answers; SIGTERM releases the Lease and exits 0."""
    with trio.fail_after(60):
        async with open_testbed(tmp_path) as bed:
            argv = for_testbed(published_args(UPSTREAM_EXAMPLE), bed.kubeconfig, bed.cloud_config)
            err = tmp_path / "ccm.err"
            async with running([*CLI, *argv], stderr=err, stdout=None) as ccm:

                async def done() -> bool:
                    return (
                        len(await initialised(bed.kube)) == TESTBED_NODES
                        and len(await routed(bed.kube)) == TESTBED_NODES
                    )

                await poll_until(done)
                nodes = (await bed.kube.list(NODES, type=Node)).items
                cluster = ipaddress.IPv4Network("172.17.0.0/16")
                for node in nodes:
                    assert node.spec.pod_cidrs, node.metadata.name
                    assert all(
                        ipaddress.IPv4Network(c).subnet_of(cluster) for c in node.spec.pod_cidrs
                    )
                spec = await lease_spec(bed.kube)
                assert spec is not None
                found = GO_IDENTITY_RE.match(spec["holderIdentity"])
                assert found is not None
                assert found.group("host") == socket.gethostname()
                assert spec["leaseDurationSeconds"] == 15
                families = await scrape(port_of(argv))
                master = families["leader_election_master_status"].samples
                assert [(s.labels, s.value) for s in master] == [({"name": LEASE_NAME}, 1.0)]
                running_now = {
                    s.labels["name"]
                    for s in families["running_managed_controllers"].samples
                    if s.value == 1.0
                }
                assert running_now == set(ALL_CONTROLLERS)
                # As the Go CCM: process_* exported, no `_created` twin series.
                assert "process_resident_memory_bytes" in families
                assert not [
                    s.name
                    for family in families.values()
                    for s in family.samples
                    if s.name.endswith("_created")
                ]
                await stop(ccm, err)
            spec = await lease_spec(bed.kube)
            assert spec is not None
            assert spec.get("holderIdentity", "") == ""
    events = log_events(err)
    names = [e["event"] for e in events]
    assert "ccm.started" in names
    assert "lease.acquired" in names
    started = [e["controller"] for e in events if e["event"] == "controller.started"]
    assert sorted(started) == sorted(ALL_CONTROLLERS)
    ignored = [e["flag"] for e in events if e["event"] == "flag.ignored"]
    assert ignored == ["--use-service-account-credentials"]
    assert events[-1]["event"] == "ccm.exit"
    assert events[-1]["exit_code"] == 0


async def test_the_aws_chart_args_are_refused_naming_cluster_cidr(tmp_path: Path) -> None:
    """The chart's args as published leave routes on (the default) with no --cluster-cidr.
    The Go CCM's route controller then fails the process ("failed to parse cidr value",
    kubernetes/cloud-provider-aws#406); trio-ccm refuses too, before campaigning, exit 1,
    with a message naming --cluster-cidr and the way out, --configure-cloud-routes=false."""
    with trio.fail_after(60):
        async with open_testbed(tmp_path) as bed:
            argv = for_testbed(published_args(AWS_CHART), bed.kubeconfig, bed.cloud_config)
            err = tmp_path / "ccm.err"
            async with running([*CLI, *argv], stderr=err, stdout=None) as ccm:
                with trio.fail_after(20):
                    await ccm.wait()
                assert ccm.returncode == 1
            assert await lease_spec(bed.kube) is None
    events = log_events(err)
    failed = [e for e in events if e["event"] == "ccm.failed"]
    assert len(failed) == 1
    assert "--cluster-cidr is empty" in failed[0]["error"]
    assert "--configure-cloud-routes=false" in failed[0]["error"]
    assert (events[-1]["event"], events[-1]["exit_code"]) == ("ccm.exit", 1)


async def test_the_aws_chart_args_with_routes_off_start_trio_ccm(tmp_path: Path) -> None:
    """With `--configure-cloud-routes=false` added (what users of the chart add, for the
    Go CCM too), the chart's args start trio-ccm: --v=2 logs at debug, the route and IPAM
    controllers are skipped with the flag as the reason, the Nodes are initialised, and
    SIGTERM exits 0."""
    args = [*published_args(AWS_CHART), "--configure-cloud-routes=false"]
    with trio.fail_after(60):
        async with open_testbed(tmp_path) as bed:
            argv = for_testbed(args, bed.kubeconfig, bed.cloud_config)
            err = tmp_path / "ccm.err"
            async with running([*CLI, *argv], stderr=err, stdout=None) as ccm:

                async def done() -> bool:
                    return len(await initialised(bed.kube)) == TESTBED_NODES

                await poll_until(done)
                await stop(ccm, err)
    events = log_events(err)
    assert any(e["level"] == "debug" for e in events)
    skipped = {e["controller"]: e["reason"] for e in events if e["event"] == "controller.skipped"}
    assert skipped == {
        "node-route-controller": "--configure-cloud-routes=false",
        "node-ipam-controller": (
            "--allocate-node-cidrs=false (Node pod CIDRs are assigned by someone else)"
        ),
    }
    assert [e["event"] for e in events if e["event"] == "flag.ignored"] == []
    assert events[-1]["exit_code"] == 0


# -- 2. the Lease, shared with a Go CCM ------------------------------------------------------

RETRY_PERIOD_S = 2.0
LEASE_DURATION_S = 15
GO_IDENTITY = "ip-10-0-1-17.ec2.internal_0f6c1a52-8e3b-4d7a-9c21-5b4e7d0a9f13"


wall_clock = virtual_now()
"""Wall-clock time tied to Trio's (virtual) clock: EPOCH at t=0."""


def stamp(t: float) -> str:
    """The MicroTime trio-ccm writes at virtual time `t`."""
    return (EPOCH + dt.timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Blocking:
    """Runs the official client's blocking calls in worker threads with the MockClock's
    autojump paused, so virtual time stands still while a request is on the wire."""

    def __init__(self, clock: trio.testing.MockClock) -> None:
        self.clock = clock
        self.depth = 0

    async def run(self, call: Callable[[], T]) -> T:
        self.depth += 1
        self.clock.autojump_threshold = math.inf
        try:
            return await trio.to_thread.run_sync(call)
        finally:
            self.depth -= 1
            if not self.depth:
                self.clock.autojump_threshold = 0


@dataclass(frozen=True)
class Record:
    """client-go's LeaderElectionRecord, as the Lease's spec holds it."""

    holder: str
    duration_s: int
    acquire: dt.datetime | None
    renew: dt.datetime | None
    transitions: int

    @classmethod
    def of(cls, lease: Any) -> Record:
        spec = lease.spec
        return cls(
            spec.holder_identity or "",
            spec.lease_duration_seconds or 0,
            spec.acquire_time,
            spec.renew_time,
            spec.lease_transitions or 0,
        )

    def spec(self) -> Any:
        return kubernetes.client.V1LeaseSpec(
            holder_identity=self.holder,
            lease_duration_seconds=self.duration_s,
            acquire_time=self.acquire,
            renew_time=self.renew,
            lease_transitions=self.transitions,
        )


class GoCcm:
    """A Go cloud-controller-manager's leader election, done the way client-go's
    `tools/leaderelection` does it, with the official `kubernetes` Python client (a peer
    nobody here wrote) over real HTTP: `try_acquire_or_renew` (fast path, GET, create on
    404, expiry judged by how long the record has stayed unchanged on its own clock,
    transitions + 1 on a takeover, optimistic PUT), acquire every retry period, renew
    every retry period, and ReleaseOnCancel's release (holder "", duration 1 s, acquire and
    renew times now, transitions kept). Acquire attempts are not jittered (client-go
    stretches them by up to 1.2x) so that their instants are exact."""

    def __init__(self, api: Any, blocking: Blocking, identity: str = GO_IDENTITY) -> None:
        self.leases = kubernetes.client.CoordinationV1Api(api)
        self.blocking = blocking
        self.identity = identity
        self.lease: Any = None
        self.observed: Record | None = None
        self.observed_at = -math.inf
        self.attempts: list[tuple[float, bool, str]] = []  # (time, success, holder seen)
        self.changes_seen: list[float] = []  # when a read found the record changed
        self.writes: list[tuple[float, Record]] = []
        self.acquired_at: float | None = None
        self.finished = trio.Event()  # lead() has returned (after its release, if any)

    def is_leader(self) -> bool:
        return self.observed is not None and self.observed.holder == self.identity

    def _observe(self, record: Record) -> None:
        self.observed, self.observed_at = record, trio.current_time()

    async def _update(self, record: Record) -> bool:
        lease = self.lease
        lease.spec = record.spec()
        try:
            self.lease = await self.blocking.run(
                partial(self.leases.replace_namespaced_lease, LEASE_NAME, LEASE_NAMESPACE, lease)
            )
        except kubernetes.client.ApiException:
            return False
        self._observe(record)
        self.writes.append((trio.current_time(), record))
        return True

    async def try_acquire_or_renew(self) -> bool:
        now = trio.current_time()
        wall = wall_clock()
        ours = Record(self.identity, LEASE_DURATION_S, wall, wall, 0)
        # Fast path: we hold it and it is valid by our observation: update without a GET.
        if self.is_leader() and self.observed_at + LEASE_DURATION_S > now:
            assert self.observed is not None
            kept = replace(
                ours, acquire=self.observed.acquire, transitions=self.observed.transitions
            )
            if await self._update(kept):
                return True
        try:
            self.lease = await self.blocking.run(
                partial(self.leases.read_namespaced_lease, LEASE_NAME, LEASE_NAMESPACE)
            )
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                return False
            body = kubernetes.client.V1Lease(
                metadata=kubernetes.client.V1ObjectMeta(name=LEASE_NAME, namespace=LEASE_NAMESPACE),
                spec=ours.spec(),
            )
            try:
                self.lease = await self.blocking.run(
                    partial(self.leases.create_namespaced_lease, LEASE_NAMESPACE, body)
                )
            except kubernetes.client.ApiException:
                return False
            self._observe(ours)
            self.writes.append((now, ours))
            return True
        record = Record.of(self.lease)
        if record != self.observed:
            self._observe(record)
            self.changes_seen.append(now)
        if record.holder and self.observed_at + record.duration_s > now and not self.is_leader():
            return False
        if self.is_leader():
            new = replace(ours, acquire=record.acquire, transitions=record.transitions)
        else:
            new = replace(ours, transitions=record.transitions + 1)
        return await self._update(new)

    async def _attempt(self) -> bool:
        success = await self.try_acquire_or_renew()
        seen = self.observed.holder if self.observed is not None else ""
        self.attempts.append((trio.current_time(), success, seen))
        return success

    async def lead(self, stop: trio.Event, *, release_on_cancel: bool) -> None:
        """Acquire (at once, then every retry period), renew every retry period until
        `stop`; then release (ReleaseOnCancel) or just stop writing (a crash, kill -9)."""
        try:
            await self._lead(stop, release_on_cancel=release_on_cancel)
        finally:
            self.finished.set()

    async def _lead(self, stop: trio.Event, *, release_on_cancel: bool) -> None:
        slot = trio.current_time()
        while not await self._attempt():
            slot += RETRY_PERIOD_S
            with trio.move_on_at(slot):
                await stop.wait()
            if stop.is_set():
                return
        self.acquired_at = trio.current_time()
        while True:
            slot += RETRY_PERIOD_S
            with trio.move_on_at(slot):
                await stop.wait()
            if stop.is_set():
                break
            assert await self._attempt(), "the stand-in failed to renew"
        if release_on_cancel:
            wall = wall_clock()
            assert self.observed is not None
            released = Record("", 1, wall, wall, self.observed.transitions)
            assert await self._update(released)


class LeaseWrites(httpx.AsyncBaseTransport):
    """trio-ccm's way to the emulator (in-process), noting each Lease write it makes."""

    def __init__(self, server: ApiServer) -> None:
        self.inner = server.transport()
        self.writes: list[tuple[float, str, str]] = []  # (time, method, holder written)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response: httpx.Response = await self.inner.handle_async_request(request)
        if (
            request.method in ("POST", "PUT")
            and "/leases" in request.url.path
            and response.status_code < 300
        ):
            holder = json.loads(response.content)["spec"].get("holderIdentity", "")
            self.writes.append((trio.current_time(), request.method, holder))
        return response


@dataclass
class Swap:
    """The emulator (in-process for trio-ccm, over HTTP for the stand-in), the sim cloud,
    and the replicas of a rolling swap."""

    api: ApiServer
    listening: Listening
    cloud: SimCloud
    transport: LeaseWrites
    go: GoCcm
    nursery: trio.Nursery
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    leading: list[list[float]] = field(default_factory=list)  # trio-ccm's terms [start, end]
    provider: SimProvider | None = None

    def lease(self) -> dict[str, Any]:
        lease: dict[str, Any] = self.api.get(
            "coordination.k8s.io/v1", "Lease", LEASE_NAME, LEASE_NAMESPACE
        )
        return lease

    def trio_ccm_cloud_calls(self) -> list[float]:
        """When trio-ccm called the cloud, but for its read-only start-up probe (`Health`,
        made by every replica, standby included, to say at once when the cloud is dead)."""
        return [c.time for c in self.cloud.calls_by(replica="trio-ccm") if c.method != "Health"]

    async def start_trio_ccm(self, **changes: Any) -> Serving:
        """A trio-ccm replica: every controller, leader election with the defaults."""
        provider = self.provider = SimProvider(
            url="http://sim", replica="trio-ccm", transport=self.cloud.transport()
        )
        settings = Settings(
            cloud_provider="sim", secure_port=0, cluster_cidr="10.244.0.0/16", **changes
        )
        serving: Serving = await self.nursery.start(
            lambda task_status: serve(
                settings,
                provider,
                connection=emulator_connection(),
                transport=self.transport,
                registry=self.registry,
                now=wall_clock,
                rng=NoJitter(),
                task_status=task_status,
            )
        )
        self.nursery.start_soon(self._referee, serving)
        return serving

    async def _referee(self, serving: Serving) -> None:
        while True:
            await serving.wait_leading(True)
            self.leading.append([trio.current_time()])
            await serving.wait_leading(False)
            self.leading[-1].append(trio.current_time())


class NoJitter(random.Random):
    """Every draw is 0: trio-ccm's acquire attempts come exactly one retry period apart."""

    def random(self) -> float:
        return 0.0


def register_node(api: ApiServer, cloud: SimCloud, name: str) -> str:
    """An instance, and its Node as kubelet --cloud-provider=external registers it; the
    instance's ID."""
    instance = cloud.add_instance(name)
    api.create(make_node(name))
    return instance.id


@asynccontextmanager
async def open_swap(tmp_path: Path, clock: trio.testing.MockClock) -> AsyncIterator[Swap]:
    """The world of a swap; the replicas the test starts stop with the block."""
    api = ApiServer(seed=1, now=wall_clock)
    cloud = SimCloud(seed=1)
    register_node(api, cloud, "node-a")
    blocking = Blocking(clock)
    kubeconfig = tmp_path / "kubeconfig"
    peer: Any = None
    swap: Swap | None = None
    try:
        async with trio.open_nursery() as nursery:
            listening: Listening = await nursery.start(partial(serve_apiserver, api))
            listening.write_kubeconfig(kubeconfig)
            peer = await blocking.run(
                lambda: kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
            )
            swap = Swap(api, listening, cloud, LeaseWrites(api), GoCcm(peer, blocking), nursery)
            yield swap
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            if peer is not None:
                await blocking.run(peer.close)
            if swap is not None and swap.provider is not None:
                await swap.provider.aclose()


def assert_trio_ccm_fields(lease: dict[str, Any], serving: Serving, *, at: float) -> None:
    """The Lease as client-go's LeaseLock writes it, held by trio-ccm since `at`."""
    assert (lease["apiVersion"], lease["kind"]) == ("coordination.k8s.io/v1", "Lease")
    assert (lease["metadata"]["namespace"], lease["metadata"]["name"]) == (
        LEASE_NAMESPACE,
        LEASE_NAME,
    )
    spec = lease["spec"]
    assert set(spec) == {
        "holderIdentity",
        "leaseDurationSeconds",
        "acquireTime",
        "renewTime",
        "leaseTransitions",
    }
    assert spec["holderIdentity"] == serving.identity
    assert GO_IDENTITY_RE.match(serving.identity) is not None
    assert spec["leaseDurationSeconds"] == LEASE_DURATION_S
    assert MICRO_TIME_RE.match(spec["acquireTime"]) is not None
    assert MICRO_TIME_RE.match(spec["renewTime"]) is not None
    assert spec["acquireTime"] == stamp(at)


async def test_trio_ccm_waits_out_a_crashed_go_ccm(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """While the Go CCM renews (t=0..20, every 2 s), trio-ccm (from t=1) writes nothing to
    the Lease, runs no controller and calls no cloud; after the Go CCM's crash (no release)
    it takes over at t=35, one lease duration after the last renewal, with transitions 1."""
    with trio.fail_after(120):
        async with open_swap(tmp_path, autojump_clock) as swap:
            stop = trio.Event()
            swap.nursery.start_soon(partial(swap.go.lead, stop, release_on_cancel=False))
            await trio.sleep_until(1.0)
            serving = await swap.start_trio_ccm()
            await trio.sleep_until(20.5)
            assert swap.go.acquired_at == 0.0
            assert [t for t, _ in swap.go.writes] == [2.0 * k for k in range(11)]
            assert not serving.leading
            assert serving.controllers == []
            assert swap.transport.writes == []
            assert swap.trio_ccm_cloud_calls() == []
            status = {"name": LEASE_NAME}
            assert swap.registry.get_sample_value("leader_election_master_status", status) == 0
            assert swap.lease()["spec"]["holderIdentity"] == GO_IDENTITY
            stop.set()  # kill -9: no release
            await swap.go.finished.wait()
            await serving.wait_leading()
            await trio.testing.wait_all_tasks_blocked()
            assert swap.leading == [[35.0]]
            assert swap.transport.writes == [(35.0, "PUT", serving.identity)]
            lease = swap.lease()
            assert_trio_ccm_fields(lease, serving, at=35.0)
            assert lease["spec"]["leaseTransitions"] == 1
            await trio.sleep(10)
            calls = swap.trio_ccm_cloud_calls()
            assert calls
            assert min(calls) >= 35.0
            # Every controller but node-ipam (--allocate-node-cidrs is off).
            assert sorted(serving.controllers) == sorted(ALL_CONTROLLERS[:4])


async def test_trio_ccm_takes_over_at_once_when_a_go_ccm_releases(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """client-go's ReleaseOnCancel writes holder "", duration 1 s, acquire = renew = now
    and keeps the transitions; trio-ccm, standing by (attempts at t=1, 3, 5...), takes the
    Lease at the instant it sees the release (t=10.5) rather than at its next attempt."""
    with trio.fail_after(120):
        async with open_swap(tmp_path, autojump_clock) as swap:
            stop = trio.Event()
            swap.nursery.start_soon(partial(swap.go.lead, stop, release_on_cancel=True))
            await trio.sleep_until(1.0)
            serving = await swap.start_trio_ccm()
            await trio.sleep_until(10.5)
            assert not serving.leading
            assert swap.transport.writes == []
            stop.set()
            await serving.wait_leading()
            await swap.go.finished.wait()  # its worker thread may return after trio-ccm acts
            await trio.testing.wait_all_tasks_blocked()
            released_at, released = swap.go.writes[-1]
            assert released_at == 10.5
            assert (released.holder, released.duration_s, released.transitions) == ("", 1, 0)
            assert released.acquire == released.renew == wall_clock()
            assert swap.leading == [[10.5]]
            assert swap.transport.writes == [(10.5, "PUT", serving.identity)]
            lease = swap.lease()
            assert_trio_ccm_fields(lease, serving, at=10.5)
            assert lease["spec"]["leaseTransitions"] == 1
            await trio.sleep(5)
            assert min(swap.trio_ccm_cloud_calls()) >= 10.5


async def test_a_go_ccm_does_not_take_the_lease_trio_ccm_holds(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """trio-ccm leads from t=0 and renews every 2 s; the Go CCM, trying every 2 s from
    t=1, always sees a held Lease whose record has just changed, so it never takes it.
    trio-ccm's graceful shutdown at t=30.5 releases the Lease; the Go CCM's next attempt
    (t=31) takes it, after trio-ccm's controllers and cloud calls have stopped."""
    with trio.fail_after(120):
        async with open_swap(tmp_path, autojump_clock) as swap:
            serving = await swap.start_trio_ccm()
            await serving.wait_leading()
            assert_trio_ccm_fields(swap.lease(), serving, at=0.0)
            stop = trio.Event()
            await trio.sleep_until(1.0)
            swap.nursery.start_soon(partial(swap.go.lead, stop, release_on_cancel=True))
            await trio.sleep_until(30.5)
            attempts = swap.go.attempts
            assert [t for t, _, _ in attempts] == [1.0 + 2 * k for k in range(15)]
            assert {(ok, holder) for _, ok, holder in attempts} == {(False, serving.identity)}
            # Each attempt saw a record changed since the previous one (a fresh renewTime),
            # so by the Go CCM's own clock the Lease never came near expiry.
            assert swap.go.changes_seen == [t for t, _, _ in attempts]
            renewals = [t for t, _, _ in swap.transport.writes]
            assert renewals == [2.0 * k for k in range(16)]
            assert swap.go.writes == []
            serving.shut_down()
            await serving.wait_leading(False)
            await trio.sleep_until(31.5)
            assert swap.go.acquired_at == 31.0
            assert swap.transport.writes[-1] == (30.5, "PUT", "")
            assert len(swap.leading) == 1
            assert swap.leading[0][1] <= 30.5
            assert max(swap.trio_ccm_cloud_calls()) <= 30.5
            lease = swap.lease()
            assert lease["spec"]["holderIdentity"] == GO_IDENTITY
            assert lease["spec"]["leaseTransitions"] == 1
            stop.set()


# -- 3. metric names -------------------------------------------------------------------------

DELAY_BUCKETS = ["1.0", "4.0", "16.0", "64.0", "256.0", "1024.0", "+Inf"]
SYNC_LATENCY_BUCKETS = [str(2.0**k) for k in range(15)] + ["+Inf"]
CLIENT_LATENCY_BUCKETS = [
    *("0.005", "0.025", "0.1", "0.25", "0.5", "1.0", "2.0", "4.0", "8.0", "15.0", "30.0"),
    *("60.0", "+Inf"),
]


@dataclass(frozen=True)
class Upstream:
    """An upstream metric as exposed: name (counters with `_total`), type, label names."""

    name: str
    type: str
    labels: tuple[str, ...] = ()
    buckets: tuple[str, ...] | None = None


UPSTREAM_METRICS = [
    # k8s.io/cloud-provider controllers/*/metrics.go
    Upstream(
        "node_controller_cloud_provider_taint_removal_delay_seconds",
        "histogram",
        buckets=tuple(DELAY_BUCKETS),
    ),
    Upstream(
        "node_controller_initial_node_sync_delay_seconds", "histogram", buckets=tuple(DELAY_BUCKETS)
    ),
    Upstream("service_controller_loadbalancer_sync_total", "counter"),
    Upstream("service_controller_nodesync_error_total", "counter"),
    Upstream(
        "service_controller_nodesync_latency_seconds",
        "histogram",
        buckets=tuple(SYNC_LATENCY_BUCKETS),
    ),
    Upstream(
        "service_controller_update_loadbalancer_host_latency_seconds",
        "histogram",
        buckets=tuple(SYNC_LATENCY_BUCKETS),
    ),
    Upstream("route_controller_route_sync_total", "counter"),
    Upstream("running_managed_controllers", "gauge", ("name", "manager")),
    # client-go (metrics/prometheus/clientgo)
    Upstream("rest_client_requests_total", "counter", ("code", "method", "host")),
    Upstream(
        "rest_client_request_duration_seconds",
        "histogram",
        ("verb", "host"),
        tuple(CLIENT_LATENCY_BUCKETS),
    ),
    Upstream(
        "rest_client_rate_limiter_duration_seconds",
        "histogram",
        ("verb", "host"),
        tuple(CLIENT_LATENCY_BUCKETS),
    ),
    Upstream("rest_client_request_retries_total", "counter", ("code", "verb", "host")),
    Upstream("leader_election_master_status", "gauge", ("name",)),
    Upstream("leader_election_slowpath_total", "counter", ("name",)),
    # kube-controller-manager's nodeipam range allocator (the example binary's nodeipam)
    Upstream("node_ipam_controller_cidrset_cidrs_allocations_total", "counter", ("clusterCIDR",)),
    Upstream("node_ipam_controller_cidrset_cidrs_releases_total", "counter", ("clusterCIDR",)),
    Upstream("node_ipam_controller_cidrset_usage_cidrs", "gauge", ("clusterCIDR",)),
    Upstream("node_ipam_controller_cirdset_max_cidrs", "gauge", ("clusterCIDR",)),
]

NOT_PROVIDED: dict[str, str] = {
    # Upstream metrics trio-ccm does not have, and why.
    **dict.fromkeys(
        (
            "workqueue_depth",
            "workqueue_adds_total",
            "workqueue_queue_duration_seconds",
            "workqueue_work_duration_seconds",
            "workqueue_unfinished_work_seconds",
            "workqueue_longest_running_processor_seconds",
            "workqueue_retries_total",
        ),
        "no work queues: per-object actors fed by coalescing mailboxes (DESIGN section 3); "
        "their state is on /debug/actors",
    ),
    **dict.fromkeys(
        ("rest_client_request_size_bytes", "rest_client_response_size_bytes"),
        "not implemented in kube/client.py",
    ),
    **dict.fromkeys(
        (
            "rest_client_dns_resolution_duration_seconds",
            "rest_client_transport_cache_entries",
            "rest_client_transport_create_calls_total",
            "rest_client_exec_plugin_certificate_rotation_age",
            "rest_client_exec_plugin_ttl_seconds",
            "rest_client_exec_plugin_call_total",
        ),
        "client-go transport and exec-plugin internals with no httpx counterpart",
    ),
    "node_ipam_controller_cidrset_allocation_tries_per_request": "not implemented in "
    "actors/node_ipam.py",
    "kubernetes_build_info": "Go build information (our version is on /configz and in the log)",
    **dict.fromkeys(
        (
            "apiserver_delegated_authn_request_total",
            "apiserver_delegated_authn_request_duration_seconds",
            "apiserver_delegated_authz_request_total",
            "apiserver_delegated_authz_request_duration_seconds",
        ),
        "the endpoints do not delegate authentication (docs/operations.md)",
    ),
    **dict.fromkeys(
        ("kubernetes_healthcheck", "kubernetes_healthchecks_total"),
        "/metrics/slis is not served",
    ),
    **dict.fromkeys(
        ("cloudprovider_aws_api_request_duration_seconds", "cloudprovider_aws_api_request_errors"),
        "provider-specific upstream; here every provider's calls are measured at the "
        "interface instead (GENERIC_CLOUD_METRICS)",
    ),
    "go_*": "the Go runtime's collector",
    "process_*": "serve() fills only the registry it is given (a fresh one by default); "
    "the trio-ccm command registers the process collector in its own registry",
}


GENERIC_CLOUD_METRICS = [
    # Ours (DESIGN section 5), in place of each provider's own.
    Upstream("cloudprovider_api_request_duration_seconds", "histogram", ("method",)),
    Upstream("cloudprovider_api_request_errors_total", "counter", ("method",)),
    Upstream("cloudprovider_api_throttles_total", "counter", ("method",)),
]


def exposed(registry: CollectorRegistry) -> dict[str, tuple[str, set[str], list[Any]]]:
    """The text exposition as {exposed family name: (type, label names, samples)}."""
    families = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        name = family.name + "_total" if family.type == "counter" else family.name
        labels = {k for s in family.samples for k in s.labels if k not in ("le", "quantile")}
        families[name] = (family.type, labels, family.samples)
    return families


async def set_ready(api: ApiServer, name: str, status: str) -> None:
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://emulator") as http:
        response = await http.patch(
            f"/api/v1/nodes/{name}/status",
            json={"status": {"conditions": [ready_condition(status)]}},
            headers={"content-type": "application/strategic-merge-patch+json"},
        )
    response.raise_for_status()


async def nodes(api: ApiServer) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://emulator") as http:
        items: list[dict[str, Any]] = (await http.get("/api/v1/nodes")).json()["items"]
    return items


async def test_upstream_metric_names(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A leading replica with every controller, after Node initialisation, IPAM, routes, a
    load balancer and a node sync, exposes each upstream metric under its upstream name,
    type, labels and buckets; the upstream metrics it does not have are absent, as listed
    in NOT_PROVIDED with the reason."""
    with trio.fail_after(300):
        async with open_swap(tmp_path, autojump_clock) as swap:
            swap.api.create(make_service("web"))
            # One 503 for the Node list: the client retries it (rest_client_request_retries).
            swap.api.faults.inject_error(503, verb="list", resource="nodes", count=1)
            serving = await swap.start_trio_ccm(allocate_node_cidrs=True)
            await serving.wait_leading()
            await trio.sleep(30)
            node_b = register_node(swap.api, swap.cloud, "node-b")  # a node sync for the LB
            await trio.sleep(60)
            swap.cloud.terminate(node_b)  # its kubelet stops: the Node is deleted, its
            await set_ready(swap.api, "node-b", "Unknown")  # pod CIDR released
            await trio.sleep(60)
            assert [n["metadata"]["name"] for n in await nodes(swap.api)] == ["node-a"]
            families = exposed(swap.registry)
    missing = [m.name for m in UPSTREAM_METRICS if m.name not in families]
    assert missing == []
    for metric in UPSTREAM_METRICS:
        kind, labels, samples = families[metric.name]
        assert (metric.name, kind) == (metric.name, metric.type)
        assert (metric.name, labels) == (metric.name, set(metric.labels))
        if metric.buckets is not None:
            les = [s.labels["le"] for s in samples if s.name.endswith("_bucket")]
            assert les[: len(metric.buckets)] == list(metric.buckets), metric.name
    for metric in GENERIC_CLOUD_METRICS:
        assert metric.name in families, metric.name
        kind, labels, samples = families[metric.name]
        assert kind == metric.type, metric.name
        assert labels <= set(metric.labels), metric.name  # no samples: no throttle yet

    def value(metric: str, /, **labels: str) -> float:
        _, _, samples = families[metric]
        return sum(
            s.value
            for s in samples
            if s.name in (metric, f"{metric}_count") and labels.items() <= s.labels.items()
        )

    assert value("node_controller_cloud_provider_taint_removal_delay_seconds") == 2
    assert value("node_controller_initial_node_sync_delay_seconds") == 2
    assert value("route_controller_route_sync_total") >= 1
    assert value("service_controller_loadbalancer_sync_total") >= 1
    assert value("service_controller_update_loadbalancer_host_latency_seconds") >= 1
    assert value("service_controller_nodesync_latency_seconds") >= 1
    assert value("leader_election_master_status", name=LEASE_NAME) == 1
    for name in ALL_CONTROLLERS:
        assert value("running_managed_controllers", name=name) == 1, name
    assert value("node_ipam_controller_cidrset_cidrs_allocations_total") == 2
    assert value("node_ipam_controller_cidrset_cidrs_releases_total") == 1
    assert value("rest_client_requests_total", method="PUT") >= 1
    assert value("rest_client_request_retries_total", code="503") == 1
    for name in NOT_PROVIDED:
        if name.endswith("*"):
            assert not [f for f in families if f.startswith(name[:-1])], name
        else:
            assert name not in families, name
