"""The leadership fence, checked right before each request leaves for the cloud.

The supervisor cancels a replica's work the instant it loses its Lease, and the cloud
budget asks "do we still lead?" before every provider call. But one provider call may make
many cloud requests (an AWS load balancer is a dozen), and a process frozen mid-call (a
long GC pause, a stopped VM, SIGSTOP) resumes with its requests still to send. So the
budget also installs its check for the duration of the call (a context variable, which
tasks the provider starts inherit), and a provider's HTTP transport runs it before each
request: `GuardedTransport(inner)` does it for httpx. A refused request raises
`trio_ccm.errors.NotLeadingError` and never leaves the process.

Providers that speak HTTP through httpx wrap their transport in `GuardedTransport`; others
call `check()` before each request. Outside a budgeted call (tests, tools) both do nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import httpx

__all__ = ["GuardedTransport", "check", "guarding"]

_GUARD: ContextVar[Callable[[], None] | None] = ContextVar("trio_ccm_cloud_guard", default=None)


def check() -> None:
    """Run the current call's guard, if any: raises when this replica must not act."""
    guard = _GUARD.get()
    if guard is not None:
        guard()


@contextmanager
def guarding(guard: Callable[[], None] | None) -> Iterator[None]:
    """Make `guard` the check for the block (and for tasks started in it)."""
    token = _GUARD.set(guard)
    try:
        yield
    finally:
        _GUARD.reset(token)


class GuardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that runs `check()` before each request it sends."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        check()
        response: httpx.Response = await self.inner.handle_async_request(request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
