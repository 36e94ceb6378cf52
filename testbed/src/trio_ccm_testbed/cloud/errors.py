"""The simulated cloud's error answers: one exception, rendered as a JSON error body."""

from __future__ import annotations

from types import MappingProxyType

from trio_ccm_testbed.cloud.model import JSON

CODES = MappingProxyType(
    {
        400: "BadRequest",
        404: "NotFound",
        405: "MethodNotAllowed",
        409: "Conflict",
        410: "Gone",
        429: "Throttled",
        500: "InternalError",
        502: "BadGateway",
        503: "ServiceUnavailable",
        504: "GatewayTimeout",
    }
)


class SimApiError(Exception):
    """An error answer of the simulated cloud (and of its Python API, for the same cases).

    Over HTTP it is `{"error": {"code": ..., "message": ...}}` with `status`, plus a
    `Retry-After` header (decimal seconds) when `retry_after_s` is set.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or CODES.get(status, "Error")
        self.message = message
        self.retry_after_s = retry_after_s

    def to_json(self) -> dict[str, JSON]:
        error: dict[str, JSON] = {"code": self.code, "message": self.message}
        if self.retry_after_s is not None:
            error["retryAfterSeconds"] = self.retry_after_s
        return {"error": error}


def not_found(what: str) -> SimApiError:
    return SimApiError(404, f"{what} not found")


def bad_request(message: str) -> SimApiError:
    return SimApiError(400, message)


def conflict(message: str) -> SimApiError:
    return SimApiError(409, message)
