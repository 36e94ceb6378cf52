"""How the provider paces Octavia, so that an Octavia that cannot keep up is never pushed
over: at most so many writes and so many load-balancer creates in flight (waiting for a
slot is no failure), an ERROR replacement only after a per-Service backoff that grows, and a
create whose answer was lost never made a second time (the ERROR replacement through the
real controller: test_lb_error.py).

The slot and backoff arithmetic runs under `MockClock` against a recording `Api`; the rest
runs through the real controller against the real Octavia and Neutron, the world's fault
proxy counting the writes it holds at once and holding answers."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.openstack.lbworld import (
    CUT_REPLICA_WARNINGS,
    POLL_S,
    open_lb_cluster,
    provider_for,
    running,
    sdk_call,
    settled_lb,
    until,
)
from trio_ccm.cloud.openstack.loadbalancers import replace_backoff_s
from trio_ccm.cloud.openstack.octavia import WRITE_PATIENCE_S, Octavia
from trio_ccm.errors import RetryAfter

pytestmark = CUT_REPLICA_WARNINGS


class HeldApi:
    """An `Api` whose writes wait until the test lets them go, recording when each began."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.began: list[tuple[float, str]] = []

    async def request(
        self,
        service: str,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        self.began.append((trio.current_time(), path))
        await self.release.wait()
        return {}

    async def list(
        self, service: str, path: str, key: str, *, params: Mapping[str, Any] | None = None
    ) -> list[Any]:
        return []


async def test_a_write_waits_for_a_slot_then_retries_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With one write slot taken, a second write waits for it; one that cannot get it within
    the write patience makes no call and is a RetryAfter at exactly t=patience."""
    api = HeldApi()
    octavia = Octavia(api, rng=random.Random(1), max_writes=1)
    outcomes: list[tuple[float, str]] = []

    async def write(path: str) -> None:
        try:
            await octavia.update("listener", path, {})
        except RetryAfter as exc:
            outcomes.append((trio.current_time(), f"retry {path} {exc.delay_s:.2f}"))
        else:
            outcomes.append((trio.current_time(), f"done {path}"))

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write, "a")
            await trio.sleep(1)
            nursery.start_soon(write, "b")
            await trio.sleep(WRITE_PATIENCE_S + 5)
            assert octavia.writes_in_flight == 1
            nursery.start_soon(write, "c")
            await trio.sleep(2)
            api.release.set()
    assert [path for _, path in api.began] == ["/v2/lbaas/listeners/a", "/v2/lbaas/listeners/c"]
    assert outcomes[0][0] == 1 + WRITE_PATIENCE_S  # b, from t=1: waited its patience
    assert outcomes[0][1].startswith("retry b ")
    assert sorted(o for _, o in outcomes[1:]) == ["done a", "done c"]
    assert octavia.slot_waits == 2
    assert octavia.writes_in_flight == 0


@pytest.mark.parametrize(
    ("replaced", "low", "high"),
    [
        pytest.param(0, 5, 10, id="first"),
        pytest.param(1, 10, 20, id="second"),
        pytest.param(3, 40, 80, id="fourth"),
        pytest.param(5, 150, 300, id="capped"),
        pytest.param(40, 150, 300, id="long-after"),
    ],
)
def test_replacement_backoff_grows_jittered_and_capped(
    replaced: int, low: float, high: float
) -> None:
    """The wait before making a load balancer again after its k-th ERROR doubles from 5-10 s
    up to 150-300 s, spread over the upper half of its step."""
    rng = random.Random(7)
    delays = [replace_backoff_s(replaced, rng) for _ in range(200)]
    assert all(low <= d <= high for d in delays)
    assert max(delays) - min(delays) > (high - low) / 2  # jittered, not one value


async def test_writes_and_creates_in_flight_stay_under_their_caps(
    openstack: Any, tmp_path: Path
) -> None:
    """Two Services at once with one write slot and one create slot: Octavia never holds
    more than one of our writes at once (each create answered 2 s late, so they would
    overlap), never more than one of our load balancers is PENDING_CREATE, and each
    Service gets its one load balancer."""
    names = [f"s{i}" for i in range(2)]
    caps = {"trio-ccm-max-writes-in-flight": "1", "trio-ccm-max-creates-in-flight": "1"}
    conn = openstack.sdk(admin=True)
    async with open_lb_cluster(openstack, tmp_path, "lbcap", **caps) as c:
        c.add_nodes(2)
        openstack.faults.clear()  # the peak counts from here
        openstack.faults.add(
            "load-balancer", method="POST", path=r"/lbaas/loadbalancers$", delay_s=2, times=2
        )
        prefix = c.lb_name("s")
        creating: list[int] = []

        def pending_creates() -> int:
            return sum(
                1
                for lb in conn.load_balancer.load_balancers()
                if lb.name.startswith(prefix) and lb.provisioning_status == "PENDING_CREATE"
            )

        async def sample() -> None:
            while True:
                creating.append(await sdk_call(pending_creates))
                await trio.sleep(POLL_S)

        provider = provider_for(c)
        with trio.fail_after(900):
            try:
                async with running(c, provider=provider), trio.open_nursery() as nursery:
                    nursery.start_soon(sample)
                    for i, name in enumerate(names):
                        c.create_service(name, node_ports=(30420 + i,))
                    await until(lambda: all(c.ingress(n) for n in names))
                    nursery.cancel_scope.cancel()
            finally:
                await provider.aclose()
            stats = provider.load_balancers.statistics()  # type: ignore[union-attr]
            assert openstack.faults.writes_peak("load-balancer") == 1
            assert stats["write_slot_waits"] > 0
            assert max(creating) <= 1
            assert len(openstack.faults.seen("load-balancer", "POST", r"/loadbalancers$")) == 2
            for name in names:
                assert (await settled_lb(c, name))["listeners"]
            async with running(c):
                for name in names:
                    await c.delete(name)
                await until(lambda: all(c.gone(n) for n in names))
        left = await sdk_call(lambda: [x for n in names for x in c.leftovers(n)])
        assert left == []


async def test_a_create_whose_answer_is_lost_is_made_once(openstack: Any, tmp_path: Path) -> None:
    """A load balancer create held by the proxy past the client's 5 s timeout (an unknown
    outcome) and applied by Octavia only after the provider looked for it and found none:
    no second create is sent meanwhile, the late one is found by name and adopted, and an
    Event says why no other was made."""
    async with open_lb_cluster(openstack, tmp_path, "lblost") as c:
        keys = {
            "subnet-id": openstack.subnet_id,
            "floating-network-id": openstack.external_network_id,
        }
        openstack.write_cloud_conf(
            c.conf, extra={"LoadBalancer": keys, "Metadata": {"request-timeout": "5s"}}
        )
        c.add_nodes(1)
        rule = openstack.faults.add(
            "load-balancer", method="POST", path=r"/lbaas/loadbalancers$", delay_s=12
        )
        with trio.fail_after(600):
            async with running(c):
                c.create_service("web", node_ports=(30440,))
                await until(lambda: c.ingress("web"))
                lb = await settled_lb(c, "web")
                assert rule.hits == 1
                creates = openstack.faults.seen("load-balancer", "POST", r"/loadbalancers$")
                assert len(creates) == 1
                found = await sdk_call(
                    lambda: list(
                        openstack.sdk(admin=True).load_balancer.load_balancers(
                            name=c.lb_name("web")
                        )
                    )
                )
                assert [x.id for x in found] == [lb["id"]]
                events = await c.events("SyncLoadBalancerFailed")
                assert any("answer to its create was lost" in e["message"] for e in events)
                await c.delete("web")
                await until(lambda: c.gone("web"))
        assert await sdk_call(lambda: c.leftovers("web")) == []
