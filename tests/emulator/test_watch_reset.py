"""drop_watches(abort=True): open watches end as a reset connection, on both front doors."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

import httpx
import pytest
import trio
import trio.testing

from trio_ccm_testbed.apiserver import ApiServer, serve_apiserver


async def _abort_directly(server: ApiServer) -> None:
    server.store.drop_watches(abort=True)


async def _watch_until_broken(
    client: httpx.AsyncClient,
    server: ApiServer,
    abort: Callable[[ApiServer], Awaitable[None]] = _abort_directly,
) -> list[str]:
    lines: list[str] = []
    watching = server.store.watch_started
    async with client.stream(
        "GET", "/api/v1/nodes", params={"watch": "1", "timeoutSeconds": "30"}
    ) as response:
        await watching.wait()
        await abort(server)
        async for line in response.aiter_lines():
            lines.append(line)
    return lines


async def test_in_process_watch_is_reset(autojump_clock: trio.testing.MockClock) -> None:
    """In-process, an aborted watch raises httpx.ReadError instead of ending cleanly."""
    server = ApiServer(seed=1)
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as client:
        with trio.fail_after(10), pytest.raises(httpx.ReadError, match="connection reset"):
            await _watch_until_broken(client, server)
    assert server.store.watcher_count() == 0


async def test_http_watch_is_reset(nursery: trio.Nursery) -> None:
    """Over HTTP, an aborted watch breaks the connection mid-body (no clean chunked end)."""
    server = ApiServer(seed=1)
    listening = await nursery.start(functools.partial(serve_apiserver, server))
    async with httpx.AsyncClient(base_url=listening.url) as client:
        with trio.fail_after(10), pytest.raises(httpx.TransportError):
            await _watch_until_broken(client, server)


async def test_admin_api_aborts_watches(autojump_clock: trio.testing.MockClock) -> None:
    """POST /_emulator/drop-watches {"abort": true} does the same over the admin API."""
    server = ApiServer(seed=1)
    answers: list[object] = []

    async def abort_over_http(server: ApiServer) -> None:
        async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as admin:
            answer = await admin.post("/_emulator/drop-watches", json={"abort": True})
            answers.append(answer.json())

    async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as client:
        with trio.fail_after(10), pytest.raises(httpx.ReadError):
            await _watch_until_broken(client, server, abort_over_http)
    assert answers == [{"dropped": 1}]
