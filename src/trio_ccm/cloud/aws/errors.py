"""The aws provider's exceptions: one tree, built in one place (`AwsClient`) from AWS's
error codes, each naming the call, the resource and what to do.

- `AwsError`: AWS answered with an error code (`code`, `status`, `request_id`).
- `AwsThrottledError`: the call was refused for its rate (`RequestLimitExceeded` from EC2
  with HTTP 503, `Throttling` from ELB with HTTP 400, any HTTP 429, and botocore's other
  throttling codes). It is also a `ThrottledError`, so the shared cloud budget slows the
  method's family down.
- `AwsServerError`: AWS failed (HTTP 5xx), could not be reached, or answered something that
  is no AWS answer (an HTML page, a truncated body). Transient: retried by the client, then
  by the controllers with backoff; never read as "no such instance".
- `AwsCredentialsError`: no usable credentials; the message names the source and the fix.
  `ImdsError` (the metadata service could not answer) is one. They live here, not beside
  the credential chain, so `imds.py` and `credentials.py` need not import each other.
"""

from __future__ import annotations

from typing import Final

from trio_ccm.cloud.provider import ThrottledError
from trio_ccm.errors import CcmError

__all__ = [
    "THROTTLING_CODES",
    "TRANSIENT_CODES",
    "AwsCredentialsError",
    "AwsError",
    "AwsServerError",
    "AwsThrottledError",
    "ImdsError",
    "fix_for",
]

THROTTLING_CODES: Final = frozenset(
    {
        # botocore's standard retry mode's list (retries/standard.py), all services.
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
    }
)
"""Error codes that mean "too many requests": raised as AwsThrottledError."""

TRANSIENT_CODES: Final = frozenset(
    {
        # botocore's standard transient codes, plus the server-side ones AWS documents for
        # EC2, ELB and STS (IDPCommunicationError: STS could not reach the OIDC issuer).
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "Unavailable",
        "IDPCommunicationError",
    }
)
"""Error codes retried as server errors, whatever their HTTP status."""

_CREDENTIALS_FIX: Final = (
    "check the credentials the provider found (the log line aws.credentials names their "
    "source; docs/aws.md#credentials lists the chain)"
)
_FIXES: Final = {
    "AuthFailure": _CREDENTIALS_FIX,
    "InvalidClientTokenId": _CREDENTIALS_FIX,
    "UnrecognizedClientException": _CREDENTIALS_FIX,
    "SignatureDoesNotMatch": _CREDENTIALS_FIX
    + "; a proxy that rewrites the request also breaks the signature",
    "IncompleteSignature": _CREDENTIALS_FIX,
    "ExpiredToken": "the session token expired and could not be refreshed; " + _CREDENTIALS_FIX,
    "ExpiredTokenException": "the session token expired and could not be refreshed; "
    + _CREDENTIALS_FIX,
    "RequestExpired": "the request's signature is too old: check the host's clock (NTP)",
    "RulesPerSecurityGroupLimitExceeded": "the security group holds as many rules as AWS's "
    "quota 'Inbound or outbound rules per security group' allows (every load balancer adds "
    "rules to the Nodes' group): raise the quota, set NLBSecurityGroupMode=Managed in the "
    "cloud-config (one rule per NLB; docs/aws.md#security-group-rule-quotas), or set "
    "DisableSecurityGroupIngress and open the node ports yourself",
    "OptInRequired": "the account is not subscribed to this service in this region",
    "InvalidIdentityToken": "STS refused the web identity token: check the IAM OIDC provider "
    "of the cluster and the role's trust policy (IRSA, docs/aws.md#irsa)",
}


def fix_for(service: str, action: str, code: str) -> str:
    """What to do about error `code` from `service`'s `action` ("" when nothing general)."""
    if code in ("UnauthorizedOperation", "AccessDenied", "AccessDeniedException"):
        prefix = {"elbv2": "elasticloadbalancing", "elb": "elasticloadbalancing"}.get(
            service, service
        )
        return (
            f"grant {prefix}:{action} to the IAM role trio-ccm runs as "
            "(docs/aws.md#iam-policy lists every action it uses)"
        )
    return _FIXES.get(code, "")


class AwsError(CcmError):
    """AWS refused or failed a call. `code` is AWS's error code ("" when there was none)."""

    def __init__(
        self,
        message: str,
        *,
        service: str,
        action: str,
        target: str = "",
        status: int = 0,
        code: str = "",
        request_id: str = "",
    ) -> None:
        self.service = service
        self.action = action
        self.target = target
        self.status = status
        self.code = code
        self.aws_message = message
        self.request_id = request_id
        where = f"{_SERVICE_NAMES.get(service, service)} {action}"
        if target:
            where += f" ({target})"
        text = f"{where}: {code + ': ' if code else ''}{message}"
        details = []
        if status:
            details.append(f"HTTP {status}")
        if request_id:
            details.append(f"request {request_id}")
        if details:
            text += f" [{', '.join(details)}]"
        fix = fix_for(service, action, code)
        if fix:
            text += f"; {fix}"
        CcmError.__init__(self, text)


class AwsThrottledError(AwsError, ThrottledError):
    """AWS refused the call for its rate limits (see the module docstring)."""

    retry_after_s = None  # AWS never says when (ThrottledError's field)


class AwsServerError(AwsError):
    """AWS failed, was unreachable, or answered garbage: transient, retried."""


class AwsCredentialsError(CcmError):
    """No usable credentials: the message names the source and what to set or fix."""


class ImdsError(AwsCredentialsError):
    """The metadata service could not answer (off EC2, disabled, or hop limit too low)."""


_SERVICE_NAMES: Final = {"ec2": "EC2", "elb": "ELB", "elbv2": "ELBv2", "sts": "STS"}
