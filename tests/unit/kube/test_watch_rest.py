"""A watch reader that rests once it has caught up (`watch_batches_as(rest_s=...)`, the
Node informer's `watch_rest_s`): a trickle of events is read in gathered batches, each
event at most `rest_s` late, and a stream with more waiting is read with no rest. The
server is a scripted httpx transport whose chunks come due at set times and which says,
as httpcore's `network_stream` does, whether one is waiting; the client and informer are
the real ones."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.kube.informer import Changed, Informer
from trio_ccm.kube.objects import NODES, Node

REST_S = 0.1


def _line(rv: int) -> bytes:
    meta = {"name": "n1", "resourceVersion": str(rv), "labels": {"step": str(rv)}}
    node = {"kind": "Node", "metadata": meta}
    return json.dumps({"type": "MODIFIED", "object": node}).encode() + b"\n"


class _Due(httpx.AsyncByteStream):
    """Chunks that come due at their times: a read takes the next one (a checkpoint first,
    as a socket read) or, when it is not due yet, waits for it (counted in `waits`: the
    reader woke for one chunk). Ends after the last."""

    def __init__(self, due: list[tuple[float, bytes]]) -> None:
        self.due = list(due)
        self.waits = 0
        self.late: list[float] = []  # per chunk: taken at - due at

    def __aiter__(self) -> _Due:
        return self

    async def __anext__(self) -> bytes:
        await trio.lowlevel.checkpoint()
        if not self.due:
            raise StopAsyncIteration
        at, chunk = self.due.pop(0)
        if trio.current_time() < at:
            self.waits += 1
            await trio.sleep_until(at)
        self.late.append(trio.current_time() - at)
        return chunk

    def readable(self) -> bool:
        return bool(self.due) and self.due[0][0] <= trio.current_time()


class _NetworkStream:
    """httpcore's `network_stream` extension, as far as the client asks it."""

    def __init__(self, body: _Due) -> None:
        self.body = body

    def get_extra_info(self, info: str) -> Any:
        return self.body.readable() if info == "is_readable" else None


class _Server(httpx.AsyncBaseTransport):
    """Lists one Node at version 1; answers the first watch with `body`, later ones with
    a stream that stays silent."""

    def __init__(self, body: _Due, *, says_waiting: bool) -> None:
        self.body, self.says_waiting = body, says_waiting
        self.watches = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await trio.lowlevel.checkpoint()
        if request.url.params.get("watch") in ("1", "true"):
            self.watches += 1
            body = self.body if self.watches == 1 else _Due([(1e9, b"")])
            extensions = {"network_stream": _NetworkStream(body)} if self.says_waiting else {}
            return httpx.Response(200, stream=body, extensions=extensions)
        node = json.loads(_line(1))["object"]
        body_json = {"kind": "NodeList", "metadata": {"resourceVersion": "1"}, "items": [node]}
        return httpx.Response(200, json=body_json)


def _client(transport: httpx.AsyncBaseTransport) -> KubeClient:
    config = ConnectionConfig(server="http://127.0.0.1:1", credentials=StaticCredentials())
    return KubeClient(config, transport=transport, qps=0)


def _trickle(count: int, every_s: float) -> list[tuple[float, bytes]]:
    return [((i + 1) * every_s, _line(i + 2)) for i in range(count)]


@pytest.mark.parametrize(
    ("rest_s", "says_waiting", "most_waits"),
    [
        pytest.param(REST_S, True, 12, id="resting"),
        pytest.param(0.0, True, 100, id="no-rest-asked"),
        pytest.param(REST_S, False, 100, id="transport-cannot-tell"),
    ],
)
async def test_a_trickle_is_read_in_gathered_batches_each_event_at_most_rest_s_late(
    autojump_clock: trio.testing.MockClock, rest_s: float, says_waiting: bool, most_waits: int
) -> None:
    """100 events 10 ms apart: a resting reader wakes for at most 12 of them (it rests
    0.1 s once caught up, then takes what came meanwhile at once), every event in order
    and at most `rest_s` late; without a rest, or when the transport cannot say what is
    waiting, it wakes for each."""
    body = _Due(_trickle(100, 0.01))
    client = _client(_Server(body, says_waiting=says_waiting))
    seen: list[str] = []
    try:
        watch = client.watch_batches_as(NODES, Node, resource_version="1", rest_s=rest_s)
        async with watch as batches:
            async for batch in batches:
                seen += [e.object.metadata.resource_version for e in batch]
    finally:
        await client.aclose()
    assert seen == [str(rv) for rv in range(2, 102)]
    assert body.waits <= most_waits
    if most_waits == 100:
        assert body.waits == 100
    assert max(body.late) <= rest_s + 1e-9


async def test_a_stream_with_more_waiting_is_read_without_a_rest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """2,000 events all waiting at once: the resting reader takes every one at time 0 (a
    rest comes only once it has caught up), waking for none."""
    body = _Due([(0.0, _line(i + 2)) for i in range(2000)])
    client = _client(_Server(body, says_waiting=True))
    count = 0
    try:
        watch = client.watch_batches_as(NODES, Node, resource_version="1", rest_s=REST_S)
        async with watch as batches:
            async for batch in batches:
                count += len(batch)
    finally:
        await client.aclose()
    assert count == 2000
    assert body.waits == 0
    assert max(body.late) == 0.0


async def test_the_informer_rests_its_watch_and_keeps_the_newest_node(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An informer with `watch_rest_s` reads a trickle of 100 changes with at most 12
    wake-ups, and its subscriber gets the newest Node at most `watch_rest_s` after it was
    sent (at 1.0 s)."""
    body = _Due(_trickle(100, 0.01))
    client = _client(_Server(body, says_waiting=True))
    informer = Informer(client, NODES, Node, watch_rest_s=REST_S)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(informer.serve)
            async with informer.subscription() as updates:
                with trio.fail_after(2.0):
                    async for _, update in updates:
                        assert isinstance(update, Changed)
                        if update.obj.metadata.resource_version == "101":
                            break
            nursery.cancel_scope.cancel()
    finally:
        await client.aclose()
    assert trio.current_time() <= 1.0 + REST_S + 1e-9
    node = informer.get("n1")
    assert node is not None
    assert node.metadata.labels == {"step": "101"}
    assert body.waits <= 12
