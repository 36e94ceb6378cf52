"""CloudBudget: token buckets per family, FIFO waiting, throttle feedback, metrics, wrap().

Everything runs under `MockClock(autojump_threshold=0)` (`autojump_clock`), so times are
exact virtual seconds: "the 31st call started at t=0.1".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

import httpx
import prometheus_client
import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry

from trio_ccm.cloud.budget import DEFAULT_RATES, METHOD_FAMILIES, CloudBudget, Rate
from trio_ccm.cloud.fence import GuardedTransport
from trio_ccm.cloud.provider import (
    BulkInstances,
    CloudProvider,
    InstanceMetadata,
    InstanceNotFoundError,
    Instances,
    LoadBalancers,
    LoadBalancerStatus,
    NodeInfo,
    Route,
    Routes,
    ServiceInfo,
    ThrottledError,
    bulk_instances,
)
from trio_ccm.errors import NotLeadingError, RetryAfter

LIMIT_S = 1000  # virtual fail_after bound of every test
NODE = NodeInfo(name="node-a")
SERVICE = ServiceInfo(namespace="default", name="web", uid="uid-web")
ROUTE = Route(target_node="node-a", destination_cidr="10.0.0.0/24")


# -- a fake cloud: test doubles of a provider's code ---------------------------------------
class Cloud:
    """Records each call as (start time, method, args); sleeps and raises on script."""

    def __init__(self, *, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s
        self.calls: list[tuple[float, str, tuple[object, ...]]] = []
        self.script: dict[str, list[BaseException]] = {}
        self.always: dict[str, BaseException] = {}

    def fail(self, method: str, *errors: BaseException) -> None:
        self.script.setdefault(method, []).extend(errors)

    async def hit(self, method: str, *args: object) -> None:
        self.calls.append((trio.current_time(), method, args))
        if self.latency_s:
            await trio.sleep(self.latency_s)
        if self.script.get(method):
            raise self.script[method].pop(0)
        if method in self.always:
            raise self.always[method]

    def times(self, method: str) -> list[float]:
        return [t for t, m, _ in self.calls if m == method]


METADATA = InstanceMetadata(provider_id="sim://node-a")
LB_STATUS = LoadBalancerStatus()
ROUTES = (ROUTE,)


class FakeInstances:
    def __init__(self, cloud: Cloud) -> None:
        self.cloud = cloud

    async def instance_metadata(self, node: NodeInfo) -> InstanceMetadata | None:
        await self.cloud.hit("instance_metadata", node)
        return METADATA

    async def instance_exists(self, node: NodeInfo) -> bool:
        await self.cloud.hit("instance_exists", node)
        return True

    async def instance_shutdown(self, node: NodeInfo) -> bool:
        await self.cloud.hit("instance_shutdown", node)
        return False


class FakeBulkInstances(FakeInstances):
    async def instances_metadata(self, nodes: Sequence[NodeInfo]) -> Mapping[str, InstanceMetadata]:
        await self.cloud.hit("instances_metadata", tuple(nodes))
        return {node.name: METADATA for node in nodes}


class FakeLoadBalancers:
    def __init__(self, cloud: Cloud) -> None:
        self.cloud = cloud

    async def get_load_balancer(
        self, cluster: str, service: ServiceInfo
    ) -> LoadBalancerStatus | None:
        await self.cloud.hit("get_load_balancer", cluster, service)
        return LB_STATUS

    def load_balancer_name(self, cluster: str, service: ServiceInfo) -> str:
        return f"{cluster}-{service.uid}"

    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> LoadBalancerStatus:
        await self.cloud.hit("ensure_load_balancer", cluster, service, nodes)
        return LB_STATUS

    async def update_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> None:
        await self.cloud.hit("update_load_balancer", cluster, service, nodes)

    async def ensure_load_balancer_deleted(self, cluster: str, service: ServiceInfo) -> None:
        await self.cloud.hit("ensure_load_balancer_deleted", cluster, service)


class FakeRoutes:
    def __init__(self, cloud: Cloud, *, enable_node_addresses: bool = False) -> None:
        self.cloud = cloud
        self.enable_node_addresses = enable_node_addresses

    async def list_routes(self, cluster: str) -> Sequence[Route]:
        await self.cloud.hit("list_routes", cluster)
        return ROUTES

    async def create_route(self, cluster: str, name_hint: str, route: Route) -> None:
        await self.cloud.hit("create_route", cluster, name_hint, route)

    async def delete_route(self, cluster: str, route: Route) -> None:
        await self.cloud.hit("delete_route", cluster, route)


class FakeProvider:
    name = "fake"

    def __init__(
        self,
        cloud: Cloud,
        *,
        instances: bool = True,
        bulk: bool = True,
        load_balancers: bool = True,
        routes: bool = True,
    ) -> None:
        self.cloud = cloud
        self.initialized = 0
        self.instances: Instances | None = None
        if instances:
            self.instances = FakeBulkInstances(cloud) if bulk else FakeInstances(cloud)
        self.load_balancers: LoadBalancers | None = (
            FakeLoadBalancers(cloud) if load_balancers else None
        )
        self.routes: Routes | None = (
            FakeRoutes(cloud, enable_node_addresses=True) if routes else None
        )

    async def initialize(self) -> None:
        self.initialized += 1
        await trio.lowlevel.checkpoint()


def wrapped(budget: CloudBudget, *, latency_s: float = 0.0) -> tuple[CloudProvider, Cloud]:
    cloud = Cloud(latency_s=latency_s)
    return budget.wrap(FakeProvider(cloud)), cloud


def instances_of(provider: CloudProvider) -> FakeBulkInstances:
    """The wrapper's instances, typed as the fake's for brevity in tests."""
    assert provider.instances is not None
    return provider.instances  # type: ignore[return-value]


async def run_at(times: Sequence[float], call: Callable[[int], Awaitable[object]]) -> None:
    """Start call(i) at virtual time times[i], all in one nursery."""

    async def one(i: int, at: float) -> None:
        await trio.sleep_until(at)
        await call(i)

    async with trio.open_nursery() as nursery:
        for i, at in enumerate(times):
            nursery.start_soon(one, i, at)


# -- the bucket ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("family", "tail"),
    [
        pytest.param("instances", [0.1, 0.2, 0.3, 0.4], id="instances-10qps-burst30"),
        pytest.param("load_balancers", [0.2, 0.4, 0.6, 0.8], id="load-balancers-5qps-burst10"),
        pytest.param("routes", [0.2, 0.4, 0.6, 0.8], id="routes-5qps-burst10"),
    ],
)
async def test_burst_then_steady_rate(
    autojump_clock: trio.testing.MockClock, family: str, tail: list[float]
) -> None:
    """A family's burst goes at t=0, then one call per 1/qps: the 31st instance call at 0.1."""
    budget = CloudBudget()
    burst = DEFAULT_RATES[family].burst
    started: list[float] = []

    async def take(_: int) -> None:
        await budget.acquire(family)
        started.append(trio.current_time())

    with trio.fail_after(LIMIT_S):
        await run_at([0.0] * (burst + len(tail)), take)
    assert started[:burst] == [0.0] * burst
    assert started[burst:] == pytest.approx(tail, abs=1e-9)


async def test_bucket_refills_up_to_burst_only(autojump_clock: trio.testing.MockClock) -> None:
    """An idle bucket saves at most `burst` tokens: after 10 idle seconds, 3 go, the 4th waits."""
    budget = CloudBudget({"routes": Rate(1, 3)})
    started: list[float] = []

    async def take(_: int) -> None:
        await budget.acquire("routes")
        started.append(trio.current_time())

    with trio.fail_after(LIMIT_S):
        await run_at([0.0] * 3 + [10.0] * 4, take)
    assert started == pytest.approx([0.0, 0.0, 0.0, 10.0, 10.0, 10.0, 11.0], abs=1e-9)


async def test_waiters_are_served_in_arrival_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Callers that find the bucket empty are served first come, first served."""
    budget = CloudBudget({"instances": Rate(2, 1)})
    served: list[tuple[int, float]] = []

    async def take(i: int) -> None:
        waited = await budget.acquire("instances")
        served.append((i, trio.current_time()))
        assert waited == pytest.approx(trio.current_time() - 0.01 * i, abs=1e-9)

    with trio.fail_after(LIMIT_S):
        await run_at([0.01 * i for i in range(10)], take)
    assert [i for i, _ in served] == list(range(10))
    assert [t for _, t in served] == pytest.approx([0.5 * i for i in range(10)], abs=1e-9)
    assert budget.statistics()["instances"].waiting == 0


async def _race_round() -> list[tuple[str, float]]:
    """One caller takes the only token, one waits for the next, one arrives just as it accrues."""
    budget = CloudBudget({"routes": Rate(1, 1)})
    start = trio.current_time()
    served: list[tuple[str, float]] = []

    async def take(name: str, at: float) -> None:
        await trio.sleep_until(start + at)
        await budget.acquire("routes")
        served.append((name, trio.current_time() - start))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take, "first", 0.0)
        nursery.start_soon(take, "waiter", 0.5)
        nursery.start_soon(take, "newcomer", 1.0)
    return served


async def test_newcomer_never_overtakes_a_waiter(autojump_clock: trio.testing.MockClock) -> None:
    """A caller arriving just as the waiter's token accrues queues behind it, in every round."""
    # Trio runs tasks woken at the same instant in either order, so repeat the race.
    with trio.fail_after(LIMIT_S):
        for _ in range(12):
            served = await _race_round()
            assert served == [("first", 0.0), ("waiter", 1.0), ("newcomer", 2.0)]


@pytest.mark.parametrize(
    ("cancelled", "expected"),
    [
        pytest.param("b", {"c": 1.0, "d": 2.0}, id="head"),
        pytest.param("c", {"b": 1.0, "d": 2.0}, id="middle"),
        pytest.param("d", {"b": 1.0, "c": 2.0}, id="tail"),
    ],
)
async def test_cancelled_waiter_hands_its_turn_on(
    autojump_clock: trio.testing.MockClock, cancelled: str, expected: dict[str, float]
) -> None:
    """A waiter cancelled at t=0.5 leaves the queue; those behind it move up one slot."""
    budget = CloudBudget({"routes": Rate(1, 1)})
    served: dict[str, float] = {}

    async def take(name: str, at: float) -> None:
        await trio.sleep_until(at)
        with trio.CancelScope(deadline=0.5 if name == cancelled else float("inf")):
            await budget.acquire("routes")
            served[name] = trio.current_time()

    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            for name, at in [("a", 0.0), ("b", 0.1), ("c", 0.2), ("d", 0.3)]:
                nursery.start_soon(take, name, at)
            await trio.sleep(0.4)
            assert budget.statistics()["routes"].waiting == 3
    assert served == {"a": 0.0, **expected}
    assert budget.statistics()["routes"].waiting == 0


async def test_mass_cancellation_leaves_the_last_waiter_next(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With 99 of 100 waiters cancelled at t=0.5 the survivor gets the next token, at t=1.0."""
    budget = CloudBudget({"routes": Rate(1, 1)})
    served: list[float] = []

    async def wait_in_line(at: float, cancel_at: float) -> None:
        await trio.sleep_until(at)
        with trio.CancelScope(deadline=cancel_at):
            await budget.acquire("routes")
            served.append(trio.current_time())

    with trio.fail_after(LIMIT_S):
        await budget.acquire("routes")
        async with trio.open_nursery() as nursery:
            for i in range(100):
                nursery.start_soon(wait_in_line, 0.001 * i, 0.5 if i < 99 else float("inf"))
            await trio.sleep(0.4)
            assert budget.statistics()["routes"].waiting == 100
            await trio.sleep(0.2)
            assert budget.statistics()["routes"].waiting == 1
        assert served == [1.0]
        assert budget.statistics()["routes"].waiting == 0
        await budget.acquire("routes")
    assert trio.current_time() == 2.0


# -- throttle feedback ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rate", "starts", "effective"),
    [
        pytest.param(
            Rate(10, 1),
            [0.0, 0.2, 0.6, 1.4, 3.0, 5.0, 7.0],
            [5.0, 2.5, 1.25, 0.625, 0.5, 0.5, 0.5],
            id="floor-is-a-twentieth",
        ),
        pytest.param(
            Rate(0.2, 1),
            [0.0, 10.0, 25.0, 35.0 + 0.5 / 0.07],
            [0.1, 0.06, 0.05, 0.05],
            id="floor-at-least-0.05qps-with-recovery-between",
        ),
        pytest.param(
            Rate(0.02, 1), [0.0, 50.0, 100.0], [0.02, 0.02, 0.02], id="configured-below-floor"
        ),
    ],
)
async def test_each_throttle_halves_the_rate_down_to_a_floor(
    autojump_clock: trio.testing.MockClock,
    rate: Rate,
    starts: list[float],
    effective: list[float],
) -> None:
    """Every throttled call started after the last halving halves the rate again, to a floor."""
    budget = CloudBudget({"instances": rate})
    provider, cloud = wrapped(budget)
    cloud.always["instance_exists"] = ThrottledError("slow down")
    seen: list[float] = []
    with trio.fail_after(LIMIT_S):
        for _ in starts:
            with pytest.raises(ThrottledError):
                await instances_of(provider).instance_exists(NODE)
            seen.append(budget.statistics()["instances"].effective_qps)
    assert cloud.times("instance_exists") == pytest.approx(starts, abs=1e-9)
    assert seen == pytest.approx(effective, abs=1e-9)
    assert budget.statistics()["instances"].throttles == len(starts)


@pytest.mark.parametrize(
    ("throttles_at", "probes"),
    [
        pytest.param(
            [0.0],
            [(9.99, 5.0), (10.0, 6.0), (19.99, 6.0), (20.0, 7.0), (50.0, 10.0), (80.0, 10.0)],
            id="10pct-per-10s",
        ),
        pytest.param(
            [0.0, 15.0],
            [(15.0, 3.0), (24.99, 3.0), (25.0, 4.0), (35.0, 5.0), (85.0, 10.0)],
            id="throttle-restarts-the-clock",
        ),
    ],
)
async def test_rate_recovers_additively_without_throttles(
    autojump_clock: trio.testing.MockClock,
    throttles_at: list[float],
    probes: list[tuple[float, float]],
) -> None:
    """Each 10 s without a throttle gives back 10 % of the configured rate, up to all of it."""
    registry = CollectorRegistry()
    budget = CloudBudget({"instances": Rate(10, 5)}, registry=registry)
    provider, cloud = wrapped(budget)
    cloud.always["instance_shutdown"] = ThrottledError()
    seen: list[float] = []
    with trio.fail_after(LIMIT_S):
        for at in throttles_at:
            await trio.sleep_until(at)
            with pytest.raises(ThrottledError):
                await instances_of(provider).instance_shutdown(NODE)
        for at, _ in probes:
            await trio.sleep_until(at)
            seen.append(budget.statistics()["instances"].effective_qps)
    assert cloud.times("instance_shutdown") == throttles_at
    assert seen == pytest.approx([qps for _, qps in probes], abs=1e-9)
    gauge = registry.get_sample_value("cloudprovider_api_budget_qps", {"family": "instances"})
    assert gauge == pytest.approx(probes[-1][1])


async def test_calls_throttled_together_halve_the_rate_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ten calls throttled together halve the rate once; a call admitted after that halves again."""
    budget = CloudBudget({"instances": Rate(10, 30)})
    provider, cloud = wrapped(budget, latency_s=1.0)
    cloud.always["instance_exists"] = ThrottledError()

    async def call(_: int) -> None:
        with pytest.raises(ThrottledError):
            await instances_of(provider).instance_exists(NODE)

    with trio.fail_after(LIMIT_S):
        await run_at([0.0] * 10, call)
        stats = budget.statistics()["instances"]
        assert (stats.effective_qps, stats.throttles, stats.tokens) == (5.0, 10, 0.0)
        await call(10)
    assert cloud.times("instance_exists") == pytest.approx([0.0] * 10 + [1.2], abs=1e-9)
    assert budget.statistics()["instances"].effective_qps == 2.5


async def test_retry_after_pauses_the_family(autojump_clock: trio.testing.MockClock) -> None:
    """retry_after_s=2 stops the family until t=2.0: one call then, the next at the halved rate."""
    budget = CloudBudget()
    provider, cloud = wrapped(budget)
    cloud.fail("instance_metadata", ThrottledError("RequestLimitExceeded", retry_after_s=2.0))
    with trio.fail_after(LIMIT_S):
        with pytest.raises(ThrottledError):
            await instances_of(provider).instance_metadata(NODE)
        stats = budget.statistics()["instances"]
        assert (stats.paused_s, stats.tokens, stats.effective_qps) == (2.0, 0.0, 5.0)
        lbs = provider.load_balancers
        assert lbs is not None
        await lbs.get_load_balancer("c", SERVICE)  # other families are not paused
        assert trio.current_time() == 0.0
        await run_at([0.0] * 3, lambda _: instances_of(provider).instance_exists(NODE))
    assert cloud.times("instance_exists") == pytest.approx([2.0, 2.2, 2.4], abs=1e-9)
    assert budget.statistics()["instances"].paused_s == 0.0


async def test_a_shorter_retry_after_does_not_cut_a_pause_short(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Of two pauses in force the later end wins."""
    budget = CloudBudget({"routes": Rate(5, 2)})
    provider, cloud = wrapped(budget)
    cloud.fail("list_routes", ThrottledError(retry_after_s=5.0), ThrottledError(retry_after_s=1.0))
    routes = provider.routes
    assert routes is not None

    async def call(_: int) -> None:
        with pytest.raises(ThrottledError):
            await routes.list_routes("c")

    with trio.fail_after(LIMIT_S):
        await run_at([0.0, 0.0], call)
        assert budget.statistics()["routes"].paused_s == 5.0
        await routes.list_routes("c")
    assert cloud.times("list_routes") == [0.0, 0.0, 5.0]


# -- metrics -------------------------------------------------------------------------------
def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_metrics_count_calls_errors_throttles_and_waits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Durations, errors, throttles, the effective rate and waits land on the given registry."""
    registry = CollectorRegistry()
    budget = CloudBudget({"instances": Rate(1, 1)}, registry=registry)
    provider, cloud = wrapped(budget, latency_s=0.5)
    cloud.fail("instance_exists", RuntimeError("boom"))
    cloud.fail("instance_shutdown", ThrottledError())
    instances = instances_of(provider)
    with trio.fail_after(LIMIT_S):
        await instances.instance_metadata(NODE)  # t=0.0 .. 0.5
        with pytest.raises(RuntimeError):
            await instances.instance_exists(NODE)  # waits 0.5: t=1.0 .. 1.5
        with pytest.raises(ThrottledError):
            await instances.instance_shutdown(NODE)  # waits 0.5: t=2.0 .. 2.5
    duration = "cloudprovider_api_request_duration_seconds"
    for method in ("instance_metadata", "instance_exists", "instance_shutdown"):
        assert sample(registry, f"{duration}_count", method=method) == 1.0
        assert sample(registry, f"{duration}_sum", method=method) == 0.5
    errors = "cloudprovider_api_request_errors_total"
    assert sample(registry, errors, method="instance_metadata") == 0.0
    assert sample(registry, errors, method="instance_exists") == 1.0
    assert sample(registry, errors, method="instance_shutdown") == 1.0
    throttles = "cloudprovider_api_throttles_total"
    assert sample(registry, throttles, method="instance_exists") == 0.0
    assert sample(registry, throttles, method="instance_shutdown") == 1.0
    qps = "cloudprovider_api_budget_qps"
    assert sample(registry, qps, family="instances") == 0.5
    assert sample(registry, qps, family="load_balancers") == 5.0
    assert sample(registry, qps, family="routes") == 5.0
    wait = "cloudprovider_api_budget_wait_seconds"
    assert sample(registry, f"{wait}_count", family="instances") == 3.0
    assert sample(registry, f"{wait}_sum", family="instances") == pytest.approx(1.0)
    assert sample(registry, f"{wait}_bucket", family="instances", le="0.0") == 1.0


async def test_cancelled_call_is_neither_timed_nor_an_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A call cancelled mid-flight leaves the duration and error metrics alone."""
    registry = CollectorRegistry()
    budget = CloudBudget(registry=registry)
    provider, _ = wrapped(budget, latency_s=10.0)
    with trio.fail_after(LIMIT_S), trio.move_on_after(1.0):
        await instances_of(provider).instance_metadata(NODE)
    labels = {"method": "instance_metadata"}
    assert registry.get_sample_value(
        "cloudprovider_api_request_duration_seconds_count", labels
    ) in (None, 0.0)
    assert registry.get_sample_value("cloudprovider_api_request_errors_total", labels) in (
        None,
        0.0,
    )


def test_budgets_without_a_registry_register_nothing() -> None:
    """Without a registry no collector is made (the process-wide default registry gains no
    series), so budgets can be built many times; with one, its series are registered."""
    before = {family.name for family in prometheus_client.REGISTRY.collect()}
    CloudBudget()
    CloudBudget()
    assert {family.name for family in prometheus_client.REGISTRY.collect()} == before
    registry = prometheus_client.CollectorRegistry()
    CloudBudget(registry=registry)
    assert [family.name for family in registry.collect()] != []


# -- wrap() --------------------------------------------------------------------------------
Call = Callable[[CloudProvider], Awaitable[object]]


def _inst(p: CloudProvider) -> FakeBulkInstances:
    return instances_of(p)


def _lbs(p: CloudProvider) -> FakeLoadBalancers:
    assert p.load_balancers is not None
    return p.load_balancers  # type: ignore[return-value]


def _routes(p: CloudProvider) -> FakeRoutes:
    assert p.routes is not None
    return p.routes  # type: ignore[return-value]


NODES = (NODE,)


@pytest.mark.parametrize(
    ("method", "call", "args", "returned"),
    [
        pytest.param(
            "instance_metadata",
            lambda p: _inst(p).instance_metadata(NODE),
            (NODE,),
            METADATA,
            id="instance_metadata",
        ),
        pytest.param(
            "instance_exists",
            lambda p: _inst(p).instance_exists(NODE),
            (NODE,),
            True,
            id="instance_exists",
        ),
        pytest.param(
            "instance_shutdown",
            lambda p: _inst(p).instance_shutdown(NODE),
            (NODE,),
            False,
            id="instance_shutdown",
        ),
        pytest.param(
            "instances_metadata",
            lambda p: _inst(p).instances_metadata(NODES),
            (NODES,),
            {"node-a": METADATA},
            id="instances_metadata",
        ),
        pytest.param(
            "get_load_balancer",
            lambda p: _lbs(p).get_load_balancer("c", SERVICE),
            ("c", SERVICE),
            LB_STATUS,
            id="get_load_balancer",
        ),
        pytest.param(
            "ensure_load_balancer",
            lambda p: _lbs(p).ensure_load_balancer("c", SERVICE, NODES),
            ("c", SERVICE, NODES),
            LB_STATUS,
            id="ensure_load_balancer",
        ),
        pytest.param(
            "update_load_balancer",
            lambda p: _lbs(p).update_load_balancer("c", SERVICE, NODES),
            ("c", SERVICE, NODES),
            None,
            id="update_load_balancer",
        ),
        pytest.param(
            "ensure_load_balancer_deleted",
            lambda p: _lbs(p).ensure_load_balancer_deleted("c", SERVICE),
            ("c", SERVICE),
            None,
            id="ensure_load_balancer_deleted",
        ),
        pytest.param(
            "list_routes", lambda p: _routes(p).list_routes("c"), ("c",), ROUTES, id="list_routes"
        ),
        pytest.param(
            "create_route",
            lambda p: _routes(p).create_route("c", "uid-a", ROUTE),
            ("c", "uid-a", ROUTE),
            None,
            id="create_route",
        ),
        pytest.param(
            "delete_route",
            lambda p: _routes(p).delete_route("c", ROUTE),
            ("c", ROUTE),
            None,
            id="delete_route",
        ),
    ],
)
async def test_each_method_draws_from_its_family(
    autojump_clock: trio.testing.MockClock,
    method: str,
    call: Call,
    args: tuple[object, ...],
    returned: object,
) -> None:
    """A wrapped method takes one token of its own family and passes arguments and result."""
    budget = CloudBudget()
    provider, cloud = wrapped(budget)
    with trio.fail_after(LIMIT_S):
        result = await call(provider)
    assert result == returned
    assert cloud.calls == [(0.0, method, args)]
    family = METHOD_FAMILIES[method]
    tokens = {name: stats.tokens for name, stats in budget.statistics().items()}
    assert tokens == {
        name: rate.burst - (1 if name == family else 0) for name, rate in DEFAULT_RATES.items()
    }


def test_method_families_cover_the_budgeted_methods() -> None:
    """Every awaited provider method has a family; initialize and load_balancer_name do not."""
    assert sorted(METHOD_FAMILIES) == sorted(
        [
            "instance_metadata",
            "instance_exists",
            "instance_shutdown",
            "instances_metadata",
            "instances_cursor",
            "instances_changed_since",
            "get_load_balancer",
            "ensure_load_balancer",
            "update_load_balancer",
            "ensure_load_balancer_deleted",
            "list_load_balancers",
            "delete_leaked_load_balancer",
            "list_routes",
            "create_route",
            "delete_route",
        ]
    )
    assert set(METHOD_FAMILIES.values()) == set(DEFAULT_RATES)


@pytest.mark.parametrize(
    ("capabilities", "expected"),
    [
        pytest.param({}, ("bulk", "lb", "routes"), id="all"),
        pytest.param({"bulk": False}, ("single", "lb", "routes"), id="no-bulk"),
        pytest.param({"instances": False}, (None, "lb", "routes"), id="no-instances"),
        pytest.param(
            {"instances": False, "load_balancers": False, "routes": False},
            (None, None, None),
            id="none",
        ),
    ],
)
def test_wrap_keeps_the_capabilities_shape(
    capabilities: dict[str, bool], expected: tuple[str | None, str | None, str | None]
) -> None:
    """None capabilities stay None; the wrapper is BulkInstances exactly when the provider is."""
    provider = CloudBudget().wrap(FakeProvider(Cloud(), **capabilities))
    assert isinstance(provider, CloudProvider)
    assert provider.name == "fake"
    instances = provider.instances
    shape = (
        None
        if instances is None
        else ("bulk" if isinstance(instances, BulkInstances) else "single"),
        None if provider.load_balancers is None else "lb",
        None if provider.routes is None else "routes",
    )
    assert shape == expected
    if instances is not None:
        assert (bulk_instances(instances) is not None) == (expected[0] == "bulk")


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(ThrottledError(retry_after_s=1.0), id="throttled"),
        pytest.param(RetryAfter(5.0), id="retry-after"),
        pytest.param(InstanceNotFoundError("node-a: gone"), id="not-found"),
        pytest.param(RuntimeError("boom"), id="other"),
    ],
)
async def test_exceptions_pass_through_as_the_same_object(
    autojump_clock: trio.testing.MockClock, error: Exception
) -> None:
    """The caller gets the provider's exception object itself, not a wrapper or copy."""
    provider, cloud = wrapped(CloudBudget())
    cloud.fail("delete_route", error)
    with trio.fail_after(LIMIT_S), pytest.raises(type(error)) as caught:
        await _routes(provider).delete_route("c", ROUTE)
    assert caught.value is error


async def test_unbudgeted_members_pass_through(autojump_clock: trio.testing.MockClock) -> None:
    """initialize, load_balancer_name and enable_node_addresses pass through without tokens."""
    budget = CloudBudget({"load_balancers": Rate(0.01, 1), "routes": Rate(0.01, 1)})
    inner = FakeProvider(Cloud())
    provider = budget.wrap(inner)
    with trio.fail_after(LIMIT_S):
        for _ in range(3):
            await provider.initialize()
    assert inner.initialized == 3
    assert [_lbs(provider).load_balancer_name("c", SERVICE) for _ in range(3)] == ["c-uid-web"] * 3
    routes = provider.routes
    assert routes is not None
    assert routes.enable_node_addresses is True
    assert isinstance(inner.routes, FakeRoutes)
    inner.routes.enable_node_addresses = False
    assert routes.enable_node_addresses is False  # read through, never copied
    assert trio.current_time() == 0.0
    assert {name: s.tokens for name, s in budget.statistics().items()} == {
        "instances": 30.0,
        "load_balancers": 1.0,
        "routes": 1.0,
    }


# -- configuration -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("qps", "burst"),
    [
        pytest.param(0.0, 1, id="zero-qps"),
        pytest.param(-1.0, 1, id="negative-qps"),
        pytest.param(float("nan"), 1, id="nan-qps"),
        pytest.param(float("inf"), 1, id="inf-qps"),
        pytest.param(1.0, 0, id="zero-burst"),
    ],
)
def test_rate_rejects_nonsense(qps: float, burst: int) -> None:
    """A rate needs a positive, finite qps and a burst of at least one."""
    with pytest.raises(ValueError, match="Rate:"):
        Rate(qps, burst)


async def test_overrides_keep_the_other_defaults(autojump_clock: trio.testing.MockClock) -> None:
    """rates= replaces the families it names; the others keep DEFAULT_RATES."""
    stats = CloudBudget({"routes": Rate(1, 2)}).statistics()
    assert {name: (s.configured_qps, s.burst) for name, s in stats.items()} == {
        "instances": (10.0, 30),
        "load_balancers": (5.0, 10),
        "routes": (1.0, 2),
    }
    assert all(s.effective_qps == s.configured_qps for s in stats.values())


async def test_unknown_families_and_methods_are_rejected(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A misspelt family or method is a ValueError naming the valid ones."""
    with pytest.raises(ValueError, match="the families are instances, load_balancers, routes"):
        CloudBudget({"instance": Rate(1, 1)})
    budget = CloudBudget()
    with pytest.raises(ValueError, match="unknown method family 'disks'"):
        await budget.acquire("disks")
    with pytest.raises(ValueError, match="'initialize' is not a budgeted provider method"):
        await budget.call("initialize", trio.sleep, 0)


async def test_the_guard_runs_before_each_call_and_each_request_inside_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The budget's guard runs before a provider call, and (through the fence's context)
    before each request the provider sends inside it; once it refuses, nothing leaves."""
    leading = [True]
    sent: list[str] = []

    def guard() -> None:
        if not leading[0]:
            raise NotLeadingError("not leading (test)")

    class Recorder(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            sent.append(request.url.path)
            return httpx.Response(200, request=request)

    http = httpx.AsyncClient(transport=GuardedTransport(Recorder()), base_url="http://cloud")

    async def two_requests() -> None:
        await http.put("/first")
        leading[0] = False  # the Lease is lost between the provider's two requests
        await http.put("/second")

    budget = CloudBudget(guard=guard)
    with trio.fail_after(LIMIT_S):
        with pytest.raises(NotLeadingError):
            await budget.call("ensure_load_balancer", two_requests)
        with pytest.raises(NotLeadingError):
            await budget.call("ensure_load_balancer", two_requests)
        await http.put("/outside")  # no budgeted call: no guard
    assert sent == ["/first", "/outside"]
