"""The :10258 health, metrics and debug endpoints, and `serve_asgi`, the one ASGI server.

`serve_asgi` runs an ASGI app on hypercorn's Trio worker; it serves :10258 here and, since
test tooling may use runtime code but never the reverse, the emulator and the simulated
cloud too (their ASGI adapter is `trio_ccm_testbed._http.AsgiApp`).

Health output follows k8s.io/apiserver's healthz handlers: `ok` when every check passes,
a `[+]`/`[-]` listing with `?verbose` or on any failure (HTTP 500), `?exclude=NAME` to skip a
check, and `/<endpoint>/<check>` for a single check. Failure reasons are logged, never served.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import logging
import os
import socket
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NoReturn
from urllib.parse import parse_qs

import prometheus_client
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypercorn.config import Config, Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from trio_ccm.logs import get_logger

__all__ = ["Check", "Endpoints", "serve_asgi", "serve_http"]

log = get_logger("trio_ccm.health")

_Scope = MutableMapping[str, Any]
_Message = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[_Message]]
_Send = Callable[[_Message], Awaitable[None]]

_TEXT = "text/plain; charset=utf-8"
_JSON = "application/json"
_HEALTH_ENDPOINTS = ("healthz", "livez", "readyz")
_CERT_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class Check:
    """A named health check whose probe returns None when healthy, else the reason."""

    name: str
    probe: Callable[[], str | None]


@dataclass(frozen=True)
class Endpoints:
    """What the HTTP server exposes: health checks, the metrics registry and debug views."""

    livez: Sequence[Check]
    readyz: Sequence[Check]
    healthz: Sequence[Check]
    registry: prometheus_client.CollectorRegistry
    configz: Callable[[], Mapping[str, object]]
    debug_actors: Callable[[], Mapping[str, object]]


@dataclass(frozen=True)
class _Response:
    status: int
    body: bytes
    content_type: str = _TEXT
    extra_headers: tuple[tuple[str, str], ...] = ()


def _text(status: int, text: str) -> _Response:
    return _Response(status, text.encode(), extra_headers=(("x-content-type-options", "nosniff"),))


def _run_checks(
    endpoint: str, checks: Sequence[Check], query: Mapping[str, list[str]]
) -> _Response:
    """Aggregate `checks` the way k8s.io/apiserver's handleRootHealth does."""
    excluded = set(query.get("exclude", []))
    lines: list[str] = []
    failed: list[str] = []
    for check in checks:
        if check.name in excluded:
            excluded.discard(check.name)
            lines.append(f"[+]{check.name} excluded: ok\n")
            continue
        reason = check.probe()
        if reason is None:
            lines.append(f"[+]{check.name} ok\n")
        else:
            lines.append(f"[-]{check.name} failed: reason withheld\n")
            failed.append(check.name)
            log.info("healthcheck.failed", endpoint=endpoint, check=check.name, reason=reason)
    if excluded:
        names = ",".join(json.dumps(name) for name in sorted(excluded))
        lines.append(f"warn: some health checks cannot be excluded: no matches for {names}\n")
    if failed:
        return _text(500, "".join(lines) + f"{endpoint} check failed\n")
    if "verbose" not in query:
        return _text(200, "ok")
    return _text(200, "".join(lines) + f"{endpoint} check passed\n")


def _run_one(endpoint: str, check: Check) -> _Response:
    """Run one check the way k8s.io/apiserver's adaptCheckToHandler does, withholding the reason."""
    reason = check.probe()
    if reason is None:
        return _text(200, "ok")
    log.info("healthcheck.failed", endpoint=endpoint, check=check.name, reason=reason)
    return _text(500, "internal server error: reason withheld\n")


def _json(value: Mapping[str, object]) -> _Response:
    return _Response(200, json.dumps(value).encode(), content_type=_JSON)


class _App:
    """ASGI app routing GET requests to the health, metrics and debug handlers."""

    def __init__(self, endpoints: Endpoints) -> None:
        self._endpoints = endpoints
        self._checks: dict[str, Sequence[Check]] = {
            "healthz": endpoints.healthz,
            "livez": endpoints.livez,
            "readyz": endpoints.readyz,
        }

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        response = self._route(scope)
        headers = [
            (b"content-type", response.content_type.encode()),
            (b"content-length", str(len(response.body)).encode()),
            *((k.encode(), v.encode()) for k, v in response.extra_headers),
        ]
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": response.body})

    def _route(self, scope: _Scope) -> _Response:
        path: str = scope["path"]
        known = self._known(path)
        if not known:
            return _text(404, "404 page not found\n")
        if scope["method"] != "GET":
            response = _text(405, "405 method not allowed\n")
            return _Response(
                response.status,
                response.body,
                extra_headers=(*response.extra_headers, ("allow", "GET")),
            )
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        if path == "/metrics":
            return _Response(
                200, generate_latest(self._endpoints.registry), content_type=CONTENT_TYPE_LATEST
            )
        if path == "/configz":
            return _json(self._endpoints.configz())
        if path == "/debug/actors":
            return _json(self._endpoints.debug_actors())
        endpoint, _, name = path[1:].partition("/")
        checks = self._checks[endpoint]
        if not name:
            return _run_checks(endpoint, checks, query)
        return _run_one(endpoint, next(c for c in checks if c.name == name))

    def _known(self, path: str) -> bool:
        if path in ("/metrics", "/configz", "/debug/actors"):
            return True
        endpoint, slash, name = path[1:].partition("/")
        if endpoint not in _HEALTH_ENDPOINTS:
            return False
        return not slash or any(c.name == name for c in self._checks[endpoint])


async def read_body(receive: _Receive) -> bytes | None:
    """An ASGI request's whole body, or None when the client disconnected first."""
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


async def answer_lifespan(receive: _Receive, send: _Send) -> None:
    """ASGI lifespan: acknowledge startup and shutdown (there is nothing to set up)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class ContextConfig(Config):
    """hypercorn's Config with a ready SSL context instead of certificate file names."""

    def __init__(self, context: ssl.SSLContext | None) -> None:
        super().__init__()
        self._context = context

    @property
    def ssl_enabled(self) -> bool:
        return self._context is not None

    def create_ssl_context(self) -> ssl.SSLContext | None:
        return self._context


def _server_context() -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


def _self_signed_pem(bind_address: str) -> bytes:
    """Mint a P-256 key and a self-signed certificate for localhost and the bind address."""
    key = ec.generate_private_key(ec.SECP256R1())
    dns: set[str] = {"localhost"}
    ips: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = {
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    }
    try:
        address = ipaddress.ip_address(bind_address)
    except ValueError:
        dns.add(bind_address)
    else:
        if not address.is_unspecified:
            ips.add(address)
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in sorted(dns)]
    sans += [x509.IPAddress(ip) for ip in sorted(ips, key=str)]
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    # Certificate validity is wall-clock by nature; nothing schedules on it.
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + _CERT_VALIDITY)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem + cert.public_bytes(serialization.Encoding.PEM)


def _self_signed_context(bind_address: str) -> ssl.SSLContext:
    """Load a freshly minted pair through a 0600 temp file that is removed at once."""
    pem = _self_signed_pem(bind_address)
    context = _server_context()
    fd, path = tempfile.mkstemp(prefix="trio-ccm-serving-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(pem)
        context.load_cert_chain(path)
    finally:
        os.unlink(path)
    return context


def _files_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = _server_context()
    context.load_cert_chain(cert_file, key_file)
    return context


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening, non-blocking TCP socket (SO_REUSEADDR, so a port can be re-bound)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def serve_asgi(
    app: object,
    *,
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None = None,
    keep_alive_timeout_s: float | None = None,
    max_request_line: int | None = None,
    error_log: logging.Logger | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve the ASGI `app` on hypercorn's Trio worker until cancelled.

    Binds `host:port` (port 0: any free port) before anything else, so the port reported
    through `task_status` is already accepting; TLS when `ssl_context` is given (HTTP/2 is
    offered by ALPN if the context does). The socket is closed when the serve ends, and a
    later serve may bind the same port again (SO_REUSEADDR). `error_log` None keeps
    hypercorn's own errors out of the logs; access logs are always off.
    """
    config = ContextConfig(ssl_context)
    config.accesslog = None
    config.errorlog = error_log
    if keep_alive_timeout_s is not None:
        config.keep_alive_timeout = keep_alive_timeout_s
    if max_request_line is not None:
        config.h11_max_incomplete_size = max_request_line
    asgi: Any = app  # hypercorn types ASGI apps with its own TypedDicts
    wrapped = wrap_app(asgi, config.wsgi_max_body_size, "asgi")
    sock = bind_socket(host, port)
    try:
        bound_port: int = sock.getsockname()[1]
        tls = ssl_context is not None
        sockets = Sockets([sock] if tls else [], [] if tls else [sock], [])
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(worker_serve, wrapped, config, sockets=sockets))
            task_status.started(bound_port)
    finally:
        sock.close()
    raise AssertionError("hypercorn's worker returned without being cancelled")


async def serve_http(
    endpoints: Endpoints,
    *,
    bind_address: str = "0.0.0.0",  # noqa: S104  # upstream's --bind-address default
    port: int = 10258,
    tls_cert_file: str | None = None,
    tls_private_key_file: str | None = None,
    plain_http: bool = False,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve `endpoints` until cancelled, reporting the bound port through `task_status`."""
    if (tls_cert_file is None) != (tls_private_key_file is None):
        raise ValueError("--tls-cert-file and --tls-private-key-file must be given together")
    context: ssl.SSLContext | None
    if plain_http:
        context = None
    elif tls_cert_file is not None and tls_private_key_file is not None:
        context = await trio.to_thread.run_sync(_files_context, tls_cert_file, tls_private_key_file)
    else:
        context = await trio.to_thread.run_sync(_self_signed_context, bind_address)
    async with trio.open_nursery() as nursery:
        bound_port: int = await nursery.start(
            partial(
                serve_asgi,
                _App(endpoints),
                host=bind_address,
                port=port,
                ssl_context=context,
                # A Logger instance is used as is: hypercorn's errors reach stdlib logging.
                error_log=logging.getLogger("hypercorn.error"),
            )
        )
        log.info("http.started", address=bind_address, port=bound_port, tls=bool(context))
        task_status.started(bound_port)
    raise AssertionError("serve_asgi returned without being cancelled")
