"""The EC2 instance metadata service, IMDSv2 only: a session token (PUT), then GETs.

Used for the instance role's credentials (the last source of the credential chain), the
region when neither the cloud-config nor the environment names one, and the instance's
own ID (its tags give the cluster ID when the cloud-config names none).

The endpoint is `AWS_EC2_METADATA_SERVICE_ENDPOINT`, else a cloud-config
`[ServiceOverride]` for service `ec2imds`, else `http://169.254.169.254`;
`AWS_EC2_METADATA_DISABLED=true` turns it off. Each request has a 1 s timeout and is tried
twice, so a CCM running off EC2 learns within seconds that there is no metadata service.
In a pod, IMDSv2's token answer needs the instance's `HttpPutResponseHopLimit` at 2 or
more; the errors say so.
"""

from __future__ import annotations

from typing import Final

import httpx
import trio

from trio_ccm.cloud.aws.errors import ImdsError

__all__ = ["DEFAULT_ENDPOINT", "Imds", "ImdsError"]

DEFAULT_ENDPOINT: Final = "http://169.254.169.254"
_TOKEN_TTL_S: Final = 21600
_TOKEN_MARGIN_S: Final = 60.0
_TIMEOUT_S: Final = 1.0
_ATTEMPTS: Final = 2


class Imds:
    """An IMDSv2 client over `http` (see the module docstring)."""

    def __init__(self, *, http: httpx.AsyncClient, endpoint: str = "", disabled: bool = False):
        self.endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
        self.disabled = disabled
        self._http = http
        self._token = ""
        self._token_until = 0.0
        self._lock = trio.Lock()

    async def get(self, path: str, *, what: str) -> str:
        """GET /latest/<path> with a session token; ImdsError naming `what` on failure."""
        if self.disabled:
            raise ImdsError(
                f"instance metadata ({what}): disabled by AWS_EC2_METADATA_DISABLED; set it "
                "in the cloud-config or the environment instead"
            )
        url = f"{self.endpoint}/latest/{path}"
        for attempt in range(_ATTEMPTS):
            token = await self._session_token(what)
            try:
                response = await self._http.get(
                    url, headers={"X-aws-ec2-metadata-token": token}, timeout=_TIMEOUT_S
                )
            except httpx.TransportError as exc:
                if attempt + 1 < _ATTEMPTS:
                    continue
                raise self._unreachable(what, exc) from exc
            if response.status_code == 401 and attempt + 1 < _ATTEMPTS:
                self._token = ""  # expired token: take a new one
                continue
            if response.status_code != 200:
                raise ImdsError(
                    f"instance metadata at {self.endpoint} ({what}): GET /latest/{path} "
                    f"answered HTTP {response.status_code}"
                )
            return response.text
        raise AssertionError("unreachable")  # pragma: no cover

    async def _session_token(self, what: str) -> str:
        async with self._lock:
            if self._token and trio.current_time() < self._token_until:
                return self._token
            for attempt in range(_ATTEMPTS):
                try:
                    response = await self._http.put(
                        f"{self.endpoint}/latest/api/token",
                        headers={"X-aws-ec2-metadata-token-ttl-seconds": str(_TOKEN_TTL_S)},
                        timeout=_TIMEOUT_S,
                    )
                except httpx.TransportError as exc:
                    if attempt + 1 < _ATTEMPTS:
                        continue
                    raise self._unreachable(what, exc) from exc
                if response.status_code != 200 or not response.text.strip():
                    raise ImdsError(
                        f"instance metadata at {self.endpoint} ({what}): the IMDSv2 token "
                        f"request answered HTTP {response.status_code}; IMDSv2 must be "
                        "enabled on the instance"
                    )
                self._token = response.text.strip()
                self._token_until = trio.current_time() + _TOKEN_TTL_S - _TOKEN_MARGIN_S
                return self._token
            raise AssertionError("unreachable")  # pragma: no cover

    def _unreachable(self, what: str, exc: Exception) -> ImdsError:
        return ImdsError(
            f"instance metadata at {self.endpoint} ({what}): no answer "
            f"({type(exc).__name__}); off EC2, set it explicitly (e.g. Region in the "
            "cloud-config, credentials in the environment); in a pod on EC2, the instance's "
            "metadata option HttpPutResponseHopLimit must be 2 or more"
        )

    async def region(self) -> str:
        return (await self.get("meta-data/placement/region", what="the region")).strip()

    async def instance_id(self) -> str:
        return (await self.get("meta-data/instance-id", what="this instance's ID")).strip()
