"""The kube clients' connection pool (`kube/pool.py`) and send path over real loopback TCP:
connections kept and reused, a connection the server closed never reused, the cap kept,
no cookie jar."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import h11
import httpx
import pytest
import trio

from trio_ccm.kube import patches
from trio_ccm.kube.client import open_kube_client
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.kube.objects import NODES
from trio_ccm.kube.pool import lean_transport

_ANSWER = b'{"kind":"Node","apiVersion":"v1","metadata":{"name":"n","resourceVersion":"7"}}'


@dataclass
class _Server:
    """An HTTP/1.1 server on loopback that counts connections and requests; it answers once
    `hold` requests of a round are waiting (so that they are all in flight at once), and closes a
    connection after each answer when `close_after_answer`."""

    hold: int = 1
    close_after_answer: bool = False
    set_cookie: bool = False
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    cookies: list[bytes] = field(default_factory=list)
    waiting: int = 0
    released: trio.Event = field(default_factory=trio.Event)
    answered: int = 0
    closed: trio.Event = field(default_factory=trio.Event)

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            await self._serve(stream)
        finally:
            self.open_now -= 1

    async def _serve(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                self.cookies.extend(v for k, v in event.headers if k == b"cookie")
            if not isinstance(event, h11.EndOfMessage):
                continue
            self.waiting += 1
            released = self.released
            if self.waiting % self.hold == 0:  # a round is all here: answer it
                released.set()
                self.released = trio.Event()
            await released.wait()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(_ANSWER)),
            ]
            if self.set_cookie:
                headers.append((b"set-cookie", b"session=1; Path=/"))
            data = conn.send(h11.Response(status_code=200, headers=headers))
            data = (data or b"") + (conn.send(h11.Data(data=_ANSWER)) or b"")
            data += conn.send(h11.EndOfMessage()) or b""
            await stream.send_all(data)
            self.answered += 1
            if self.close_after_answer:
                await stream.aclose()
                self.closed.set()
                return
            conn.start_next_cycle()


async def _start(nursery: trio.Nursery, server: _Server) -> str:
    listeners = await nursery.start(
        functools.partial(trio.serve_tcp, server.serve, 0, host="127.0.0.1")
    )
    port = listeners[0].socket.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _config(url: str) -> ConnectionConfig:
    return ConnectionConfig(server=url, credentials=StaticCredentials(), source="the test")


async def _patch_all(url: str, count: int) -> None:
    """`count` Node PATCHes at once, twice in a row, through one client."""
    async with open_kube_client(_config(url), qps=0) as kube:
        for _ in range(2):
            async with trio.open_nursery() as nursery:
                for i in range(count):
                    nursery.start_soon(
                        functools.partial(
                            kube.patch, NODES, f"n{i}", patches.set_labels({"a": "b"})
                        )
                    )


async def test_idle_connections_are_kept_and_reused(nursery: trio.Nursery) -> None:
    """30 writes in flight (more than httpx's 20 kept alive), twice: the second round goes on
    the 30 connections of the first, none connects again."""
    server = _Server(hold=30)
    url = await _start(nursery, server)
    with trio.fail_after(20):
        await _patch_all(url, 30)
    assert server.answered == 60
    assert server.connections == 30


async def test_a_connection_the_server_closed_is_not_reused(nursery: trio.Nursery) -> None:
    """A write after the server closed the idle connection goes on a new one and lands."""
    server = _Server(close_after_answer=True)
    url = await _start(nursery, server)
    async with open_kube_client(_config(url), qps=0) as kube:
        with trio.fail_after(20):
            await kube.patch(NODES, "n1", patches.set_labels({"a": "b"}))
            await server.closed.wait()  # (on loopback its FIN is at the client's socket)
            written = await kube.patch(NODES, "n2", patches.set_labels({"a": "b"}))
    assert written.metadata.resource_version == "7"
    assert (server.answered, server.connections) == (2, 2)


async def test_the_connection_cap_holds_and_every_request_is_answered(
    nursery: trio.Nursery,
) -> None:
    """With a cap of 2 connections, 6 requests at once share them: never more than 2 open."""
    server = _Server()
    url = await _start(nursery, server)
    transport = lean_transport(limits=httpx.Limits(max_connections=2, max_keepalive_connections=2))
    async with httpx.AsyncClient(transport=transport, base_url=url) as http:
        with trio.fail_after(20):
            async with trio.open_nursery() as inner:
                for i in range(6):
                    inner.start_soon(http.get, f"/api/v1/nodes/n{i}")
    assert server.answered == 6
    assert server.most_open <= 2
    assert server.connections == 2


async def test_no_cookie_is_kept(nursery: trio.Nursery) -> None:
    """An answer's Set-Cookie is not sent back: a kube client keeps no cookie jar."""
    server = _Server(set_cookie=True)
    url = await _start(nursery, server)
    async with open_kube_client(_config(url), qps=0) as kube:
        with trio.fail_after(20):
            await kube.patch(NODES, "n1", patches.set_labels({"a": "b"}))
            await kube.patch(NODES, "n2", patches.set_labels({"a": "b"}))
    assert server.answered == 2
    assert server.cookies == []


def test_the_lean_pool_is_http1_only() -> None:
    """Asking for HTTP/2 is refused: the pool hands a connection to one request at a time."""
    with pytest.raises(ValueError, match=r"HTTP/1\.1 only"):
        lean_transport(http2=True)
