"""serve(): the supervisor, embedded in a host nursery, against the emulator in-process.

A replica here runs no built-in controller (the test cloud has no capability) but one
extra controller, `probe`, which records the virtual instants it runs between. So these
tests show the embedding contract and the leadership scope at once.
"""

from __future__ import annotations

import datetime as dt
import socket
from collections.abc import Callable

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from tests.helpers.supervisor import FixedJitter, Link, NoCapabilities, Probe
from trio_ccm.actors.controller import Controller, ControllerContext
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.errors import ConfigError
from trio_ccm.kube.leader import LeaseLostError
from trio_ccm.settings import Settings
from trio_ccm.supervisor import Serving, serve
from trio_ccm.testing.factories import make_lease
from trio_ccm.testing.harness import emulator_connection, wait_for
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.apiserver.errors import ApiError

LEASE = ("coordination.k8s.io/v1", "Lease", "cloud-controller-manager", "kube-system")


def settings(**changes: object) -> Settings:
    base: dict[str, object] = {"secure_port": 0, "controllers": ("*",)}
    base.update(changes)
    return Settings(**base)  # type: ignore[arg-type]


async def start(
    nursery: trio.Nursery,
    server: ApiServer,
    probe: Probe,
    *,
    identity: str,
    link: Link | None = None,
    cfg: Settings | None = None,
    cloud: NoCapabilities | None = None,
) -> Serving:
    serving: Serving = await nursery.start(
        lambda task_status: serve(
            cfg or settings(),
            cloud or NoCapabilities(),
            controllers=[probe.controller()],
            connection=emulator_connection(),
            transport=link or server.transport(),
            registry=CollectorRegistry(),
            identity=identity,
            rng=FixedJitter(),
            task_status=task_status,
        )
    )
    return serving


def make_node(server: ApiServer, name: str) -> None:
    server.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})


def count_tasks() -> int:
    def walk(task: trio.lowlevel.Task) -> int:
        return 1 + sum(walk(t) for n in task.child_nurseries for t in n.child_tasks)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    return walk(root)


async def test_serve_in_a_host_nursery_leaves_nothing_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Started and cancelled inside another program's nursery, serve() leaves no task and
    releases the Lease."""
    server = ApiServer(seed=1)
    make_node(server, "node-a")
    probe = Probe()
    before = count_tasks()
    with trio.fail_after(60):
        async with trio.open_nursery() as host:
            serving = await start(host, server, probe, identity="a")
            await serving.wait_leading()
            assert trio.current_time() == 0.0
            await trio.sleep(1)
            assert probe.handled == [("node-a", 0.0)]
            assert serving.controllers == ["probe"]
            host.cancel_scope.cancel()
    assert count_tasks() == before
    assert server.get(*LEASE)["spec"].get("holderIdentity", "") == ""
    assert probe.terms[0][1] == 1.0


async def test_controllers_run_only_while_leading_and_rerun_after_a_lost_lease(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Cut off from the API server, the leader stops its controllers at its renew deadline,
    the other replica starts its own no earlier than a lease duration after the last
    renewal, and the first replica campaigns again in the same process."""
    server = ApiServer(seed=1)
    probe_a, probe_b = Probe(), Probe()
    link_a = Link(server)
    with trio.fail_after(120):
        async with trio.open_nursery() as host:
            a = await start(host, server, probe_a, identity="a", link=link_a)
            await a.wait_leading()
            b = await start(host, server, probe_b, identity="b")
            await trio.sleep(5)
            assert not b.leading
            # a renewed at t=4 (every 2 s); cut at t=5: renew deadline t=14, expiry t=19.
            link_a.cut = True
            await a.wait_leading(False)
            assert trio.current_time() == 14.0
            assert probe_a.terms[0][1] == 14.0
            await b.wait_leading()
            # b watches the Lease: it saw a's last renewal (t=4) at once and takes over when
            # that sighting has aged a lease duration: t=19.
            assert trio.current_time() == 19.0
            link_a.cut = False
            await trio.sleep(30)
            assert not a.leading
            assert b.leading
            assert a.leadership_starts == 1
            host.cancel_scope.cancel()


async def test_graceful_shutdown_hands_over_within_a_retry_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """shut_down() drains, releases the Lease and returns; the standby leads at its next
    attempt (within 2 s), not after the lease duration."""
    server = ApiServer(seed=1)
    probe_a, probe_b = Probe(), Probe()
    with trio.fail_after(60):
        async with trio.open_nursery() as host:
            a_done = trio.Event()

            async def run_a(task_status: trio.TaskStatus[Serving]) -> None:
                await serve(
                    settings(),
                    NoCapabilities(),
                    controllers=[probe_a.controller()],
                    connection=emulator_connection(),
                    transport=server.transport(),
                    registry=CollectorRegistry(),
                    identity="a",
                    rng=FixedJitter(),
                    task_status=task_status,
                )
                a_done.set()

            a: Serving = await host.start(run_a)
            await a.wait_leading()
            b = await start(host, server, probe_b, identity="b")
            await trio.sleep(10.5)
            a.shut_down()
            await a_done.wait()
            stopped = trio.current_time()
            assert stopped == 10.5
            await b.wait_leading()
            assert trio.current_time() - stopped <= 2.0
            host.cancel_scope.cancel()


async def test_exit_on_lost_lease_raises(autojump_clock: trio.testing.MockClock) -> None:
    """With --exit-on-lost-lease, losing the Lease ends serve() with LeaseLostError."""
    server = ApiServer(seed=1)
    link = Link(server)
    with trio.fail_after(60), pytest.RaisesGroup(LeaseLostError, flatten_subgroups=True):
        async with trio.open_nursery() as host:
            a = await start(
                host,
                server,
                Probe(),
                identity="a",
                link=link,
                cfg=settings(exit_on_lost_lease=True),
            )
            await a.wait_leading()
            link.cut = True
            await trio.sleep_forever()


async def test_without_election_controllers_start_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """--leader-elect=false runs the controllers as soon as the caches are synced."""
    server = ApiServer(seed=1)
    probe = Probe()
    cloud = NoCapabilities()
    with trio.fail_after(10):
        async with trio.open_nursery() as host:
            serving = await start(
                host, server, probe, identity="a", cfg=settings(leader_elect=False), cloud=cloud
            )
            await serving.wait_leading()
            assert serving.elector is None
            assert cloud.initialized == 1
            host.cancel_scope.cancel()
    with pytest.raises(ApiError, match="not found"):
        server.get(*LEASE)


@pytest.mark.parametrize(
    ("controllers", "disabled_by_default", "runs"),
    [
        pytest.param(("*",), False, True, id="star-enables-extra"),
        pytest.param(("*", "-probe"), False, False, id="minus-disables-extra"),
        pytest.param(("*",), True, False, id="disabled-by-default"),
        pytest.param(("*", "probe"), True, True, id="named-enables-disabled-by-default"),
        pytest.param(("cloud-node",), False, False, id="only-a-builtin"),
    ],
)
async def test_extra_controllers_follow_the_controllers_flag(
    autojump_clock: trio.testing.MockClock,
    controllers: tuple[str, ...],
    disabled_by_default: bool,
    runs: bool,
) -> None:
    """Extra controllers are enabled and disabled by name like the built-in ones."""
    server = ApiServer(seed=1)
    probe = Probe()
    with trio.fail_after(10):
        async with trio.open_nursery() as host:
            serving: Serving = await host.start(
                lambda task_status: serve(
                    settings(leader_elect=False, controllers=controllers),
                    NoCapabilities(),
                    controllers=[probe.controller(disabled_by_default=disabled_by_default)],
                    connection=emulator_connection(),
                    transport=server.transport(),
                    task_status=task_status,
                )
            )
            await serving.wait_leading()
            await trio.sleep(1)
            assert probe.running is runs
            host.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("controllers", "message"),
    [
        pytest.param(("*", "nope"), "unknown controller 'nope'", id="unknown"),
    ],
)
async def test_bad_controller_names_are_config_errors(
    controllers: tuple[str, ...], message: str
) -> None:
    """An unknown name in --controllers fails before anything starts, listing known names."""
    server = ApiServer(seed=1)
    with pytest.raises(ConfigError, match=message) as info:
        await serve(
            settings(controllers=controllers),
            NoCapabilities(),
            controllers=[Probe().controller()],
            connection=emulator_connection(),
            transport=server.transport(),
        )
    assert "probe" in str(info.value)
    assert "cloud-node-controller" in str(info.value)


async def test_a_crashing_controller_ends_serve_and_releases_the_lease(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A controller whose body raises takes serve() down (fatal), after releasing the Lease."""
    server = ApiServer(seed=1)

    class Crash(Controller):
        name = "crash"

        async def run(self, ctx: ControllerContext) -> None:
            await trio.sleep(3)
            raise RuntimeError("bug in a controller")

    with trio.fail_after(10), pytest.RaisesGroup(RuntimeError, flatten_subgroups=True):
        await serve(
            settings(),
            NoCapabilities(),
            controllers=[Crash],
            connection=emulator_connection(),
            transport=server.transport(),
            identity="a",
        )
    assert trio.current_time() == 3.0
    assert server.get(*LEASE)["spec"].get("holderIdentity", "") == ""


def _probe(serving: Serving, endpoint: str) -> dict[str, str | None]:
    checks = getattr(serving.endpoints, endpoint)
    return {c.name: c.probe() for c in checks}


async def test_health_checks_tell_the_truth_in_every_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """readyz fails until the caches are synced and the controllers run; the leaderElection
    check fails once a leader has not renewed for lease duration + 20 s; a standby passes."""
    server = ApiServer(seed=1)
    link = Link(server)
    link.cut = True
    probe = Probe()
    ok: Callable[[dict[str, str | None]], bool] = lambda r: all(v is None for v in r.values())  # noqa: E731
    with trio.fail_after(200):
        async with trio.open_nursery() as host:
            a = await start(
                host,
                server,
                probe,
                identity="a",
                link=link,
                cfg=settings(leader_elect_renew_deadline_s=10.0),
            )
            ready = _probe(a, "readyz")
            assert ready["informer-sync"] is not None
            assert ok(_probe(a, "livez"))
            link.cut = False
            await a.wait_leading()
            await trio.sleep(0.1)
            assert ok(_probe(a, "readyz"))
            assert ok(_probe(a, "healthz"))
            assert set(_probe(a, "healthz")) == {"leaderElection", "probe"}
            host.cancel_scope.cancel()


async def test_a_standby_whose_cloud_is_dead_says_so_at_start() -> None:
    """A replica that does not lead (another holds the Lease) still asks its cloud once at
    start: a dead cloud URL (a closed loopback port) is reported as `cloud.unreachable`
    naming the cloud, while the replica stays a healthy standby that acts on nothing."""
    server = ApiServer(seed=1)
    server.create(make_lease("other", lease_duration_s=3600, renewed=dt.datetime.now(dt.UTC)))
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    provider = SimProvider(url=f"http://127.0.0.1:{port}", replica="b", timeout_s=2.0)
    probe = Probe()
    with trio.fail_after(30), capture_logs() as logs:
        async with trio.open_nursery() as host:
            serving: Serving = await host.start(
                lambda task_status: serve(
                    settings(leader_elect=True, controllers=("probe",)),
                    provider,
                    controllers=[probe.controller()],
                    connection=emulator_connection(),
                    transport=server.transport(),
                    registry=CollectorRegistry(),
                    identity="b",
                    task_status=task_status,
                )
            )
            await wait_for(lambda: any(e["event"] == "cloud.unreachable" for e in logs))
            assert not serving.leading
            host.cancel_scope.cancel()
    await provider.aclose()
    (said,) = [e for e in logs if e["event"] == "cloud.unreachable"]
    assert said["log_level"] == "error"
    assert said["provider"] == "sim"
    assert f"127.0.0.1:{port}" in said["error"]
    assert "endpoint" in said["fix"]
    assert probe.terms == []
