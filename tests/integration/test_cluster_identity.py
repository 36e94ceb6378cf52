"""The cluster's identity (the kube-system Namespace UID) handed to a provider that wants it
(`trio_ccm.cloud.ClusterIdentityAware`), against the emulator: read once and given before
`initialize()`; a refused read (403) logged with its fix, the provider left as built and
the controllers started anyway; a provider without the method never causes the read.
"""

from __future__ import annotations

import httpx
import pytest
import structlog
import trio
import trio.testing

from trio_ccm.cloud import ClusterIdentityAware
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.testing import ApiServer, SimCloud, virtual_now
from trio_ccm.testing.harness import run_ccm

NAMESPACE_PATH = "/api/v1/namespaces/kube-system"


class Aware:
    """The sim provider, recording what it is handed and when (a third-party provider)."""

    def __init__(self, sim: SimProvider) -> None:
        self.sim = sim
        self.name = sim.name
        self.instances = sim.instances
        self.load_balancers = sim.load_balancers
        self.routes = sim.routes
        self.calls: list[str] = []

    def use_cluster_identity(self, identity: str) -> None:
        self.calls.append(f"identity {identity}")

    async def initialize(self) -> None:
        self.calls.append("initialize")
        await self.sim.initialize()


class Recorder(httpx.AsyncBaseTransport):
    """The replica's way to the emulator: records GETs of the kube-system Namespace and,
    with `refuse`, answers them 403 as an API server without the RBAC grant would."""

    def __init__(self, inner: httpx.AsyncBaseTransport, *, refuse: bool) -> None:
        self.inner = inner
        self.refuse = refuse
        self.reads = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == NAMESPACE_PATH:
            self.reads += 1
            if self.refuse:
                await trio.lowlevel.checkpoint()
                return httpx.Response(
                    403,
                    json={
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "reason": "Forbidden",
                        "code": 403,
                        "message": 'namespaces "kube-system" is forbidden: User '
                        '"system:serviceaccount:kube-system:cloud-controller-manager" cannot '
                        'get resource "namespaces" in API group "" at the cluster scope',
                    },
                )
        response: httpx.Response = await self.inner.handle_async_request(request)
        return response


def kube_system_uid(api: ApiServer) -> str:
    return str(api.get("v1", "Namespace", "kube-system")["metadata"]["uid"])


@pytest.mark.parametrize(
    ("aware", "refuse", "reads", "handed"),
    [
        pytest.param(True, False, 1, True, id="read-and-handed"),
        pytest.param(True, True, 1, False, id="refused"),
        pytest.param(False, False, 0, False, id="not-wanted"),
    ],
)
async def test_the_identity_is_read_once_for_a_provider_that_wants_it(
    autojump_clock: trio.testing.MockClock, aware: bool, refuse: bool, reads: int, handed: bool
) -> None:
    """A provider with `use_cluster_identity` gets the kube-system UID before
    `initialize()` (one read); a 403 is one error line naming the grant and the provider is
    not called, the controllers start anyway; a provider without it causes no read."""
    api = ApiServer(seed=1, now=virtual_now())
    cloud = SimCloud(seed=1)
    sim = SimProvider(url="http://sim", replica="r", transport=cloud.transport())
    provider = Aware(sim) if aware else sim
    assert isinstance(provider, ClusterIdentityAware) == aware
    transport = Recorder(api.transport(), refuse=refuse)
    with trio.fail_after(60), structlog.testing.capture_logs() as logs:
        async with run_ccm(api, provider, "--controllers=service", transport=transport) as s:
            await trio.sleep(5.0)
            assert s.leading
            assert s.controllers == ["service-lb-controller"]
    assert transport.reads == reads
    if isinstance(provider, Aware):
        expected = [f"identity {kube_system_uid(api)}"] if handed else []
        assert provider.calls == [*expected, "initialize"]
    unknown = [e for e in logs if e["event"] == "cluster-identity.unknown"]
    assert len(unknown) == (1 if refuse else 0)
    if refuse:
        assert unknown[0]["log_level"] == "error"
        assert "namespaces/kube-system" in unknown[0]["fix"]
        assert "forbidden" in unknown[0]["error"].lower()
    await sim.aclose()
