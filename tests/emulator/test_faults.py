"""Fault injection: errors, latency, conflicts, outages, dropped watches and compaction."""

from __future__ import annotations

import json
import re
from functools import partial
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from trio_ccm_testbed.apiserver import ApiServer, serve_apiserver

MERGE = {"content-type": "application/merge-patch+json"}
MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def _seed(server: ApiServer) -> None:
    """Two nodes, a Service in two namespaces and a Lease."""
    for name in ("n1", "n2"):
        server.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    for namespace in ("default", "kube-system"):
        server.create(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": namespace},
                "spec": {"ports": [{"port": 80}]},
            }
        )
    server.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "ccm", "namespace": "kube-system"},
            "spec": {"holderIdentity": "a"},
        }
    )


@pytest.fixture
def seeded(server: ApiServer) -> ApiServer:
    _seed(server)
    return server


# ---------------------------------------------------------------- error injection


async def test_error_fails_exactly_count_requests_then_succeeds(
    seeded: ApiServer, client: httpx.AsyncClient
) -> None:
    """An error rule with count=2 fails the next two matching requests and no more."""
    rule = seeded.faults.inject_error(
        code=503, verb="list", resource="nodes", count=2, retry_after_s=3
    )
    with trio.fail_after(5):
        codes = [(await client.get("/api/v1/nodes")).status_code for _ in range(4)]
    assert codes == [503, 503, 200, 200]
    assert (rule.fired, rule.count) == (2, 0)


async def test_error_carries_retry_after_header_and_details(
    seeded: ApiServer, client: httpx.AsyncClient
) -> None:
    """An injected error with retry_after_s sets Retry-After and details.retryAfterSeconds."""
    seeded.faults.inject_error(
        code=503, verb="list", resource="nodes", retry_after_s=3, message="etcd is down"
    )
    with trio.fail_after(5):
        response = await client.get("/api/v1/nodes")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "3"
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "etcd is down",
        "reason": "ServiceUnavailable",
        "details": {"retryAfterSeconds": 3},
        "code": 503,
    }


async def test_error_without_retry_after_has_no_header(
    seeded: ApiServer, client: httpx.AsyncClient
) -> None:
    """Without retry_after_s the error has neither a Retry-After header nor details."""
    seeded.faults.inject_error(code=503, verb="get", resource="nodes")
    with trio.fail_after(5):
        response = await client.get("/api/v1/nodes/n1")
    assert response.status_code == 503
    assert "retry-after" not in response.headers
    assert "details" not in response.json()


@pytest.mark.parametrize(
    ("code", "reason", "expected"),
    [
        pytest.param(
            429,
            "TooManyRequests",
            {"message": "Too many requests, please try again later."},
            id="429-too-many-requests",
        ),
        pytest.param(
            500,
            "InternalError",
            {
                "message": "Internal error occurred: injected fault",
                "details": {"causes": [{"message": "injected fault"}]},
            },
            id="500-internal-error",
        ),
        pytest.param(503, "ServiceUnavailable", {}, id="503-service-unavailable"),
        pytest.param(504, "Timeout", {}, id="504-timeout"),
        pytest.param(409, "Conflict", {}, id="409-conflict"),
    ],
)
async def test_error_code_maps_to_upstream_reason(
    seeded: ApiServer,
    client: httpx.AsyncClient,
    code: int,
    reason: str,
    expected: dict[str, Any],
) -> None:
    """Each injected HTTP code comes back as a Status with upstream's reason for that code."""
    seeded.faults.inject_error(code=code, verb="get", resource="nodes")
    with trio.fail_after(5):
        response = await client.get("/api/v1/nodes/n1")
    body = response.json()
    assert response.status_code == code
    assert (body["kind"], body["status"], body["reason"], body["code"]) == (
        "Status",
        "Failure",
        reason,
        code,
    )
    for key, value in expected.items():
        assert body[key] == value


REQUESTS: dict[str, tuple[str, str, Any, int]] = {
    "list-nodes": ("GET", "/api/v1/nodes", None, 200),
    "get-n1": ("GET", "/api/v1/nodes/n1", None, 200),
    "get-n2": ("GET", "/api/v1/nodes/n2", None, 200),
    "patch-svc": (
        "PATCH",
        "/api/v1/namespaces/default/services/web",
        {"metadata": {"labels": {"x": "y"}}},
        200,
    ),
    "patch-svc-status": (
        "PATCH",
        "/api/v1/namespaces/default/services/web/status",
        {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}},
        200,
    ),
    "get-svc-default": ("GET", "/api/v1/namespaces/default/services/web", None, 200),
    "get-svc-kube-system": ("GET", "/api/v1/namespaces/kube-system/services/web", None, 200),
    "get-lease": (
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ccm",
        None,
        200,
    ),
}


@pytest.mark.parametrize(
    ("options", "request_id", "fires"),
    [
        pytest.param({"verb": "get"}, "get-n1", True, id="verb-matches"),
        pytest.param({"verb": "get"}, "list-nodes", False, id="verb-get-is-not-list"),
        pytest.param({"verb": "list", "resource": "services"}, "list-nodes", False, id="resource"),
        pytest.param({"resource": "nodes"}, "get-n1", True, id="resource-matches"),
        pytest.param(
            {"resource": "services/status"}, "patch-svc-status", True, id="subresource-matches"
        ),
        pytest.param(
            {"resource": "services/status"}, "patch-svc", False, id="subresource-not-main"
        ),
        pytest.param(
            {"resource": "services"}, "patch-svc-status", True, id="resource-covers-subresources"
        ),
        pytest.param(
            {"verb": "patch", "resource": "services/status"},
            "patch-svc-status",
            True,
            id="verb-and-subresource",
        ),
        pytest.param(
            {"namespace": "kube-system"}, "get-svc-kube-system", True, id="namespace-matches"
        ),
        pytest.param({"namespace": "kube-system"}, "get-svc-default", False, id="namespace"),
        pytest.param({"namespace": "kube-system"}, "get-n1", False, id="namespace-vs-cluster"),
        pytest.param({"name": "n2"}, "get-n2", True, id="name-matches"),
        pytest.param({"name": "n2"}, "get-n1", False, id="name"),
        pytest.param({"name": "n2"}, "list-nodes", False, id="name-vs-collection"),
        pytest.param({"resource": "leases"}, "get-lease", True, id="grouped-resource"),
    ],
)
async def test_error_matches_verb_resource_namespace_name(
    seeded: ApiServer,
    client: httpx.AsyncClient,
    options: dict[str, str],
    request_id: str,
    fires: bool,
) -> None:
    """A rule fires only for requests whose verb, resource/subresource, namespace and name fit."""
    rule = seeded.faults.inject_error(code=500, message="injected", **options)
    method, path, body, ok = REQUESTS[request_id]
    with trio.fail_after(5):
        response = await client.request(method, path, json=body, headers=MERGE)
    assert response.status_code == (500 if fires else ok), response.text
    assert rule.fired == (1 if fires else 0)


async def _outcomes(seed: int, requests: int = 32) -> list[int]:
    server = ApiServer(seed=seed)
    server.faults.inject_error(code=503, verb="list", resource="nodes", probability=0.5)
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as client:
        return [(await client.get("/api/v1/nodes")).status_code for _ in range(requests)]


async def test_probability_with_a_seed_is_reproducible() -> None:
    """Two servers with the same seed fail the same requests of a probabilistic rule."""
    with trio.fail_after(5):
        first = await _outcomes(7)
        second = await _outcomes(7)
    assert first == second
    assert set(first) == {200, 503}


@pytest.mark.parametrize(
    ("probability", "expected"),
    [
        pytest.param(0.0, {200}, id="never"),
        pytest.param(1.0, {503}, id="always"),
    ],
)
async def test_probability_bounds(
    server: ApiServer, client: httpx.AsyncClient, probability: float, expected: set[int]
) -> None:
    """Probability 0 never fires and probability 1 always does."""
    server.faults.inject_error(code=503, verb="list", probability=probability)
    with trio.fail_after(5):
        codes = {(await client.get("/api/v1/nodes")).status_code for _ in range(16)}
    assert codes == expected


async def test_probability_and_count_fail_exactly_count_times(
    server: ApiServer, client: httpx.AsyncClient
) -> None:
    """With a probability below 1, count still caps the number of failures exactly."""
    rule = server.faults.inject_error(code=503, verb="list", probability=0.5, count=3)
    with trio.fail_after(5):
        codes = [(await client.get("/api/v1/nodes")).status_code for _ in range(64)]
    assert codes.count(503) == 3
    assert rule.fired == 3


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        pytest.param({"probability": 1.5}, "probability must be between 0 and 1", id="prob"),
        pytest.param({"bogus": 1}, "unknown fault option(s): bogus", id="unknown-option"),
    ],
)
def test_bad_rule_is_rejected(options: dict[str, Any], expected: str) -> None:
    """A rule with an out-of-range probability or an unknown option raises ValueError."""
    faults = ApiServer(seed=1).faults
    with pytest.raises(ValueError, match=re.escape(expected)):
        faults.inject_error(code=500, **options)
    assert faults.rules == []


async def test_clear_removes_every_rule(seeded: ApiServer, client: httpx.AsyncClient) -> None:
    """After faults.clear() requests succeed again."""
    seeded.faults.inject_error(code=503)
    seeded.faults.inject_latency(5.0)
    seeded.faults.clear()
    with trio.fail_after(5):
        response = await client.get("/api/v1/nodes")
    assert response.status_code == 200
    assert seeded.faults.rules == []


# ---------------------------------------------------------------- latency (virtual time)


@pytest.mark.parametrize(
    ("rules", "request_id", "delay", "status"),
    [
        pytest.param([{"delay_s": 2.5, "verb": "get"}], "get-n1", 2.5, 200, id="matching"),
        pytest.param([{"delay_s": 2.5, "verb": "get"}], "list-nodes", 0.0, 200, id="other-verb"),
        pytest.param(
            [{"delay_s": 1.0, "resource": "nodes"}, {"delay_s": 0.25, "name": "n1"}],
            "get-n1",
            1.25,
            200,
            id="delays-add-up",
        ),
        pytest.param(
            [{"delay_s": 0.5, "resource": "services/status"}],
            "patch-svc-status",
            0.5,
            200,
            id="subresource",
        ),
    ],
)
async def test_latency_delays_by_exact_virtual_time(
    autojump_clock: trio.testing.MockClock,
    seeded: ApiServer,
    client: httpx.AsyncClient,
    rules: list[dict[str, Any]],
    request_id: str,
    delay: float,
    status: int,
) -> None:
    """A latency rule holds a matching request for exactly its delay in virtual time."""
    for options in rules:
        seeded.faults.inject_latency(**options)
    method, path, body, _ = REQUESTS[request_id]
    with trio.fail_after(60):
        start = trio.current_time()
        response = await client.request(method, path, json=body, headers=MERGE)
        elapsed = trio.current_time() - start
    assert response.status_code == status
    assert elapsed == delay


async def test_latency_then_error_answers_after_the_delay(
    autojump_clock: trio.testing.MockClock, seeded: ApiServer, client: httpx.AsyncClient
) -> None:
    """With a latency rule and an error rule, the error arrives after the delay."""
    seeded.faults.inject_latency(3.0, verb="get")
    seeded.faults.inject_error(code=504, verb="get", count=1)
    with trio.fail_after(60):
        start = trio.current_time()
        failed = await client.get("/api/v1/nodes/n1")
        middle = trio.current_time()
        ok = await client.get("/api/v1/nodes/n1")
        end = trio.current_time()
    assert (failed.status_code, middle - start) == (504, 3.0)
    assert (ok.status_code, end - middle) == (200, 3.0)


# ---------------------------------------------------------------- conflicts


@pytest.mark.parametrize(
    ("method", "path", "body", "message", "details"),
    [
        pytest.param(
            "PATCH",
            "/api/v1/nodes/n1",
            {"metadata": {"labels": {"a": "b"}}},
            f'Operation cannot be fulfilled on nodes "n1": {MODIFIED}',
            {"name": "n1", "kind": "nodes"},
            id="patch-node",
        ),
        pytest.param(
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ccm",
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "ccm", "namespace": "kube-system"},
                "spec": {"holderIdentity": "b"},
            },
            f'Operation cannot be fulfilled on leases.coordination.k8s.io "ccm": {MODIFIED}',
            {"name": "ccm", "group": "coordination.k8s.io", "kind": "leases"},
            id="update-lease",
        ),
        pytest.param(
            "PATCH",
            "/api/v1/namespaces/default/services/web/status",
            {"status": {}},
            f'Operation cannot be fulfilled on services "web": {MODIFIED}',
            {"name": "web", "kind": "services"},
            id="patch-service-status",
        ),
    ],
)
async def test_conflict_gives_409_once_then_succeeds(
    seeded: ApiServer,
    client: httpx.AsyncClient,
    method: str,
    path: str,
    body: Any,
    message: str,
    details: dict[str, str],
) -> None:
    """A conflict rule with count=1 answers one 409 Conflict, then the write goes through."""
    seeded.faults.inject_conflict(count=1)
    headers = MERGE if method == "PATCH" else {}
    with trio.fail_after(5):
        first = await client.request(method, path, json=body, headers=headers)
        second = await client.request(method, path, json=body, headers=headers)
    assert first.status_code == 409
    assert first.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Conflict",
        "details": details,
        "code": 409,
    }
    assert second.status_code == 200, second.text


async def test_conflict_rule_is_spent_only_on_writes(
    seeded: ApiServer, client: httpx.AsyncClient
) -> None:
    """A verb-less conflict rule lets reads through without using up its count."""
    rule = seeded.faults.inject_conflict(resource="nodes", count=1)
    with trio.fail_after(5):
        read = await client.get("/api/v1/nodes/n1")
        write = await client.patch(
            "/api/v1/nodes/n1", json={"metadata": {"labels": {"a": "b"}}}, headers=MERGE
        )
    assert read.status_code == 200
    assert write.status_code == 409
    assert rule.fired == 1


# ---------------------------------------------------------------- refused connections


async def test_refuse_connections_in_process_until_duration_passes(
    autojump_clock: trio.testing.MockClock, seeded: ApiServer, client: httpx.AsyncClient
) -> None:
    """In-process, requests raise ConnectError until exactly duration_s of virtual time."""
    with trio.fail_after(60):
        start = trio.current_time()
        seeded.faults.refuse_connections(2.0)
        with pytest.raises(httpx.ConnectError, match="Connection refused"):
            await client.get("/api/v1/nodes")
        await trio.sleep_until(start + 1.75)
        with pytest.raises(httpx.ConnectError):
            await client.get("/api/v1/nodes")
        await trio.sleep_until(start + 2.0)
        response = await client.get("/api/v1/nodes")
    assert response.status_code == 200


@pytest.mark.parametrize(
    "end",
    [
        pytest.param("end_outage", id="end-outage"),
        pytest.param("clear", id="clear"),
    ],
)
async def test_outage_ends_early(
    autojump_clock: trio.testing.MockClock,
    seeded: ApiServer,
    client: httpx.AsyncClient,
    end: str,
) -> None:
    """end_outage() and clear() lift an outage at once, without waiting for its duration."""
    with trio.fail_after(60):
        start = trio.current_time()
        seeded.faults.refuse_connections(3600.0)
        with pytest.raises(httpx.ConnectError):
            await client.get("/api/v1/nodes")
        getattr(seeded.faults, end)()
        response = await client.get("/api/v1/nodes")
    assert response.status_code == 200
    assert trio.current_time() == start


async def test_listener_refuses_connections_during_outage(server: ApiServer) -> None:
    """Over a real socket the port refuses connections in an outage and serves after it ends."""
    no_pool = httpx.Limits(max_keepalive_connections=0)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            listening = await nursery.start(partial(serve_apiserver, server))
            async with httpx.AsyncClient(base_url=listening.url, limits=no_pool) as client:
                before = await client.get("/api/v1/nodes")
                server.faults.refuse_connections(3600.0)
                # The listener closes its socket on its next turn; wait for it to settle.
                await trio.testing.wait_all_tasks_blocked()
                with pytest.raises(httpx.ConnectError):
                    await client.get("/api/v1/nodes")
                server.faults.end_outage()
                # The listener re-binds the same port on its next turn.
                await trio.testing.wait_all_tasks_blocked()
                after = await client.get("/api/v1/nodes")
            nursery.cancel_scope.cancel()
    assert before.status_code == 200
    assert after.status_code == 200


# ---------------------------------------------------------------- watches


async def test_drop_watches_ends_open_watch_streams(
    seeded: ApiServer, client: httpx.AsyncClient
) -> None:
    """store.drop_watches() closes every open watch, whose stream then ends cleanly."""
    with trio.fail_after(5):
        async with (
            client.stream("GET", "/api/v1/nodes?watch=true") as nodes,
            client.stream("GET", "/api/v1/namespaces/default/services?watch=true") as services,
        ):
            node_lines = nodes.aiter_lines()
            service_lines = services.aiter_lines()
            replayed = [json.loads(await anext(node_lines)) for _ in range(2)]
            replayed += [json.loads(await anext(service_lines)) for _ in range(2)]
            assert seeded.store.watcher_count() == 2
            assert seeded.store.drop_watches() == 2
            rest = [line async for line in node_lines] + [line async for line in service_lines]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in replayed] == [
        ("ADDED", "n1"),
        ("ADDED", "n2"),
        ("ADDED", "kubernetes"),
        ("ADDED", "web"),
    ]
    assert [line for line in rest if line] == []
    assert seeded.store.watcher_count() == 0


async def _watch_lines(client: httpx.AsyncClient, path: str) -> list[Any]:
    async with client.stream("GET", path) as response:
        assert response.status_code == 200
        return [json.loads(line) async for line in response.aiter_lines() if line]


async def test_compact_makes_old_resource_version_watch_expire(
    seeded: ApiServer, client: httpx.AsyncClient
) -> None:
    """After compact(), a watch from an older resourceVersion gets an ERROR event with 410."""
    old_rv = seeded.store.rv
    with trio.fail_after(5):
        patched = await client.patch(
            "/api/v1/nodes/n1", json={"metadata": {"labels": {"a": "b"}}}, headers=MERGE
        )
        assert patched.status_code == 200
        seeded.store.compact()
        events = await _watch_lines(client, f"/api/v1/nodes?watch=true&resourceVersion={old_rv}")
    assert events == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {old_rv} ({seeded.store.rv})",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]


async def test_watch_from_compacted_resource_version_still_works(
    seeded: ApiServer, client: httpx.AsyncClient
) -> None:
    """A watch from exactly the compacted resourceVersion is not expired."""
    seeded.store.compact()
    rv = seeded.store.rv
    with trio.fail_after(5):
        async with client.stream(
            "GET", f"/api/v1/nodes?watch=true&resourceVersion={rv}"
        ) as response:
            assert response.status_code == 200
            lines = response.aiter_lines()
            seeded.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n3"}})
            event = json.loads(await anext(lines))
    assert event["type"] == "ADDED"
    assert event["object"]["metadata"]["name"] == "n3"


# ---------------------------------------------------------------- the admin HTTP API


async def test_admin_error_fault_over_http(seeded: ApiServer, client: httpx.AsyncClient) -> None:
    """POST /_emulator/faults adds an error rule that fails requests like inject_error does."""
    with trio.fail_after(5):
        created = await client.post(
            "/_emulator/faults",
            json={
                "action": "error",
                "code": 503,
                "verb": "list",
                "resource": "nodes",
                "count": 1,
                "retry_after_s": 2,
            },
        )
        failed = await client.get("/api/v1/nodes")
        ok = await client.get("/api/v1/nodes")
        listed = await client.get("/_emulator/faults")
    assert created.status_code == 201
    rule = created.json()
    assert {k: rule[k] for k in ("action", "code", "verb", "resource", "count")} == {
        "action": "error",
        "code": 503,
        "verb": "list",
        "resource": "nodes",
        "count": 1,
    }
    assert failed.status_code == 503
    assert failed.headers["retry-after"] == "2"
    assert failed.json()["details"] == {"retryAfterSeconds": 2}
    assert ok.status_code == 200
    [shown] = listed.json()["faults"]
    assert (shown["id"], shown["count"], shown["fired"]) == (rule["id"], 0, 1)
    assert [r.id for r in seeded.faults.rules] == [rule["id"]]


async def test_admin_latency_fault_over_http(
    autojump_clock: trio.testing.MockClock, seeded: ApiServer, client: httpx.AsyncClient
) -> None:
    """POST /_emulator/faults with action latency delays by exactly delay_s virtual seconds."""
    with trio.fail_after(60):
        created = await client.post(
            "/_emulator/faults",
            json={"action": "latency", "delay_s": 1.5, "verb": "get", "resource": "nodes"},
        )
        start = trio.current_time()
        response = await client.get("/api/v1/nodes/n1")
        elapsed = trio.current_time() - start
    assert created.status_code == 201
    assert response.status_code == 200
    assert elapsed == 1.5


async def test_admin_conflict_fault_over_http(seeded: ApiServer, client: httpx.AsyncClient) -> None:
    """POST /_emulator/faults with action conflict answers 409 Conflict to a write."""
    with trio.fail_after(5):
        await client.post(
            "/_emulator/faults",
            json={"action": "conflict", "verb": "patch", "resource": "nodes", "count": 1},
        )
        response = await client.patch(
            "/api/v1/nodes/n1", json={"metadata": {"labels": {"a": "b"}}}, headers=MERGE
        )
    assert response.status_code == 409
    assert response.json()["reason"] == "Conflict"


async def test_admin_delete_one_fault_and_all_faults(
    seeded: ApiServer, client: httpx.AsyncClient
) -> None:
    """DELETE /_emulator/faults/{id} removes one rule and DELETE /_emulator/faults all of them."""
    with trio.fail_after(5):
        first = (await client.post("/_emulator/faults", json={"code": 500, "verb": "get"})).json()
        second = (await client.post("/_emulator/faults", json={"code": 503, "verb": "list"})).json()
        removed = await client.delete(f"/_emulator/faults/{first['id']}")
        get_after_remove = await client.get("/api/v1/nodes/n1")
        list_after_remove = await client.get("/api/v1/nodes")
        cleared = await client.delete("/_emulator/faults")
        list_after_clear = await client.get("/api/v1/nodes")
    assert removed.status_code == 200
    assert get_after_remove.status_code == 200
    assert list_after_remove.status_code == 503
    assert [r.id for r in seeded.faults.rules] == []
    assert cleared.json() == {"faults": []}
    assert list_after_clear.status_code == 200
    assert second["action"] == "error"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(
            {"action": "error", "bogus": 1},
            "bad fault rule: unknown fault option(s): bogus",
            id="unknown-option",
        ),
        pytest.param(
            {"action": "explode"},
            "bad fault rule: unknown fault action 'explode': use error, latency, conflict, "
            "garbage, truncate",
            id="unknown-action",
        ),
        pytest.param(
            {"probability": 2},
            "bad fault rule: probability must be between 0 and 1",
            id="bad-probability",
        ),
    ],
)
async def test_admin_bad_fault_is_400(
    server: ApiServer, client: httpx.AsyncClient, body: dict[str, Any], message: str
) -> None:
    """A malformed fault rule over HTTP gets 400 BadRequest and adds nothing."""
    with trio.fail_after(5):
        response = await client.post("/_emulator/faults", json=body)
    assert response.status_code == 400
    assert response.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "BadRequest",
        "code": 400,
    }
    assert server.faults.rules == []


async def test_admin_delete_fault_with_bad_id_is_404(
    server: ApiServer, client: httpx.AsyncClient
) -> None:
    """DELETE /_emulator/faults/{id} with a non-numeric id answers a 404 Status, not a crash."""
    with trio.fail_after(5):
        response = await client.delete("/_emulator/faults/not-a-number")
    assert response.status_code == 404
    assert response.json()["kind"] == "Status"


async def test_admin_drop_watches_over_http(seeded: ApiServer, client: httpx.AsyncClient) -> None:
    """POST /_emulator/drop-watches ends open watches and says how many it dropped."""
    with trio.fail_after(5):
        async with client.stream("GET", "/api/v1/nodes?watch=true") as watch:
            lines = watch.aiter_lines()
            replayed = [json.loads(await anext(lines)) for _ in range(2)]
            state = (await client.get("/_emulator/state")).json()
            dropped = await client.post("/_emulator/drop-watches")
            rest = [line async for line in lines]
        state_after = (await client.get("/_emulator/state")).json()
    assert state == {"resourceVersion": str(seeded.store.rv), "watchers": 1}
    assert dropped.json() == {"dropped": 1}
    assert [e["type"] for e in replayed] == ["ADDED", "ADDED"]
    assert [line for line in rest if line] == []
    assert state_after["watchers"] == 0


async def test_admin_compact_over_http(seeded: ApiServer, client: httpx.AsyncClient) -> None:
    """POST /_emulator/compact expires older resourceVersions like store.compact()."""
    old_rv = seeded.store.rv
    with trio.fail_after(5):
        await client.patch(
            "/api/v1/nodes/n1", json={"metadata": {"labels": {"a": "b"}}}, headers=MERGE
        )
        compacted = await client.post("/_emulator/compact")
        events = await _watch_lines(client, f"/api/v1/nodes?watch=true&resourceVersion={old_rv}")
    assert compacted.json() == {"compactedResourceVersion": str(seeded.store.rv)}
    [event] = events
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


async def test_admin_refuse_connections_over_http(
    autojump_clock: trio.testing.MockClock, seeded: ApiServer, client: httpx.AsyncClient
) -> None:
    """POST /_emulator/refuse-connections refuses in-process requests for duration_s seconds."""
    with trio.fail_after(60):
        start = trio.current_time()
        answer = await client.post("/_emulator/refuse-connections", json={"duration_s": 2})
        with pytest.raises(httpx.ConnectError):
            await client.get("/api/v1/nodes")
        await trio.sleep_until(start + 2)
        response = await client.get("/api/v1/nodes")
    assert answer.json() == {"refusingForSeconds": 2.0}
    assert response.status_code == 200


async def test_admin_unknown_action_is_404(client: httpx.AsyncClient) -> None:
    """An unknown /_emulator/ path answers upstream's 404 NotFound Status."""
    with trio.fail_after(5):
        response = await client.post("/_emulator/explode")
    assert response.status_code == 404
    assert response.json()["reason"] == "NotFound"
