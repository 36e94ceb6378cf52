"""The in-process front door of the emulator (the shared `InProcessTransport`).

No sockets, so it runs under `trio.testing.MockClock`; watch bodies stream chunk by chunk
and closing the response ends the watch on the server, like closing an HTTP/1.1 connection.
An injected outage raises `httpx.ConnectError`; an aborted watch, `httpx.ReadError`.
"""

from __future__ import annotations

from trio_ccm_testbed._http import InProcessTransport


class ApiServerTransport(InProcessTransport):
    """`httpx.AsyncClient(transport=server.transport(), base_url="http://emulator")`:
    `ApiServer.transport()` builds one around its handler (this module knows no server)."""
