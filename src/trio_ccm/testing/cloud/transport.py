"""The in-process front door: an httpx transport that calls the simulated cloud directly.

No sockets, so it runs under `trio.testing.MockClock`: injected latency is a `trio.sleep`
inside the core, and cancelling the caller cancels the call (logged with status 499).
"""

from __future__ import annotations

import httpx
import trio

from trio_ccm.testing.cloud.server import Request, SimCloud


class SimCloudTransport(httpx.AsyncBaseTransport):
    """`httpx.AsyncClient(transport=cloud.transport(), base_url="http://sim-cloud")`."""

    def __init__(self, cloud: SimCloud) -> None:
        self.cloud = cloud

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        # A real request yields to the scheduler; so does this one, latency or not.
        await trio.lowlevel.checkpoint()
        body = await request.aread()
        ours = Request.build(
            request.method,
            request.url.raw_path.partition(b"?")[0].decode("ascii"),
            request.url.query.decode(),
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw],
            body,
        )
        response = await self.cloud.handle(ours)
        return httpx.Response(
            response.status,
            headers=response.all_headers(),
            content=response.body,
            request=request,
        )
