"""A watch's body read below httpx: large reads from the connection, chunked encoding parsed here.

A watch answer is a long `Transfer-Encoding: chunked` body in which the API server writes
each event as its own chunk. Read through httpx (`Response.aiter_bytes`), every chunk is
one pass through httpx's and httpcore's iterators and h11's `ChunkedReader` (an event
object, a buffer extraction, a copy), and one batch for the watch: at 100,000 Nodes the
kubelets' heartbeats are 333 chunks a second, and those layers were 17 % of the CCM's
steady CPU (docs/benchmarks.md, "Steady CPU, fifth pass").

`raw_body(response)` takes over a streamed answer whose headers are in: it reads the
connection's network stream (httpcore's `network_stream` extension) directly, first what
h11 had already buffered past the headers, then large reads, taken back to back while more
is already waiting (over TLS a read gives one record, an event: the records trio already
holds are decrypted at once, `_Pending`), and `ChunkedBody` strips the chunked framing, so
one wake-up's events are one piece of body (one decode, one batch for the watch).

What it relies on in httpx 0.28 / httpcore 1.0 / h11 0.16, each checked (`raw_body` answers
None, and the caller reads through httpx as before, when one does not hold):

- the answer's stream is httpx's `AsyncResponseStream` over httpcore's `PoolByteStream`
  over `HTTP11ConnectionByteStream`, whose connection (`AsyncHTTP11Connection`) holds the
  h11 state machine and the network stream the extension names (the same object);
- h11 is in the body (`SEND_BODY`) with a `ChunkedReader` that has read nothing yet, so
  everything past the headers is in its buffer (`Connection.trailing_data`, public);
- over TLS, trio's `SSLStream` keeps the bytes it took off the socket in `_incoming` (a
  `MemoryBIO`; when not, TLS records are read through trio one at a time, as before).

An in-process transport (the tests' emulator, the benches' replays) has none of this: its
answers are read through httpx, with no warning. A real httpx transport whose insides
differ (a new httpx or httpcore) is read through httpx too, and says so once in the log.

The connection is never reused after a body read this way: h11 never saw the body end, so
closing the answer (`Response.aclose`, which the watch does on every exit: the stream's
end, an error, a cancellation) closes the connection instead of handing it back to the
pool (httpcore's `_response_closed`: a connection whose h11 state is not DONE is closed).
"""

from __future__ import annotations

import logging
import ssl
from typing import Any, Final

import h11
import httpcore
import httpx
import trio

__all__ = ["ChunkedBody", "ChunkedError", "RawBody", "raw_body"]

log = logging.getLogger(__name__)

READ_BYTES: Final = 256 * 1024
"""One read's size (httpcore reads 64 KiB)."""
GATHER_BYTES: Final = 1024 * 1024
"""Reads taken back to back while more is waiting, up to this much body in hand."""
LINE_LIMIT: Final = 4096
"""The longest chunk-size or trailer line accepted (h11 accepts up to 100 KiB for an
incomplete event; an API server's are a few bytes)."""

_SIZE, _DATA, _CRLF, _TRAILER, _DONE = range(5)
_HEX: Final = frozenset(b"0123456789abcdefABCDEF")


class ChunkedError(Exception):
    """The body breaks the chunked encoding, or ends before its last chunk."""


class ChunkedBody:
    """The chunked encoding (RFC 9112 section 7.1) taken off a body fed in pieces cut
    anywhere: `feed` returns the data of the chunks in a piece (joined), `done` is True
    once the last chunk and the trailer section have been read, `end` checks that the
    stream may end here. Chunk extensions and trailer fields are read and dropped, as h11
    does (httpx hands neither to its callers). A framing error is raised once the data
    before it has been returned (kept in `error`, raised by the next `feed` or `end`), as
    h11 hands over the chunks before a bad one; bytes after the body's end are counted in
    `extra` (the connection is closed after the body anyway)."""

    __slots__ = ("_held", "_left", "_state", "error", "extra")

    def __init__(self) -> None:
        self._state = _SIZE
        self._left = 0  # bytes of the current chunk's data still to come
        self._held = b""  # the start of a size line, trailer line or CRLF cut by the read
        self.error: ChunkedError | None = None
        self.extra = 0

    @property
    def done(self) -> bool:
        return self._state == _DONE

    def feed(self, data: bytes) -> bytes:
        """The chunks' data in `data`; raises ChunkedError on a framing error (at once when
        no data came before it in `data`, else at the next call)."""
        if self.error is not None:
            raise self.error
        if self._held:
            data = self._held + data
            self._held = b""
        view = memoryview(data)
        size = len(data)
        out: list[memoryview] = []
        at = 0
        state = self._state
        try:
            state, at = self._parse(data, view, out, state)
        except ChunkedError as exc:
            if not out:
                raise
            self.error = exc  # the data before it first
            state, at = self._state, size
        self._state = state
        if state == _DONE and at < size:
            self.extra += size - at  # after the body's end: the connection is closed anyway
        if not out:
            return b""
        if len(out) == 1:
            return out[0].tobytes()
        return b"".join(out)

    def _parse(
        self, data: bytes, view: memoryview, out: list[memoryview], state: int
    ) -> tuple[int, int]:
        """Parse `data` from the state `state`; the state and offset reached."""
        size = len(data)
        at = 0
        while at < size:
            if state == _DATA:
                take = min(self._left, size - at)
                out.append(view[at : at + take])
                at += take
                self._left -= take
                if self._left == 0:
                    state = _CRLF
            elif state == _CRLF:
                if size - at < 2:
                    if data[at:] != b"\r":
                        raise ChunkedError(f"a chunk's data is not followed by CRLF: {data[at:]!r}")
                    self._held = data[at:]
                    break
                if data[at : at + 2] != b"\r\n":
                    raise ChunkedError(
                        f"a chunk's data is not followed by CRLF: {data[at : at + 2]!r}"
                    )
                at += 2
                state = _SIZE
            elif state in (_SIZE, _TRAILER):
                end = data.find(b"\r\n", at)
                if end < 0:
                    if size - at > LINE_LIMIT:
                        raise ChunkedError(
                            f"a chunk-size or trailer line longer than {LINE_LIMIT} bytes: "
                            f"{data[at : at + 40]!r}..."
                        )
                    self._held = data[at:]
                    break
                line = data[at:end]
                at = end + 2
                if state == _TRAILER:
                    if not line:
                        state = _DONE
                    continue  # a trailer field: dropped
                self._left = _chunk_size(line)
                state = _DATA if self._left else _TRAILER
            else:  # _DONE
                break
        return state, at

    def end(self) -> None:
        """The stream ended here: raises ChunkedError unless the body was complete."""
        if self.error is not None:
            raise self.error
        if self._state != _DONE:
            raise ChunkedError(
                "the server closed the connection before the body's last chunk "
                "(incomplete chunked read)"
            )


def _chunk_size(line: bytes) -> int:
    """A chunk-size line's size (hex digits, then optional whitespace and extensions)."""
    digits = line.split(b";", 1)[0].rstrip(b" \t")
    if not digits or len(digits) > 16 or not _HEX.issuperset(digits):
        raise ChunkedError(f"a malformed chunk-size line: {line[:40]!r}")
    return int(digits, 16)


class RawBody:
    """The body of a chunked answer, read from its connection's network stream: an async
    iterator of body pieces, one per gathered read (none empty). Raises ChunkedError on a
    framing error or a stream that ends early, httpcore's ReadError when the connection
    breaks. Not an async generator: nothing for the garbage collector to close."""

    def __init__(self, stream: Any, first: bytes, closed: bool) -> None:
        self._stream = stream
        self._first: bytes | None = first
        self._closed = closed  # the server had closed its side already
        self._body = ChunkedBody()
        self._pending = _Pending(stream)

    def __aiter__(self) -> RawBody:
        return self

    def waiting(self) -> bool:
        """Whether more of the body waits on the connection (`_Pending.waiting`)."""
        return self._pending.waiting()

    async def aclose(self) -> None:
        """Nothing to close: the connection closes with its answer (`Response.aclose`)."""

    async def __anext__(self) -> bytes:
        body = self._body
        while not body.done:
            if body.error is not None:
                raise body.error
            if self._first is not None:
                data, self._first = self._first, None
                if self._closed and not data:
                    body.end()
            else:
                data = await self._read()
            piece = body.feed(data) if data else b""
            if piece:
                return piece
        if body.extra:
            log.warning(
                "%d bytes after the end of a watch's body (not read; the connection is closed)",
                body.extra,
            )
            body.extra = 0
        raise StopAsyncIteration

    async def _read(self) -> bytes:
        """One read, then more while more is already waiting (up to GATHER_BYTES)."""
        if self._closed:
            self._body.end()
        data = await self._stream.read(READ_BYTES)
        if not data:
            self._closed = True
            self._body.end()
            return b""
        pending = self._pending
        parts = [data]
        gathered = len(data)
        while gathered < GATHER_BYTES:
            more = pending.decrypted()
            if not more:
                if not pending.waiting():
                    break
                more = await self._stream.read(READ_BYTES)
                if not more:
                    self._closed = True  # the end: parsed with what came before it
                    break
            parts.append(more)
            gathered += len(more)
        return parts[0] if len(parts) == 1 else b"".join(parts)


class _Pending:
    """What more waits on an httpcore network stream, and the TLS records trio holds.

    trio's `SSLStream` takes up to 64 KiB off the socket into its `MemoryBIO`, and each of
    its reads decrypts one record (an event, as an API server writes them) and passes
    through the scheduler: after a read the socket is often empty while records wait in
    that buffer. `waiting` looks there too (else a gathered read would stop after one
    event), and `decrypted` decrypts the records already there at once, with the TLS
    object httpcore's extension hands out (`ssl_object`), so a wake-up's records cost one
    pass through the scheduler, not one each. The buffer is found where trio 0.2x/0.3x
    keeps it (`SSLStream._incoming`, under httpcore's `TrioStream._stream`), checked by
    type; when it is not there, or a TLS error other than "a record is not whole" comes
    up, every read goes through trio as before (which then reports that error)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._ssl: ssl.SSLObject | None = stream.get_extra_info("ssl_object")
        inner = getattr(stream, "_stream", None)
        incoming = getattr(inner, "_incoming", None) if isinstance(inner, trio.SSLStream) else None
        self._bio = incoming if isinstance(incoming, ssl.MemoryBIO) else None

    def waiting(self) -> bool:
        """Decrypted TLS bytes not taken, TLS bytes trio holds, or bytes on the socket."""
        if self._ssl is not None and self._ssl.pending():
            return True
        if self._bio is not None and self._bio.pending:
            return True
        return bool(self._stream.get_extra_info("is_readable"))

    def decrypted(self) -> bytes:
        """The next TLS record trio has taken off the socket, decrypted now; b"" when no
        whole record is there (or on plain TCP)."""
        tls, bio = self._ssl, self._bio
        if tls is None or bio is None or not (bio.pending or tls.pending()):
            return b""
        try:
            return tls.read(READ_BYTES)
        except ssl.SSLWantReadError:
            return b""  # a record not whole yet
        except ssl.SSLError:
            self._bio = None  # from now on through trio, whose next read reports it
            return b""


def _internals() -> tuple[type[Any], ...] | None:
    """httpx's and httpcore's classes `raw_body` looks through; None when one is missing."""
    try:
        from h11._readers import ChunkedReader
        from httpcore._async.connection_pool import PoolByteStream
        from httpcore._async.http11 import HTTP11ConnectionByteStream
        from httpx._transports.default import AsyncResponseStream
    except ImportError:
        return None
    return AsyncResponseStream, PoolByteStream, HTTP11ConnectionByteStream, ChunkedReader


_INTERNALS: Final = _internals()
_warned: list[str] = []


def _unknown(reason: str) -> None:
    """Say once that a real httpx answer is read through httpx, and why."""
    if not _warned:
        _warned.append(reason)
        log.warning(
            "watches are read through httpx (httpx %s, httpcore %s, h11 %s): %s; "
            "update trio_ccm.kube.chunked",
            httpx.__version__,
            httpcore.__version__,
            getattr(h11, "__version__", "?"),
            reason,
        )


def raw_body(response: httpx.Response) -> RawBody | None:
    """The body of a streamed, chunked `response` (headers read, body not begun), read
    below httpx; None when it is not chunked (or is encoded), when the transport is not
    httpx's own, or when httpx's or httpcore's insides are not the ones this module knows
    (the caller then reads through httpx)."""
    headers = response.headers
    if headers.get("transfer-encoding", "").lower() != "chunked":
        return None
    if headers.get("content-encoding", "identity").lower() != "identity":
        return None
    stream = response.stream
    if _INTERNALS is None:
        if type(stream).__name__ == "AsyncResponseStream":
            _unknown("a class it looks through is gone")
        return None
    response_stream, pool_stream, connection_stream, chunked_reader = _INTERNALS
    if type(stream) is not response_stream:
        return None  # an in-process transport
    network = response.extensions.get("network_stream")
    pooled = getattr(stream, "_httpcore_stream", None)
    inner = getattr(pooled, "_stream", None)
    connection = getattr(inner, "_connection", None)
    state = getattr(connection, "_h11_state", None)
    if type(pooled) is not pool_stream or type(inner) is not connection_stream:
        _unknown(f"the answer's stream is {type(pooled).__name__} over {type(inner).__name__}")
        return None
    if not isinstance(state, h11.Connection) or getattr(connection, "_network_stream", 0) is not (
        network
    ):
        _unknown("the connection's h11 state or network stream is not where it was")
        return None
    if getattr(inner, "_closed", True):
        return None  # closed already: nothing to read
    reader = getattr(state, "_reader", None)
    if (
        state.their_state is not h11.SEND_BODY
        or type(reader) is not chunked_reader
        or getattr(reader, "_bytes_in_chunk", None) != 0
        or getattr(reader, "_bytes_to_discard", None) != b""
        or getattr(reader, "_reading_trailer", None) is not False
    ):
        _unknown("h11 is not at the start of a chunked body")
        return None
    first, closed = state.trailing_data
    return RawBody(network, first, closed)
