"""Octavia's and Neutron's calls for Service load balancers, over `OpenStackClient`.

Thin: one method per API call, JSON in and out, no policy (that is `loadbalancers.py`).
Paths are Octavia's `/v2/lbaas/...` and Neutron's `/v2.0/...`. Two things are ours:

- `features()`: Octavia's `GET /` version list, read once per process (OCCM's
  `IsOctaviaFeatureSupported`): tags need 2.5, `allowed_cidrs` 2.12, availability zones 2.14,
  HTTP monitors on UDP pools 2.16, `PROXYV2` 2.22, SCTP 2.23.
- `write()`: a mutating call that meets 409 (the load balancer is immutable while
  `PENDING_*`) or a throttle (413/429) is waited out here, with capped, jittered backoff
  (honouring Retry-After), up to `WRITE_PATIENCE_S`; past that it is a `RetryAfter`, so the
  Service's actor sleeps without a traceback and no other Service waits.
- **At most `max_writes` Octavia writes in flight** per provider (`[LoadBalancer]
  trio-ccm-max-writes-in-flight`, default 4: lbconfig). Octavia answers a write
  only after its API process has done the write's own work (a load balancer's VIP port is
  made in Neutron before the answer), and the test world's API, one process, answered
  nothing within a minute when 50 creates came at once (docs/benchmarks.md): the calls
  timed out with unknown outcomes, the worker put load balancers in ERROR. A write waits
  for a slot within the same `WRITE_PATIENCE_S` as a 409; past it, a `RetryAfter`. Waiting
  for a slot is not a failure, and reads never wait for one (they are cheap, and a
  `PENDING_*` poll must not queue behind the writes it waits for). Neutron's floating-IP
  writes have as many slots of their own (its API answered a floating-IP create after more
  than a minute when 50 came at once).
"""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Protocol, TypeVar

import trio

from trio_ccm.cloud.openstack.errors import ConflictError, NotFoundError, OpenStackThrottledError
from trio_ccm.cloud.openstack.lbconfig import DEFAULT_MAX_WRITES_IN_FLIGHT
from trio_ccm.errors import RetryAfter
from trio_ccm.logs import get_logger

__all__ = ["WRITE_PATIENCE_S", "Api", "Features", "Octavia", "acquire_by", "backoff_s"]

log = get_logger("trio_ccm.cloud.openstack.octavia")

LB: Final = "load-balancer"
NET: Final = "network"
BASE: Final = "/v2/lbaas"
WRITE_PATIENCE_S: Final = 30.0
_STEP_BASE_S: Final = 0.5
_STEP_CAP_S: Final = 8.0

T = TypeVar("T")


class Api(Protocol):
    """What this module needs of `OpenStackClient`."""

    async def request(
        self,
        service: str,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any: ...

    async def list(
        self, service: str, path: str, key: str, *, params: Mapping[str, Any] | None = None
    ) -> list[Any]: ...


def backoff_s(attempt: int, rng: random.Random) -> float:
    """Capped exponential backoff with jitter: attempt 0 waits 0.5-1 s, then doubling up to
    8 s (the upper half of the step, so it never collapses to 0 and never syncs up)."""
    step = min(_STEP_CAP_S, _STEP_BASE_S * 2.0**attempt)
    return step / 2 + rng.random() * step / 2


async def acquire_by(
    limiter: trio.CapacityLimiter,
    deadline: float,
    borrower: object,
    *,
    waiting: Callable[[], object] = lambda: None,
) -> bool:
    """Take one of `limiter`'s tokens for `borrower`: at once when one is free, else
    (`waiting()` told) waiting for one until trio time `deadline`. Whether one was taken."""
    try:
        limiter.acquire_on_behalf_of_nowait(borrower)
        return True
    except trio.WouldBlock:
        waiting()
    with trio.move_on_at(deadline):
        await limiter.acquire_on_behalf_of(borrower)
        return True
    return False


class Features:
    """What Octavia's newest API version allows."""

    def __init__(self, version: tuple[int, int]) -> None:
        self.version = version

    def at_least(self, major: int, minor: int) -> bool:
        return self.version >= (major, minor)

    @property
    def tags(self) -> bool:
        return self.at_least(2, 5)

    @property
    def allowed_cidrs(self) -> bool:
        return self.at_least(2, 12)

    @property
    def availability_zones(self) -> bool:
        return self.at_least(2, 14)

    @property
    def proxy_v2(self) -> bool:
        return self.at_least(2, 22)

    @property
    def sctp(self) -> bool:
        return self.at_least(2, 23)


def _version(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"v?(\d+)\.(\d+)", text.strip())
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


class Octavia:
    """The calls (see the module docstring)."""

    def __init__(
        self,
        api: Api,
        *,
        rng: random.Random | None = None,
        max_writes: int = DEFAULT_MAX_WRITES_IN_FLIGHT,
    ) -> None:
        if max_writes < 1:
            raise ValueError(f"Octavia: max_writes must be 1 or more, got {max_writes}")
        self.api = api
        self.rng = rng if rng is not None else random.Random()  # noqa: S311 - jitter
        self._features: Features | None = None
        self._features_lock = trio.Lock()
        self._writes = trio.CapacityLimiter(max_writes)
        self._net_writes = trio.CapacityLimiter(max_writes)
        self.slot_waits = 0  # writes that found every slot taken (statistics)

    async def features(self) -> Features:
        async with self._features_lock:
            if self._features is None:
                answer = await self.api.request(LB, "GET", "/")
                versions = answer.get("versions", []) if isinstance(answer, dict) else []
                best = max(
                    (
                        _version(str(v.get("id", "")))
                        for v in versions
                        if isinstance(v, dict) and v.get("status") in ("CURRENT", "SUPPORTED")
                    ),
                    default=(2, 0),
                )
                self._features = Features(best)
                log.info("octavia.features", version=f"{best[0]}.{best[1]}")
            return self._features

    @property
    def writes_in_flight(self) -> int:
        return int(self._writes.borrowed_tokens)

    async def write(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run a mutating call in one of the write slots, waiting out a full house, 409 and
        throttles here (module docstring)."""
        started = trio.current_time()
        attempt = 0
        while True:
            try:
                return await self._in_slot(what, started, call)
            except ConflictError as exc:
                delay = backoff_s(attempt, self.rng)
                reason = f"{what}: Octavia is busy with it (409: {exc.server_message})"
            except OpenStackThrottledError as exc:
                delay = max(exc.retry_after_s or 0.0, backoff_s(attempt, self.rng))
                reason = f"{what}: throttled"
            if trio.current_time() - started + delay > WRITE_PATIENCE_S:
                raise RetryAfter(delay, f"{reason}; trying again in {delay:.1f} s")
            log.debug("octavia.write-waiting", what=what, delay_s=round(delay, 2))
            attempt += 1
            await trio.sleep(delay)

    async def _in_slot(
        self,
        what: str,
        started: float,
        call: Callable[[], Awaitable[T]],
        slots: trio.CapacityLimiter | None = None,
    ) -> T:
        """`call()` holding a write slot (Octavia's, or `slots`), waited for until
        `WRITE_PATIENCE_S` after `started`; then a `RetryAfter` (no call was made)."""
        limiter = self._writes if slots is None else slots
        me = trio.lowlevel.current_task()
        if not await acquire_by(limiter, started + WRITE_PATIENCE_S, me, waiting=self._waited):
            delay = backoff_s(3, self.rng)
            service = "Octavia" if slots is None else "Neutron"
            raise RetryAfter(
                delay,
                f"{what}: {limiter.total_tokens:g} {service} writes are in flight "
                "([LoadBalancer] trio-ccm-max-writes-in-flight); trying again in "
                f"{delay:.1f} s",
            )
        try:
            return await call()
        finally:
            limiter.release_on_behalf_of(me)

    def _waited(self) -> None:
        self.slot_waits += 1

    async def _net_write(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        return await self._in_slot(what, trio.current_time(), call, self._net_writes)

    # -- load balancers ------------------------------------------------------------------
    async def get_lb(self, lb_id: str) -> dict[str, Any] | None:
        try:
            answer = await self.api.request(LB, "GET", f"{BASE}/loadbalancers/{lb_id}")
        except NotFoundError:
            return None
        lb = answer.get("loadbalancer") if isinstance(answer, dict) else None
        return lb if isinstance(lb, dict) else None

    async def status_tree(self, lb_id: str) -> dict[str, Any]:
        """`GET /loadbalancers/{id}/status`: listeners, pools, members (address and port)
        and monitors in one answer."""
        answer = await self.api.request(LB, "GET", f"{BASE}/loadbalancers/{lb_id}/status")
        return answer if isinstance(answer, dict) else {}

    async def find_lbs(self, **params: str) -> list[dict[str, Any]]:
        items = await self.api.list(LB, f"{BASE}/loadbalancers", "loadbalancers", params=params)
        return [i for i in items if isinstance(i, dict)]

    async def create_lb(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = await self.write(
            f"create load balancer {body.get('name')}",
            lambda: self.api.request(
                LB, "POST", f"{BASE}/loadbalancers", json={"loadbalancer": body}
            ),
        )
        lb = answer.get("loadbalancer") if isinstance(answer, dict) else None
        if not isinstance(lb, dict) or not lb.get("id"):
            raise ValueError(f"Octavia answered a load balancer create without an id: {answer!r}")
        return lb

    async def update_lb(self, lb_id: str, body: dict[str, Any]) -> None:
        await self.write(
            f"update load balancer {lb_id}",
            lambda: self.api.request(
                LB, "PUT", f"{BASE}/loadbalancers/{lb_id}", json={"loadbalancer": body}
            ),
        )

    async def delete_lb(self, lb_id: str, *, cascade: bool = True) -> None:
        with contextlib.suppress(NotFoundError):
            await self.write(
                f"delete load balancer {lb_id}",
                lambda: self.api.request(
                    LB,
                    "DELETE",
                    f"{BASE}/loadbalancers/{lb_id}",
                    params={"cascade": "true"} if cascade else None,
                ),
            )

    # -- children ------------------------------------------------------------------------
    async def listeners(self, lb_id: str) -> list[dict[str, Any]]:
        items = await self.api.list(
            LB, f"{BASE}/listeners", "listeners", params={"loadbalancer_id": lb_id}
        )
        return [i for i in items if isinstance(i, dict)]

    async def pools(self, lb_id: str) -> list[dict[str, Any]]:
        items = await self.api.list(LB, f"{BASE}/pools", "pools", params={"loadbalancer_id": lb_id})
        return [i for i in items if isinstance(i, dict)]

    async def members(self, pool_id: str) -> list[dict[str, Any]]:
        items = await self.api.list(LB, f"{BASE}/pools/{pool_id}/members", "members")
        return [i for i in items if isinstance(i, dict)]

    async def monitor(self, monitor_id: str) -> dict[str, Any] | None:
        try:
            answer = await self.api.request(LB, "GET", f"{BASE}/healthmonitors/{monitor_id}")
        except NotFoundError:
            return None
        hm = answer.get("healthmonitor") if isinstance(answer, dict) else None
        return hm if isinstance(hm, dict) else None

    async def create(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST one child (kind: listener, pool or healthmonitor); returns it."""
        answer = await self.write(
            f"create {kind} {body.get('name')}",
            lambda: self.api.request(LB, "POST", f"{BASE}/{kind}s", json={kind: body}),
        )
        made = answer.get(kind) if isinstance(answer, dict) else None
        if not isinstance(made, dict) or not made.get("id"):
            raise ValueError(f"Octavia answered a {kind} create without an id: {answer!r}")
        return made

    async def update(self, kind: str, child_id: str, body: dict[str, Any]) -> None:
        await self.write(
            f"update {kind} {child_id}",
            lambda: self.api.request(LB, "PUT", f"{BASE}/{kind}s/{child_id}", json={kind: body}),
        )

    async def delete(self, kind: str, child_id: str) -> None:
        with contextlib.suppress(NotFoundError):
            await self.write(
                f"delete {kind} {child_id}",
                lambda: self.api.request(LB, "DELETE", f"{BASE}/{kind}s/{child_id}"),
            )

    async def replace_members(self, pool_id: str, members: Sequence[Mapping[str, Any]]) -> None:
        """The batch update: the pool's members become exactly `members` (Octavia diffs)."""
        await self.write(
            f"update the members of pool {pool_id}",
            lambda: self.api.request(
                LB,
                "PUT",
                f"{BASE}/pools/{pool_id}/members",
                json={"members": [dict(m) for m in members]},
            ),
        )

    # -- Neutron -------------------------------------------------------------------------
    async def floating_ips(self, **params: str) -> list[dict[str, Any]]:
        items = await self.api.list(NET, "/v2.0/floatingips", "floatingips", params=params)
        return [i for i in items if isinstance(i, dict)]

    async def create_floating_ip(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = await self._net_write(
            "create a floating IP",
            lambda: self.api.request(NET, "POST", "/v2.0/floatingips", json={"floatingip": body}),
        )
        fip = answer.get("floatingip") if isinstance(answer, dict) else None
        if not isinstance(fip, dict) or not fip.get("floating_ip_address"):
            raise ValueError(
                f"Neutron answered a floating IP create without an address: {answer!r}"
            )
        return fip

    async def update_floating_ip(self, fip_id: str, body: dict[str, Any]) -> None:
        await self._net_write(
            f"update floating IP {fip_id}",
            lambda: self.api.request(
                NET, "PUT", f"/v2.0/floatingips/{fip_id}", json={"floatingip": body}
            ),
        )

    async def delete_floating_ip(self, fip_id: str) -> None:
        with contextlib.suppress(NotFoundError):
            await self._net_write(
                f"delete floating IP {fip_id}",
                lambda: self.api.request(NET, "DELETE", f"/v2.0/floatingips/{fip_id}"),
            )

    async def networks(self, **params: str) -> list[dict[str, Any]]:
        items = await self.api.list(NET, "/v2.0/networks", "networks", params=params)
        return [i for i in items if isinstance(i, dict)]

    async def subnets(self, **params: str) -> list[dict[str, Any]]:
        items = await self.api.list(NET, "/v2.0/subnets", "subnets", params=params)
        return [i for i in items if isinstance(i, dict)]
