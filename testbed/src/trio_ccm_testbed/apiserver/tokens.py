"""Service-account tokens shaped as upstream's: signed JWTs with upstream's claims.

- A TokenRequest (`serviceaccounts/NAME/token`) gets a bound token: `iss` and the default
  audience `https://kubernetes.default.svc.cluster.local`, `sub`
  `system:serviceaccount:NS:NAME`, `iat`/`nbf`/`exp`, a `jti`, and the `kubernetes.io`
  claim naming the namespace and the service account (name and uid), as kube-apiserver's
  token issuer writes them.
- A Secret of type `kubernetes.io/service-account-token` gets a legacy token: issuer
  `kubernetes/serviceaccount` and the `kubernetes.io/serviceaccount/...` claims.

Tokens are signed ES256 with a P-256 key the emulator makes when it issues its first one
(upstream accepts RSA or ECDSA service-account keys; ECDSA is cheap to make per emulator).
Times come from the injected clock; `jti` values are derived from a counter, not from
randomness, so a seeded run stays reproducible.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import itertools
import json
import uuid
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

ISSUER = "https://kubernetes.default.svc.cluster.local"
LEGACY_ISSUER = "kubernetes/serviceaccount"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenSigner:
    """Issues service-account JWTs (see the module docstring)."""

    def __init__(self, *, now: Callable[[], dt.datetime]) -> None:
        self.now = now
        self._key: ec.EllipticCurvePrivateKey | None = None
        self._serial = itertools.count(1)

    def _private_key(self) -> ec.EllipticCurvePrivateKey:
        if self._key is None:
            self._key = ec.generate_private_key(ec.SECP256R1())
        return self._key

    @property
    def key_id(self) -> str:
        """As upstream: the URL-safe base64 of the SHA-256 of the DER public key."""
        der = (
            self._private_key()
            .public_key()
            .public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return _b64(hashlib.sha256(der).digest())

    def jwks(self) -> dict[str, Any]:
        """The public key as a JSON Web Key Set (what `/openid/v1/jwks` serves)."""
        numbers = self._private_key().public_key().public_numbers()
        return {
            "keys": [
                {
                    "use": "sig",
                    "kty": "EC",
                    "kid": self.key_id,
                    "crv": "P-256",
                    "alg": "ES256",
                    "x": _b64(numbers.x.to_bytes(32, "big")),
                    "y": _b64(numbers.y.to_bytes(32, "big")),
                }
            ]
        }

    def _sign(self, claims: dict[str, Any]) -> str:
        header = {"alg": "ES256", "kid": self.key_id}
        signing_input = (
            _b64(json.dumps(header, separators=(",", ":")).encode())
            + "."
            + _b64(json.dumps(claims, separators=(",", ":")).encode())
        )
        der = self._private_key().sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return signing_input + "." + _b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))

    def _jti(self, subject: str) -> str:
        digest = hashlib.sha256(f"{subject}/{next(self._serial)}".encode()).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))

    def bound(
        self,
        namespace: str,
        name: str,
        uid: str,
        *,
        audiences: list[str] | None = None,
        expiration_s: int = 3600,
    ) -> tuple[str, dt.datetime, str]:
        """A TokenRequest token: (JWT, expiry, jti)."""
        issued = self.now().replace(microsecond=0)
        expires = issued + dt.timedelta(seconds=expiration_s)
        subject = f"system:serviceaccount:{namespace}:{name}"
        jti = self._jti(subject)
        claims = {
            "aud": audiences or [ISSUER],
            "exp": int(expires.timestamp()),
            "iat": int(issued.timestamp()),
            "iss": ISSUER,
            "jti": jti,
            "kubernetes.io": {
                "namespace": namespace,
                "serviceaccount": {"name": name, "uid": uid},
            },
            "nbf": int(issued.timestamp()),
            "sub": subject,
        }
        return self._sign(claims), expires, jti

    def legacy(self, namespace: str, name: str, uid: str, secret: str) -> str:
        """A token for a `kubernetes.io/service-account-token` Secret (it never expires)."""
        prefix = "kubernetes.io/serviceaccount/"
        return self._sign(
            {
                "iss": LEGACY_ISSUER,
                prefix + "namespace": namespace,
                prefix + "secret.name": secret,
                prefix + "service-account.name": name,
                prefix + "service-account.uid": uid,
                "sub": f"system:serviceaccount:{namespace}:{name}",
            }
        )


def claims_of(token: str) -> dict[str, Any]:
    """The claims of a JWT (not verified: for tests and TokenReview's bookkeeping)."""
    payload = token.split(".")[1]
    result: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return result
