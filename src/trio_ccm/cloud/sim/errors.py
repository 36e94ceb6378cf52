"""The `sim` provider's own errors: the simulated cloud failed or could not be reached, or a
write was sent and its outcome is unknown."""

from __future__ import annotations

from trio_ccm.cloud.provider import OutcomeUnknownError
from trio_ccm.errors import CcmError


class SimCloudError(CcmError):
    """A call to the simulated cloud failed (5xx, 4xx other than the mapped ones, no answer).

    `method` and `target` name the cloud call (`GetInstance`, `i-0a1b2c3d`); `status` is
    the HTTP status (None when there was no answer) and `code` the cloud's error code.
    """

    def __init__(
        self,
        message: str,
        *,
        method: str = "",
        target: str = "",
        status: int | None = None,
        code: str = "",
    ) -> None:
        super().__init__(message)
        self.method = method
        self.target = target
        self.status = status
        self.code = code


class SimOutcomeUnknownError(SimCloudError, OutcomeUnknownError):
    """A write to the simulated cloud was sent and its outcome is unknown: no answer within
    the timeout, the connection lost after sending, or a 5xx. The cloud may still apply it
    until `late_landing_s` after the call started (the timeout plus how long the cloud says
    it may hold a request: `holdSeconds` of its admin API)."""

    def __init__(
        self,
        message: str,
        *,
        method: str = "",
        target: str = "",
        status: int | None = None,
        code: str = "",
        late_landing_s: float | None = None,
    ) -> None:
        SimCloudError.__init__(
            self, message, method=method, target=target, status=status, code=code
        )
        self.late_landing_s = late_landing_s
