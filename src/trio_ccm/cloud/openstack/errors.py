"""The openstack provider's exceptions: one tree, built in one place (`OpenStackClient`).

- `OpenStackError` (root): a call failed. It carries `service` (the catalog type),
  `method`, `path`, `status` (0 when no answer came) and `server_message` (what the
  service said, from Nova's, Neutron's, Octavia's or Keystone's error body).
- `NotFoundError` (404) and `ConflictError` (409): the answers callers decide on.
- `OpenStackAuthError`: Keystone refused the credentials, or a call still got 401 after
  the one re-authentication. The message names the config keys to check.
- `OpenStackThrottledError`: HTTP 413 or 429 (Nova and Neutron's rate limits answer 413
  with Retry-After, the API gateways 429). Also a `ThrottledError`, so the shared cloud
  budget slows the method's family down and honours `retry_after_s`.
- `OpenStackServerError`: a 5xx, no answer, or an answer that is not JSON (an HTML error
  page from a proxy, a truncated body). Transient: retried, then retried again by the
  controllers with backoff; never read as "no such server".
- `OpenStackOutcomeUnknownError`: a mutating call (POST/PUT/PATCH/DELETE) was sent, and
  then timed out, lost its connection or got a 5xx: the cloud may apply it, later. Also
  an `OutcomeUnknownError` (issue 27). A failure before sending (connect error) or a 4xx
  is a clean failure and not this.
"""

from __future__ import annotations

from trio_ccm.cloud.provider import OutcomeUnknownError, ThrottledError
from trio_ccm.errors import CcmError

__all__ = [
    "ConflictError",
    "NotFoundError",
    "OpenStackAuthError",
    "OpenStackError",
    "OpenStackOutcomeUnknownError",
    "OpenStackServerError",
    "OpenStackThrottledError",
]

_SERVICE_NAMES = {
    "compute": "Nova",
    "network": "Neutron",
    "load-balancer": "Octavia",
    "identity": "Keystone",
    "image": "Glance",
    "placement": "Placement",
}


class OpenStackError(CcmError):
    """An OpenStack call failed (see the module docstring for the fields)."""

    def __init__(
        self,
        message: str,
        *,
        service: str,
        method: str,
        path: str,
        status: int = 0,
        server_message: str = "",
        request_id: str = "",
    ) -> None:
        self.service = service
        self.method = method
        self.path = path
        self.status = status
        self.server_message = server_message
        self.request_id = request_id
        where = f"{_SERVICE_NAMES.get(service, service)} {method} {path}"
        text = f"{where}: {message}"
        details = []
        if status:
            details.append(f"HTTP {status}")
        if request_id:
            details.append(f"request {request_id}")
        if details:
            text += f" [{', '.join(details)}]"
        CcmError.__init__(self, text)


class NotFoundError(OpenStackError):
    """HTTP 404: the resource does not exist (or the user may not see it)."""


class ConflictError(OpenStackError):
    """HTTP 409: the resource is in a state that refuses the change (busy, immutable)."""


class OpenStackAuthError(OpenStackError):
    """Keystone refused the credentials (or a token kept being refused)."""


class OpenStackServerError(OpenStackError):
    """A 5xx, no answer, or garbage: transient, retried."""


class OpenStackThrottledError(OpenStackError, ThrottledError):
    """HTTP 413/429: the cloud's rate limit; `retry_after_s` from Retry-After, if given."""

    retry_after_s: float | None = None


class OpenStackOutcomeUnknownError(OpenStackError, OutcomeUnknownError):
    """A mutating call was sent and its outcome is unknown (see the module docstring)."""

    late_landing_s: float | None = None
