"""The client and the instances under the faults of the proxy in front of every endpoint:
an expired token (one re-auth), throttling (413/429 with Retry-After, as ThrottledError),
5xx, slow, HTML and truncated answers (reads retried, never a crash), and changes whose
outcome is unknown (sent, then a 5xx or a timeout: OutcomeUnknownError, never retried)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.helpers.aws import UNINITIALIZED, open_cluster, until
from tests.helpers.openstack import boot, delete, initialised, manifest, open_client, open_provider
from trio_ccm.cloud.openstack import (
    ConflictError,
    OpenStackOutcomeUnknownError,
    OpenStackServerError,
    OpenStackThrottledError,
)
from trio_ccm.cloud.provider import OutcomeUnknownError, ThrottledError
from trio_ccm.testing.harness import run_ccm

DEADLINE_S = 120
FLAVORS = r"/flavors"


@pytest.fixture
def faults(openstack: Any) -> Any:
    """The world's fault proxy (emptied after each test by the world's conftest)."""
    return openstack.faults


async def test_expired_token_one_reauth(openstack: Any, faults: Any) -> None:
    """A 401 (the token expired early) makes exactly one new Keystone call and the call
    succeeds; a second 401 in a row is an auth error, not a loop."""
    async with open_client(openstack) as client:
        with trio.fail_after(DEADLINE_S):
            await client.token()
            faults.add("compute", method="GET", path=FLAVORS, status=401)
            await client.request("compute", "GET", "/flavors")
        assert client.statistics().auths == 2


@pytest.mark.parametrize(
    ("status", "retry_after"),
    [
        pytest.param(429, 7.0, id="429-retry-after"),
        pytest.param(413, 3.0, id="413-retry-after"),
        pytest.param(429, None, id="429-bare"),
    ],
)
async def test_throttling_is_raised_for_the_budget(
    openstack: Any, faults: Any, status: int, retry_after: float | None
) -> None:
    """413/429 are raised at once as ThrottledError with Retry-After (no retry here: the
    shared budget must see it)."""
    faults.add("network", method="GET", status=status, retry_after_s=retry_after)
    async with open_client(openstack) as client:
        with trio.fail_after(DEADLINE_S), pytest.raises(OpenStackThrottledError) as caught:
            await client.request("network", "GET", "/v2.0/networks")
    assert isinstance(caught.value, ThrottledError)
    assert caught.value.retry_after_s == retry_after
    assert len(faults.seen("network", "GET", r"/v2.0/networks")) == 1


FAULTY_READS: list[Any] = [
    pytest.param({"status": 503, "times": 2}, id="503-twice"),
    pytest.param({"status": 200, "body": b"<html><body>Bad Gateway</body></html>"}, id="html"),
    pytest.param({"truncate": True}, id="truncated"),
    pytest.param({"delay_s": 3.0}, id="slower-than-the-timeout"),
]


@pytest.mark.parametrize("fault", FAULTY_READS)
async def test_reads_are_retried(openstack: Any, faults: Any, fault: dict[str, Any]) -> None:
    """A read that fails, dawdles past request-timeout or answers garbage is retried and
    succeeds."""
    faults.add("compute", method="GET", path=FLAVORS, **fault)
    async with open_client(openstack, timeout_s=2.0) as client:
        with trio.fail_after(DEADLINE_S):
            await client.token()
            answer = await client.request("compute", "GET", "/flavors")
        assert {f["name"] for f in answer["flavors"]} >= set(openstack.flavors)
        assert client.statistics().retries >= 1


async def test_reads_give_up_with_a_transient_error(openstack: Any, faults: Any) -> None:
    """Garbage on every attempt is an OpenStackServerError naming the body, not a crash."""
    faults.add("compute", method="GET", path=FLAVORS, status=200, body=b"<html>", times=3)
    async with open_client(openstack) as client:
        with trio.fail_after(DEADLINE_S), pytest.raises(OpenStackServerError, match="not JSON"):
            await client.request("compute", "GET", "/flavors")


def port_named(world: Any, name: str) -> list[Any]:
    return list(world.sdk().network.ports(name=name))


@pytest.mark.parametrize(
    ("fault", "timeout_s", "name"),
    [
        pytest.param({"status": 500}, 30.0, "test-unknown-500", id="5xx-after-applying"),
        pytest.param({"delay_s": 8.0}, 5.0, "test-unknown-slow", id="timeout-after-applying"),
    ],
)
async def test_sent_change_outcome_unknown(
    openstack: Any, faults: Any, fault: dict[str, Any], timeout_s: float, name: str
) -> None:
    """A POST the cloud applied but answered with a 5xx, or too late, is
    OutcomeUnknownError, sent once; the port does land (Neutron may finish it after the
    answer: it is waited for, with a deadline)."""
    faults.add("network", method="POST", path=r"/v2.0/ports", apply_after=True, **fault)
    body = {"port": {"network_id": openstack.network_id, "name": name}}
    try:
        async with open_client(openstack, timeout_s=timeout_s) as client:
            with trio.fail_after(DEADLINE_S), pytest.raises(OpenStackOutcomeUnknownError) as c:
                await client.request("network", "POST", "/v2.0/ports", json=body)
        assert isinstance(c.value, OutcomeUnknownError)
        assert len(faults.seen("network", "POST", r"/v2.0/ports")) == 1
        with trio.fail_after(DEADLINE_S):
            await until(lambda: len(port_named(openstack, name)) == 1)
    finally:
        for port in port_named(openstack, name):
            openstack.sdk().network.delete_port(port)


async def test_conflict_is_a_clean_failure(openstack: Any, faults: Any) -> None:
    """A 409 on a change is ConflictError, not outcome unknown."""
    faults.add("network", method="PUT", status=409)
    async with open_client(openstack) as client:
        with trio.fail_after(DEADLINE_S), pytest.raises(ConflictError):
            await client.request(
                "network", "PUT", f"/v2.0/networks/{openstack.network_id}", json={"network": {}}
            )


CONTROLLER_FAULTS: list[Any] = [
    pytest.param(
        lambda f: f.add("compute", path=r"/servers", status=429, retry_after_s=1, times=3),
        id="nova-429",
    ),
    pytest.param(
        lambda f: f.add("network", path=r"/ports", status=413, retry_after_s=1, times=3),
        id="neutron-413",
    ),
    pytest.param(lambda f: f.add("compute", path=r"/servers", status=500, times=4), id="nova-500"),
    pytest.param(
        lambda f: f.add("network", path=r"/ports", status=200, body=b"<html>", times=4),
        id="neutron-html",
    ),
    pytest.param(
        lambda f: f.add("compute", path=r"/servers", truncate=True, times=4), id="nova-truncated"
    ),
    pytest.param(lambda f: f.add("identity", status=503, times=2), id="keystone-503"),
]


@pytest.mark.parametrize("inject", CONTROLLER_FAULTS)
async def test_initialisation_converges_under_faults(
    openstack: Any, faults: Any, tmp_path: Path, inject: Callable[[Any], Any]
) -> None:
    """The real controllers initialise the Nodes in spite of each fault (the budget slows
    down on throttling; the rest is retried)."""
    servers = await boot(openstack, "test-faulty-a", "test-faulty-b")
    try:
        async with open_cluster(openstack) as cluster:
            for server in servers:
                cluster.api.create(manifest(server["name"]))
            inject(faults)
            async with open_provider(openstack, tmp_path) as provider:
                with trio.fail_after(DEADLINE_S):
                    async with run_ccm(
                        cluster.api,
                        provider,
                        "--controllers=cloud-node-controller",
                        now=lambda: dt.datetime.now(dt.UTC),
                    ):
                        await cluster.wait_for(
                            lambda: all(initialised(cluster, s["name"]) for s in servers)
                        )
            for server in servers:
                assert UNINITIALIZED not in cluster.taints(server["name"])
    finally:
        await delete(openstack, servers)
