"""One request through an httpx client, with no reference cycle left behind.

httpx's `AsyncClient.send` wraps each answer's stream in a `BoundAsyncStream` that points
back at the answer: every answer is a reference cycle, freed only by the collector, body
and all. An answer alive across two young collections (a slow call, a large body being
decoded) reaches the oldest generation, which CPython collects only once the objects that
reached it since its last full collection number a quarter of those that survived that
one: at 30,000 Nodes, 19,000 after the collection that precedes the freeze
(`trio_ccm.cli.heap`). A CCM whose other work made few such objects kept a start-up's
load-balancer answers, 45 MB of bodies, until a full collection came.

`send` is `http.send(request, stream=stream)` without the layers none of our clients use:
the cookie jar (no API we call sets cookies: httpx parsed every answer's headers for them),
the auth flow (each client signs or carries its token in the request it builds) and
redirects (not followed, as httpx's default). The transport is the one httpx would take
for the URL (a proxy from the environment included); the body of an answer not streamed is
read here, and the answer closed if reading fails, as httpx does.
"""

from __future__ import annotations

import httpx

__all__ = ["send"]


async def send(
    http: httpx.AsyncClient, request: httpx.Request, *, stream: bool = False
) -> httpx.Response:
    """The answer to `request` sent by `http`'s transport; read unless `stream`."""
    response = await http._transport_for_url(request.url).handle_async_request(request)
    response.request = request
    if not stream:
        try:
            await response.aread()
        except BaseException:
            await response.aclose()
            raise
    return response
