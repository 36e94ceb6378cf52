"""The in-process front door: an httpx transport that calls the emulator directly.

No sockets, so it runs under `trio.testing.MockClock`; watch bodies stream chunk by chunk
and closing the response ends the watch on the server, like closing an HTTP/1.1 connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import httpx
import trio

from trio_ccm.testing.apiserver.server import Request, StreamAborted

if TYPE_CHECKING:
    from trio_ccm.testing.apiserver.server import ApiServer


class _Body(httpx.AsyncByteStream):
    """A streamed body. Its iterator is a plain object, not an async generator, so a
    response closed early leaves nothing for the GC to finalize."""

    def __init__(self, chunks: AsyncIterator[bytes], cleanup: Callable[[], None] | None) -> None:
        self._chunks = chunks
        self._cleanup = cleanup

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await anext(self._chunks)
        except StreamAborted as exc:
            raise httpx.ReadError(f"connection reset by peer (emulated: {exc})") from exc

    async def aclose(self) -> None:
        aclose = getattr(self._chunks, "aclose", None)
        if aclose is not None:
            await aclose()
        if self._cleanup is not None:
            self._cleanup()


class ApiServerTransport(httpx.AsyncBaseTransport):
    """`httpx.AsyncClient(transport=server.transport(), base_url="http://emulator")`."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.server.faults.refusing():
            raise httpx.ConnectError(
                "[Errno 111] Connection refused (emulated outage)", request=request
            )
        # A real request yields to the scheduler; without this a write loop would starve
        # every watch stream and the watchers would be cut off for falling behind.
        await trio.lowlevel.checkpoint()
        body = await request.aread()
        ours = Request.build(
            request.method,
            request.url.path,
            request.url.query.decode(),
            [(k.decode(), v.decode()) for k, v in request.headers.raw],
            body,
        )
        response = await self.server.handle(ours)
        headers = response.all_headers()
        if isinstance(response.body, bytes):
            return httpx.Response(
                response.status, headers=headers, content=response.body, request=request
            )
        return httpx.Response(
            response.status,
            headers=headers,
            stream=_Body(response.body, response.cleanup),
            request=request,
        )
