"""The in-process front door of the simulated cloud (the shared `InProcessTransport`).

No sockets, so it runs under `trio.testing.MockClock`: injected latency is a `trio.sleep`
inside the core, and cancelling the caller cancels the call (logged with status 499).
"""

from __future__ import annotations

from trio_ccm_testbed._http import InProcessTransport
from trio_ccm_testbed.cloud.server import SimCloud


class SimCloudTransport(InProcessTransport):
    """`httpx.AsyncClient(transport=cloud.transport(), base_url="http://sim-cloud")`."""

    def __init__(self, cloud: SimCloud) -> None:
        super().__init__(cloud.handle)
        self.cloud = cloud
