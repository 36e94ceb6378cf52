"""KubeClient against the emulator: typed verbs, errors, retries, rate limits, watches."""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import httpx
import msgspec
import pytest
import trio
import trio.testing

from trio_ccm.kube import patches
from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.config import ClientIdentity, ConnectionConfig, Credentials, StaticCredentials
from trio_ccm.kube.errors import (
    AlreadyExistsError,
    ConflictError,
    GoneError,
    InvalidError,
    KubeConnectionError,
    KubeDecodeError,
    NotFoundError,
    ServerError,
    TooManyRequestsError,
)
from trio_ccm.kube.metrics import ClientMetrics
from trio_ccm.kube.objects import NODES, SERVICES, Node, Service
from trio_ccm.testing.harness import emulator_connection
from trio_ccm_testbed.apiserver import ApiServer, serve_apiserver


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


async def test_typed_get_and_list(server: ApiServer, kube: KubeClient) -> None:
    """get and list decode into the Structs controllers read."""
    with trio.fail_after(5):
        await kube.create(NODES, _node("n1", zone="a"))
        await kube.create(NODES, _node("n2", zone="b"))
        one = await kube.get(NODES, "n1", type=Node)
        listed = await kube.list(NODES, type=Node, label_selector="zone=b")
        svc = await kube.get(SERVICES, "kubernetes", namespace="default", type=Service)
    assert one.metadata.labels == {"zone": "a"}
    assert one.key == "n1"
    assert [n.metadata.name for n in listed.items] == ["n2"]
    assert listed.metadata.resource_version == str(server.store.rv)
    assert svc.key == "default/kubernetes"
    assert svc.spec.ports[0].port == 443


@pytest.mark.parametrize(
    ("action", "error", "reason"),
    [
        pytest.param("missing", NotFoundError, "NotFound", id="404"),
        pytest.param("duplicate", AlreadyExistsError, "AlreadyExists", id="409-exists"),
        pytest.param("stale", ConflictError, "Conflict", id="409-conflict"),
        pytest.param("invalid", InvalidError, "Invalid", id="422"),
    ],
)
async def test_status_bodies_become_exceptions(
    kube: KubeClient, action: str, error: type[Exception], reason: str
) -> None:
    """Each error Status maps to one exception class carrying code, reason and message."""
    calls = {
        "missing": lambda: kube.get(NODES, "ghost"),
        "duplicate": lambda: kube.create(NODES, _node("n1")),
        "stale": lambda: kube.delete(NODES, "n1", resource_version="1"),
        "invalid": lambda: kube.create(NODES, _node("Bad_Name")),
    }
    with trio.fail_after(5):
        await kube.create(NODES, _node("n1"))
        with pytest.raises(error) as caught:
            await calls[action]()
    assert caught.value.reason == reason  # type: ignore[attr-defined]
    assert caught.value.message  # type: ignore[attr-defined]


async def test_retry_after_is_honoured_exactly(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """A 429 with Retry-After is retried after exactly that many seconds, for any verb."""
    server.faults.inject_error(429, verb="create", resource="nodes", count=2, retry_after_s=3)
    with trio.fail_after(60):
        start = trio.current_time()
        await kube.create(NODES, _node("n1"))
        elapsed = trio.current_time() - start
    assert elapsed == pytest.approx(6.0)
    assert server.get("v1", "Node", "n1")["metadata"]["name"] == "n1"


async def test_server_errors_retry_reads_with_capped_backoff(
    server: ApiServer,
    kube: KubeClient,
    autojump_clock: trio.testing.MockClock,
    metrics: ClientMetrics,
) -> None:
    """A 503 on a read is retried after 0.2, 0.4, 0.8 s; the retries are counted."""
    server.faults.inject_error(503, verb="get", resource="nodes", count=3)
    await kube.create(NODES, _node("n1"))
    with trio.fail_after(60):
        start = trio.current_time()
        await kube.get(NODES, "n1", type=Node)
    assert trio.current_time() - start == pytest.approx(1.4)
    assert metrics.retries.labels("503", "GET", "emulator")._value.get() == 3


async def test_server_errors_on_writes_are_not_retried(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """A 500 on a non-idempotent write surfaces at once as ServerError."""
    server.faults.inject_error(500, verb="create", resource="nodes", count=1)
    with trio.fail_after(60), pytest.raises(ServerError) as caught:
        await kube.create(NODES, _node("n1"))
    assert caught.value.code == 500
    assert trio.current_time() == 0


async def test_retries_give_up(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """After five retries the last error is raised."""
    server.faults.inject_error(429, verb="get", resource="nodes", retry_after_s=1)
    await kube.create(NODES, _node("n1"))
    with trio.fail_after(60), pytest.raises(TooManyRequestsError):
        await kube.get(NODES, "n1")
    assert trio.current_time() == pytest.approx(5.0)


async def test_refused_connections_are_retried_then_explained(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """Reads ride out a short outage; a long one ends in a readable KubeConnectionError."""
    await kube.create(NODES, _node("n1"))
    server.faults.refuse_connections(1.0)
    with trio.fail_after(60):
        await kube.get(NODES, "n1")
        recovered_at = trio.current_time()
        server.faults.refuse_connections(100.0)
        with pytest.raises(KubeConnectionError) as caught:
            await kube.get(NODES, "n1")
    assert recovered_at == pytest.approx(1.4)  # retries at 0.2, 0.6 and 1.4
    assert "refused" in str(caught.value)
    assert "GET /api/v1/nodes/n1" in str(caught.value)


async def test_token_bucket_paces_requests(
    server: ApiServer, autojump_clock: trio.testing.MockClock, metrics: ClientMetrics
) -> None:
    """qps 5 / burst 2: two requests at once, then one every 0.2 s."""
    finished: list[float] = []
    async with open_kube_client(
        emulator_connection(), transport=server.transport(), qps=5, burst=2, metrics=metrics
    ) as client:
        with trio.fail_after(60):
            for _ in range(5):
                await client.get(SERVICES, "kubernetes", namespace="default")
                finished.append(trio.current_time())
    assert finished == pytest.approx([0.0, 0.0, 0.2, 0.4, 0.6])
    histogram = metrics.rate_limiter.labels("GET", "emulator")
    assert histogram._sum.get() == pytest.approx(0.6)


async def test_request_metrics_count_each_request_by_code_and_verb(
    server: ApiServer, kube: KubeClient, metrics: ClientMetrics
) -> None:
    """Every request is counted under its code and verb, and timed under its verb."""
    await kube.create(NODES, _node("n1"))
    with trio.fail_after(60):
        for _ in range(3):
            await kube.get(NODES, "n1")
        with pytest.raises(NotFoundError):
            await kube.get(NODES, "absent")
    assert metrics.requests.labels("200", "GET", "emulator")._value.get() == 3
    assert metrics.requests.labels("404", "GET", "emulator")._value.get() == 1
    assert metrics.requests.labels("201", "POST", "emulator")._value.get() == 1
    timed = {
        sample.labels["verb"]: sample.value
        for family in metrics.duration.collect()
        for sample in family.samples
        if sample.name.endswith("_count")
    }
    assert timed == {"GET": 4, "POST": 1}


class _Recorder(httpx.AsyncBaseTransport):
    """Passes requests on to the emulator and remembers their headers."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.headers: list[httpx.Headers] = []
        self.urls: list[httpx.URL] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.headers.append(request.headers)
        self.urls.append(request.url)
        return await self.inner.handle_async_request(request)


class _RotatingToken(Credentials):
    """Hands out a stale token until told it was rejected."""

    def __init__(self) -> None:
        self.invalidated = 0

    async def get(self) -> ClientIdentity:
        return ClientIdentity(token="good" if self.invalidated else "stale")

    def invalidate(self) -> None:
        self.invalidated += 1


async def test_requests_carry_the_url_and_headers_httpx_would_build(server: ApiServer) -> None:
    """A request's URL (base path, query) and headers are those httpx's `build_request`
    makes for the same call."""
    recorder = _Recorder(server.transport())
    config = ConnectionConfig(
        server="http://emulator/prefix/",
        credentials=StaticCredentials(token="t"),
        source="the test",
    )
    async with open_kube_client(config, transport=recorder, qps=0, component="c") as client:
        with trio.fail_after(60), contextlib.suppress(NotFoundError):
            await client.list(NODES, type=Node, label_selector="a=b", limit=5)
    reference = httpx.AsyncClient(
        base_url="http://emulator/prefix/",
        headers={"User-Agent": client.user_agent, "Accept": "application/json"},
    )
    expected = reference.build_request(
        "GET",
        "/api/v1/nodes",
        params={"labelSelector": "a=b", "limit": "5"},
        headers={"Authorization": "Bearer t"},
    )
    await reference.aclose()
    assert len(recorder.headers) == 1
    assert recorder.urls == [expected.url]
    assert list(recorder.headers[0].multi_items()) == list(expected.headers.multi_items())


async def test_user_agent_and_refresh_after_401() -> None:
    """Requests carry trio-ccm's user agent; a 401 refreshes the credentials once."""
    server = ApiServer(seed=1, admin_token="good")
    recorder = _Recorder(server.transport())
    credentials = _RotatingToken()
    config = ConnectionConfig(server="http://emulator", credentials=credentials)
    async with open_kube_client(
        config, transport=recorder, component="cloud-node-controller", qps=0
    ) as client:
        with trio.fail_after(5):
            await client.list(NODES, type=Node)
    assert credentials.invalidated == 1
    assert [h["authorization"] for h in recorder.headers] == ["Bearer stale", "Bearer good"]
    assert recorder.headers[0]["user-agent"].startswith("trio-ccm/")
    assert recorder.headers[0]["user-agent"].endswith("(cloud-node-controller)")


async def test_watch_streams_events_and_raises_gone(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """A watch yields events in order; an expired version raises GoneError."""
    await kube.create(NODES, _node("n1"))
    rv = (await kube.list(NODES, type=Node)).metadata.resource_version
    seen: list[tuple[str, str]] = []
    with trio.fail_after(60):
        async with kube.watch(NODES, resource_version=rv, timeout_s=30) as events:
            await kube.patch(NODES, "n1", patches.set_labels({"a": "b"}))
            await kube.delete(NODES, "n1")
            async for event in events:
                node = kube.decode(event.object, Node)
                seen.append((event.type, node.metadata.name))
                if event.type == "DELETED":
                    break
        server.store.compact()

        async def consume() -> None:
            async with kube.watch(NODES, resource_version=rv, timeout_s=30) as events:
                async for _ in events:
                    pass

        with pytest.raises(GoneError):
            await consume()
    assert seen == [("MODIFIED", "n1"), ("DELETED", "n1")]


async def test_a_typed_watch_decodes_each_object_with_its_line(
    server: ApiServer, kube: KubeClient, autojump_clock: trio.testing.MockClock
) -> None:
    """`watch_as` yields events whose objects are already decoded as the type asked; an
    expired version still raises GoneError, and an object of the wrong shape raises
    KubeDecodeError naming the type."""
    await kube.create(NODES, _node("n1"))
    rv = (await kube.list(NODES, type=Node)).metadata.resource_version
    seen: list[tuple[str, str]] = []
    with trio.fail_after(60):
        async with kube.watch_as(NODES, Node, resource_version=rv, timeout_s=30) as events:
            await kube.patch(NODES, "n1", patches.set_labels({"a": "b"}))
            async for event in events:
                seen.append((event.type, event.object.metadata.labels["a"]))
                break
        assert seen == [("MODIFIED", "b")]

        async def consume(kind: type[Any], version: str) -> None:
            async with kube.watch_as(NODES, kind, resource_version=version, timeout_s=30) as got:
                async for _ in got:
                    pass

        class Wrong(msgspec.Struct):
            metadata: int

        with pytest.raises(KubeDecodeError, match="does not decode as Wrong"):
            await consume(Wrong, rv)
        server.store.compact()
        with pytest.raises(GoneError):
            await consume(Node, rv)


async def test_guarded_finalizer_patch_fails_on_concurrent_change(kube: KubeClient) -> None:
    """A finalizer patch built from a stale view is refused (422) instead of clobbering."""
    with trio.fail_after(5):
        await kube.create(NODES, _node("n1"))
        seen = await kube.get(NODES, "n1", type=Node)
        await kube.patch(NODES, "n1", patches.add_finalizer(seen.metadata.finalizers, "a/x"))
        with pytest.raises(InvalidError):
            await kube.patch(NODES, "n1", patches.add_finalizer(seen.metadata.finalizers, "b/y"))
        fresh = await kube.get(NODES, "n1", type=Node)
        await kube.patch(NODES, "n1", patches.add_finalizer(fresh.metadata.finalizers, "b/y"))
        final = await kube.get(NODES, "n1", type=Node)
        await kube.patch(NODES, "n1", patches.remove_finalizer(final.metadata.finalizers, "a/x"))
        after = await kube.get(NODES, "n1", type=Node)
    assert final.metadata.finalizers == ("a/x", "b/y")
    assert after.metadata.finalizers == ("b/y",)


async def test_untrusted_tls_is_explained(nursery: trio.Nursery) -> None:
    """A server certificate from an unknown CA gives a message naming the fix."""
    from trio_ccm.kube.config import StaticCredentials

    listening = await nursery.start(functools.partial(serve_apiserver, ApiServer(), tls=True))
    config = ConnectionConfig(
        server=listening.url,
        credentials=StaticCredentials(),
        source="kubeconfig /tmp/k (context emulator)",
    )
    async with open_kube_client(config) as client:
        with trio.fail_after(20), pytest.raises(KubeConnectionError) as caught:
            await client.list(NODES, type=Node)
    message = str(caught.value)
    assert "not trusted" in message
    assert "certificate-authority in kubeconfig /tmp/k (context emulator)" in message


async def test_last_finalizer_removed_then_added_again(kube: KubeClient) -> None:
    """Removing the last finalizer leaves none (not an empty list), so a guarded add works."""
    with trio.fail_after(5):
        await kube.create(NODES, _node("n1"))
        await kube.patch(NODES, "n1", patches.add_finalizer((), "a/x"))
        await kube.patch(NODES, "n1", patches.remove_finalizer(("a/x",), "a/x"))
        raw = await kube.get(NODES, "n1")
        await kube.patch(NODES, "n1", patches.add_finalizer((), "b/y"))
        again = await kube.get(NODES, "n1", type=Node)
    assert "finalizers" not in raw["metadata"]
    assert again.metadata.finalizers == ("b/y",)
