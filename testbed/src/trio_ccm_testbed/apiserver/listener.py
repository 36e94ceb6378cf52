"""The HTTP(S) front door: the emulator served by `serve_http1` (plain HTTP/1.1), or over TLS
by `trio_ccm.health.serve_asgi` (hypercorn, with HTTP/2 by ALPN).

`serve_apiserver` binds loopback (TLS optional, with a CA minted in memory), reports a
`Listening` (URL, CA, kubeconfig writer) through `task_status`, and serves until cancelled.
An injected outage (`faults.refuse_connections`) closes the listening socket, so clients
get a real "connection refused", and re-binds the same port when it is over.
"""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import trio
import yaml

from trio_ccm.health import serve_asgi
from trio_ccm_testbed._http import AsgiApp, serve_http1
from trio_ccm_testbed.apiserver.server import ApiServer

_KEEP_ALIVE_S = 75


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
    """Serve `server` over HTTP(S) until cancelled; `task_status.started(Listening)`.

    An injected outage stops the listener (the socket is closed, so connecting is refused
    and open connections break) and serves again on the same port once it is over.
    """
    context, ca_pem = _tls(host) if tls else (None, None)
    serve: Callable[..., Awaitable[NoReturn]]
    if context is None:
        serve = partial(serve_http1, server.handle, host=host, keep_alive_timeout_s=_KEEP_ALIVE_S)
    else:
        serve = partial(
            serve_asgi,
            AsgiApp(server.handle),
            host=host,
            ssl_context=context,
            keep_alive_timeout_s=_KEEP_ALIVE_S,
        )
    listening: Listening | None = None
    while True:
        async with trio.open_nursery() as nursery:
            bound_port: int = await nursery.start(
                partial(serve, port=listening.port if listening else port)
            )
            if listening is None:
                shown = f"[{host}]" if ":" in host else host
                listening = Listening(
                    f"{'https' if tls else 'http'}://{shown}:{bound_port}", host, bound_port, ca_pem
                )
                server.host = f"{shown}:{bound_port}"
                task_status.started(listening)
            await server.faults.outage_started.wait()
            nursery.cancel_scope.cancel()
        while server.faults.refusing():
            with trio.move_on_at(server.faults.refuse_until):
                await server.faults.outage_ended.wait()
