"""Lists and new watches scan in steps (issue 28): writes that land between the steps never
change what the list or the replay holds, which is the state at its resourceVersion."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from tests.helpers.emulator import (
    NODES,
    create_node,
    delete_node,
    list_ok,
    names,
    patch_node,
    seed_nodes,
)
from trio_ccm_testbed.apiserver import ApiServer
from trio_ccm_testbed.apiserver.kinds import ResourceType
from trio_ccm_testbed.apiserver.selector import parse_field_selector, parse_label_selector
from trio_ccm_testbed.apiserver.store import ListResult, scan_step


def _node_type(server: ApiServer) -> ResourceType:
    rtype = server.types[("", "v1", "nodes")]
    assert isinstance(rtype, ResourceType)
    return server.registry.stored_type(rtype)


def _scan(server: ApiServer, labels: str = "", **options: Any) -> Any:
    return server.store.list_scan(
        _node_type(server),
        "",
        parse_label_selector(labels),
        parse_field_selector(""),
        options.get("limit", 0),
        options.get("continue_token", ""),
        options.get("resource_version", ""),
        options.get("rv_match", ""),
        stepped=True,
    )


def _finish(scan: Any) -> ListResult:
    while (result := scan_step(scan)) is None:
        pass
    return result


@pytest.mark.parametrize(
    ("labels", "limit"),
    [
        pytest.param("", 0, id="whole-list"),
        pytest.param("", 4, id="a-page"),
        pytest.param("v=1", 0, id="a-selector"),
        pytest.param("!absent", 3, id="a-selector-page"),
    ],
)
async def test_a_stepped_list_is_the_state_at_its_resource_version(
    server: ApiServer, client: httpx.AsyncClient, labels: str, limit: int
) -> None:
    """A list paused mid-scan while a Node is added, one changed and one deleted answers
    exactly what a one-step list at its resourceVersion answers."""
    server.store.scan_step = 2
    with trio.fail_after(10):
        await seed_nodes(client, 10, v="1")
        scan = _scan(server, labels, limit=limit)
        assert next(scan) is None  # paused after two keys
        await create_node(client, "n05a", {"v": "1"})
        await patch_node(client, "n7", {"metadata": {"labels": {"v": "2"}}})
        await delete_node(client, "n8")
        stepped = _finish(scan)
    assert stepped.rv < server.store.rv
    exact = server.store.list_objects(
        _node_type(server),
        "",
        labels=parse_label_selector(labels),
        fields=parse_field_selector(""),
        limit=limit,
        resource_version=str(stepped.rv),
        rv_match="Exact",
    )
    assert [s.raw for s in stepped.items] == [s.raw for s in exact.items]
    assert (stepped.remaining, bool(stepped.continue_token)) == (
        exact.remaining,
        bool(exact.continue_token),
    )
    listed = {s.obj["metadata"]["name"]: s.obj for s in stepped.items}
    assert "n05a" not in listed
    if not limit:  # the whole list: the deleted Node is there, the changed one unchanged
        assert listed["n7"]["metadata"]["labels"] == {"v": "1"}
        assert "n8" in listed


@pytest.mark.parametrize(
    ("params", "step"),
    [
        pytest.param({"limit": "3"}, 2, id="pages-of-3-steps-of-2"),
        pytest.param({"limit": "3", "labelSelector": "v=1"}, 2, id="selector-pages"),
        pytest.param({"limit": "500"}, 1, id="one-page-step-of-1"),
        pytest.param({}, 4, id="unpaged"),
    ],
)
async def test_stepped_lists_over_http_answer_as_one_step_did(
    server: ApiServer, client: httpx.AsyncClient, params: dict[str, str], step: int
) -> None:
    """Over HTTP, a list scanned in steps pages through every matching Node once, in key
    order, with the same remainingItemCount as a list scanned in one step."""
    with trio.fail_after(10):
        for i in range(11):
            await create_node(client, f"n{i:02d}", {"v": str(i % 2)})
        one_step = await _pages(client, params)
        server.store.scan_step = step
        stepped = await _pages(client, params)
    assert stepped == one_step
    assert names(stepped[0])  # not an empty answer


async def _pages(client: httpx.AsyncClient, params: dict[str, str]) -> list[dict[str, Any]]:
    pages, token = [], ""
    while True:
        page = await list_ok(client, NODES, **params, **({"continue": token} if token else {}))
        pages.append(page)
        token = page["metadata"].get("continue", "")
        if not token:
            return pages


async def test_a_new_watch_replays_its_registration_state_then_the_write(
    server: ApiServer, client: httpx.AsyncClient
) -> None:
    """A watch with no resourceVersion, whose replay is read in steps, replays each Node as
    it was when the watch began and then the write that landed during the replay, once."""
    server.store.scan_step = 2
    with trio.fail_after(10):
        seeded = {o["metadata"]["name"]: o for o in await seed_nodes(client, 8, v="1")}
        query = {"watch": "1", "timeoutSeconds": "3600"}
        async with client.stream("GET", NODES, params=query) as response:
            lines = response.aiter_lines()
            first = await anext(lines)
            await patch_node(client, "n6", {"metadata": {"labels": {"v": "2"}}})
            seen = [first]
            while len(seen) < 9:
                seen.append(await anext(lines))
    events = [httpx.Response(200, content=line).json() for line in seen]
    assert [e["type"] for e in events] == ["ADDED"] * 8 + ["MODIFIED"]
    assert [e["object"] for e in events[:8]] == [seeded[f"n{i}"] for i in range(8)]
    assert events[8]["object"]["metadata"]["labels"] == {"v": "2"}


async def test_the_key_order_made_at_a_list_follows_every_add_and_delete(
    server: ApiServer, client: httpx.AsyncClient
) -> None:
    """Once a list has made the key order, Nodes added before, between and after the others
    and Nodes deleted are listed in key order, each once, without the order being made
    again."""
    with trio.fail_after(10):
        await seed_nodes(client, 5)
        assert names(await list_ok(client, NODES)) == ["n0", "n1", "n2", "n3", "n4"]
        for name in ("n2a", "a0", "z9", "n00"):
            await create_node(client, name)
        await delete_node(client, "n3")
        await delete_node(client, "a0")
        listed = names(await list_ok(client, NODES))
    assert listed == ["n0", "n00", "n1", "n2", "n2a", "n4", "z9"]
    storage = server.store.storage(_node_type(server))
    assert storage.key_order is not None
    assert [key[1] for _, key in storage.key_order] == listed
