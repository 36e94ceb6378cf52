"""The HTTP(S) front door: the emulator as an ASGI app on hypercorn's Trio worker.

`serve_apiserver` binds loopback (TLS optional, with a CA minted in memory), reports a
`Listening` (URL, CA, kubeconfig writer) through `task_status`, and serves until cancelled.
An injected outage (`faults.refuse_connections`) closes the listening socket, so clients
get a real "connection refused", and re-binds the same port when it is over.
"""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import trio
import yaml
from hypercorn.config import Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from trio_ccm.http import ContextConfig, answer_lifespan, bind_socket, read_body
from trio_ccm.testing.apiserver.server import ApiServer, Request

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class AsgiApp:
    """ASGI adapter: one request in, one (possibly streamed) response out."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        received = await read_body(receive)
        if received is None:
            return
        request = Request.build(
            scope["method"],
            scope["path"],
            scope.get("query_string", b"").decode("latin-1"),
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
            received,
        )
        response = await self.server.handle(request)
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.all_headers()]
        body = response.body
        if isinstance(body, bytes):
            headers.append((b"content-length", str(len(body)).encode()))
            await send(
                {"type": "http.response.start", "status": response.status, "headers": headers}
            )
            await send({"type": "http.response.body", "body": body})
            return
        finished = False
        try:
            await send(
                {"type": "http.response.start", "status": response.status, "headers": headers}
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
                async for chunk in body:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                finished = True
                nursery.cancel_scope.cancel()
        finally:
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await aclose()
            if response.cleanup is not None:
                response.cleanup()
        if finished:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _cancel_on_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


@dataclass(frozen=True)
class Listening:
    """Where a running emulator listens, and how to reach it."""

    url: str
    host: str
    port: int
    ca_pem: bytes | None

    def kubeconfig(
        self, token: str | None = None, *, name: str = "trio-ccm-emulator"
    ) -> dict[str, Any]:
        cluster: dict[str, Any] = {"server": self.url}
        if self.ca_pem is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca_pem).decode()
        # Always a token: kubectl prompts for a password when an HTTPS user has no
        # credentials; with authentication off the emulator accepts any token.
        user: dict[str, Any] = {"token": token or "trio-ccm-emulator-open"}
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": name, "user": user}],
            "contexts": [
                {"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}
            ],
            "current-context": name,
        }

    def write_kubeconfig(self, path: str | os.PathLike[str], token: str | None = None) -> Path:
        """Write the kubeconfig readable by its owner only (it may carry a token)."""
        target = Path(path)
        text = yaml.safe_dump(self.kubeconfig(token), sort_keys=False)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        return target


def _tls(host: str) -> tuple[ssl.SSLContext, bytes]:
    import trustme

    ca = trustme.CA(organization_name="trio-ccm emulator")
    names = sorted({host, "127.0.0.1", "localhost", "::1"})
    cert = ca.issue_cert(*names)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context, ca.cert_pem.bytes()


async def serve_apiserver(
    server: ApiServer,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    tls: bool = False,
    task_status: trio.TaskStatus[Listening] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve `server` over HTTP(S) until cancelled; `task_status.started(Listening)`."""
    context, ca_pem = _tls(host) if tls else (None, None)
    config = ContextConfig(context)
    config.accesslog = None
    config.errorlog = None
    config.keep_alive_timeout = 75
    asgi: Any = AsgiApp(server)  # hypercorn types ASGI apps with its own TypedDicts
    app = wrap_app(asgi, config.wsgi_max_body_size, "asgi")
    sock = bind_socket(host, port)
    bound_port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    listening = Listening(
        f"{'https' if tls else 'http'}://{shown}:{bound_port}", host, bound_port, ca_pem
    )
    server.host = f"{shown}:{bound_port}"
    started = False
    while True:
        async with trio.open_nursery() as nursery:
            sockets = Sockets([sock] if tls else [], [] if tls else [sock], [])
            await nursery.start(partial(worker_serve, app, config, sockets=sockets))
            if not started:
                task_status.started(listening)
                started = True
            await server.faults.outage_started.wait()
            nursery.cancel_scope.cancel()
        sock.close()
        while server.faults.refusing():
            with trio.move_on_at(server.faults.refuse_until):
                await server.faults.outage_ended.wait()
        sock = bind_socket(host, bound_port)
