"""The test world's small traffic clients: one HTTP GET over TCP, one UDP question.

The load balancers' health checks, the demo, the tests and the benches send through these,
and each checks its target is loopback first (`trio_ccm_testbed.loopback`): nothing here
ever sends to the documentation range the default load-balancer pool comes from.

The simulated pods (`trio_ccm_testbed.kubeproxy`) answer HTTP/1.1 with one JSON line,
`{"pod": ..., "node": ..., "source": ..., "service": ...}`, and a UDP datagram with the
same JSON; `Answer` is that line decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec
import trio

from trio_ccm_testbed.loopback import require_loopback

__all__ = [
    "Answer",
    "HttpReply",
    "TrafficError",
    "http_get",
    "open_http_connection",
    "udp_ask",
]

_MAX_HEAD: Final = 16 * 1024
_MAX_BODY: Final = 1024 * 1024


class TrafficError(Exception):
    """A request got no (readable) answer: refused, reset, timed out or garbled."""


class Answer(msgspec.Struct, frozen=True):
    """What a simulated pod answers: who it is, where it runs, whom it saw."""

    pod: str
    node: str
    source: str
    service: str


@dataclass(frozen=True)
class HttpReply:
    status: int
    body: bytes

    def answer(self) -> Answer:
        """The body as a pod's answer; `TrafficError` when it is not one."""
        try:
            return msgspec.json.decode(self.body, type=Answer)
        except msgspec.DecodeError as exc:
            raise TrafficError(f"not a pod's answer ({exc}): {self.body[:200]!r}") from exc


class _Reader:
    """Buffered reads of HTTP/1.1 responses from one stream (keep-alive)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def _fill(self) -> bool:
        chunk = await self.stream.receive_some(65536)
        if not chunk:
            return False
        self.buffer += chunk
        return True

    async def response(self) -> HttpReply:
        while b"\r\n\r\n" not in self.buffer:
            if len(self.buffer) > _MAX_HEAD:
                raise TrafficError("the response head is too large")
            if not await self._fill():
                raise TrafficError("the connection closed before an answer")
        head, _, rest = bytes(self.buffer).partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError) as exc:
            raise TrafficError(f"not an HTTP status line: {lines[0]!r}") from exc
        length: int | None = None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                try:
                    length = int(value.strip())
                except ValueError as exc:
                    raise TrafficError(f"bad Content-Length {value!r}") from exc
        self.buffer = bytearray(rest)
        if length is None:  # the body runs to the end of the connection
            while await self._fill():
                if len(self.buffer) > _MAX_BODY:
                    raise TrafficError("the response body is too large")
            body, self.buffer = bytes(self.buffer), bytearray()
            return HttpReply(status, body)
        if length > _MAX_BODY:
            raise TrafficError(f"Content-Length {length} is too large")
        while len(self.buffer) < length:
            if not await self._fill():
                raise TrafficError("the connection closed in the middle of the body")
        body = bytes(self.buffer[:length])
        del self.buffer[:length]
        return HttpReply(status, body)


class HttpConnection:
    """One kept-alive HTTP/1.1 connection: `get(path)` as often as wanted, then `aclose()`."""

    def __init__(self, stream: trio.SocketStream, host: str) -> None:
        self._stream = stream
        self._reader = _Reader(stream)
        self._host = host

    async def get(self, path: str = "/") -> HttpReply:
        request = f"GET {path} HTTP/1.1\r\nHost: {self._host}\r\n\r\n".encode()
        try:
            await self._stream.send_all(request)
            return await self._reader.response()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise TrafficError(f"GET {path} from {self._host}: {exc}") from exc

    async def aclose(self) -> None:
        await self._stream.aclose()


async def open_http_connection(
    address: str, port: int, *, source: str | None = None
) -> HttpConnection:
    """A kept-alive connection to `address:port` (loopback only), from `source` if given."""
    require_loopback(address, f"HTTP to {address}:{port}")
    if source is not None:
        require_loopback(source, f"source address of HTTP to {address}:{port}")
    try:
        stream = await trio.open_tcp_stream(address, port, local_address=source)
    except OSError as exc:
        raise TrafficError(f"connect to {address}:{port}: {exc.strerror or exc}") from exc
    return HttpConnection(stream, f"{address}:{port}")


async def http_get(
    address: str, port: int, path: str = "/", *, source: str | None = None
) -> HttpReply:
    """One GET on a fresh connection to `address:port` (loopback only; `TrafficError` when
    it gets no answer). The caller bounds it in time (`trio.fail_after`)."""
    connection = await open_http_connection(address, port, source=source)
    try:
        return await connection.get(path)
    finally:
        await connection.aclose()


async def udp_ask(
    address: str, port: int, payload: bytes = b"?", *, source: str | None = None
) -> bytes:
    """Send one datagram to `address:port` (loopback only) and return the first answer; the
    caller bounds the wait (`trio.fail_after`): a lost datagram is never answered."""
    require_loopback(address, f"UDP to {address}:{port}")
    if source is not None:
        require_loopback(source, f"source address of UDP to {address}:{port}")
    with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
        try:
            await sock.bind((source or "127.0.0.1", 0))
            await sock.connect((address, port))
            await sock.send(payload)
            return await sock.recv(65536)
        except OSError as exc:
            raise TrafficError(f"UDP to {address}:{port}: {exc.strerror or exc}") from exc
