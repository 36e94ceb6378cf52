"""The fault proxy: one loopback listener in front of each service the catalog lists.

The catalog's `public` endpoints name the proxy, so a CCM (and anything else that uses
the `public` interface) reaches the services through it; the services among themselves,
and the world's own set-up and `sdk()` calls, use the `internal` endpoints and are never
seen or faulted. The proxy forwards each request as it came (the `Host` header too, so the
links the services write into their answers name the proxy) and logs it; `Faults` rules
change what comes back:

- `status`: the answer, without forwarding, is that status with the service's own error
  document (`body` replaces it), `Retry-After` when `retry_after_s` is given (whole
  seconds, rounded up, as HTTP defines the header); a 401 is keystonemiddleware's answer to
  an expired or revoked token, with its `WWW-Authenticate` header;
- `delay_s`: the answer comes that much later (a slow service);
- `body` without `status`: the real answer's status, with `body` instead of its body (an
  HTML page where JSON was expected); `truncate`: the real answer cut in half;
- `apply_after`: the request is forwarded and done by the service first, and only then
  answered with the fault (the "outcome unknown" case: the call was applied, the caller
  sees an error or a timeout).

`Faults.record_arrivals()` also keeps, from then on, every request as an `Arrival`: the wall
clock at its arrival (before any rule acts), its service, method and target, and the user
whose token it carries (the proxy learns each token's user from the password
authentications it forwards to Keystone: the `X-Subject-Token` of the answer). A chaos bench
gives each replica a user of its own, so the log says which replica made each write.

`Faults.writes_peak(service)` is the most writes (POST, PUT, PATCH, DELETE; not a token
request) to `service` the proxy held at once, from arrival until answered (or until the
caller went away and the service answered anyway): what a service saw in flight.

A rule matches by service type, method and a regular expression searched in the path
(with its query string); it applies to its next `times` matching requests. Rules and the
log are thread-safe: the proxy runs Trio in its own thread (`ProxyThread`), so a
synchronous test session drives it.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus
from typing import Final, NoReturn

import httpx
import msgspec
import trio

from trio_ccm_testbed._http import Request, Response, serve_http1
from trio_ccm_testbed.openstack.layout import CATALOG, Layout, check_loopback

__all__ = ["SERVICES", "Arrival", "Fault", "Faults", "ProxyThread", "serve_proxy"]

SERVICES: Final = tuple(kind for kind, _, _ in CATALOG)
_HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "content-length",
        "accept-encoding",
        "content-encoding",
    }
)
_BACKEND_TIMEOUT_S: Final = 300.0
_COMPUTE_KEYS: Final = {
    400: "badRequest",
    403: "forbidden",
    404: "itemNotFound",
    409: "conflictingRequest",
    413: "overLimit",
    429: "overLimit",
}


_MUTATING: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True, slots=True)
class Arrival:
    """A request as it reached the proxy (module docstring)."""

    at: float
    service: str
    method: str
    target: str
    user: str

    @property
    def mutating(self) -> bool:
        """A write to a service (a token request to Keystone is not one)."""
        return self.method in _MUTATING and not (
            self.service == "identity" and self.target.startswith("/v3/auth/tokens")
        )


@dataclass
class Fault:
    """One rule of `Faults` (module docstring)."""

    service: str
    method: str | None
    path: re.Pattern[str] | None
    status: int | None
    retry_after_s: float | None
    delay_s: float
    body: bytes | None
    truncate: bool
    times: int
    apply_after: bool
    hits: int = 0

    def matches(self, service: str, method: str, target: str) -> bool:
        return (
            self.hits < self.times
            and self.service == service
            and (self.method is None or self.method == method)
            and (self.path is None or self.path.search(target) is not None)
        )


class Faults:
    """The proxy's rules and its request log (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Fault] = []
        self._seen: list[tuple[str, str, str]] = []
        self._arrivals: list[Arrival] | None = None
        self._users: dict[str, str] = {}  # token -> user name
        self._writing: dict[str, int] = {}  # service -> writes in flight now
        self._peaks: dict[str, int] = {}  # service -> most writes in flight at once

    def record_arrivals(self) -> None:
        """Keep every request from now on as an `Arrival` (module docstring)."""
        with self._lock:
            self._arrivals = []

    def arrivals(self) -> list[Arrival]:
        with self._lock:
            return list(self._arrivals or ())

    def arrived(self, at: float, service: str, method: str, target: str, token: str) -> None:
        with self._lock:
            if self._arrivals is not None:
                user = self._users.get(token, "")
                self._arrivals.append(Arrival(at, service, method, target, user))

    @contextlib.contextmanager
    def writing(self, service: str, method: str, target: str) -> Iterator[None]:
        """Count the request among `service`'s writes in flight while it is handled."""
        arrival = Arrival(0.0, service, method, target, "")
        if not arrival.mutating:
            yield
            return
        with self._lock:
            now = self._writing[service] = self._writing.get(service, 0) + 1
            self._peaks[service] = max(self._peaks.get(service, 0), now)
        try:
            yield
        finally:
            with self._lock:
                self._writing[service] -= 1

    def writes_peak(self, service: str) -> int:
        """The most writes to `service` in flight at once since the last `clear()`."""
        with self._lock:
            return self._peaks.get(service, 0)

    def learn_token(self, token: str, user: str) -> None:
        with self._lock:
            self._users[token] = user

    def add(
        self,
        service: str,
        *,
        method: str | None = None,
        path: str | None = None,
        status: int | None = None,
        retry_after_s: float | None = None,
        delay_s: float = 0,
        body: bytes | None = None,
        truncate: bool = False,
        times: int = 1,
        apply_after: bool = False,
    ) -> Fault:
        """A rule for the next `times` requests to `service` matching `method` and the
        regular expression `path` (module docstring for what each option does)."""
        if service not in SERVICES:
            raise ValueError(f"service {service!r}: the proxy fronts {', '.join(SERVICES)}")
        if status is not None and not 100 <= status <= 599:
            raise ValueError(f"status={status!r}: an HTTP status code is in 100..599")
        if times < 1 or delay_s < 0 or (retry_after_s is not None and retry_after_s < 0):
            raise ValueError("times must be >= 1, delay_s and retry_after_s >= 0")
        if status is None and body is None and not truncate and not delay_s:
            raise ValueError("a fault needs a status, a delay, a body or truncate=True")
        fault = Fault(
            service=service,
            method=method.upper() if method else None,
            path=re.compile(path) if path is not None else None,
            status=status,
            retry_after_s=retry_after_s,
            delay_s=delay_s,
            body=body,
            truncate=truncate,
            times=times,
            apply_after=apply_after,
        )
        with self._lock:
            self._rules.append(fault)
        return fault

    def clear(self) -> None:
        """Drop every rule and empty the request log (arrivals too, and stop keeping them)."""
        with self._lock:
            self._rules.clear()
            self._seen.clear()
            self._arrivals = None
            self._peaks = dict(self._writing)  # those in flight now still count

    def clear_rules(self) -> None:
        """Drop every rule (the logs kept)."""
        with self._lock:
            self._rules.clear()

    def seen(
        self, service: str, method: str | None = None, path: str | None = None
    ) -> list[tuple[str, str]]:
        """The requests to `service` so far as (method, path with query), oldest first;
        filtered by `method` and by the regular expression `path` (searched)."""
        pattern = re.compile(path) if path is not None else None
        with self._lock:
            seen = list(self._seen)
        return [
            (m, target)
            for kind, m, target in seen
            if kind == service
            and (method is None or m == method.upper())
            and (pattern is None or pattern.search(target) is not None)
        ]

    def take(self, service: str, method: str, target: str) -> Fault | None:
        """Log the request; the first rule it matches, with the hit counted."""
        with self._lock:
            self._seen.append((service, method, target))
            for fault in self._rules:
                if fault.matches(service, method, target):
                    fault.hits += 1
                    return fault
        return None


def _error_document(service: str, status: int) -> tuple[bytes, list[tuple[str, str]]]:
    """The body and headers `service` answers `status` with (401: keystonemiddleware's)."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    message = f"{phrase} (injected by the trio-ccm test world's fault proxy)"
    headers = [("Content-Type", "application/json")]
    document: object
    if status == 401:
        document = {
            "error": {
                "code": 401,
                "title": "Unauthorized",
                "message": "The request you have made requires authentication.",
            }
        }
        headers.append(("WWW-Authenticate", 'Keystone uri="injected"'))
    elif service == "compute":
        key = _COMPUTE_KEYS.get(status, "computeFault" if status >= 500 else "badRequest")
        document = {key: {"code": status, "message": message}}
    elif service == "network":
        document = {"NeutronError": {"type": f"HTTP{status}", "message": message, "detail": ""}}
    elif service == "load-balancer":
        fault_code = "Server" if status >= 500 else "Client"
        document = {"faultcode": fault_code, "faultstring": message, "debuginfo": None}
    elif service == "placement":
        document = {"errors": [{"status": status, "title": phrase, "detail": message}]}
    else:
        document = {"error": {"code": status, "title": phrase, "message": message}}
    return msgspec.json.encode(document), headers


def _fault_response(fault: Fault, service: str, status: int) -> Response:
    body, headers = _error_document(service, status)
    if fault.body is not None:
        body = fault.body
        headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
        headers.append(("Content-Type", _content_type(fault.body)))
    if fault.retry_after_s is not None:
        headers.append(("Retry-After", str(math.ceil(fault.retry_after_s))))
    return Response(status, body, headers)


def _content_type(body: bytes) -> str:
    return "text/html" if body.lstrip()[:1] == b"<" else "application/json"


def _handler(
    service: str, backend: str, faults: Faults, client: httpx.AsyncClient
) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        query = "&".join(f"{k}={v}" for k, values in request.query.items() for v in values)
        target = request.raw_path + (f"?{query}" if query else "")
        with faults.writing(service, request.method, target):
            return await handle_one(request, target)

    async def handle_one(request: Request, target: str) -> Response:
        # The kernel's receive time (a busy proxy reads late; the referee dates by arrival).
        at = time.time() if request.received_at is None else request.received_at
        token = request.headers.get("x-auth-token") or ""
        faults.arrived(at, service, request.method, target, token)
        fault = faults.take(service, request.method, target)
        if fault is not None and not fault.apply_after:
            await trio.sleep(fault.delay_s)
            if fault.status is not None:
                return _fault_response(fault, service, fault.status)
        answer = await _forward(client, backend, request)
        if service == "identity" and request.method == "POST" and target == "/v3/auth/tokens":
            issued, user = answer.header("x-subject-token"), _password_user(request.body)
            if issued and user:
                faults.learn_token(issued, user)
        if fault is None:
            return answer
        if fault.apply_after:
            await trio.sleep(fault.delay_s)
            if fault.status is not None:
                return _fault_response(fault, service, fault.status)
        if fault.truncate and isinstance(answer.body, bytes):
            answer.body = answer.body[: len(answer.body) // 2]
        elif fault.body is not None:
            answer.body = fault.body
            answer.headers = [(k, v) for k, v in answer.headers if k.lower() != "content-type"]
            answer.headers.append(("Content-Type", _content_type(fault.body)))
        return answer

    return handle


def _password_user(body: bytes) -> str:
    """The user name of a Keystone password authentication, or ""."""
    try:
        user = json.loads(body)["auth"]["identity"]["password"]["user"]["name"]
    except (ValueError, KeyError, TypeError):
        return ""
    return str(user)


async def _forward(client: httpx.AsyncClient, backend: str, request: Request) -> Response:
    headers = [(k, v) for k, v in request.headers.raw if k not in _HOP_BY_HOP]
    query: list[tuple[str, str | int | float | bool | None]] = [
        (k, v) for k, values in request.query.items() for v in values
    ]
    try:
        answer = await client.request(
            request.method,
            backend + request.raw_path,
            params=query,
            headers=headers,
            content=request.body or None,
        )
    except httpx.HTTPError as exc:
        body = f"trio-ccm fault proxy: the service at {backend} failed: {exc!r}\n"
        return Response(502, body.encode(), [("Content-Type", "text/plain")])
    kept = [(k, v) for k, v in answer.headers.multi_items() if k.lower() not in _HOP_BY_HOP]
    return Response(answer.status_code, answer.content, kept)


async def serve_proxy(
    layout: Layout,
    faults: Faults,
    *,
    task_status: trio.TaskStatus[dict[str, int]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve a proxy for each catalog service on `layout.host` until cancelled; started
    with the bound port of each, by service type."""
    check_loopback(layout.host)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=0)
    async with (
        httpx.AsyncClient(timeout=_BACKEND_TIMEOUT_S, limits=limits) as client,
        trio.open_nursery() as nursery,
    ):
        bound: dict[str, int] = {}
        for service in SERVICES:
            backend = layout.url(layout.ports.backend(service))
            handler = _handler(service, backend, faults, client)
            bound[service] = await nursery.start(
                partial(serve_http1, handler, host=layout.host, port=layout.ports.proxy(service))
            )
        task_status.started(bound)
        await trio.sleep_forever()
    raise AssertionError("unreachable")


class ProxyThread:
    """`serve_proxy` in a thread of its own (its own `trio.run`), for synchronous callers."""

    def __init__(self, layout: Layout, faults: Faults) -> None:
        self.layout = layout
        self.faults = faults
        self.ports: dict[str, int] = {}
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._thread = threading.Thread(target=self._run, name="openstack-fault-proxy", daemon=True)

    def start(self, *, timeout_s: float = 30.0) -> None:
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError("the fault proxy did not start")
        if self._error is not None:
            raise RuntimeError(f"the fault proxy failed to start: {self._error!r}") from self._error

    def stop(self) -> None:
        if self._token is not None and self._scope is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(timeout=10.0)

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported to start(); the thread ends either way
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._scope = scope
            async with trio.open_nursery() as nursery:
                self.ports = await nursery.start(serve_proxy, self.layout, self.faults)
                self._ready.set()
