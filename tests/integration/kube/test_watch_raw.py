"""Watches read below httpx (`kube/chunked.py`) over real loopback connections, plain and
TLS: the emulator's watches, and a scripted server that places chunk boundaries, ends,
cuts and stalls a watch where a test says. Whole events come in stream order, a read of
many events is one batch, the connection is closed after the body (never pooled), a cut
or malformed stream is a KubeConnectionError after the events before it, and a cancelled
watch closes its connection at once."""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import h11
import pytest
import trio
import trustme

from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials, load_kubeconfig
from trio_ccm.kube.errors import KubeConnectionError
from trio_ccm.kube.informer import Informer
from trio_ccm.kube.objects import NODES, Node, Watched
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.apiserver.listener import serve_apiserver

HEADERS = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"


def _line(rv: int) -> bytes:
    node = {"kind": "Node", "metadata": {"name": f"n{rv}", "resourceVersion": str(rv)}}
    return json.dumps({"type": "ADDED", "object": node}).encode() + b"\n"


def _chunk(data: bytes, extension: bytes = b"") -> bytes:
    return b"%x%s\r\n%s\r\n" % (len(data), extension, data)


END = b"0\r\n\r\n"


@dataclass
class _Script:
    """A loopback server answering each request with `HEADERS` then the byte pieces a test
    sends (`send`; None closes the connection at once, with no end of body). Counts
    connections and sets `client_closed` when the client closes one."""

    pieces: trio.MemorySendChannel[bytes | None]
    inbox: trio.MemoryReceiveChannel[bytes | None]
    tls: ssl.SSLContext | None
    headers: bytes = HEADERS
    connections: int = 0
    client_closed: trio.Event = field(default_factory=trio.Event)
    sent: int = 0  # pieces sent after the headers
    progress: trio.Event = field(default_factory=trio.Event)

    async def wait_sent(self, count: int) -> None:
        while self.sent < count:
            await self.progress.wait()

    async def send(self, piece: bytes | None) -> None:
        await self.pieces.send(piece)

    async def serve(self, stream: trio.abc.Stream) -> None:
        if self.tls is not None:
            stream = trio.SSLStream(stream, self.tls, server_side=True)
        self.connections += 1
        conn = h11.Connection(h11.SERVER)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(bytes(await stream.receive_some(65536)))
            elif type(event) is h11.EndOfMessage:
                break
        first = await self.inbox.receive()  # sent with the headers: h11 buffers it
        await stream.send_all(self.headers + (first or b""))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._until_closed, stream, nursery.cancel_scope)
            async for piece in self.inbox:
                if piece is None:
                    break
                await stream.send_all(piece)
                self.sent += 1
                self.progress.set()
                self.progress = trio.Event()
            nursery.cancel_scope.cancel()
        if isinstance(stream, trio.SSLStream):
            await stream.transport_stream.aclose()  # no close_notify: a cut connection
        else:
            await stream.aclose()

    async def _until_closed(self, stream: trio.abc.Stream, scope: trio.CancelScope) -> None:
        try:
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
        self.client_closed.set()
        scope.cancel()


@asynccontextmanager
async def _scripted(tls: bool) -> AsyncIterator[tuple[_Script, KubeClient]]:
    """A scripted server on loopback (TLS when `tls`) and a client reaching it."""
    server_context, ca_pem = None, None
    if tls:
        ca = trustme.CA()
        server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(server_context)
        ca_pem = ca.cert_pem.bytes()
    send, receive = trio.open_memory_channel[bytes | None](100)
    script = _Script(send, receive, server_context)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, script.serve, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        config = ConnectionConfig(
            server=f"{'https' if tls else 'http'}://127.0.0.1:{port}",
            credentials=StaticCredentials(),
            ca_pem=ca_pem,
        )
        async with open_kube_client(config, qps=0) as client:
            yield script, client
        nursery.cancel_scope.cancel()


TLS = [pytest.param(False, id="plain"), pytest.param(True, id="tls")]


def _rvs(batches: list[list[Watched[Node]]]) -> list[list[int]]:
    return [[int(e.object.metadata.resource_version) for e in b] for b in batches]


@pytest.mark.parametrize("tls", TLS)
async def test_a_read_of_many_chunks_is_one_batch_and_the_connection_is_closed(tls: bool) -> None:
    """What h11 buffered with the headers comes first; then a read of three chunks (one
    with an extension) is one batch; after the last chunk and a trailer the watch ends,
    its connection closed, and the next watch connects again."""
    with trio.fail_after(20):
        async with _scripted(tls) as (script, client):
            got: list[list[Watched[Node]]] = []
            await script.send(_chunk(_line(2)))  # with the headers
            async with client.watch_batches_as(NODES, Node, resource_version="1") as batches:
                got.append(await anext(batches))
                await script.send(_chunk(_line(3), b";a=b") + _chunk(_line(4)) + _chunk(_line(5)))
                got.append(await anext(batches))
                await script.send(b"0\r\nx-trailer: 1\r\n\r\n")
                got.extend([batch async for batch in batches])
            assert _rvs(got) == [[2], [3, 4, 5]]
            assert client.raw_watches == 1
            await script.client_closed.wait()  # closed, not handed back to the pool
            await script.send(_chunk(_line(6)) + END)
            async with client.watch_batches_as(NODES, Node, resource_version="5") as batches:
                assert _rvs([batch async for batch in batches]) == [[6]]
            assert script.connections == 2
            assert client.raw_watches == 2


@pytest.mark.parametrize("tls", TLS)
async def test_chunks_sent_apart_and_waiting_are_one_batch(tls: bool) -> None:
    """Five chunks sent one at a time (over TLS, five records) while the reader was not
    reading come as one batch."""
    with trio.fail_after(20):
        async with _scripted(tls) as (script, client):
            await script.send(_chunk(_line(2)))
            async with client.watch_batches_as(NODES, Node, resource_version="1") as batches:
                first = await anext(batches)
                for rv in range(3, 8):
                    await script.send(_chunk(_line(rv)))
                await script.wait_sent(5)
                second = await anext(batches)
            assert _rvs([first, second]) == [[2], [3, 4, 5, 6, 7]]


@pytest.mark.parametrize("tls", TLS)
@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        pytest.param(b"40\r\n" + _line(3)[:20], "incomplete chunked read", id="cut-mid-chunk"),
        pytest.param(b"4", "incomplete chunked read", id="cut-mid-size-line"),
        pytest.param(b"zz\r\n", "malformed chunk-size line", id="malformed-size"),
    ],
)
async def test_a_cut_or_malformed_stream_is_a_connection_error_after_its_events(
    tls: bool, tail: bytes, reason: str
) -> None:
    """A server that closes mid-chunk or mid-size-line, or sends a bad size line, ends the
    watch with KubeConnectionError naming the fault, after the events before it."""
    got: list[list[Watched[Node]]] = []

    async def watch(script: _Script, client: KubeClient) -> None:
        await script.send(_chunk(_line(2)))
        async with client.watch_batches_as(NODES, Node, resource_version="1") as batches:
            got.append(await anext(batches))
            await script.send(tail)
            await script.send(None)
            got.extend([batch async for batch in batches])

    with trio.fail_after(20):
        async with _scripted(tls) as (script, client):
            with pytest.raises(KubeConnectionError, match=reason) as caught:
                await watch(script, client)
    assert _rvs(got) == [[2]]
    assert "WATCH /api/v1/nodes" in str(caught.value)


@pytest.mark.parametrize("tls", TLS)
async def test_a_watch_cancelled_mid_read_closes_its_connection(tls: bool) -> None:
    """A watch cancelled while it waits for the rest of a chunk returns at once and closes
    its connection (the server sees it closed)."""
    with trio.fail_after(20):
        async with _scripted(tls) as (script, client):
            await script.send(_chunk(_line(2)) + b"40\r\n" + _line(3)[:10])
            with trio.CancelScope() as scope:
                async with client.watch_batches_as(NODES, Node, resource_version="1") as batches:
                    assert _rvs([await anext(batches)]) == [[2]]
                    scope.cancel()
                    await anext(batches)  # cancelled while reading
            assert scope.cancelled_caught
            await script.client_closed.wait()


async def test_a_body_with_a_length_is_read_through_httpx() -> None:
    """A watch answered with Content-Length (not chunked) is read through httpx: the same
    events, no read below it."""
    body = _line(2) + _line(3)
    with trio.fail_after(20):
        async with _scripted(tls=False) as (script, client):
            script.headers = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body)
            await script.send(body)
            async with client.watch_batches_as(NODES, Node, resource_version="1") as batches:
                got = [batch async for batch in batches]
            assert _rvs(got) == [[2, 3]]
            assert client.raw_watches == 0


async def test_the_emulators_watch_over_tls_is_read_below_httpx(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Against the emulator over TLS: every Node created while the watch is open comes,
    in order, through a read below httpx; the watch ends at its timeout."""
    server = ApiServer(seed=1)
    listening = await nursery.start(functools.partial(serve_apiserver, server, tls=True))
    config = load_kubeconfig(listening.write_kubeconfig(tmp_path / "kubeconfig"))
    names: list[str] = []
    with trio.fail_after(30):
        async with open_kube_client(config, qps=0) as client:
            listed = await client.list(NODES, type=Node)
            async with client.watch_batches_as(
                NODES, Node, resource_version=listed.metadata.resource_version, timeout_s=1
            ) as batches:
                for i in range(200):
                    server.create(
                        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}}
                    )
                async for batch in batches:
                    names.extend(e.object.metadata.name for e in batch)
            assert client.raw_watches == 1
    assert names == [f"n{i}" for i in range(200)]


async def test_the_node_informer_over_tls_follows_changes_read_below_httpx(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The Node informer (resting reader, as the CCM runs it) against the emulator over TLS:
    Nodes changed while it watches are in its cache, the watch read below httpx."""
    server = ApiServer(seed=1)
    for i in range(50):
        server.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}})
    listening = await nursery.start(functools.partial(serve_apiserver, server, tls=True))
    config = load_kubeconfig(listening.write_kubeconfig(tmp_path / "kubeconfig"))
    with trio.fail_after(30):
        async with open_kube_client(config, qps=0) as client, trio.open_nursery() as inner:
            informer = Informer(client, NODES, Node, watch_rest_s=0.05)
            await inner.start(informer.serve)
            await informer.wait_synced()
            async with informer.subscription() as mailbox:
                while len(mailbox):  # the first fill: every cached key
                    mailbox.get_nowait()
                for i in range(50, 120):
                    server.create(
                        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}}
                    )
                added: set[str] = set()
                while len(added) < 70:
                    added.update(key for key, _ in await mailbox.get_batch(1000))
            assert added == {f"n{i}" for i in range(50, 120)}
            assert client.raw_watches >= 1
            inner.cancel_scope.cancel()
    assert {n.metadata.name for n in informer.items()} == {f"n{i}" for i in range(120)}
