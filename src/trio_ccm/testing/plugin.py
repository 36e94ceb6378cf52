"""pytest fixtures for testing a cloud provider (or an extra controller) against the whole
CCM, in-process, under pytest-trio's `autojump_clock` (docs/providers.md walks through it).

Enable them in your `conftest.py`:

    pytest_plugins = ["trio_ccm.testing.plugin"]

(or `pytest -p trio_ccm.testing.plugin`). They are not registered automatically (no
`pytest11` entry point): names as plain as `api` and `ccm` should not appear in every test
suite of every environment trio-ccm is installed in. The async fixtures need pytest-trio
(`trio_mode = true`); so are `api` and the fixtures built on it, since the emulator's
clock is Trio's.

- `api`: the Kubernetes API emulator (`ApiServer`), empty, its clock following Trio's.
- `api_client`: an `httpx.AsyncClient` to it (`await api_client.get("/api/v1/events")`).
- `kubelet`: `kubelet("node-1", **fields)` registers a Node as a kubelet with
  `--cloud-provider=external` does (`make_node`'s keywords), and returns it.
- `ccm`: `async with ccm(provider, *flags) as serving:` runs one replica against `api`
  (`run_ccm`: the Go CCM's flags, no Lease, no sockets) for the block.
- `sim_cloud` and `sim_provider`: the simulated cloud and the `sim` provider reaching it
  in-process, for tests of extra controllers, or to compare with a provider of your own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any, Protocol

import httpx
import pytest

from trio_ccm.cloud.provider import CloudProvider
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.supervisor import Serving
from trio_ccm.testing._world import ApiServer, SimCloud
from trio_ccm.testing.harness import register_node, run_ccm, virtual_now

__all__ = ["RunCcm", "api", "api_client", "ccm", "kubelet", "sim_cloud", "sim_provider"]


class RunCcm(Protocol):
    """The `ccm` fixture: `run_ccm` with the emulator already given."""

    def __call__(
        self, provider: CloudProvider, *flags: str, **options: Any
    ) -> AbstractAsyncContextManager[Serving]: ...


@pytest.fixture
async def api() -> ApiServer:
    """An empty Kubernetes API emulator whose clock follows Trio's (MockClock-safe); built
    inside Trio, as its clock needs."""
    return ApiServer(seed=1, now=virtual_now())


@pytest.fixture
async def api_client(api: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client reaching `api` in-process (base URL http://emulator)."""
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://emulator") as client:
        yield client


@pytest.fixture
async def kubelet(api: ApiServer) -> Callable[..., dict[str, Any]]:
    """`kubelet(name, **fields)`: register a Node in `api` as a kubelet does."""
    return partial(register_node, api)


@pytest.fixture
async def ccm(api: ApiServer) -> RunCcm:
    """`ccm(provider, *flags, **options)`: `run_ccm` against `api`."""
    return partial(run_ccm, api)


@pytest.fixture
def sim_cloud() -> SimCloud:
    """An empty simulated cloud (`add_instance`, faults, its call log)."""
    return SimCloud(seed=1)


@pytest.fixture
async def sim_provider(sim_cloud: SimCloud) -> AsyncIterator[SimProvider]:
    """The `sim` provider reaching `sim_cloud` in-process; closed after the test."""
    provider = SimProvider(url="http://sim", replica="trio-ccm", transport=sim_cloud.transport())
    try:
        yield provider
    finally:
        await provider.aclose()
