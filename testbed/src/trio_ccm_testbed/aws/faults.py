"""A fault-injecting WSGI middleware in front of moto, and per-action call counters.

moto has no fault injection. `Faults` sits between the HTTP server and moto's app and,
for the requests a rule matches, answers as AWS does when it misbehaves:

- `throttle()`: EC2's `RequestLimitExceeded` with HTTP 503 (EC2's error document), ELB's
  and STS's `Throttling` with HTTP 400 (the query protocol's `ErrorResponse`);
- `server_error()`: HTTP 500 `InternalError` (EC2) / `InternalFailure` (query services);
  with `landed=True` the request is applied first (moto handles it) and only its answer
  is lost, as when AWS's front end fails after the change landed: the client cannot tell
  it from a failure before applying, an unknown outcome;
- `latency()`: the answer, `seconds` later;
- `garbage()`: HTTP 200 with an HTML page (what moto itself answers for an unimplemented
  filter), or with the real answer cut in half.

A rule matches by service (the SigV4 credential scope's: `ec2`, `elasticloadbalancing`,
`sts`) and action (`Action=` of the form body), each None for any; it applies to its next
`times` matching requests (None: all of them). Requests whose User-Agent carries
`HARNESS_AGENT` (the test world's own set-up calls) are neither faulted nor counted.

`calls(action)` counts the requests that reached the middleware (faulted ones included),
so tests can assert "one DescribeInstances for N Nodes".

`record_arrivals()` also keeps, from then on, every such request as an `Arrival`: the wall
clock at its arrival (before any fault rule acts), the access key it is signed with (a
chaos bench gives each replica its own key: moto answers any unknown key from its default
account), its service and action, and what it names first among `_TARGET_KEYS` (a load
balancer, target group, listener or security group: `arrivals()`, `Arrival.mutating`).
"""

from __future__ import annotations

import io
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qs

__all__ = ["HARNESS_AGENT", "Arrival", "Fault", "Faults"]

HARNESS_AGENT: Final = "trio-ccm-harness"
_CREDENTIAL: Final = "Credential="
_HTML: Final = (
    b"<!doctype html><html><head><title>500 Internal Server Error</title></head><body>"
    b"<h1>Internal Server Error</h1><p>The server encountered an internal error.</p>"
    b"</body></html>"
)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


_READ_PREFIXES: Final = ("Describe", "Get", "List")
_TARGET_KEYS: Final = (
    "LoadBalancerName",
    "LoadBalancerArn",
    "TargetGroupArn",
    "ListenerArn",
    "GroupId",
    "GroupName",
    "InstanceId.1",
)


@dataclass(frozen=True, slots=True)
class Arrival:
    """A request as it reached the middleware: wall time, access key, service, action."""

    at: float
    key: str
    service: str
    action: str
    target: str = ""

    @property
    def mutating(self) -> bool:
        """Whether the action changes something (anything but Describe*, Get*, List*)."""
        return bool(self.action) and not self.action.startswith(_READ_PREFIXES)


@dataclass
class Fault:
    """One rule: `kind` is throttle, error, latency, html, truncated or lost."""

    kind: str
    action: str | None = None
    service: str | None = None
    times: int | None = 1
    status: int = 0
    code: str = ""
    latency_s: float = 0.0
    hits: int = 0

    def matches(self, service: str, action: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        return (self.action is None or self.action == action) and (
            self.service is None or self.service == service
        )


class Faults:
    """The middleware's rules and counters (thread-safe: moto serves from many threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Fault] = []
        self._calls: Counter[tuple[str, str]] = Counter()
        self._faulted: Counter[tuple[str, str]] = Counter()
        self._arrivals: list[Arrival] | None = None

    # -- rules ------------------------------------------------------------------------
    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._rules.append(fault)
        return fault

    def throttle(
        self, action: str | None = None, *, service: str = "ec2", times: int | None = 1
    ) -> Fault:
        """AWS's throttling answer for `service` (see the module docstring)."""
        if service == "ec2":
            return self.add(Fault("throttle", action, service, times, 503, "RequestLimitExceeded"))
        return self.add(Fault("throttle", action, service, times, 400, "Throttling"))

    def server_error(
        self,
        action: str | None = None,
        *,
        service: str | None = None,
        status: int = 500,
        times: int | None = 1,
        landed: bool = False,
    ) -> Fault:
        """HTTP `status` with AWS's internal-error body; `landed`: after applying the
        request (see the module docstring)."""
        code = "InternalError" if service in (None, "ec2") else "InternalFailure"
        return self.add(Fault("lost" if landed else "error", action, service, times, status, code))

    def latency(
        self,
        seconds: float,
        action: str | None = None,
        *,
        service: str | None = None,
        times: int | None = None,
    ) -> Fault:
        return self.add(Fault("latency", action, service, times, latency_s=seconds))

    def garbage(
        self,
        action: str | None = None,
        *,
        service: str | None = None,
        truncated: bool = False,
        times: int | None = 1,
    ) -> Fault:
        return self.add(Fault("truncated" if truncated else "html", action, service, times, 200))

    def clear_rules(self) -> None:
        """Drop every rule (counters and arrivals kept)."""
        with self._lock:
            self._rules.clear()

    def clear(self) -> None:
        """Drop every rule, zero the counters and stop recording arrivals."""
        with self._lock:
            self._rules.clear()
            self._calls.clear()
            self._faulted.clear()
            self._arrivals = None

    def record_arrivals(self) -> None:
        """Keep every request that reaches the middleware from now on (module docstring)."""
        with self._lock:
            self._arrivals = []

    def arrivals(self) -> list[Arrival]:
        with self._lock:
            return list(self._arrivals or ())

    # -- counters ---------------------------------------------------------------------
    def calls(self, action: str | None = None, *, service: str | None = None) -> int:
        """Requests seen for `action` of `service` (None: any)."""
        with self._lock:
            return sum(
                n
                for (svc, act), n in self._calls.items()
                if (action is None or act == action) and (service is None or svc == service)
            )

    def counts(self) -> dict[str, int]:
        """Requests seen, by `service:action`."""
        with self._lock:
            return {f"{svc}:{act}": n for (svc, act), n in sorted(self._calls.items())}

    def faulted(self) -> dict[str, int]:
        with self._lock:
            return {f"{svc}:{act}": n for (svc, act), n in sorted(self._faulted.items())}

    def reset_counts(self) -> None:
        with self._lock:
            self._calls.clear()
            self._faulted.clear()

    # -- the middleware ---------------------------------------------------------------
    def wrap(self, app: WsgiApp) -> WsgiApp:
        """`app` behind the rules (a WSGI app)."""

        def middleware(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            if environ.get("PATH_INFO", "").startswith("/moto-api"):
                return app(environ, start_response)
            arrived = time.time()
            body = _read_body(environ)
            service, action = _identify(environ, body)
            if HARNESS_AGENT in environ.get("HTTP_USER_AGENT", ""):
                return app(environ, start_response)
            with self._lock:
                if self._arrivals is not None:
                    key, target = _access_key(environ), _target(body)
                    self._arrivals.append(Arrival(arrived, key, service, action, target))
                self._calls[(service, action)] += 1
                fault = next((f for f in self._rules if f.matches(service, action)), None)
                if fault is not None:
                    fault.hits += 1
                    self._faulted[(service, action)] += 1
            if fault is None:
                return app(environ, start_response)
            if fault.kind == "latency":
                time.sleep(fault.latency_s)
                return app(environ, start_response)
            if fault.kind == "truncated":
                return _truncated(app, environ, start_response)
            if fault.kind == "lost":
                _handled(app, environ)
            if fault.kind == "html":
                return _answer(start_response, 200, "text/html", _HTML)
            return _answer(
                start_response, fault.status, "text/xml", _error_body(service, fault.code)
            )

        return middleware


def _read_body(environ: dict[str, Any]) -> bytes:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    body: bytes = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def _identify(environ: Mapping[str, Any], body: bytes) -> tuple[str, str]:
    auth = str(environ.get("HTTP_AUTHORIZATION", ""))
    service = ""
    if _CREDENTIAL in auth:
        scope = auth.split(_CREDENTIAL, 1)[1].split(",", 1)[0].split("/")
        if len(scope) >= 4:
            service = scope[3]
    form = parse_qs(body.decode(errors="replace")) if body else {}
    query = parse_qs(str(environ.get("QUERY_STRING", "")))
    action = (form.get("Action") or query.get("Action") or [""])[0]
    if not service and action.startswith("AssumeRole"):
        service = "sts"  # AssumeRoleWithWebIdentity is unsigned
    return service, action


def _access_key(environ: Mapping[str, Any]) -> str:
    """The access key of the SigV4 credential (`Credential=<key>/<date>/...`), or ""."""
    auth = str(environ.get("HTTP_AUTHORIZATION", ""))
    if _CREDENTIAL not in auth:
        return ""
    return auth.split(_CREDENTIAL, 1)[1].split("/", 1)[0]


def _target(body: bytes) -> str:
    form = parse_qs(body.decode(errors="replace")) if body else {}
    return next((form[k][0] for k in _TARGET_KEYS if form.get(k)), "")


def _error_body(service: str, code: str) -> bytes:
    request_id = str(uuid.uuid4())
    message = {
        "RequestLimitExceeded": "Request limit exceeded.",
        "Throttling": "Rate exceeded",
        "InternalError": "An internal error has occurred",
        "InternalFailure": "The request processing has failed because of an unknown error.",
    }.get(code, code)
    if service == "ec2":
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}'
            f"</Code><Message>{message}</Message></Error></Errors><RequestID>{request_id}"
            "</RequestID></Response>"
        ).encode()
    kind = "Sender" if code == "Throttling" else "Receiver"
    return (
        f"<ErrorResponse><Error><Type>{kind}</Type><Code>{code}</Code><Message>{message}"
        f"</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
    ).encode()


def _answer(start_response: Callable[..., Any], status: int, kind: str, body: bytes) -> list[bytes]:
    reason = {
        200: "OK",
        400: "Bad Request",
        500: "Internal Server Error",
        503: "Service Unavailable",
    }
    start_response(
        f"{status} {reason.get(status, 'Error')}",
        [("Content-Type", kind), ("Content-Length", str(len(body)))],
    )
    return [body]


def _handled(app: WsgiApp, environ: dict[str, Any]) -> bytes:
    """What `app` answers to the request (it is applied), kept from the client."""

    def capture(status: str, headers: list[tuple[str, str]], *_: Any) -> Callable[..., Any]:
        return lambda _data: None

    return b"".join(app(environ, capture))


def _truncated(
    app: WsgiApp, environ: dict[str, Any], start_response: Callable[..., Any]
) -> list[bytes]:
    """The real answer, cut in half (as a connection dropped mid-body would leave it)."""
    body = _handled(app, environ)
    half = body[: len(body) // 2]
    return _answer(start_response, 200, "text/xml", half)
