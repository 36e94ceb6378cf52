"""API errors answered as Kubernetes `Status` bodies, with the real codes, reasons and texts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trio_ccm_testbed.apiserver.fielderrors import FieldError, invalid_message


class ApiError(Exception):
    """An error the emulator answers with a `Status` body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after_s: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.metadata = metadata or {}
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after_s = retry_after_s

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.metadata),
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:  # an unclassified error (a 500) carries no reason, as upstream
            body["reason"] = self.reason
        # None: no details at all; {} is kept, as upstream sends "details": {} for some errors.
        details = dict(self.details) if self.details is not None else None
        if self.retry_after_s is not None:
            details = (details or {}) | {"retryAfterSeconds": self.retry_after_s}
        if details is not None:
            body["details"] = details
        body["code"] = self.code
        return body


def _details(name: str, group: str, kind: str) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    return details


def qualified(resource: str, group: str) -> str:
    """`services` or `leases.coordination.k8s.io`, as upstream names a resource in messages."""
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{qualified(resource, group)} "{name}" not found',
        details=_details(name, group, resource),
    )


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(resource, group)} "{name}" already exists',
        details=_details(name, group, resource),
    )


def conflict(resource: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}',
        details=_details(name, group, resource),
    )


MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def invalid(kind: str, group: str, name: str, errors: Sequence[FieldError]) -> ApiError:
    details = _details(name, group, kind)
    details["causes"] = [e.cause() for e in errors]
    return ApiError(
        422, "Invalid", invalid_message(kind, name, errors, group=group), details=details
    )


def unprocessable(detail: str) -> ApiError:
    """A 422 as upstream's NewGenericServerResponse builds it (a JSON patch that failed).

    The message is generic; the library's text travels as an UnexpectedServerResponse cause.
    """
    return ApiError(
        422,
        "Invalid",
        "the server rejected our request due to an error in our request",
        details={"causes": [{"reason": "UnexpectedServerResponse", "message": detail}]},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Gone", message)


def forbidden(resource: str, group: str, name: str, why: str) -> ApiError:
    subject = f'{qualified(resource, group)} "{name}"' if name else qualified(resource, group)
    if not resource:
        subject = "forbidden"
        return ApiError(403, "Forbidden", f"forbidden: {why}", details={})
    return ApiError(
        403,
        "Forbidden",
        f"{subject} is forbidden: {why}",
        details=_details(name, group, resource),
    )


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str, accepted: Sequence[str]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{', '.join(accepted)}",
        details={
            "causes": [
                {"reason": "UnexpectedHeader", "message": content_type, "field": "Content-Type"}
            ]
        },
    )


def not_acceptable(accepted: Sequence[str]) -> ApiError:
    return ApiError(
        406,
        "NotAcceptable",
        f"only the following media types are accepted: {', '.join(accepted)}",
    )


def page_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", details={})


def too_large_resource_version(requested: int, current: int) -> ApiError:
    return ApiError(
        504,
        "Timeout",
        f"Too large resource version: {requested}, current: {current}",
        details={
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ]
        },
        retry_after_s=1,
    )


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

_MESSAGES = {
    429: "Too many requests, please try again later.",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted, but may still be "
    "processing the request",
}


def for_code(code: int, message: str | None = None, retry_after_s: int | None = None) -> ApiError:
    """A generic error of this HTTP code, as fault injection answers it."""
    reason = _REASONS.get(code, "Unknown" if code < 500 else "InternalError")
    if code == 500:
        # upstream's NewInternalError: the inner error is repeated as the only cause
        inner = message or "injected fault"
        return ApiError(
            code,
            reason,
            f"Internal error occurred: {inner}",
            details={"causes": [{"message": inner}]},
            retry_after_s=retry_after_s,
        )
    text = message or _MESSAGES.get(code, f"injected fault (HTTP {code})")
    return ApiError(code, reason, text, retry_after_s=retry_after_s)
