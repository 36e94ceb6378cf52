"""Nodes the CCM cannot initialise for good: a provider ID that is malformed or another
cloud's, or an instance another Node claims. Each gets one Warning Event, stays tainted, is
never retried in a loop, and never holds up the other Nodes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
import trio.testing

from trio_ccm.cloud.sim import SimProvider
from trio_ccm.testing import (
    ApiServer,
    SimCloud,
    make_node,
    register_node,
    run_ccm,
    virtual_now,
    wait_for,
)
from trio_ccm.testing.factories import TAINT_UNINITIALIZED
from trio_ccm.testing.harness import EPOCH


def tainted(api: ApiServer, name: str) -> bool:
    taints = api.get("v1", "Node", name)["spec"].get("taints", [])
    return any(t["key"] == TAINT_UNINITIALIZED for t in taints)


async def warnings(api: ApiServer) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://emulator") as http:
        items: list[dict[str, Any]] = (await http.get("/api/v1/events")).json()["items"]
    return [e for e in items if e["type"] == "Warning"]


@pytest.mark.parametrize(
    ("provider_id", "fragment"),
    [
        pytest.param("garbage", "provider ID 'garbage' is not a sim provider ID", id="junk"),
        pytest.param(
            "aws:///us-east-1a/i-0123", "'aws:///us-east-1a/i-0123' is not a sim", id="foreign"
        ),
        pytest.param("sim://", "provider ID 'sim://' is not a sim provider ID", id="empty"),
    ],
)
async def test_an_invalid_provider_id_gets_one_warning_and_no_retry_loop(
    autojump_clock: trio.testing.MockClock, provider_id: str, fragment: str
) -> None:
    """The Node stays tainted with one InvalidProviderID Warning naming the fix; the cloud
    is asked about it once per bulk lookup at most (no retry loop); other Nodes proceed."""
    api = ApiServer(seed=1, now=virtual_now())
    cloud = SimCloud(seed=1)
    register_node(api, "bad", provider_id=provider_id)
    for i in range(3):
        cloud.add_instance(f"good-{i}")
        register_node(api, f"good-{i}")
    provider = SimProvider(url="http://sim", replica="ccm", transport=cloud.transport())
    with trio.fail_after(600):
        async with run_ccm(api, provider, "--controllers=cloud-node") as serving:
            await wait_for(lambda: not any(tainted(api, f"good-{i}") for i in range(3)))
            await trio.sleep(300)  # five minutes: a retry loop would show here
            stats: Any = serving.debug_actors()
    await provider.aclose()
    assert tainted(api, "bad")
    refused = [e for e in await warnings(api) if e["involvedObject"]["name"] == "bad"]
    assert [(e["reason"], e["count"]) for e in refused] == [("InvalidProviderID", 1)]
    assert fragment in refused[0]["message"]
    assert "delete it so that its kubelet registers it again" in refused[0]["message"]
    actors = stats["controllers"]["cloud-node-controller"]["managers"]["cloud-node-controller"]
    assert actors["statistics"]["retries"] == 0
    # The first bulk lookup, then the address sync after its 5 min period (of the good
    # Nodes); no per-Node call: the invalid ID is known without asking the cloud.
    assert len(cloud.calls_by(method="ListInstances")) == 2
    assert cloud.calls_by(method="GetInstance") == []


async def test_two_nodes_claiming_one_instance_leave_the_newer_uninitialised(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two uninitialised Nodes with the same provider ID: the older is initialised, the
    newer gets one DuplicateProviderID Warning naming the other and keeps its taint."""
    api = ApiServer(seed=1, now=virtual_now())
    cloud = SimCloud(seed=1)
    instance = cloud.add_instance("node-a")
    pid = f"sim://{instance.zone}/{instance.id}"
    older = make_node("node-a", provider_id=pid)
    older["metadata"]["creationTimestamp"] = EPOCH.strftime("%Y-%m-%dT%H:%M:%SZ")
    api.create(older)
    register_node(api, "node-a-copy", provider_id=pid)
    provider = SimProvider(url="http://sim", replica="ccm", transport=cloud.transport())
    with trio.fail_after(600):
        async with run_ccm(api, provider, "--controllers=cloud-node"):
            await wait_for(lambda: not tainted(api, "node-a"))
            await trio.sleep(60)
    await provider.aclose()
    assert tainted(api, "node-a-copy")
    refused = await warnings(api)
    assert [(e["involvedObject"]["name"], e["reason"], e["count"]) for e in refused] == [
        ("node-a-copy", "DuplicateProviderID", 1)
    ]
    assert "claimed by Node node-a too" in refused[0]["message"]


async def test_a_node_claiming_an_initialised_nodes_instance_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Node registered later with the provider ID of a running, initialised Node is
    refused, whatever its creation time says."""
    api = ApiServer(seed=1, now=virtual_now())
    cloud = SimCloud(seed=1)
    instance = cloud.add_instance("node-a")
    register_node(api, "node-a")
    provider = SimProvider(url="http://sim", replica="ccm", transport=cloud.transport())
    with trio.fail_after(600):
        async with run_ccm(api, provider, "--controllers=cloud-node"):
            await wait_for(lambda: not tainted(api, "node-a"))
            register_node(api, "impostor", provider_id=f"sim://{instance.zone}/{instance.id}")
            await trio.sleep(60)
    await provider.aclose()
    assert tainted(api, "impostor")
    refused = await warnings(api)
    assert [(e["involvedObject"]["name"], e["reason"]) for e in refused] == [
        ("impostor", "DuplicateProviderID")
    ]
