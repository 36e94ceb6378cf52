"""KubeClient: typed verbs over httpx (HTTP/1.1), with the API's errors as exceptions.

- `Status` bodies become exceptions in exactly one place (`error_from_response`).
- A client-side token bucket (`--kube-api-qps`/`--kube-api-burst`, 20/30 as the Go CCM)
  paces every request; the time spent waiting is a metric.
- Idempotent verbs (get, list, opening a watch) are retried on 5xx and connection errors;
  any verb is retried on 429 (the server did not process it). `Retry-After` wins over the
  capped exponential backoff. A 401 refreshes the credentials once.
- Connection and TLS failures are explained: under Trio httpx's own message is empty and
  the reason sits several exceptions down the cause chain.
"""

from __future__ import annotations

import builtins
import contextlib
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar, cast, overload
from urllib.parse import urlsplit

import httpcore
import httpx
import msgspec
import trio

from trio_ccm import httpsend
from trio_ccm._version import __version__
from trio_ccm.base.pacing import Gathering
from trio_ccm.kube import chunked
from trio_ccm.kube.config import ClientIdentity, ConnectionConfig
from trio_ccm.kube.errors import (
    QUOTED_BYTES,
    STATUS_DECODER,
    KubeConnectionError,
    KubeDecodeError,
    error_from_response,
    error_from_status,
    undecodable,
)
from trio_ccm.kube.metrics import ClientMetrics
from trio_ccm.kube.objects import Object, ObjectList, Resource, Status, Watched, WatchEvent
from trio_ccm.kube.patches import JSONValue, Patch
from trio_ccm.kube.pool import lean_transport

T = TypeVar("T")
E = TypeVar("E")


class _WatchError(Exception):
    """An ERROR line of a watch stream, carrying its Status (turned into a KubeError by
    `_events`, the one place watch lines become exceptions)."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status


DEFAULT_QPS = 20.0
DEFAULT_BURST = 30
_BACKOFF_BASE_S = 0.2
_BACKOFF_CAP_S = 5.0
_RETRY_AFTER_CAP_S = 60.0
MAX_CONNECTIONS = 100
"""Connections one client keeps open at most (httpx's default), all of them kept alive
when idle: httpx keeps 20, and a client with more writes in flight than that connected
again for most of them (`kube/pool.py`)."""
_NO_TIMEOUT: Final = httpx.Timeout(None).as_dict()
"""A request's timeouts: none (as before, and as client-go's default `rest.Config.Timeout`)."""
_STREAM_TIMEOUT: Final = httpx.Timeout(60.0, connect=15.0, read=None).as_dict()
"""A watch's: no bound on reading (the stream is long), 60 s on the rest, 15 s to connect."""
AWAKE_S = 0.005
"""A resting watch reader reads at least this long after a rest before it rests again:
time to take the chunks its last read buffered (`watch_batches_as`'s `rest_s`)."""


def explain_connection_error(config: ConnectionConfig, exc: BaseException) -> str:
    """A readable reason for a transport failure (walks the cause chain)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return (
                f"TLS: the certificate of {config.server} is not trusted "
                f"({current.verify_message}); check certificate-authority in "
                f"{config.source or 'the connection settings'}"
            )
        if isinstance(current, ssl.SSLError):
            return f"TLS handshake with {config.server} failed: {current.reason or current}"
        if isinstance(current, ConnectionRefusedError):
            return f"connection to {config.server} refused"
        if isinstance(current, OSError) and current.strerror:
            return f"cannot connect to {config.server}: {current.strerror}"
        if str(current):
            text = str(current)
            if isinstance(current, httpx.RemoteProtocolError):
                text += " (if the server requires a client certificate, check client-certificate)"
            return f"{config.server}: {text}"
        current = current.__cause__ or current.__context__
    return f"{config.server}: {type(exc).__name__}"


def _permanent(exc: BaseException) -> bool:
    """Failures a retry cannot fix: the server's certificate is not trusted."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, ssl.SSLCertVerificationError):
            return True
        current = current.__cause__ or current.__context__
    return False


# -- rate limiting -----------------------------------------------------------------------
class TokenBucket:
    """qps tokens per second, up to `burst` saved; callers wait in arrival order."""

    def __init__(self, qps: float, burst: int) -> None:
        if qps > 0 and burst < 1:
            raise ValueError("burst must be at least 1 when qps is limited")
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._updated: float | None = None

    async def acquire(self) -> float:
        """Take one token; returns the seconds waited."""
        if self.qps <= 0:
            await trio.lowlevel.checkpoint()
            return 0.0
        now = trio.current_time()
        if self._updated is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.qps)
        self._updated = now
        self._tokens -= 1.0  # reserve now, so later callers queue behind us
        if self._tokens >= 0:
            await trio.lowlevel.checkpoint()
            return 0.0
        wait = -self._tokens / self.qps
        await trio.sleep(wait)
        return wait


# -- the client --------------------------------------------------------------------------
class KubeClient:
    """Typed verbs for any resource. Use `open_kube_client` to get one."""

    def __init__(
        self,
        config: ConnectionConfig,
        *,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        component: str = "",
        metrics: ClientMetrics | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_retries: int = 5,
    ) -> None:
        self.config = config
        self.component = component
        self.user_agent = f"trio-ccm/{__version__}" + (f" ({component})" if component else "")
        self.metrics = metrics
        self.max_retries = max_retries
        self._bucket = TokenBucket(qps, burst)
        self._transport = transport
        self._http: httpx.AsyncClient | None = None
        self._identity: ClientIdentity | None = None
        self._host = urlsplit(config.server).netloc
        self._base = config.server.rstrip("/")  # a path is joined to it as httpx joins one
        self._sent_headers: dict[str, str] = {}
        self._decoders: dict[Any, msgspec.json.Decoder[Any]] = {}
        # A metric's child per label values (this client's host last): prometheus_client
        # checks and looks the values up on every `labels()`, three times a request.
        self._children: dict[tuple[Any, ...], Any] = {}
        self.raw_watches = 0
        """Watches whose body was read below httpx (`kube/chunked.py`)."""

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # -- plumbing ---------------------------------------------------------------------
    async def _client(self) -> tuple[httpx.AsyncClient, ClientIdentity]:
        identity = await self.config.credentials.get()
        previous = self._identity
        if (
            self._http is None
            or previous is None
            or (identity.cert_pem, identity.key_pem) != (previous.cert_pem, previous.key_pem)
        ):
            if self._http is not None:
                await self._http.aclose()
            context = self.config.ssl_context(identity)
            verify: ssl.SSLContext | bool = context if context is not None else True
            self._http = httpx.AsyncClient(
                base_url=self.config.server,
                transport=self._transport
                or lean_transport(
                    verify=verify,
                    http1=True,
                    http2=False,
                    limits=httpx.Limits(
                        max_connections=MAX_CONNECTIONS,
                        max_keepalive_connections=MAX_CONNECTIONS,
                    ),
                ),
                verify=verify,
                http1=True,
                http2=False,
                timeout=httpx.Timeout(60.0, connect=15.0),
                headers={"User-Agent": self.user_agent, "Accept": "application/json"},
            )
            # The headers httpx sends with every request of this client (its defaults and
            # ours), for `request` to build requests without `build_request`.
            self._sent_headers = dict(self._http.headers)
        self._identity = identity
        return self._http, identity

    def _decoder(self, kind: Any) -> msgspec.json.Decoder[Any]:
        decoder = self._decoders.get(kind)
        if decoder is None:
            decoder = self._decoders[kind] = msgspec.json.Decoder(kind)
        return decoder

    def decode(self, data: bytes | msgspec.Raw, kind: type[T]) -> T:
        result: T = self._decoder(kind).decode(data)
        return result

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        content: bytes | None = None,
        content_type: str | None = None,
        stream: bool = False,
    ) -> httpx.Response:
        """Send one API request with rate limiting, auth, retries and error mapping.

        The metrics' `verb` label is the HTTP method, as client-go's (a list or a watch is
        a GET)."""
        idempotent = method == "GET"
        attempt = 0
        refreshed = False
        while True:
            waited = await self._bucket.acquire()
            if self.metrics is not None:
                self._labelled(self.metrics.rate_limiter, method).observe(waited)
            http, identity = await self._client()
            headers = {}
            if identity.token:
                headers["Authorization"] = f"Bearer {identity.token}"
            if content_type:
                headers["Content-Type"] = content_type
            started = trio.current_time()
            built = httpx.Request(
                method,
                # One parse of the whole URL; httpx's `build_request` parses the path, joins
                # it to the base URL and parses again, and merges cookies, params, headers.
                httpx.URL(self._base + path, params=params) if params else self._base + path,
                content=content,
                headers={**self._sent_headers, **headers},
                extensions={"timeout": _STREAM_TIMEOUT if stream else _NO_TIMEOUT},
            )
            try:
                response = await httpsend.send(http, built, stream=stream)
            except httpx.TransportError as exc:
                unreachable = KubeConnectionError(
                    f"{method} {path}: {explain_connection_error(self.config, exc)}"
                )
                if idempotent and attempt < self.max_retries and not _permanent(exc):
                    attempt += 1
                    self._count_retry("<error>", method)
                    await trio.sleep(self._backoff(attempt))
                    continue
                raise unreachable from exc
            if self.metrics is not None:
                code = str(response.status_code)
                self._labelled(self.metrics.requests, code, method).inc()
                self._labelled(self.metrics.duration, method).observe(trio.current_time() - started)
            if response.status_code < 400:
                return response
            body = await response.aread()
            await response.aclose()
            error = error_from_response(method, path, response.status_code, body, response.headers)
            if response.status_code == 401 and not refreshed:
                refreshed = True
                self.config.credentials.invalidate()
                continue
            retryable = response.status_code == 429 or (idempotent and response.status_code >= 500)
            if retryable and attempt < self.max_retries:
                attempt += 1
                self._count_retry(str(response.status_code), method)
                delay = error.retry_after_s
                if delay is None:
                    delay = self._backoff(attempt)
                await trio.sleep(min(delay, _RETRY_AFTER_CAP_S))
                continue
            raise error

    def _labelled(self, metric: Any, *values: str) -> Any:
        """`metric.labels(*values, host)`, looked up once per metric and values."""
        key = (metric, *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values, self._host)
        return child

    def _count_retry(self, code: str, verb: str) -> None:
        if self.metrics is not None:
            self._labelled(self.metrics.retries, code, verb).inc()

    @staticmethod
    def _backoff(attempt: int) -> float:
        return float(min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2 ** (attempt - 1)))

    # -- verbs ------------------------------------------------------------------------
    @overload
    async def get(self, resource: Resource, name: str, *, namespace: str = "") -> Any: ...
    @overload
    async def get(
        self, resource: Resource, name: str, *, namespace: str = "", type: type[T]
    ) -> T: ...
    async def get(
        self, resource: Resource, name: str, *, namespace: str = "", type: Any = None
    ) -> Any:
        return await self._read(resource.path(namespace, name), type or Any)

    async def list(
        self,
        resource: Resource,
        *,
        type: type[T],
        namespace: str = "",
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
        resource_version: str = "",
    ) -> ObjectList[T]:
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if limit:
            params["limit"] = str(limit)
        if continue_token:
            params["continue"] = continue_token
        if resource_version:
            params["resourceVersion"] = resource_version
        found: ObjectList[T] = await self._read(
            resource.path(namespace),
            ObjectList[type],  # type: ignore[valid-type]
            params=params,
        )
        return found

    async def _read(self, path: str, kind: Any, *, params: Mapping[str, str] | None = None) -> Any:
        """GET and decode; a body that does not decode is retried like a 5xx (reads are
        idempotent), then raised as KubeDecodeError."""
        attempt = 0
        while True:
            response = await self.request("GET", path, params=params)
            try:
                return self.decode(response.content, kind)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                error = undecodable("GET", path, response, exc)
                if attempt >= self.max_retries:
                    raise error from exc
            attempt += 1
            self._count_retry("<undecodable>", "GET")
            await trio.sleep(self._backoff(attempt))

    @asynccontextmanager
    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str = "",
        timeout_s: int | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> AsyncIterator[AsyncGenerator[WatchEvent, None]]:
        """Open a watch (with bookmarks); iterate its events; leaving the block closes it.

        An ERROR event is raised as its exception (GoneError for 410: relist).
        """
        path, response = await self._open_watch(
            resource, resource_version, namespace, timeout_s, label_selector, field_selector
        )
        batches = self._batches(response, path, self._raw_event)
        events: AsyncGenerator[WatchEvent, None] = _each(batches)
        try:
            yield events
        finally:
            await events.aclose()  # async generators are closed, never left to the GC
            await batches.aclose()
            await response.aclose()

    @asynccontextmanager
    async def watch_as(
        self,
        resource: Resource,
        type: type[T],
        *,
        resource_version: str,
        namespace: str = "",
        timeout_s: int | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> AsyncIterator[AsyncGenerator[Watched[T], None]]:
        """`watch`, each event's object decoded as `type` in the same parse as its line
        (one pass over the bytes instead of two). An object that does not decode as `type`
        raises KubeDecodeError naming the event; ERROR events are raised as in `watch`."""
        async with self.watch_batches_as(
            resource,
            type,
            resource_version=resource_version,
            namespace=namespace,
            timeout_s=timeout_s,
            label_selector=label_selector,
            field_selector=field_selector,
        ) as batches:
            events: AsyncGenerator[Watched[T], None] = _each(batches)
            try:
                yield events
            finally:
                await events.aclose()  # async generators are closed, never left to the GC

    @asynccontextmanager
    async def watch_batches_as(
        self,
        resource: Resource,
        type: type[T],
        *,
        resource_version: str,
        namespace: str = "",
        timeout_s: int | None = None,
        label_selector: str = "",
        field_selector: str = "",
        rest_s: float = 0.0,
    ) -> AsyncIterator[AsyncGenerator[builtins.list[Watched[T]], None]]:
        """`watch_as`, the events of each received chunk together: one list per chunk
        that completes at least one line, in stream order (a hot reader handles them in
        one step, with no pass through the scheduler per event). The events before an
        ERROR or undecodable line are handed over first, then its exception is raised.

        `rest_s` > 0: once the reader has caught up with the server (nothing waiting on
        the connection), it rests `rest_s` before reading on, so that a trickle of events
        is read in gathered batches (`base.pacing.Gathering`); a transport that cannot
        tell what is waiting (no `network_stream`) is read without rests."""
        path, response = await self._open_watch(
            resource, resource_version, namespace, timeout_s, label_selector, field_selector
        )
        typed = self._decoder(Watched[type])  # type: ignore[valid-type]

        def decode(line: bytes) -> Watched[T]:
            try:
                event: Watched[T] = typed.decode(line)
            except msgspec.ValidationError as exc:
                # An ERROR event's Status (raised below), or an object of the wrong shape.
                raw = self._raw_event(line)
                raise msgspec.ValidationError(
                    f"a {raw.type} event's object does not decode as {type.__name__}: {exc}"
                ) from exc
            if event.type == "ERROR":
                self._raw_event(line)  # raises the Status (a kind may decode from one)
            return event

        def decode_all(lines: bytes | memoryview) -> builtins.list[Watched[T]] | None:
            # Every line in one call (no line copied out of the chunk); None when one does
            # not decode or is an ERROR: the line-by-line path then says which and why.
            try:
                events: builtins.list[Watched[T]] = typed.decode_lines(lines)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return None
            for event in events:
                if event.type == "ERROR":
                    return None
            return events

        batches = self._batches(response, path, decode, decode_all, rest_s)
        try:
            yield batches
        finally:
            await batches.aclose()  # async generators are closed, never left to the GC
            await response.aclose()

    async def _open_watch(
        self,
        resource: Resource,
        resource_version: str,
        namespace: str,
        timeout_s: int | None,
        label_selector: str,
        field_selector: str,
    ) -> tuple[str, httpx.Response]:
        params = {"watch": "1", "allowWatchBookmarks": "true", "resourceVersion": resource_version}
        if timeout_s is not None:
            params["timeoutSeconds"] = str(int(timeout_s))
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        path = resource.path(namespace)
        return path, await self.request("GET", path, params=params, stream=True)

    def _raw_event(self, line: bytes) -> WatchEvent:
        """A watch line with its object left raw; an ERROR event raises its Status."""
        event: WatchEvent = self._decoder(WatchEvent).decode(line)
        if event.type == "ERROR":
            raise _WatchError(STATUS_DECODER.decode(event.object))
        return event

    async def _batches(
        self,
        response: httpx.Response,
        path: str,
        decode: Callable[[bytes], E],
        decode_all: Callable[[bytes | memoryview], builtins.list[E] | None] | None = None,
        rest_s: float = 0.0,
    ) -> AsyncGenerator[builtins.list[E], None]:
        """The stream's events, one list per received chunk that completes a line.

        A line split across chunks waits for its end. The complete lines of a chunk are
        decoded together by `decode_all` when given (one call, no line copied out), else,
        or when it answers None, one by one with `decode`. A line that fails (an ERROR
        event, or bytes that do not decode) ends the stream: the events before it are
        yielded first, then its exception is raised."""
        pending = b""  # the start of a line whose end has not arrived
        raw = chunked.raw_body(response)
        stream: chunked.RawBody | AsyncGenerator[bytes, None]
        waiting: Callable[[], bool] | None = None
        gathering: Gathering | None = None
        if raw is not None:
            # Read below httpx: one piece per gathered read of the connection
            # (`kube/chunked.py`); the connection is closed with the answer, never reused.
            self.raw_watches += 1
            stream = raw
            if rest_s > 0:
                # A read takes all that waits (TLS records trio holds included), so the
                # reader may rest right after the read that follows a rest.
                waiting = raw.waiting
                gathering = Gathering(rest_s, awake_s=0.0)
        else:
            # httpx's byte iterator, one piece per HTTP chunk: an async generator, closed
            # below, never left to the GC.
            stream = cast("AsyncGenerator[bytes, None]", response.aiter_bytes())
            waiting = _waiting(response) if rest_s > 0 else None
            gathering = Gathering(rest_s, awake_s=AWAKE_S) if waiting is not None else None

        async def rest() -> None:
            """Once caught up, rest before reading on (`watch_batches_as`'s `rest_s`)."""
            if gathering is not None and waiting is not None:
                pause = gathering.after(trio.current_time(), waiting)
                if pause:
                    await trio.sleep(pause)
                    gathering.woke(trio.current_time())

        async with contextlib.aclosing(stream) as chunks:
            while True:
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    return
                except (httpx.TransportError, httpcore.ReadError, httpcore.ReadTimeout) as exc:
                    # A reset or truncated stream mid-watch: a connection error like any other.
                    raise KubeConnectionError(
                        f"WATCH {path}: {explain_connection_error(self.config, exc)}"
                    ) from exc
                except chunked.ChunkedError as exc:
                    raise KubeConnectionError(f"WATCH {path}: {self.config.server}: {exc}") from exc
                if b"\n" not in chunk:
                    pending += chunk
                    continue
                data = pending + chunk if pending else chunk
                cut = data.rfind(b"\n")
                pending = data[cut + 1 :]
                if decode_all is not None:
                    decoded = decode_all(memoryview(data)[:cut])  # the lines, not copied
                    if decoded is not None:
                        if decoded:
                            yield decoded
                            await rest()
                        continue
                batch: builtins.list[E] = []
                for line in data[:cut].split(b"\n"):
                    if not line.strip():
                        continue
                    try:
                        batch.append(decode(line))
                    except _WatchError as error:
                        failure: Exception = error_from_status(
                            error.status, method="WATCH", path=path
                        )
                        failure.__suppress_context__ = True
                    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                        failure = KubeDecodeError(
                            f"WATCH {path}: a watch event does not decode ({exc}); "
                            f"it begins {line[:QUOTED_BYTES]!r}"
                        )
                        failure.__cause__ = exc
                    else:
                        continue
                    if batch:
                        yield batch  # what came before the failure, then the failure
                    raise failure
                if batch:
                    yield batch
                    await rest()

    async def _write(
        self,
        method: str,
        path: str,
        document: JSONValue | Mapping[str, JSONValue],
        content_type: str,
    ) -> Any:
        """Send a JSON document; returns the object the server answered, as JSON."""
        response = await self.request(
            method,
            path,
            content=msgspec.json.encode(document),
            content_type=content_type,
        )
        try:
            return msgspec.json.decode(response.content)
        except msgspec.DecodeError as exc:
            raise undecodable(method, path, response, exc) from exc

    async def create(
        self, resource: Resource, body: Mapping[str, JSONValue], *, namespace: str = ""
    ) -> Any:
        return await self._write("POST", resource.path(namespace), body, "application/json")

    async def update(
        self,
        resource: Resource,
        name: str,
        body: Mapping[str, JSONValue],
        *,
        namespace: str = "",
        subresource: str = "",
    ) -> Any:
        path = resource.path(namespace, name, subresource)
        return await self._write("PUT", path, body, "application/json")

    @overload
    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Patch,
        *,
        namespace: str = "",
        subresource: str = "",
    ) -> Object: ...
    @overload
    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Patch,
        *,
        namespace: str = "",
        subresource: str = "",
        type: type[T],
    ) -> T: ...
    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Patch,
        *,
        namespace: str = "",
        subresource: str = "",
        type: Any = None,
    ) -> Any:
        """Send a patch; returns the patched object, decoded as `type` (by default only its
        metadata: `.metadata.resource_version` is the version this write made)."""
        path = resource.path(namespace, name, subresource)
        response = await self.request(
            "PATCH",
            path,
            content=msgspec.json.encode(patch.document),
            content_type=patch.content_type,
        )
        try:
            return self.decode(response.content, type or Object)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise undecodable("PATCH", path, response, exc) from exc

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str = "",
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> None:
        """Delete, optionally only if the object still has this uid / resourceVersion."""
        preconditions: dict[str, str] = {}
        if uid is not None:
            preconditions["uid"] = uid
        if resource_version is not None:
            preconditions["resourceVersion"] = resource_version
        body: dict[str, JSONValue] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if preconditions:
            body["preconditions"] = dict(preconditions)
        await self._write("DELETE", resource.path(namespace, name), body, "application/json")


async def _each(batches: AsyncGenerator[list[E], None]) -> AsyncGenerator[E, None]:
    """The events of `batches`, one at a time."""
    async for batch in batches:
        for event in batch:
            yield event


@asynccontextmanager
async def open_kube_client(
    config: ConnectionConfig,
    *,
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
    component: str = "",
    metrics: ClientMetrics | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> AsyncIterator[KubeClient]:
    """A KubeClient closed on exit."""
    client = KubeClient(
        config, qps=qps, burst=burst, component=component, metrics=metrics, transport=transport
    )
    try:
        yield client
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await client.aclose()


def _waiting(response: httpx.Response) -> Callable[[], bool] | None:
    """Whether more of a streamed response is waiting to be read: bytes on its socket, or
    decrypted TLS bytes not yet taken (httpcore's `network_stream` extension); None when
    the transport does not say (an in-process one)."""
    stream = response.extensions.get("network_stream")
    if stream is None:
        return None
    ssl_object = stream.get_extra_info("ssl_object")

    def waiting() -> bool:
        if ssl_object is not None and ssl_object.pending():
            return True
        return bool(stream.get_extra_info("is_readable"))

    return waiting
