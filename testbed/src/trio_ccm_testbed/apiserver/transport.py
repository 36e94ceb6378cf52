"""The in-process front door of the emulator (the shared `InProcessTransport`).

No sockets, so it runs under `trio.testing.MockClock`; watch bodies stream chunk by chunk
and closing the response ends the watch on the server, like closing an HTTP/1.1 connection.
An injected outage raises `httpx.ConnectError`; an aborted watch, `httpx.ReadError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_ccm_testbed._http import InProcessTransport

if TYPE_CHECKING:
    from trio_ccm_testbed.apiserver.server import ApiServer


class ApiServerTransport(InProcessTransport):
    """`httpx.AsyncClient(transport=server.transport(), base_url="http://emulator")`."""

    def __init__(self, server: ApiServer) -> None:
        super().__init__(server.handle)
        self.server = server
