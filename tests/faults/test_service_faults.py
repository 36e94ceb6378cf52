"""Fault tests: the service-lb-controller against a failing, throttling, refusing cloud.

The emulator, the simulated cloud and one replica run in-process under `MockClock`, so
every time below is virtual and exact. The cloud's call log (`Call.time`: when a call
arrived) and the recording transport (when each write was sent) are what the assertions
read: how many calls, how fast, with which answers.

Randomness that the test does not own (which Service Trio schedules first, the backoff's
jitter, which calls the faults hit) decides who gets a budget slot and shortens a retry by
up to 10 %; it never moves the slots themselves, so those are asserted exactly, and the
bounds below allow for the rest and nothing more.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from tests.helpers.services import (
    BURST,
    JITTER,
    NODES,
    QPS,
    RETRY_BASE_S,
    SERVICE_LB,
    expected_delays,
    register_nodes,
    unconverged,
    wait_converged,
)
from tests.helpers.world import ProviderDouble, moments, open_world
from trio_ccm.cloud.provider import NodeInfo, ServiceInfo
from trio_ccm.errors import CcmError
from trio_ccm.testing import make_service, wait_for
from trio_ccm.testing.harness import RecordingTransport, Write
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.cloud.model import Call

# With 30 % of calls failing, a Service needs k attempts with probability 0.3**(k-1); the
# backoff before the 11th attempt totals 1515 s. 80 Service-phases hit 11 attempts with
# probability 80 * 0.3**10 < 1e-3 / 2, whatever order Trio schedules them in.
CONVERGE_UNDER_ERRORS_S = 1600.0
SLOT_S = 1 / QPS


def budget_slots(start: float, count: int) -> list[float]:
    """When `count` calls go out from a full budget while callers keep waiting: the burst
    at `start`, then one every 1/QPS s."""
    return moments([start] * BURST + [start + SLOT_S * k for k in range(1, count - BURST + 1)])


def over_budget(calls: Sequence[Call], qps: float, burst: int) -> list[str]:
    """Windows [t_i, t_j] holding more calls than a token bucket (qps, burst) allows."""
    times = sorted(c.time for c in calls)
    found = []
    for i, start in enumerate(times):
        for j in range(i, len(times)):
            allowed = burst + qps * (times[j] - start) + 1e-6
            if j - i + 1 > allowed:
                found.append(f"{j - i + 1} calls in [{start:.3f}, {times[j]:.3f}]")
    return found


# -- cloud errors -----------------------------------------------------------------------
async def test_30_percent_errors_converge_within_the_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With 30 % of PutLoadBalancer and SetLoadBalancerBackends calls failing, 40 Services
    get their load balancers, a new Node reaches all of them, and the load-balancer calls
    never exceed the budget's burst + qps * T in any window of T seconds."""
    names = [f"svc-{i:02d}" for i in range(40)]
    async with open_world() as world:
        register_nodes(world)
        for name in names:
            world.api.create(make_service(name))
        put = world.cloud.faults.error("PutLoadBalancer", status=500, probability=0.3)
        backends = world.cloud.faults.error("SetLoadBalancerBackends", status=500, probability=0.3)
        async with world.running(*SERVICE_LB):
            with trio.fail_after(CONVERGE_UNDER_ERRORS_S):
                await wait_converged(world, names, NODES)
            await trio.sleep(BURST * SLOT_S)  # the budget refills
            registered = trio.current_time()
            world.register("node-d", taints=[])
            with trio.fail_after(CONVERGE_UNDER_ERRORS_S):
                await wait_converged(world, names, (*NODES, "node-d"))
        calls = world.cloud.calls_by("loadbalancers")
    assert put.fired >= 5
    assert backends.fired >= 5
    assert over_budget(calls, QPS, BURST) == []
    # Whoever gets them, the budget's slots are taken as they come: the 40 first attempts
    # (and any retry) from t=0, the 40 backends updates one coalescing second after node-d.
    assert moments(c.time for c in calls[:40]) == budget_slots(0.0, 40)
    update = [c.time for c in calls if c.time > registered]
    assert moments(update[:40]) == budget_slots(registered + 1.0, 40)
    # One successful write per Service and phase, plus one call per failure and a look
    # (GetLoadBalancer) after each failed backend update: no call is wasted.
    failed = sum(c.status == 500 for c in calls)
    gets = sum(c.method == "GetLoadBalancer" for c in calls)
    assert len(calls) == 2 * len(names) + failed + gets


async def test_throttling_converges_and_slows_the_budget_down(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A cloud that throttles load-balancer calls at 2/s (burst 4, below the budget's 5/s,
    burst 10) answers 429 only to the budget's first burst and to one call per recovery
    step after it: the budget halves its rate once for the burst, and 40 Services and a
    new Node still converge."""
    names = [f"svc-{i:02d}" for i in range(40)]
    async with open_world() as world:
        register_nodes(world)
        for name in names:
            world.api.create(make_service(name))
        throttle = world.cloud.faults.throttle("loadbalancers", rate_per_s=2, burst=4)
        world.cloud.faults.latency("loadbalancers", fixed_s=0.05)  # calls overlap
        async with world.running(*SERVICE_LB):

            def budget_qps() -> float | None:
                return world.registry.get_sample_value(
                    "cloudprovider_api_budget_qps", {"family": "load_balancers"}
                )

            # The first burst: 10 calls at once, 4 admitted, 6 throttled together: the
            # budget halves its rate once, when the answers arrive (before its next slot).
            await wait_for(
                lambda: (
                    len(world.cloud.calls_by("loadbalancers")) == BURST and budget_qps() == QPS / 2
                )
            )
            first = sorted((c.time, c.status) for c in world.cloud.calls_by("loadbalancers"))
            assert first == [(0.0, 201)] * 4 + [(0.0, 429)] * 6
            with trio.fail_after(300):
                await wait_converged(world, names, NODES)
            world.register("node-d", taints=[])
            with trio.fail_after(300):
                await wait_converged(world, names, (*NODES, "node-d"))
        calls = world.cloud.calls_by("loadbalancers")
    throttled = [c for c in calls if c.status == 429]
    assert len(throttled) == throttle.throttled
    # Beyond the first burst's overshoot, the budget earns back 10 % of its rate every
    # 10 s without a throttle: at most one new throttle per 10 s (and usually fewer),
    # counted up to the last call.
    assert len(throttled) <= (BURST - 4) + calls[-1].time / 10
    assert len(throttled) < len(calls) / 5


class _PoisonedLoadBalancers:
    """Load-balancer calls for one Service always fail, after `hang_s` (a quota error, or
    a call that times out); other Services' calls go to the real provider."""

    def __init__(self, inner: Any, victim: str, hang_s: float) -> None:
        self.inner = inner
        self.victim = victim
        self.hang_s = hang_s
        self.attempts: list[float] = []

    async def _fail(self, service: ServiceInfo) -> None:
        self.attempts.append(trio.current_time())
        await trio.sleep(self.hang_s)
        raise CcmError(f"load balancer of {service.key}: quota exceeded")

    def load_balancer_name(self, cluster: str, service: ServiceInfo) -> str:
        name: str = self.inner.load_balancer_name(cluster, service)
        return name

    async def get_load_balancer(self, cluster: str, service: ServiceInfo) -> Any:
        if service.key == self.victim:
            await self._fail(service)
        return await self.inner.get_load_balancer(cluster, service)

    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> Any:
        if service.key == self.victim:
            await self._fail(service)
        return await self.inner.ensure_load_balancer(cluster, service, nodes)

    async def update_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> None:
        if service.key == self.victim:
            await self._fail(service)
        await self.inner.update_load_balancer(cluster, service, nodes)

    async def ensure_load_balancer_deleted(self, cluster: str, service: ServiceInfo) -> None:
        if service.key == self.victim:
            await self._fail(service)
        await self.inner.ensure_load_balancer_deleted(cluster, service)


async def _convergence_times(
    names: Sequence[str],
    poison: Callable[[Any], Any] | None,
    settled: Callable[[], bool] = lambda: True,
) -> tuple[list[float], list[dict[str, Any]]]:
    """When each Service converged (its ingress was written), from the replica's start,
    and the SyncLoadBalancerFailed Events once `settled()` holds."""
    async with open_world() as world:
        register_nodes(world)
        if poison is not None:
            world.api.create(make_service("poisoned"))  # first: first in line for the budget
        for name in names:
            world.api.create(make_service(name))
        started = trio.current_time()
        async with world.running(*SERVICE_LB, wrap=poison):
            with trio.fail_after(60):
                await wait_converged(world, names, NODES, poll_s=0.05)
            with trio.fail_after(300):
                await wait_for(settled, poll_s=1)
        warnings = await world.events("SyncLoadBalancerFailed")
        done = [world.transport.service_writes(name)[-1].at - started for name in names]
    return sorted(moments(done)), warnings


@pytest.mark.parametrize(
    "hang_s",
    [pytest.param(0.0, id="fails-at-once"), pytest.param(60.0, id="hangs-then-fails")],
)
async def test_a_service_whose_calls_always_fail_does_not_delay_others(
    autojump_clock: trio.testing.MockClock, hang_s: float
) -> None:
    """20 Services converge as fast beside a Service whose every cloud call fails (at once,
    or after hanging 60 s) as they do alone: later by at most the one budget token and
    the few API writes the failing Service's first attempt takes."""
    names = [f"svc-{i:02d}" for i in range(20)]
    alone, _ = await _convergence_times(names, None)
    poisoned: list[_PoisonedLoadBalancers] = []

    def poison(provider: Any) -> Any:
        lbs = _PoisonedLoadBalancers(provider.load_balancers, "default/poisoned", hang_s)
        poisoned.append(lbs)
        return ProviderDouble(provider, load_balancers=lbs)

    beside, warnings = await _convergence_times(
        names, poison, settled=lambda: len(poisoned[0].attempts) >= 3
    )
    # Alone: the budget's burst of 10 at once, then one every 0.2 s. Beside: the failing
    # Service's first attempt takes one slot of the burst, so the Services after the 9th
    # are each one slot (1/QPS) later; its API writes delay nothing.
    assert alone == budget_slots(0.0, len(names))
    assert beside == alone[: BURST - 1] + moments(t + SLOT_S for t in alone[BURST - 1 :])
    # The failing Service was tried first, and retried with backoff (5 s, 10 s, less
    # their jitter, after each hang), not in a tight loop.
    (lbs,) = poisoned
    gaps = [b - a for a, b in itertools.pairwise(lbs.attempts)]
    assert len(gaps) >= 2
    for gap, delay in zip(gaps, expected_delays(len(gaps)), strict=True):
        assert hang_s + (1 - JITTER) * delay <= gap <= hang_s + delay + 1e-9, gaps
    assert {e["involvedObject"]["name"] for e in warnings} == {"poisoned"}
    assert "quota exceeded" in warnings[0]["message"]


# -- cleanup under faults ---------------------------------------------------------------
async def test_cleanup_under_30_percent_errors_leaves_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With 30 % of GetLoadBalancer and DeleteLoadBalancer calls failing, 20 deleted and
    10 retyped (ClusterIP) Services lose their load balancers, finalizers and ingress; the
    10 others keep theirs, and the calls stay within the budget."""
    names = [f"svc-{i:02d}" for i in range(40)]
    deleted, retyped, kept = names[:20], names[20:30], names[30:]
    async with open_world() as world:
        register_nodes(world)
        for name in names:
            world.api.create(make_service(name))
        async with world.running(*SERVICE_LB):
            with trio.fail_after(60):
                await wait_converged(world, names, NODES)
            world.cloud.clear_calls()
            changed = 20.0
            assert trio.current_time() <= changed - BURST * SLOT_S  # the budget refills
            await trio.sleep_until(changed)
            get = world.cloud.faults.error("GetLoadBalancer", status=500, probability=0.3)
            delete = world.cloud.faults.error("DeleteLoadBalancer", status=500, probability=0.3)
            for name in deleted:
                response = await world.http.delete(f"/api/v1/namespaces/default/services/{name}")
                assert response.status_code == 200
            for name in retyped:
                response = await world.http.patch(
                    f"/api/v1/namespaces/default/services/{name}",
                    json={"spec": {"type": "ClusterIP"}},
                    headers={"content-type": "application/merge-patch+json"},
                )
                response.raise_for_status()

            def cleaned() -> bool:
                remaining = {lb.service for lb in world.cloud.load_balancers()}
                return remaining == {f"default/{n}" for n in kept} and all(
                    not world.service(n)["metadata"].get("finalizers")
                    and not world.service(n).get("status", {}).get("loadBalancer")
                    for n in retyped
                )

            with trio.fail_after(CONVERGE_UNDER_ERRORS_S):
                await wait_for(cleaned, poll_s=0.5)
            listed = (await world.http.get("/api/v1/namespaces/default/services")).json()
        calls = world.cloud.calls_by("loadbalancers")
    assert get.fired + delete.fired >= 5
    assert over_budget(calls, QPS, BURST) == []
    # Each of the 30 looks, then deletes (60 calls at least): the budget's slots from the
    # moment of the change, taken as they come.
    assert moments(c.time for c in calls[:60]) == budget_slots(changed, 60)
    left = {s["metadata"]["name"] for s in listed["items"]} - {"kubernetes"}
    assert left == set(retyped) | set(kept)
    assert unconverged(world, kept, NODES) == []
    for name in retyped:
        assert world.service(name).get("status", {}).get("loadBalancer", {}) == {}, name


class _FailingTransport(RecordingTransport):
    """The replica's way to the emulator, answering 500 to the first request that the
    predicate given to `fail_once` selects (an API server failing one write)."""

    def __init__(self, server: ApiServer) -> None:
        super().__init__(server)
        self.matches: Callable[[httpx.Request], bool] | None = None
        self.failed: list[Write] = []

    def fail_once(self, matches: Callable[[httpx.Request], bool]) -> None:
        self.matches = matches

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.matches is not None and self.matches(request):
            self.matches = None
            self.failed.append(Write(trio.current_time(), request.method, request.url.path))
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": "injected: etcdserver: request timed out",
                "reason": "InternalError",
                "code": 500,
            }
            return httpx.Response(500, json=status, request=request)
        return await super().handle_async_request(request)


def _clears_status(request: httpx.Request) -> bool:
    """The status write that clears the load-balancer ingress (a merge patch)."""
    return (
        request.method == "PATCH"
        and request.url.path.endswith("/status")
        and request.headers.get("content-type") == "application/merge-patch+json"
        and json.loads(request.content) == {"status": {"loadBalancer": {"ingress": None}}}
    )


async def test_a_failed_status_clear_is_retried_not_left_stale(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """When the API server fails the write that clears the ingress of a Service retyped to
    ClusterIP (after its load balancer and finalizer are gone), the write is retried: the
    Service does not keep advertising an address the cloud may give to another."""
    async with open_world() as base:
        failing = _FailingTransport(base.api)
        world = dataclasses.replace(base, transport=failing)
        register_nodes(world)
        world.api.create(make_service("web"))
        async with world.running(*SERVICE_LB):
            with trio.fail_after(10):
                await wait_converged(world, ["web"], NODES)
            await trio.sleep_until(1)
            failing.fail_once(_clears_status)
            response = await world.http.patch(
                "/api/v1/namespaces/default/services/web",
                json={"spec": {"type": "ClusterIP"}},
                headers={"content-type": "application/merge-patch+json"},
            )
            response.raise_for_status()
            with trio.fail_after(60):
                await wait_for(
                    lambda: not world.service("web").get("status", {}).get("loadBalancer")
                )
        assert failing.failed == [
            Write(1.0, "PATCH", "/api/v1/namespaces/default/services/web/status")
        ]
        assert world.cloud.load_balancers() == []
        web = world.service("web")
        assert web["metadata"].get("finalizers", []) == []
        assert web.get("status", {}).get("loadBalancer", {}) == {}, web["status"]
        # At the change: the load balancer deleted, then the clear (failed, above). After
        # the first retry delay (5 s, less its jitter): a look that finds the load balancer
        # gone, the clear again and the finalizer's removal.
        retried = {w.at for w in failing.service_writes("web") if w.at >= 1.0}
        (retry,) = retried
        assert 1.0 + (1 - JITTER) * RETRY_BASE_S <= retry <= 1.0 + RETRY_BASE_S
        assert [(c.time, c.method) for c in world.cloud.calls_by("loadbalancers")][1:] == [
            (1.0, "GetLoadBalancer"),
            (1.0, "DeleteLoadBalancer"),
            (retry, "GetLoadBalancer"),
        ]
