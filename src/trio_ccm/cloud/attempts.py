"""Attempts: the loop in which the real-cloud clients (aws, openstack) send each request.

Both clients send a request the same way: check the leadership fence, count the call,
send, and on a transient failure wait a capped exponential backoff with full jitter and
send again, up to `max_attempts` in all. That loop lives here once. What stays in each
client is what belongs to its cloud: how a request is built and signed, and what an answer
or a failure *means*. A client's attempt, `once()`, tells the loop by what it raises:

- it returns: the answer, handed to the caller.
- `Retry(error)`: a transient failure that cannot have changed anything (a request that
  never left; a read that failed). The loop backs off and calls `once()` again; when the
  attempts are spent it raises `error` (chained to what caused it).
- `Resend(counted=...)`: send again at once, without backing off (the credentials were
  renewed after the cloud refused them). OpenStack's re-authentication does not count as
  an attempt; AWS's refresh of an expired token does (as cloud-provider-aws's SDK counts it).
- anything else is final and reaches the caller at once. Three kinds must never be
  retried here: `NotLeadingError` from the fence (this replica is past its Lease),
  a `ThrottledError` (the shared budget must see it to slow down; a retry here would hide
  it and keep hammering an empty bucket), and an `OutcomeUnknownError` (a mutating request
  that was sent: sending it again could apply it twice; the controller re-verifies once it
  can no longer land).

The fence is checked by `leaving()` right before each request is handed to httpx, on every
attempt: a retry may come after the Lease is gone. It is checked in the client as well as
at the socket (the clients' `fence.http_transport()`), so that requests httpx routes
through an HTTPS_PROXY are fenced too.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import trio

from trio_ccm.cloud import fence
from trio_ccm.logs import get_logger

__all__ = ["BACKOFF_BASE_S", "BACKOFF_CAP_S", "Attempts", "Resend", "Retry", "explain"]

log = get_logger("trio_ccm.cloud.attempts")

BACKOFF_BASE_S: Final = 0.2
BACKOFF_CAP_S: Final = 5.0

T = TypeVar("T")


class Retry(Exception):  # noqa: N818 - a signal between a client and its loop, never escapes
    """Raised by an attempt: `error` is transient and safe to send again after a backoff."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class Resend(Exception):  # noqa: N818 - a signal between a client and its loop, never escapes
    """Raised by an attempt: send again at once (`counted`: it spends one of the attempts)."""

    def __init__(self, *, counted: bool) -> None:
        super().__init__("send again")
        self.counted = counted


class Attempts:
    """One client's attempt loop and its counters (see the module docstring).

    `cloud` names the log events (`aws.retrying`); `rng` is the jitter's randomness.
    `calls` counts requests sent by the client's key, `retries` the backoffs taken and
    `throttles` the throttled answers the client reports with `throttled()`.
    """

    def __init__(self, *, cloud: str, max_attempts: int, rng: random.Random | None = None) -> None:
        self.cloud = cloud
        self.max_attempts = max_attempts
        self.calls: Counter[str] = Counter()
        self.retries = 0
        self.throttles = 0
        self._rng = rng if rng is not None else random.Random()  # noqa: S311 - jitter
        self._retrying_event = f"{cloud}.retrying"

    def leaving(self, key: str) -> None:
        """Right before a request leaves: the leadership fence, then count the call."""
        fence.check()
        self.calls[key] += 1

    def throttled(self) -> None:
        """Count a throttled answer (the client raises it at once)."""
        self.throttles += 1

    async def run(self, once: Callable[[], Awaitable[T]], **fields: object) -> T:
        """Call `once()` until it returns or raises something final; `fields` go to the logs."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await once()
            except Resend as signal:
                if not signal.counted:
                    attempt -= 1
            except Retry as signal:
                if attempt >= self.max_attempts:
                    raise signal.error from signal.__cause__
                await self._backoff(signal.error, attempt, fields)

    async def _backoff(self, error: Exception, attempt: int, fields: dict[str, object]) -> None:
        self.retries += 1
        delay = self._rng.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1)))
        log.debug(self._retrying_event, **fields, attempt=attempt, delay_s=delay, error=str(error))
        await trio.sleep(delay)


def explain(exc: BaseException) -> str:
    """A readable reason for a transport failure (httpx's own message is often empty)."""
    parts: list[str] = []
    current: BaseException | None = exc
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current).strip()
        parts.append(f"{type(current).__name__}: {text}" if text else type(current).__name__)
        current = current.__cause__ or current.__context__
    return " <- ".join(parts[:3])
