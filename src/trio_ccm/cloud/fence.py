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

A check before the request is handed to httpx still leaves a gap: httpx then waits for a
pooled connection, connects, and may let other tasks run before the bytes leave. On a
starved machine that gap stretches to seconds, and a process frozen inside it sends its
request when it resumes, after another replica took the Lease. `http_transport()` closes
it: its connections run `check()` again right before each write to the socket, with no
scheduling point between the check and the send. A request refused there never reaches
the cloud whole (at most a prefix of it, on a connection that is then closed).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpcore
import httpx

__all__ = ["GuardedTransport", "check", "guarding", "http_transport"]

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


class _GuardedStream(httpcore.AsyncNetworkStream):
    """A connection whose every write is preceded by `check()` (no await in between)."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109 - httpcore's
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        check()
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
    ) -> httpcore.AsyncNetworkStream:
        return _GuardedStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, handing out `_GuardedStream`s."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _GuardedStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_unix_socket(path, timeout, socket_options)
        return _GuardedStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def http_transport(**kwargs: Any) -> httpx.AsyncHTTPTransport:
    """`httpx.AsyncHTTPTransport(**kwargs)` whose socket writes run `check()` first.

    httpx does not take a network backend, so this sets the one of the connection pool it
    built (httpcore's `network_backend`); if a new httpx no longer has that pool, this
    raises here, at start, rather than leaving requests unfenced.
    """
    transport = httpx.AsyncHTTPTransport(**kwargs)
    pool = getattr(transport, "_pool", None)
    inner = getattr(pool, "_network_backend", None)
    if not isinstance(pool, httpcore.AsyncConnectionPool) or not isinstance(
        inner, httpcore.AsyncNetworkBackend
    ):
        raise TypeError(
            f"httpx {httpx.__version__} / httpcore {httpcore.__version__}: the transport has "
            "no connection pool with a network backend to fence; pin httpx<0.29 or update "
            "trio_ccm.cloud.fence.http_transport"
        )
    pool._network_backend = _GuardedBackend(inner)  # httpx offers no public way
    return transport
