"""Body faults: garbage (an HTML page) and truncated JSON, on answers and inside watches,
through the Python API and the admin HTTP API, in-process and over real HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import httpx
import msgspec
import pytest
import trio

from trio_ccm_testbed.apiserver import ApiServer, serve_apiserver
from trio_ccm_testbed.apiserver.faults import BAD_GATEWAY_PAGE

NODES = "/api/v1/nodes"


def node(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


@asynccontextmanager
async def in_process(server: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as client:
        yield client


@asynccontextmanager
async def over_http(server: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with trio.open_nursery() as nursery:
        listening = await nursery.start(partial(serve_apiserver, server))
        async with httpx.AsyncClient(base_url=listening.url) as client:
            yield client
        nursery.cancel_scope.cancel()


DOORS = [pytest.param(in_process, id="in-process"), pytest.param(over_http, id="http")]


@pytest.mark.parametrize("door", DOORS)
async def test_garbage_answer_is_an_html_page(door) -> None:
    """A garbage rule answers the proxy page with status 200 and text/html, once."""
    server = ApiServer(seed=1)
    server.create(node("n1"))
    server.faults.inject_garbage(verb="list", resource="nodes", count=1)
    with trio.fail_after(10):
        async with door(server) as client:
            bad = await client.get(NODES)
            good = await client.get(NODES)
    assert bad.status_code == 200
    assert bad.headers["content-type"] == "text/html"
    assert bad.text == BAD_GATEWAY_PAGE
    with pytest.raises(json.JSONDecodeError):
        bad.json()
    assert [n["metadata"]["name"] for n in good.json()["items"]] == ["n1"]


@pytest.mark.parametrize("door", DOORS)
async def test_truncated_answer_keeps_status_and_type_but_ends_half_way(door) -> None:
    """A truncation rule sends the real answer's first half: JSON that does not decode."""
    server = ApiServer(seed=1)
    server.create(node("n1"))
    server.faults.inject_truncation(verb="get", resource="nodes", name="n1")
    with trio.fail_after(10):
        async with door(server) as client:
            response = await client.get(f"{NODES}/n1")
    full = msgspec.json.encode(server.get("v1", "Node", "n1"))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == full[: len(full) // 2]
    with pytest.raises(msgspec.DecodeError):
        msgspec.json.decode(response.content)


async def test_write_answers_can_be_garbled_too() -> None:
    """A garbled answer to a write still made the write (the client cannot tell it did)."""
    server = ApiServer(seed=1)
    server.faults.inject_garbage("oops", verb="create", resource="nodes", code=502)
    async with in_process(server) as client:
        with trio.fail_after(5):
            response = await client.post(NODES, json=node("n1"))
    assert (response.status_code, response.text) == (502, "oops")
    assert server.get("v1", "Node", "n1")["metadata"]["name"] == "n1"


async def watch_lines(client: httpx.AsyncClient) -> list[bytes]:
    """The lines a watch sent before it ended."""
    buffer = b""
    async with client.stream("GET", f"{NODES}?watch=true&timeoutSeconds=30") as response:
        async for chunk in response.aiter_bytes():
            buffer += chunk
    return buffer.split(b"\n")


@pytest.mark.parametrize("door", DOORS)
async def test_watch_garbage_comes_after_the_good_events_and_ends_the_stream(door) -> None:
    """After `after_events` whole events, a garbage watch sends the page and ends."""
    server = ApiServer(seed=1)
    for name in ("n1", "n2", "n3"):
        server.create(node(name))
    server.faults.inject_garbage(verb="watch", resource="nodes", after_events=2, count=1)
    with trio.fail_after(10):
        async with door(server) as client:
            lines = await watch_lines(client)
    events = [json.loads(line) for line in lines[:2]]
    assert [e["object"]["metadata"]["name"] for e in events] == ["n1", "n2"]
    assert b"\n".join(lines[2:]) == BAD_GATEWAY_PAGE.encode()


@pytest.mark.parametrize("door", DOORS)
async def test_watch_truncation_cuts_an_event_in_half(door) -> None:
    """A truncated watch sends whole events, then half of the next one, then ends."""
    server = ApiServer(seed=1)
    for name in ("n1", "n2"):
        server.create(node(name))
    server.faults.inject_truncation(verb="watch", resource="nodes", after_events=1)
    with trio.fail_after(10):
        async with door(server) as client:
            lines = await watch_lines(client)
    assert json.loads(lines[0])["object"]["metadata"]["name"] == "n1"
    assert len(lines) == 2
    assert lines[1]
    with pytest.raises(json.JSONDecodeError):
        json.loads(lines[1])
    assert server.store.watcher_count() == 0  # the cut watch released its watcher


async def test_body_faults_through_the_admin_api() -> None:
    """The admin API takes garbage and truncate rules and lists them back."""
    server = ApiServer(seed=1)
    async with in_process(server) as client:
        with trio.fail_after(5):
            added = await client.post(
                "/_emulator/faults",
                json={"action": "garbage", "resource": "nodes", "after_events": 3},
            )
            listed = (await client.get("/_emulator/faults")).json()["faults"]
            bad = await client.post(
                "/_emulator/faults", json={"action": "truncate", "after_events": -1}
            )
    assert added.status_code == 201
    assert listed[0]["action"] == "garbage"
    assert listed[0]["after_events"] == 3
    assert listed[0]["content_type"] == "text/html"
    assert bad.status_code == 400
    assert "after_events" in bad.json()["message"]
