"""The one exception root of trio-ccm. Every error we raise on purpose derives from CcmError.

The tree, drawn once (tests/unit/test_errors_tree.py holds it to the code); each provider
adds its own subtree in its package (`trio_ccm.cloud.aws.errors`, `trio_ccm.cloud.sim.errors`):

    CcmError                          trio_ccm.errors
    ├── ConfigError                   bad flags, kubeconfig or cloud-config (names the source)
    │   └── FlagError                 trio_ccm.settings: a rejected command line
    ├── RetryAfter                    retry after exactly .delay_s
    ├── NotLeadingError               this replica's Lease ran out by its own clock
    ├── LeaseLostError                trio_ccm.kube.leader: leadership lost, asked to stop
    ├── KubeError                     trio_ccm.kube.errors: talking to the API server
    │   ├── KubeConnectionError
    │   ├── KubeDecodeError
    │   └── KubeApiError              an error Status
    │       ├── BadRequestError
    │       ├── UnauthorizedError
    │       ├── ForbiddenError
    │       ├── NotFoundError
    │       ├── ConflictError
    │       ├── AlreadyExistsError
    │       ├── GoneError
    │       ├── InvalidError
    │       ├── TooManyRequestsError
    │       └── ServerError
    ├── InstanceNotFoundError         trio_ccm.cloud.provider: what providers raise
    ├── InvalidProviderIDError
    ├── ServiceRefused
    ├── ImplementedElsewhere
    ├── ThrottledError
    ├── OutcomeUnknownError
    ├── StaleCursorError              an instance change feed cannot answer since a cursor
    ├── AddressError                  trio_ccm.actors.node_addresses
    ├── NoCidrLeftError               trio_ccm.actors.cidr_set
    └── CidrOutOfRangeError
"""

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


def traceback_for(exc: BaseException, failures: int) -> BaseException | None:
    """What to log as `exc_info` for the `failures`-th failure in a row of one key or pass:
    the first failure's traceback, so a bug shows where it is; none after it (each retry is
    one line), and none for one of our own errors, whose message already names the object
    and the fix (an Octavia load balancer in ERROR, a write whose outcome is unknown)."""
    if failures != 1 or isinstance(exc, CcmError):
        return None
    return exc
