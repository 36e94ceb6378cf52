"""The kube client survives garbage from the API server: an HTML page from a proxy, a
truncated JSON body, a broken watch line. A read is retried with backoff; a write is
reported; a broken watch is re-established; nothing crashes the CCM.

The garbage comes from a transport between the client and the emulator (the HTTP seam),
so the client's real code paths see exactly what a broken proxy would send.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from trio_ccm.cloud.sim import SimProvider
from trio_ccm.kube import patches
from trio_ccm.kube.client import open_kube_client
from trio_ccm.kube.errors import KubeDecodeError
from trio_ccm.kube.informer import Informer
from trio_ccm.kube.objects import NODES, Node
from trio_ccm.testing import (
    ApiServer,
    SimCloud,
    make_node,
    register_node,
    run_ccm,
    virtual_now,
    wait_for,
)
from trio_ccm.testing.harness import emulator_connection

HTML = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
TRUNCATED = (
    b'{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"12"},"items":[{"meta'
)


class Garbling(httpx.AsyncBaseTransport):
    """The emulator's transport; requests `matches` selects are answered with `body` (a
    200 with the given content type) `times` times."""

    def __init__(self, api: ApiServer) -> None:
        self.inner = api.transport()
        self.rules: list[tuple[Callable[[httpx.Request], bool], bytes, str, int]] = []
        self.garbled = 0

    def garble(
        self,
        matches: Callable[[httpx.Request], bool],
        body: bytes,
        *,
        content_type: str = "text/html",
        times: int = 1,
    ) -> None:
        self.rules.append((matches, body, content_type, times))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        for i, (matches, body, content_type, times) in enumerate(self.rules):
            if times and matches(request):
                self.rules[i] = (matches, body, content_type, times - 1)
                self.garbled += 1
                if request.method != "GET":  # the server did apply the write
                    await self.inner.handle_async_request(request)
                return httpx.Response(
                    200, headers={"content-type": content_type}, content=body, request=request
                )
        response: httpx.Response = await self.inner.handle_async_request(request)
        return response


def lists(request: httpx.Request) -> bool:
    return request.method == "GET" and "watch" not in request.url.params


async def test_a_read_answered_with_html_is_retried(autojump_clock: trio.testing.MockClock) -> None:
    """A list answered once with a proxy's HTML page is retried after a backoff and
    succeeds; the retry is counted."""
    api = ApiServer(seed=1)
    api.create(make_node("n1"))
    garbling = Garbling(api)
    garbling.garble(lists, HTML)
    with trio.fail_after(30):
        async with open_kube_client(emulator_connection(), transport=garbling, qps=0) as kube:
            found = await kube.list(NODES, type=Node)
    assert [n.metadata.name for n in found.items] == ["n1"]
    assert garbling.garbled == 1
    assert trio.current_time() == 0.2  # the first backoff


@pytest.mark.parametrize(
    ("body", "content_type", "fragment"),
    [
        pytest.param(HTML, "text/html", "content-type text/html", id="html"),
        pytest.param(
            TRUNCATED, "application/json", "content-type application/json", id="truncated"
        ),
    ],
)
async def test_a_read_that_stays_garbage_names_the_request_and_the_body(
    autojump_clock: trio.testing.MockClock, body: bytes, content_type: str, fragment: str
) -> None:
    """After the retries, the error names the method, the URL path, the status, the content
    type, and quotes the first bytes of the body."""
    api = ApiServer(seed=1)
    garbling = Garbling(api)
    garbling.garble(lists, body, content_type=content_type, times=100)
    with trio.fail_after(120):
        async with open_kube_client(emulator_connection(), transport=garbling, qps=0) as kube:
            with pytest.raises(KubeDecodeError) as caught:
                await kube.list(NODES, type=Node)
    text = str(caught.value)
    assert text.startswith("GET /api/v1/nodes: the API server answered 200 (")
    assert fragment in text
    assert repr(body[:80]) in text
    assert garbling.garbled == 6  # the first try and five retries


async def test_a_write_answered_with_garbage_is_reported_not_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A patch whose answer does not decode raises KubeDecodeError at once: it may have been
    applied (here it was), so it is not sent again."""
    api = ApiServer(seed=1)
    api.create(make_node("n1"))
    garbling = Garbling(api)
    garbling.garble(lambda r: r.method == "PATCH", TRUNCATED, content_type="application/json")
    with trio.fail_after(30):
        async with open_kube_client(emulator_connection(), transport=garbling, qps=0) as kube:
            with pytest.raises(KubeDecodeError, match=r"^PATCH /api/v1/nodes/n1: "):
                await kube.patch(NODES, "n1", patches.set_labels({"a": "b"}))
    assert api.get("v1", "Node", "n1")["metadata"]["labels"]["a"] == "b"
    assert garbling.garbled == 1


class BrokenWatch(httpx.AsyncBaseTransport):
    """The emulator's transport; the first watch gets one garbage line after its events."""

    def __init__(self, api: ApiServer, line: bytes) -> None:
        self.inner = api.transport()
        self.line = line
        self.watches = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response: httpx.Response = await self.inner.handle_async_request(request)
        if request.url.params.get("watch") != "1":
            return response
        self.watches += 1
        if self.watches > 1:
            return response
        line = self.line

        async def chunks() -> AsyncIterator[bytes]:
            yield line + b"\n"
            async for chunk in response.aiter_raw():
                yield chunk

        return httpx.Response(
            200, headers=response.headers, stream=_Stream(chunks(), response), request=request
        )


class _Stream(httpx.AsyncByteStream):
    def __init__(self, chunks: AsyncIterator[bytes], response: httpx.Response) -> None:
        self.chunks = chunks
        self.response = response

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        return await anext(self.chunks)

    async def aclose(self) -> None:
        aclose: Any = getattr(self.chunks, "aclose", None)
        if aclose is not None:
            await aclose()
        await self.response.aclose()


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(HTML, id="html-line"),
        pytest.param(b'{"type":"MODIFIED","object":{"metadata":', id="truncated-event"),
        pytest.param(b'{"type":"MODIFIED","object":{"metadata":"not an object"}}', id="bad-object"),
    ],
)
async def test_a_watch_that_yields_garbage_is_reestablished(
    autojump_clock: trio.testing.MockClock, line: bytes
) -> None:
    """A garbage line in a watch stream ends that watch; the informer watches again from
    its last version and keeps the cache current."""
    api = ApiServer(seed=1)
    api.create(make_node("n1"))
    transport = BrokenWatch(api, line)
    with trio.fail_after(60):
        async with open_kube_client(emulator_connection(), transport=transport, qps=0) as kube:
            informer = Informer(kube, NODES, Node, rng=random.Random(1))
            async with trio.open_nursery() as nursery:
                await nursery.start(informer.serve)
                await trio.testing.wait_all_tasks_blocked()
                await kube.patch(NODES, "n1", patches.set_labels({"after": "garbage"}))
                await trio.sleep(5)
                cached = informer.get("n1")
                nursery.cancel_scope.cancel()
    assert transport.watches >= 2
    assert informer.relists == 1
    assert informer.errors == 1
    assert cached is not None
    assert cached.metadata.labels.get("after") == "garbage"


async def test_the_ccm_rides_out_garbage_answers(autojump_clock: trio.testing.MockClock) -> None:
    """With lists, watches and writes answered with garbage now and then, the CCM keeps
    running (no exit on a DecodeError) and initialises every Node."""
    api = ApiServer(seed=1, now=virtual_now())
    cloud = SimCloud(seed=1)
    for i in range(5):
        cloud.add_instance(f"node-{i}")
        register_node(api, f"node-{i}")
    garbling = Garbling(api)
    garbling.garble(lists, HTML, times=3)
    garbling.garble(lambda r: r.method == "PATCH", TRUNCATED, content_type="application/json")
    garbling.garble(lambda r: "watch" in r.url.params, TRUNCATED, content_type="application/json")
    provider = SimProvider(url="http://sim", replica="ccm", transport=cloud.transport())
    with trio.fail_after(120):
        async with run_ccm(api, provider, "--controllers=cloud-node", transport=garbling):
            await wait_for(lambda: not any(tainted(api, f"node-{i}") for i in range(5)))
    await provider.aclose()
    assert garbling.garbled == 5


def tainted(api: ApiServer, name: str) -> bool:
    taints = api.get("v1", "Node", name)["spec"].get("taints", [])
    return any(t["key"] == "node.cloudprovider.kubernetes.io/uninitialized" for t in taints)
