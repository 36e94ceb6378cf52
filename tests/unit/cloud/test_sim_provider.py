"""The `sim` provider against the simulated cloud's in-process transport."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest
import trio
import trio.testing

from trio_ccm.cloud.provider import (
    CloudProvider,
    InstanceChanges,
    InstanceMetadata,
    InstanceNotFoundError,
    Instances,
    InvalidProviderIDError,
    LoadBalancerIngress,
    LoadBalancers,
    LoadBalancerStatus,
    NodeAddress,
    NodeInfo,
    OutcomeUnknownError,
    Route,
    Routes,
    ServiceInfo,
    ServicePort,
    StaleCursorError,
    ThrottledError,
    bulk_instances,
    change_feed,
)
from trio_ccm.cloud.sim import (
    SimCloudError,
    SimInstances,
    SimProvider,
    default_load_balancer_name,
)
from trio_ccm.cloud.sim.instances import BULK_QUERY_LIMIT
from trio_ccm.cloud.sim.wire import InstanceListWire
from trio_ccm.errors import RetryAfter
from trio_ccm_testbed.cloud import SimCloud

LIMIT_S = 600  # virtual seconds: a hang fails fast under the autojump clock
CLUSTER = "kubernetes"
UID = "4f6c1a2b-9d3e-4a5f-8b7c-0d1e2f3a4b5c"


@pytest.fixture
def cloud() -> SimCloud:
    return SimCloud(seed=1)


@pytest.fixture
async def provider(cloud: SimCloud) -> AsyncIterator[SimProvider]:
    provider = SimProvider(url="http://sim-cloud", replica="ccm-0", transport=cloud.transport())
    try:
        yield provider
    finally:
        await provider.aclose()


def _service(uid: str = UID, *, ip: str = "") -> ServiceInfo:
    return ServiceInfo(
        namespace="default",
        name="web",
        uid=uid,
        ports=(ServicePort("http", "TCP", 80, 30080), ServicePort("dns", "UDP", 53, 30053)),
        load_balancer_ip=ip,
    )


def _instances(provider: SimProvider) -> SimInstances:
    assert isinstance(provider.instances, SimInstances)
    return provider.instances


# ---------------------------------------------------------------- shape


async def test_provider_satisfies_the_protocols(provider: SimProvider) -> None:
    """SimProvider is a CloudProvider with instances (also bulk), load balancers and routes."""
    assert isinstance(provider, CloudProvider)
    assert provider.name == "sim"
    assert isinstance(provider.instances, Instances)
    assert bulk_instances(provider.instances) is not None
    assert isinstance(provider.load_balancers, LoadBalancers)
    assert isinstance(provider.routes, Routes)
    assert provider.routes.enable_node_addresses is False


async def test_initialize_checks_the_cloud_answers(cloud: SimCloud, provider: SimProvider) -> None:
    """The first initialize() asks /v1/health; a failing cloud gives an error naming its URL
    (a wrong URL in the cloud config stops the process with the fix)."""
    cloud.faults.error("Health", status=503, count=1)
    with trio.fail_after(LIMIT_S):
        with pytest.raises(SimCloudError, match=r"sim cloud at http://sim-cloud is not usable"):
            await provider.initialize()
        await provider.initialize()
    assert [(c.method, c.replica, c.status) for c in cloud.calls] == [
        ("Health", "ccm-0", 503),
        ("Health", "ccm-0", 200),
    ]


async def test_a_later_initialize_waits_out_a_busy_cloud(
    cloud: SimCloud, provider: SimProvider, autojump_clock: trio.testing.MockClock
) -> None:
    """Once the cloud has answered, a later term's initialize() retries 5xx answers with
    capped backoff (1 s, 2 s, ...) and returns when the cloud answers; a 4xx still raises."""
    with trio.fail_after(LIMIT_S):
        await provider.initialize()
        cloud.faults.error("Health", status=503, count=3)
        started = trio.current_time()
        await provider.initialize()
        assert trio.current_time() - started == 1 + 2 + 4
        cloud.faults.error("Health", status=404, count=1)
        with pytest.raises(SimCloudError, match="not usable"):
            await provider.initialize()
    assert [c.status for c in cloud.calls] == [200, 503, 503, 503, 200, 404]


# ---------------------------------------------------------------- instances


async def test_metadata_by_name_then_by_provider_id(cloud: SimCloud, provider: SimProvider) -> None:
    """A Node without provider ID is found by name; with one, by its instance ID alone."""
    node = cloud.add_instance(
        "n1",
        instance_type="sim.large",
        zone="sim-region-1b",
        internal_ips=["10.0.5.1", "10.0.5.2"],
        external_ips=["198.51.100.1"],
        hostname="n1.internal",
    )
    with trio.fail_after(LIMIT_S):
        by_name = await _instances(provider).instance_metadata(NodeInfo(name="n1"))
        by_id = await _instances(provider).instance_metadata(
            NodeInfo(name="renamed", provider_id=by_name.provider_id)
        )
    expected = InstanceMetadata(
        provider_id=f"sim://sim-region-1b/{node.id}",
        instance_type="sim.large",
        node_addresses=(
            NodeAddress("InternalIP", "10.0.5.1"),
            NodeAddress("InternalIP", "10.0.5.2"),
            NodeAddress("ExternalIP", "198.51.100.1"),
            NodeAddress("Hostname", "n1.internal"),
        ),
        zone="sim-region-1b",
        region="sim-region-1",
        shutdown=False,
    )
    assert by_name == expected
    assert by_id == expected
    assert [(c.method, c.target) for c in cloud.calls] == [
        ("ListInstances", "name=n1"),
        ("GetInstance", node.id),
    ]


async def test_missing_instances_raise_not_found(cloud: SimCloud, provider: SimProvider) -> None:
    """No instance by name or provider ID: InstanceNotFoundError, exists False, shutdown False."""
    nodes = [NodeInfo(name="ghost"), NodeInfo(name="n1", provider_id="sim://z/i-deadbeef")]
    with trio.fail_after(LIMIT_S):
        for node in nodes:
            with pytest.raises(InstanceNotFoundError, match=f"Node {node.name}"):
                await _instances(provider).instance_metadata(node)
            assert await _instances(provider).instance_exists(node) is False
            assert await _instances(provider).instance_shutdown(node) is False


async def test_provider_id_lookup_never_falls_back_to_the_name(
    cloud: SimCloud, provider: SimProvider
) -> None:
    """A Node whose instance was replaced by a namesake is gone: provider IDs are not reused."""
    old = cloud.add_instance("n1")
    node = NodeInfo(name="n1", provider_id=f"sim://sim-region-1a/{old.id}")
    cloud.terminate(old.id)
    cloud.add_instance("n1")
    with trio.fail_after(LIMIT_S):
        assert await _instances(provider).instance_exists(node) is False
        assert await _instances(provider).instance_exists(NodeInfo(name="n1")) is True


async def test_stopped_and_terminated_semantics(autojump_clock: trio.testing.MockClock) -> None:
    """Stopped: exists and shut down; terminated (even while still listed): gone."""
    cloud = SimCloud(seed=1, terminated_retention_s=60.0)
    provider = SimProvider(url="http://c", replica="r", transport=cloud.transport())
    stopped, terminated = cloud.add_instance("stopped"), cloud.add_instance("terminated")
    cloud.stop(stopped.id)
    cloud.terminate(terminated.id)
    by_name = [NodeInfo(name="stopped"), NodeInfo(name="terminated")]
    by_id = [
        NodeInfo(name="stopped", provider_id=f"sim://sim-region-1a/{stopped.id}"),
        NodeInfo(name="terminated", provider_id=f"sim://sim-region-1a/{terminated.id}"),
    ]
    with trio.fail_after(LIMIT_S):
        for stopped_node, terminated_node in (by_name, by_id):
            assert await _instances(provider).instance_exists(stopped_node) is True
            assert await _instances(provider).instance_shutdown(stopped_node) is True
            metadata = await _instances(provider).instance_metadata(stopped_node)
            assert metadata.shutdown is True
            assert await _instances(provider).instance_exists(terminated_node) is False
            assert await _instances(provider).instance_shutdown(terminated_node) is False
            with pytest.raises(InstanceNotFoundError):
                await _instances(provider).instance_metadata(terminated_node)
        bulk = await _instances(provider).instances_metadata(by_name + by_id)
    assert list(bulk) == ["stopped"]
    await provider.aclose()


async def test_bulk_metadata_is_one_call(cloud: SimCloud, provider: SimProvider) -> None:
    """instances_metadata answers for every Node in one ListInstances call, absent ones omitted."""
    one, two = cloud.add_instance("n1"), cloud.add_instance("n2", zone="sim-region-1c")
    cloud.add_instance("unrelated")
    nodes = [
        NodeInfo(name="n1"),
        NodeInfo(name="n2", provider_id=f"sim://sim-region-1c/{two.id}"),
        NodeInfo(name="ghost"),
        NodeInfo(name="foreign", provider_id="aws:///us-east-1a/i-0123"),
    ]
    with trio.fail_after(LIMIT_S):
        answer = await _instances(provider).instances_metadata(nodes)
        nothing = await _instances(provider).instances_metadata([])
    assert sorted(answer) == ["n1", "n2"]
    assert answer["n1"].provider_id == f"sim://sim-region-1a/{one.id}"
    assert answer["n2"].zone == "sim-region-1c"
    assert nothing == {}
    assert [(c.method, c.target) for c in cloud.calls] == [
        ("ListInstances", f"ids={two.id}&names=n1,ghost")
    ]


async def test_bulk_metadata_for_many_nodes_lists_everything(
    cloud: SimCloud, provider: SimProvider
) -> None:
    """When the names would make a long query, the one bulk call lists every instance."""
    count = BULK_QUERY_LIMIT // 20  # names of 27 characters and a comma: over the limit
    names = [f"node-with-a-long-name-{i:05d}" for i in range(count)]
    for name in names:
        cloud.add_instance(name)
    with trio.fail_after(LIMIT_S):
        answer = await _instances(provider).instances_metadata([NodeInfo(name=n) for n in names])
    assert len(answer) == count
    assert [(c.method, c.target) for c in cloud.calls] == [("ListInstances", "")]


async def test_changes_since_a_cursor_are_the_changed_instances(
    cloud: SimCloud, provider: SimProvider
) -> None:
    """The change feed: a cursor first (one call, no instances), then exactly the live
    instances changed after it, keyed by provider ID, with the cursor to ask from next."""
    one, two = cloud.add_instance("n1"), cloud.add_instance("n2")
    instances = _instances(provider)
    assert change_feed(instances) is instances
    with trio.fail_after(LIMIT_S):
        cursor = await instances.instances_cursor()
        unchanged = await instances.instances_changed_since(cursor)
        cloud.set_addresses(two.id, internal=["10.9.9.9"])
        cloud.terminate(one.id)  # gone: not reported (the lifecycle controller finds it)
        changes = await instances.instances_changed_since(unchanged.cursor)
    assert unchanged == InstanceChanges(cursor=cursor, changed={})
    assert list(changes.changed) == [f"sim://sim-region-1a/{two.id}"]
    assert changes.changed[f"sim://sim-region-1a/{two.id}"].node_addresses[0] == NodeAddress(
        "InternalIP", "10.9.9.9"
    )
    assert int(changes.cursor) > int(cursor)
    assert [(c.method, c.target) for c in cloud.calls] == [
        ("ListInstanceChanges", ""),
        ("ListInstanceChanges", cursor),
        ("ListInstanceChanges", cursor),
    ]


async def test_a_cursor_the_cloud_cannot_answer_is_stale(
    cloud: SimCloud, provider: SimProvider
) -> None:
    """A cursor that is no revision (refused before any call), or one ahead of a restarted
    cloud (its 410), is a StaleCursorError."""
    cloud.add_instance("n1")
    instances = _instances(provider)
    with trio.fail_after(LIMIT_S):
        with pytest.raises(StaleCursorError, match="not a revision"):
            await instances.instances_changed_since("yesterday")
        assert cloud.calls == []
        with pytest.raises(StaleCursorError, match="ahead of this cloud's 1"):
            await instances.instances_changed_since("42")


@pytest.mark.parametrize(
    ("body", "match"),
    [
        pytest.param(
            {"revision": 3, "instances": []}, "older than the 7 asked from", id="backwards"
        ),
        pytest.param({"revision": -1, "instances": []}, "unreadable answer", id="negative"),
        pytest.param({"instances": []}, "unreadable answer", id="no-revision"),
    ],
)
async def test_a_garbage_change_answer_is_a_sim_cloud_error(
    body: dict[str, object], match: str
) -> None:
    """An answer of the change log that cannot be trusted is a SimCloudError naming it."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=body))
    provider = SimProvider(url="http://c", replica="r", transport=transport)
    with trio.fail_after(LIMIT_S), pytest.raises(SimCloudError, match=match):
        await _instances(provider).instances_changed_since("7")
    await provider.aclose()


async def test_foreign_provider_id_is_an_error(provider: SimProvider, cloud: SimCloud) -> None:
    """A Node registered by another cloud is neither found nor declared gone: an
    InvalidProviderIDError, raised before any cloud call."""
    node = NodeInfo(name="n1", provider_id="aws:///us-east-1a/i-0123")
    with (
        trio.fail_after(LIMIT_S),
        pytest.raises(InvalidProviderIDError, match="not a sim provider ID"),
    ):
        await _instances(provider).instance_exists(node)
    assert cloud.calls_by() == []


async def test_consistency_delay_hides_new_instances_from_the_provider(
    autojump_clock: trio.testing.MockClock, cloud: SimCloud, provider: SimProvider
) -> None:
    """Under eventual consistency a new instance is not found until the delay is over."""
    cloud.faults.consistency_delay_s = 5.0
    cloud.add_instance("n1")
    with trio.fail_after(LIMIT_S):
        with pytest.raises(InstanceNotFoundError):
            await _instances(provider).instance_metadata(NodeInfo(name="n1"))
        assert await _instances(provider).instances_metadata([NodeInfo(name="n1")]) == {}
        await trio.sleep(5.0)
        found = await _instances(provider).instance_metadata(NodeInfo(name="n1"))
    assert found.instance_type == "sim.small"


# ---------------------------------------------------------------- errors


async def test_throttling_maps_to_throttled_error(
    autojump_clock: trio.testing.MockClock, cloud: SimCloud, provider: SimProvider
) -> None:
    """A 429 becomes ThrottledError with the cloud's Retry-After; after it, the call passes."""
    cloud.add_instance("n1")
    cloud.faults.throttle("instances", rate_per_s=0.5, burst=2)
    node = NodeInfo(name="n1")
    with trio.fail_after(LIMIT_S):
        await _instances(provider).instance_exists(node)
        await _instances(provider).instance_exists(node)
        with pytest.raises(ThrottledError) as caught:
            await _instances(provider).instance_exists(node)
        await trio.sleep(caught.value.retry_after_s or 0)
        assert await _instances(provider).instance_exists(node) is True
    assert caught.value.retry_after_s == 2.0
    assert isinstance(caught.value.__cause__, httpx.HTTPStatusError)
    assert trio.current_time() == 2.0
    assert [c.status for c in cloud.calls] == [200, 200, 429, 200]


@pytest.mark.parametrize("status", [500, 502, 503, 409, 400])
async def test_other_errors_map_to_sim_cloud_error(
    cloud: SimCloud, provider: SimProvider, status: int
) -> None:
    """Other error statuses become SimCloudError naming the method, the target and the status."""
    cloud.faults.error("GetInstance", status=status)
    node = NodeInfo(name="n1", provider_id="sim://z/i-00c0ffee")
    with trio.fail_after(LIMIT_S), pytest.raises(SimCloudError) as caught:
        await _instances(provider).instance_exists(node)
    error = caught.value
    assert (error.method, error.target, error.status) == ("GetInstance", "i-00c0ffee", status)
    assert f"sim cloud GetInstance i-00c0ffee: {status} " in str(error)
    assert "injected fault" in str(error)
    assert isinstance(error.__cause__, httpx.HTTPStatusError)


async def test_connection_errors_map_to_sim_cloud_error() -> None:
    """A transport failure becomes SimCloudError saying the cloud did not answer, and why."""

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    provider = SimProvider(
        url="http://127.0.0.1:9", replica="r", transport=httpx.MockTransport(refuse)
    )
    assert provider.load_balancers is not None
    with trio.fail_after(LIMIT_S), pytest.raises(SimCloudError) as caught:
        await provider.load_balancers.get_load_balancer(CLUSTER, _service())
    await provider.aclose()
    assert "no answer from http://127.0.0.1:9 (ConnectError: [Errno 111]" in str(caught.value)
    assert caught.value.status is None
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


async def test_unreadable_answer_is_a_sim_cloud_error() -> None:
    """An answer that is not the cloud's JSON becomes SimCloudError, not a crash."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text="<html>"))
    provider = SimProvider(url="http://c", replica="r", transport=transport)
    assert provider.routes is not None
    with trio.fail_after(LIMIT_S), pytest.raises(SimCloudError, match="unreadable answer"):
        await provider.routes.list_routes(CLUSTER)
    await provider.aclose()


async def test_every_request_names_the_replica(cloud: SimCloud) -> None:
    """Two providers with different replicas are told apart in the call log."""
    cloud.add_instance("n1")
    providers = [
        SimProvider(url="http://c", replica=name, transport=cloud.transport())
        for name in ("ccm-a", "ccm-b")
    ]
    with trio.fail_after(LIMIT_S):
        for provider in providers:
            await _instances(provider).instance_exists(NodeInfo(name="n1"))
        assert providers[1].routes is not None
        await providers[1].routes.list_routes(CLUSTER)
        for provider in providers:
            await provider.aclose()
    assert [c.method for c in cloud.calls_by(replica="ccm-a")] == ["ListInstances"]
    assert [c.method for c in cloud.calls_by(replica="ccm-b")] == ["ListInstances", "ListRoutes"]


async def test_client_is_reopened_after_aclose(cloud: SimCloud, provider: SimProvider) -> None:
    """aclose() closes the HTTP client; the next call opens a new one."""
    with trio.fail_after(LIMIT_S):
        await provider.initialize()
        await provider.aclose()
        await provider.aclose()
        await provider.initialize()
    assert len(cloud.calls) == 2


# ---------------------------------------------------------------- load balancers


def test_load_balancer_name_is_upstreams_default() -> None:
    """The name is "a" + the Service UID without dashes, cut to 32 characters."""
    assert default_load_balancer_name(_service()) == "a4f6c1a2b9d3e4a5f8b7c0d1e2f3a4b5"
    assert default_load_balancer_name(_service(uid="1-2")) == "a12"
    provider = SimProvider(url="http://c", replica="r")
    assert provider.load_balancers is not None
    assert provider.load_balancers.load_balancer_name(CLUSTER, _service()) == (
        "a4f6c1a2b9d3e4a5f8b7c0d1e2f3a4b5"
    )


async def test_load_balancer_lifecycle(cloud: SimCloud, provider: SimProvider) -> None:
    """ensure creates, get reads, update changes backends, delete removes (idempotently)."""
    lbs = provider.load_balancers
    assert lbs is not None
    service = _service()
    name = lbs.load_balancer_name(CLUSTER, service)
    with trio.fail_after(LIMIT_S):
        before = await lbs.get_load_balancer(CLUSTER, service)
        ensured = await lbs.ensure_load_balancer(
            CLUSTER, service, [NodeInfo(name="n2"), NodeInfo(name="n1")]
        )
        got = await lbs.get_load_balancer(CLUSTER, service)
        await lbs.update_load_balancer(CLUSTER, service, [NodeInfo(name="n3")])
        stored = cloud.load_balancer(name)
        await lbs.ensure_load_balancer_deleted(CLUSTER, service)
        await lbs.ensure_load_balancer_deleted(CLUSTER, service)
        after = await lbs.get_load_balancer(CLUSTER, service)
    expected = LoadBalancerStatus((LoadBalancerIngress(ip="203.0.113.1"),))
    assert (before, ensured, got, after) == (None, expected, expected, None)
    assert stored is not None
    assert stored.nodes == ("n3",)
    assert stored.service == "default/web"
    assert [(p.protocol, p.port, p.node_port) for p in stored.ports] == [
        ("TCP", 80, 30080),
        ("UDP", 53, 30053),
    ]
    assert [c.method for c in cloud.calls] == [
        "GetLoadBalancer",
        "PutLoadBalancer",
        "GetLoadBalancer",
        "SetLoadBalancerBackends",
        "DeleteLoadBalancer",
        "DeleteLoadBalancer",
        "GetLoadBalancer",
    ]
    assert cloud.calls[1].target == f"{CLUSTER}/{name}"


async def test_load_balancer_ip_and_hostname(provider: SimProvider) -> None:
    """A requested loadBalancerIP is used; a taken one is a SimCloudError with status 409."""
    lbs = provider.load_balancers
    assert lbs is not None
    with trio.fail_after(LIMIT_S):
        first = await lbs.ensure_load_balancer(CLUSTER, _service(ip="203.0.113.77"), [])
        with pytest.raises(SimCloudError, match=r"203\.0\.113\.77 is in use") as caught:
            await lbs.ensure_load_balancer(CLUSTER, _service(uid="other", ip="203.0.113.77"), [])
    assert first.ingress[0].ip == "203.0.113.77"
    assert caught.value.status == 409


async def test_updating_a_missing_load_balancer_fails(provider: SimProvider) -> None:
    """update_load_balancer on a load balancer that does not exist is an error (404)."""
    assert provider.load_balancers is not None
    with trio.fail_after(LIMIT_S), pytest.raises(SimCloudError) as caught:
        await provider.load_balancers.update_load_balancer(CLUSTER, _service(), [])
    assert (caught.value.status, caught.value.code) == (404, "NotFound")


async def test_provisioning_maps_to_retry_after(autojump_clock: trio.testing.MockClock) -> None:
    """While provisioning, ensure raises RetryAfter(remaining) and get shows no ingress."""
    cloud = SimCloud(seed=1, lb_provisioning_s=30.0, lb_hostnames=True)
    provider = SimProvider(url="http://c", replica="r", transport=cloud.transport())
    lbs = provider.load_balancers
    assert lbs is not None
    service = _service()
    delays = []
    with trio.fail_after(LIMIT_S):
        while True:
            try:
                status = await lbs.ensure_load_balancer(CLUSTER, service, [])
            except RetryAfter as exc:
                delays.append((trio.current_time(), exc.delay_s))
                pending = await lbs.get_load_balancer(CLUSTER, service)
                await trio.sleep(min(exc.delay_s, 20.0))
            else:
                break
    await provider.aclose()
    assert delays == [(0.0, 30.0), (20.0, 10.0)]
    assert pending == LoadBalancerStatus()
    name = default_load_balancer_name(service)
    assert status == LoadBalancerStatus(
        (LoadBalancerIngress(ip="203.0.113.1", hostname=f"{name}.sim-region-1.lb.sim"),)
    )
    assert trio.current_time() == 30.0


# ---------------------------------------------------------------- routes


async def test_route_lifecycle(cloud: SimCloud, provider: SimProvider) -> None:
    """create_route names routes <cluster>-<hint>; list shows them; delete by name or CIDR."""
    routes = provider.routes
    assert routes is not None
    cloud.add_instance("n1")
    node_uid = "0b1c2d3e-0000-4000-8000-000000000001"
    with trio.fail_after(LIMIT_S):
        await routes.create_route(CLUSTER, node_uid, Route("n1", "10.244.1.0/24"))
        await routes.create_route(CLUSTER, node_uid, Route("n1", "10.244.1.0/24"))
        await routes.create_route(CLUSTER, "", Route("n2", "10.244.2.0/24"))
        listed = await routes.list_routes(CLUSTER)
        with pytest.raises(SimCloudError, match="is taken by route") as caught:
            await routes.create_route(CLUSTER, "other", Route("n1", "10.244.1.0/24"))
        await routes.delete_route(CLUSTER, listed[0])
        await routes.delete_route(CLUSTER, listed[0])
        await routes.delete_route(CLUSTER, Route("n2", "10.244.2.0/24"))
        left = await routes.list_routes(CLUSTER)
    assert list(listed) == [
        Route("n1", "10.244.1.0/24", name=f"{CLUSTER}-{node_uid}"),
        Route("n2", "10.244.2.0/24", name=f"{CLUSTER}-n2", blackhole=True),
    ]
    assert caught.value.status == 409
    assert left == ()
    assert [c.target for c in cloud.calls_by(method="DeleteRoute")] == [
        f"{CLUSTER}/{CLUSTER}-{node_uid}",
        f"{CLUSTER}/{CLUSTER}-{node_uid}",
        f"{CLUSTER}/10.244.2.0/24",
    ]
    assert [c.status for c in cloud.calls_by(method="DeleteRoute")] == [204, 404, 204]


# -- unknown outcomes (issue 27) ---------------------------------------------------------
def _write_refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def _connection_lost(request: httpx.Request) -> httpx.Response:
    raise httpx.RemoteProtocolError("Server disconnected without sending a response.")


@pytest.mark.parametrize(
    ("handler", "unknown", "late_s"),
    [
        pytest.param(_write_refused, False, None, id="connect-error-is-clean"),
        pytest.param(_connection_lost, True, None, id="lost-after-sending-is-unknown"),
    ],
)
async def test_a_transport_failure_of_a_write_says_whether_it_was_sent(
    handler: object, unknown: bool, late_s: float | None
) -> None:
    """A write that could not connect failed cleanly; one whose connection broke after sending
    has an unknown outcome (OutcomeUnknownError)."""
    provider = SimProvider(
        url="http://127.0.0.1:9",
        replica="r",
        transport=httpx.MockTransport(handler),  # type: ignore[arg-type]
    )
    assert provider.load_balancers is not None
    with trio.fail_after(LIMIT_S), pytest.raises(SimCloudError) as caught:
        await provider.load_balancers.update_load_balancer(CLUSTER, _service(), [])
    await provider.aclose()
    assert isinstance(caught.value, OutcomeUnknownError) is unknown
    if unknown:
        assert isinstance(caught.value, OutcomeUnknownError)
        assert caught.value.late_landing_s == late_s  # the cloud did not say how long it holds


@pytest.mark.parametrize(
    ("method", "status", "unknown", "late_s"),
    [
        pytest.param("PutLoadBalancer", 500, True, 0.0, id="write-5xx-is-unknown"),
        pytest.param("PutLoadBalancer", 503, True, 0.0, id="write-503-is-unknown"),
        pytest.param("PutLoadBalancer", 409, False, None, id="write-4xx-is-clean"),
        pytest.param("GetLoadBalancer", 500, False, None, id="read-5xx-is-clean"),
    ],
)
async def test_error_answers_of_writes_are_unknown_outcomes(
    cloud: SimCloud,
    provider: SimProvider,
    method: str,
    status: int,
    unknown: bool,
    late_s: float | None,
) -> None:
    """A 5xx to a write is an unknown outcome (nothing of it is still queued: 0 s to land);
    a 4xx, or any error of a read, is a clean failure."""
    cloud.faults.error(method, status=status)
    lbs = provider.load_balancers
    assert lbs is not None
    call = (
        lbs.get_load_balancer(CLUSTER, _service())
        if method == "GetLoadBalancer"
        else lbs.ensure_load_balancer(CLUSTER, _service(), [])
    )
    with trio.fail_after(LIMIT_S), pytest.raises(SimCloudError) as caught:
        await call
    assert caught.value.status == status
    assert isinstance(caught.value, OutcomeUnknownError) is unknown
    if isinstance(caught.value, OutcomeUnknownError):
        assert caught.value.late_landing_s == late_s


async def test_a_write_held_past_the_timeout_is_unknown_and_lands_late(
    autojump_clock: trio.testing.MockClock, cloud: SimCloud, provider: SimProvider
) -> None:
    """A write the cloud holds 25 s times out at 10 s as an unknown outcome that may land
    until 10 + 25 + 1 s after it started, and the cloud applies it at 25 s; a read held the
    same way is a clean failure."""
    cloud.faults.late("loadbalancers", delay_s=25.0)
    lbs = provider.load_balancers
    assert lbs is not None
    with trio.fail_after(LIMIT_S):
        with pytest.raises(OutcomeUnknownError) as caught:
            await lbs.ensure_load_balancer(CLUSTER, _service(), [])
        assert trio.current_time() == 10.0
        assert caught.value.late_landing_s == 36.0
        assert cloud.load_balancers() == []
        await trio.sleep_until(25.0)
        assert [lb.name for lb in cloud.load_balancers()] == [
            default_load_balancer_name(_service())
        ]
        with pytest.raises(SimCloudError) as read:
            await lbs.get_load_balancer(CLUSTER, _service())
        assert not isinstance(read.value, OutcomeUnknownError)


def test_an_instance_listing_decodes_to_nothing_the_collector_tracks() -> None:
    """A listing, decoded once per address-sync batch, is made of structs the garbage
    collector does not track (gc=False) and tuples (which it stops tracking at its first
    look), not of tracked structs and lists."""
    body = b'{"instances": [{"id": "i-1", "name": "n", "internalIPs": ["10.0.0.1"]}]}'
    listing = msgspec.json.decode(body, type=InstanceListWire)
    (instance,) = listing.instances
    assert instance.internal_ips == ("10.0.0.1",)
    assert not gc.is_tracked(listing)
    assert not gc.is_tracked(instance)
    gc.collect()
    assert not gc.is_tracked(listing.instances)
