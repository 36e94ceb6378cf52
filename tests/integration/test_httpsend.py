"""`trio_ccm.httpsend` over real loopback HTTP: an answer is freed when its caller drops it,
not left in a reference cycle for the collector, through the bare function and through the
kube and sim clients that send with it."""

from __future__ import annotations

import functools
import gc
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest
import trio

from trio_ccm import httpsend
from trio_ccm.cloud.provider import NodeInfo
from trio_ccm.cloud.sim import SimInstances, from_config
from trio_ccm.kube import patches
from trio_ccm.kube.client import open_kube_client
from trio_ccm.kube.objects import NODES
from trio_ccm.testing import ApiServer
from trio_ccm.testing.harness import emulator_connection
from trio_ccm_testbed.cloud import Listening, SimCloud, cloud_config, serve_sim_cloud

LIMIT_S = 10  # real sockets, real clock: a generous bound that still fails a hang fast
CALLS = 5


@contextmanager
def _cycles_kept() -> Iterator[list[object]]:
    """Collector off inside; at exit one full collection that keeps what it found (the list
    yielded then holds every object that was only freed by the collector)."""
    found: list[object] = []
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _answers(objects: list[object]) -> int:
    return sum(isinstance(obj, httpx.Response) for obj in objects)


async def _httpx_send(http: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
    return await http.send(request)


@pytest.mark.parametrize(
    ("send", "cycles"),
    [
        pytest.param(httpsend.send, 0, id="httpsend: none"),
        # The probe itself: httpx's own send leaves each answer in a cycle.
        pytest.param(_httpx_send, CALLS, id="httpx's send: one per answer"),
    ],
)
async def test_answers_are_left_in_cycles_only_by_httpxs_own_send(
    nursery: trio.Nursery,
    send: Callable[[httpx.AsyncClient, httpx.Request], Awaitable[httpx.Response]],
    cycles: int,
) -> None:
    """Read answers dropped by the caller: httpsend's are freed at once, httpx's are not."""
    cloud = SimCloud(seed=1)
    listening: Listening = await nursery.start(functools.partial(serve_sim_cloud, cloud))
    async with httpx.AsyncClient(base_url=listening.url) as http:
        with trio.fail_after(LIMIT_S), _cycles_kept() as found:
            for _ in range(CALLS):
                response = await send(http, http.build_request("GET", "/_sim/state"))
                assert response.status_code == 200
                assert response.json()["instances"] == []
            del response
    assert _answers(found) == cycles


async def test_the_kube_clients_answers_are_freed_when_dropped() -> None:
    """Creates and patches through a kube client leave no answer in a cycle."""
    api = ApiServer(seed=1)
    async with open_kube_client(emulator_connection(), transport=api.transport(), qps=0) as kube:
        with trio.fail_after(LIMIT_S), _cycles_kept() as found:
            for i in range(CALLS):
                await kube.create(
                    NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}}
                )
                await kube.patch(NODES, f"n{i}", patches.set_labels({"a": "b"}))
    assert _answers(found) == 0


async def test_the_sim_clouds_answers_are_freed_when_dropped(nursery: trio.Nursery) -> None:
    """Lookups through the sim provider over HTTP leave no answer in a cycle."""
    cloud = SimCloud(seed=2)
    cloud.add_instance("node-1")
    listening: Listening = await nursery.start(functools.partial(serve_sim_cloud, cloud))
    provider = from_config(cloud_config(listening.url, replica="ccm-http"))
    instances = provider.instances
    assert isinstance(instances, SimInstances)
    with trio.fail_after(LIMIT_S):
        await provider.initialize()
        with _cycles_kept() as found:
            for _ in range(CALLS):
                metadata = await instances.instance_metadata(NodeInfo(name="node-1"))
                assert metadata.provider_id.startswith("sim://")
        await provider.aclose()
    assert _answers(found) == 0
