"""The simulated cloud's core over its in-process transport: API, faults, call log, admin API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from trio_ccm_testbed.cloud import Call, SimApiError, SimCloud

LIMIT_S = 600  # virtual seconds: a hang fails fast under the autojump clock


@pytest.fixture
def cloud() -> SimCloud:
    return SimCloud(seed=1)


@pytest.fixture
async def client(cloud: SimCloud) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=cloud.transport(),
        base_url="http://sim-cloud",
        headers={"X-Sim-Replica": "test"},
    ) as c:
        yield c


def _lb_body(service: str = "default/web", **extra: Any) -> dict[str, Any]:
    ports = [{"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080}]
    return {"service": service, "ports": ports, "nodes": ["n2", "n1"], **extra}


# ---------------------------------------------------------------- instances


def test_instance_ids_and_addresses_are_deterministic() -> None:
    """The same seed gives the same instance IDs; internal IPs count up from 10.0.0.10."""
    first, second, other = SimCloud(seed=3), SimCloud(seed=3), SimCloud(seed=4)
    ids = [first.add_instance(f"n{i}").id for i in range(3)]
    assert ids == [second.add_instance(f"n{i}").id for i in range(3)]
    assert ids != [other.add_instance(f"n{i}").id for i in range(3)]
    assert all(len(i) == 10 and i.startswith("i-") and int(i[2:], 16) >= 0 for i in ids)
    assert [i.internal_ips for i in first.instances()] == [
        ("10.0.0.10",),
        ("10.0.0.11",),
        ("10.0.0.12",),
    ]


def test_add_instance_defaults_and_explicit_values(cloud: SimCloud) -> None:
    """Defaults: sim.small in zone <region>a, hostname = name, running, no external IP."""
    plain = cloud.add_instance("n1")
    assert (plain.instance_type, plain.zone, plain.region, plain.hostname, plain.state) == (
        "sim.small",
        "sim-region-1a",
        "sim-region-1",
        "n1",
        "running",
    )
    assert plain.external_ips == ()
    custom = cloud.add_instance(
        "n2",
        instance_type="sim.large",
        zone="sim-region-1c",
        internal_ips=["10.9.0.1", "10.9.0.2"],
        external_ips=["198.51.100.7"],
        hostname="n2.example",
        state="stopped",
    )
    assert custom.internal_ips == ("10.9.0.1", "10.9.0.2")
    assert custom.external_ips == ("198.51.100.7",)
    assert (custom.zone, custom.hostname, custom.state) == (
        "sim-region-1c",
        "n2.example",
        "stopped",
    )


@pytest.mark.parametrize(
    ("kwargs", "status", "message"),
    [
        pytest.param({"name": "n1"}, 409, "taken by", id="duplicate-name"),
        pytest.param({"name": ""}, 400, "needs a name", id="no-name"),
        pytest.param({"name": "x", "state": "terminated"}, 400, "running or stopped", id="state"),
        pytest.param({"name": "x", "internal_ips": ["nope"]}, 400, "not an IP", id="bad-ip"),
        pytest.param({"name": "x", "external_ips": "1.2.3.4"}, 400, "must be a list", id="str"),
    ],
)
def test_add_instance_refuses_bad_input(
    cloud: SimCloud, kwargs: dict[str, Any], status: int, message: str
) -> None:
    """Bad instances are refused with the status the admin API would answer."""
    cloud.add_instance("n1")
    name = kwargs.pop("name")
    with pytest.raises(SimApiError, match=message) as caught:
        cloud.add_instance(name, **kwargs)
    assert caught.value.status == status


async def test_list_and_get_instances(cloud: SimCloud, client: httpx.AsyncClient) -> None:
    """GET /v1/instances lists (filtered by name, names or ids); /v1/instances/{id} reads one."""
    a, b, c = (cloud.add_instance(n) for n in ("a", "b", "c"))
    with trio.fail_after(LIMIT_S):
        everything = (await client.get("/v1/instances")).json()
        by_names = (await client.get("/v1/instances", params={"names": "a,c"})).json()
        by_name = (await client.get("/v1/instances", params={"name": "b"})).json()
        union = (await client.get("/v1/instances", params={"names": "a", "ids": c.id})).json()
        one = await client.get(f"/v1/instances/{b.id}")
        missing = await client.get("/v1/instances/i-00000000")
    assert [i["name"] for i in everything["instances"]] == ["a", "b", "c"]
    assert [i["name"] for i in by_names["instances"]] == ["a", "c"]
    assert [i["id"] for i in by_name["instances"]] == [b.id]
    assert [i["name"] for i in union["instances"]] == ["a", "c"]
    assert one.json() == {
        "id": b.id,
        "name": "b",
        "instanceType": "sim.small",
        "zone": "sim-region-1a",
        "region": "sim-region-1",
        "internalIPs": ["10.0.0.11"],
        "externalIPs": [],
        "hostname": "b",
        "state": "running",
        "revision": 2,
    }
    assert missing.status_code == 404
    assert missing.json() == {
        "error": {"code": "NotFound", "message": "instance i-00000000 not found"}
    }
    assert a.id != c.id


async def test_stop_start_terminate_change_the_state(
    cloud: SimCloud, client: httpx.AsyncClient
) -> None:
    """Stop and start flip the state; terminated instances vanish at once and cannot start."""
    node = cloud.add_instance("n1")
    assert cloud.stop(node.id).state == "stopped"
    assert cloud.start(node.id).state == "running"
    assert cloud.terminate(node.id).state == "terminated"
    with trio.fail_after(LIMIT_S):
        gone = await client.get(f"/v1/instances/{node.id}")
    assert gone.status_code == 404
    assert cloud.instances() == []
    with pytest.raises(SimApiError, match="not found"):
        cloud.start(node.id)
    replacement = cloud.add_instance("n1")
    assert replacement.id != node.id


async def test_terminated_instances_linger_for_the_retention(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With terminated_retention_s=5 a terminated instance is listed as such until t=5."""
    cloud = SimCloud(seed=1, terminated_retention_s=5.0)
    async with httpx.AsyncClient(transport=cloud.transport(), base_url="http://c") as http:
        node = cloud.add_instance("n1")
        cloud.terminate(node.id)
        with pytest.raises(SimApiError, match="is terminated"):
            cloud.start(node.id)
        with trio.fail_after(LIMIT_S):
            await trio.sleep(4.999)
            lingering = await http.get(f"/v1/instances/{node.id}")
            await trio.sleep_until(5.0)
            gone = await http.get(f"/v1/instances/{node.id}")
    assert lingering.json()["state"] == "terminated"
    assert gone.status_code == 404


async def test_set_addresses_replaces_only_what_is_given(cloud: SimCloud) -> None:
    """set_addresses replaces internal and/or external IPs and keeps what is None."""
    node = cloud.add_instance("n1")
    changed = cloud.set_addresses(node.id, external=["198.51.100.1"])
    assert (changed.internal_ips, changed.external_ips) == (("10.0.0.10",), ("198.51.100.1",))
    changed = cloud.set_addresses(node.id, internal=["10.1.1.1", "fd00::1"])
    assert changed.internal_ips == ("10.1.1.1", "fd00::1")
    assert changed.external_ips == ("198.51.100.1",)


async def test_instance_changes_list_what_changed_after_a_revision(
    autojump_clock: trio.testing.MockClock, cloud: SimCloud, client: httpx.AsyncClient
) -> None:
    """/v1/instance-changes?since=R lists the instances changed after revision R (a launch,
    new addresses, a stop, becoming visible) with the revision to ask from next; without
    `since`, only the revision."""
    a, b = cloud.add_instance("a"), cloud.add_instance("b")
    with trio.fail_after(LIMIT_S):
        start = (await client.get("/v1/instance-changes")).json()
        nothing = (await client.get("/v1/instance-changes", params={"since": "2"})).json()
        cloud.set_addresses(b.id, internal=["10.9.9.9"])
        cloud.stop(a.id)
        cloud.stop(a.id)  # stopping a stopped instance changes nothing
        cloud.faults.consistency_delay_s = 5.0
        late = cloud.add_instance("late")
        before_visible = (await client.get("/v1/instance-changes", params={"since": "2"})).json()
        await trio.sleep(5.0)
        after_visible = (
            await client.get(
                "/v1/instance-changes", params={"since": str(before_visible["revision"])}
            )
        ).json()
    assert start == {"revision": 2, "instances": []}
    assert nothing == {"revision": 2, "instances": []}
    assert [(i["name"], i["revision"]) for i in before_visible["instances"]] == [("a", 4), ("b", 3)]
    assert before_visible["revision"] == 5
    assert [(i["id"], i["revision"]) for i in after_visible["instances"]] == [(late.id, 6)]
    assert after_visible["revision"] == 6


async def test_touched_since_lists_each_change_once_in_the_order_of_the_last(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """`touched_since(cursor)` gives each instance changed after the cursor once, in the
    order of its last change, as it is now (None once forgotten), and the next cursor: a
    launch, a stop, new addresses, becoming visible and being forgotten all count."""
    cloud = SimCloud(seed=1, terminated_retention_s=5.0)
    a, b, c = (cloud.add_instance(n) for n in ("a", "b", "c"))
    start = cloud.touches
    with trio.fail_after(LIMIT_S):
        cloud.stop(a.id)
        cloud.set_addresses(b.id, internal=["10.9.9.9"])
        cloud.start(a.id)
        cloud.stop(c.id)
        cloud.stop(c.id)  # stopping a stopped instance changes nothing
        middle, first = cloud.touched_since(start)
        cloud.faults.consistency_delay_s = 2.0
        late = cloud.add_instance("late")
        cloud.terminate(b.id)
        hidden_cursor, hidden = cloud.touched_since(middle)
        await trio.sleep(5.0)  # `late` becomes visible, `b` is forgotten
        end, after = cloud.touched_since(hidden_cursor)
        nothing = cloud.touched_since(end)
    assert [(i, found and found.state) for i, found in first.items()] == [
        (b.id, "running"),
        (a.id, "running"),
        (c.id, "stopped"),
    ]
    assert [(i, found and found.state) for i, found in hidden.items()] == [
        (late.id, "running"),
        (b.id, "terminated"),
    ]
    assert list(after) == [late.id, b.id]
    assert after[b.id] is None
    assert nothing == (end, {})
    assert end == cloud.touches > hidden_cursor > middle > start
    with pytest.raises(ValueError, match="ahead of this cloud"):
        cloud.touched_since(end + 1)


async def test_bulk_lookups_by_name_and_id_read_the_indexes_in_launch_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A bulk lookup answers the visible instances with a named name or id, oldest launch
    first: a terminated one still listed beside its namesake, none not yet visible, none
    forgotten, unknown names and ids skipped."""
    cloud = SimCloud(seed=1, terminated_retention_s=5.0)
    async with httpx.AsyncClient(transport=cloud.transport(), base_url="http://c") as http:
        a, b, c = (cloud.add_instance(n) for n in ("a", "b", "c"))
        cloud.terminate(a.id)
        a2 = cloud.add_instance("a")
        cloud.faults.consistency_delay_s = 2.0
        d = cloud.add_instance("d")
        query = {"names": "d,a,zz", "ids": f"{c.id},i-00000000,{b.id}"}
        with trio.fail_after(LIMIT_S):
            now = (await http.get("/v1/instances", params=query)).json()["instances"]
            await trio.sleep(5.0)
            later = (await http.get("/v1/instances", params=query)).json()["instances"]
            got = await http.get(f"/v1/instances/{d.id}")
    assert [(i["id"], i["state"]) for i in now] == [
        (a.id, "terminated"),
        (b.id, "running"),
        (c.id, "running"),
        (a2.id, "running"),
    ]
    assert [i["id"] for i in later] == [b.id, c.id, a2.id, d.id]
    assert got.json()["name"] == "d"


@pytest.mark.parametrize(
    ("batch", "status", "message"),
    [
        pytest.param([{"name": "n2"}, {"name": "n3", "state": "stopped"}], 201, "", id="launched"),
        pytest.param([{"name": "n2"}, {"name": "n1"}], 409, "n1 is taken", id="name-taken"),
        pytest.param([{"name": "n2"}, {"name": "n2"}], 400, "n2 is named twice", id="twice"),
        pytest.param([{"name": "n2"}, {"name": ""}], 400, "needs a name", id="no-name"),
        pytest.param(
            [{"name": "n2"}, {"name": "n3", "externalIPs": ["x"]}],
            400,
            "instance n3: external IP 'x' is not an IP address",
            id="bad-address",
        ),
        pytest.param([{"name": "n2", "state": "gone"}], 400, "must be running or", id="state"),
    ],
)
async def test_an_instance_batch_launches_all_or_none(
    cloud: SimCloud, client: httpx.AsyncClient, batch: list[Any], status: int, message: str
) -> None:
    """POST /_sim/instance-batches launches every instance of the batch in order (one call,
    as an autoscaler's burst), or none when any one is refused, naming it."""
    cloud.add_instance("n1")
    with trio.fail_after(LIMIT_S):
        response = await client.post("/_sim/instance-batches", json={"instances": batch})
    assert response.status_code == status
    names = [i.name for i in cloud.instances()]
    if status == 201:
        answered = response.json()["instances"]
        assert [(i["name"], i["state"]) for i in answered] == [
            ("n2", "running"),
            ("n3", "stopped"),
        ]
        assert names == ["n1", "n2", "n3"]
    else:
        assert message in response.json()["error"]["message"]
        assert names == ["n1"]


@pytest.mark.parametrize(
    ("since", "status", "message"),
    [
        pytest.param("x1", 400, "since='x1' is not a revision", id="not-a-number"),
        pytest.param("-1", 400, "since='-1' is not a revision", id="negative"),
        pytest.param("9", 410, "revision 9 is ahead of this cloud's 1", id="ahead-restarted"),
    ],
)
async def test_instance_changes_refuse_a_bad_revision(
    cloud: SimCloud, client: httpx.AsyncClient, since: str, status: int, message: str
) -> None:
    """A `since` that is no revision is a 400; one ahead of the cloud's (a restarted cloud)
    is a 410 telling the caller to list everything."""
    cloud.add_instance("a")
    with trio.fail_after(LIMIT_S):
        response = await client.get("/v1/instance-changes", params={"since": since})
    assert response.status_code == status
    assert message in response.json()["error"]["message"]


async def test_consistency_delay_hides_new_instances(
    autojump_clock: trio.testing.MockClock, cloud: SimCloud, client: httpx.AsyncClient
) -> None:
    """A new instance is invisible to lookups for consistency_delay_s, then appears."""
    cloud.faults.consistency_delay_s = 2.0
    with trio.fail_after(LIMIT_S):
        await trio.sleep(1.0)
        node = cloud.add_instance("n1")
        hidden = await client.get(f"/v1/instances/{node.id}")
        listed = (await client.get("/v1/instances")).json()["instances"]
        await trio.sleep_until(2.999)
        still_hidden = await client.get(f"/v1/instances/{node.id}")
        await trio.sleep_until(3.0)
        shown = await client.get(f"/v1/instances/{node.id}")
    assert (hidden.status_code, listed, still_hidden.status_code) == (404, [], 404)
    assert shown.status_code == 200
    assert [i.name for i in cloud.instances()] == ["n1"]


# ---------------------------------------------------------------- faults


async def test_throttle_is_a_token_bucket(
    autojump_clock: trio.testing.MockClock, cloud: SimCloud, client: httpx.AsyncClient
) -> None:
    """Burst 3 at 2/s: three calls pass, the fourth is 429 with Retry-After 0.5, refilled at 0.5."""
    cloud.faults.throttle("instances", rate_per_s=2, burst=3)
    answers: list[tuple[float, int, str | None]] = []
    with trio.fail_after(LIMIT_S):
        for _ in range(4):
            response = await client.get("/v1/instances")
            answers.append(
                (trio.current_time(), response.status_code, response.headers.get("retry-after"))
            )
        await trio.sleep(0.5)
        for _ in range(2):
            response = await client.get("/v1/instances")
            answers.append(
                (trio.current_time(), response.status_code, response.headers.get("retry-after"))
            )
        await trio.sleep(10.0)
        for _ in range(4):
            response = await client.get("/v1/instances")
            answers.append((trio.current_time(), response.status_code, None))
        health = await client.get("/v1/health")
    assert answers == [
        (0.0, 200, None),
        (0.0, 200, None),
        (0.0, 200, None),
        (0.0, 429, "0.5"),
        (0.5, 200, None),
        (0.5, 429, "0.5"),
        (10.5, 200, None),
        (10.5, 200, None),
        (10.5, 200, None),
        (10.5, 429, None),
    ]
    assert health.status_code == 200  # another family
    throttled = [c for c in cloud.calls if c.status == 429]
    assert throttled[0].target == ""
    assert cloud.faults.rules[0].to_json()["throttled"] == 3


async def test_throttled_answer_is_json_with_the_delay(
    autojump_clock: trio.testing.MockClock, cloud: SimCloud, client: httpx.AsyncClient
) -> None:
    """A 429 carries the error JSON with retryAfterSeconds; an exhausted '*' bucket blocks all."""
    cloud.faults.throttle("*", rate_per_s=4, burst=1)
    with trio.fail_after(LIMIT_S):
        await client.get("/v1/health")
        refused = await client.get("/v1/clusters/k/routes")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "Throttled"
    assert refused.json()["error"]["retryAfterSeconds"] == 0.25


async def test_error_rule_fires_count_times(cloud: SimCloud, client: httpx.AsyncClient) -> None:
    """An error rule with count=2 fails the next two matching calls, then lets calls through."""
    cloud.faults.error("GetInstance", status=503, count=2, retry_after_s=1.5)
    node = cloud.add_instance("n1")
    with trio.fail_after(LIMIT_S):
        statuses = [(await client.get(f"/v1/instances/{node.id}")).status_code for _ in range(3)]
        first_listing = await client.get("/v1/instances")
    assert statuses == [503, 503, 200]
    assert first_listing.status_code == 200
    failed = [c for c in cloud.calls if c.status == 503]
    assert len(failed) == 2
    assert cloud.faults.rules[0].to_json()["fired"] == 2


async def test_error_with_retry_after_sends_the_header(
    cloud: SimCloud, client: httpx.AsyncClient
) -> None:
    """An injected error with retry_after_s sends Retry-After and the error JSON."""
    cloud.faults.error("*", status=500, retry_after_s=1.5)
    with trio.fail_after(LIMIT_S):
        response = await client.get("/v1/health")
    assert response.status_code == 500
    assert response.headers["retry-after"] == "1.5"
    assert response.json()["error"]["code"] == "InternalError"


async def test_error_probability_is_seeded() -> None:
    """A probability rule fails a seeded, reproducible subset of calls."""

    async def pattern(seed: int) -> list[int]:
        cloud = SimCloud(seed=seed)
        cloud.faults.error("routes", status=500, probability=0.5)
        async with httpx.AsyncClient(transport=cloud.transport(), base_url="http://c") as http:
            return [(await http.get("/v1/clusters/k/routes")).status_code for _ in range(40)]

    with trio.fail_after(LIMIT_S):
        first, again, other = await pattern(9), await pattern(9), await pattern(10)
    assert first == again
    assert first != other
    assert 10 <= first.count(500) <= 30
    assert set(first) == {200, 500}


async def test_latency_delays_by_exact_virtual_time(
    autojump_clock: trio.testing.MockClock, cloud: SimCloud, client: httpx.AsyncClient
) -> None:
    """Latency rules add up for matching calls and leave others alone; jitter is seeded."""
    cloud.faults.latency("*", fixed_s=0.25)
    cloud.faults.latency("Health", fixed_s=1.0)
    with trio.fail_after(LIMIT_S):
        start = trio.current_time()
        await client.get("/v1/health")
        health_s = trio.current_time() - start
        start = trio.current_time()
        await client.get("/v1/instances")
        list_s = trio.current_time() - start
    assert (health_s, list_s) == (1.25, 0.25)
    cloud.faults.clear()
    cloud.faults.latency("ListInstances", fixed_s=0.0, jitter_s=2.0)
    with trio.fail_after(LIMIT_S):
        delays = []
        for _ in range(5):
            start = trio.current_time()
            await client.get("/v1/instances")
            delays.append(trio.current_time() - start)
    assert all(0.0 <= d <= 2.0 for d in delays)
    assert len(set(delays)) == 5


async def test_latency_then_throttle_uses_the_arrival_after_the_delay(
    autojump_clock: trio.testing.MockClock, cloud: SimCloud, client: httpx.AsyncClient
) -> None:
    """The call log records arrival time; throttling and errors apply after the latency."""
    cloud.faults.latency("Health", fixed_s=3.0)
    cloud.faults.error("Health", status=502, count=1)
    with trio.fail_after(LIMIT_S):
        failed = await client.get("/v1/health")
        ok = await client.get("/v1/health")
    assert (failed.status_code, ok.status_code) == (502, 200)
    assert [(c.time, c.status) for c in cloud.calls] == [(0.0, 502), (3.0, 200)]
    assert trio.current_time() == 6.0


async def test_cancelled_call_is_logged_as_499(
    autojump_clock: trio.testing.MockClock, cloud: SimCloud, client: httpx.AsyncClient
) -> None:
    """A caller giving up during injected latency leaves a 499 in the call log."""
    cloud.faults.latency("GetInstance", fixed_s=5.0)
    with trio.fail_after(LIMIT_S), trio.move_on_after(1.0):
        await client.get("/v1/instances/i-12345678")
    assert cloud.calls == [Call(0.0, cloud.calls[0].wall, "test", "GetInstance", "i-12345678", 499)]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda f: f.latency("Nope"), "unknown method or family", id="selector"),
        pytest.param(lambda f: f.latency(fixed_s=-1), "negative", id="latency"),
        pytest.param(lambda f: f.error("*", status=200), "not an HTTP error", id="status"),
        pytest.param(lambda f: f.error("*", probability=2), "between 0 and 1", id="probability"),
        pytest.param(lambda f: f.error("*", count=-1), "negative", id="count"),
        pytest.param(lambda f: f.throttle("*", rate_per_s=0), "positive", id="rate"),
        pytest.param(lambda f: f.remove(99), "no fault rule", id="remove"),
    ],
)
def test_fault_arguments_are_checked(cloud: SimCloud, call: Any, message: str) -> None:
    """Fault rules with impossible arguments are refused with a message naming the problem."""
    with pytest.raises((ValueError, KeyError), match=message):
        call(cloud.faults)


# ---------------------------------------------------------------- call log


async def test_call_log_records_replica_method_target_and_status(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Every API call is logged with the trio time, wall time, replica, method, target, status."""
    walls = iter([100.0, 101.0, 102.0])
    cloud = SimCloud(seed=1, wall_clock=lambda: next(walls))
    node = cloud.add_instance("n1")
    async with (
        httpx.AsyncClient(
            transport=cloud.transport(), base_url="http://c", headers={"X-Sim-Replica": "a"}
        ) as a,
        httpx.AsyncClient(
            transport=cloud.transport(), base_url="http://c", headers={"X-Sim-Replica": "b"}
        ) as b,
    ):
        with trio.fail_after(LIMIT_S):
            await a.get(f"/v1/instances/{node.id}")
            await trio.sleep(1.5)
            await b.put("/v1/clusters/k/loadbalancers/lb1", json=_lb_body())
            await a.get("/v1/nothing-here")
            await a.get("/_sim/state")  # the admin API is not logged
    assert cloud.calls == [
        Call(0.0, 100.0, "a", "GetInstance", node.id, 200),
        Call(1.5, 101.0, "b", "PutLoadBalancer", "k/lb1", 201),
        Call(1.5, 102.0, "a", "Unknown", "/v1/nothing-here", 404),
    ]
    assert [c.method for c in cloud.calls_by(replica="a")] == ["GetInstance", "Unknown"]
    assert [c.replica for c in cloud.calls_by(method="loadbalancers")] == ["b"]
    assert cloud.calls_by(method="PutLoadBalancer", replica="a") == []
    cloud.clear_calls()
    assert cloud.calls == []


async def test_load_balancers_are_listed_in_pages(client: httpx.AsyncClient) -> None:
    """`ListLoadBalancers` with `limit` answers a page by name with `nextMarker` when more
    follow, and the page after `marker`; without them, every load balancer; a limit out of
    1 to 1,000 is a 400."""
    with trio.fail_after(LIMIT_S):
        for name in ("lb3", "lb1", "lb2"):
            await client.put(f"/v1/clusters/k/loadbalancers/{name}", json=_lb_body())
        listing = "/v1/clusters/k/loadbalancers"
        first = (await client.get(listing, params={"limit": "2"})).json()
        second = (await client.get(listing, params={"limit": "2", "marker": "lb2"})).json()
        whole = (await client.get(listing)).json()
        refused = [
            (await client.get(listing, params={"limit": limit})).status_code
            for limit in ("0", "1001", "x")
        ]
    assert [lb["name"] for lb in first["loadBalancers"]] == ["lb1", "lb2"]
    assert first["nextMarker"] == "lb2"
    assert [lb["name"] for lb in second["loadBalancers"]] == ["lb3"]
    assert "nextMarker" not in second
    assert sorted(lb["name"] for lb in whole["loadBalancers"]) == ["lb1", "lb2", "lb3"]
    assert refused == [400, 400, 400]


async def test_wrong_verb_is_405(client: httpx.AsyncClient) -> None:
    """A known path with a verb it does not take answers 405 naming the allowed verbs."""
    with trio.fail_after(LIMIT_S):
        response = await client.post("/v1/instances")
    assert response.status_code == 405
    assert "allowed methods are GET" in response.json()["error"]["message"]


# ---------------------------------------------------------------- load balancers


async def test_load_balancer_lifecycle(cloud: SimCloud, client: httpx.AsyncClient) -> None:
    """PUT creates (201) then updates (200); backends change (204, no body); DELETE removes (204,
    then 404)."""
    path = "/v1/clusters/k/loadbalancers/lb1"
    with trio.fail_after(LIMIT_S):
        created = await client.put(path, json=_lb_body())
        updated = await client.put(path, json=_lb_body(nodes=["n3"]))
        backends = await client.put(f"{path}/backends", json={"nodes": ["n9", "n8", "n9"]})
        listed = (await client.get("/v1/clusters/k/loadbalancers")).json()
        other_cluster = await client.get("/v1/clusters/j/loadbalancers/lb1")
        deleted = await client.delete(path)
        again = await client.delete(path)
    assert (created.status_code, updated.status_code, backends.status_code) == (201, 200, 204)
    assert backends.content == b""
    assert created.json() == {
        "name": "lb1",
        "cluster": "k",
        "service": "default/web",
        "ports": [{"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080}],
        "nodes": ["n1", "n2"],
        "sourceRanges": ["0.0.0.0/0"],
        "healthCheckNodePort": 0,
        "sessionAffinity": "None",
        "description": "",
        "status": "active",
        "ingress": [{"ip": "203.0.113.1", "hostname": ""}],
    }
    assert updated.json()["nodes"] == ["n3"]
    assert [lb["name"] for lb in listed["loadBalancers"]] == ["lb1"]
    assert listed["loadBalancers"][0]["nodes"] == ["n8", "n9"]  # sorted, each once
    assert other_cluster.status_code == 404
    assert (deleted.status_code, again.status_code) == (204, 404)
    assert cloud.load_balancers() == []


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        pytest.param(["a", "b", "c"], ["a", "b", "c"], id="sorted"),
        pytest.param(["a", "b", "b", "c"], ["a", "b", "c"], id="sorted-with-a-repeat"),
        pytest.param(["c", "a", "c"], ["a", "c"], id="unsorted-with-a-repeat"),
        pytest.param([], [], id="none"),
    ],
)
async def test_backends_are_kept_sorted_each_once(
    cloud: SimCloud, client: httpx.AsyncClient, sent: list[str], kept: list[str]
) -> None:
    """A backends update keeps the names sorted and each once, however they were sent."""
    path = "/v1/clusters/k/loadbalancers/lb1"
    with trio.fail_after(LIMIT_S):
        await client.put(path, json=_lb_body())
        answer = await client.put(f"{path}/backends", json={"nodes": sent})
        got = (await client.get(path)).json()
    assert answer.status_code == 204
    assert got["nodes"] == kept


async def test_a_node_set_sent_to_many_load_balancers_is_read_once_per_body(
    cloud: SimCloud, client: httpx.AsyncClient
) -> None:
    """The same backends body sent to several load balancers (a node-set pass) sets each to
    its names; a body that differs is read anew, and a malformed one is still refused."""
    base = "/v1/clusters/k/loadbalancers"
    with trio.fail_after(LIMIT_S):
        for name in ("lb1", "lb2", "lb3"):
            await client.put(f"{base}/{name}", json=_lb_body())
        same = [
            await client.put(f"{base}/{n}/backends", json={"nodes": ["b", "a"]})
            for n in ("lb1", "lb2")
        ]
        other = await client.put(f"{base}/lb3/backends", json={"nodes": ["c"]})
        again = await client.put(f"{base}/lb1/backends", json={"nodes": ["b", "a"]})
        bad = await client.put(f"{base}/lb2/backends", json={"nodes": "a"})
        held = {n: (await client.get(f"{base}/{n}")).json()["nodes"] for n in ("lb1", "lb2", "lb3")}
    assert [r.status_code for r in (*same, other, again)] == [204, 204, 204, 204]
    assert bad.status_code == 400
    assert held == {"lb1": ["a", "b"], "lb2": ["a", "b"], "lb3": ["c"]}


async def test_load_balancer_addresses_and_hostnames() -> None:
    """Ingress IPs are the lowest free in 203.0.113.0/24; a requested IP is honoured or refused."""
    cloud = SimCloud(seed=1, lb_hostnames=True)
    async with httpx.AsyncClient(transport=cloud.transport(), base_url="http://c") as http:
        with trio.fail_after(LIMIT_S):
            one = (await http.put("/v1/clusters/k/loadbalancers/one", json=_lb_body())).json()
            two = await http.put(
                "/v1/clusters/k/loadbalancers/two", json=_lb_body(loadBalancerIP="203.0.113.9")
            )
            taken = await http.put(
                "/v1/clusters/k/loadbalancers/three", json=_lb_body(loadBalancerIP="203.0.113.9")
            )
            outside = await http.put(
                "/v1/clusters/k/loadbalancers/three", json=_lb_body(loadBalancerIP="10.0.0.1")
            )
            await http.delete("/v1/clusters/k/loadbalancers/one")
            three = (await http.put("/v1/clusters/k/loadbalancers/three", json=_lb_body())).json()
    assert one["ingress"] == [{"ip": "203.0.113.1", "hostname": "one.sim-region-1.lb.sim"}]
    assert two.json()["ingress"][0]["ip"] == "203.0.113.9"
    assert (taken.status_code, outside.status_code) == (409, 400)
    assert three["ingress"][0]["ip"] == "203.0.113.1"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param({"service": "a/b", "ports": []}, "at least one port", id="no-ports"),
        pytest.param(
            {"service": "a/b", "ports": [{"protocol": "ICMP", "port": 1}]}, "protocol", id="proto"
        ),
        pytest.param(
            {"service": "a/b", "ports": [{"protocol": "TCP", "port": 70000}]}, "range", id="range"
        ),
        pytest.param(
            {"service": "a/b", "ports": [{"protocol": "TCP", "port": 80}] * 2},
            "appears twice",
            id="twice",
        ),
        pytest.param(
            {
                "service": "a/b",
                "ports": [{"protocol": "TCP", "port": 53}, {"protocol": "UDP", "port": 53}],
            },
            "port 53 appears twice; a listener takes one protocol per port",
            id="mixed-protocols-one-port",
        ),
        pytest.param(
            {"service": "a/b", "ports": [{"protocol": "SCTP", "port": 80}]},
            "protocol 'SCTP' is not one of TCP, UDP",
            id="sctp",
        ),
        pytest.param(
            {
                "service": "a/b",
                "ports": [{"protocol": "TCP", "port": 80}],
                "description": "x" * 256,
            },
            "the description is 256 characters; at most 255 are allowed",
            id="description",
        ),
        pytest.param(
            {
                "service": "a/b",
                "ports": [{"protocol": "TCP", "port": 80}],
                "sourceRanges": ["10.0.0.1/8"],
            },
            "source range '10.0.0.1/8': 10.0.0.1/8 has host bits set",
            id="host-bits",
        ),
        pytest.param(
            {
                "service": "a/b",
                "ports": [{"protocol": "TCP", "port": 80}],
                "sourceRanges": ["fd00::/8"],
            },
            "source range fd00::/8 is IPv6; the load balancers are IPv4 only",
            id="ipv6-range",
        ),
        pytest.param(
            {
                "service": "a/b",
                "ports": [{"protocol": "TCP", "port": 80}],
                "sourceRanges": [f"10.0.{i}.0/24" for i in range(21)],
            },
            "21 source ranges; at most 20 are allowed",
            id="too-many-ranges",
        ),
        pytest.param({"service": "a/b", "ports": [], "color": "red"}, "unknown field", id="field"),
        pytest.param({"ports": []}, "missing required field", id="missing"),
    ],
)
async def test_bad_load_balancer_is_400(
    client: httpx.AsyncClient, body: dict[str, Any], message: str
) -> None:
    """An invalid load balancer body is refused with 400 naming the problem."""
    with trio.fail_after(LIMIT_S):
        response = await client.put("/v1/clusters/k/loadbalancers/lb", json=body)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]


async def test_load_balancer_names_are_unique_across_clusters(client: httpx.AsyncClient) -> None:
    """A second cluster cannot take a load balancer name another cluster owns (409)."""
    with trio.fail_after(LIMIT_S):
        await client.put("/v1/clusters/k/loadbalancers/lb", json=_lb_body())
        clash = await client.put("/v1/clusters/j/loadbalancers/lb", json=_lb_body())
    assert clash.status_code == 409
    assert "belongs to cluster k" in clash.json()["error"]["message"]


async def test_load_balancer_provisioning(autojump_clock: trio.testing.MockClock) -> None:
    """A new load balancer provisions for lb_provisioning_s: 202 with the remaining time, no IP."""
    cloud = SimCloud(seed=1, lb_provisioning_s=10.0)
    path = "/v1/clusters/k/loadbalancers/lb"
    async with httpx.AsyncClient(transport=cloud.transport(), base_url="http://c") as http:
        with trio.fail_after(LIMIT_S):
            created = await http.put(path, json=_lb_body())
            await trio.sleep(4.0)
            pending = await http.get(path)
            again = await http.put(path, json=_lb_body())
            await trio.sleep_until(10.0)
            ready = await http.put(path, json=_lb_body())
    assert (created.status_code, created.headers["retry-after"]) == (202, "10.0")
    assert created.json()["status"] == "provisioning"
    assert pending.json()["ingress"] == []
    assert pending.json()["readyInSeconds"] == 6.0
    assert (again.status_code, again.headers["retry-after"]) == (202, "6.0")
    assert (ready.status_code, ready.json()["status"]) == (200, "active")
    assert ready.json()["ingress"] == [{"ip": "203.0.113.1", "hostname": ""}]


# ---------------------------------------------------------------- routes


async def test_route_lifecycle(cloud: SimCloud, client: httpx.AsyncClient) -> None:
    """POST creates (201, identical again 200, clash 409); GET lists; DELETE by name or CIDR."""
    cloud.add_instance("n1")
    cloud.add_instance("n2")
    base = "/v1/clusters/k/routes"
    route = {"name": "k-1", "targetNode": "n1", "destinationCIDR": "10.244.1.0/24"}
    with trio.fail_after(LIMIT_S):
        created = await client.post(base, json=route)
        same = await client.post(base, json=route)
        renamed = await client.post(base, json={**route, "name": "k-2", "targetNode": "n2"})
        changed = await client.post(base, json={**route, "destinationCIDR": "10.244.9.0/24"})
        host_bits = await client.post(base, json={**route, "destinationCIDR": "10.244.1.1/24"})
        second = await client.post(
            base, json={"name": "k-2", "targetNode": "n2", "destinationCIDR": "10.244.2.0/24"}
        )
        listed = (await client.get(base)).json()["routes"]
        one = (await client.get(f"{base}/k-1")).json()
        other_cluster = (await client.get("/v1/clusters/j/routes")).json()["routes"]
        by_name = await client.delete(f"{base}/k-1")
        by_cidr = await client.delete(base, params={"destinationCIDR": "10.244.2.0/24"})
        no_cidr = await client.delete(base)
        missing = await client.delete(f"{base}/k-1")
    assert (created.status_code, same.status_code, second.status_code) == (201, 200, 201)
    assert (renamed.status_code, changed.status_code, host_bits.status_code) == (409, 409, 400)
    assert one == {
        "name": "k-1",
        "cluster": "k",
        "targetNode": "n1",
        "destinationCIDR": "10.244.1.0/24",
        "blackhole": False,
    }
    assert [r["name"] for r in listed] == ["k-1", "k-2"]
    assert other_cluster == []
    assert (by_name.status_code, by_cidr.status_code) == (204, 204)
    assert (no_cidr.status_code, missing.status_code) == (400, 404)
    assert cloud.routes() == []


async def test_routes_to_gone_instances_are_blackholed(
    cloud: SimCloud, client: httpx.AsyncClient
) -> None:
    """A route whose target instance is terminated is a blackhole and yields its CIDR."""
    node = cloud.add_instance("n1")
    cloud.add_instance("n2")
    base = "/v1/clusters/k/routes"
    with trio.fail_after(LIMIT_S):
        await client.post(
            base, json={"name": "k-1", "targetNode": "n1", "destinationCIDR": "10.244.1.0/24"}
        )
        cloud.stop(node.id)
        stopped = (await client.get(base)).json()["routes"][0]["blackhole"]
        cloud.terminate(node.id)
        blackholed = (await client.get(base)).json()["routes"][0]["blackhole"]
        taken_over = await client.post(
            base, json={"name": "k-2", "targetNode": "n2", "destinationCIDR": "10.244.1.0/24"}
        )
    assert (stopped, blackholed) == (False, True)
    assert taken_over.status_code == 201
    assert [(r.name, r.blackhole) for r in cloud.routes("k")] == [("k-2", False)]


# ---------------------------------------------------------------- admin API


async def test_admin_api_manages_instances(cloud: SimCloud, client: httpx.AsyncClient) -> None:
    """/_sim/instances adds, reads, stops, starts, terminates and re-addresses instances."""
    with trio.fail_after(LIMIT_S):
        added = await client.post(
            "/_sim/instances",
            json={"name": "n1", "instanceType": "sim.large", "externalIPs": ["198.51.100.2"]},
        )
        node_id = added.json()["id"]
        duplicate = await client.post("/_sim/instances", json={"name": "n1"})
        bad = await client.post("/_sim/instances", json={"nom": "n1"})
        read = await client.get(f"/_sim/instances/{node_id}")
        stopped = await client.post(f"/_sim/instances/{node_id}/stop")
        started = await client.post(f"/_sim/instances/{node_id}/start")
        readdressed = await client.put(
            f"/_sim/instances/{node_id}/addresses", json={"internal": ["10.5.0.1"]}
        )
        listed = await client.get("/_sim/instances")
        terminated = await client.post(f"/_sim/instances/{node_id}/terminate")
        unknown = await client.post("/_sim/instances/i-0/stop")
    assert added.status_code == 201
    assert added.json()["instanceType"] == "sim.large"
    assert (duplicate.status_code, bad.status_code, unknown.status_code) == (409, 400, 404)
    assert read.json()["name"] == "n1"
    assert (stopped.json()["state"], started.json()["state"]) == ("stopped", "running")
    assert readdressed.json()["internalIPs"] == ["10.5.0.1"]
    assert readdressed.json()["externalIPs"] == ["198.51.100.2"]
    assert [i["id"] for i in listed.json()["instances"]] == [node_id]
    assert terminated.json()["state"] == "terminated"
    assert cloud.instances() == []
    assert cloud.calls == []


async def test_admin_api_manages_faults(
    autojump_clock: trio.testing.MockClock, cloud: SimCloud, client: httpx.AsyncClient
) -> None:
    """/_sim/faults adds latency, error and throttle rules, lists, removes and clears them."""
    with trio.fail_after(LIMIT_S):
        latency = await client.post("/_sim/faults/latency", json={"fixedSeconds": 0.5})
        error = await client.post(
            "/_sim/faults/error", json={"method": "Health", "status": 503, "count": 1}
        )
        throttle = await client.post(
            "/_sim/faults/throttle", json={"target": "routes", "ratePerSecond": 1, "burst": 2}
        )
        bad_selector = await client.post("/_sim/faults/error", json={"method": "Nope"})
        bad_kind = await client.post("/_sim/faults/flood", json={})
        failed = await client.get("/v1/health")
        listed = (await client.get("/_sim/faults")).json()
        removed = await client.delete(f"/_sim/faults/{latency.json()['id']}")
        removed_again = await client.delete(f"/_sim/faults/{latency.json()['id']}")
        start = trio.current_time()
        await client.get("/v1/health")
        elapsed = trio.current_time() - start
        cleared = await client.delete("/_sim/faults")
        after = (await client.get("/_sim/faults")).json()
    assert (latency.status_code, error.status_code, throttle.status_code) == (201, 201, 201)
    assert latency.json() == {
        "id": 1,
        "kind": "latency",
        "method": "*",
        "fixedSeconds": 0.5,
        "jitterSeconds": 0.0,
    }
    assert (bad_selector.status_code, bad_kind.status_code) == (400, 404)
    assert failed.status_code == 503
    assert [r["kind"] for r in listed["rules"]] == ["latency", "error", "throttle"]
    assert listed["rules"][1]["fired"] == 1
    assert (removed.status_code, removed_again.status_code) == (204, 404)
    assert elapsed == 0.0
    assert cleared.status_code == 204
    assert after == {"rules": [], "consistencyDelaySeconds": 0.0, "held": 0, "landedLate": 0}


async def test_admin_api_settings_calls_and_state(
    autojump_clock: trio.testing.MockClock, cloud: SimCloud, client: httpx.AsyncClient
) -> None:
    """/_sim/settings changes delays; /_sim/calls lists and clears the log; /_sim/state dumps."""
    with trio.fail_after(LIMIT_S):
        settings = await client.patch(
            "/_sim/settings",
            json={
                "consistencyDelaySeconds": 1.0,
                "lbProvisioningSeconds": 2.0,
                "terminatedRetentionSeconds": 3.0,
                "lbHostnames": True,
            },
        )
        negative = await client.patch("/_sim/settings", json={"lbProvisioningSeconds": -1})
        node = cloud.add_instance("n1")
        await client.get("/v1/health")
        await client.put("/v1/clusters/k/loadbalancers/lb", json=_lb_body())
        calls = (await client.get("/_sim/calls", params={"method": "Health"})).json()
        state = (await client.get("/_sim/state")).json()
        cleared = await client.delete("/_sim/calls")
        unknown = await client.get("/_sim/nothing")
    assert settings.json() == {
        "consistencyDelaySeconds": 1.0,
        "lbProvisioningSeconds": 2.0,
        "terminatedRetentionSeconds": 3.0,
        "lbHostnames": True,
        "holdSeconds": 0.0,
    }
    assert negative.status_code == 400
    assert calls == {
        "calls": [
            {
                "time": 0.0,
                "wall": calls["calls"][0]["wall"],
                "replica": "test",
                "method": "Health",
                "target": "",
                "status": 200,
            }
        ]
    }
    assert state["time"] == 0.0
    assert state["instances"][0]["id"] == node.id
    assert state["instances"][0]["visibleAt"] == 1.0
    assert state["loadBalancers"][0]["status"] == "provisioning"
    assert state["calls"] == 2
    assert cleared.status_code == 204
    assert cloud.calls == []
    assert unknown.status_code == 404
