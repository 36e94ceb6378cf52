"""The kube client's errors: what can go wrong talking to the API server, and the one place
an error answer becomes an exception (`error_from_response`, `error_from_status`).

Where they sit in trio-ccm's one exception tree (drawn whole in `trio_ccm.errors`):

    CcmError
    └── KubeError                  anything that went wrong talking to the API server
        ├── KubeConnectionError    unreachable: refused, DNS, TLS, reset
        ├── KubeDecodeError        an answer that does not decode
        └── KubeApiError           an error `Status` (.code, .reason, .retry_after_s)
            ├── BadRequestError        400
            ├── UnauthorizedError      401
            ├── ForbiddenError         403 (the message names the RBAC fix)
            ├── NotFoundError          404
            ├── ConflictError          409 (stale resourceVersion, failed precondition)
            ├── AlreadyExistsError     409 AlreadyExists
            ├── GoneError              410 (relist)
            ├── InvalidError           422
            ├── TooManyRequestsError   429
            └── ServerError            5xx
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping

import httpx
import msgspec

from trio_ccm.errors import CcmError
from trio_ccm.kube.objects import Status

__all__ = [
    "QUOTED_BYTES",
    "STATUS_DECODER",
    "AlreadyExistsError",
    "BadRequestError",
    "ConflictError",
    "ForbiddenError",
    "GoneError",
    "InvalidError",
    "KubeApiError",
    "KubeConnectionError",
    "KubeDecodeError",
    "KubeError",
    "NotFoundError",
    "ServerError",
    "TooManyRequestsError",
    "UnauthorizedError",
    "error_from_response",
    "error_from_status",
    "rbac_fix",
    "undecodable",
]


class KubeError(CcmError):
    """Anything that went wrong talking to the API server."""


class KubeConnectionError(KubeError):
    """The API server could not be reached (refused, DNS, TLS, reset)."""


class KubeDecodeError(KubeError):
    """The API server's answer could not be decoded: an HTML page from a proxy, a truncated
    body, an object of the wrong shape. Reads are retried; writes are reported (they may
    have been applied)."""


QUOTED_BYTES = 80
"""How much of an undecodable body an error quotes."""


def undecodable(
    method: str, path: str, response: httpx.Response, exc: Exception
) -> KubeDecodeError:
    """The error for a body that does not decode: method, path, status, content type, size,
    the decoder's complaint and the first bytes."""
    body = response.content
    content_type = response.headers.get("content-type") or "none"
    return KubeDecodeError(
        f"{method} {path}: the API server answered {response.status_code} "
        f"(content-type {content_type}, {len(body)} bytes) with a body that does not decode "
        f"({exc}); it begins {body[:QUOTED_BYTES]!r}"
    )


class KubeApiError(KubeError):
    """The API server answered with an error `Status`."""

    def __init__(self, status: Status, *, method: str, path: str) -> None:
        self.status = status
        self.code = status.code
        self.reason = status.reason
        self.method = method
        self.path = path
        details = status.details
        self.retry_after_s: float | None = (
            float(details.retry_after_seconds)
            if details is not None and details.retry_after_seconds
            else None
        )
        text = f"{method} {path}: {status.code} {status.reason}: {status.message}"
        fix = self.fix(status)
        super().__init__(f"{text}; {fix}" if fix else text)

    @staticmethod
    def fix(_status: Status) -> str:
        """What to do about it, when the status says enough ("" otherwise)."""
        return ""

    @property
    def message(self) -> str:
        return self.status.message


class BadRequestError(KubeApiError):
    pass


class UnauthorizedError(KubeApiError):
    pass


class ForbiddenError(KubeApiError):
    """403: not allowed. When the API server's authorizer said so, the message names the
    verb, resource, scope and account, and what to add to the account's RBAC roles."""

    @staticmethod
    def fix(status: Status) -> str:
        return rbac_fix(status.message)


# The authorizer's reason, as kube-apiserver words it (responsewriters.forbiddenMessage).
_DENIED = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) (?:'
    r'resource "(?P<resource>[^"]*)" in API group "(?P<group>[^"]*)"'
    r'(?: in the namespace "(?P<namespace>[^"]*)")?'
    r'|path "(?P<path>[^"]*)")'
)


def rbac_fix(message: str) -> str:
    """What RBAC must grant for a denial `message` ("" when it is no authorization denial,
    e.g. a namespace being terminated)."""
    denied = _DENIED.search(message)
    if denied is None:
        return ""
    user, verb = denied["user"], denied["verb"]
    if denied["path"] is not None:
        return (
            f'fix: a ClusterRole bound to "{user}" must grant verb "{verb}" on the '
            f'non-resource URL "{denied["path"]}"'
        )
    where = "ClusterRole"
    if denied["namespace"] is not None:
        where = f'Role in the namespace "{denied["namespace"]}" (or a ClusterRole)'
    return (
        f'fix: the {where} bound to "{user}" (deploy/rbac.yaml) must grant verb "{verb}" '
        f'on "{denied["resource"]}" in API group "{denied["group"]}"'
    )


class NotFoundError(KubeApiError):
    pass


class ConflictError(KubeApiError):
    """409 Conflict: a stale resourceVersion or a failed precondition."""


class AlreadyExistsError(KubeApiError):
    pass


class GoneError(KubeApiError):
    """410: the resourceVersion (or continue token) is too old; relist."""


class InvalidError(KubeApiError):
    """422: validation failed, or a JSON-patch `test` did not hold."""


class TooManyRequestsError(KubeApiError):
    pass


class ServerError(KubeApiError):
    """5xx."""


_BY_CODE: dict[int, type[KubeApiError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    422: InvalidError,
    429: TooManyRequestsError,
}

STATUS_DECODER = msgspec.json.Decoder(Status)


def error_from_status(status: Status, *, method: str, path: str) -> KubeApiError:
    """The exception for a `Status` (also used for watch ERROR events)."""
    if status.code == 409 and status.reason == "AlreadyExists":
        return AlreadyExistsError(status, method=method, path=path)
    kind = _BY_CODE.get(status.code) or (ServerError if status.code >= 500 else KubeApiError)
    return kind(status, method=method, path=path)


def error_from_response(
    method: str, path: str, code: int, body: bytes, headers: Mapping[str, str]
) -> KubeApiError:
    """The one place an error response becomes an exception."""
    try:
        status = STATUS_DECODER.decode(body)
    except msgspec.DecodeError:
        text = body[:200].decode(errors="replace").strip()
        status = Status(status="Failure", message=text or f"HTTP {code}", code=code)
    if not status.code:
        status = msgspec.structs.replace(status, code=code)
    error = error_from_status(status, method=method, path=path)
    retry_after = headers.get("retry-after")
    if retry_after:
        with contextlib.suppress(ValueError):
            error.retry_after_s = float(retry_after)
    return error
