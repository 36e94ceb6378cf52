"""Per-key exponential backoff with jitter; `RetryAfter(delay_s)` wins.

The n-th consecutive failure of a key waits `min(cap_s, base_s * factor ** (n - 1))`, the
delay client-go's `ItemExponentialFailureRateLimiter` gives (`AddRateLimited`), shortened by
a random fraction of at most `jitter` so that keys which failed together do not retry
together. Jitter only ever shortens a delay: `cap_s` is a true upper bound and the upstream
figures below are upper bounds too.

`RetryAfter(delay_s)` means "retry after exactly this long" (a load balancer still being
provisioned): `delay_for` returns exactly `delay_s` and leaves the key's failure count
alone, neither growing nor resetting it. That is upstream's split: a `RetryError` is
re-queued with `AddAfter`, which does not consult the rate limiter, and only success
(`Forget`) resets the count. So a run of RetryAfters followed by a real error continues the
exponential sequence where it was.

State is kept only for keys that are failing (`reset` on success removes it), so a Backoff
shared by thousands of healthy keys holds nothing; once a wave of failing keys is over, the
emptied table is given back too (a dict never shrinks by itself). One Backoff belongs to one
controller: keys are not namespaced.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable

from trio_ccm.errors import RetryAfter

# service-lb-controller: both of its queues use per-item exponential backoff
# 5 s, 10 s, 20 s ... 300 s (`minRetryDelay` / `maxRetryDelay` in controllers/service).
SERVICE_RETRY_BASE_S = 5.0
SERVICE_RETRY_CAP_S = 300.0

# cloud-node-controller (and client-go's DefaultControllerRateLimiter in general): per-item
# 5 ms * 2^n capped at 1000 s. Upstream takes the max of that and an overall token bucket
# (10 qps, burst 100); the overall rate of cloud calls is cloud/budget.py's job here.
NODE_RETRY_BASE_S = 0.005
NODE_RETRY_CAP_S = 1000.0

# node-route-controller: no per-item backoff. It reconciles all routes every
# --route-reconciliation-period (10 s, non-sliding), so a failure is retried by the next
# run 10 s later; the watch-based mode (alpha) rate-limits its single key to 1 per 10 s.
ROUTE_RECONCILIATION_PERIOD_S = 10.0

DEFAULT_JITTER = 0.1
_SMALL = 64  # an emptied table that never held more keys is kept


class Backoff:
    """Per-key retry delays; see the module docstring."""

    def __init__(
        self,
        base_s: float,
        cap_s: float,
        *,
        factor: float = 2.0,
        jitter: float = DEFAULT_JITTER,
        rng: random.Random | None = None,
    ) -> None:
        if not 0 < base_s <= cap_s < math.inf:
            raise ValueError(f"Backoff({base_s!r}, {cap_s!r}): need 0 < base_s <= cap_s < inf")
        if not 1.0 <= factor < math.inf:
            raise ValueError(f"Backoff factor={factor!r}: need a finite factor >= 1")
        if not 0.0 <= jitter <= 1.0:
            raise ValueError(f"Backoff jitter={jitter!r}: need a fraction in [0, 1]")
        self.base_s = base_s
        self.cap_s = cap_s
        self.factor = factor
        self.jitter = jitter
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        # Failures after which the delay is the cap; keeps factor ** n from overflowing.
        # (With factor 1 the delay is base_s for ever.)
        self._steps_to_cap: float = (
            math.ceil(math.log(cap_s / base_s) / math.log(factor)) if factor > 1 else math.inf
        )
        self._failures: dict[Hashable, int] = {}
        self._peak = 0  # the most keys failing since `_failures` was made

    def next_delay(self, key: Hashable) -> float:
        """Count one more failure of `key` and return how long to wait before retrying."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        self._peak = max(self._peak, len(self._failures))
        steps = failures - 1
        if steps >= self._steps_to_cap:
            delay = self.cap_s
        else:
            delay = min(self.cap_s, self.base_s * self.factor**steps)
        if self.jitter:
            delay *= 1.0 - self.jitter * self._rng.random()
        return delay

    def delay_for(self, key: Hashable, exc: BaseException) -> float:
        """The delay after `exc`: exactly RetryAfter's `delay_s` (count untouched), else
        `next_delay(key)`."""
        fixed = retry_after_s(exc)
        if fixed is not None:
            return fixed
        return self.next_delay(key)

    def reset(self, key: Hashable) -> None:
        """Forget the failures of `key` (call after a success)."""
        self._failures.pop(key, None)
        if not self._failures and self._peak > _SMALL:
            self._failures, self._peak = {}, 0

    def failures(self, key: Hashable) -> int:
        """Consecutive failures of `key` counted since its last reset."""
        return self._failures.get(key, 0)

    def __len__(self) -> int:
        """The number of keys with failures counted."""
        return len(self._failures)

    def __repr__(self) -> str:
        return (
            f"Backoff(base_s={self.base_s!r}, cap_s={self.cap_s!r}, factor={self.factor!r}, "
            f"jitter={self.jitter!r}, failing={len(self._failures)})"
        )


def retry_after_s(exc: BaseException) -> float | None:
    """The fixed delay `exc` asks for, or None when it is an ordinary failure.

    A `RetryAfter` gives its `delay_s` (negative or NaN counts as 0). An exception group
    (a handler's nursery) asks for a fixed delay only if every exception in it is a
    RetryAfter, and then for the longest; any other error in it makes it a failure.
    """
    if isinstance(exc, RetryAfter):
        return exc.delay_s if exc.delay_s >= 0 else 0.0
    if isinstance(exc, BaseExceptionGroup):
        matched, rest = exc.split(RetryAfter)
        if matched is None or rest is not None:
            return None
        return max(_retry_after_leaves(matched))
    return None


def _retry_after_leaves(group: BaseExceptionGroup[BaseException]) -> list[float]:
    delays: list[float] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            delays.extend(_retry_after_leaves(exc))
        else:
            delay = retry_after_s(exc)
            if delay is not None:
                delays.append(delay)
    return delays


def service_backoff(*, jitter: float = DEFAULT_JITTER, rng: random.Random | None = None) -> Backoff:
    """service-lb-controller's retries: 5 s, 10 s, 20 s ... 300 s (upstream, plus jitter)."""
    return Backoff(SERVICE_RETRY_BASE_S, SERVICE_RETRY_CAP_S, jitter=jitter, rng=rng)


def node_backoff(*, jitter: float = DEFAULT_JITTER, rng: random.Random | None = None) -> Backoff:
    """Node controllers' retries: client-go's per-item default, 5 ms, 10 ms ... 1000 s."""
    return Backoff(NODE_RETRY_BASE_S, NODE_RETRY_CAP_S, jitter=jitter, rng=rng)


def route_backoff(*, jitter: float = 0.0, rng: random.Random | None = None) -> Backoff:
    """node-route-controller's retry: the next reconciliation, a constant 10 s later."""
    return Backoff(
        ROUTE_RECONCILIATION_PERIOD_S, ROUTE_RECONCILIATION_PERIOD_S, jitter=jitter, rng=rng
    )
