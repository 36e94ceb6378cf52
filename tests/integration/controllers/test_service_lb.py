"""service-lb-controller against the emulator and the simulated cloud (both in-process).

One test per upstream rule (upstream-ccm.md §2.3), table-driven where the rule is a table,
plus the improvements listed in the controller's docstring. Services created before the
replica starts are served at t=0; a test changes the world at whole seconds (t=1 ...), so
each write and cloud call it expects has an exact virtual time.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry

from tests.helpers.services import FINALIZER, JITTER, expected_delays
from tests.helpers.world import LoadBalancersDouble, ProviderDouble, World, moments, open_world
from trio_ccm.cloud.provider import (
    ImplementedElsewhere,
    LoadBalancerIngress,
    LoadBalancers,
    LoadBalancerStatus,
    NodeInfo,
    ServiceInfo,
)
from trio_ccm.errors import RetryAfter
from trio_ccm.testing import lb_name, make_service, wait_for
from trio_ccm.testing.harness import Write

SERVICE_LB = "--controllers=service"
SERVICES = "/api/v1/namespaces/default/services"
EVENTS = "/api/v1/namespaces/default/events"
QUIET_S = 10.0
"""Past the first retry (5 s): where nothing more may happen, this long shows it."""


def backends(world: World, created: dict[str, Any]) -> tuple[str, ...] | None:
    lb = world.cloud.load_balancer(lb_name(created))
    return None if lb is None else lb.nodes


def ingress(world: World, name: str) -> list[dict[str, str]] | None:
    found: list[dict[str, str]] | None = (
        world.service(name).get("status", {}).get("loadBalancer", {}).get("ingress")
    )
    return found


def calls(world: World, method: str) -> list[float]:
    """When the cloud saw calls to `method` (a method or a family)."""
    return [c.time for c in world.cloud.calls_by(method)]


async def reasons(world: World, name: str) -> list[str]:
    return [
        e["reason"]
        for e in await world.events()
        if e["involvedObject"]["kind"] == "Service" and e["involvedObject"]["name"] == name
    ]


def status_writes(world: World, name: str) -> list[float]:
    """When the Service's status was written."""
    return [w.at for w in world.transport.service_writes(name) if w.path.endswith("/status")]


def event_writes(world: World) -> list[float]:
    """When Events were recorded (created, or counted again)."""
    return [w.at for w in world.transport.writes if w.path.startswith(EVENTS)]


async def patch(world: World, name: str, body: dict[str, Any], *, kind: str = "merge") -> None:
    response = await world.http.patch(
        f"{SERVICES}/{name}",
        json=body,
        headers={"content-type": f"application/{kind}-patch+json"},
    )
    response.raise_for_status()


async def delete(world: World, name: str) -> None:
    response = await world.http.delete(f"{SERVICES}/{name}")
    response.raise_for_status()


# -- ensure ---------------------------------------------------------------------------------
async def test_ensure_adds_the_finalizer_first_then_the_status(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Finalizer (through services/status) before the cloud call, one status write, the
    upstream Events in order, and nothing more on the echoes."""
    async with open_world() as world:
        world.register("node-a", taints=[])
        created = world.api.create(make_service("web"))
        async with world.running(SERVICE_LB):
            await wait_for(lambda: bool(ingress(world, "web")))
            await trio.sleep(QUIET_S)  # the echoes of both writes
            svc = world.service("web")
            lb = world.cloud.load_balancer(lb_name(created))
            assert lb is not None
            assert svc["metadata"]["finalizers"] == [FINALIZER]
            assert svc["status"]["loadBalancer"] == {"ingress": [{"ip": lb.ingress_ip}]}
            assert lb.service == "default/web"
            assert lb.nodes == ("node-a",)
            assert [(p.port, p.protocol) for p in lb.ports] == [(80, "TCP")]
            assert await reasons(world, "web") == ["EnsuringLoadBalancer", "EnsuredLoadBalancer"]
            # Both writes went to the status subresource, at once, with an Event after each,
            # and the echoes cost nothing.
            status = f"{SERVICES}/web/status"
            assert world.transport.writes == [
                Write(0.0, "PATCH", status),
                Write(0.0, "POST", EVENTS),
                Write(0.0, "PATCH", status),
                Write(0.0, "POST", EVENTS),
            ]
            assert calls(world, "loadbalancers") == [0.0]
            assert len(world.cloud.calls_by("PutLoadBalancer")) == 1


@pytest.mark.parametrize(
    ("spec", "managed"),
    [
        pytest.param({}, True, id="load-balancer"),
        pytest.param({"type": "ClusterIP"}, False, id="cluster-ip"),
        pytest.param({"type": "NodePort"}, False, id="node-port"),
        pytest.param({"loadBalancerClass": "example.com/other"}, False, id="other-class"),
    ],
)
async def test_which_services(
    autojump_clock: trio.testing.MockClock, spec: dict[str, Any], managed: bool
) -> None:
    """Only type LoadBalancer without a loadBalancerClass: the others see no cloud call."""
    async with open_world() as world:
        world.register("node-a", taints=[])
        world.api.create(make_service("web", **spec))
        async with world.running(SERVICE_LB):
            await trio.sleep(QUIET_S)
        svc = world.service("web")
        assert (svc["metadata"].get("finalizers") == [FINALIZER]) is managed
        assert bool(world.cloud.load_balancers()) is managed
        lb_calls = [c for c in world.cloud.calls_by() if "LoadBalancer" in c.method]
        assert [c.time for c in lb_calls] == ([0.0] if managed else [])
        assert status_writes(world, "web") == ([0.0, 0.0] if managed else [])


@pytest.mark.parametrize(
    ("labels", "taints", "deleting", "backend"),
    [
        pytest.param({}, [], False, True, id="plain"),
        pytest.param({"node.kubernetes.io/exclude-from-external-load-balancers": ""}, [], False,
                     False, id="exclude-label-empty"),
        pytest.param({"node.kubernetes.io/exclude-from-external-load-balancers": "true"}, [],
                     False, False, id="exclude-label-true"),
        pytest.param({"node.kubernetes.io/exclude-from-external-load-balancers": "yes"}, [],
                     False, False, id="exclude-label-unparsable"),
        pytest.param({"node.kubernetes.io/exclude-from-external-load-balancers": "false"}, [],
                     False, True, id="exclude-label-false"),
        pytest.param({"node.kubernetes.io/exclude-from-external-load-balancers": "F"}, [],
                     False, True, id="exclude-label-F"),
        pytest.param({}, [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}],
                     False, False, id="autoscaler-taint"),
        pytest.param({}, [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}],
                     False, True, id="not-ready-taint-irrelevant"),
        pytest.param({}, [], True, False, id="being-deleted"),
    ],
)  # fmt: skip
async def test_node_predicates(
    autojump_clock: trio.testing.MockClock,
    labels: dict[str, str],
    taints: list[dict[str, str]],
    deleting: bool,
    backend: bool,
) -> None:
    """The stable node set: not being deleted, not excluded by label, no autoscaler taint
    (readiness is no predicate: node-b is NotReady and still a backend)."""
    async with open_world() as world:
        world.register("node-a", taints=taints, labels=labels)
        world.register("node-b", taints=[], ready="False")
        if deleting:
            node = world.node("node-a")
            node["metadata"]["finalizers"] = ["example.com/hold"]
            (await world.http.put("/api/v1/nodes/node-a", json=node)).raise_for_status()
            (await world.http.delete("/api/v1/nodes/node-a")).raise_for_status()
        created = world.api.create(make_service("web"))
        async with world.running(SERVICE_LB):
            await wait_for(lambda: bool(ingress(world, "web")))
            await trio.sleep(QUIET_S)
        assert backends(world, created) == (("node-a", "node-b") if backend else ("node-b",))
        # The first ensure had the right set: no backends update followed.
        assert calls(world, "loadbalancers") == [0.0]


async def test_no_nodes_warns_and_still_ensures(autojump_clock: trio.testing.MockClock) -> None:
    """Without any Node the load balancer is still ensured (no backends), with upstream's
    UnAvailableLoadBalancer Warning."""
    async with open_world() as world:
        created = world.api.create(make_service("web"))
        async with world.running(SERVICE_LB):
            await wait_for(lambda: bool(ingress(world, "web")))
            await wait_for(lambda: len(event_writes(world)) == 3)
        assert backends(world, created) == ()
        events = [e for e in await world.events() if e["reason"] == "UnAvailableLoadBalancer"]
        assert [(e["type"], e["message"]) for e in events] == [
            ("Warning", "There are no available nodes for LoadBalancer")
        ]
        assert world.service("web")["status"]["loadBalancer"]["ingress"]
        assert calls(world, "loadbalancers") == [0.0]
        assert status_writes(world, "web") == [0.0, 0.0]
        assert event_writes(world) == [0.0] * 3  # Ensuring, the Warning, Ensured


@pytest.mark.parametrize(
    ("change", "ensures"),
    [
        pytest.param({"metadata": {"labels": {"team": "a"}}}, 1, id="label-no-trigger"),
        pytest.param({"metadata": {"annotations": {"any": "x"}}}, 2, id="annotation"),
        pytest.param({"spec": {"sessionAffinity": "ClientIP"}}, 2, id="session-affinity"),
        pytest.param({"spec": {"externalTrafficPolicy": "Local"}}, 2, id="traffic-policy"),
        pytest.param({"spec": {"loadBalancerSourceRanges": ["198.51.100.0/24"]}}, 2,
                     id="source-ranges"),
        pytest.param({"spec": {"internalTrafficPolicy": "Local"}}, 1, id="internal-policy-no"),
        pytest.param({"spec": {"ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}},
                     2, id="ports"),
    ],
)  # fmt: skip
async def test_what_changes_re_ensure(
    autojump_clock: trio.testing.MockClock, change: dict[str, Any], ensures: int
) -> None:
    """upstream's needsUpdate: labels and internalTrafficPolicy do not re-ensure, the rest
    does; the status is written again only if the ingress changed (it did not)."""
    async with open_world() as world:
        world.register("node-a", taints=[])
        created = world.api.create(make_service("web"))
        async with world.running(SERVICE_LB):
            await wait_for(lambda: bool(ingress(world, "web")))
            await trio.sleep_until(1)
            await patch(world, "web", change)
            await trio.sleep(QUIET_S)
        # Re-ensured the moment the change arrived, or not at all.
        assert calls(world, "PutLoadBalancer") == [0.0, 1.0][:ensures]
        assert status_writes(world, "web") == [0.0, 0.0]  # finalizer, first ingress
        lb = world.cloud.load_balancer(lb_name(created))
        assert lb is not None
        if "sourceRanges" in str(change) or "loadBalancerSourceRanges" in str(change):
            assert lb.source_ranges == ("198.51.100.0/24",)


async def test_retry_after_waits_exactly_and_backoff_grows(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A provisioning load balancer (202 + Retry-After: RetryAfter) is asked again after
    exactly that; a plain error backs off 5 s, 10 s, 20 s (jitter shortens by <= 10 %)."""
    async with open_world() as world:
        world.register("node-a", taints=[])
        world.cloud.lb_provisioning_s = 7.0
        world.api.create(make_service("slow"))
        async with world.running(SERVICE_LB):
            await wait_for(lambda: bool(ingress(world, "slow")), poll_s=1)
            await trio.sleep(QUIET_S)
        assert calls(world, "PutLoadBalancer") == [0.0, 7.0]
        assert status_writes(world, "slow") == [0.0, 7.0]  # the finalizer, then the ingress
        assert world.service("slow")["status"]["loadBalancer"]["ingress"]

    started = 20.0  # a second replica, in a world of its own
    await trio.sleep_until(started)
    async with open_world() as world:
        world.register("node-a", taints=[])
        world.cloud.faults.error("PutLoadBalancer", status=500, count=3)
        world.api.create(make_service("flaky"))
        async with world.running(SERVICE_LB):
            with trio.fail_after(60):
                # The times are the records': polling once a second only ends the wait.
                await wait_for(lambda: bool(ingress(world, "flaky")), poll_s=1)
        puts = calls(world, "PutLoadBalancer")
        assert puts[0] == started
        gaps = [b - a for a, b in itertools.pairwise(puts)]
        assert len(gaps) == 3
        for gap, full in zip(gaps, expected_delays(3), strict=True):
            assert (1 - JITTER) * full <= gap <= full
        # The ingress is written by the attempt that succeeds, at once.
        assert status_writes(world, "flaky") == [started, puts[-1]]
        assert world.service("flaky")["status"]["loadBalancer"]["ingress"]
        failed = [e for e in await world.events() if e["reason"] == "SyncLoadBalancerFailed"]
        assert failed[0]["message"].startswith("Error syncing load balancer: ")
        assert failed[0]["count"] == 3 or len(failed) == 3


class ProxyModeLoadBalancers:
    """Wraps the sim's load balancers: ingress in ipMode Proxy, or ImplementedElsewhere."""

    def __init__(self, inner: Any, *, elsewhere: bool = False) -> None:
        self.inner = inner
        self.elsewhere = elsewhere
        self.ensured = 0

    def load_balancer_name(self, cluster: str, service: ServiceInfo) -> str:
        name: str = self.inner.load_balancer_name(cluster, service)
        return name

    async def get_load_balancer(
        self, cluster: str, service: ServiceInfo
    ) -> LoadBalancerStatus | None:
        status: LoadBalancerStatus | None = await self.inner.get_load_balancer(cluster, service)
        return status

    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> LoadBalancerStatus:
        self.ensured += 1
        if self.elsewhere:
            raise ImplementedElsewhere("built by the example.com controller")
        status: LoadBalancerStatus = await self.inner.ensure_load_balancer(cluster, service, nodes)
        return LoadBalancerStatus(
            tuple(msgspec.structs.replace(i, ip_mode="Proxy") for i in status.ingress)
        )

    async def update_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> None:
        if self.elsewhere:
            raise ImplementedElsewhere("built by the example.com controller")
        await self.inner.update_load_balancer(cluster, service, nodes)

    async def ensure_load_balancer_deleted(self, cluster: str, service: ServiceInfo) -> None:
        await self.inner.ensure_load_balancer_deleted(cluster, service)


async def test_ip_mode_is_kept(autojump_clock: trio.testing.MockClock) -> None:
    """The ingress's ipMode (Proxy) from the provider reaches the status as given, in the
    one status write of the ingress."""
    async with open_world() as world:
        world.register("node-a", taints=[])
        world.api.create(make_service("web"))
        wrapped: list[ProxyModeLoadBalancers] = []

        def wrap(provider: Any) -> ProviderDouble:
            wrapped.append(ProxyModeLoadBalancers(provider.load_balancers))
            return ProviderDouble(provider, load_balancers=wrapped[0])

        async with world.running(SERVICE_LB, wrap=wrap):
            await wait_for(lambda: bool(ingress(world, "web")))
            await trio.sleep(QUIET_S)
        ingress_now = world.service("web")["status"]["loadBalancer"]["ingress"]
        assert [i["ipMode"] for i in ingress_now] == ["Proxy"]
        assert status_writes(world, "web") == [0.0, 0.0]


async def test_implemented_elsewhere_is_silent_success(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No status, no Ensured Event, no retry; the finalizer is still ours, and deletion
    still asks the provider (which must answer for its own load balancers only)."""
    async with open_world() as world:
        world.register("node-a", taints=[])
        world.register("node-b", taints=[])
        world.api.create(make_service("web"))
        doubles: list[ProxyModeLoadBalancers] = []

        def wrap(provider: Any) -> ProviderDouble:
            doubles.append(ProxyModeLoadBalancers(provider.load_balancers, elsewhere=True))
            return ProviderDouble(provider, load_balancers=doubles[0])

        async with world.running(SERVICE_LB, wrap=wrap):
            await wait_for(lambda: bool(doubles) and doubles[0].ensured == 1)
            await trio.sleep_until(1)
            world.register("node-c", taints=[])
            await trio.sleep(QUIET_S)  # past the node-set coalescing and a first retry
            svc = world.service("web")
            assert svc["metadata"]["finalizers"] == [FINALIZER]
            assert svc["status"]["loadBalancer"] == {}
            assert await reasons(world, "web") == ["EnsuringLoadBalancer"], await world.events()
            assert doubles[0].ensured == 1
            assert status_writes(world, "web") == [0.0]  # the finalizer only
            deleted_at = trio.current_time()
            await delete(world, "web")
            await wait_for(lambda: not world.service_exists("web"))
        # The provider was asked at once (the sim's look finds nothing of its own to delete),
        # and the finalizer went with its answer.
        lb_calls = [(c.time, c.method) for c in world.cloud.calls_by("loadbalancers")]
        assert lb_calls == [(deleted_at, "GetLoadBalancer")]
        assert status_writes(world, "web") == [0.0, deleted_at]


# -- delete -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "how",
    ["delete", "to-cluster-ip", "to-node-port"],
)
async def test_cleanup_deletes_the_load_balancer_then_the_finalizer(
    autojump_clock: trio.testing.MockClock, how: str
) -> None:
    """A Service deleted or retyped loses its load balancer, then its finalizer (and, if
    it stays, its ingress), at once, with the Deleting/Deleted Events."""
    async with open_world() as world:
        world.register("node-a", taints=[])
        world.api.create(make_service("web"))
        async with world.running(SERVICE_LB):
            await wait_for(lambda: bool(ingress(world, "web")))
            assert len(world.cloud.load_balancers()) == 1
            await trio.sleep_until(1)
            if how == "delete":
                await delete(world, "web")
            elif how == "to-cluster-ip":
                await patch(world, "web", {"spec": {"type": "ClusterIP"}})
            else:
                await patch(world, "web", {"spec": {"type": "NodePort"}})
            if how == "delete":
                await wait_for(lambda: not world.service_exists("web"))
            else:
                await wait_for(lambda: not world.service("web")["status"]["loadBalancer"])
            assert world.cloud.load_balancers() == []
            if how != "delete":
                svc = world.service("web")
                assert svc["metadata"].get("finalizers") is None
                assert svc["status"]["loadBalancer"] == {}
            assert (await reasons(world, "web"))[-2:] == [
                "DeletingLoadBalancer",
                "DeletedLoadBalancer",
            ]
        assert calls(world, "DeleteLoadBalancer") == [1.0]
        assert status_writes(world, "web")[2:] == [1.0, 1.0]  # ingress and finalizer


async def test_failed_delete_keeps_the_finalizer_and_retries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A failed DeleteLoadBalancer keeps the deleted Service (its finalizer) and is retried
    on backoff until the load balancer is gone, with a SyncLoadBalancerFailed Warning."""
    async with open_world() as world:
        world.register("node-a", taints=[])
        world.api.create(make_service("web"))
        async with world.running(SERVICE_LB):
            await wait_for(lambda: bool(ingress(world, "web")))
            await trio.sleep_until(1)
            world.cloud.faults.error("DeleteLoadBalancer", status=500, count=2)
            await delete(world, "web")
            await wait_for(lambda: len(calls(world, "DeleteLoadBalancer")) == 1)
            await trio.sleep_until(2)
            svc = world.service("web")
            assert svc["metadata"]["deletionTimestamp"]
            assert svc["metadata"]["finalizers"] == [FINALIZER]
            assert len(world.cloud.load_balancers()) == 1
            with trio.fail_after(60):
                await wait_for(lambda: not world.service_exists("web"), poll_s=1)
            assert world.cloud.load_balancers() == []
        deletes = calls(world, "DeleteLoadBalancer")
        assert deletes[0] == 1.0
        gaps = [b - a for a, b in itertools.pairwise(deletes)]
        assert len(gaps) == 2
        for gap, full in zip(gaps, expected_delays(2), strict=True):
            assert (1 - JITTER) * full <= gap <= full
        # The finalizer goes with the delete that succeeds.
        assert status_writes(world, "web")[-1] == deletes[-1]
        failed = [e for e in await world.events() if e["reason"] == "SyncLoadBalancerFailed"]
        assert "failed to delete load balancer" in failed[0]["message"]


async def test_recreated_service_gets_its_old_load_balancer_deleted_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Finalizer removed by hand, deleted and created again under the same name before the
    controller saw the deletion: the old UID's load balancer goes, the new one comes."""
    async with open_world() as world:
        world.register("node-a", taints=[])
        old = world.api.create(make_service("web"))
        async with world.running(SERVICE_LB):
            await wait_for(lambda: bool(ingress(world, "web")))
            old_lb = world.cloud.load_balancer(lb_name(old))
            assert old_lb is not None
            await trio.sleep_until(1)
            await patch(world, "web", {"metadata": {"finalizers": None}})
            await delete(world, "web")
            new = world.api.create(make_service("web"))
            await wait_for(lambda: bool(ingress(world, "web")))
            await trio.sleep(QUIET_S)
            assert [lb.name for lb in world.cloud.load_balancers()] == [lb_name(new)]
            assert old_lb.name != lb_name(new)
        # Both at once: the old one deleted, then the new one ensured.
        lb_calls = [(c.time, c.method) for c in world.cloud.calls_by("loadbalancers")]
        assert lb_calls[1:] == [(1.0, "DeleteLoadBalancer"), (1.0, "PutLoadBalancer")]


# -- node-set changes ---------------------------------------------------------------------
async def test_node_set_change_is_coalesced_and_pushed_to_every_load_balancer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ten Nodes arriving together: one backends update per load balancer, all at once,
    an UpdatedLoadBalancer Event each; readiness changes push nothing."""
    async with open_world() as world:
        world.register("node-0", taints=[])
        created = [world.api.create(make_service(f"web-{i}")) for i in range(5)]
        async with world.running(SERVICE_LB):
            await wait_for(lambda: all(ingress(world, f"web-{i}") for i in range(5)))
            await trio.sleep_until(1)
            for i in range(1, 11):
                world.register(f"node-{i}", taints=[])
            await wait_for(lambda: len(calls(world, "SetLoadBalancerBackends")) == 5)
            # The 1 s coalescing window, then all five at once (the budget's burst is 10).
            assert calls(world, "SetLoadBalancerBackends") == [2.0] * 5
            wanted = tuple(sorted(f"node-{i}" for i in range(11)))
            assert all(backends(world, svc) == wanted for svc in created)
            await world.set_ready("node-3", "False")
            await trio.sleep(QUIET_S)
            assert len(world.cloud.calls_by("SetLoadBalancerBackends")) == 5
        updated = [e for e in await world.events() if e["reason"] == "UpdatedLoadBalancer"]
        assert len(updated) == 5


async def test_a_slow_node_wave_is_pushed_once_it_settles(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Nodes arriving every 0.5 s for 3 s: one push, at the first 1 s step in which the set
    did not change (t=4); a set that keeps changing for longer than 10 s is pushed at 10 s
    all the same."""
    async with open_world() as world:
        world.register("node-00", taints=[])
        created = [world.api.create(make_service(f"web-{i}")) for i in range(3)]
        async with world.running(SERVICE_LB):
            await wait_for(lambda: all(ingress(world, f"web-{i}") for i in range(3)))
            started = 1.0
            await trio.sleep_until(started)
            for i in range(1, 7):
                world.register(f"node-{i:02}", taints=[])
                await trio.sleep(0.5)
            await wait_for(lambda: len(calls(world, "SetLoadBalancerBackends")) == 3)
            await trio.sleep(QUIET_S)
            updates = calls(world, "SetLoadBalancerBackends")
            assert moments(t - started for t in updates) == [4.0] * 3
            assert all(len(backends(world, svc) or ()) == 7 for svc in created)
            world.cloud.clear_calls()
            started = 20.0
            await trio.sleep_until(started)
            for i in range(7, 37):
                world.register(f"node-{i:02}", taints=[])
                await trio.sleep(0.5)
            await wait_for(lambda: all(len(backends(world, svc) or ()) == 37 for svc in created))
            # Pushed at 10 s though still changing, then once more at the first steady step
            # after the last Node (registered at 14.5 s).
            times = sorted(set(moments(t - started for t in calls(world, "loadbalancers"))))
            assert times == [10.0, 16.0]
            assert all(len(backends(world, svc) or ()) == 37 for svc in created)


async def test_a_change_during_a_pass_is_pushed_after_it_and_a_pause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Node registered while a pass is under way (each backends update takes 4 s) is not
    lost: it is pushed once the pass is done and a pause as long as the pass (4 s) is over,
    in one more update per load balancer."""
    async with open_world() as world:
        world.register("node-0", taints=[])
        created = [world.api.create(make_service(f"web-{i}")) for i in range(3)]
        async with world.running(SERVICE_LB):
            await wait_for(lambda: all(ingress(world, f"web-{i}") for i in range(3)))
            world.cloud.faults.latency("SetLoadBalancerBackends", fixed_s=4.0)
            await trio.sleep_until(1)
            world.register("node-1", taints=[])
            await trio.sleep_until(3)  # the pass began at t=2 and ends at t=6
            world.register("node-2", taints=[])
            await wait_for(lambda: len(calls(world, "SetLoadBalancerBackends")) == 6)
            await trio.sleep(QUIET_S)
            # The pass at t=2 (after the 1 s quiet) ends at t=6; the pause ends at t=10; the
            # set, noted meanwhile, has been quiet for 1 s at t=11.
            assert moments(calls(world, "SetLoadBalancerBackends")) == [2.0] * 3 + [11.0] * 3
            wanted = ("node-0", "node-1", "node-2")
            assert all(backends(world, svc) == wanted for svc in created)


async def test_a_set_given_out_during_a_move_is_taken_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Service ensured while the node set was moving got Nodes that were gone again when
    the move settled: the settled set (as before the move) is pushed to it all the same."""
    async with open_world() as world:
        world.register("node-0", taints=[])
        world.api.create(make_service("web-0"))
        async with world.running(SERVICE_LB):
            await wait_for(lambda: bool(ingress(world, "web-0")))
            await trio.sleep_until(1)
            world.register("node-1", taints=[])
            await trio.sleep_until(1.5)
            late = world.api.create(make_service("web-1"))
            await wait_for(lambda: bool(ingress(world, "web-1")))
            assert backends(world, late) == ("node-0", "node-1")
            (await world.http.delete("/api/v1/nodes/node-1")).raise_for_status()
            await trio.sleep(QUIET_S)
            assert backends(world, late) == ("node-0",)
            # Only the Service that was given the passing set is updated.
            assert len(calls(world, "SetLoadBalancerBackends")) == 1


async def test_failed_backend_update_is_recorded_only_after_success(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A failed update: Warning UpdateLoadBalancerFailed naming the Nodes, then a full
    ensure on retry, which brings the backends in."""
    async with open_world() as world:
        world.register("node-a", taints=[])
        created = world.api.create(make_service("web"))
        async with world.running(SERVICE_LB):
            await wait_for(lambda: bool(ingress(world, "web")))
            await trio.sleep_until(1)
            world.cloud.faults.error("SetLoadBalancerBackends", status=500, count=1)
            world.register("node-b", taints=[])
            with trio.fail_after(30):
                await wait_for(lambda: backends(world, created) == ("node-a", "node-b"), poll_s=1)
        failed = [e for e in await world.events() if e["reason"] == "UpdateLoadBalancerFailed"]
        assert len(failed) == 1
        assert failed[0]["message"].startswith(
            "Error updating load balancer with new hosts [node-a node-b] [node names limited, "
            "total number of nodes: 2], error: "
        )
        assert len(world.cloud.calls_by("PutLoadBalancer")) == 2
        # The update after the 1 s coalescing window, a look at the load balancer, then the
        # full ensure after the first retry delay (5 s, less its jitter).
        lb_calls = [(c.time, c.method) for c in world.cloud.calls_by("loadbalancers")]
        assert lb_calls[:4] == [
            (0.0, "PutLoadBalancer"),
            (2.0, "SetLoadBalancerBackends"),
            (2.0, "GetLoadBalancer"),
            (lb_calls[3][0], "PutLoadBalancer"),
        ]
        assert 2.0 + (1 - JITTER) * 5.0 <= lb_calls[3][0] <= 2.0 + 5.0
        assert len(lb_calls) == 4


# -- restarts and drift -------------------------------------------------------------------
def _budget(qps: float, burst: int) -> tuple[str, ...]:
    return (SERVICE_LB, f"--cloud-api-rate=load_balancers={qps}:{burst}")


async def test_restart_reverifies_gently_and_new_services_go_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """After a restart, the 20 provisioned load balancers are re-ensured at half the budget
    (0.4 s apart at 5/s), while a Service created meanwhile is served at once."""
    names = [f"web-{i:02}" for i in range(20)]
    async with open_world() as world:
        world.register("node-a", taints=[])
        for name in names:
            world.api.create(make_service(name))
        async with world.running(*_budget(5.0, 10)):
            await wait_for(lambda: all(ingress(world, name) for name in names))
            # The burst of 10 at once, then one every 0.2 s.
            assert moments(calls(world, "PutLoadBalancer")) == [0.0] * 10 + moments(
                0.2 * k for k in range(1, 11)
            )
        world.cloud.clear_calls()
        world.registry = CollectorRegistry()  # a new process
        restarted = 3.0
        await trio.sleep_until(restarted)
        world.api.create(make_service("new"))
        async with world.running(*_budget(5.0, 10)):
            await wait_for(lambda: len(calls(world, "PutLoadBalancer")) == 21, poll_s=1)
            await trio.sleep(QUIET_S)
        puts = world.cloud.calls_by("PutLoadBalancer")
        assert len(puts) == 21
        new_name = lb_name(world.service("new"))
        (new_put,) = [c for c in puts if c.target.endswith(new_name)]
        assert new_put.time == restarted
        again = [c.time for c in puts if not c.target.endswith(new_name)]
        assert moments(again) == moments(restarted + 0.4 * k for k in range(1, 21))
        # Re-verification of unchanged load balancers writes nothing and says nothing.
        assert all(len(status_writes(world, name)) == 2 for name in names)
        assert (await reasons(world, "web-00")).count("EnsuredLoadBalancer") == 2


async def test_drift_check_rebuilds_a_load_balancer_deleted_behind_our_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A load balancer deleted behind the controller's back is rebuilt by the drift check,
    30 minutes after the controller started, and the Service keeps its ingress."""
    async with open_world() as world:
        world.register("node-a", taints=[])
        created = world.api.create(make_service("web"))
        async with world.running(SERVICE_LB):
            await wait_for(lambda: bool(ingress(world, "web")))
            await trio.sleep_until(1)
            world.cloud.remove_load_balancer(lb_name(created))
            # The time is the call log's: polling every 10 s only ends the wait.
            await wait_for(lambda: backends(world, created) is not None, poll_s=10)
            assert backends(world, created) == ("node-a",)
            svc = world.service("web")
            lb = world.cloud.load_balancer(lb_name(created))
            assert lb is not None
            assert svc["status"]["loadBalancer"]["ingress"] == [{"ip": lb.ingress_ip}]
        assert calls(world, "PutLoadBalancer") == [0.0, 1800.0]


async def test_backends_update_of_a_vanished_load_balancer_rebuilds_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A backends update that finds its load balancer gone builds it again at once, with
    the new node set."""
    async with open_world() as world:
        world.register("node-a", taints=[])
        created = world.api.create(make_service("web"))
        async with world.running(SERVICE_LB):
            await wait_for(lambda: bool(ingress(world, "web")))
            await trio.sleep_until(1)
            world.cloud.remove_load_balancer(lb_name(created))
            world.register("node-b", taints=[])
            await wait_for(lambda: backends(world, created) == ("node-a", "node-b"), poll_s=1)
        lb_calls = [(c.time, c.method, c.status) for c in world.cloud.calls_by("loadbalancers")]
        assert lb_calls == [
            (0.0, "PutLoadBalancer", 201),
            (2.0, "SetLoadBalancerBackends", 404),
            (2.0, "GetLoadBalancer", 404),
            (2.0, "PutLoadBalancer", 201),
        ]


async def test_other_services_are_not_held_up_by_a_failing_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Service the cloud refuses fails on its own: a good one created with it has its
    load balancer and status at once, and only the bad one gets the Warning."""
    async with open_world() as world:
        world.register("node-a", taints=[])
        world.api.create(make_service("bad", ports=[{"port": 132, "protocol": "SCTP"}]))
        good = world.api.create(make_service("good"))
        async with world.running(SERVICE_LB):
            await wait_for(lambda: bool(ingress(world, "good")))
            assert backends(world, good) == ("node-a",)
            assert world.service("good")["status"]["loadBalancer"]["ingress"]
            # Each Service's Ensuring, then good's Ensured and bad's Warning.
            await wait_for(lambda: len(event_writes(world)) == 4)
        assert status_writes(world, "good") == [0.0, 0.0]
        puts = sorted((c.time, c.status) for c in world.cloud.calls_by("PutLoadBalancer"))
        assert puts == [(0.0, 201), (0.0, 400)]
        assert event_writes(world) == [0.0] * 4
        failed = [e for e in await world.events() if e["reason"] == "SyncLoadBalancerFailed"]
        assert {e["involvedObject"]["name"] for e in failed} == {"bad"}
        assert "protocol 'SCTP' is not one of TCP, UDP" in failed[0]["message"]


async def test_provider_status_shape(autojump_clock: trio.testing.MockClock) -> None:
    """Hostnames and ports of the provider's answer reach the status as given."""
    assert LoadBalancerIngress(hostname="lb.example").ip == ""
    async with open_world() as world:
        world.register("node-a", taints=[])
        world.cloud.lb_hostnames = True
        created = world.api.create(make_service("web"))
        async with world.running(SERVICE_LB):
            await wait_for(lambda: bool(ingress(world, "web")))
        lb = world.cloud.load_balancer(lb_name(created))
        assert lb is not None
        assert world.service("web")["status"]["loadBalancer"]["ingress"] == [
            {"ip": lb.ingress_ip, "hostname": lb.hostname}
        ]
        assert status_writes(world, "web") == [0.0, 0.0]


class Provisioning(LoadBalancersDouble):
    """The sim provider's load balancers, whose first `rounds` ensures answer "still
    provisioning, look again in 2 s, 3 s, ..." (as Octavia's PENDING_CREATE does), then
    `error` once and PENDING once more if given, then pass through."""

    def __init__(self, inner: LoadBalancers, rounds: int, error: Exception | None) -> None:
        super().__init__(inner)
        self.answers: list[Exception] = [PENDING]
        self.answers += [
            RetryAfter(2 + i, f"load balancer lb-1 is PENDING_CREATE; looking again in {2 + i} s")
            for i in range(1, rounds)
        ]
        if error is not None:
            self.answers += [error, PENDING]

    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> LoadBalancerStatus:
        if self.answers:
            raise self.answers.pop(0)
        return await self.inner.ensure_load_balancer(cluster, service, nodes)


PENDING = RetryAfter(2.0, "load balancer lb-1 is PENDING_CREATE; looking again in 2 s")
BROKEN = RuntimeError("the cloud answered 503")
REPLACED = RetryAfter(7.5, "load balancer lb-1 was in ERROR: deleted, a new one in 7.5 s")


@pytest.mark.parametrize(
    ("error", "warnings"),
    [
        pytest.param(None, {PENDING: 1}, id="one-streak"),
        pytest.param(BROKEN, {PENDING: 2, BROKEN: 1}, id="broken-in-between"),
        pytest.param(REPLACED, {PENDING: 2, REPLACED: 1}, id="something-else-in-between"),
    ],
)
async def test_waiting_out_a_provisioning_load_balancer_is_one_warning(
    autojump_clock: trio.testing.MockClock,
    error: Exception | None,
    warnings: dict[Exception, int],
) -> None:
    """Six rounds of RetryAfter while a load balancer provisions ("looking again in 2 s",
    "3 s", ...) give one Warning Event, not six (they would use up the Service's Event
    budget); another failure, or a RetryAfter that says something else (a replacement),
    is told, and the PENDING after it is told again (the identical Event's count: 2)."""
    wrap = partial_wrap(rounds=6, error=error)
    with trio.fail_after(300):
        async with open_world() as world:
            world.register("node-a", taints=[])
            world.api.create(make_service("web"))
            async with world.running(SERVICE_LB, wrap=wrap):
                await wait_for(
                    lambda: bool(world.service("web").get("status", {}).get("loadBalancer"))
                )
                await trio.sleep(QUIET_S)
            failed = [e for e in await world.events() if e["reason"] == "SyncLoadBalancerFailed"]
    told = {e["message"].removeprefix("Error syncing load balancer: "): e["count"] for e in failed}
    assert told == {str(w): n for w, n in warnings.items()}


def partial_wrap(*, rounds: int, error: Exception | None) -> Any:
    def wrap(sim: Any) -> ProviderDouble:
        return ProviderDouble(sim, load_balancers=Provisioning(sim.load_balancers, rounds, error))

    return wrap
