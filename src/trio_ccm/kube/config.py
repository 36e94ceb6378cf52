"""Where the API server is and who we are to it: kubeconfig, in-cluster, --kubeconfig/--master.

`load_config` follows the Go CCM's flags (clientcmd.BuildConfigFromFlags); `load_kubeconfig`
and `load_incluster` are its two sources. The result is a `ConnectionConfig`: the server URL,
how to trust it, and a `Credentials` object. The client asks the credentials for a
`ClientIdentity` before it connects, builds a TLS context with `ConnectionConfig.ssl_context`,
and calls `Credentials.invalidate()` after a 401 so that the next `get()` refreshes (re-reads a
rotated token file, re-runs an exec plugin).

Deliberate differences from kubectl/client-go, each failing loudly rather than half-working:
proxy-url, auth-provider, basic auth and impersonation are refused with a ConfigError, and exec
plugins never run interactively. Credentials are also used for http:// servers (client-go drops
them there); the emulator in tests relies on that.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import trio
import yaml

from trio_ccm.errors import ConfigError
from trio_ccm.logs import get_logger

__all__ = [
    "ClientIdentity",
    "ConnectionConfig",
    "Credentials",
    "ExecCredentials",
    "StaticCredentials",
    "TokenFileCredentials",
    "load_config",
    "load_incluster",
    "load_kubeconfig",
]

_INCLUSTER_ROOT = "/var/run/secrets/kubernetes.io/serviceaccount"
_EXEC_V1 = "client.authentication.k8s.io/v1"
_EXEC_V1BETA1 = "client.authentication.k8s.io/v1beta1"
_EXEC_V1ALPHA1 = "client.authentication.k8s.io/v1alpha1"
_EXEC_CLUSTER_EXTENSION = "client.authentication.k8s.io/exec"
# An exec credential is re-run once less than max(30 s, 10 % of its lifetime) remains, but never
# before half of its lifetime has passed, so that a plugin minting 20 s tokens is not re-run on
# every request (kubernetes-asyncio's fixed 5 min skew does exactly that).
_EXEC_MIN_MARGIN_S = 30.0
_EXEC_MARGIN_FRACTION = 0.1
_STDERR_LIMIT = 1000
_PEM_CERTIFICATE = re.compile(
    rb"-----BEGIN CERTIFICATE-----\r?\n.+?\r?\n-----END CERTIFICATE-----", re.DOTALL
)


# --------------------------------------------------------------------------------------------
# Identity and credentials


@dataclass(frozen=True, repr=False)
class ClientIdentity:
    """What to present to the API server right now."""

    token: str | None = None
    cert_pem: bytes | None = None  # client certificate chain (PEM)
    key_pem: bytes | None = None  # its private key (PEM)
    expires_at: datetime | None = None  # when the exec plugin said it expires (UTC)

    def __repr__(self) -> str:
        # Never show the token or the key, not even in a traceback's locals.
        shown = [
            f"token={'<set>' if self.token is not None else None}",
            f"cert={'<set>' if self.cert_pem is not None else None}",
            f"key={'<set>' if self.key_pem is not None else None}",
            f"expires_at={self.expires_at!r}",
        ]
        return f"ClientIdentity({', '.join(shown)})"


class Credentials:
    """No credentials. Subclasses return a token and/or a client certificate."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    async def get(self) -> ClientIdentity:
        """The identity to use for the next connection or request."""
        return ClientIdentity()

    def invalidate(self) -> None:
        """The server answered 401: the next `get()` must refresh, not use a cached value."""


class StaticCredentials(Credentials):
    """A fixed token and/or client certificate, as written in a kubeconfig."""

    def __init__(
        self,
        token: str | None = None,
        cert_pem: bytes | None = None,
        key_pem: bytes | None = None,
    ) -> None:
        self._identity = ClientIdentity(token=token, cert_pem=cert_pem, key_pem=key_pem)

    def __repr__(self) -> str:
        return f"StaticCredentials({self._identity!r})"

    async def get(self) -> ClientIdentity:
        return self._identity


class TokenFileCredentials(Credentials):
    """A bearer token read from a file, re-read when `reread_after_s` old or after a 401.

    Service-account tokens are rotated by the kubelet, so the file is the truth, not what we
    read an hour ago. If a periodic re-read fails, the last token is kept (the kubelet swaps the
    file atomically, so this is rare); after `invalidate()` a failed re-read is an error.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        reread_after_s: float = 60.0,
        *,
        cert_pem: bytes | None = None,
        key_pem: bytes | None = None,
        where: str | None = None,
    ) -> None:
        self._path = Path(path)
        self._reread_after_s = reread_after_s
        self._cert_pem = cert_pem
        self._key_pem = key_pem
        self._where = where or f"token file {self._path}"
        self._identity: ClientIdentity | None = None
        self._stale = True
        self._read_at = 0.0
        self._clock: trio.abc.Clock | None = None

    def __repr__(self) -> str:
        return f"TokenFileCredentials({str(self._path)!r}, reread_after_s={self._reread_after_s})"

    async def get(self) -> ClientIdentity:
        clock = trio.lowlevel.current_clock()
        now = trio.current_time()
        if (
            self._identity is not None
            and not self._stale
            and self._clock is clock
            and now < self._read_at + self._reread_after_s
        ):
            return self._identity
        try:
            token = _read_token_file(self._path, self._where)
        except ConfigError as exc:
            if self._identity is None or self._stale:
                raise
            get_logger(__name__).warning(
                "token.reread-failed", path=str(self._path), error=str(exc)
            )
            return self._identity
        self._identity = ClientIdentity(token=token, cert_pem=self._cert_pem, key_pem=self._key_pem)
        self._stale = False
        self._read_at = now
        self._clock = clock
        return self._identity

    def invalidate(self) -> None:
        self._stale = True


def _utc_now() -> datetime:
    return datetime.now(UTC)


class ExecCredentials(Credentials):
    """Credentials from a client-go exec plugin (client.authentication.k8s.io v1 or v1beta1).

    The plugin runs with `environ` (default: this process's environment) plus `env`, and with
    KUBERNETES_EXEC_INFO describing `cluster` (the ExecCredential `spec.cluster`) when given.
    Its answer is cached until it nears `status.expirationTimestamp` (re-run once less than
    max(30 s, 10 % of its lifetime) remains, never before half of it has passed), for ever when
    it has none, or until `invalidate()`. Concurrent `get()` calls share one run. Plugins never
    run interactively: stdin is /dev/null and `spec.interactive` is false.
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        api_version: str = _EXEC_V1,
        cluster: Mapping[str, object] | None = None,
        install_hint: str | None = None,
        where: str | None = None,
        environ: Mapping[str, str] | None = None,
        now: Callable[[], datetime] = _utc_now,
    ) -> None:
        if api_version not in (_EXEC_V1, _EXEC_V1BETA1):
            raise ConfigError(
                f"{where or 'exec plugin'}: apiVersion {api_version!r} is not supported; "
                f"use {_EXEC_V1!r}"
            )
        self._command = command
        self._args = tuple(args)
        self._env = dict(env or {})
        self._api_version = api_version
        self._cluster = dict(cluster) if cluster is not None else None
        self._install_hint = _printable(install_hint.strip()) if install_hint else None
        self._where = where or f"exec plugin {command!r}"
        self._environ = environ
        self._now = now
        self._lock = trio.Lock()
        self._identity: ClientIdentity | None = None
        self._runs = 0
        self._clock: trio.abc.Clock | None = None
        self._refresh_at: float | None = None
        self._refresh_at_wall: datetime | None = None

    def __repr__(self) -> str:
        return f"ExecCredentials({self._command!r}, api_version={self._api_version!r})"

    async def get(self) -> ClientIdentity:
        seen = self._runs
        async with self._lock:
            # A run that finished while we waited for the lock is as fresh as it gets.
            if self._identity is not None and (self._runs != seen or self._fresh()):
                return self._identity
            identity = await self._run()
            self._remember(identity)
            return identity

    def invalidate(self) -> None:
        self._identity = None

    def _fresh(self) -> bool:
        if self._clock is not trio.lowlevel.current_clock():
            return False  # cached in another trio.run: its deadlines mean nothing here
        if self._refresh_at is None or self._refresh_at_wall is None:
            return True
        # Both clocks: Trio's (MockClock-friendly, immune to wall-clock steps) and the wall
        # clock (which keeps running while a suspended machine's monotonic clock does not).
        return trio.current_time() < self._refresh_at and self._now() < self._refresh_at_wall

    def _remember(self, identity: ClientIdentity) -> None:
        self._identity = identity
        self._runs += 1
        self._clock = trio.lowlevel.current_clock()
        if identity.expires_at is None:
            self._refresh_at = self._refresh_at_wall = None
            return
        now_wall = self._now()
        lifetime_s = (identity.expires_at - now_wall).total_seconds()
        margin_s = min(max(_EXEC_MIN_MARGIN_S, _EXEC_MARGIN_FRACTION * lifetime_s), lifetime_s / 2)
        usable_s = max(lifetime_s - margin_s, 0.0)
        self._refresh_at = trio.current_time() + usable_s
        self._refresh_at_wall = now_wall + timedelta(seconds=usable_s)

    def _hint(self) -> str:
        return f"; {self._install_hint}" if self._install_hint else ""

    async def _run(self) -> ClientIdentity:
        base = os.environ if self._environ is None else self._environ
        spec: dict[str, object] = {"interactive": False}
        if self._cluster is not None:
            spec["cluster"] = self._cluster
        info = {"apiVersion": self._api_version, "kind": "ExecCredential", "spec": spec}
        env = {**base, **self._env, "KUBERNETES_EXEC_INFO": json.dumps(info)}
        # Look the command up on the PATH of our own environment, as client-go does.
        executable = shutil.which(self._command, path=base.get("PATH", os.defpath))
        if executable is None:
            raise ConfigError(
                f"{self._where}: exec plugin {self._command!r} not found "
                f"(not an executable file, nor on PATH){self._hint()}"
            )
        try:
            result = await trio.run_process(
                [executable, *self._args],
                stdin=subprocess.DEVNULL,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env=env,
            )
        except OSError as exc:
            raise ConfigError(
                f"{self._where}: cannot run exec plugin {self._command!r}: "
                f"{exc.strerror or exc}{self._hint()}"
            ) from exc
        stderr = _trimmed(result.stderr)
        if result.returncode != 0:
            how = (
                f"was killed by signal {-result.returncode}"
                if result.returncode < 0
                else f"exited with status {result.returncode}"
            )
            raise ConfigError(
                f"{self._where}: exec plugin {self._command!r} {how}; "
                f"stderr: {stderr or '(empty)'}{self._hint()}"
            )
        identity = self._parse(result.stdout, stderr)
        get_logger(__name__).debug(
            "exec_plugin.ran", command=self._command, expires_at=identity.expires_at
        )
        return identity

    def _parse(self, stdout: bytes, stderr: str) -> ClientIdentity:
        # Never quote stdout: it is where the secrets are.
        def fail(problem: str) -> ConfigError:
            tail = f"; stderr: {stderr}" if stderr else ""
            return ConfigError(f"{self._where}: exec plugin {self._command!r} {problem}{tail}")

        try:
            doc = json.loads(stdout)
        except ValueError:
            problem = (
                f"printed {len(stdout)} bytes that are not JSON; it must print an ExecCredential"
            )
            raise fail(problem) from None
        if not isinstance(doc, dict):
            raise fail("printed JSON that is not an object; it must print an ExecCredential")
        if doc.get("kind") != "ExecCredential":
            raise fail(f"printed kind {doc.get('kind')!r}, expected 'ExecCredential'")
        if doc.get("apiVersion") != self._api_version:
            raise fail(
                f"printed apiVersion {doc.get('apiVersion')!r}, but the kubeconfig asks for "
                f"{self._api_version!r}"
            )
        status = doc.get("status")
        if not isinstance(status, dict):
            raise fail("printed an ExecCredential without a status object")
        token = status.get("token") or None
        cert = status.get("clientCertificateData") or None
        key = status.get("clientKeyData") or None
        for name, value in (
            ("token", token),
            ("clientCertificateData", cert),
            ("clientKeyData", key),
        ):
            if value is not None and not isinstance(value, str):
                raise fail(f"printed a status.{name} that is not a string")
        if (cert is None) != (key is None):
            raise fail("printed only one of status.clientCertificateData and status.clientKeyData")
        if token is None and cert is None:
            raise fail(
                "printed an ExecCredential with neither status.token nor "
                "status.clientCertificateData/clientKeyData"
            )
        expires_at: datetime | None = None
        raw_expiry = status.get("expirationTimestamp")
        if raw_expiry is not None:
            expires_at = _parse_time(raw_expiry)
            if expires_at is None:
                raise fail(
                    f"printed status.expirationTimestamp {raw_expiry!r}, not an RFC 3339 time"
                )
        return ClientIdentity(
            token=token,
            cert_pem=cert.encode() if cert is not None else None,
            key_pem=key.encode() if key is not None else None,
            expires_at=expires_at,
        )


def _parse_time(raw: object) -> datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.astimezone(UTC)


def _printable(text: str) -> str:
    """Replace control characters (terminal escapes among them) with '?'; keep newlines, tabs."""
    return "".join(c if c.isprintable() or c in "\n\t" else "?" for c in text)


def _trimmed(stderr: bytes) -> str:
    text = _printable(stderr.decode("utf-8", errors="replace").strip())
    if len(text) > _STDERR_LIMIT:
        text = "..." + text[-_STDERR_LIMIT:]
    return text


def _read_token_file(path: Path, where: str) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror or exc}") from exc
    try:
        token = raw.decode().strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: {path} is not UTF-8 text") from None
    if not token:
        raise ConfigError(f"{where}: {path} is empty; it must hold a bearer token")
    return token


# --------------------------------------------------------------------------------------------
# Connection config and TLS


class _ServerNameContext(ssl.SSLContext):
    """Sends and verifies `server_name` instead of the URL's host (kubeconfig tls-server-name)."""

    server_name: str

    def wrap_socket(
        self,
        sock: socket.socket,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        return super().wrap_socket(
            sock,
            server_side,
            do_handshake_on_connect,
            suppress_ragged_eofs,
            self.server_name,
            session,
        )

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return super().wrap_bio(incoming, outgoing, server_side, self.server_name, session)


@dataclass(frozen=True)
class ConnectionConfig:
    """How to reach one API server: URL, trust, credentials, default namespace."""

    server: str  # "https://10.0.0.1:6443" (no trailing slash)
    credentials: Credentials
    ca_pem: bytes | None = field(default=None, repr=False)  # None: system trust store
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    namespace: str = "default"
    source: str = ""  # "kubeconfig /p (context ctx)" or "in-cluster"

    def ssl_context(self, identity: ClientIdentity) -> ssl.SSLContext | None:
        """A fresh client TLS context for `identity`; None for an http:// server.

        The CA is loaded from memory. A client certificate and key are written to files
        (mode 0600) in a private temporary directory (0700) only for `load_cert_chain`, and
        removed right after. With `tls_server_name`, that name is sent (SNI) and verified
        whatever host the caller connects to. TLS >= 1.2, ALPN http/1.1.
        """
        if urllib.parse.urlsplit(self.server).scheme != "https":
            return None
        context: ssl.SSLContext
        if self.tls_server_name:
            named = _ServerNameContext(ssl.PROTOCOL_TLS_CLIENT)
            named.server_name = self.tls_server_name
            context = named
        else:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # As Go does: any certificate in the CA bundle is a trust anchor, so an intermediate CA
        # in certificate-authority-data works. No VERIFY_X509_STRICT (Python 3.13's default):
        # Go does not apply it, and kubeadm-era CAs without the extensions it wants would fail.
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        if self.insecure_skip_tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif self.ca_pem is not None:
            cadata = _pem_certificates(self.ca_pem)
            try:
                if cadata is None:
                    raise ssl.SSLError("no PEM certificate")  # noqa: TRY301 (one error path)
                context.load_verify_locations(cadata=cadata)
            except ssl.SSLError as exc:
                raise ConfigError(
                    f"{self.source}: the certificate authority is not a valid PEM certificate"
                ) from exc
        else:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        context.set_alpn_protocols(["http/1.1"])
        if (identity.cert_pem is None) != (identity.key_pem is None):
            raise ConfigError(f"{self.source}: a client certificate needs both a cert and a key")
        if identity.cert_pem is not None and identity.key_pem is not None:
            _load_client_certificate(context, identity.cert_pem, identity.key_pem, self.source)
        return context


def _no_password() -> bytes:
    # An encrypted key would otherwise make OpenSSL prompt on the terminal.
    return b""


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _load_client_certificate(
    context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes, source: str
) -> None:
    # ssl can only load a certificate chain from files; keep them private and short-lived.
    with tempfile.TemporaryDirectory(prefix="trio-ccm-tls-") as directory:
        cert_path = os.path.join(directory, "client.crt")
        key_path = os.path.join(directory, "client.key")
        _write_private(cert_path, cert_pem)
        _write_private(key_path, key_pem)
        try:
            context.load_cert_chain(cert_path, key_path, password=_no_password)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"{source}: the client certificate and key could not be loaded "
                f"({exc.reason or 'invalid PEM'}); check that they are PEM, that the key "
                "matches the certificate and that the key is not encrypted"
            ) from None


def _pem_certificates(data: bytes) -> str | None:
    """The PEM certificate blocks in `data` as text for `cadata`, or None if there are none."""
    blocks = _PEM_CERTIFICATE.findall(data)
    if not blocks:
        return None
    return "\n".join(block.decode("ascii", errors="replace") for block in blocks) + "\n"


def _check_ca(data: bytes, where: str) -> bytes:
    cadata = _pem_certificates(data)
    try:
        if cadata is None:
            raise ssl.SSLError("no PEM certificate")  # noqa: TRY301 (one error path)
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=cadata)
    except ssl.SSLError:
        raise ConfigError(
            f"{where}: does not hold a PEM certificate (-----BEGIN CERTIFICATE-----)"
        ) from None
    return data


# DNS labels (underscores too, as Go's URL parser and some private zones allow).
_HOST_RE = re.compile(
    r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*"
)
_URL_EXAMPLE = "write an absolute URL, e.g. https://10.0.0.1:6443"


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return _HOST_RE.fullmatch(host) is not None
    return True


def _normalize_server(raw: str, where: str) -> str:
    text = raw.strip()
    if any(c.isspace() for c in text):
        raise ConfigError(f"{where}: {raw!r} is not a URL (it contains spaces); {_URL_EXAMPLE}")
    if "://" not in text:
        if ":/" in text:  # a scheme typed wrong ("htp:/x"), not a bare host:port
            raise ConfigError(f"{where}: {raw!r} is not an absolute URL; {_URL_EXAMPLE}")
        text = f"https://{text}"  # client-go's DefaultServerURL: a bare host:port means https
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        raise ConfigError(f"{where}: {raw!r} is not a valid URL; {_URL_EXAMPLE}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: {raw!r} is not an http:// or https:// URL; {_URL_EXAMPLE}")
    if not _valid_host(parts.hostname):
        raise ConfigError(
            f"{where}: {raw!r}: {parts.hostname!r} is not a host name or IP address; "
            + _URL_EXAMPLE
        )
    path = parts.path.rstrip("/")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


# --------------------------------------------------------------------------------------------
# Kubeconfig


@dataclass(frozen=True)
class _Entry:
    """One named cluster, user or context stanza, and the file that defined it."""

    kind: str  # "clusters" | "users" | "contexts"
    name: str
    body: Mapping[str, object]
    path: Path
    index: int

    def where(self, key: str = "") -> str:
        inner = self.kind[:-1]
        location = f"{self.kind}[{self.index}].{inner}" + (f".{key}" if key else "")
        return f"kubeconfig {self.path}: {location} ({inner} {self.name!r})"

    def string(self, key: str) -> str | None:
        value = self.body.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise ConfigError(f"{self.where(key)}: expected a string, got {_kind_of(value)}")
        return value

    def boolean(self, key: str) -> bool:
        value = self.body.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise ConfigError(f"{self.where(key)}: expected true or false, got {_kind_of(value)}")
        return value

    def file_path(self, key: str) -> Path | None:
        """A path field, resolved against the directory of the file that set it."""
        value = self.string(key)
        if value is None:
            return None
        return self.path.parent / value

    def read(self, key: str) -> bytes | None:
        path = self.file_path(key)
        if path is None:
            return None
        try:
            return path.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"{self.where(key)}: cannot read {path}: {exc.strerror or exc}"
            ) from exc

    def base64(self, key: str) -> bytes | None:
        value = self.string(key)
        if value is None:
            return None
        try:
            # Go's base64 decoder skips newlines; wrapped values are common in hand edits.
            return base64.b64decode("".join(value.split()), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"{self.where(key)}: not valid base64") from None

    def data_or_file(self, key: str) -> bytes | None:
        """`<key>-data` (base64) wins over the file `<key>`, as in client-go."""
        data = self.base64(f"{key}-data")
        return data if data is not None else self.read(key)


def _kind_of(value: object) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "a map"}
    return names.get(type(value), type(value).__name__)


@dataclass
class _Kubeconfig:
    """Files merged as kubectl merges $KUBECONFIG: the first to set a name or value wins."""

    paths: list[Path]
    clusters: dict[str, _Entry] = field(default_factory=dict)
    users: dict[str, _Entry] = field(default_factory=dict)
    contexts: dict[str, _Entry] = field(default_factory=dict)
    current_context: str | None = None

    def describe(self) -> str:
        if len(self.paths) == 1:
            return f"kubeconfig {self.paths[0]}"
        return f"kubeconfig {os.pathsep.join(str(p) for p in self.paths)}"

    def add(self, path: Path, doc: Mapping[str, object]) -> None:
        self.paths.append(path)
        for kind, known in (
            ("clusters", self.clusters),
            ("users", self.users),
            ("contexts", self.contexts),
        ):
            for entry in _entries(doc, kind, path):
                known.setdefault(entry.name, entry)
        current = doc.get("current-context")
        if current is not None and not isinstance(current, str):
            raise ConfigError(f"kubeconfig {path}: current-context: expected a string")
        if current and self.current_context is None:
            self.current_context = current


def _entries(doc: Mapping[str, object], kind: str, path: Path) -> list[_Entry]:
    items = doc.get(kind)
    if items is None:
        return []
    if not isinstance(items, list):
        raise ConfigError(f"kubeconfig {path}: {kind}: expected a list, got {_kind_of(items)}")
    inner = kind[:-1]
    found: list[_Entry] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ConfigError(f"kubeconfig {path}: {kind}[{index}]: expected a map")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"kubeconfig {path}: {kind}[{index}].name: missing or not a string")
        if name in seen:
            raise ConfigError(
                f"kubeconfig {path}: {kind}[{index}]: {inner} {name!r} is defined twice; remove one"
            )
        seen.add(name)
        body = item.get(inner)
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise ConfigError(f"kubeconfig {path}: {kind}[{index}].{inner}: expected a map")
        found.append(_Entry(kind, name, body, path, index))
    return found


def _read_kubeconfig(path: Path) -> Mapping[str, object]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"kubeconfig {path}: cannot read: {exc.strerror or exc}") from exc
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        # Never str(exc): PyYAML quotes the offending line, which may hold a token.
        problem = getattr(exc, "problem", None) or "syntax error"
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"kubeconfig {path}: not valid YAML: {problem}{at}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"kubeconfig {path}: expected a map at the top level (kind: Config)")
    return doc


def _kubeconfig_paths(
    path: str | os.PathLike[str] | None, environ: Mapping[str, str]
) -> tuple[list[Path], bool]:
    """The files to merge, and whether a missing one is an error."""
    if path is not None:
        return [Path(path).absolute()], True
    listed = environ.get("KUBECONFIG", "")
    if listed:
        unique = dict.fromkeys(p for p in listed.split(os.pathsep) if p)
        return [Path(p).absolute() for p in unique], False
    home = environ.get("HOME") or str(Path.home())
    return [Path(home, ".kube", "config")], True


def _load_files(paths: list[Path], explicit: bool) -> _Kubeconfig:
    merged = _Kubeconfig(paths=[])
    for path in paths:
        if not explicit and not path.exists():
            continue  # kubectl skips missing $KUBECONFIG entries
        merged.add(path, _read_kubeconfig(path))
    if not merged.paths:
        shown = os.pathsep.join(str(p) for p in paths)
        raise ConfigError(
            f"$KUBECONFIG={shown}: none of these files exist; fix $KUBECONFIG or pass a path"
        )
    return merged


@dataclass(frozen=True)
class _Cluster:
    server: str
    ca_pem: bytes | None
    insecure: bool
    tls_server_name: str | None
    exec_config: object  # the cluster's client.authentication.k8s.io/exec extension, or None


def _cluster(entry: _Entry, server_override: str | None) -> _Cluster:
    if entry.string("proxy-url") is not None:
        raise ConfigError(f"{entry.where('proxy-url')}: proxies are not supported; remove it")
    if server_override is not None:
        server = _normalize_server(server_override, "--master")
    else:
        raw = entry.string("server")
        if raw is None:
            raise ConfigError(f"{entry.where('server')}: missing; set the API server's URL")
        server = _normalize_server(raw, entry.where("server"))
    ca_key = (
        "certificate-authority-data"
        if entry.string("certificate-authority-data")
        else "certificate-authority"
    )
    ca = entry.data_or_file("certificate-authority")
    if ca is not None:
        ca = _check_ca(ca, entry.where(ca_key))
    insecure = entry.boolean("insecure-skip-tls-verify")
    if insecure and ca is not None:
        raise ConfigError(
            f"{entry.where()}: insecure-skip-tls-verify and {ca_key} are both set; "
            "remove one (kubectl refuses this too)"
        )
    # --master clears tls-server-name: it named the kubeconfig's server, not this one.
    tls_server_name = None if server_override is not None else entry.string("tls-server-name")
    return _Cluster(server, ca, insecure, tls_server_name, _exec_extension(entry))


def _exec_extension(entry: _Entry) -> object:
    extensions = entry.body.get("extensions")
    if extensions is None:
        return None
    if not isinstance(extensions, list):
        raise ConfigError(f"{entry.where('extensions')}: expected a list")
    for item in extensions:
        if isinstance(item, dict) and item.get("name") == _EXEC_CLUSTER_EXTENSION:
            return item.get("extension")
    return None


def _exec_cluster_info(cluster: _Cluster) -> dict[str, object]:
    """ExecCredential spec.cluster, as client-go fills it for provideClusterInfo."""
    info: dict[str, object] = {"server": cluster.server}
    if cluster.tls_server_name:
        info["tls-server-name"] = cluster.tls_server_name
    if cluster.insecure:
        info["insecure-skip-tls-verify"] = True
    if cluster.ca_pem is not None:
        info["certificate-authority-data"] = base64.b64encode(cluster.ca_pem).decode()
    if cluster.exec_config is not None:
        info["config"] = cluster.exec_config
    return info


_UNSUPPORTED_USER_FIELDS = {
    "username": "basic authentication is not supported; use a token or a client certificate",
    "password": "basic authentication is not supported; use a token or a client certificate",
    "as": "impersonation is not supported; use the impersonated identity's own credentials",
    "as-uid": "impersonation is not supported; use the impersonated identity's own credentials",
    "as-groups": "impersonation is not supported; use the impersonated identity's own credentials",
    "as-user-extra": (
        "impersonation is not supported; use the impersonated identity's own credentials"
    ),
}


def _credentials(
    entry: _Entry | None, cluster: _Cluster, environ: Mapping[str, str] | None
) -> Credentials:
    if entry is None:
        return Credentials()
    for unsupported, why in _UNSUPPORTED_USER_FIELDS.items():
        if entry.body.get(unsupported):
            raise ConfigError(f"{entry.where(unsupported)}: {why}")
    if entry.body.get("auth-provider"):
        raise ConfigError(
            f"{entry.where('auth-provider')}: auth-provider plugins were removed from client-go; "
            "use an exec plugin (e.g. gke-gcloud-auth-plugin, kubelogin) instead"
        )
    cert = entry.data_or_file("client-certificate")
    key = entry.data_or_file("client-key")
    if cert is not None and key is None:
        raise ConfigError(f"{entry.where('client-key')}: missing; client-certificate needs a key")
    if key is not None and cert is None:
        raise ConfigError(
            f"{entry.where('client-certificate')}: missing; client-key needs a certificate"
        )
    if cert is not None and b"-----BEGIN CERTIFICATE-----" not in cert:
        raise ConfigError(f"{entry.where('client-certificate')}: does not hold a PEM certificate")
    if key is not None and b"PRIVATE KEY-----" not in key:
        raise ConfigError(f"{entry.where('client-key')}: does not hold a PEM private key")
    token = entry.string("token")
    token_file = entry.file_path("tokenFile")
    if token_file is not None:
        # Read it now so that a wrong path fails at startup; tokenFile wins over token, as the
        # client-go transport's file token source does.
        _read_token_file(token_file, entry.where("tokenFile"))
        return TokenFileCredentials(
            token_file, cert_pem=cert, key_pem=key, where=entry.where("tokenFile")
        )
    if token is not None or cert is not None:
        # client-go skips the exec plugin when static credentials are present.
        return StaticCredentials(token=token, cert_pem=cert, key_pem=key)
    exec_config = entry.body.get("exec")
    if exec_config is None:
        return Credentials()
    return _exec_credentials(entry, exec_config, cluster, environ)


def _exec_credentials(
    entry: _Entry, raw: object, cluster: _Cluster, environ: Mapping[str, str] | None
) -> ExecCredentials:
    where = entry.where("exec")
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a map")

    def at(key: str) -> str:
        return entry.where(f"exec.{key}")

    api_version = raw.get("apiVersion")
    if api_version == _EXEC_V1ALPHA1:
        raise ConfigError(
            f"{at('apiVersion')}: {_EXEC_V1ALPHA1} is no longer supported (removed in "
            f"Kubernetes 1.24); use {_EXEC_V1} and update the plugin if needed"
        )
    if api_version not in (_EXEC_V1, _EXEC_V1BETA1):
        raise ConfigError(
            f"{at('apiVersion')}: {api_version!r} is not one of {_EXEC_V1}, {_EXEC_V1BETA1}"
        )
    command = raw.get("command")
    if not isinstance(command, str) or not command:
        raise ConfigError(f"{at('command')}: missing; name the plugin to run")
    if os.sep in command and not os.path.isabs(command):
        command = str(entry.path.parent / command)  # as client-go: relative to the kubeconfig
    args = raw.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{at('args')}: expected a list of strings")
    env: dict[str, str] = {}
    raw_env = raw.get("env") or []
    if not isinstance(raw_env, list):
        raise ConfigError(f"{at('env')}: expected a list of name/value maps")
    for index, item in enumerate(raw_env):
        name = item.get("name") if isinstance(item, dict) else None
        value = item.get("value", "") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise ConfigError(f"{at(f'env[{index}]')}: expected a map with string name and value")
        env[name] = value
    mode = raw.get("interactiveMode")
    if mode == "Always":
        raise ConfigError(
            f"{at('interactiveMode')}: Always needs a terminal, and trio-ccm never runs plugins "
            "interactively; use Never or IfAvailable with a plugin that can work unattended"
        )
    if mode not in (None, "", "Never", "IfAvailable"):
        raise ConfigError(f"{at('interactiveMode')}: {mode!r} is not Never, IfAvailable or Always")
    provide = raw.get("provideClusterInfo", False)
    if not isinstance(provide, bool):
        raise ConfigError(f"{at('provideClusterInfo')}: expected true or false")
    install_hint = raw.get("installHint")
    if install_hint is not None and not isinstance(install_hint, str):
        raise ConfigError(f"{at('installHint')}: expected a string")
    return ExecCredentials(
        command,
        args,
        env=env,
        api_version=api_version,
        cluster=_exec_cluster_info(cluster) if provide else None,
        install_hint=install_hint,
        where=where,
        environ=environ,
    )


def _from_kubeconfig(
    merged: _Kubeconfig,
    *,
    context: str | None,
    environ: Mapping[str, str] | None,
    server_override: str | None = None,
) -> ConnectionConfig:
    described = merged.describe()
    name = context or merged.current_context
    if not name:
        raise ConfigError(
            f"{described}: current-context is not set and no context was given; "
            "set current-context or choose a context"
        )
    chosen = merged.contexts.get(name)
    if chosen is None:
        known = ", ".join(sorted(merged.contexts)) or "none"
        origin = " (named by current-context)" if context is None else ""
        raise ConfigError(f"{described}: context {name!r}{origin} not found; known: {known}")
    cluster_name = chosen.string("cluster")
    if cluster_name is None:
        raise ConfigError(f"{chosen.where('cluster')}: missing; name one of the clusters")
    cluster_entry = merged.clusters.get(cluster_name)
    if cluster_entry is None:
        known = ", ".join(sorted(merged.clusters)) or "none"
        raise ConfigError(
            f"{chosen.where('cluster')}: cluster {cluster_name!r} not found in {described}; "
            f"known: {known}"
        )
    user_name = chosen.string("user")
    user_entry = None
    if user_name is not None:
        user_entry = merged.users.get(user_name)
        if user_entry is None:
            known = ", ".join(sorted(merged.users)) or "none"
            raise ConfigError(
                f"{chosen.where('user')}: user {user_name!r} not found in {described}; "
                f"known: {known}"
            )
    cluster = _cluster(cluster_entry, server_override)
    source = f"kubeconfig {chosen.path} (context {name})"
    if server_override is not None:
        source += f" with --master {cluster.server}"
    return ConnectionConfig(
        server=cluster.server,
        credentials=_credentials(user_entry, cluster, environ),
        ca_pem=cluster.ca_pem,
        insecure_skip_tls_verify=cluster.insecure,
        tls_server_name=cluster.tls_server_name,
        namespace=chosen.string("namespace") or "default",
        source=source,
    )


def load_kubeconfig(
    path: str | os.PathLike[str] | None = None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ConnectionConfig:
    """Load a kubeconfig as kubectl does.

    `path` None means $KUBECONFIG (files joined with os.pathsep, merged: the first file to
    define a name or current-context wins, missing files are skipped), else ~/.kube/config.
    `context` None means current-context. Relative paths are resolved against the file that
    holds them. `environ` (default os.environ) supplies KUBECONFIG, HOME and exec plugins'
    environment.
    """
    env = os.environ if environ is None else environ
    paths, explicit = _kubeconfig_paths(path, env)
    return _from_kubeconfig(_load_files(paths, explicit), context=context, environ=environ)


def load_incluster(
    *,
    environ: Mapping[str, str] | None = None,
    root: str | os.PathLike[str] = _INCLUSTER_ROOT,
) -> ConnectionConfig:
    """The pod's service account: KUBERNETES_SERVICE_HOST/_PORT, token (re-read), ca.crt."""
    env = os.environ if environ is None else environ
    host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
    port = env.get("KUBERNETES_SERVICE_PORT", "").strip()
    if not host or not port:
        raise ConfigError(
            "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be "
            "set, and the kubelet sets them in every pod: this process is not in a pod"
        )
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"in-cluster config: KUBERNETES_SERVICE_PORT={port!r} is not a port")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    directory = Path(root)
    token_path = directory / "token"
    _read_token_file(token_path, "in-cluster config: token")
    ca_path = directory / "ca.crt"
    try:
        ca = ca_path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"in-cluster config: ca.crt: cannot read {ca_path}: {exc.strerror or exc}; "
            "is a service account token mounted (automountServiceAccountToken)?"
        ) from exc
    namespace = env.get("POD_NAMESPACE", "").strip()
    if not namespace:
        try:
            namespace = (directory / "namespace").read_text().strip()
        except OSError:
            namespace = ""
    return ConnectionConfig(
        server=f"https://{host}:{port}",
        credentials=TokenFileCredentials(token_path, where="in-cluster config: token"),
        ca_pem=_check_ca(ca, f"in-cluster config: ca.crt {ca_path}"),
        namespace=namespace or "default",
        source="in-cluster",
    )


def load_config(
    *,
    kubeconfig: str | None,
    master: str | None,
    environ: Mapping[str, str] | None = None,
) -> ConnectionConfig:
    """The Go CCM's --kubeconfig/--master (clientcmd.BuildConfigFromFlags).

    Neither: in-cluster. --kubeconfig: that file only ($KUBECONFIG is not consulted), its
    current context, with --master replacing the server (and dropping tls-server-name).
    --master alone: that server, no credentials, the system trust store.
    """
    if not kubeconfig and not master:
        try:
            return load_incluster(environ=environ)
        except ConfigError as exc:
            raise ConfigError(
                f"neither --kubeconfig nor --master was given, so the in-cluster config was "
                f"tried and failed ({exc}); pass --kubeconfig when running outside a cluster"
            ) from exc
    if not kubeconfig:
        assert master is not None
        server = _normalize_server(master, "--master")
        return ConnectionConfig(
            server=server, credentials=Credentials(), source=f"--master {server}"
        )
    merged = _load_files([Path(kubeconfig).absolute()], explicit=True)
    return _from_kubeconfig(merged, context=None, environ=environ, server_override=master or None)
