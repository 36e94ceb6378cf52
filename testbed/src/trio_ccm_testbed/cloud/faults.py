"""Faults of the simulated cloud: latency, injected errors, throttling, eventual consistency,
and late landings.

A rule selects calls by API method (`GetInstance`), by family (`instances`) or all of
them (`*`). Latency rules add up; error rules fire with a probability (seeded dice) and
at most `count` times; throttle rules are token buckets like real clouds': they start full
with `burst` tokens, refill at `rate_per_s`, and a call finding less than one token is
answered 429 with the exact time until the next token as Retry-After. Every bucket a call
matches must admit it, and the call then takes a token from each.

A late rule holds matching calls (at most `count` of them) for `delay_s` and then applies
them, whether or not the caller is still waiting: set `delay_s` beyond the client's timeout
and the request lands after the client gave up (and after its retry, if that was quick), as
real clouds do with queued writes. A held request is applied at its due time by the first
thing that looks at the cloud after it (an API call, the admin API, a Python getter), so no
task is needed and it runs under `MockClock`. `hold_s` (admin: `holdSeconds` in
`GET /_sim/settings`) says how long the cloud may hold a request, also after the rule was
removed while requests it held are still waiting: a provider's margin.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType

from trio_ccm_testbed.cloud.errors import SimApiError
from trio_ccm_testbed.cloud.model import JSON

METHOD_FAMILIES = MappingProxyType(
    {
        "Health": "health",
        "ListInstances": "instances",
        "ListInstanceChanges": "instances",
        "GetInstance": "instances",
        "ListLoadBalancers": "loadbalancers",
        "GetLoadBalancer": "loadbalancers",
        "PutLoadBalancer": "loadbalancers",
        "SetLoadBalancerBackends": "loadbalancers",
        "DeleteLoadBalancer": "loadbalancers",
        "ListRoutes": "routes",
        "GetRoute": "routes",
        "CreateRoute": "routes",
        "DeleteRoute": "routes",
    }
)
"""Every API method of the simulated cloud and the family it belongs to."""

FAMILIES = frozenset(METHOD_FAMILIES.values())
_TOKEN_EPSILON = 1e-9  # float refill arithmetic must not turn 1.0 into 0.999…


def check_selector(selector: str) -> str:
    """`selector` if it names a method, a family or `*`; else ValueError listing the names."""
    if selector == "*" or selector in METHOD_FAMILIES or selector in FAMILIES:
        return selector
    raise ValueError(
        f"unknown method or family {selector!r}: use '*', one of the families "
        f"{', '.join(sorted(FAMILIES))}, or one of the methods {', '.join(METHOD_FAMILIES)}"
    )


def selects(selector: str, method: str) -> bool:
    return selector in ("*", method) or selector == METHOD_FAMILIES.get(method)


@dataclass
class LatencyRule:
    """Delay matching calls by `fixed_s` plus a uniform draw from [0, `jitter_s`]."""

    id: int
    method: str
    fixed_s: float
    jitter_s: float

    def to_json(self) -> dict[str, JSON]:
        return {
            "id": self.id,
            "kind": "latency",
            "method": self.method,
            "fixedSeconds": self.fixed_s,
            "jitterSeconds": self.jitter_s,
        }


@dataclass
class ErrorRule:
    """Answer matching calls with `status`: with `probability` (None: always), `count` times."""

    id: int
    method: str
    status: int
    probability: float | None
    count: int | None
    retry_after_s: float | None
    fired: int = 0

    def to_json(self) -> dict[str, JSON]:
        return {
            "id": self.id,
            "kind": "error",
            "method": self.method,
            "status": self.status,
            "probability": self.probability,
            "count": self.count,
            "retryAfterSeconds": self.retry_after_s,
            "fired": self.fired,
        }


@dataclass
class ThrottleRule:
    """A token bucket over the calls `target` (a method, a family or `*`) selects."""

    id: int
    target: str
    rate_per_s: float
    burst: int
    throttled: int = 0
    _tokens: float = field(default=0.0, repr=False)
    _updated: float | None = field(default=None, repr=False)

    def tokens(self, now: float) -> float:
        """The tokens in the bucket at `now` (full before its first call)."""
        if self._updated is None:
            return float(self.burst)
        return min(float(self.burst), self._tokens + (now - self._updated) * self.rate_per_s)

    def wait_s(self, now: float) -> float:
        """How long until the bucket holds one token (0 when it holds one now)."""
        missing = 1.0 - self.tokens(now)
        return 0.0 if missing <= _TOKEN_EPSILON else missing / self.rate_per_s

    def take(self, now: float) -> None:
        self._tokens = self.tokens(now) - 1.0
        self._updated = now

    def to_json(self) -> dict[str, JSON]:
        return {
            "id": self.id,
            "kind": "throttle",
            "target": self.target,
            "ratePerSecond": self.rate_per_s,
            "burst": self.burst,
            "throttled": self.throttled,
        }


@dataclass
class LateRule:
    """Hold matching calls for `delay_s`, then apply them (at most `count` times)."""

    id: int
    method: str
    delay_s: float
    count: int | None
    fired: int = 0

    def to_json(self) -> dict[str, JSON]:
        return {
            "id": self.id,
            "kind": "late",
            "method": self.method,
            "delaySeconds": self.delay_s,
            "count": self.count,
            "fired": self.fired,
        }


@dataclass
class Held:
    """One held request: applied by `Faults.land` at `due` (its answer, or the SimApiError
    it raised, kept in `answer`)."""

    due: float
    delay_s: float
    method: str
    apply: Callable[[float], object]
    answer: object = None
    landed: bool = False


FaultRule = LatencyRule | ErrorRule | ThrottleRule | LateRule


class Faults:
    """The active fault rules and the eventual-consistency delay of a `SimCloud`."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.rules: list[FaultRule] = []
        self.consistency_delay_s = 0.0
        """New instances stay invisible to API lookups for this long after they are added."""
        self.held: list[Held] = []
        """Requests held by late rules, not yet applied."""
        self.landed_late = 0
        """Held requests applied so far."""
        self._ids = itertools.count(1)

    # -- adding and removing rules ----------------------------------------------------
    def latency(
        self, method: str = "*", *, fixed_s: float = 0.05, jitter_s: float = 0.0
    ) -> LatencyRule:
        """Delay calls to `method` (a method, a family or `*`) by `fixed_s` + jitter."""
        if fixed_s < 0 or jitter_s < 0:
            raise ValueError("latency: fixed_s and jitter_s must not be negative")
        rule = LatencyRule(next(self._ids), check_selector(method), fixed_s, jitter_s)
        self.rules.append(rule)
        return rule

    def error(
        self,
        method: str,
        *,
        status: int = 500,
        probability: float | None = None,
        count: int | None = None,
        retry_after_s: float | None = None,
    ) -> ErrorRule:
        """Answer calls to `method` with `status`, with `probability`, at most `count` times."""
        if not 400 <= status <= 599:
            raise ValueError(f"error: status {status} is not an HTTP error (400-599)")
        if probability is not None and not 0.0 <= probability <= 1.0:
            raise ValueError(f"error: probability {probability} is not between 0 and 1")
        if count is not None and count < 0:
            raise ValueError(f"error: count {count} is negative")
        if retry_after_s is not None and retry_after_s < 0:
            raise ValueError(f"error: retry_after_s {retry_after_s} is negative")
        rule = ErrorRule(
            next(self._ids), check_selector(method), status, probability, count, retry_after_s
        )
        self.rules.append(rule)
        return rule

    def throttle(
        self, family_or_method: str, *, rate_per_s: float = 20, burst: int = 100
    ) -> ThrottleRule:
        """Limit calls to `family_or_method` (or `*`) with a token bucket."""
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("throttle: rate_per_s must be positive and burst at least 1")
        rule = ThrottleRule(next(self._ids), check_selector(family_or_method), rate_per_s, burst)
        self.rules.append(rule)
        return rule

    def late(self, method: str, *, delay_s: float, count: int | None = None) -> LateRule:
        """Hold calls to `method` for `delay_s`, then apply them (at most `count` times)."""
        if delay_s <= 0:
            raise ValueError("late: delay_s must be positive")
        if count is not None and count < 0:
            raise ValueError(f"late: count {count} is negative")
        rule = LateRule(next(self._ids), check_selector(method), delay_s, count)
        self.rules.append(rule)
        return rule

    @property
    def hold_s(self) -> float:
        """The longest a late rule holds a request, or a request still held was held (a rule
        removed does not release what it holds); 0: nothing is or would be held."""
        rules = (r.delay_s for r in self.rules if isinstance(r, LateRule))
        return max([*rules, *(h.delay_s for h in self.held), 0.0])

    def remove(self, rule: FaultRule | int) -> None:
        """Remove one rule (or its id); KeyError when there is no such rule."""
        rule_id = rule if isinstance(rule, int) else rule.id
        kept = [r for r in self.rules if r.id != rule_id]
        if len(kept) == len(self.rules):
            raise KeyError(f"no fault rule with id {rule_id}")
        self.rules = kept

    def clear(self) -> None:
        """Remove every rule and end eventual consistency (requests held still land)."""
        self.rules = []
        self.consistency_delay_s = 0.0

    def to_json(self) -> dict[str, JSON]:
        rules: list[JSON] = [rule.to_json() for rule in self.rules]
        return {
            "rules": rules,
            "consistencyDelaySeconds": self.consistency_delay_s,
            "held": len(self.held),
            "landedLate": self.landed_late,
        }

    # -- applying them ----------------------------------------------------------------
    def delay_s(self, method: str) -> float:
        """The injected latency for one call to `method` (rolls the jitter dice)."""
        total = 0.0
        for rule in self.rules:
            if isinstance(rule, LatencyRule) and selects(rule.method, method):
                total += rule.fixed_s
                if rule.jitter_s:
                    total += self.rng.uniform(0.0, rule.jitter_s)
        return total

    def admit(self, method: str, now: float) -> None:
        """Pass a call through the throttles, then the error rules; raise the answer if any."""
        buckets = [
            rule
            for rule in self.rules
            if isinstance(rule, ThrottleRule) and selects(rule.target, method)
        ]
        wait_s = max((bucket.wait_s(now) for bucket in buckets), default=0.0)
        if wait_s > 0.0:
            for bucket in buckets:
                if bucket.wait_s(now) > 0.0:
                    bucket.throttled += 1
            raise SimApiError(
                429,
                f"{method}: request rate exceeded; retry after {wait_s:g} s",
                code="Throttled",
                retry_after_s=wait_s,
            )
        for bucket in buckets:
            bucket.take(now)
        for rule in self.rules:
            if not isinstance(rule, ErrorRule) or not selects(rule.method, method):
                continue
            if rule.count is not None and rule.fired >= rule.count:
                continue
            if rule.probability is not None and self.rng.random() >= rule.probability:
                continue
            rule.fired += 1
            raise SimApiError(
                rule.status,
                f"{method}: injected fault (rule {rule.id})",
                retry_after_s=rule.retry_after_s,
            )

    def hold(self, method: str, now: float, apply: Callable[[float], object]) -> Held | None:
        """Hold this call if a late rule selects it (the rule's count allowing)."""
        for rule in self.rules:
            if not isinstance(rule, LateRule) or not selects(rule.method, method):
                continue
            if rule.count is not None and rule.fired >= rule.count:
                continue
            rule.fired += 1
            held = Held(now + rule.delay_s, rule.delay_s, method, apply)
            self.held.append(held)
            return held
        return None

    def land(self, now: float) -> None:
        """Apply every held request whose time has come, in the order they fall due."""
        due = sorted((h for h in self.held if h.due <= now), key=lambda h: h.due)
        if not due:
            return
        self.held = [h for h in self.held if h.due > now]
        for held in due:
            try:
                held.answer = held.apply(held.due)
            except SimApiError as exc:  # its answer is an error (the resource went, ...)
                held.answer = exc
            held.landed = True
            self.landed_late += 1
