"""List and watch semantics of the emulator, checked against what kube-apiserver does.

Everything runs on the in-process transport under `trio.testing.MockClock`
(`autojump_clock`), so watch timing is asserted in exact virtual seconds.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from tests.helpers.emulator import (
    NODES,
    create,
    create_node,
    delete_node,
    list_json,
    list_ok,
    names,
    node_body,
    patch_node,
    seed_nodes,
)
from trio_ccm_testbed.apiserver import ApiServer

CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


# -- helpers ---------------------------------------------------------------------------------
@asynccontextmanager
async def open_client(server: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    """A client for a server built with non-default options."""
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://emulator") as c:
        yield c


async def create_namespace(client: httpx.AsyncClient, name: str) -> None:
    await create(
        client,
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )


async def create_configmap(
    client: httpx.AsyncClient, namespace: str, name: str, data: dict[str, str] | None = None
) -> dict[str, Any]:
    return await create(
        client,
        f"/api/v1/namespaces/{namespace}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name},
            "data": data or {},
        },
    )


def rv_of(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def at_rv(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    """`obj` with its resourceVersion replaced, as a DELETED event carries it."""
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}


def status_of(body: dict[str, Any], code: int, reason: str) -> str:
    assert body["kind"] == "Status", body
    assert body["status"] == "Failure", body
    assert body["code"] == code, body
    assert body["reason"] == reason, body
    message: str = body["message"]
    return message


@dataclass
class Seen:
    """One watch event and the virtual time it reached the client."""

    at: float
    type: str
    object: dict[str, Any]


@dataclass
class Watch:
    """A watch stream read by a background task; events are recorded as they arrive."""

    status: int = 0
    seen: list[Seen] = field(default_factory=list)
    ended_at: float | None = None

    def __post_init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[Seen](math.inf)

    async def run(
        self,
        client: httpx.AsyncClient,
        path: str,
        params: dict[str, str],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        async with client.stream("GET", path, params=params) as response:
            self.status = response.status_code
            task_status.started()
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                seen = Seen(trio.current_time(), event["type"], event["object"])
                self.seen.append(seen)
                self._send.send_nowait(seen)
        self.ended_at = trio.current_time()
        self._send.close()

    async def next(self) -> Seen:
        """The next event (fails the test if the stream ends first)."""
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            pytest.fail(f"the watch ended at t={self.ended_at} before the expected event")

    async def take(self, count: int) -> list[Seen]:
        return [await self.next() for _ in range(count)]

    async def rest(self) -> list[Seen]:
        """Every event until the stream ends."""
        return [seen async for seen in self._receive]


@asynccontextmanager
async def watching(client: httpx.AsyncClient, path: str, **params: str) -> AsyncIterator[Watch]:
    """Open a watch (registered on the server on entry) read by a background task."""
    query = {"watch": "1", "timeoutSeconds": "3600", **params}
    watch = Watch()
    async with trio.open_nursery() as nursery:
        await nursery.start(watch.run, client, path, query)
        yield watch
        nursery.cancel_scope.cancel()


# -- list: shape and resourceVersion ---------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "kind", "api_version"),
    [
        pytest.param(NODES, "NodeList", "v1", id="nodes"),
        pytest.param("/api/v1/services", "ServiceList", "v1", id="services-all-namespaces"),
        pytest.param(
            "/api/v1/namespaces/default/services", "ServiceList", "v1", id="services-namespaced"
        ),
        pytest.param("/api/v1/configmaps", "ConfigMapList", "v1", id="configmaps"),
        pytest.param(
            "/apis/events.k8s.io/v1/events", "EventList", "events.k8s.io/v1", id="events-v1"
        ),
    ],
)
async def test_list_kind_api_version_and_resource_version(
    server: ApiServer, client: httpx.AsyncClient, path: str, kind: str, api_version: str
) -> None:
    """A list names its List kind and apiVersion and carries the current global resourceVersion."""
    with trio.fail_after(10):
        await create_node(client, "n1")
        body = await list_ok(client, path)
        assert body["kind"] == kind
        assert body["apiVersion"] == api_version
        assert body["metadata"] == {"resourceVersion": str(server.store.rv)}
        assert isinstance(body["items"], list)


@pytest.mark.parametrize("rv", [pytest.param(None, id="unset"), pytest.param("0", id="zero")])
async def test_list_resource_version_zero_and_unset_answer(
    server: ApiServer, client: httpx.AsyncClient, rv: str | None
) -> None:
    """A list without resourceVersion or with resourceVersion=0 answers with every object."""
    with trio.fail_after(10):
        await seed_nodes(client, 3)
        params = {} if rv is None else {"resourceVersion": rv}
        body = await list_ok(client, NODES, **params)
        assert names(body) == ["n0", "n1", "n2"]
        assert body["metadata"]["resourceVersion"] == str(server.store.rv)


# -- list: label selectors -------------------------------------------------------------------
LABELLED_NODES = {
    "a": {"env": "prod", "tier": "web"},
    "b": {"env": "dev", "tier": "db"},
    "c": {"env": "staging"},
    "d": {},
}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param("", ["a", "b", "c", "d"], id="empty"),
        pytest.param("env=prod", ["a"], id="equals"),
        pytest.param("env==prod", ["a"], id="double-equals"),
        pytest.param("env!=prod", ["b", "c", "d"], id="not-equals-includes-missing-key"),
        pytest.param("env in (prod,dev)", ["a", "b"], id="in"),
        pytest.param("env notin (prod,dev)", ["c", "d"], id="notin-includes-missing-key"),
        pytest.param("tier", ["a", "b"], id="exists"),
        pytest.param("!tier", ["c", "d"], id="does-not-exist"),
        pytest.param("env in (prod,staging),!tier", ["c"], id="in-and-does-not-exist"),
        pytest.param("env!=dev,tier", ["a"], id="not-equals-and-exists"),
        pytest.param("env=prod,tier=db", [], id="contradictory"),
        pytest.param(" env = prod , tier ", ["a"], id="blanks-between-tokens"),
    ],
)
async def test_label_selector_operators(
    client: httpx.AsyncClient, selector: str, expected: list[str]
) -> None:
    """Every label selector operator filters a list as upstream's selector does."""
    with trio.fail_after(10):
        for name, labels in LABELLED_NODES.items():
            await create_node(client, name, labels)
        body = await list_ok(client, NODES, labelSelector=selector)
        assert names(body) == expected


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        pytest.param(
            "env in prod",
            "unable to parse requirement: found 'prod' expected: '('",
            id="in-no-paren",
        ),
        pytest.param(
            "env in (prod",
            "unable to parse requirement: found '', expected: ',' or ')'",
            id="unclosed-set",
        ),
        pytest.param(
            "env prod",
            "unable to parse requirement: found 'prod', expected: in, notin, =, ==, !=, gt, lt",
            id="missing-operator",
        ),
        pytest.param("env=prod,", "found '', expected: identifier after ','", id="trailing-comma"),
        pytest.param(
            "=prod", "found '=', expected: !, identifier, or 'end of string'", id="no-key"
        ),
    ],
)
async def test_malformed_label_selector_is_bad_request(
    client: httpx.AsyncClient, selector: str, message: str
) -> None:
    """A malformed label selector answers 400 BadRequest with the parser's message."""
    with trio.fail_after(10):
        code, body = await list_json(client, NODES, labelSelector=selector)
        assert code == 400
        assert status_of(body, 400, "BadRequest") == message


# -- list: field selectors -------------------------------------------------------------------
async def seed_field_objects(client: httpx.AsyncClient) -> None:
    await create_node(client, "a", unschedulable=True)
    await create_node(client, "b")
    await create_node(client, "c")
    for namespace in ("team", "team-b"):
        await create_namespace(client, namespace)
    for namespace, name in (("team", "s1"), ("team-b", "s2")):
        await create(
            client,
            f"/api/v1/namespaces/{namespace}/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name},
                "spec": {"ports": [{"port": 80}]},
            },
        )
    for name, kind, involved in (("e1", "Node", "n1"), ("e2", "Pod", "p1"), ("e3", "Node", "n2")):
        await create(
            client,
            "/api/v1/namespaces/default/events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name},
                "involvedObject": {"kind": kind, "name": involved},
                "reason": "Test",
                "message": f"about {involved}",
                "type": "Normal",
            },
        )


@pytest.mark.parametrize(
    ("path", "selector", "expected"),
    [
        pytest.param(NODES, "metadata.name=b", ["b"], id="nodes-name"),
        pytest.param(NODES, "metadata.name==b", ["b"], id="nodes-name-double-equals"),
        pytest.param(NODES, "metadata.name!=b", ["a", "c"], id="nodes-name-not"),
        pytest.param(NODES, "spec.unschedulable=true", ["a"], id="nodes-unschedulable"),
        pytest.param(NODES, "spec.unschedulable=false", ["b", "c"], id="nodes-schedulable"),
        pytest.param(NODES, "spec.unschedulable!=true", ["b", "c"], id="nodes-unschedulable-not"),
        pytest.param(
            NODES, "metadata.name!=b,spec.unschedulable=false", ["c"], id="nodes-combined"
        ),
        pytest.param(
            "/api/v1/services", "metadata.namespace=team", ["s1"], id="services-namespace"
        ),
        pytest.param(
            "/api/v1/services",
            "metadata.namespace!=default",
            ["s2", "s1"],  # etcd key order: "team-b/s2" < "team/s1"
            id="services-namespace-not",
        ),
        pytest.param(
            "/api/v1/services", "metadata.name=kubernetes", ["kubernetes"], id="services-name"
        ),
        pytest.param(
            "/api/v1/namespaces/default/events",
            "involvedObject.name=n1",
            ["e1"],
            id="events-involved-name",
        ),
        pytest.param(
            "/api/v1/events", "involvedObject.kind=Node", ["e1", "e3"], id="events-involved-kind"
        ),
        pytest.param(
            "/api/v1/events", "involvedObject.kind!=Node", ["e2"], id="events-involved-kind-not"
        ),
        pytest.param(
            "/api/v1/events",
            "involvedObject.kind=Node,involvedObject.name=n2",
            ["e3"],
            id="events-combined",
        ),
    ],
)
async def test_field_selectors(
    client: httpx.AsyncClient, path: str, selector: str, expected: list[str]
) -> None:
    """Field selectors filter lists on the fields each kind supports, with = and !=."""
    with trio.fail_after(10):
        await seed_field_objects(client)
        body = await list_ok(client, path, fieldSelector=selector)
        assert names(body) == expected


UNKNOWN_FIELD = (
    '"spec.foo" is not a known field selector: only "metadata.name", "metadata.namespace"'
)


@pytest.mark.parametrize(
    ("path", "selector", "message"),
    [
        pytest.param(NODES, "spec.foo=x", "field label not supported: spec.foo", id="nodes"),
        pytest.param(
            NODES,
            "metadata.namespace=x",
            "field label not supported: metadata.namespace",
            id="nodes-namespace",
        ),
        pytest.param(
            "/api/v1/pods", "spec.foo=x", "field label not supported: spec.foo", id="pods"
        ),
        pytest.param(
            "/api/v1/events", "spec.foo!=x", "field label not supported: spec.foo", id="events"
        ),
        pytest.param("/api/v1/services", "spec.foo=x", UNKNOWN_FIELD, id="services"),
        pytest.param(
            "/api/v1/namespaces/default/configmaps", "spec.foo=x", UNKNOWN_FIELD, id="configmaps"
        ),
    ],
)
async def test_unsupported_field_selector_is_bad_request(
    client: httpx.AsyncClient, path: str, selector: str, message: str
) -> None:
    """A field the kind cannot select on answers 400 with that kind's upstream message."""
    with trio.fail_after(10):
        code, body = await list_json(client, path, fieldSelector=selector)
        assert code == 400
        assert status_of(body, 400, "BadRequest") == message


async def test_malformed_field_selector_is_bad_request(client: httpx.AsyncClient) -> None:
    """A field selector term without an operator answers 400 with upstream's parser message."""
    with trio.fail_after(10):
        code, body = await list_json(client, NODES, fieldSelector="metadata.name")
        assert code == 400
        assert status_of(body, 400, "BadRequest") == (
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
        )


# -- list: namespaces and key order ----------------------------------------------------------
async def seed_configmaps(client: httpx.AsyncClient) -> None:
    for namespace in ("team", "team-a"):
        await create_namespace(client, namespace)
    for namespace, name in (("team", "x"), ("team-a", "y"), ("team", "z")):
        await create_configmap(client, namespace, name)


@pytest.mark.parametrize(
    ("namespace", "expected"),
    [
        pytest.param("team", [("team", "x"), ("team", "z")], id="team"),
        pytest.param("team-a", [("team-a", "y")], id="team-a"),
        pytest.param("default", [], id="empty-namespace"),
    ],
)
async def test_namespaced_list_only_returns_that_namespace(
    client: httpx.AsyncClient, namespace: str, expected: list[tuple[str, str]]
) -> None:
    """A namespaced list returns only that namespace's objects, even when its name is a prefix."""
    with trio.fail_after(10):
        await seed_configmaps(client)
        body = await list_ok(client, f"/api/v1/namespaces/{namespace}/configmaps")
        found = [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in body["items"]]
        assert found == expected


async def test_all_namespaces_list_is_in_storage_key_order(client: httpx.AsyncClient) -> None:
    """An all-namespaces list comes in etcd key order ("<namespace>/<name>" byte order)."""
    with trio.fail_after(10):
        await seed_configmaps(client)
        body = await list_ok(client, "/api/v1/configmaps")
        found = [f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in body["items"]]
        # "team-a/y" sorts before "team/x" because '-' (0x2d) < '/' (0x2f).
        assert found == ["team-a/y", "team/x", "team/z"]


@pytest.mark.parametrize("limit", [pytest.param(1, id="limit-1"), pytest.param(2, id="limit-2")])
async def test_pagination_across_namespaces_returns_each_item_once(
    client: httpx.AsyncClient, limit: int
) -> None:
    """Paging an all-namespaces list yields every object exactly once, in key order."""
    with trio.fail_after(10):
        await seed_configmaps(client)
        found: list[str] = []
        token = ""
        for _ in range(10):
            params = {"limit": str(limit)}
            if token:
                params["continue"] = token
            body = await list_ok(client, "/api/v1/configmaps", **params)
            found += [
                f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in body["items"]
            ]
            token = body["metadata"].get("continue", "")
            if not token:
                break
        assert found == ["team-a/y", "team/x", "team/z"]


# -- list: pagination ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "limit",
    [
        pytest.param(1, id="limit-1"),
        pytest.param(2, id="limit-2"),
        pytest.param(3, id="limit-3"),
        pytest.param(7, id="limit-equals-total"),
        pytest.param(50, id="limit-above-total"),
    ],
)
async def test_pagination_pages_in_key_order(
    server: ApiServer, client: httpx.AsyncClient, limit: int
) -> None:
    """limit/continue pages come in key order with continue and remainingItemCount but the last."""
    with trio.fail_after(10):
        await seed_nodes(client, 7)
        everything = [f"n{i}" for i in range(7)]
        expected_pages = [everything[i : i + limit] for i in range(0, 7, limit)]
        first_rv = str(server.store.rv)
        token = ""
        pages: list[list[str]] = []
        for index, expected in enumerate(expected_pages):
            params = {"limit": str(limit)}
            if token:
                params["continue"] = token
            body = await list_ok(client, NODES, **params)
            pages.append(names(body))
            meta = body["metadata"]
            assert meta["resourceVersion"] == first_rv
            consumed = sum(len(p) for p in expected_pages[: index + 1])
            if index == len(expected_pages) - 1:
                assert "continue" not in meta
                assert "remainingItemCount" not in meta
            else:
                assert meta["remainingItemCount"] == 7 - consumed
                token = meta["continue"]
                assert token
            assert pages[-1] == expected
        assert [n for page in pages for n in page] == everything


async def test_paginated_list_is_a_consistent_snapshot(
    server: ApiServer, client: httpx.AsyncClient
) -> None:
    """Writes made between pages do not show up: every page is read at the first page's RV."""
    with trio.fail_after(10):
        originals = {o["metadata"]["name"]: o for o in await seed_nodes(client, 6, v="1")}
        first = await list_ok(client, NODES, limit="2")
        snapshot_rv = first["metadata"]["resourceVersion"]
        assert names(first) == ["n0", "n1"]
        await create_node(client, "n2a", {"v": "1"})
        await patch_node(client, "n3", {"metadata": {"labels": {"v": "2"}}})
        await delete_node(client, "n4")
        await patch_node(client, "n1", {"metadata": {"labels": {"v": "2"}}})

        second = await list_ok(
            client, NODES, limit="2", **{"continue": first["metadata"]["continue"]}
        )
        third = await list_ok(
            client, NODES, limit="2", **{"continue": second["metadata"]["continue"]}
        )
        assert names(second) == ["n2", "n3"]
        assert names(third) == ["n4", "n5"]
        for page in (second, third):
            assert page["metadata"]["resourceVersion"] == snapshot_rv
            for item in page["items"]:
                assert item == originals[item["metadata"]["name"]]
        assert "continue" not in third["metadata"]

        fresh = await list_ok(client, NODES)
        assert names(fresh) == ["n0", "n1", "n2", "n2a", "n3", "n5"]
        assert fresh["metadata"]["resourceVersion"] == str(server.store.rv)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        pytest.param({"labelSelector": "v=1"}, ["n0", "n2"], id="label-selector"),
        pytest.param({"fieldSelector": "metadata.name!=n1"}, ["n0", "n2"], id="field-selector"),
    ],
)
async def test_remaining_item_count_is_omitted_with_selectors(
    client: httpx.AsyncClient, params: dict[str, str], expected: list[str]
) -> None:
    """With a label or field selector the remaining count is unknown, so it is left unset."""
    with trio.fail_after(10):
        for i, value in enumerate(["1", "2", "1", "1", "2"]):
            await create_node(client, f"n{i}", {"v": value})
        body = await list_ok(client, NODES, limit="2", **params)
        assert names(body) == expected
        assert body["metadata"]["continue"]
        assert "remainingItemCount" not in body["metadata"]


async def test_continue_after_compaction_is_expired(
    server: ApiServer, client: httpx.AsyncClient
) -> None:
    """The next page after its resourceVersion was compacted answers 410 with upstream's text."""
    with trio.fail_after(10):
        await seed_nodes(client, 4)
        first = await list_ok(client, NODES, limit="2")
        await create_node(client, "n9")
        server.store.compact()
        code, body = await list_json(
            client, NODES, limit="2", **{"continue": first["metadata"]["continue"]}
        )
        assert code == 410
        assert status_of(body, 410, "Expired") == CONTINUE_TOO_OLD


async def test_expired_continue_offers_an_inconsistent_continue_token(
    server: ApiServer, client: httpx.AsyncClient
) -> None:
    """The 410 for a compacted continue carries a token that resumes at the latest state."""
    with trio.fail_after(10):
        await seed_nodes(client, 5)
        first = await list_ok(client, NODES, limit="2")
        assert names(first) == ["n0", "n1"]
        await create_node(client, "n1a")
        await delete_node(client, "n3")
        server.store.compact()
        code, body = await list_json(
            client, NODES, limit="2", **{"continue": first["metadata"]["continue"]}
        )
        assert code == 410
        token = body["metadata"].get("continue")
        assert token, "upstream puts a continue token for the latest state in the 410 Status"
        rest = await list_ok(client, NODES, **{"continue": token})
        assert names(rest) == ["n1a", "n2", "n4"]
        assert rest["metadata"]["resourceVersion"] == str(server.store.rv)


def _token(payload: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("garbage!", id="not-base64"),
        pytest.param(base64.urlsafe_b64encode(b"not json").decode(), id="not-json"),
        pytest.param(_token({"v": "v9", "rv": 5, "start": "n1"}), id="unknown-version"),
        pytest.param(_token({"v": "meta.k8s.io/v1", "rv": 0, "start": "n1"}), id="zero-rv"),
    ],
)
async def test_garbage_continue_token_is_bad_request(client: httpx.AsyncClient, token: str) -> None:
    """A continue token the server cannot decode answers 400 "invalid continue token"."""
    with trio.fail_after(10):
        code, body = await list_json(client, NODES, limit="2", **{"continue": token})
        assert code == 400
        message = status_of(body, 400, "BadRequest")
        assert message.startswith("invalid continue token: continue key is not valid"), message


@pytest.mark.parametrize(
    ("rv", "code"),
    [
        pytest.param("current", 400, id="explicit-rv-rejected"),
        pytest.param("1", 400, id="old-rv-rejected"),
        pytest.param("0", 200, id="rv-zero-allowed"),
    ],
)
async def test_continue_with_resource_version(
    server: ApiServer, client: httpx.AsyncClient, rv: str, code: int
) -> None:
    """A continue token may not be combined with a resourceVersion other than 0."""
    with trio.fail_after(10):
        await seed_nodes(client, 3)
        first = await list_ok(client, NODES, limit="1")
        resource_version = str(server.store.rv) if rv == "current" else rv
        got, body = await list_json(
            client,
            NODES,
            limit="1",
            resourceVersion=resource_version,
            **{"continue": first["metadata"]["continue"]},
        )
        assert got == code
        if code == 400:
            assert status_of(body, 400, "BadRequest") == (
                "specifying resource version is not allowed when using continue"
            )
        else:
            assert names(body) == ["n1"]


# -- list: resourceVersion semantics ---------------------------------------------------------
@pytest.mark.parametrize(
    "match",
    [pytest.param("", id="no-match"), pytest.param("NotOlderThan", id="not-older-than")],
)
async def test_list_too_large_resource_version(
    server: ApiServer, client: httpx.AsyncClient, match: str
) -> None:
    """A resourceVersion newer than the server's answers 504 "Too large resource version"."""
    with trio.fail_after(10):
        current = server.store.rv
        params = {"resourceVersion": str(current + 10)}
        if match:
            params["resourceVersionMatch"] = match
        code, body = await list_json(client, NODES, **params)
        assert code == 504
        assert status_of(body, 504, "Timeout") == (
            f"Too large resource version: {current + 10}, current: {current}"
        )
        assert body["details"]["causes"] == [
            {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
        ]
        assert body["details"]["retryAfterSeconds"] == 1


async def test_exact_list_returns_the_old_state(
    server: ApiServer, client: httpx.AsyncClient
) -> None:
    """An Exact list shows objects as they were: old content, deleted ones present, newer absent."""
    with trio.fail_after(10):
        old = {o["metadata"]["name"]: o for o in await seed_nodes(client, 3, v="1")}
        then = server.store.rv
        await patch_node(client, "n0", {"metadata": {"labels": {"v": "2"}}})
        await delete_node(client, "n1")
        await create_node(client, "n3", {"v": "1"})
        body = await list_ok(client, NODES, resourceVersion=str(then), resourceVersionMatch="Exact")
        assert body["metadata"]["resourceVersion"] == str(then)
        assert body["items"] == [old["n0"], old["n1"], old["n2"]]
        selected = await list_ok(
            client,
            NODES,
            resourceVersion=str(then),
            resourceVersionMatch="Exact",
            labelSelector="v=1",
        )
        assert names(selected) == ["n0", "n1", "n2"]


async def test_not_older_than_returns_current_state(
    server: ApiServer, client: httpx.AsyncClient
) -> None:
    """resourceVersionMatch=NotOlderThan with an old resourceVersion answers the current state."""
    with trio.fail_after(10):
        await seed_nodes(client, 2)
        then = server.store.rv
        await delete_node(client, "n0")
        await create_node(client, "n5")
        body = await list_ok(
            client, NODES, resourceVersion=str(then), resourceVersionMatch="NotOlderThan"
        )
        assert names(body) == ["n1", "n5"]
        assert body["metadata"]["resourceVersion"] == str(server.store.rv)


async def test_exact_list_at_compacted_resource_version_is_expired(
    server: ApiServer, client: httpx.AsyncClient
) -> None:
    """An Exact list at a compacted resourceVersion answers 410 with etcd3's "too old" text."""
    with trio.fail_after(10):
        await seed_nodes(client, 1)
        then = server.store.rv
        await create_node(client, "n9")
        server.store.compact()
        code, body = await list_json(
            client, NODES, resourceVersion=str(then), resourceVersionMatch="Exact"
        )
        assert code == 410
        assert status_of(body, 410, "Expired") == (
            "The resourceVersion for the provided list is too old."
        )


@pytest.mark.parametrize(
    ("params", "reason", "detail"),
    [
        pytest.param(
            {"resourceVersion": "0", "resourceVersionMatch": "Exact"},
            "FieldValueForbidden",
            'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
            id="exact-at-zero",
        ),
        pytest.param(
            {"resourceVersionMatch": "Exact"},
            "FieldValueForbidden",
            "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            id="exact-without-rv",
        ),
        pytest.param(
            {"resourceVersionMatch": "NotOlderThan"},
            "FieldValueForbidden",
            "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            id="not-older-than-without-rv",
        ),
        pytest.param(
            {"resourceVersion": "1", "resourceVersionMatch": "Bogus"},
            "FieldValueNotSupported",
            'Unsupported value: "Bogus": supported values: "Exact", "NotOlderThan", ""',
            id="unknown-match",
        ),
    ],
)
async def test_list_options_are_validated(
    client: httpx.AsyncClient, params: dict[str, str], reason: str, detail: str
) -> None:
    """Invalid resourceVersionMatch combinations answer 422 Invalid for ListOptions."""
    with trio.fail_after(10):
        code, body = await list_json(client, NODES, **params)
        assert code == 422
        message = status_of(body, 422, "Invalid")
        assert message == f'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: {detail}'
        assert body["details"] == {
            "group": "meta.k8s.io",
            "kind": "ListOptions",
            "causes": [{"reason": reason, "message": detail, "field": "resourceVersionMatch"}],
        }


# -- watch: replay and initial state ---------------------------------------------------------
@pytest.mark.parametrize(
    "opened", [pytest.param("before-writes", id="live"), pytest.param("after-writes", id="replay")]
)
async def test_watch_from_list_rv_yields_later_changes_in_order(
    server: ApiServer,
    client: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
    opened: str,
) -> None:
    """A watch from a list's RV yields exactly the later changes, in order, with their objects."""
    with trio.fail_after(60):
        await create_node(client, "old")
        listed = await list_ok(client, NODES)
        rv = listed["metadata"]["resourceVersion"]

        async def write() -> list[tuple[str, dict[str, Any]]]:
            added = await create_node(client, "n1", {"a": "1"})
            modified = await patch_node(client, "n1", {"metadata": {"labels": {"a": "2"}}})
            await delete_node(client, "n1")
            deleted = at_rv(modified, server.store.rv)
            return [("ADDED", added), ("MODIFIED", modified), ("DELETED", deleted)]

        start = trio.current_time()
        expected = await write() if opened == "after-writes" else []
        async with watching(client, NODES, resourceVersion=rv) as watch:
            if opened == "before-writes":
                expected = await write()
            seen = await watch.take(3)
        assert [(s.type, s.object) for s in seen] == expected
        rvs = [rv_of(s.object) for s in seen]
        assert rvs == sorted(set(rvs))
        assert rvs[0] > int(rv)
        assert all(s.at == start for s in seen)


@pytest.mark.parametrize("rv", [pytest.param(None, id="unset"), pytest.param("0", id="zero")])
async def test_watch_without_rv_starts_with_synthetic_added(
    server: ApiServer,
    client: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
    rv: str | None,
) -> None:
    """A watch without a resourceVersion (or "0") first sends ADDED for every existing object."""
    with trio.fail_after(60):
        existing = await seed_nodes(client, 3)
        await patch_node(client, "n0", {"metadata": {"labels": {"x": "y"}}})
        existing[0] = (await list_ok(client, NODES))["items"][0]
        params = {} if rv is None else {"resourceVersion": rv}
        async with watching(client, NODES, **params) as watch:
            initial = await watch.take(3)
            later = await create_node(client, "n3")
            live = await watch.next()
        assert [(s.type, s.object) for s in initial] == [("ADDED", o) for o in existing]
        assert (live.type, live.object) == ("ADDED", later)


SELECTOR_CASES = [
    pytest.param(
        {"labelSelector": "role=worker"},
        node_body("n1", {"role": "worker"}),
        {"metadata": {"labels": {"role": "gpu"}}},
        {"metadata": {"labels": {"role": "worker"}}},
        id="label-selector",
    ),
    pytest.param(
        {"labelSelector": "role in (worker,infra),!drain"},
        node_body("n1", {"role": "worker"}),
        {"metadata": {"labels": {"drain": "yes"}}},
        {"metadata": {"labels": {"drain": None}}},
        id="set-label-selector",
    ),
    pytest.param(
        {"fieldSelector": "spec.unschedulable=false"},
        node_body("n1"),
        {"spec": {"unschedulable": True}},
        {"spec": {"unschedulable": None}},
        id="field-selector",
    ),
    pytest.param(
        {"fieldSelector": "spec.unschedulable=false", "labelSelector": "role"},
        node_body("n1", {"role": "worker"}),
        {"spec": {"unschedulable": True}},
        {"spec": {"unschedulable": False}},
        id="both-selectors",
    ),
]


@pytest.mark.parametrize(("params", "body", "leave", "rejoin"), SELECTOR_CASES)
async def test_watch_selector_transitions(
    server: ApiServer,
    client: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
    params: dict[str, str],
    body: dict[str, Any],
    leave: dict[str, Any],
    rejoin: dict[str, Any],
) -> None:
    """A selector watch sees ADDED when an object starts matching and DELETED when it stops."""
    with trio.fail_after(60):
        rv = (await list_ok(client, NODES, **params))["metadata"]["resourceVersion"]
        async with watching(client, NODES, resourceVersion=rv, **params) as watch:
            await create_node(client, "other", {"role": "gpu"}, unschedulable=True)
            added = await create(client, NODES, body)
            left = await patch_node(client, "n1", leave)
            await patch_node(client, "n1", {"metadata": {"annotations": {"while": "away"}}})
            rejoined = await patch_node(client, "n1", rejoin)
            touched = await patch_node(client, "n1", {"metadata": {"annotations": {"x": "1"}}})
            await delete_node(client, "n1")
            deleted_rv = server.store.rv
            seen = await watch.take(5)
        assert [(s.type, s.object) for s in seen] == [
            ("ADDED", added),
            # Left the selection: the previous content at the new resourceVersion.
            ("DELETED", at_rv(added, rv_of(left))),
            ("ADDED", rejoined),
            ("MODIFIED", touched),
            ("DELETED", at_rv(touched, deleted_rv)),
        ]
        assert all(s.object["metadata"]["name"] == "n1" for s in watch.seen)


# -- watch: bookmarks and timeouts -----------------------------------------------------------
async def test_bookmarks_on_a_quiet_watch(
    server: ApiServer, client: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    """A quiet watch with allowWatchBookmarks gets a BOOKMARK every 60s at the global RV."""
    with trio.fail_after(600):
        await create_node(client, "n1")
        rv = (await list_ok(client, NODES))["metadata"]["resourceVersion"]
        start = trio.current_time()
        bookmark_rvs = []
        async with watching(client, NODES, resourceVersion=rv, allowWatchBookmarks="true") as w:
            for step in range(3):
                seen = await w.next()
                assert seen.type == "BOOKMARK"
                assert seen.at == start + 60.0 * (step + 1)
                bookmark_rvs.append(seen.object["metadata"]["resourceVersion"])
                assert seen.object["kind"] == "Node"
                assert seen.object["apiVersion"] == "v1"
                # Writes to other resources still move the global RV a bookmark reports.
                await create_configmap(client, "default", f"cm{step}")
        assert bookmark_rvs == [str(int(rv) + step) for step in range(3)]


async def test_bookmark_after_events_reports_the_latest_rv(
    server: ApiServer, client: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    """Bookmarks stay periodic across events and report the RV current when they are sent."""
    with trio.fail_after(600):
        rv = (await list_ok(client, NODES))["metadata"]["resourceVersion"]
        start = trio.current_time()
        async with watching(client, NODES, resourceVersion=rv, allowWatchBookmarks="true") as w:
            await trio.sleep(30)
            created = await create_node(client, "n1")
            event = await w.next()
            bookmark = await w.next()
        assert (event.type, event.object, event.at) == ("ADDED", created, start + 30.0)
        assert bookmark.type == "BOOKMARK"
        assert bookmark.at == start + 60.0
        assert bookmark.object["metadata"]["resourceVersion"] == str(server.store.rv)


@pytest.mark.parametrize(
    "seconds", [pytest.param(1, id="1s"), pytest.param(30, id="30s"), pytest.param(150, id="150s")]
)
async def test_timeout_seconds_ends_the_stream(
    client: httpx.AsyncClient, autojump_clock: trio.testing.MockClock, seconds: int
) -> None:
    """timeoutSeconds ends the watch at exactly that virtual time; no bookmarks unless asked."""
    with trio.fail_after(seconds + 60):
        rv = (await list_ok(client, NODES))["metadata"]["resourceVersion"]
        start = trio.current_time()
        async with watching(
            client, NODES, resourceVersion=rv, timeoutSeconds=str(seconds)
        ) as watch:
            rest = await watch.rest()
        assert rest == []
        assert watch.ended_at == start + seconds


@pytest.mark.parametrize(
    ("seconds", "bookmark_times"),
    [
        pytest.param(30, [28.0], id="30s"),
        pytest.param(100, [60.0, 98.0], id="100s"),
        pytest.param(130, [60.0, 120.0, 128.0], id="130s"),
        pytest.param(1, [], id="1s-too-short"),
    ],
)
async def test_bookmark_two_seconds_before_the_timeout(
    server: ApiServer,
    client: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
    seconds: int,
    bookmark_times: list[float],
) -> None:
    """With bookmarks allowed, the cacher sends one 2s before timeoutSeconds expires, then ends."""
    with trio.fail_after(seconds + 60):
        rv = (await list_ok(client, NODES))["metadata"]["resourceVersion"]
        start = trio.current_time()
        async with watching(
            client,
            NODES,
            resourceVersion=rv,
            allowWatchBookmarks="true",
            timeoutSeconds=str(seconds),
        ) as watch:
            rest = await watch.rest()
        assert [(s.type, s.at - start) for s in rest] == [("BOOKMARK", t) for t in bookmark_times]
        assert all(s.object["metadata"]["resourceVersion"] == str(server.store.rv) for s in rest)
        assert watch.ended_at == start + seconds


# -- watch: sendInitialEvents ----------------------------------------------------------------
@pytest.mark.parametrize("rv", [pytest.param(None, id="unset"), pytest.param("0", id="zero")])
async def test_send_initial_events_ends_with_annotated_bookmark(
    server: ApiServer,
    client: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
    rv: str | None,
) -> None:
    """sendInitialEvents sends ADDED for each object, then a BOOKMARK marking initial-events-end."""
    with trio.fail_after(60):
        existing = await seed_nodes(client, 2)
        snapshot_rv = server.store.rv
        params = {
            "sendInitialEvents": "true",
            "allowWatchBookmarks": "true",
            "resourceVersionMatch": "NotOlderThan",
        }
        if rv is not None:
            params["resourceVersion"] = rv
        start = trio.current_time()
        async with watching(client, NODES, **params) as watch:
            initial = await watch.take(3)
            later = await create_node(client, "n9")
            live = await watch.next()
        assert [(s.type, s.object) for s in initial[:2]] == [("ADDED", o) for o in existing]
        bookmark = initial[2]
        assert bookmark.type == "BOOKMARK"
        assert bookmark.object["metadata"]["resourceVersion"] == str(snapshot_rv)
        assert bookmark.object["metadata"]["annotations"] == {INITIAL_EVENTS_END: "true"}
        assert all(s.at == start for s in initial)
        assert (live.type, live.object) == ("ADDED", later)
        assert rv_of(live.object) > snapshot_rv


async def test_initial_events_end_bookmark_precedes_later_writes(
    server: ApiServer, client: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    """A write landing while initial events are read comes after the bookmark, at a higher RV."""
    with trio.fail_after(60):
        await seed_nodes(client, 2)
        snapshot_rv = server.store.rv
        params = {
            "watch": "1",
            "timeoutSeconds": "30",
            "sendInitialEvents": "true",
            "allowWatchBookmarks": "true",
            "resourceVersionMatch": "NotOlderThan",
        }
        events: list[dict[str, Any]] = []
        async with (
            client.stream("GET", NODES, params=params) as response,
            aclosing(response.aiter_lines()) as lines,  # type: ignore[type-var]
        ):
            events.append(json.loads(await anext(lines)))
            # The first chunk is read; write before the bookmark goes out.
            server.create(node_body("n9"))
            async for line in lines:
                if line.strip():
                    events.append(json.loads(line))
                if len(events) == 4:
                    break
        types = [e["type"] for e in events]
        assert types == ["ADDED", "ADDED", "BOOKMARK", "ADDED"]
        bookmark_rv = int(events[2]["object"]["metadata"]["resourceVersion"])
        assert bookmark_rv == snapshot_rv
        assert int(events[3]["object"]["metadata"]["resourceVersion"]) > bookmark_rv


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        pytest.param(
            {"sendInitialEvents": "true", "allowWatchBookmarks": "true"},
            "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            id="send-initial-events-without-match",
        ),
        pytest.param(
            {"resourceVersionMatch": "NotOlderThan", "resourceVersion": "1"},
            "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is "
            "provided",
            id="match-without-send-initial-events",
        ),
    ],
)
async def test_watch_options_are_validated(
    client: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
    params: dict[str, str],
    detail: str,
) -> None:
    """Invalid sendInitialEvents/resourceVersionMatch combinations on a watch answer 422."""
    with trio.fail_after(60):
        query = {"watch": "1", "timeoutSeconds": "5", **params}
        async with client.stream("GET", NODES, params=query) as response:
            code = response.status_code
            body = json.loads(await response.aread()) if code != 200 else {}
        assert code == 422
        message = status_of(body, 422, "Invalid")
        assert message == f'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: {detail}'


# -- watch: expiry and errors ----------------------------------------------------------------
@pytest.mark.parametrize(
    "how", [pytest.param("history-size", id="history-size"), pytest.param("compact", id="compact")]
)
async def test_watch_from_compacted_rv_gets_one_expired_error(
    autojump_clock: trio.testing.MockClock, how: str
) -> None:
    """A watch from a compacted RV gets one ERROR event with a 410 Expired Status, then ends."""
    server = ApiServer(seed=1, history_size=2 if how == "history-size" else 10_000)
    with trio.fail_after(60):
        async with open_client(server) as client:
            rv = (await list_ok(client, NODES))["metadata"]["resourceVersion"]
            for i in range(3):
                await create_node(client, f"n{i}")
            if how == "compact":
                server.store.compact()
            before = server.store.watcher_count()
            start = trio.current_time()
            async with watching(client, NODES, resourceVersion=rv) as watch:
                assert watch.status == 200
                rest = await watch.rest()
            assert [s.type for s in rest] == ["ERROR"]
            message = status_of(rest[0].object, 410, "Expired")
            assert message.startswith(f"too old resource version: {rv} ("), message
            assert rest[0].object["apiVersion"] == "v1"
            assert watch.ended_at == start
            assert server.store.watcher_count() == before


async def test_watch_from_oldest_retained_rv_replays(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A watch from the RV just before the oldest retained event still replays everything after."""
    server = ApiServer(seed=1, history_size=2)
    with trio.fail_after(60):
        async with open_client(server) as client:
            created = [await create_node(client, f"n{i}") for i in range(3)]
            async with watching(client, NODES, resourceVersion=str(rv_of(created[0]))) as watch:
                seen = await watch.take(2)
            assert [(s.type, s.object) for s in seen] == [("ADDED", o) for o in created[1:]]


async def test_watch_from_future_rv_gets_too_large_error(
    server: ApiServer, client: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    """A watch from an RV the server has not reached ends with a 504 "Too large" ERROR event."""
    with trio.fail_after(120):
        future = server.store.rv + 100
        async with watching(
            client, NODES, resourceVersion=str(future), timeoutSeconds="30"
        ) as watch:
            rest = await watch.rest()
        assert rest, "no event: the watch silently waited for an RV that never came"
        assert rest[0].type == "ERROR"
        message = status_of(rest[0].object, 504, "Timeout")
        assert message.startswith(f"Too large resource version: {future}"), message


# -- watch: watcher lifecycle ----------------------------------------------------------------
async def test_slow_watcher_is_closed_while_reader_keeps_all(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A watcher that stops reading is closed past watch_buffer events; a reading one keeps all."""
    buffer = 4
    server = ApiServer(seed=1, watch_buffer=buffer)
    with trio.fail_after(60):
        async with open_client(server) as client:
            rv = (await list_ok(client, NODES))["metadata"]["resourceVersion"]
            base = server.store.watcher_count()
            params = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "30"}
            async with client.stream("GET", NODES, params=params) as slow:
                async with watching(client, NODES, resourceVersion=rv) as fast:
                    assert server.store.watcher_count() == base + 2
                    created = []
                    for i in range(10):
                        created.append(await create_node(client, f"n{i}"))
                        seen = await fast.next()
                        assert (seen.type, seen.object) == ("ADDED", created[-1])
                        expected = base + 2 if i < buffer else base + 1
                        assert server.store.watcher_count() == expected, i
                slow_events = [json.loads(line) async for line in slow.aiter_lines() if line]
            assert len(slow_events) <= buffer
            assert [e["object"] for e in slow_events] == created[: len(slow_events)]
            assert server.store.watcher_count() == base


async def test_drop_watches_ends_streams(
    server: ApiServer, client: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    """drop_watches() ends every open watch stream at once and unregisters the watchers."""
    with trio.fail_after(60):
        base = server.store.watcher_count()
        start = trio.current_time()
        async with (
            watching(client, NODES) as nodes,
            watching(client, "/api/v1/namespaces/default/configmaps") as configmaps,
        ):
            assert server.store.watcher_count() == base + 2
            await trio.sleep(10)
            assert server.store.drop_watches() == base + 2
            assert await nodes.rest() == []
            assert await configmaps.rest() == []
            assert nodes.ended_at == configmaps.ended_at == start + 10.0
        assert server.store.watcher_count() == base


@pytest.mark.parametrize(
    "read_first",
    [pytest.param(True, id="after-reading"), pytest.param(False, id="without-reading")],
)
async def test_closing_the_response_unregisters_the_watcher(
    server: ApiServer,
    client: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
    read_first: bool,
) -> None:
    """Closing a watch response, read or not, unregisters its watcher on the server."""
    with trio.fail_after(60):
        await create_node(client, "n1")
        base = server.store.watcher_count()
        params = {"watch": "1", "timeoutSeconds": "30"}
        async with client.stream("GET", NODES, params=params) as response:
            assert server.store.watcher_count() == base + 1
            if read_first:
                async with aclosing(response.aiter_lines()) as lines:  # type: ignore[type-var]
                    assert json.loads(await anext(lines))["type"] == "ADDED"
        assert server.store.watcher_count() == base


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/apis/events.k8s.io/v1/events", id="all-namespaces"),
        pytest.param("/apis/events.k8s.io/v1/namespaces/default/events", id="namespaced"),
    ],
)
async def test_events_v1_watch_sees_core_events_in_v1_shape(
    client: httpx.AsyncClient, autojump_clock: trio.testing.MockClock, path: str
) -> None:
    """A watch on events.k8s.io/v1 sees an Event created through /api/v1 as regarding/note."""
    with trio.fail_after(60):
        rv = (await list_ok(client, path))["metadata"]["resourceVersion"]
        async with watching(client, path, resourceVersion=rv) as watch:
            created = await create(
                client,
                "/api/v1/namespaces/default/events",
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": "e1"},
                    "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
                    "reason": "NodeReady",
                    "message": "node n1 is ready",
                    "type": "Normal",
                    "source": {"component": "kubelet"},
                },
            )
            seen = await watch.next()
        obj = seen.object
        assert seen.type == "ADDED"
        assert obj["kind"] == "Event"
        assert obj["apiVersion"] == "events.k8s.io/v1"
        assert obj["metadata"] == created["metadata"]
        assert obj["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
        assert obj["note"] == "node n1 is ready"
        assert obj["reason"] == "NodeReady"
        assert obj["type"] == "Normal"
        assert obj["deprecatedSource"] == {"component": "kubelet"}
        assert "involvedObject" not in obj
        assert "message" not in obj
