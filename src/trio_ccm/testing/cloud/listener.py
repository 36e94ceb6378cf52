"""The HTTP front door: the simulated cloud as an ASGI app on hypercorn's Trio worker.

The cloud outlives the CCM processes that call it: run it with `serve_sim_cloud` in the
test's (or the demo's) own process and point each replica's cloud config at its URL.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from functools import partial
from typing import Any, NoReturn
from urllib.parse import quote

import trio
from hypercorn.config import Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from trio_ccm.http import ContextConfig, answer_lifespan, bind_socket, read_body
from trio_ccm.testing.cloud.server import Request, SimCloud

_Scope = MutableMapping[str, Any]
_Message = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[_Message]]
_Send = Callable[[_Message], Awaitable[None]]

_MAX_REQUEST_LINE = 1024 * 1024  # bulk lookups name every Node in the query string


def _raw_path(scope: _Scope) -> str:
    """The request's path still percent-encoded (the core decodes each segment itself)."""
    raw: bytes | None = scope.get("raw_path")
    if raw is None:
        return quote(scope["path"])
    return raw.partition(b"?")[0].decode("latin-1")


class _AsgiApp:
    """ASGI adapter: read the whole request, answer it with the core, send it back."""

    def __init__(self, cloud: SimCloud) -> None:
        self.cloud = cloud

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        if body is None:
            return
        request = Request.build(
            scope["method"],
            _raw_path(scope),
            scope.get("query_string", b"").decode("latin-1"),
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
            body,
        )
        response = await self.cloud.handle(request)
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.all_headers()]
        headers.append((b"content-length", str(len(response.body)).encode()))
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": response.body})


@dataclass(frozen=True)
class Listening:
    """Where a running simulated cloud listens."""

    url: str
    host: str
    port: int


async def serve_sim_cloud(
    cloud: SimCloud,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    task_status: trio.TaskStatus[Listening] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve `cloud` over plain HTTP until cancelled; `task_status.started(Listening)`."""
    config = ContextConfig(None)
    config.accesslog = None
    config.errorlog = None
    config.keep_alive_timeout = 75
    config.h11_max_incomplete_size = _MAX_REQUEST_LINE
    asgi: Any = _AsgiApp(cloud)  # hypercorn types ASGI apps with its own TypedDicts
    app = wrap_app(asgi, config.wsgi_max_body_size, "asgi")
    sock = bind_socket(host, port)
    try:
        bound_port: int = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        listening = Listening(f"http://{shown}:{bound_port}", host, bound_port)
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(worker_serve, app, config, sockets=Sockets([], [sock], [])))
            task_status.started(listening)
    finally:
        sock.close()
    raise AssertionError("hypercorn's worker returned without being cancelled")
