"""AWS credentials, found as the AWS SDKs find them, refreshed before they expire.

The chain, in the SDKs' order; the first source that is *configured* is used, and an
error from it is reported as is (it does not fall through to the next one, so a broken
IRSA set-up is never papered over by the node's instance role):

1. **environment**: `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`);
2. **shared files**: profile `AWS_PROFILE` (else `default`) of `AWS_SHARED_CREDENTIALS_FILE`
   (`~/.aws/credentials`) and `AWS_CONFIG_FILE` (`~/.aws/config`, sections
   `[profile NAME]`): static keys, or `role_arn` with `source_profile`,
   `credential_source` (Environment, Ec2InstanceMetadata, EcsContainer) or
   `web_identity_token_file`;
3. **web identity** (EKS IRSA): `AWS_ROLE_ARN` + `AWS_WEB_IDENTITY_TOKEN_FILE`
   (+ `AWS_ROLE_SESSION_NAME`): STS `AssumeRoleWithWebIdentity`, unsigned, with the token
   file read again at every refresh (the kubelet rotates it);
4. **container endpoint** (EKS Pod Identity, ECS): `AWS_CONTAINER_CREDENTIALS_FULL_URI` or
   `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`, with `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`
   (read at every refresh) or `AWS_CONTAINER_AUTHORIZATION_TOKEN`;
5. **instance metadata** (IMDSv2 only): the instance role's credentials.

The cloud-config's `RoleARN` wraps the chain's credentials in an STS `AssumeRole` (with
`SourceARN` and the role's account as the `x-amz-source-arn`/`x-amz-source-account`
headers, as cloud-provider-aws sends them).

`RefreshingCredentials` caches what a source gave until 5 minutes before it expires; the
callers that ask while a refresh is under way wait for it and share its result. A failed
refresh while the cached credentials are still valid keeps them (and logs a warning).
Nothing here logs or shows a secret: `AwsCredentials`'s repr omits them.
"""

from __future__ import annotations

import configparser
import datetime as dt
import ipaddress
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol
from urllib.parse import urlsplit

import httpx
import trio

from trio_ccm.cloud.aws.errors import AwsCredentialsError
from trio_ccm.logs import get_logger

if TYPE_CHECKING:
    from trio_ccm.cloud.aws.imds import Imds

__all__ = [
    "AssumeRoleSource",
    "AwsCredentials",
    "AwsCredentialsError",  # re-exported from errors.py, where it lives
    "ChainParts",
    "ContainerSource",
    "CredentialChain",
    "CredentialSource",
    "EnvironmentSource",
    "ImdsSource",
    "ProfileSource",
    "RefreshingCredentials",
    "StaticSource",
    "Sts",
    "WebIdentitySource",
    "utc_now",
]

log = get_logger("trio_ccm.cloud.aws.credentials")

REFRESH_BEFORE_S: Final = 300.0
"""Credentials are refreshed this long before they expire (the SDKs' 5 minutes)."""
_CONTAINER_HOST: Final = "http://169.254.170.2"
_CONTAINER_TIMEOUT_S: Final = 5.0
_ALLOWED_CONTAINER_HOSTS: Final = frozenset(
    {"localhost", "169.254.170.2", "169.254.170.23", "fd00:ec2::23"}
)
_MAX_ROLE_CHAIN: Final = 5


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True, slots=True)
class AwsCredentials:
    """Keys to sign with. `expiration` (UTC) is None for keys that never expire."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str = field(default="", repr=False)
    expiration: dt.datetime | None = None
    source: str = ""
    """Where they came from, for logs and errors (never the keys themselves)."""


class Sts(Protocol):
    """The one STS call credential sources make (`AwsClient.call` fits)."""

    async def call(
        self,
        service: str,
        action: str,
        params: Mapping[str, object] | None = None,
        *,
        target: str = "",
        credentials: AwsCredentials | None = None,
        unsigned: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, object]: ...


class CredentialSource(Protocol):
    """Where credentials come from; `fetch()` asks the source afresh."""

    description: str

    async def fetch(self) -> AwsCredentials: ...


# -- helpers ---------------------------------------------------------------------------------
def _expiration(value: object, where: str) -> dt.datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        moment = value
    else:
        try:
            moment = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError as exc:
            raise AwsCredentialsError(
                f"{where}: the credentials' Expiration {value!r} is not an ISO 8601 time"
            ) from exc
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def _keys(body: Mapping[str, object], source: str, *, session_key: str = "Token") -> AwsCredentials:
    """Credentials from an answer's AccessKeyId, SecretAccessKey, `session_key` and Expiration
    (STS, the container endpoint and the metadata service all answer so)."""
    if not body.get("AccessKeyId") or not body.get("SecretAccessKey"):
        raise AwsCredentialsError(f"{source}: the answer has no AccessKeyId/SecretAccessKey")
    return AwsCredentials(
        access_key_id=str(body["AccessKeyId"]),
        secret_access_key=str(body["SecretAccessKey"]),
        session_token=str(body.get(session_key) or ""),
        expiration=_expiration(body.get("Expiration"), source),
        source=source,
    )


def _sts_credentials(answer: Mapping[str, object], source: str) -> AwsCredentials:
    found = answer.get("Credentials")
    if not isinstance(found, Mapping):
        raise AwsCredentialsError(f"{source}: STS answered without Credentials")
    return _keys(found, source, session_key="SessionToken")


async def _read_text(path: Path, what: str) -> str:
    try:
        return await trio.to_thread.run_sync(path.read_text)
    except OSError as exc:
        raise AwsCredentialsError(
            f"{what}: cannot read {path} ({exc.strerror}); check the path and the volume mount"
        ) from exc


def _session_name(now: dt.datetime) -> str:
    return f"trio-ccm-{int(now.timestamp() * 1000)}"


# -- sources ---------------------------------------------------------------------------------
@dataclass
class StaticSource:
    """Fixed keys (environment, a profile's keys, tests)."""

    credentials: AwsCredentials
    description: str = "static keys"

    async def fetch(self) -> AwsCredentials:
        await trio.lowlevel.checkpoint()
        return self.credentials


class EnvironmentSource(StaticSource):
    """`AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> EnvironmentSource | None:
        key = environ.get("AWS_ACCESS_KEY_ID", "")
        secret = environ.get("AWS_SECRET_ACCESS_KEY", "")
        if not key and not secret:
            return None
        if not key or not secret:
            missing = "AWS_ACCESS_KEY_ID" if not key else "AWS_SECRET_ACCESS_KEY"
            raise AwsCredentialsError(
                f"environment credentials: {missing} is empty while the other key is set; "
                "set both, or neither to use the next source of the chain"
            )
        description = "environment (AWS_ACCESS_KEY_ID)"
        return cls(
            AwsCredentials(key, secret, environ.get("AWS_SESSION_TOKEN", ""), source=description),
            description,
        )


class WebIdentitySource:
    """STS AssumeRoleWithWebIdentity with a token file (EKS IRSA)."""

    def __init__(
        self,
        *,
        role_arn: str,
        token_file: str,
        session_name: str = "",
        sts: Sts,
        now: Callable[[], dt.datetime] = utc_now,
    ) -> None:
        self.role_arn = role_arn
        self.token_file = Path(token_file)
        self.session_name = session_name
        self.description = f"web identity (role {role_arn}, token {token_file})"
        self._sts = sts
        self._now = now

    async def fetch(self) -> AwsCredentials:
        token = (await _read_text(self.token_file, self.description)).strip()
        if not token:
            raise AwsCredentialsError(
                f"{self.description}: the token file is empty; check the projected "
                "service-account token volume"
            )
        answer = await self._sts.call(
            "sts",
            "AssumeRoleWithWebIdentity",
            {
                "RoleArn": self.role_arn,
                "RoleSessionName": self.session_name or _session_name(self._now()),
                "WebIdentityToken": token,
            },
            target=f"role {self.role_arn}",
            unsigned=True,
        )
        return _sts_credentials(answer, self.description)


class AssumeRoleSource:
    """STS AssumeRole signed with `base`'s credentials (cloud-config RoleARN, profiles)."""

    def __init__(
        self,
        *,
        base: RefreshingCredentials,
        role_arn: str,
        sts: Sts,
        source_arn: str = "",
        session_name: str = "",
        external_id: str = "",
        now: Callable[[], dt.datetime] = utc_now,
    ) -> None:
        self.base = base
        self.role_arn = role_arn
        self.source_arn = source_arn
        self.session_name = session_name
        self.external_id = external_id
        self.description = f"assumed role {role_arn} (from {base.description})"
        self._sts = sts
        self._now = now

    async def fetch(self) -> AwsCredentials:
        base = await self.base.get()
        params: dict[str, object] = {
            "RoleArn": self.role_arn,
            "RoleSessionName": self.session_name or _session_name(self._now()),
        }
        if self.external_id:
            params["ExternalId"] = self.external_id
        # cloud-provider-aws's STS client sends the role's account, and SourceARN when set,
        # for the role's trust policy (aws:SourceAccount / aws:SourceArn).
        headers = {}
        account = _arn_account(self.role_arn)
        if account:
            headers["x-amz-source-account"] = account
        if self.source_arn:
            headers["x-amz-source-arn"] = self.source_arn
        answer = await self._sts.call(
            "sts",
            "AssumeRole",
            params,
            target=f"role {self.role_arn}",
            credentials=base,
            headers=headers,
        )
        return _sts_credentials(answer, self.description)


def _arn_account(arn: str) -> str:
    parts = arn.split(":", 5)
    return parts[4] if len(parts) == 6 else ""


class ContainerSource:
    """The container credentials endpoint (EKS Pod Identity, ECS task roles)."""

    def __init__(
        self,
        *,
        url: str,
        http: httpx.AsyncClient,
        token: str = "",
        token_file: str = "",
    ) -> None:
        self.url = url
        self.token = token
        self.token_file = Path(token_file) if token_file else None
        self.description = f"container endpoint {url}"
        self._http = http

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str], *, http: httpx.AsyncClient
    ) -> ContainerSource | None:
        relative = environ.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "")
        full = environ.get("AWS_CONTAINER_CREDENTIALS_FULL_URI", "")
        if relative:
            url = _CONTAINER_HOST + ("" if relative.startswith("/") else "/") + relative
        elif full:
            url = full
            _check_container_url(url)
        else:
            return None
        return cls(
            url=url,
            http=http,
            token=environ.get("AWS_CONTAINER_AUTHORIZATION_TOKEN", ""),
            token_file=environ.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", ""),
        )

    async def fetch(self) -> AwsCredentials:
        headers = {}
        token = self.token
        if self.token_file is not None:
            token = (await _read_text(self.token_file, self.description)).strip()
        if token:
            if "\r" in token or "\n" in token:
                raise AwsCredentialsError(
                    f"{self.description}: the authorization token holds a line break; "
                    "check AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE)"
                )
            headers["Authorization"] = token
        try:
            response = await self._http.get(self.url, headers=headers, timeout=_CONTAINER_TIMEOUT_S)
        except httpx.TransportError as exc:
            raise AwsCredentialsError(
                f"{self.description}: unreachable ({type(exc).__name__}: {exc}); is the Pod "
                "Identity agent (or the ECS agent) running on the node?"
            ) from exc
        if response.status_code != 200:
            raise AwsCredentialsError(
                f"{self.description}: HTTP {response.status_code}: "
                f"{response.text[:200].strip()}; check the pod's service account association"
            )
        try:
            body = json.loads(response.content)
        except ValueError as exc:
            raise AwsCredentialsError(f"{self.description}: the answer is not JSON") from exc
        if not isinstance(body, dict):
            raise AwsCredentialsError(f"{self.description}: the answer is not a JSON object")
        return _keys(body, self.description)


def _check_container_url(url: str) -> None:
    """The SDKs' rule: plain HTTP only to loopback or the container endpoints' addresses."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return
    host = (parts.hostname or "").lower()
    allowed = host in _ALLOWED_CONTAINER_HOSTS
    if not allowed:
        try:
            allowed = ipaddress.ip_address(host).is_loopback
        except ValueError:
            allowed = False
    if parts.scheme != "http" or not allowed:
        raise AwsCredentialsError(
            f"AWS_CONTAINER_CREDENTIALS_FULL_URI={url}: plain HTTP is allowed only to a "
            "loopback address, 169.254.170.2, 169.254.170.23 or fd00:ec2::23; use https"
        )


class ImdsSource:
    """The instance role's credentials from the instance metadata service (IMDSv2)."""

    def __init__(self, imds: Imds) -> None:
        self._imds = imds
        self.description = f"instance metadata {imds.endpoint}"

    async def fetch(self) -> AwsCredentials:
        roles = await self._imds.get("meta-data/iam/security-credentials/", what="the role")
        role = roles.strip().splitlines()[0].strip() if roles.strip() else ""
        if not role:
            raise AwsCredentialsError(
                f"{self.description}: the instance has no IAM role (instance profile); attach "
                "one with the policy in docs/aws.md, or give credentials another way"
            )
        text = await self._imds.get(
            f"meta-data/iam/security-credentials/{role}", what=f"role {role}'s credentials"
        )
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise AwsCredentialsError(f"{self.description}: the answer is not JSON") from exc
        if not isinstance(body, dict) or body.get("Code", "Success") != "Success":
            code = body.get("Code") if isinstance(body, dict) else None
            raise AwsCredentialsError(
                f"{self.description}: role {role}: the metadata service said {code!r}"
            )
        return _keys(body, f"instance metadata (role {role})")


@dataclass(frozen=True, slots=True)
class ChainParts:
    """What the chain's sources are built from: the environment, STS, the HTTP client
    (container endpoint), the metadata service, and the wall clock."""

    environ: Mapping[str, str]
    sts: Sts
    http: httpx.AsyncClient
    imds: Imds
    now: Callable[[], dt.datetime] = utc_now


class ProfileSource:
    """A profile of the shared `credentials` and `config` files (see the module docstring)."""

    def __init__(self, parts: ChainParts) -> None:
        environ = parts.environ
        home = Path(environ.get("HOME") or Path.home())
        self.profile = environ.get("AWS_PROFILE") or environ.get("AWS_DEFAULT_PROFILE") or ""
        self.explicit = bool(self.profile)
        self.profile = self.profile or "default"
        self.credentials_file = Path(
            environ.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials"
        ).expanduser()
        self.config_file = Path(
            environ.get("AWS_CONFIG_FILE") or home / ".aws" / "config"
        ).expanduser()
        self.description = f"profile {self.profile} ({self.credentials_file}, {self.config_file})"
        self._parts = parts
        self._resolved: CredentialSource | None = None

    async def configured(self) -> bool:
        """Whether the profile exists with something that yields credentials."""
        profiles = await self._load()
        if self.profile not in profiles:
            if self.explicit:
                raise AwsCredentialsError(
                    f"AWS_PROFILE={self.profile}: no such profile in {self.credentials_file} "
                    f"(section [{self.profile}]) or {self.config_file} (section "
                    f"[profile {self.profile}]); fix the name or the mounted files"
                )
            return False
        self._resolved = self._resolve(profiles, self.profile, depth=0)
        return self._resolved is not None

    async def fetch(self) -> AwsCredentials:
        if self._resolved is None and not await self.configured():
            raise AwsCredentialsError(f"{self.description}: the profile has no credentials")
        assert self._resolved is not None
        return await self._resolved.fetch()

    async def _load(self) -> dict[str, dict[str, str]]:
        return await trio.to_thread.run_sync(self._load_sync)

    def _load_sync(self) -> dict[str, dict[str, str]]:
        profiles: dict[str, dict[str, str]] = {}
        for path, is_config in ((self.config_file, True), (self.credentials_file, False)):
            if not path.is_file():
                continue
            parser = configparser.RawConfigParser(default_section="\x00none")
            try:
                parser.read(path, encoding="utf-8")
            except (OSError, configparser.Error) as exc:
                raise AwsCredentialsError(
                    f"{path}: cannot read it as an AWS shared config file: {exc}"
                ) from exc
            for section in parser.sections():
                name = section.strip()
                if is_config:
                    if name.startswith("profile "):
                        name = name.removeprefix("profile ").strip()
                    elif name != "default":
                        continue  # sso-session, services, ... sections
                # The credentials file wins over the config file for the same key.
                profiles.setdefault(name, {}).update(
                    {k.lower(): v.strip() for k, v in parser.items(section)}
                )
        return profiles

    def _resolve(
        self, profiles: Mapping[str, Mapping[str, str]], name: str, *, depth: int
    ) -> CredentialSource | None:
        where = f"profile {name}"
        if depth > _MAX_ROLE_CHAIN:
            raise AwsCredentialsError(
                f"{where}: source_profile chains are longer than {_MAX_ROLE_CHAIN} (a loop?)"
            )
        values = profiles.get(name)
        if values is None:
            raise AwsCredentialsError(
                f"{where}: no such profile (named by source_profile); fix the shared files"
            )
        role_arn = values.get("role_arn", "")
        if role_arn:
            return self._role(profiles, name, values, role_arn, depth=depth)
        key = values.get("aws_access_key_id", "")
        secret = values.get("aws_secret_access_key", "")
        if key and secret:
            return StaticSource(
                AwsCredentials(key, secret, values.get("aws_session_token", ""), source=where),
                where,
            )
        if key or secret:
            raise AwsCredentialsError(
                f"{where}: aws_access_key_id and aws_secret_access_key must both be set"
            )
        unsupported = [
            k for k in ("sso_session", "sso_start_url", "credential_process") if k in values
        ]
        if unsupported:
            raise AwsCredentialsError(
                f"{where}: {unsupported[0]} is not supported by trio-ccm; use static keys, "
                "role_arn with web_identity_token_file (IRSA), or the instance role"
            )
        if depth > 0:
            raise AwsCredentialsError(f"{where}: the profile has no credentials (source_profile)")
        return None

    def _role(
        self,
        profiles: Mapping[str, Mapping[str, str]],
        name: str,
        values: Mapping[str, str],
        role_arn: str,
        *,
        depth: int,
    ) -> CredentialSource:
        where = f"profile {name}"
        session = values.get("role_session_name", "")
        if "web_identity_token_file" in values:
            return WebIdentitySource(
                role_arn=role_arn,
                token_file=values["web_identity_token_file"],
                session_name=session,
                sts=self._parts.sts,
                now=self._parts.now,
            )
        base: CredentialSource | None
        if "source_profile" in values:
            source = values["source_profile"]
            if source == name:  # a profile whose keys assume its own role
                stripped = {k: v for k, v in values.items() if k != "role_arn"}
                base = self._resolve({**profiles, name: stripped}, name, depth=depth + 1)
            else:
                base = self._resolve(profiles, source, depth=depth + 1)
        elif "credential_source" in values:
            kind = values["credential_source"]
            if kind == "Environment":
                base = EnvironmentSource.from_environ(self._parts.environ)
            elif kind == "Ec2InstanceMetadata":
                base = ImdsSource(self._parts.imds)
            elif kind == "EcsContainer":
                base = ContainerSource.from_environ(self._parts.environ, http=self._parts.http)
            else:
                raise AwsCredentialsError(
                    f"{where}: credential_source={kind} is not one of Environment, "
                    "Ec2InstanceMetadata, EcsContainer"
                )
        else:
            raise AwsCredentialsError(
                f"{where}: role_arn needs source_profile, credential_source or "
                "web_identity_token_file"
            )
        if base is None:
            raise AwsCredentialsError(f"{where}: the role's source has no credentials")
        return AssumeRoleSource(
            base=RefreshingCredentials(base, now=self._parts.now),
            role_arn=role_arn,
            sts=self._parts.sts,
            session_name=session,
            external_id=values.get("external_id", ""),
            now=self._parts.now,
        )


class CredentialChain:
    """The SDKs' chain (module docstring): the first configured source, chosen once."""

    description = "the default credential chain"

    def __init__(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        sts: Sts,
        http: httpx.AsyncClient,
        imds: Imds,
        now: Callable[[], dt.datetime] = utc_now,
    ) -> None:
        self._parts = ChainParts(
            dict(os.environ if environ is None else environ), sts, http, imds, now
        )
        self._chosen: CredentialSource | None = None

    async def choose(self) -> CredentialSource:
        """The source the chain uses (looked for on the first call only)."""
        if self._chosen is None:
            self._chosen = await self._find()
            self.description = self._chosen.description
            log.info("aws.credentials", source=self._chosen.description)
        return self._chosen

    async def fetch(self) -> AwsCredentials:
        return await (await self.choose()).fetch()

    async def _find(self) -> CredentialSource:
        parts = self._parts
        environ = parts.environ
        env = EnvironmentSource.from_environ(environ)
        if env is not None:
            return env
        profile = ProfileSource(parts)
        if await profile.configured():
            return profile
        role_arn = environ.get("AWS_ROLE_ARN", "")
        token_file = environ.get("AWS_WEB_IDENTITY_TOKEN_FILE", "")
        if role_arn or token_file:
            if not role_arn or not token_file:
                missing = "AWS_ROLE_ARN" if not role_arn else "AWS_WEB_IDENTITY_TOKEN_FILE"
                raise AwsCredentialsError(
                    f"web identity (IRSA): {missing} is empty while the other is set; check "
                    "the eks.amazonaws.com/role-arn annotation of the service account"
                )
            return WebIdentitySource(
                role_arn=role_arn,
                token_file=token_file,
                session_name=environ.get("AWS_ROLE_SESSION_NAME", ""),
                sts=parts.sts,
                now=parts.now,
            )
        container = ContainerSource.from_environ(environ, http=parts.http)
        if container is not None:
            return container
        if parts.imds.disabled:
            raise AwsCredentialsError(
                "no AWS credentials: none in the environment (AWS_ACCESS_KEY_ID), in a "
                "profile, from IRSA (AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE) or a "
                "container endpoint, and the instance metadata service is disabled "
                "(AWS_EC2_METADATA_DISABLED)"
            )
        return ImdsSource(parts.imds)


class RefreshingCredentials:
    """A source's credentials, cached and shared, refreshed `refresh_before_s` before they
    expire (see the module docstring). `invalidate()` forces the next `get()` to refresh."""

    def __init__(
        self,
        source: CredentialSource,
        *,
        now: Callable[[], dt.datetime] = utc_now,
        refresh_before_s: float = REFRESH_BEFORE_S,
    ) -> None:
        self.source = source
        self._now = now
        self._margin = dt.timedelta(seconds=refresh_before_s)
        self._lock = trio.Lock()
        self._current: AwsCredentials | None = None
        self._stale = False
        self._fetches = 0

    @property
    def description(self) -> str:
        return self.source.description

    @property
    def fetches(self) -> int:
        """How many times the source was asked (statistics, tests)."""
        return self._fetches

    def invalidate(self) -> None:
        self._stale = True

    def _fresh(self, credentials: AwsCredentials) -> bool:
        if self._stale:
            return False
        return credentials.expiration is None or self._now() < credentials.expiration - self._margin

    async def get(self) -> AwsCredentials:
        current = self._current
        if current is not None and self._fresh(current):
            return current
        seen = self._fetches
        async with self._lock:
            current = self._current
            if current is not None and (self._fetches != seen or self._fresh(current)):
                return current  # refreshed by the caller we waited for
            try:
                fetched = await self.source.fetch()
            except Exception as exc:
                usable = (
                    current is not None
                    and not self._stale
                    and (current.expiration is None or self._now() < current.expiration)
                )
                if not usable:
                    raise
                assert current is not None
                log.warning(
                    "aws.credentials-refresh-failed",
                    source=self.source.description,
                    expires=current.expiration.isoformat() if current.expiration else None,
                    error=str(exc),
                )
                return current
            self._fetches += 1
            self._current = fetched
            self._stale = False
            log.debug(
                "aws.credentials-refreshed",
                source=fetched.source or self.source.description,
                expires=fetched.expiration.isoformat() if fetched.expiration else None,
            )
            return fetched
