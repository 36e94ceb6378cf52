"""Watch streams cut into chunks anywhere: lines are handed over per received chunk, in
order, whole, with the events before a failing line first; the informer applies a chunk's
events in one step. The server is a scripted httpx transport (bytes in chosen chunks, the
only way to place chunk boundaries), the client and informer are the real ones."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from trio_ccm.base.mailbox import Mailbox
from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.kube.errors import GoneError, KubeDecodeError
from trio_ccm.kube.informer import Changed, Informer, Update
from trio_ccm.kube.objects import NODES, Node

GONE: dict[str, Any] = {"kind": "Status", "status": "Failure", "code": 410, "reason": "Expired"}


def _node(name: str, rv: int, label: str = "a") -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": str(rv), "labels": {"l": label}},
        "spec": {"providerID": f"sim://{name}"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def _bookmark(rv: int) -> bytes:
    return _line("BOOKMARK", {"kind": "Node", "metadata": {"resourceVersion": str(rv)}})


class _Chunks(httpx.AsyncByteStream):
    """The chunks, a checkpoint before each (as a socket read); then, unless `hold` is
    set, an open, silent stream. An iterator, not an async generator: nothing is left
    for the garbage collector to close when the client stops reading early."""

    def __init__(self, chunks: list[bytes], hold: trio.Event) -> None:
        self.chunks, self.hold = list(chunks), hold

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        await trio.lowlevel.checkpoint()
        if self.chunks:
            return self.chunks.pop(0)
        await self.hold.wait()  # the server keeps the watch open until told
        raise StopAsyncIteration


class Scripted(httpx.AsyncBaseTransport):
    """Lists `nodes`; answers the n-th watch with `watches[n]` (its chunks), then keeps it
    open and silent until `hold` is set. Records each watch's resourceVersion."""

    def __init__(
        self,
        nodes: list[dict[str, Any]],
        list_rv: int,
        watches: list[list[bytes]],
        later: tuple[list[dict[str, Any]], int] | None = None,
    ) -> None:
        self.nodes, self.list_rv, self.watches = nodes, list_rv, watches
        self.later = later  # what lists answer once a watch has been opened
        self.watched_from: list[str] = []
        self.streamed = trio.Event()  # set once the last scripted watch has been answered
        self.hold = trio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await trio.lowlevel.checkpoint()
        params = request.url.params
        if params.get("watch") in ("1", "true"):
            self.watched_from.append(params["resourceVersion"])
            if self.later is not None:
                self.nodes, self.list_rv = self.later
            index = len(self.watched_from) - 1
            chunks = self.watches[index] if index < len(self.watches) else []
            if index >= len(self.watches) - 1:
                self.streamed.set()
            return httpx.Response(200, stream=_Chunks(chunks, self.hold))
        body = {
            "kind": "NodeList",
            "metadata": {"resourceVersion": str(self.list_rv)},
            "items": self.nodes,
        }
        return httpx.Response(200, json=body)


def _client(transport: httpx.AsyncBaseTransport) -> KubeClient:
    config = ConnectionConfig(server="http://127.0.0.1:1", credentials=StaticCredentials())
    return KubeClient(config, transport=transport, qps=0)


@asynccontextmanager
async def _streamed(
    transport: Scripted,
) -> AsyncIterator[tuple[Informer[Node], Mailbox[str, Update[Node]]]]:
    """An informer over `transport` and a subscription whose first fill is taken, once the
    scripted stream has been read: the subscriber's view of what it changed."""
    informer = Informer(_client(transport), NODES, Node, rng=random.Random(1))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(informer.serve)
            async with informer.subscription() as mailbox:
                while len(mailbox):  # the first fill: every cached key
                    mailbox.get_nowait()
                await transport.streamed.wait()
                await trio.testing.wait_all_tasks_blocked()
                yield informer, mailbox
            nursery.cancel_scope.cancel()


async def _batches(
    chunks: list[bytes], seen: list[tuple[str, str]] | None = None
) -> list[list[tuple[str, str]]]:
    """What `watch_batches_as` hands over for a stream of `chunks`: (type, rv) per event,
    one list per batch; each event also goes to `seen` as it comes (kept when an error
    follows)."""
    transport = Scripted([], 1, [chunks])
    transport.hold.set()  # the stream ends after its chunks
    client = _client(transport)
    got: list[list[tuple[str, str]]] = []
    try:
        async with client.watch_batches_as(NODES, Node, resource_version="1") as batches:
            async for batch in batches:
                got.append([(e.type, e.object.metadata.resource_version) for e in batch])
                if seen is not None:
                    seen.extend(got[-1])
    finally:
        await client.aclose()
    return got


STREAM = [
    _line("ADDED", _node("n1", 2)),
    _bookmark(3),
    _line("MODIFIED", _node("n2", 4, "b")),
    _line("DELETED", _node("n1", 5)),
]
EVENTS = [("ADDED", "2"), ("BOOKMARK", "3"), ("MODIFIED", "4"), ("DELETED", "5")]


async def test_a_stream_cut_at_every_byte_gives_every_event_once_in_order() -> None:
    """Cut in two at each byte offset, the stream gives the same four events in order, in
    one batch per chunk that completes a line, holding exactly the lines it completes."""
    stream = b"".join(STREAM)
    ends = [sum(map(len, STREAM[: i + 1])) for i in range(len(STREAM))]  # after each \n
    cuts = range(1, len(stream))
    transport = Scripted([], 1, [[stream[:cut], stream[cut:]] for cut in cuts])
    transport.hold.set()
    client = _client(transport)
    for cut in cuts:
        got: list[list[tuple[str, str]]] = []
        async with client.watch_batches_as(NODES, Node, resource_version="1") as batches:
            async for batch in batches:
                got.append([(e.type, e.object.metadata.resource_version) for e in batch])
        first = sum(1 for end in ends if end <= cut)
        expected = [EVENTS[:first], EVENTS[first:]]
        assert got == [batch for batch in expected if batch], cut
    await client.aclose()


async def test_a_stream_one_byte_per_chunk_gives_one_event_per_batch() -> None:
    """Sent a byte at a time, each event comes alone, when its newline arrives."""
    stream = b"".join(STREAM)
    got = await _batches([stream[i : i + 1] for i in range(len(stream))])
    assert got == [[event] for event in EVENTS]


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        pytest.param(_line("ERROR", GONE), GoneError, id="410-gone"),
        pytest.param(
            # A Status without "status" decodes as a Node: still raised as its error.
            _line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"}),
            GoneError,
            id="410-that-decodes-as-a-node",
        ),
        pytest.param(
            b'{"type": "MODIFIED", "object": {"metadata": 7}}\n', KubeDecodeError, id="bad"
        ),
        pytest.param(b"{not json\n", KubeDecodeError, id="not-json"),
    ],
)
async def test_a_failing_line_mid_chunk_comes_after_the_events_before_it(
    bad: bytes, error: type[Exception]
) -> None:
    """A failing line in the middle of a chunk: the events before it in that chunk are
    handed over, then its error is raised, and nothing after it is."""
    seen: list[tuple[str, str]] = []
    with pytest.raises(error):
        await _batches([STREAM[0] + STREAM[1] + bad + STREAM[2]], seen)
    assert seen == EVENTS[:2]


async def test_blank_lines_and_crlf_in_a_chunk_are_skipped() -> None:
    """Empty and blank lines, and lines ended by CRLF, in one chunk: the same events in
    one batch."""
    chunk = b"\n" + STREAM[0] + b"  \n" + STREAM[1][:-1] + b"\r\n" + b"".join(STREAM[2:])
    assert await _batches([chunk]) == [EVENTS]


async def test_per_event_watch_as_is_the_batches_flattened() -> None:
    """`watch_as` yields the same events one at a time, across any cut."""
    stream = b"".join(STREAM)
    transport = Scripted([], 1, [[stream[:7], stream[7:200], stream[200:]]])
    transport.hold.set()
    client = _client(transport)
    async with client.watch_as(NODES, Node, resource_version="1") as events:
        got = [(e.type, e.object.metadata.resource_version) async for e in events]
    await client.aclose()
    assert got == EVENTS


async def test_informer_applies_a_chunk_in_order_with_bookmarks_then_relists_on_gone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """One chunk (cut mid-line) with three changes, bookmarks and a 410: the subscriber
    gets the keys in stream order with the chunk's values (the relist after the 410 finds
    the same state, so it notifies nothing), and the next watch starts from the relist."""
    nodes = [_node(f"n{i}", i) for i in (1, 2, 3)]
    after = [_node("n1", 11, "y"), _node("n2", 13, "z"), _node("n3", 10, "x")]
    chunk = (
        _line("MODIFIED", _node("n3", 10, "x"))
        + _line("MODIFIED", _node("n1", 11, "y"))
        + _bookmark(12)
        + _line("MODIFIED", _node("n2", 13, "z"))
        + _bookmark(14)
    )
    gone = _line("ERROR", GONE)
    transport = Scripted(nodes, 3, [[chunk[:50], chunk[50:] + gone]], later=(after, 20))
    order: list[str] = []
    async with _streamed(transport) as (informer, mailbox):
        while len(mailbox):
            key, update = mailbox.get_nowait()
            assert isinstance(update, Changed)
            order.append(f"{key}={update.obj.metadata.labels['l']}")
    assert order == ["n3=x", "n1=y", "n2=z"]
    assert informer.relists == 2  # the first list and the one after the 410
    assert informer.unchanged == 0
    assert transport.watched_from == ["3", "20"]  # the 410 relisted (the list says 20)
    assert informer.resource_version == "20"


async def test_one_chunk_of_changes_to_the_same_keys_reaches_the_subscriber_coalesced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """One chunk changes n1 twice, deletes and re-creates n2, and deletes n3: the
    subscriber gets each key once, with its last state (n1's second change, n2 re-created,
    n3 Gone), in the order the keys first changed, and the cache holds the same."""
    nodes = [_node(f"n{i}", i) for i in (1, 2, 3)]
    chunk = (
        _line("MODIFIED", _node("n1", 10, "b"))
        + _line("DELETED", _node("n2", 11))
        + _line("MODIFIED", _node("n1", 12, "c"))
        + _line("ADDED", _node("n2", 13, "new"))
        + _line("DELETED", _node("n3", 14))
    )
    transport = Scripted(nodes, 3, [[chunk]])
    got: list[tuple[str, str | None]] = []
    async with _streamed(transport) as (informer, mailbox):
        for key, update in await mailbox.get_batch(100):
            label = update.obj.metadata.labels["l"] if isinstance(update, Changed) else None
            got.append((key, label))
        assert len(mailbox) == 0
    assert got == [("n1", "c"), ("n2", "new"), ("n3", None)]
    assert {n.metadata.name: n.metadata.labels["l"] for n in informer.items()} == {
        "n1": "c",
        "n2": "new",
    }
    assert informer.resource_version == "14"


async def test_informer_cancelled_mid_line_keeps_every_whole_event_it_was_given(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Cancelled while the stream has delivered two whole lines, a bookmark and half a
    line, the cache holds both changes, the version is the bookmark's, and a new watch
    resumes from it (the half line is read again from the server, not lost)."""
    nodes = [_node("n1", 1), _node("n2", 2)]
    first, second, third = (
        _line("MODIFIED", _node("n1", 5, "p")),
        _line("MODIFIED", _node("n2", 6, "q")),
        _line("MODIFIED", _node("n1", 7, "r")),
    )
    transport = Scripted(nodes, 2, [[first + second + _bookmark(9) + third[:20]]])
    informer = Informer(_client(transport), NODES, Node, rng=random.Random(1))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(informer.serve)
            await transport.streamed.wait()
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert informer.resource_version == "9"
    cached = {n.metadata.name: n.metadata.labels["l"] for n in informer.items()}
    assert cached == {"n1": "p", "n2": "q"}
    transport.watches.append([third])
    transport.streamed = trio.Event()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(informer._watch_until_relist)
            await transport.streamed.wait()
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert transport.watched_from == ["2", "9"]
    assert informer.get("n1") is not None
    assert informer.get("n1").metadata.labels["l"] == "r"  # type: ignore[union-attr]
