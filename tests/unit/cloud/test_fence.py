"""The leadership fence at the socket: `fence.http_transport()` checks again right before a
request's bytes leave, so leadership lost while a request waits inside httpx (for a pooled
connection, a connect) stops it there.

A real loopback HTTP server counts what reaches it; the guard is a flag the test flips.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
import pytest
import trio

from trio_ccm.cloud.fence import GuardedTransport, guarding, http_transport
from trio_ccm.errors import NotLeadingError

DEADLINE_S = 10.0


@dataclass
class Server:
    """A loopback HTTP/1.1 server: records each request line; `/slow` waits for `release`."""

    port: int = 0
    requests: list[str] = field(default_factory=list)
    connections: int = 0
    slow_started: trio.Event = field(default_factory=trio.Event)
    release: trio.Event = field(default_factory=trio.Event)

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        buffer = b""
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
async def serving() -> AsyncIterator[Server]:
    server = Server()
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


async def test_a_refused_write_sends_nothing() -> None:
    """Outside leadership, a request through the fenced transport never reaches the server
    (its connection may open; no byte of the request is written)."""
    flag = Flag()
    flag.leading = False
    with trio.fail_after(DEADLINE_S):
        async with serving() as server, httpx.AsyncClient(transport=http_transport()) as http:
            with guarding(flag), pytest.raises(NotLeadingError):
                await http.post(f"http://127.0.0.1:{server.port}/write", content=b"x")
            # The server answers a request that reaches it; one more request proves the
            # connection was served (and that nothing of the refused one arrived before it).
            await http.get(f"http://127.0.0.1:{server.port}/after")
    assert server.requests == ["GET /after HTTP/1.1"]
    assert flag.checks >= 1


@pytest.mark.parametrize(
    ("fenced", "second_sent"),
    [
        pytest.param(True, False, id="fenced-at-the-socket-refuses-it"),
        pytest.param(False, True, id="checked-only-before-httpx-sends-it"),
    ],
)
async def test_leadership_lost_while_waiting_for_a_connection(
    fenced: bool, second_sent: bool
) -> None:
    """A request that passed the check and then waited for the pool's only connection is
    refused at the socket when leadership was lost meanwhile; checked only before httpx
    (GuardedTransport over a plain transport), the same request is sent."""
    flag = Flag()
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    inner = http_transport(limits=limits) if fenced else httpx.AsyncHTTPTransport(limits=limits)
    with trio.fail_after(DEADLINE_S):
        async with (
            serving() as server,
            httpx.AsyncClient(transport=GuardedTransport(inner)) as http,
        ):
            base = f"http://127.0.0.1:{server.port}"
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
