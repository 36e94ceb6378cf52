"""The test tooling's one HTTP core: every front door hands a handler the same request."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import httpx
import pytest
import trio

from trio_ccm.health import serve_asgi
from trio_ccm_testbed._http import (
    AsgiApp,
    Headers,
    InProcessTransport,
    Refused,
    Request,
    Response,
    StreamAborted,
    serve_http1,
)
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.cloud import SimCloud


async def echo(request: Request) -> Response:
    """Answer with what the handler saw."""
    if request.path == "/refuse":
        raise Refused("test outage")
    if request.path == "/stream":
        return Response(200, _chunks(abort=request.flag("abort")))
    seen = {
        "method": request.method,
        "raw_path": request.raw_path,
        "path": request.path,
        "segments": request.segments(),
        "query": dict(request.query),
        "raw": [list(pair) for pair in request.headers.raw if pair[0].startswith("x-")],
        "joined": request.headers.get("x-multi"),
        "listed": request.headers.get_list("X-Multi"),
        "body": request.body.decode(),
    }
    return Response(200, json.dumps(seen).encode(), [("content-type", "application/json")])


async def _chunks(*, abort: bool) -> AsyncIterator[bytes]:
    yield b"one\n"
    yield b"two\n"
    if abort:
        raise StreamAborted("test reset")


@asynccontextmanager
async def in_process() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=InProcessTransport(echo), base_url="http://core"
    ) as client:
        yield client


@asynccontextmanager
async def over_http() -> AsyncIterator[httpx.AsyncClient]:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_asgi, AsgiApp(echo), host="127.0.0.1", port=0))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            yield client
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def over_http1() -> AsyncIterator[httpx.AsyncClient]:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http1, echo, host="127.0.0.1", port=0))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            yield client
        nursery.cancel_scope.cancel()


DOORS = [
    pytest.param(in_process, id="in-process"),
    pytest.param(over_http, id="http-asgi"),
    pytest.param(over_http1, id="http1"),
]


@pytest.mark.parametrize("door", DOORS)
async def test_repeated_headers_are_kept_in_order_and_joined_on_read(door) -> None:
    """A repeated header reaches the handler as often as it was sent; reading it joins the
    values with ", " (HTTP's combined field value)."""
    with trio.fail_after(10):
        async with door() as client:
            response = await client.post(
                "/a%2Fb/c?x=1&x=2",
                content=b"payload",
                headers=[("X-Multi", "a"), ("X-Other", "o"), ("x-multi", "b, c")],
            )
    seen = response.json()
    assert seen["raw"] == [["x-multi", "a"], ["x-other", "o"], ["x-multi", "b, c"]]
    assert seen["joined"] == "a, b, c"
    assert seen["listed"] == ["a", "b, c"]
    assert seen["raw_path"] == "/a%2Fb/c"
    assert seen["path"] == "/a/b/c"
    assert seen["segments"] == ["a/b", "c"]
    assert seen["query"] == {"x": ["1", "2"]}
    assert seen["method"] == "POST"
    assert seen["body"] == "payload"


@pytest.mark.parametrize("door", DOORS)
async def test_streamed_body_arrives_chunk_by_chunk(door) -> None:
    """A streamed response reaches the client whole when it ends cleanly."""
    with trio.fail_after(10):
        async with door() as client:
            response = await client.get("/stream")
    assert response.text == "one\ntwo\n"


@pytest.mark.parametrize("door", DOORS)
async def test_aborted_stream_is_a_broken_connection(door) -> None:
    """A stream ending in StreamAborted breaks the connection instead of ending the body."""
    with trio.fail_after(10):
        async with door() as client:
            with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
                await client.get("/stream?abort=true")


async def test_refused_in_process_is_a_connect_error() -> None:
    """In-process, a handler refusing the request is a connection refused."""
    async with in_process() as client:
        with pytest.raises(httpx.ConnectError, match="Connection refused"):
            await client.get("/refuse")


def test_headers_read_case_insensitively() -> None:
    """Header names compare without case; an absent header reads as missing; cookies
    combine with "; " and Set-Cookie does not combine."""
    headers = Headers(
        [
            ("Accept", "a"),
            ("ACCEPT", "b"),
            ("cookie", "x=1"),
            ("Cookie", "y=2"),
            ("set-cookie", "s=1"),
            ("set-cookie", "t=2"),
        ]
    )
    assert headers["accept"] == "a, b"
    assert "Accept" in headers
    assert headers.get("content-type") is None
    assert list(headers) == ["accept", "cookie", "set-cookie"]
    assert headers["cookie"] == "x=1; y=2"
    assert headers["set-cookie"] == "s=1"
    assert headers.get_list("set-cookie") == ["s=1", "t=2"]


async def test_emulator_and_sim_cloud_read_a_repeated_header_alike() -> None:
    """Both servers join a repeated header the same way: the emulator reads a Table from an
    Accept split over two fields, the sim cloud logs the replica named in two fields."""
    server = ApiServer(seed=1)
    cloud = SimCloud(seed=1)
    async with (
        httpx.AsyncClient(transport=server.transport(), base_url="http://e") as kube,
        httpx.AsyncClient(transport=cloud.transport(), base_url="http://c") as sim,
    ):
        table = await kube.get(
            "/api/v1/namespaces",
            headers=[
                ("accept", "application/json;as=Table;v=v1;g=meta.k8s.io"),
                ("accept", "application/json"),
            ],
        )
        await sim.get(
            "/v1/health", headers=[("x-sim-replica", "ccm-0"), ("x-sim-replica", "ccm-1")]
        )
    assert table.json()["kind"] == "Table"
    assert [call.replica for call in cloud.calls] == ["ccm-0, ccm-1"]


async def test_http1_releases_a_stream_when_its_client_hangs_up() -> None:
    """Over serve_http1, a client that closes its connection mid-stream ends the stream:
    the body is closed and its cleanup runs; a refused request is a 503."""
    released = trio.Event()

    async def forever() -> AsyncIterator[bytes]:
        yield b"first\n"
        await trio.sleep_forever()
        yield b""  # pragma: no cover

    async def handler(request: Request) -> Response:
        if request.path == "/refuse":
            raise Refused("test outage")
        return Response(200, forever(), cleanup=released.set)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(serve_http1, handler, host="127.0.0.1", port=0))
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                assert (await client.get("/refuse")).status_code == 503
            # A raw socket, so the client side closes with nothing left half-read.
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(b"GET /watch HTTP/1.1\r\nhost: x\r\n\r\n")
            received = b""
            while b"first" not in received:
                received += await stream.receive_some()
            assert received.startswith(b"HTTP/1.1 200 ")
            await stream.aclose()
            await released.wait()
            nursery.cancel_scope.cancel()


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive timestamps are Linux's")
async def test_http1_dates_a_request_by_its_arrival_not_by_when_it_was_read() -> None:
    """A request that a busy server reads late carries the kernel's receive time: the
    leadership referee dates cloud writes by when they left their replica, not by when a
    starved testbed got to them."""
    seen: list[tuple[float | None, float]] = []

    async def record(request: Request) -> Response:
        seen.append((request.received_at, time.time()))
        return Response(200, b"ok")

    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http1, record, host="127.0.0.1", port=0))
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(b"GET /late HTTP/1.1\r\nhost: test\r\n\r\n")
            sent = time.time()
            # The server runs on this thread: blocking it is a starved server, and the
            # request waits in the kernel meanwhile.
            time.sleep(0.3)  # noqa: ASYNC251 - the point: a blocked server
            stream = trio.SocketStream(trio.socket.from_stdlib_socket(client.dup()))
            answer = b""
            while b"\r\n\r\nok" not in answer:
                answer += await stream.receive_some(1024)
            await stream.aclose()
        nursery.cancel_scope.cancel()
    [(received_at, handled_at)] = seen
    assert received_at is not None
    assert received_at <= sent + 0.05
    assert handled_at - received_at >= 0.3
