"""HTTP to the simulated cloud, and the one place where its answers become exceptions.

- 429 becomes `ThrottledError(retry_after_s=...)` (the shared budget slows down);
- 202 from a load balancer write ("still provisioning") becomes `RetryAfter(delay_s)`;
- 404 becomes None when the caller said the resource may be missing, else SimCloudError;
- any other error status, an unreadable answer, or no answer becomes `SimCloudError`
  naming the call, its target and the status;
- **a write whose outcome is unknown** becomes `SimOutcomeUnknownError` (an
  `OutcomeUnknownError`): no answer within `timeout_s` (the client's own deadline over the
  whole call, so it holds for the in-process transport too), a connection lost after the
  request went out, or a 5xx. A connect error, or a 4xx, is a clean failure. Reads are
  never "unknown": they change nothing. `late_landing_s` is the timeout plus how long the
  simulated cloud says it may hold a request (`holdSeconds` from its admin API, asked
  only then) plus `LATE_LANDING_MARGIN_S`; for a 5xx, 0 (the cloud answered: nothing of
  that call is still queued).

The simulated cloud has no precondition (no ETag or revision on its load balancers or
routes): a late write can land; the controllers catch it by the late-landing check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypeVar
from urllib.parse import quote

import httpx
import msgspec
import trio

from trio_ccm import httpsend
from trio_ccm._version import __version__
from trio_ccm.cloud import fence
from trio_ccm.cloud.fence import GuardedTransport
from trio_ccm.cloud.provider import ThrottledError
from trio_ccm.cloud.sim.errors import SimCloudError, SimOutcomeUnknownError
from trio_ccm.cloud.sim.wire import ErrorWire
from trio_ccm.errors import RetryAfter

T = TypeVar("T")

REPLICA_HEADER = "X-Sim-Replica"
LATE_LANDING_MARGIN_S: Final = 1.0
"""Added to the timeout and the cloud's stated hold: scheduling slack between the two."""
_READS: Final = frozenset({"GET", "HEAD"})
_NOT_SENT: Final = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def segment(value: str) -> str:
    """`value` quoted as one URL path segment."""
    return quote(value, safe="")


def _retry_after_s(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds (the simulated cloud sends decimals); None if absent."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: the simulated cloud never sends one
    return max(seconds, 0.0)


def _cloud_message(response: httpx.Response) -> tuple[str, str]:
    """The (code, message) of an error answer, or the start of the body when it has none."""
    try:
        detail = msgspec.json.decode(response.content, type=ErrorWire).error
    except (msgspec.DecodeError, msgspec.ValidationError):
        return "", response.text[:200]
    return detail.code, detail.message


def _reason(exc: BaseException) -> str:
    """A readable reason for a transport error (under Trio its own message may be empty)."""
    seen: BaseException | None = exc
    while seen is not None:
        if str(seen):
            return f"{type(seen).__name__}: {seen}"
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


class SimClient:
    """An httpx client for one simulated cloud, created on first use, tagged with the replica."""

    def __init__(
        self,
        *,
        url: str,
        replica: str,
        transport: httpx.AsyncBaseTransport | None,
        timeout_s: float,
    ) -> None:
        self.url = url.rstrip("/")
        self.replica = replica
        self._transport = transport
        self._timeout_s = timeout_s
        self._http: httpx.AsyncClient | None = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            # The fence runs before each request and again at its socket write (a frozen
            # leader's requests never leave).
            self._http = httpx.AsyncClient(
                base_url=self.url,
                transport=GuardedTransport(self._transport or fence.http_transport()),
                timeout=httpx.Timeout(self._timeout_s),
                headers={
                    REPLICA_HEADER: self.replica,
                    "User-Agent": f"trio-ccm/{__version__} (sim)",
                },
            )
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    async def request(
        self,
        method: str,
        target: str,
        verb: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: msgspec.Struct | bytes | None = None,
        missing_ok: bool = False,
    ) -> httpx.Response | None:
        """Make cloud call `method` on `target`; None for a 404 when `missing_ok`. `body`
        is encoded as JSON, or sent as it is when it is JSON already (`bytes`)."""
        content = body if body is None or isinstance(body, bytes) else msgspec.json.encode(body)
        headers = {} if body is None else {"Content-Type": "application/json"}
        write = verb not in _READS
        response: httpx.Response | None = None
        with trio.move_on_after(self._timeout_s):
            try:
                http = self._client()
                response = await httpsend.send(
                    http,
                    http.build_request(verb, path, params=params, content=content, headers=headers),
                )
            except httpx.TransportError as exc:
                if write and not isinstance(exc, _NOT_SENT):
                    raise await self._unknown(
                        method, target, f"the connection failed after sending ({_reason(exc)})"
                    ) from exc
                raise SimCloudError(
                    f"sim cloud {method} {target}: no answer from {self.url} ({_reason(exc)}); "
                    "is the simulated cloud running there?",
                    method=method,
                    target=target,
                ) from exc
        if response is None:
            if write:
                raise await self._unknown(
                    method, target, f"no answer within the timeout ({self._timeout_s:g} s)"
                )
            raise SimCloudError(
                f"sim cloud {method} {target}: no answer from {self.url} within "
                f"{self._timeout_s:g} s",
                method=method,
                target=target,
            )
        if response.status_code == 404 and missing_ok:
            return None
        try:
            response.raise_for_status()
        except httpx.HTTPStatusError as exc:
            code, message = _cloud_message(response)
            status = response.status_code
            if status == 429:
                raise ThrottledError(
                    f"sim cloud {method} {target}: throttled: {message}",
                    retry_after_s=_retry_after_s(response),
                ) from exc
            if write and status >= 500:
                raise SimOutcomeUnknownError(
                    f"sim cloud {method} {target}: {status} {code}: {message}; the write's "
                    "outcome is unknown",
                    method=method,
                    target=target,
                    status=status,
                    code=code,
                    late_landing_s=0.0,
                ) from exc
            raise SimCloudError(
                f"sim cloud {method} {target}: {status} {code}: {message}",
                method=method,
                target=target,
                status=status,
                code=code,
            ) from exc
        if response.status_code == 202:
            delay_s = _retry_after_s(response)
            raise RetryAfter(
                1.0 if delay_s is None else delay_s,
                f"sim cloud {method} {target}: still provisioning",
            )
        return response

    async def _unknown(self, method: str, target: str, why: str) -> SimOutcomeUnknownError:
        """The error for a write sent whose outcome is unknown, with how long it may land."""
        hold_s = await self._hold_s()
        late = None if hold_s is None else self._timeout_s + hold_s + LATE_LANDING_MARGIN_S
        return SimOutcomeUnknownError(
            f"sim cloud {method} {target}: {why}; the cloud may still apply it"
            + ("" if late is None else f" (until {late:g} s after the call started)"),
            method=method,
            target=target,
            late_landing_s=late,
        )

    async def _hold_s(self) -> float | None:
        """How long the simulated cloud says it may hold a request (None: it did not say)."""
        with trio.move_on_after(self._timeout_s):
            try:
                response = await self._client().get("/_sim/settings")
                hold = msgspec.json.decode(response.content, type=dict[str, object])
            except (httpx.HTTPError, msgspec.DecodeError, msgspec.ValidationError):
                return None
            value = hold.get("holdSeconds")
            if isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
        return None

    @staticmethod
    def decode(method: str, target: str, response: httpx.Response, into: type[T]) -> T:
        """Read a successful answer as `into`; SimCloudError when it does not fit."""
        try:
            return msgspec.json.decode(response.content, type=into)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise SimCloudError(
                f"sim cloud {method} {target}: unreadable answer ({exc})",
                method=method,
                target=target,
                status=response.status_code,
            ) from exc
