"""The one HTTP core of the test tooling: what the emulator and the simulated cloud speak.

A server core is an async handler, `(Request) -> Response`. It reaches clients through
front doors that behave alike:

- `InProcessTransport(handler)`: an `httpx.AsyncBaseTransport` in the manner of
  `httpx.MockTransport`. No sockets, so it runs under `trio.testing.MockClock`; a request
  yields to the scheduler once before it is handled, as a real one would.
- `serve_http1(handler, ...)`: plain HTTP/1.1 on a socket, with h11 and nothing else. Each
  answer with a bytes body leaves in one write (status line, headers and body together).
  This is the plain-HTTP door: it costs about a third of what the ASGI door costs per
  request, so the emulator keeps ahead of the clients that measure it (issue 18).
- `AsgiApp(handler)`: an ASGI application, served by `trio_ccm.health.serve_asgi` on
  hypercorn's Trio worker: the TLS door (HTTP/2 by ALPN).

Contracts both doors keep:

- **Headers** arrive as sent: every field in order, names lower-cased, a repeated field kept
  as often as it came. Reading one (`headers.get(name)`) joins its repeated values with
  ", ", as HTTP defines the combined value (RFC 9110 section 5.3; "; " for Cookie, and
  Set-Cookie never combines); `get_list` gives them one by one.
- **Paths**: `Request.raw_path` is the path as sent (still percent-encoded, so a segment may
  carry an encoded slash); `Request.path` is its decoded form; `segments()` splits the raw
  path and decodes each segment.
- **Bodies**: a request body is read whole before the handler runs. A response body is
  bytes, or an async iterator of chunks that is streamed as produced (watches). A response's
  `cleanup` runs exactly once when the response is done with, whether or not its body was
  read, and a streamed body is closed (`aclose`) before it.
- **Failures**: a streamed body that raises `StreamAborted` ends as a broken connection
  (in-process: `httpx.ReadError`; over HTTP: the chunked body never gets its last chunk). A
  handler that raises `Refused` answers no request (in-process: `httpx.ConnectError`; over
  HTTP, where refusing is the listener's job, a 503).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import sys
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    MutableMapping,
)
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, NoReturn
from urllib.parse import parse_qs, quote, unquote

import h11
import httpx
import trio

from trio_ccm.health import answer_lifespan, bind_socket, read_body

__all__ = [
    "AsgiApp",
    "Body",
    "Handler",
    "Headers",
    "InProcessTransport",
    "Refused",
    "Request",
    "Response",
    "StreamAborted",
    "serve_http1",
]

Body = bytes | AsyncIterator[bytes]


class StreamAborted(Exception):  # noqa: N818 - a signal to the front doors, not an error
    """A streamed response must end as a broken connection (an injected reset)."""


class Refused(Exception):  # noqa: N818 - a signal to the front doors, not an error
    """The server refuses the connection (an injected outage)."""


# How repeated fields combine: ", " (RFC 9110 section 5.3), but "; " for Cookie (which
# HTTP/2 clients may split into several fields, RFC 9113 section 8.2.3). Set-Cookie does
# not combine: read it with `get_list`.
_JOINERS = {"cookie": "; "}


class Headers(Mapping[str, str]):
    """Header fields in arrival order, names lower-cased; repeated fields are kept.

    As a mapping, a name reads as its values combined as HTTP combines them.
    """

    __slots__ = ("_joined", "raw")

    def __init__(self, fields: Iterable[tuple[str, str]] = ()) -> None:
        self.raw: tuple[tuple[str, str], ...] = tuple((k.lower(), v) for k, v in fields)
        joined: dict[str, str] = {}
        for name, value in self.raw:
            if name in joined and name != "set-cookie":
                joined[name] = joined[name] + _JOINERS.get(name, ", ") + value
            elif name not in joined:
                joined[name] = value
        self._joined = joined

    def __getitem__(self, name: str) -> str:
        return self._joined[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._joined

    def __iter__(self) -> Iterator[str]:
        return iter(self._joined)

    def __len__(self) -> int:
        return len(self._joined)

    def get_list(self, name: str) -> list[str]:
        """Each value of field `name`, in arrival order (empty when absent)."""
        wanted = name.lower()
        return [value for key, value in self.raw if key == wanted]

    def __repr__(self) -> str:
        return f"Headers({list(self.raw)!r})"


@dataclass(frozen=True)
class Request:
    """One HTTP request as a server core sees it (see the module docstring for paths)."""

    method: str
    raw_path: str
    query: Mapping[str, list[str]] = field(default_factory=dict)
    headers: Headers = field(default_factory=Headers)
    body: bytes = b""
    received_at: float | None = None
    """Over a socket on Linux, when the kernel received the request's last bytes (wall
    clock, from the socket's receive timestamps): when the request left its client, on
    loopback, however late this process got to read it. None elsewhere (in-process)."""

    @classmethod
    def build(
        cls,
        method: str,
        raw_path: str,
        query_string: str,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        *,
        received_at: float | None = None,
    ) -> Request:
        query = parse_qs(query_string, keep_blank_values=True)
        return cls(method.upper(), raw_path, query, Headers(headers), body, received_at)

    @property
    def path(self) -> str:
        """The path, percent-decoded."""
        return unquote(self.raw_path)

    def segments(self) -> list[str]:
        """The path's non-empty segments, each percent-decoded (so one may hold a slash)."""
        return [unquote(part) for part in self.raw_path.split("/") if part]

    def arg(self, name: str, default: str = "") -> str:
        """The last value of query parameter `name`, or `default` when it is absent."""
        values = self.query.get(name)
        return values[-1] if values else default

    def flag(self, name: str) -> bool:
        """A boolean query parameter (`true` or `1`)."""
        return self.arg(name).lower() in ("true", "1")

    def list_arg(self, name: str) -> list[str]:
        """A comma-separated query parameter (repeatable) as a list without empty items."""
        return [item for value in self.query.get(name, []) for item in value.split(",") if item]


@dataclass
class Response:
    """One HTTP response of a server core: status, headers (content-type among them), body."""

    status: int
    body: Body = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    # Run once when the response is done with, even if its body was never read (watches).
    cleanup: Callable[[], None] | None = None

    def header(self, name: str) -> str | None:
        """The value of header `name` (repeated fields joined with ", "), or None."""
        return Headers(self.headers).get(name)


Handler = Callable[[Request], Awaitable[Response]]


async def _close(body: Body, cleanup: Callable[[], None] | None) -> None:
    aclose = getattr(body, "aclose", None)
    try:
        if aclose is not None:
            await aclose()
    finally:
        if cleanup is not None:
            cleanup()


# -- in-process ------------------------------------------------------------------------
class _Stream(httpx.AsyncByteStream):
    """A streamed body. Its iterator is a plain object, not an async generator, so a
    response closed early leaves nothing for the garbage collector to finalize."""

    def __init__(self, chunks: AsyncIterator[bytes], cleanup: Callable[[], None] | None) -> None:
        self._chunks = chunks
        self._cleanup = cleanup
        self._closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await anext(self._chunks)
        except StreamAborted as exc:
            raise httpx.ReadError(f"connection reset by peer (emulated: {exc})") from exc

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await _close(self._chunks, self._cleanup)


class InProcessTransport(httpx.AsyncBaseTransport):
    """`httpx.AsyncClient(transport=InProcessTransport(handler), base_url="http://any")`."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        # A real request yields to the scheduler; without this a write loop would starve
        # every streamed response (the emulator would cut its watchers off as too slow).
        await trio.lowlevel.checkpoint()
        body = await request.aread()
        ours = Request.build(
            request.method,
            request.url.raw_path.partition(b"?")[0].decode("ascii"),
            request.url.query.decode(),
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw],
            body,
        )
        try:
            response = await self.handler(ours)
        except Refused as exc:
            raise httpx.ConnectError(
                f"[Errno 111] Connection refused ({exc})", request=request
            ) from exc
        if isinstance(response.body, bytes):
            if response.cleanup is not None:
                response.cleanup()
            return httpx.Response(
                response.status, headers=response.headers, content=response.body, request=request
            )
        return httpx.Response(
            response.status,
            headers=response.headers,
            stream=_Stream(response.body, response.cleanup),
            request=request,
        )


# -- ASGI ------------------------------------------------------------------------------
_Scope = MutableMapping[str, Any]
_Message = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[_Message]]
_Send = Callable[[_Message], Awaitable[None]]

_CLOSE_DEADLINE_S = 5.0  # closing a streamed body only releases in-memory state


def _raw_path(scope: _Scope) -> str:
    raw: bytes | None = scope.get("raw_path")
    if raw is None:
        return quote(scope["path"])
    return raw.partition(b"?")[0].decode("latin-1")


class AsgiApp:
    """ASGI adapter: read the whole request, answer it with the handler, send the answer.

    A streamed answer is sent chunk by chunk until it ends or the client disconnects.
    """

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        received = await read_body(receive)
        if received is None:
            return
        request = Request.build(
            scope["method"],
            _raw_path(scope),
            scope.get("query_string", b"").decode("latin-1"),
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
            received,
        )
        try:
            response = await self.handler(request)
        except Refused:
            response = Response(503, b"", [("content-length", "0")])
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
        body = response.body
        if isinstance(body, bytes):
            if response.cleanup is not None:
                response.cleanup()
            headers.append((b"content-length", str(len(body)).encode()))
            await send(
                {"type": "http.response.start", "status": response.status, "headers": headers}
            )
            await send({"type": "http.response.body", "body": body})
            return
        finished = False
        try:
            await send(
                {"type": "http.response.start", "status": response.status, "headers": headers}
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
                async for chunk in body:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                finished = True
                nursery.cancel_scope.cancel()
        finally:
            # Shielded so a cancelled connection still releases its watcher; bounded in
            # case the body's own cleanup hangs.
            with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_DEADLINE_S):
                await _close(body, response.cleanup)
        if finished:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _cancel_on_disconnect(receive: _Receive, scope: trio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


# -- plain HTTP/1.1 --------------------------------------------------------------------
_RECEIVE_BYTES = 64 * 1024
_SO_TIMESTAMPNS: Final = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else 0)
_TIMESPEC: Final = struct.Struct("@qq")
_NO_BODY_STATUSES = frozenset({204, 304})


async def serve_http1(
    handler: Handler,
    *,
    host: str,
    port: int,
    keep_alive_timeout_s: float = 75.0,
    max_request_bytes: int = 1024 * 1024,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve `handler` over plain HTTP/1.1 until cancelled; `task_status.started(port)` once
    the socket accepts. A connection idle for `keep_alive_timeout_s` between requests is
    closed; a request line and headers longer than `max_request_bytes` are refused (431)."""
    sock = bind_socket(host, port)
    if _SO_TIMESTAMPNS:
        # Set on the listener, so that accepted connections have it from their first byte.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    try:
        bound_port: int = sock.getsockname()[1]
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
        connection = partial(_serve_connection, handler, keep_alive_timeout_s, max_request_bytes)
        async with trio.open_nursery() as nursery:
            task_status.started(bound_port)
            await trio.serve_listeners(connection, [listener], handler_nursery=nursery)
    finally:
        sock.close()
    raise AssertionError("serve_listeners returned without being cancelled")


class _Receiver:
    """Reads a connection's bytes, and on Linux the kernel's receive time of the latest read
    (`SO_TIMESTAMPNS`), so a request is dated by its arrival, not by when a busy server
    read it."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.received_at: float | None = None
        self._timestamps = False
        if _SO_TIMESTAMPNS:
            try:
                stream.socket.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self._timestamps = True
            except OSError:
                pass

    async def receive(self) -> bytes:
        if not self._timestamps:
            return await self.stream.receive_some(_RECEIVE_BYTES)
        try:
            data, ancillary, _, _ = await self.stream.socket.recvmsg(
                _RECEIVE_BYTES, socket.CMSG_SPACE(_TIMESPEC.size)
            )
        except OSError as exc:
            raise trio.BrokenResourceError from exc
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                seconds, nanoseconds = _TIMESPEC.unpack(payload[: _TIMESPEC.size])
                self.received_at = seconds + nanoseconds / 1e9
        return bytes(data)


async def _next_event(conn: h11.Connection, receiver: _Receiver) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        if conn.they_are_waiting_for_100_continue:
            await receiver.stream.send_all(
                conn.send(h11.InformationalResponse(status_code=100, headers=[]))
            )
        conn.receive_data(await receiver.receive())


async def _serve_connection(
    handler: Handler, keep_alive_s: float, max_request_bytes: int, stream: trio.SocketStream
) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_request_bytes)
    receiver = _Receiver(stream)
    try:
        while True:
            head = None
            with trio.move_on_after(keep_alive_s):
                head = await _next_event(conn, receiver)
            if not isinstance(head, h11.Request):
                return  # idle too long, or the client closed the connection
            chunks: list[bytes] = []
            while not isinstance(event := await _next_event(conn, receiver), h11.EndOfMessage):
                if isinstance(event, h11.ConnectionClosed):
                    return
                if isinstance(event, h11.Data):
                    chunks.append(event.data)
            request = _request_of(head, b"".join(chunks), receiver.received_at)
            await _answer(handler, conn, stream, request)
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError as exc:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                response = Response(exc.error_status_hint, f"{exc}\n".encode())
                await stream.send_all(_whole(conn, response, head=False))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_DEADLINE_S):
            await stream.aclose()


def _request_of(head: h11.Request, body: bytes, received_at: float | None = None) -> Request:
    path, _, query = head.target.partition(b"?")
    return Request.build(
        head.method.decode("ascii"),
        path.decode("latin-1"),
        query.decode("latin-1"),
        [(k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers.raw_items()],
        body,
        received_at=received_at,
    )


def _h11_headers(response: Response) -> list[tuple[bytes, bytes]]:
    return [
        (k.encode("latin-1"), v.encode("latin-1"))
        for k, v in response.headers
        if k.lower() != "content-length"
    ]


def _whole(conn: h11.Connection, response: Response, *, head: bool) -> bytes:
    """A response with a bytes body, as the one buffer it is sent in."""
    assert isinstance(response.body, bytes)
    headers = _h11_headers(response)
    body = b"" if head or response.status in _NO_BODY_STATUSES else response.body
    if response.status not in _NO_BODY_STATUSES:
        headers.append((b"content-length", b"%d" % len(response.body)))
    data = conn.send(h11.Response(status_code=response.status, headers=headers)) or b""
    if body:
        data += conn.send(h11.Data(data=body)) or b""
    return data + (conn.send(h11.EndOfMessage()) or b"")


async def _answer(
    handler: Handler, conn: h11.Connection, stream: trio.SocketStream, request: Request
) -> None:
    try:
        response = await handler(request)
    except Refused:
        response = Response(503, b"", [("content-length", "0")])
    if isinstance(response.body, bytes):
        if response.cleanup is not None:
            response.cleanup()
        await stream.send_all(_whole(conn, response, head=request.method == "HEAD"))
        return
    body = response.body
    finished = False
    try:
        headers = _h11_headers(response)
        await stream.send_all(
            conn.send(h11.Response(status_code=response.status, headers=headers)) or b""
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_hangup, stream, nursery.cancel_scope)
            try:
                async for chunk in body:
                    if chunk:
                        await stream.send_all(conn.send(h11.Data(data=chunk)) or b"")
                finished = True
            except (StreamAborted, trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # no last chunk: the client sees the connection break when it closes
            nursery.cancel_scope.cancel()
    finally:
        # Shielded so a cancelled connection still releases its watcher; bounded in case
        # the body's own cleanup hangs.
        with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_DEADLINE_S):
            await _close(body, response.cleanup)
    if finished:
        await stream.send_all(conn.send(h11.EndOfMessage()) or b"")


async def _cancel_on_hangup(stream: trio.SocketStream, scope: trio.CancelScope) -> None:
    """While a body streams, the client sends nothing; end the stream when it hangs up."""
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        while await stream.receive_some(_RECEIVE_BYTES):
            pass
    scope.cancel()
