"""The in-process front door of the simulated cloud (the shared `InProcessTransport`).

No sockets, so it runs under `trio.testing.MockClock`: injected latency is a `trio.sleep`
inside the core, and cancelling the caller cancels the call (logged with status 499).
"""

from __future__ import annotations

from trio_ccm_testbed._http import InProcessTransport


class SimCloudTransport(InProcessTransport):
    """`httpx.AsyncClient(transport=cloud.transport(), base_url="http://sim-cloud")`:
    `SimCloud.transport()` builds one around its handler (this module knows no cloud)."""
