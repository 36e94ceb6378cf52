"""The leadership fence at the socket: `fence.http_transport()` checks again right before a
request's bytes leave, so leadership lost while a request waits inside httpx (for a pooled
connection, a connect) stops it there.

A real loopback HTTP server counts what reaches it; the guard is a flag the test flips.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
import pytest
import trio

from trio_ccm.cloud.fence import GuardedTransport, guarding, http_transport
from trio_ccm.errors import NotLeadingError
from trio_ccm.health import _self_signed_context

DEADLINE_S = 10.0


@dataclass
class Server:
    """A loopback HTTP/1.1 server (over TLS when `tls`): records each request line; `/slow`
    waits for `release`."""

    tls: ssl.SSLContext | None = None
    port: int = 0
    requests: list[str] = field(default_factory=list)
    connections: int = 0
    slow_started: trio.Event = field(default_factory=trio.Event)
    release: trio.Event = field(default_factory=trio.Event)

    async def handle(self, socket_stream: trio.SocketStream) -> None:
        self.connections += 1
        buffer = b""
        stream: trio.abc.Stream = socket_stream
        if self.tls is not None:
            stream = trio.SSLStream(socket_stream, self.tls, server_side=True)
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                line = head.split(b"\r\n", 1)[0].decode()
                self.requests.append(line)
                if " /slow " in line:
                    self.slow_started.set()
                    await self.release.wait()
                await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        except trio.BrokenResourceError:
            return


@asynccontextmanager
async def serving(scheme: str) -> AsyncIterator[Server]:
    server = Server(tls=_self_signed_context("127.0.0.1") if scheme == "https" else None)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
        )
        server.port = listeners[0].socket.getsockname()[1]
        yield server
        nursery.cancel_scope.cancel()


class Flag:
    """A guard that refuses once `leading` is False (what the supervisor's check does)."""

    def __init__(self) -> None:
        self.leading = True
        self.checks = 0

    def __call__(self) -> None:
        self.checks += 1
        if not self.leading:
            raise NotLeadingError("test: the Lease is no longer held")


def client_tls() -> ssl.SSLContext:
    """The client side of the test's self-signed TLS: no verification (loopback only)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


SCHEMES = [pytest.param("http", id="http"), pytest.param("https", id="tls")]


@pytest.mark.parametrize("scheme", SCHEMES)
async def test_a_refused_write_sends_nothing(scheme: str) -> None:
    """Outside leadership, a request through the fenced transport never reaches the server
    (its connection may open; no byte of the request is written; over TLS not even the
    handshake)."""
    flag = Flag()
    flag.leading = False
    transport = http_transport(verify=client_tls())
    with trio.fail_after(DEADLINE_S):
        async with serving(scheme) as server, httpx.AsyncClient(transport=transport) as http:
            with guarding(flag), pytest.raises(NotLeadingError):
                await http.post(f"{scheme}://127.0.0.1:{server.port}/write", content=b"x")
            # The server answers a request that reaches it; one more request proves the
            # connection was served (and that nothing of the refused one arrived before it).
            await http.get(f"{scheme}://127.0.0.1:{server.port}/after")
    assert server.requests == ["GET /after HTTP/1.1"]
    assert flag.checks >= 1


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize(
    ("fenced", "second_sent"),
    [
        pytest.param(True, False, id="fenced-at-the-socket-refuses-it"),
        pytest.param(False, True, id="checked-only-before-httpx-sends-it"),
    ],
)
async def test_leadership_lost_while_waiting_for_a_connection(
    scheme: str, fenced: bool, second_sent: bool
) -> None:
    """A request that passed the check and then waited for the pool's only connection is
    refused at the socket when leadership was lost meanwhile; checked only before httpx
    (GuardedTransport over a plain transport), the same request is sent."""
    flag = Flag()
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    make = http_transport if fenced else httpx.AsyncHTTPTransport
    inner = make(limits=limits, verify=client_tls())
    with trio.fail_after(DEADLINE_S):
        async with (
            serving(scheme) as server,
            httpx.AsyncClient(transport=GuardedTransport(inner)) as http,
        ):
            base = f"{scheme}://127.0.0.1:{server.port}"
            outcome: dict[str, object] = {}

            async def second() -> None:
                try:
                    response = await http.post(f"{base}/second", content=b"x")
                    outcome["status"] = response.status_code
                except NotLeadingError as exc:
                    outcome["refused"] = exc

            with guarding(flag):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(http.get, f"{base}/slow")
                    await server.slow_started.wait()
                    checks = flag.checks
                    nursery.start_soon(second)
                    # Let the second request pass GuardedTransport's check and queue for the
                    # pool's one connection (one more check, no write: the connection is
                    # busy), then lose the Lease and free the connection.
                    await trio.testing.wait_all_tasks_blocked()
                    assert flag.checks == checks + 1
                    flag.leading = False
                    server.release.set()
    sent = "POST /second HTTP/1.1" in server.requests
    assert sent is second_sent
    assert ("refused" in outcome) is not second_sent
