"""The shared cloud-call budget: a token bucket per method family, slowed down by throttles.

Every provider call of the controllers goes through one `CloudBudget`, by way of
`budget.wrap(provider)`. The provider's methods fall into three families, each with its own
bucket (`METHOD_FAMILIES`): `instances`, `load_balancers` and `routes`. `initialize()` and
the pure `load_balancer_name()` are not budgeted.

A bucket holds up to `burst` tokens and earns `qps` per second (`trio.current_time()`, so it
runs on a `MockClock` in tests). A call takes one token; callers that find none wait in
arrival order (FIFO): a newcomer never overtakes a waiting caller, and a cancelled waiter
hands its turn to the next one.

Throttle feedback, per family (additive increase, multiplicative decrease):

- A call that raises `ThrottledError` halves the family's effective rate (down to a floor
  of 1/20 of the configured rate, and never below 0.05/s unless configured lower) and drops
  the tokens saved in the bucket: the cloud's own bucket is empty, so a saved burst would
  only be throttled too. Calls that were already under way when the rate was last halved
  were admitted at the old rate: their throttles count (metrics, statistics, pause) but do
  not halve again, so ten calls throttled together halve the rate once, not ten times.
- Recovery is by time: after 10 s without a throttle the effective rate grows by 10 % of
  the configured rate, and again every further 10 s, until it is back at the configured
  rate. Any throttle restarts that 10 s clock. From one halving back to the full rate thus
  takes 50 s; from the floor, 100 s. Time rather than successful calls, so a family that is
  used rarely still recovers, and one used heavily does not recover faster than the cloud
  refills.
- A `ThrottledError` with `retry_after_s` also pauses the family until then: no call of the
  family starts and the bucket earns nothing before that moment; at that moment the bucket
  holds one token, so exactly one call goes at the time the cloud named and the rest
  follow at the effective rate.

The state is advanced lazily when the family is used (a waiting caller wakes at every
recovery step), so the `cloudprovider_api_budget_qps` gauge of an idle family shows its
recovered rate only from its next call or `statistics()`.

Metrics, on the caller's `CollectorRegistry` when given: per method
`cloudprovider_api_request_duration_seconds` (every call that returned or raised;
cancelled calls are not observed), `cloudprovider_api_request_errors_total` (every call
that raised, throttles included) and `cloudprovider_api_throttles_total`; per family
`cloudprovider_api_budget_qps` (the effective rate) and
`cloudprovider_api_budget_wait_seconds` (time spent waiting for a token, zero included).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, ParamSpec, TypeVar

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from trio_ccm.cloud.drain import waiting
from trio_ccm.cloud.fence import guarding
from trio_ccm.cloud.provider import (
    BulkInstances,
    CloudProvider,
    InstanceChangeFeed,
    InstanceChanges,
    InstanceMetadata,
    Instances,
    LoadBalancerInventory,
    LoadBalancers,
    LoadBalancerStatus,
    NodeInfo,
    OwnedLoadBalancer,
    Route,
    Routes,
    ServiceInfo,
    ThrottledError,
)

__all__ = [
    "DEFAULT_RATES",
    "FAMILIES",
    "METHOD_FAMILIES",
    "CloudBudget",
    "FamilyStatistics",
    "Rate",
]

P = ParamSpec("P")
T = TypeVar("T")

FAMILIES: Final = ("instances", "load_balancers", "routes")
"""The method families, one token bucket each."""

METHOD_FAMILIES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "instance_metadata": "instances",
        "instance_exists": "instances",
        "instance_shutdown": "instances",
        "instances_metadata": "instances",
        "instances_cursor": "instances",
        "instances_changed_since": "instances",
        "get_load_balancer": "load_balancers",
        "ensure_load_balancer": "load_balancers",
        "update_load_balancer": "load_balancers",
        "ensure_load_balancer_deleted": "load_balancers",
        "list_load_balancers": "load_balancers",
        "delete_leaked_load_balancer": "load_balancers",
        "list_routes": "routes",
        "create_route": "routes",
        "delete_route": "routes",
    }
)
"""Which family's bucket each budgeted provider method draws from."""

_FLOOR_FRACTION: Final = 1 / 20  # a throttled family never drops below 1/20 of its rate ...
_FLOOR_MIN_QPS: Final = 0.05  # ... nor below one call per 20 s (unless configured lower)
_RECOVERY_PERIOD_S: Final = 10.0  # each 10 s without a throttle ...
_RECOVERY_STEP: Final = 0.1  # ... gives back 10 % of the configured rate
_EPSILON: Final = 1e-9  # float slack when a refill lands exactly on a whole token

_DURATION_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_WAIT_BUCKETS: Final = (0.0, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass(frozen=True, slots=True)
class Rate:
    """A sustained rate of `qps` calls per second, with up to `burst` calls saved up."""

    qps: float
    burst: int

    def __post_init__(self) -> None:
        if not (self.qps > 0 and math.isfinite(self.qps)):
            raise ValueError(f"Rate: qps must be a positive number, got {self.qps!r}")
        if self.burst < 1:
            raise ValueError(f"Rate: burst must be at least 1, got {self.burst!r}")


# Below the limits of the clouds we know, so that a CCM alone never trips them: AWS EC2
# refills a non-mutating action's bucket at about 20/s per account and region (mutating
# ones lower) and other tools share that account; ELB and route APIs are mutating and
# limited harder. Instance lookups dominate (initialisation, address sync, lifecycle), so
# they get the most. Override per family (e.g. Hetzner Cloud allows 1/s per project).
DEFAULT_RATES: Final[Mapping[str, Rate]] = MappingProxyType(
    {
        "instances": Rate(10, 30),
        "load_balancers": Rate(5, 10),
        "routes": Rate(5, 10),
    }
)


@dataclass(frozen=True, slots=True)
class FamilyStatistics:
    """A snapshot of one family's bucket."""

    configured_qps: float
    burst: int
    effective_qps: float  # the configured rate, or less after throttles
    tokens: float  # saved calls, 0 .. burst
    waiting: int  # callers waiting for a token
    throttles: int  # ThrottledErrors seen since the budget was made
    paused_s: float  # seconds until a retry_after pause ends; 0.0 when not paused


class _BudgetMetrics:
    """The budget's collectors, on the caller's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.duration = Histogram(
            "cloudprovider_api_request_duration_seconds",
            "Latency of cloud provider calls in seconds, by provider method.",
            ["method"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.errors = Counter(
            "cloudprovider_api_request_errors",
            "Cloud provider calls that raised (throttles included), by provider method.",
            ["method"],
            registry=registry,
        )
        self.throttles = Counter(
            "cloudprovider_api_throttles",
            "Cloud provider calls refused for the cloud's rate limits, by provider method.",
            ["method"],
            registry=registry,
        )
        self.qps = Gauge(
            "cloudprovider_api_budget_qps",
            "Effective calls per second allowed for a family of cloud provider methods.",
            ["family"],
            registry=registry,
        )
        self.wait = Histogram(
            "cloudprovider_api_budget_wait_seconds",
            "Seconds a cloud provider call waited for the budget, by method family.",
            ["family"],
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )


class _Waiter:
    """One caller queued for a token; `event` is set to wake it (replaced on each wait)."""

    __slots__ = ("event", "gone")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.gone = False  # cancelled behind the head: skipped when it reaches the head


class _Bucket:
    """One family's token bucket with throttle feedback; see the module docstring."""

    def __init__(self, family: str, rate: Rate, metrics: _BudgetMetrics | None) -> None:
        self.family = family
        self.rate = rate
        self.effective = float(rate.qps)
        self.floor = min(rate.qps, max(rate.qps * _FLOOR_FRACTION, _FLOOR_MIN_QPS))
        self.tokens = float(rate.burst)
        self.throttles = 0
        self.waiters: deque[_Waiter] = deque()  # the head is never gone
        self._gone = 0  # waiters marked gone, still in the deque
        self._updated: float | None = None  # when `tokens` was last brought up to date
        self._recovered_at = -math.inf  # last throttle or recovery step
        self._halved_at = -math.inf  # last halving: older calls do not halve again
        self._paused_until: float | None = None
        self._gauge = metrics.qps.labels(family) if metrics is not None else None
        self._wait = metrics.wait.labels(family) if metrics is not None else None
        if self._gauge is not None:
            self._gauge.set(self.effective)

    # -- time -----------------------------------------------------------------------------
    def advance(self, now: float) -> None:
        """Bring tokens, pause and recovery up to `now`, step by step."""
        if self._updated is None:
            self._updated = now
            return
        while True:
            step_at = self._next_step_at()
            self._earn(min(now, step_at))
            if step_at > now:
                return
            self._set_effective(
                min(float(self.rate.qps), self.effective + self.rate.qps * _RECOVERY_STEP)
            )
            self._recovered_at = step_at

    def _next_step_at(self) -> float:
        if self.effective >= self.rate.qps:
            return math.inf
        return self._recovered_at + _RECOVERY_PERIOD_S

    def _earn(self, until: float) -> None:
        assert self._updated is not None
        start = self._updated
        if self._paused_until is not None:
            if until < self._paused_until:
                self._updated = until
                return
            start = max(start, self._paused_until)
            self.tokens = max(self.tokens, 1.0)
            self._paused_until = None
        if until > start:
            self.tokens = min(
                float(self.rate.burst), self.tokens + (until - start) * self.effective
            )
        self._updated = until

    def _set_effective(self, qps: float) -> None:
        self.effective = qps
        if self._gauge is not None:
            self._gauge.set(qps)

    def _token_at(self, now: float) -> float:
        """When the head of the queue may go (call after `advance(now)`)."""
        if self._paused_until is not None and now < self._paused_until:
            return self._paused_until
        if self.tokens >= 1.0 - _EPSILON:
            return now
        at = now + (1.0 - self.tokens) / self.effective
        # A recovery step raises the rate: wake there and compute again.
        return min(at, self._next_step_at())

    def paused_s(self, now: float) -> float:
        return self._paused_until - now if self._paused_until is not None else 0.0

    # -- taking ---------------------------------------------------------------------------
    async def acquire(self) -> float:
        """Take one token, waiting in FIFO order; returns the seconds waited."""
        await trio.lowlevel.checkpoint_if_cancelled()
        started = trio.current_time()
        self.advance(started)
        if not self.waiters and self._token_at(started) <= started:
            self.tokens -= 1.0
            await trio.lowlevel.cancel_shielded_checkpoint()
            return self._waited(0.0)
        waiter = _Waiter()
        self.waiters.append(waiter)
        try:
            while True:
                waiter.event = trio.Event()
                if self.waiters[0] is not waiter:
                    await waiter.event.wait()
                    continue
                now = trio.current_time()
                self.advance(now)
                at = self._token_at(now)
                if at <= now:
                    self.tokens -= 1.0
                    return self._waited(now - started)
                with trio.move_on_at(at):
                    await waiter.event.wait()
        finally:
            # Taken or cancelled. The head leaves and wakes the next live waiter; one behind
            # it is only marked (so mass cancellation costs O(n), not O(n**2)).
            if self.waiters[0] is waiter:
                self.waiters.popleft()
                while self.waiters and self.waiters[0].gone:
                    self.waiters.popleft()
                    self._gone -= 1
                if self.waiters:
                    self.waiters[0].event.set()
            else:
                waiter.gone = True
                self._gone += 1

    def _waited(self, seconds: float) -> float:
        if self._wait is not None:
            self._wait.observe(seconds)
        return seconds

    # -- feedback -------------------------------------------------------------------------
    def throttled(self, started: float, retry_after_s: float | None) -> None:
        """A call that started at `started` was throttled just now."""
        now = trio.current_time()
        self.advance(now)
        self.throttles += 1
        self.tokens = min(self.tokens, 0.0)
        self._recovered_at = now
        if started >= self._halved_at:
            self._halved_at = now
            self._set_effective(max(self.floor, self.effective / 2))
        if retry_after_s is not None and 0 < retry_after_s < math.inf:
            until = now + retry_after_s
            if self._paused_until is None or until > self._paused_until:
                self._paused_until = until

    def statistics(self, now: float) -> FamilyStatistics:
        self.advance(now)
        return FamilyStatistics(
            configured_qps=float(self.rate.qps),
            burst=self.rate.burst,
            effective_qps=self.effective,
            tokens=max(self.tokens, 0.0),
            waiting=len(self.waiters) - self._gone,
            throttles=self.throttles,
            paused_s=self.paused_s(now),
        )


class CloudBudget:
    """Token buckets per method family, shared by every provider call; see the module doc.

    `rates` overrides the `DEFAULT_RATES` of the families it names. Make one budget per
    process (per cloud account) and `wrap()` the provider once with it.
    """

    def __init__(
        self,
        rates: Mapping[str, Rate] | None = None,
        *,
        registry: CollectorRegistry | None = None,
        guard: Callable[[], None] | None = None,
    ) -> None:
        """`guard()` runs right before every provider call (after the token wait) and may
        raise to stop it: the supervisor's "do we still hold the Lease?" check."""
        self._guard = guard
        merged = dict(DEFAULT_RATES)
        for family, rate in (rates or {}).items():
            if family not in merged:
                raise ValueError(
                    f"cloud budget: unknown method family {family!r}; "
                    f"the families are {', '.join(FAMILIES)}"
                )
            merged[family] = rate
        self._metrics = _BudgetMetrics(registry) if registry is not None else None
        self._buckets = {
            family: _Bucket(family, rate, self._metrics) for family, rate in merged.items()
        }

    def _bucket(self, family: str) -> _Bucket:
        try:
            return self._buckets[family]
        except KeyError:
            raise ValueError(
                f"cloud budget: unknown method family {family!r}; "
                f"the families are {', '.join(FAMILIES)}"
            ) from None

    async def acquire(self, family: str) -> float:
        """Wait for a token of `family` (FIFO); returns the seconds waited."""
        return await self._bucket(family).acquire()

    async def call(
        self,
        method: str,
        fn: Callable[P, Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run `fn(*args, **kwargs)` as provider method `method`: budgeted, timed, counted.

        Exceptions propagate unchanged (the same object); a `ThrottledError` also slows
        the method's family down.
        """
        family = METHOD_FAMILIES.get(method)
        if family is None:
            raise ValueError(
                f"cloud budget: {method!r} is not a budgeted provider method; "
                f"they are {', '.join(METHOD_FAMILIES)}"
            )
        bucket = self._buckets[family]
        with waiting():  # a graceful drain cancels a step still queued here (cloud/drain.py)
            await bucket.acquire()
        if self._guard is not None:
            self._guard()
        started = trio.current_time()
        try:
            with guarding(self._guard):  # checked again before each request (cloud/fence.py)
                result = await fn(*args, **kwargs)
        except ThrottledError as exc:
            self._observe(method, started, failed=True)
            if self._metrics is not None:
                self._metrics.throttles.labels(method).inc()
            bucket.throttled(started, exc.retry_after_s)
            raise
        except Exception:  # counted, then re-raised as is: nothing is handled here
            self._observe(method, started, failed=True)
            raise
        self._observe(method, started, failed=False)
        return result

    def _observe(self, method: str, started: float, *, failed: bool) -> None:
        if self._metrics is None:
            return
        self._metrics.duration.labels(method).observe(trio.current_time() - started)
        if failed:
            self._metrics.errors.labels(method).inc()

    def statistics(self) -> Mapping[str, FamilyStatistics]:
        """A snapshot per family, keyed by family name."""
        now = trio.current_time()
        return {family: bucket.statistics(now) for family, bucket in self._buckets.items()}

    def wrap(self, provider: CloudProvider) -> CloudProvider:
        """The same provider with every budgeted method going through this budget.

        The capabilities are read once, here: `None` stays `None`, and an `instances` that
        also implements `BulkInstances` (or `InstanceChangeFeed`) gives a wrapper that does too.
        """
        return _BudgetedProvider(provider, self)


# -- the wrappers ----------------------------------------------------------------------------
class _BudgetedInstances:
    def __init__(self, inner: Instances, budget: CloudBudget) -> None:
        self._inner = inner
        self._budget = budget

    async def instance_metadata(self, node: NodeInfo) -> InstanceMetadata | None:
        return await self._budget.call("instance_metadata", self._inner.instance_metadata, node)

    async def instance_exists(self, node: NodeInfo) -> bool:
        return await self._budget.call("instance_exists", self._inner.instance_exists, node)

    async def instance_shutdown(self, node: NodeInfo) -> bool:
        return await self._budget.call("instance_shutdown", self._inner.instance_shutdown, node)


class _BudgetedBulkInstances(_BudgetedInstances):
    def __init__(self, inner: Instances, bulk: BulkInstances, budget: CloudBudget) -> None:
        super().__init__(inner, budget)
        self._bulk = bulk

    async def instances_metadata(self, nodes: Sequence[NodeInfo]) -> Mapping[str, InstanceMetadata]:
        return await self._budget.call("instances_metadata", self._bulk.instances_metadata, nodes)


class _BudgetedChangeFeed:
    """The change feed's methods, mixed into an instances wrapper whose provider has one."""

    _budget: CloudBudget
    _feed: InstanceChangeFeed

    async def instances_cursor(self) -> str:
        return await self._budget.call("instances_cursor", self._feed.instances_cursor)

    async def instances_changed_since(self, cursor: str) -> InstanceChanges:
        return await self._budget.call(
            "instances_changed_since", self._feed.instances_changed_since, cursor
        )


class _BudgetedFeedInstances(_BudgetedChangeFeed, _BudgetedInstances):
    def __init__(self, inner: Instances, feed: InstanceChangeFeed, budget: CloudBudget) -> None:
        super().__init__(inner, budget)
        self._feed = feed


class _BudgetedBulkFeedInstances(_BudgetedChangeFeed, _BudgetedBulkInstances):
    def __init__(
        self, inner: Instances, bulk: BulkInstances, feed: InstanceChangeFeed, budget: CloudBudget
    ) -> None:
        super().__init__(inner, bulk, budget)
        self._feed = feed


class _BudgetedLoadBalancers:
    def __init__(self, inner: LoadBalancers, budget: CloudBudget) -> None:
        self._inner = inner
        self._budget = budget

    async def get_load_balancer(
        self, cluster: str, service: ServiceInfo
    ) -> LoadBalancerStatus | None:
        return await self._budget.call(
            "get_load_balancer", self._inner.get_load_balancer, cluster, service
        )

    def load_balancer_name(self, cluster: str, service: ServiceInfo) -> str:
        return self._inner.load_balancer_name(cluster, service)

    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> LoadBalancerStatus:
        return await self._budget.call(
            "ensure_load_balancer", self._inner.ensure_load_balancer, cluster, service, nodes
        )

    async def update_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> None:
        await self._budget.call(
            "update_load_balancer", self._inner.update_load_balancer, cluster, service, nodes
        )

    async def ensure_load_balancer_deleted(self, cluster: str, service: ServiceInfo) -> None:
        await self._budget.call(
            "ensure_load_balancer_deleted",
            self._inner.ensure_load_balancer_deleted,
            cluster,
            service,
        )


class _BudgetedInventoryLoadBalancers(_BudgetedLoadBalancers):
    def __init__(
        self, inner: LoadBalancers, inventory: LoadBalancerInventory, budget: CloudBudget
    ) -> None:
        super().__init__(inner, budget)
        self._inventory = inventory

    async def list_load_balancers(self, cluster: str) -> Sequence[OwnedLoadBalancer]:
        return await self._budget.call(
            "list_load_balancers", self._inventory.list_load_balancers, cluster
        )

    async def delete_leaked_load_balancer(self, cluster: str, lb: OwnedLoadBalancer) -> None:
        await self._budget.call(
            "delete_leaked_load_balancer", self._inventory.delete_leaked_load_balancer, cluster, lb
        )


class _BudgetedRoutes:
    def __init__(self, inner: Routes, budget: CloudBudget) -> None:
        self._inner = inner
        self._budget = budget

    @property
    def enable_node_addresses(self) -> bool:
        return self._inner.enable_node_addresses

    async def list_routes(self, cluster: str) -> Sequence[Route]:
        return await self._budget.call("list_routes", self._inner.list_routes, cluster)

    async def create_route(self, cluster: str, name_hint: str, route: Route) -> None:
        await self._budget.call("create_route", self._inner.create_route, cluster, name_hint, route)

    async def delete_route(self, cluster: str, route: Route) -> None:
        await self._budget.call("delete_route", self._inner.delete_route, cluster, route)


class _BudgetedProvider:
    name: str
    instances: Instances | None
    load_balancers: LoadBalancers | None
    routes: Routes | None

    def __init__(self, inner: CloudProvider, budget: CloudBudget) -> None:
        self._inner = inner
        self.name = inner.name
        instances = inner.instances
        feed = instances if isinstance(instances, InstanceChangeFeed) else None
        if instances is None:
            self.instances = None
        elif isinstance(instances, BulkInstances):
            self.instances = (
                _BudgetedBulkInstances(instances, instances, budget)
                if feed is None
                else _BudgetedBulkFeedInstances(instances, instances, feed, budget)
            )
        elif feed is not None:
            self.instances = _BudgetedFeedInstances(instances, feed, budget)
        else:
            self.instances = _BudgetedInstances(instances, budget)
        lbs = inner.load_balancers
        if lbs is None:
            self.load_balancers = None
        elif isinstance(lbs, LoadBalancerInventory):
            self.load_balancers = _BudgetedInventoryLoadBalancers(lbs, lbs, budget)
        else:
            self.load_balancers = _BudgetedLoadBalancers(lbs, budget)
        routes = inner.routes
        self.routes = None if routes is None else _BudgetedRoutes(routes, budget)

    async def initialize(self) -> None:
        await self._inner.initialize()

    def __repr__(self) -> str:
        return f"<budgeted {self._inner!r}>"
