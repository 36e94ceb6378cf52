"""OpenStackClient: Keystone v3, the service catalog, and JSON calls to any service, on
httpx under Trio. The contract, for every part of the provider:

```python
client = OpenStackClient(Credentials(...), region="RegionOne")
server = await client.request("compute", "GET", f"/servers/{uuid}")   # -> parsed JSON
ports = await client.list("network", "/v2.0/ports", "ports", params={"device_id": ids})
await client.request("network", "PUT", f"/v2.0/routers/{rid}/add_extraroutes", json=body)
await client.aclose()
```

`request(service, method, path, *, json=None, params=None, headers=None)`:
- `service` is the catalog type ("compute", "network", "load-balancer", "identity",
  "image", "placement"); the endpoint is the catalog's for the configured region and
  interface (default "public"), or `endpoint_overrides[service]`. `path` is joined to the
  endpoint as given, so the version prefix Neutron and Octavia keep out of their catalog
  entries is the caller's ("/v2.0/ports", "/v2/lbaas/loadbalancers"; an endpoint that
  already ends in that version has it stripped, so either catalog style works). Nova's
  endpoint carries its version ("/servers/..."); no microversion header is sent unless
  the caller passes one (OCCM speaks Nova 2.1).
- `params` values that are lists are repeated (`device_id=a&device_id=b`: Neutron's "any
  of"). Returns the parsed JSON, or None for an empty answer (204).
- Every attempt is bounded by `timeout_s` as a whole (OCCM's `[Metadata] request-timeout`,
  default 60 s: the time from sending to the last byte of the answer).
- Retries (up to `max_attempts` in all, capped exponential backoff with full jitter):
  GET/HEAD on a 5xx, no answer, a timeout or a garbage body; any method whose request
  never left (connection refused, connect timeout). A mutating call (POST, PUT, PATCH,
  DELETE) that was sent and then timed out, lost its connection or got a 5xx is NOT
  retried: it raises `OpenStackOutcomeUnknownError` (an `OutcomeUnknownError`), and so
  does a 2xx whose body is not the JSON promised.
- 401: the token is dropped, Keystone asked once more, and the call sent again, once.
- 413/429 raise `OpenStackThrottledError` at once (a `ThrottledError` with Retry-After):
  the shared budget slows down; retrying here would hide the throttle from it.
- 404 `NotFoundError`, 409 `ConflictError`, other 4xx `OpenStackError`, each with the
  server's message. Nothing a server answers crashes the client: garbage is an
  `OpenStackServerError`.
- The leadership fence (`cloud/fence.py`) is checked before every request that leaves,
  Keystone's included: a replica past its Lease sends nothing.

`list(service, path, key, params=...)` follows Nova's and Neutron's `<key>_links` "next"
markers (re-issued on our endpoint, never on the host the link names) and returns every
item. `token()` returns a valid token (re-used; renewed before it expires: at 3/4 of its
lifetime or 5 minutes before, whichever is earlier). `statistics()` counts calls by
`service:METHOD:/path` with IDs replaced by `{id}`.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import math
import random
import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
import msgspec
import trio

from trio_ccm import httpsend
from trio_ccm.cloud import fence
from trio_ccm.cloud.attempts import Attempts, Resend, Retry, explain
from trio_ccm.cloud.openstack.errors import (
    ConflictError,
    NotFoundError,
    OpenStackAuthError,
    OpenStackError,
    OpenStackOutcomeUnknownError,
    OpenStackServerError,
    OpenStackThrottledError,
)
from trio_ccm.logs import get_logger

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "USER_AGENT",
    "ClientStatistics",
    "Credentials",
    "OpenStackClient",
    "call_key",
]

log = get_logger("trio_ccm.cloud.openstack.client")

DEFAULT_TIMEOUT_S: Final = 60.0
"""OCCM's `[Metadata] request-timeout` default."""
USER_AGENT: Final = "trio-ccm openstack-cloud-controller-manager"
_REFRESH_MARGIN_S: Final = 300.0
_IDEMPOTENT: Final = frozenset({"GET", "HEAD"})
_MAX_PAGES: Final = 10_000
_ID_RE: Final = re.compile(
    r"/(?:[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}|\d+)(?=/|$)"
)
_VERSION_SUFFIX: Final = {"network": ("/v2.0",), "load-balancer": ("/v2.0", "/v2")}


@dataclass(frozen=True, slots=True)
class Credentials:
    """Keystone v3 credentials: a password (user by name with its domain, or by ID) scoped
    to a project (by ID, or by name with its domain), or an application credential (by ID,
    or by name with its user). `domain_*` is the fallback domain of the user and project,
    as in OCCM's `domain-name`/`domain-id`."""

    auth_url: str
    username: str = ""
    user_id: str = ""
    password: str = field(default="", repr=False)
    user_domain_name: str = ""
    user_domain_id: str = ""
    project_name: str = ""
    project_id: str = ""
    project_domain_name: str = ""
    project_domain_id: str = ""
    domain_name: str = ""
    domain_id: str = ""
    application_credential_id: str = ""
    application_credential_name: str = ""
    application_credential_secret: str = field(default="", repr=False)

    @property
    def method(self) -> str:
        """ "application_credential" or "password"."""
        if self.application_credential_id or self.application_credential_name:
            return "application_credential"
        return "password"

    def problems(self) -> list[str]:
        """What is missing for Keystone to accept these credentials (empty: complete)."""
        found: list[str] = []
        if not self.auth_url:
            found.append("auth-url is missing")
        if self.method == "application_credential":
            if not self.application_credential_secret:
                found.append("application-credential-secret is missing")
            if not self.application_credential_id and not (self.user_id or self.username):
                found.append(
                    "application-credential-name needs the user: set user-id, or username "
                    "with user-domain-name/domain-name"
                )
            return found
        if not (self.user_id or self.username):
            found.append("username or user-id is missing")
        if not self.password:
            found.append("password is missing")
        if self.username and not self.user_id and not self._user_domain():
            found.append("username needs its domain: set user-domain-name or domain-name")
        if not (self.project_id or self.project_name):
            found.append("the project is missing: set tenant-id or tenant-name")
        if self.project_name and not self.project_id and not self._project_domain():
            found.append("tenant-name needs its domain: set tenant-domain-name or domain-name")
        return found

    def _user_domain(self) -> dict[str, str]:
        return self._domain(self.user_domain_id, self.user_domain_name)

    def _project_domain(self) -> dict[str, str]:
        return self._domain(self.project_domain_id, self.project_domain_name)

    def _domain(self, own_id: str, own_name: str) -> dict[str, str]:
        """The first domain given: the object's own (ID, then name), else the fallback
        `domain_*` (ID, then name); {} when none is."""
        for key, value in (
            ("id", own_id),
            ("name", own_name),
            ("id", self.domain_id),
            ("name", self.domain_name),
        ):
            if value:
                return {key: value}
        return {}

    def _user(self) -> dict[str, Any]:
        if self.user_id:
            return {"id": self.user_id}
        return {"name": self.username, "domain": self._user_domain()}

    def auth_body(self) -> dict[str, Any]:
        """The body of `POST /v3/auth/tokens`."""
        if self.method == "application_credential":
            cred: dict[str, Any] = {"secret": self.application_credential_secret}
            if self.application_credential_id:
                cred["id"] = self.application_credential_id
            else:
                cred["name"] = self.application_credential_name
                cred["user"] = self._user()
            identity: dict[str, Any] = {
                "methods": ["application_credential"],
                "application_credential": cred,
            }
            return {"auth": {"identity": identity}}
        user = self._user() | {"password": self.password}
        project: dict[str, Any] = (
            {"id": self.project_id}
            if self.project_id
            else {"name": self.project_name, "domain": self._project_domain()}
        )
        return {
            "auth": {
                "identity": {"methods": ["password"], "password": {"user": user}},
                "scope": {"project": project},
            }
        }


@dataclass(frozen=True, slots=True)
class ClientStatistics:
    """Requests sent (attempts included) by `service:METHOD:/path` (IDs as `{id}`)."""

    calls: Mapping[str, int]
    retries: int
    throttles: int
    auths: int


@dataclass(slots=True)
class _Token:
    value: str
    renew_at: float  # trio.current_time()
    catalog: list[dict[str, Any]]
    project_id: str


def call_key(service: str, method: str, path: str) -> str:
    """The statistics key of a call: `service:METHOD:/path` with IDs as `{id}`."""
    return f"{service}:{method}:{_ID_RE.sub('/{id}', path.split('?', 1)[0])}"


class OpenStackClient:
    """Calls OpenStack services under Trio (see the module docstring).

    `region` filters the catalog ("" takes the first endpoint of each type); `interface`
    is the catalog interface ("public", "internal", "admin"; OCCM's `os-endpoint-type`);
    `endpoint_overrides` maps a service type to a URL used instead of the catalog's.
    `ca_file` is a PEM bundle trusted for TLS; `cert_file`/`key_file` a client certificate;
    `tls_insecure` turns verification off.
    `transport` replaces the network (a fault-injecting proxy's transport in tests);
    `rng` the jitter's randomness.
    """

    def __init__(
        self,
        credentials: Credentials,
        *,
        region: str = "",
        interface: str = "public",
        endpoint_overrides: Mapping[str, str] | None = None,
        ca_file: str = "",
        cert_file: str = "",
        key_file: str = "",
        tls_insecure: bool = False,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_attempts: int = 3,
        user_agent: str = USER_AGENT,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(
                f"OpenStackClient: max_attempts must be at least 1, got {max_attempts}"
            )
        if timeout_s <= 0:
            raise ValueError(f"OpenStackClient: timeout_s must be positive, got {timeout_s}")
        self.credentials = credentials
        self.region = region
        self.interface = interface.removesuffix("URL") or "public"
        self.endpoint_overrides = dict(endpoint_overrides or {})
        self.timeout_s = timeout_s
        verify: ssl.SSLContext | bool
        if tls_insecure:
            verify = False
        elif ca_file or cert_file:
            verify = ssl.create_default_context(cafile=ca_file or None)
        else:
            verify = True
        if cert_file:
            if not isinstance(verify, ssl.SSLContext):
                verify = ssl.create_default_context()
                verify.check_hostname = False
                verify.verify_mode = ssl.CERT_NONE
            verify.load_cert_chain(cert_file, key_file or None)
        self.http = httpx.AsyncClient(
            # The fence also runs at each socket write (trio_ccm.cloud.fence.http_transport).
            transport=transport or fence.http_transport(verify=verify),
            # The whole attempt is bounded by timeout_s (below); httpx's own timeouts only
            # tell a connect failure (the request never left) from the rest.
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            headers={"User-Agent": user_agent, "Accept": "application/json"},
        )
        self._attempts = Attempts(cloud="openstack", max_attempts=max_attempts, rng=rng)
        self._token: _Token | None = None
        self._auth_lock = trio.Lock()
        self._auths = 0

    @property
    def max_attempts(self) -> int:
        """Requests sent for one call at the most (retries included; a re-auth is not one)."""
        return self._attempts.max_attempts

    async def aclose(self) -> None:
        await self.http.aclose()

    def statistics(self) -> ClientStatistics:
        attempts = self._attempts
        return ClientStatistics(
            calls=dict(attempts.calls),
            retries=attempts.retries,
            throttles=attempts.throttles,
            auths=self._auths,
        )

    # -- Keystone ------------------------------------------------------------------------
    async def token(self) -> str:
        """A valid token: the cached one, or a new one from Keystone."""
        return (await self._valid_token()).value

    async def project_id(self) -> str:
        """The project the token is scoped to (from Keystone's answer)."""
        return (await self._valid_token()).project_id

    async def _valid_token(self) -> _Token:
        token = self._token
        if token is not None and trio.current_time() < token.renew_at:
            return token
        async with self._auth_lock:
            token = self._token
            if token is not None and trio.current_time() < token.renew_at:
                return token
            self._token = await self._authenticate()
            return self._token

    def _invalidate(self, value: str) -> None:
        if self._token is not None and self._token.value == value:
            self._token = None

    def _tokens_url(self) -> str:
        base = self.credentials.auth_url.rstrip("/")
        if not base.endswith("/v3"):
            base += "/v3"
        return base + "/auth/tokens"

    async def _authenticate(self) -> _Token:
        problems = self.credentials.problems()
        path = "/v3/auth/tokens"
        if problems:
            raise OpenStackAuthError(
                "the credentials are incomplete: " + "; ".join(problems),
                service="identity",
                method="POST",
                path=path,
            )
        url = self._tokens_url()
        body = msgspec.json.encode(self.credentials.auth_body())

        async def once() -> _Token:
            started = trio.current_time()
            try:
                response = await self._send(
                    "identity", "POST", path, url, content=body, params=None, headers=None
                )
            except _Sent as exc:
                # Asking for a token changes nothing: sending it again is safe.
                raise Retry(exc.error) from exc.__cause__
            status = response.status_code
            if status in (413, 429):
                raise self._throttled("identity", "POST", path, response)
            if status >= 500:
                error = OpenStackServerError(
                    "Keystone failed",
                    service="identity",
                    method="POST",
                    path=path,
                    status=status,
                    server_message=_server_message(response.content),
                )
                raise Retry(error)
            if status in (401, 403):
                raise OpenStackAuthError(
                    "Keystone refused the credentials "
                    f"({_server_message(response.content) or 'no reason given'}); check "
                    "[Global] username/user-id, password, the domains and the project (or "
                    "the application credential) in the cloud config, and that the user has "
                    "a role on the project",
                    service="identity",
                    method="POST",
                    path=path,
                    status=status,
                    server_message=_server_message(response.content),
                )
            if status >= 400:
                raise _error_for("identity", "POST", path, response)
            value = response.headers.get("X-Subject-Token", "")
            try:
                answer = msgspec.json.decode(response.content)
                token = answer["token"]
                catalog = token.get("catalog") or []
                lifetime = _lifetime_s(token.get("issued_at", ""), token.get("expires_at", ""))
                project = (token.get("project") or {}).get("id", "")
                _require(bool(value) and isinstance(catalog, list), "no X-Subject-Token or catalog")
            except (msgspec.DecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
                error = OpenStackServerError(
                    f"Keystone's token answer is unreadable ({exc})",
                    service="identity",
                    method="POST",
                    path=path,
                    status=status,
                )
                raise Retry(error) from exc
            self._auths += 1
            margin = min(_REFRESH_MARGIN_S, lifetime / 4)
            log.debug(
                "openstack.authenticated", lifetime_s=lifetime, method=self.credentials.method
            )
            return _Token(value, started + lifetime - margin, catalog, project)

        return await self._attempts.run(once)

    # -- the catalog ---------------------------------------------------------------------
    async def endpoint(self, service: str) -> str:
        """The base URL of `service` (override, or the catalog's), without trailing slash."""
        override = self.endpoint_overrides.get(service)
        if override:
            return _strip_version(service, override.rstrip("/"))
        if service == "identity":
            return self.credentials.auth_url.rstrip("/").removesuffix("/v3")
        token = await self._valid_token()
        return _strip_version(service, self._from_catalog(token.catalog, service))

    def _from_catalog(self, catalog: Sequence[Mapping[str, Any]], service: str) -> str:
        offered: list[str] = []
        for entry in catalog:
            if not isinstance(entry, Mapping) or entry.get("type") != service:
                continue
            for ep in entry.get("endpoints") or ():
                if not isinstance(ep, Mapping):
                    continue
                region = str(ep.get("region_id") or ep.get("region") or "")
                offered.append(f"{ep.get('interface')}@{region or '(no region)'}")
                if ep.get("interface") != self.interface:
                    continue
                if self.region and region != self.region:
                    continue
                url = ep.get("url")
                if isinstance(url, str) and url:
                    return url.rstrip("/")
        raise OpenStackError(
            f"the service catalog has no {self.interface} endpoint of type {service!r} in "
            f"region {self.region or '(any)'} (offered: {', '.join(offered) or 'none'}); "
            "check [Global] region and os-endpoint-type in the cloud config",
            service=service,
            method="-",
            path="(catalog)",
        )

    # -- calls ---------------------------------------------------------------------------
    async def request(
        self,
        service: str,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Call `method path` on `service`; the parsed JSON (None when empty)."""
        method = method.upper()
        content = msgspec.json.encode(json) if json is not None else None
        mutating = method not in _IDEMPOTENT
        reauthed = False

        async def once() -> Any:
            nonlocal reauthed
            token = await self._valid_token()
            url = await self.endpoint(service) + "/" + path.lstrip("/")
            sent_headers = {"X-Auth-Token": token.value}
            if content is not None:
                sent_headers["Content-Type"] = "application/json"
            if headers:
                sent_headers.update(headers)
            try:
                response = await self._send(
                    service, method, path, url, content=content, params=params, headers=sent_headers
                )
            except _Sent as exc:
                if mutating:
                    raise self._unknown(service, method, path, str(exc.error)) from exc.__cause__
                raise Retry(exc.error) from exc.__cause__
            status = response.status_code
            if status == 401 and not reauthed:
                reauthed = True
                self._invalidate(token.value)
                log.debug("openstack.reauth", service=service, method=method, path=path)
                raise Resend(counted=False)
            if status == 401:
                raise OpenStackAuthError(
                    "the service refused a fresh token; check the user's roles on the project "
                    "and the services' Keystone settings",
                    service=service,
                    method=method,
                    path=path,
                    status=status,
                    server_message=_server_message(response.content),
                )
            if status in (413, 429):
                raise self._throttled(service, method, path, response)
            if status >= 500:
                if mutating:
                    raise self._unknown(
                        service,
                        method,
                        path,
                        f"HTTP {status} after the request was sent "
                        f"({_server_message(response.content) or 'no reason given'})",
                        status=status,
                    )
                error = OpenStackServerError(
                    "the service failed",
                    service=service,
                    method=method,
                    path=path,
                    status=status,
                    server_message=_server_message(response.content),
                    request_id=_request_id(response),
                )
                raise Retry(error)
            if status >= 400:
                raise _error_for(service, method, path, response)
            body = response.content
            if not body.strip():
                return None
            try:
                return msgspec.json.decode(body)
            except msgspec.DecodeError as exc:
                if mutating:
                    raise self._unknown(
                        service,
                        method,
                        path,
                        f"HTTP {status} with a body that is not JSON ({_snippet(body)})",
                        status=status,
                    ) from exc
                error = OpenStackServerError(
                    f"the answer is not JSON ({_snippet(body)}): a proxy's page or a cut answer",
                    service=service,
                    method=method,
                    path=path,
                    status=status,
                )
                raise Retry(error) from exc

        return await self._attempts.run(once, service=service, method=method, path=path)

    async def list(
        self,
        service: str,
        path: str,
        key: str,
        *,
        params: Mapping[str, Any] | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Every item of a paginated listing (`key`: "servers", "ports", ...)."""
        asked: dict[str, Any] = dict(params or {})
        if limit is not None:
            asked["limit"] = limit
        items: list[dict[str, Any]] = []
        for _ in range(_MAX_PAGES):
            page = await self.request(service, "GET", path, params=asked)
            if not isinstance(page, Mapping) or not isinstance(page.get(key), list):
                raise OpenStackServerError(
                    f"the answer has no {key!r} list",
                    service=service,
                    method="GET",
                    path=path,
                )
            found = [item for item in page[key] if isinstance(item, dict)]
            items.extend(found)
            marker = _next_marker(page.get(f"{key}_links"))
            if not marker or not found:
                return items
            asked["marker"] = marker
        raise OpenStackServerError(
            f"more than {_MAX_PAGES} pages: the service keeps giving a next link; stopped",
            service=service,
            method="GET",
            path=path,
        )

    async def _send(
        self,
        service: str,
        method: str,
        path: str,
        url: str,
        *,
        content: bytes | None,
        params: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
    ) -> httpx.Response:
        """One attempt, bounded by timeout_s. A request that never left raises `Retry`
        (safe to send again, whatever the method); one that failed after it left, `_Sent`
        (the caller decides by the method)."""
        self._attempts.leaving(call_key(service, method, path))
        query = _query(params)
        sent = False
        try:
            with trio.fail_after(self.timeout_s):
                request = self.http.build_request(
                    method, url, content=content, params=query, headers=headers
                )
                stream = await httpsend.send(self.http, request, stream=True)
                sent = True
                try:
                    await stream.aread()
                finally:
                    await stream.aclose()
                return stream
        except trio.TooSlowError as exc:
            error = OpenStackServerError(
                f"no answer within {self.timeout_s:g} s ([Metadata] request-timeout)",
                service=service,
                method=method,
                path=path,
            )
            raise _Sent(error) from exc
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            error = OpenStackServerError(
                f"{url} is unreachable ({explain(exc)}); check the network path to the "
                "cloud and the catalog's endpoints (or [Global] auth-url)",
                service=service,
                method=method,
                path=path,
            )
            raise Retry(error) from exc
        except (httpx.TransportError, httpx.DecodingError) as exc:
            error = OpenStackServerError(
                f"the connection failed {'while reading the answer' if sent else 'while sending'} "
                f"({explain(exc)})",
                service=service,
                method=method,
                path=path,
            )
            raise _Sent(error) from exc

    def _unknown(
        self, service: str, method: str, path: str, why: str, *, status: int = 0
    ) -> OpenStackOutcomeUnknownError:
        error = OpenStackOutcomeUnknownError(
            f"sent, outcome unknown: {why}; the change may still be applied",
            service=service,
            method=method,
            path=path,
            status=status,
        )
        error.late_landing_s = self.timeout_s
        return error

    def _throttled(
        self, service: str, method: str, path: str, response: httpx.Response
    ) -> OpenStackThrottledError:
        self._attempts.throttled()
        retry_after = _retry_after_s(response.headers.get("Retry-After"))
        error = OpenStackThrottledError(
            "the cloud's rate limit refused the call"
            + (f" (retry after {retry_after:g} s)" if retry_after is not None else ""),
            service=service,
            method=method,
            path=path,
            status=response.status_code,
            server_message=_server_message(response.content),
        )
        error.retry_after_s = retry_after
        log.debug("openstack.throttled", service=service, method=method, path=path)
        return error


class _Sent(Exception):  # noqa: N818 - internal signal, never escapes
    def __init__(self, error: OpenStackError) -> None:
        self.error = error


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise ValueError(what)


def _strip_version(service: str, url: str) -> str:
    for suffix in _VERSION_SUFFIX.get(service, ()):
        if url.endswith(suffix):
            return url[: -len(suffix)]
    return url


def _query(
    params: Mapping[str, Any] | None,
) -> list[tuple[str, str | int | float | bool | None]] | None:
    if not params:
        return None
    pairs: list[tuple[str, str | int | float | bool | None]] = []
    for key, value in params.items():
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            if isinstance(item, bool):
                item = "true" if item else "false"
            pairs.append((key, str(item)))
    return pairs


def _next_marker(links: object) -> str:
    if not isinstance(links, list):
        return ""
    for link in links:
        if isinstance(link, Mapping) and link.get("rel") == "next":
            href = link.get("href")
            if isinstance(href, str):
                marker = httpx.URL(href).params.get("marker")
                return marker or ""
    return ""


def _lifetime_s(issued_at: str, expires_at: str) -> float:
    """The token's lifetime from Keystone's own two timestamps (no clock skew)."""

    def parse(text: str) -> dt.datetime:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))

    try:
        lifetime = (parse(expires_at) - parse(issued_at)).total_seconds()
    except (ValueError, TypeError):
        return 3600.0  # Keystone's default token lifetime
    return lifetime if lifetime > 0 else 60.0


def _retry_after_s(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = (when - dt.datetime.now(dt.UTC)).total_seconds()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)


def _server_message(body: bytes) -> str:
    """The error message out of any OpenStack service's error body ("" when none)."""
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return _snippet(body) if body.strip() else ""
    if not isinstance(data, Mapping):
        return ""
    for key in ("faultstring", "description", "message", "title"):
        if isinstance(data.get(key), str):
            return str(data[key])
    for value in data.values():  # Nova {"itemNotFound": {...}}, Neutron {"NeutronError": ...}
        if isinstance(value, Mapping):
            message = value.get("message") or value.get("detail")
            if isinstance(message, str):
                return message
        if isinstance(value, str) and value:
            return value
    return ""


def _request_id(response: httpx.Response) -> str:
    found = response.headers.get("X-Openstack-Request-Id") or response.headers.get(
        "X-Compute-Request-Id", ""
    )
    return str(found)


def _error_for(service: str, method: str, path: str, response: httpx.Response) -> OpenStackError:
    status = response.status_code
    message = _server_message(response.content)
    kind: type[OpenStackError] = OpenStackError
    if status == 404:
        kind = NotFoundError
    elif status == 409:
        kind = ConflictError
    what = {
        403: "forbidden: the user lacks a role this call needs (docs/openstack.md lists them)",
        404: "not found",
        409: "conflict",
    }.get(status, "refused")
    return kind(
        f"{what}{': ' + message if message else ''}",
        service=service,
        method=method,
        path=path,
        status=status,
        server_message=message,
        request_id=_request_id(response),
    )


def _snippet(body: bytes) -> str:
    text = body[:120].decode("utf-8", "replace").replace("\n", " ").strip()
    return repr(text) + ("..." if len(body) > 120 else "")
