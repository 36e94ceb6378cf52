"""The one exception root of trio-ccm. Every error we raise on purpose derives from CcmError."""

from __future__ import annotations


class CcmError(Exception):
    """Base of all trio-ccm errors. The message names the object and what to do."""


class ConfigError(CcmError):
    """Bad configuration: flags, kubeconfig, cloud-config. The message names the source."""


class RetryAfter(CcmError):  # noqa: N818 - the name DESIGN gives providers
    """Retry the same operation after exactly `delay_s` seconds (not exponential backoff)."""

    def __init__(self, delay_s: float, message: str = "") -> None:
        super().__init__(message or f"retry after {delay_s:g} s")
        self.delay_s = delay_s


class NotLeadingError(CcmError):
    """This replica no longer holds its Lease (by its own clock): it must not act. Raised by
    the cloud budget before a provider call made too late, say after the process was frozen
    past its renew deadline; the call never leaves the process."""
