"""The chunked encoding taken off a watch body fed in pieces cut anywhere (`kube/chunked.py`):
the chunks' data joined per piece, extensions and trailers read and dropped, framing errors
and early ends refused after the data before them; an httpx answer whose insides are not
the ones the module knows is read through httpx."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
import trio
from httpx._transports.default import AsyncResponseStream

from trio_ccm.kube import chunked
from trio_ccm.kube.chunked import LINE_LIMIT, ChunkedBody, ChunkedError
from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.kube.objects import NODES, Node

LINES = [b'{"type":"MODIFIED","n":%d}\n' % i for i in range(3)]
BODY = (
    b"".join(b"%x\r\n%s\r\n" % (len(line), line) for line in LINES)
    + b"5;name=value;x\r\nabcde\r\n"  # an extension
    + b"A \t;ext\r\n0123456789\r\n"  # upper-case hex, whitespace before the extension
    + b"0\r\n"
)
DATA = b"".join(LINES) + b"abcde" + b"0123456789"


def _feed(pieces: list[bytes]) -> tuple[list[bytes], ChunkedBody]:
    body = ChunkedBody()
    return [body.feed(piece) for piece in pieces], body


@pytest.mark.parametrize(
    ("pieces", "data", "done"),
    [
        pytest.param([BODY + b"\r\n"], [DATA], True, id="whole-body-one-piece"),
        pytest.param([BODY + b"X-Trailer: 1\r\nY: 2\r\n\r\n"], [DATA], True, id="trailers"),
        pytest.param([BODY], [DATA], False, id="last-chunk-without-the-trailer-end"),
        pytest.param([b"3\r\nabc\r\n", b"2\r\nde\r\n"], [b"abc", b"de"], False, id="chunk-a-read"),
        pytest.param([b"5\r\nab", b"cd", b"e\r\n"], [b"ab", b"cd", b"e"], False, id="data-split"),
        pytest.param(
            [b"1", b"0\r", b"\n" + b"x" * 16], [b"", b"", b"x" * 16], False, id="size-split"
        ),
        pytest.param([b"2\r\nab\r", b"\n0\r\n\r\n"], [b"ab", b""], True, id="crlf-split"),
        pytest.param([b"0\r\nX: 1\r", b"\n\r", b"\n"], [b"", b"", b""], True, id="trailer-split"),
        pytest.param([b"1\r\na\r\n0\r\n\r\n3\r\nxyz\r\n"], [b"a"], True, id="bytes-after-end"),
        pytest.param([b""], [b""], False, id="empty-read"),
    ],
)
def test_chunks_give_their_data_per_piece(
    pieces: list[bytes], data: list[bytes], done: bool
) -> None:
    """Each piece gives the data of the chunks (or parts of chunks) it holds, joined."""
    got, body = _feed(pieces)
    assert got == data
    assert body.done is done


def test_a_body_cut_anywhere_gives_the_same_data() -> None:
    """The body cut in two and in three at every offset gives the same data and ends."""
    whole = BODY + b"T: v\r\n\r\n"
    for cut in range(1, len(whole)):
        for second in (cut, min(cut + 3, len(whole))):
            got, body = _feed([whole[:cut], whole[cut:second], whole[second:]])
            assert b"".join(got) == DATA, (cut, second)
            assert body.done, (cut, second)
            body.end()


def test_bytes_after_the_end_are_counted() -> None:
    """Bytes after the body's end give no data and are counted in `extra`."""
    got, body = _feed([b"1\r\na\r\n0\r\n\r\nHTTP/1.1"])
    assert got == [b"a"]
    assert body.extra == len(b"HTTP/1.1")


@pytest.mark.parametrize(
    ("pieces", "message"),
    [
        pytest.param([b"zz\r\n"], "malformed chunk-size", id="not-hex"),
        pytest.param([b"\r\n"], "malformed chunk-size", id="empty-size-line"),
        pytest.param([b";ext\r\n"], "malformed chunk-size", id="extension-only"),
        pytest.param([b"-1\r\n"], "malformed chunk-size", id="negative"),
        pytest.param([b"1" * 17 + b"\r\n"], "malformed chunk-size", id="too-many-digits"),
        pytest.param([b"3\r\nabcXY"], "not followed by CRLF", id="no-crlf-after-data"),
        pytest.param([b"3\r\nabc", b"\n\r"], "not followed by CRLF", id="lf-cr-after-data"),
        pytest.param([b"3\r\nabcd"], "not followed by CRLF", id="one-byte-not-cr"),
        pytest.param([b"1" * (LINE_LIMIT + 1)], "longer than", id="size-line-too-long"),
        pytest.param([b"0\r\n" + b"X" * (LINE_LIMIT + 1)], "longer than", id="trailer-too-long"),
    ],
)
def test_framing_errors_are_refused(pieces: list[bytes], message: str) -> None:
    """A malformed size line, a chunk not ended by CRLF or an endless line raise
    ChunkedError naming the fault (by its feed, or by `end` after the data before it)."""

    def read_all() -> None:
        body = ChunkedBody()
        for piece in pieces:
            body.feed(piece)
        body.end()

    with pytest.raises(ChunkedError, match=message):
        read_all()


def test_data_before_a_framing_error_comes_first() -> None:
    """The chunks before a bad one in the same piece are returned; the error is raised by
    the next feed and by `end`."""
    body = ChunkedBody()
    assert body.feed(b"2\r\nab\r\n2\r\ncd\r\nzz\r\n") == b"abcd"
    with pytest.raises(ChunkedError, match="malformed chunk-size"):
        body.feed(b"")
    with pytest.raises(ChunkedError, match="malformed chunk-size"):
        body.end()


@pytest.mark.parametrize(
    "fed",
    [
        pytest.param(b"", id="nothing"),
        pytest.param(b"5\r\nab", id="mid-data"),
        pytest.param(b"5\r\nabcde", id="before-the-crlf"),
        pytest.param(b"5\r\nabcde\r\n1", id="mid-size-line"),
        pytest.param(b"5\r\nabcde\r\n", id="between-chunks"),
        pytest.param(b"0\r\n", id="after-the-last-chunk"),
        pytest.param(b"0\r\nX: 1\r\n", id="mid-trailers"),
    ],
)
def test_an_early_end_is_refused(fed: bytes) -> None:
    """A stream that ends anywhere before the trailer section's end is an incomplete read."""
    body = ChunkedBody()
    body.feed(fed)
    with pytest.raises(ChunkedError, match="incomplete chunked read"):
        body.end()


class _Body(httpx.AsyncByteStream):
    """A chunked watch body's data, as httpcore's stream would hand it over."""

    def __init__(self, data: list[bytes]) -> None:
        self.data = list(data)

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        await trio.lowlevel.checkpoint()
        if not self.data:
            raise StopAsyncIteration
        return self.data.pop(0)


class _Changed(httpx.AsyncBaseTransport):
    """Answers a watch as httpx's own transport would if httpcore's stream under its
    `AsyncResponseStream` were another class (a new httpcore)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await trio.lowlevel.checkpoint()
        node = {"kind": "Node", "metadata": {"name": "n1", "resourceVersion": "2"}}
        line = json.dumps({"type": "ADDED", "object": node}).encode() + b"\n"
        return httpx.Response(
            200,
            headers={"transfer-encoding": "chunked"},
            stream=AsyncResponseStream(_Body([line])),
        )


async def test_an_unknown_httpcore_is_read_through_httpx_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A real httpx answer over a stream class this module does not know is read through
    httpx (the same events), and the log says why, once."""
    chunked._warned.clear()  # the once-per-process flag, as at a start
    config = ConnectionConfig(server="http://127.0.0.1:1", credentials=StaticCredentials())
    client = KubeClient(config, transport=_Changed(), qps=0)
    with caplog.at_level(logging.WARNING, logger="trio_ccm.kube.chunked"):
        for _ in range(2):
            async with client.watch_batches_as(NODES, Node, resource_version="1") as batches:
                got = [[e.object.metadata.name for e in batch] async for batch in batches]
            assert got == [["n1"]]
    await client.aclose()
    assert client.raw_watches == 0
    said = [r.getMessage() for r in caplog.records if "read through httpx" in r.getMessage()]
    assert len(said) == 1
    assert "_Body" in said[0]
