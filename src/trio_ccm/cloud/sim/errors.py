"""The `sim` provider's own error: the simulated cloud failed or could not be reached."""

from __future__ import annotations

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
