"""The connection-config loader: kubeconfig (checked against the official Python loaders),
exec plugins, in-cluster, --kubeconfig/--master, and the TLS context it builds.

Exec-plugin tests run a real subprocess. MockClock's autojump would fire any pending deadline
while the plugin runs (the scheduler sees every task blocked), so they use `mock_clock`
(rate 0, no autojump) and move time with `mock_clock.jump()`.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os
import ssl
import stat
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
import trustme
import yaml

from trio_ccm.errors import ConfigError
from trio_ccm.kube.config import (
    ClientIdentity,
    ConnectionConfig,
    Credentials,
    ExecCredentials,
    StaticCredentials,
    TokenFileCredentials,
    load_config,
    load_incluster,
    load_kubeconfig,
)
from trio_ccm_testbed.apiserver import ApiServer, serve_apiserver

PLUGIN = Path(__file__).with_name("exec_plugin.py")
V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"
PATH_ONLY = {"PATH": os.environ.get("PATH", os.defpath)}


# --------------------------------------------------------------------------------------------
# Helpers


@dataclass(frozen=True)
class Pki:
    """A CA, a client certificate it issued, and a second unrelated key."""

    ca: trustme.CA
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    other_key_pem: bytes


@pytest.fixture(scope="module")
def pki() -> Pki:
    ca = trustme.CA()
    client = ca.issue_cert("client.example", common_name="trio-ccm-test-client")
    other = ca.issue_cert("other.example")
    return Pki(
        ca=ca,
        ca_pem=ca.cert_pem.bytes(),
        cert_pem=client.cert_chain_pems[0].bytes(),
        key_pem=client.private_key_pem.bytes(),
        other_key_pem=other.private_key_pem.bytes(),
    )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(
    *,
    clusters: Mapping[str, Mapping[str, object]] | None = None,
    users: Mapping[str, Mapping[str, object]] | None = None,
    contexts: Mapping[str, Mapping[str, object]] | None = None,
    current: str | None = None,
) -> dict[str, object]:
    doc: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in (clusters or {}).items()],
        "users": [{"name": n, "user": u} for n, u in (users or {}).items()],
        "contexts": [{"name": n, "context": c} for n, c in (contexts or {}).items()],
    }
    if current is not None:
        doc["current-context"] = current
    return doc


def single(
    cluster: Mapping[str, object], user: Mapping[str, object], **context: object
) -> dict[str, object]:
    """One cluster 'c', one user 'u', one current context 'ctx'."""
    return kubeconfig(
        clusters={"c": cluster},
        users={"u": user},
        contexts={"ctx": {"cluster": "c", "user": "u", **context}},
        current="ctx",
    )


def write(path: Path, content: dict[str, object] | bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, dict):
        content = yaml.safe_dump(content, sort_keys=False)
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


def plugin_exec(*args: str, api_version: str = V1, **extra: Any) -> dict[str, object]:
    """A kubeconfig `exec` stanza running tests/unit/kube/exec_plugin.py."""
    stanza: dict[str, object] = {
        "apiVersion": api_version,
        "command": sys.executable,
        "args": [str(PLUGIN), "--api-version", api_version, *args],
        "interactiveMode": "Never",
    }
    stanza.update(extra)
    return stanza


def runs(count_file: Path) -> int:
    return len(count_file.read_text().splitlines()) if count_file.exists() else 0


# --------------------------------------------------------------------------------------------
# Oracle: the official `kubernetes` loader and `kubernetes_asyncio` read the same corpus


@dataclass(frozen=True)
class Observed:
    """The fields every loader produces."""

    server: str
    ca_pem: bytes | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    token: str | None = None
    verify: bool = True
    tls_server_name: str | None = None


@dataclass(frozen=True)
class Case:
    files: list[Path]
    context: str | None
    expected: Observed


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def _observed_from(cfg: object) -> Observed:
    api_key: dict[str, str] = cfg.api_key  # type: ignore[attr-defined]
    token = api_key.get("authorization") or api_key.get("BearerToken")
    return Observed(
        server=cfg.host,  # type: ignore[attr-defined]
        ca_pem=_read(cfg.ssl_ca_cert),  # type: ignore[attr-defined]
        cert_pem=_read(cfg.cert_file),  # type: ignore[attr-defined]
        key_pem=_read(cfg.key_file),  # type: ignore[attr-defined]
        token=token.removeprefix("Bearer ") if token else None,
        verify=cfg.verify_ssl,  # type: ignore[attr-defined]
        tls_server_name=getattr(cfg, "tls_server_name", None),
    )


def sync_oracle(config_file: str, context: str | None) -> Observed:
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(
        config_file=config_file, context=context, client_configuration=cfg, persist_config=False
    )
    return _observed_from(cfg)


def asyncio_oracle(config_file: str, context: str | None) -> Observed:
    from kubernetes_asyncio import client, config

    async def load() -> object:
        cfg = client.Configuration()
        await config.load_kube_config(
            config_file=config_file,
            context=context,
            client_configuration=cfg,
            persist_config=False,
        )
        return cfg

    return _observed_from(asyncio.run(load()))


async def ours(case: Case) -> Observed:
    if len(case.files) == 1:
        config = load_kubeconfig(case.files[0], context=case.context)
    else:
        environ = {**PATH_ONLY, "KUBECONFIG": os.pathsep.join(map(str, case.files))}
        config = load_kubeconfig(context=case.context, environ=environ)
    identity = await config.credentials.get()
    return Observed(
        server=config.server,
        ca_pem=config.ca_pem,
        cert_pem=identity.cert_pem,
        key_pem=identity.key_pem,
        token=identity.token,
        verify=not config.insecure_skip_tls_verify,
        tls_server_name=config.tls_server_name,
    )


def case_inline_data(tmp: Path, pki: Pki) -> Case:
    cluster = {"server": "https://10.0.0.1:6443/", "certificate-authority-data": b64(pki.ca_pem)}
    user = {
        "client-certificate-data": b64(pki.cert_pem),
        "client-key-data": b64(pki.key_pem),
    }
    path = write(tmp / "config", single(cluster, user))
    expected = Observed("https://10.0.0.1:6443", pki.ca_pem, pki.cert_pem, pki.key_pem)
    return Case([path], None, expected)


def case_relative_files(tmp: Path, pki: Pki) -> Case:
    write(tmp / "conf" / "pki" / "ca.crt", pki.ca_pem)
    write(tmp / "conf" / "pki" / "client.crt", pki.cert_pem)
    write(tmp / "conf" / "pki" / "client.key", pki.key_pem)
    cluster = {"server": "https://api.example:6443", "certificate-authority": "pki/ca.crt"}
    user = {"client-certificate": "pki/client.crt", "client-key": "pki/client.key"}
    path = write(tmp / "conf" / "config", single(cluster, user))
    expected = Observed("https://api.example:6443", pki.ca_pem, pki.cert_pem, pki.key_pem)
    return Case([path], None, expected)


def case_token(tmp: Path, pki: Pki) -> Case:
    cluster = {"server": "https://10.0.0.2", "certificate-authority-data": b64(pki.ca_pem)}
    path = write(tmp / "config", single(cluster, {"token": "abc.def"}, namespace="kube-system"))
    return Case([path], None, Observed("https://10.0.0.2", pki.ca_pem, token="abc.def"))


def case_token_file(tmp: Path, pki: Pki) -> Case:
    # No trailing newline: the Python loaders send the file's bytes untrimmed (we trim).
    write(tmp / "secrets" / "token", "file-token-1")
    write(tmp / "ca.pem", pki.ca_pem)
    cluster = {"server": "https://10.0.0.3:443", "certificate-authority": "ca.pem"}
    path = write(tmp / "config", single(cluster, {"tokenFile": "secrets/token"}))
    return Case([path], None, Observed("https://10.0.0.3:443", pki.ca_pem, token="file-token-1"))


def case_other_context(tmp: Path, pki: Pki) -> Case:
    doc = kubeconfig(
        clusters={
            "ca": {"server": "https://a.example", "certificate-authority-data": b64(pki.ca_pem)},
            "cb": {"server": "https://b.example:8443", "insecure-skip-tls-verify": True},
        },
        users={"ua": {"token": "a-token"}, "ub": {"token": "b-token"}},
        contexts={
            "a": {"cluster": "ca", "user": "ua"},
            "b": {"cluster": "cb", "user": "ub", "namespace": "team-b"},
            "mixed": {"cluster": "ca", "user": "ub"},
        },
        current="a",
    )
    path = write(tmp / "config", doc)
    return Case([path], "b", Observed("https://b.example:8443", token="b-token", verify=False))


def case_merged(tmp: Path, pki: Pki) -> Case:
    # First file: current-context and the user. Second: the cluster (CA relative to *its*
    # directory), plus a same-named user and context that must lose to the first file's.
    # Only the first file sets current-context: the Python loaders let a later file override
    # it, kubectl (and we) do not; test_current_context_from_first_file_that_sets_it covers it.
    first = kubeconfig(
        users={"u": {"token": "first-wins"}},
        contexts={"main": {"cluster": "c", "user": "u"}},
        current="main",
    )
    write(tmp / "two" / "certs" / "ca.crt", pki.ca_pem)
    second = kubeconfig(
        clusters={
            "c": {"server": "https://merged.example", "certificate-authority": "certs/ca.crt"}
        },
        users={"u": {"token": "second-loses"}},
        contexts={"main": {"cluster": "nope", "user": "nope"}},
    )
    files = [write(tmp / "one" / "config", first), write(tmp / "two" / "config", second)]
    return Case(files, None, Observed("https://merged.example", pki.ca_pem, token="first-wins"))


def case_insecure(tmp: Path, pki: Pki) -> Case:
    cluster = {"server": "https://10.0.0.4:6443", "insecure-skip-tls-verify": True}
    path = write(tmp / "config", single(cluster, {"token": "insecure-token"}))
    return Case(
        [path], None, Observed("https://10.0.0.4:6443", token="insecure-token", verify=False)
    )


def case_tls_server_name(tmp: Path, pki: Pki) -> Case:
    cluster = {
        "server": "https://10.0.0.5:6443",
        "certificate-authority-data": b64(pki.ca_pem),
        "tls-server-name": "kubernetes.default.svc",
    }
    path = write(tmp / "config", single(cluster, {"token": "named"}))
    expected = Observed(
        "https://10.0.0.5:6443", pki.ca_pem, token="named", tls_server_name="kubernetes.default.svc"
    )
    return Case([path], None, expected)


def case_exec_v1_token(tmp: Path, pki: Pki) -> Case:
    # provideClusterInfo: kubernetes_asyncio ignores it, the sync loader sends its own shape of
    # spec.cluster; the token does not depend on it, so all three agree on what is compared.
    cluster = {"server": "https://10.0.0.6:6443", "certificate-authority-data": b64(pki.ca_pem)}
    user = {"exec": plugin_exec("--token", "exec-v1-token", provideClusterInfo=True)}
    path = write(tmp / "config", single(cluster, user))
    return Case([path], None, Observed("https://10.0.0.6:6443", pki.ca_pem, token="exec-v1-token"))


def case_exec_v1beta1_cert(tmp: Path, pki: Pki) -> Case:
    write(tmp / "out" / "client.crt", pki.cert_pem)
    write(tmp / "out" / "client.key", pki.key_pem)
    cluster = {"server": "https://10.0.0.7:6443", "certificate-authority-data": b64(pki.ca_pem)}
    args = ("--cert", str(tmp / "out" / "client.crt"), "--key", str(tmp / "out" / "client.key"))
    user = {"exec": plugin_exec(*args, api_version=V1BETA1)}
    path = write(tmp / "config", single(cluster, user))
    expected = Observed("https://10.0.0.7:6443", pki.ca_pem, pki.cert_pem, pki.key_pem)
    return Case([path], None, expected)


CORPUS = [
    pytest.param(case_inline_data, id="inline-data"),
    pytest.param(case_relative_files, id="relative-files"),
    pytest.param(case_token, id="token"),
    pytest.param(case_token_file, id="token-file"),
    pytest.param(case_other_context, id="other-context"),
    pytest.param(case_merged, id="merged-kubeconfig"),
    pytest.param(case_insecure, id="insecure"),
    pytest.param(case_tls_server_name, id="tls-server-name"),
    pytest.param(case_exec_v1_token, id="exec-v1-token"),
    pytest.param(case_exec_v1beta1_cert, id="exec-v1beta1-cert"),
]


@pytest.mark.parametrize("build", CORPUS)
@pytest.mark.parametrize(
    "oracle",
    [pytest.param(sync_oracle, id="kubernetes"), pytest.param(asyncio_oracle, id="asyncio")],
)
async def test_agrees_with_official_loaders(
    build: Callable[[Path, Pki], Case],
    oracle: Callable[[str, str | None], Observed],
    tmp_path: Path,
    pki: Pki,
) -> None:
    """Our loader and an official Python loader read the same kubeconfig to the same values."""
    case = build(tmp_path, pki)
    with trio.fail_after(60):
        mine = await ours(case)
        theirs = await trio.to_thread.run_sync(
            oracle, os.pathsep.join(map(str, case.files)), case.context
        )
    assert mine == case.expected
    assert theirs == case.expected


# --------------------------------------------------------------------------------------------
# Kubeconfig details the oracles do not settle


async def test_current_context_from_first_file_that_sets_it(tmp_path: Path) -> None:
    """With several $KUBECONFIG files, current-context comes from the first file that sets it."""
    clusters = {"c": {"server": "https://x.example"}}
    first = write(tmp_path / "1", kubeconfig(clusters=clusters))
    second = write(
        tmp_path / "2",
        kubeconfig(contexts={"b": {"cluster": "c", "namespace": "ns-b"}}, current="b"),
    )
    third = write(
        tmp_path / "3",
        kubeconfig(contexts={"c": {"cluster": "c", "namespace": "ns-c"}}, current="c"),
    )
    environ = {"KUBECONFIG": os.pathsep.join(map(str, [first, second, third]))}
    config = load_kubeconfig(environ=environ)
    assert (config.namespace, config.source) == ("ns-b", f"kubeconfig {second} (context b)")


async def test_relative_paths_resolve_against_the_defining_file(tmp_path: Path, pki: Pki) -> None:
    """A user defined in a second $KUBECONFIG file reads its files relative to that file."""
    write(tmp_path / "b" / "tok", "token-from-b\n")
    first = kubeconfig(
        clusters={"c": {"server": "https://x.example"}},
        contexts={"ctx": {"cluster": "c", "user": "u"}},
        current="ctx",
    )
    second = kubeconfig(users={"u": {"tokenFile": "tok"}})
    files = [write(tmp_path / "a" / "config", first), write(tmp_path / "b" / "config", second)]
    config = load_kubeconfig(environ={"KUBECONFIG": os.pathsep.join(map(str, files))})
    assert isinstance(config.credentials, TokenFileCredentials)
    assert (await config.credentials.get()).token == "token-from-b"


async def test_missing_kubeconfig_entries_are_skipped(tmp_path: Path) -> None:
    """Files listed in $KUBECONFIG that do not exist are skipped, as kubectl does."""
    real = write(tmp_path / "real", single({"server": "https://x.example"}, {"token": "t"}))
    listed = os.pathsep.join([str(tmp_path / "missing"), "", str(real)])
    config = load_kubeconfig(environ={"KUBECONFIG": listed})
    assert config.server == "https://x.example"


async def test_default_path_is_home_kube_config(tmp_path: Path) -> None:
    """Without a path or $KUBECONFIG, the loader reads $HOME/.kube/config."""
    write(tmp_path / ".kube" / "config", single({"server": "https://home.example"}, {}))
    config = load_kubeconfig(environ={"HOME": str(tmp_path)})
    assert config.server == "https://home.example"
    assert type(config.credentials) is Credentials


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        pytest.param({}, ClientIdentity(), id="no-credentials"),
        pytest.param({"token": "t"}, ClientIdentity(token="t"), id="token"),
        pytest.param(
            {"token": "static", "exec": plugin_exec("--token", "from-exec")},
            ClientIdentity(token="static"),
            id="static-token-wins-over-exec",
        ),
    ],
)
async def test_credentials_choice(
    user: dict[str, object], expected: ClientIdentity, tmp_path: Path
) -> None:
    """Static credentials win over an exec plugin, as in client-go; no user means none."""
    path = write(tmp_path / "config", single({"server": "https://x.example"}, user))
    assert await load_kubeconfig(path).credentials.get() == expected


async def test_token_file_wins_over_token_and_is_trimmed(tmp_path: Path) -> None:
    """tokenFile takes precedence over token (client-go's transport) and loses its newline."""
    write(tmp_path / "tok", "from-file\n")
    user = {"token": "inline", "tokenFile": str(tmp_path / "tok")}
    path = write(tmp_path / "config", single({"server": "https://x.example"}, user))
    assert (await load_kubeconfig(path).credentials.get()).token == "from-file"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("https://h.example:6443/", "https://h.example:6443", id="trailing-slash"),
        pytest.param("10.0.0.1:6443", "https://10.0.0.1:6443", id="bare-host-port"),
        pytest.param("http://127.0.0.1:8080", "http://127.0.0.1:8080", id="http"),
        pytest.param("https://[fd00::1]:6443", "https://[fd00::1]:6443", id="ipv6"),
        pytest.param(
            "https://rancher.example/k8s/c-1/", "https://rancher.example/k8s/c-1", id="path"
        ),
    ],
)
async def test_server_url_normalized(raw: str, expected: str, tmp_path: Path) -> None:
    """The server URL loses its trailing slash and a bare host:port means https."""
    path = write(tmp_path / "config", single({"server": raw}, {}))
    assert load_kubeconfig(path).server == expected


async def test_identity_repr_hides_secrets() -> None:
    """A ClientIdentity's repr says which secrets are set without showing them."""
    shown = repr(ClientIdentity(token="s3cret-token", key_pem=b"s3cret-key"))
    assert "s3cret" not in shown
    assert "token=<set>" in shown


# --------------------------------------------------------------------------------------------
# Load-time errors


BASE_CLUSTER = {"server": "https://x.example"}
ERRORS = [
    pytest.param(
        single(BASE_CLUSTER, {}),
        "nope",
        r"{path}: context 'nope' not found; known: ctx",
        id="missing-context",
    ),
    pytest.param(
        kubeconfig(clusters={"c": BASE_CLUSTER}, contexts={"ctx": {"cluster": "c"}}),
        None,
        r"{path}: current-context is not set and no context was given",
        id="no-current-context",
    ),
    pytest.param(
        kubeconfig(
            clusters={"c": BASE_CLUSTER}, contexts={"ctx": {"cluster": "ghost"}}, current="ctx"
        ),
        None,
        r"{path}: contexts\[0\]\.context\.cluster \(context 'ctx'\): cluster 'ghost' not found in "
        r"kubeconfig {path}; known: c",
        id="unknown-cluster",
    ),
    pytest.param(
        kubeconfig(
            clusters={"c": BASE_CLUSTER},
            contexts={"ctx": {"cluster": "c", "user": "ghost"}},
            current="ctx",
        ),
        None,
        r"{path}: contexts\[0\]\.context\.user \(context 'ctx'\): user 'ghost' not found",
        id="unknown-user",
    ),
    pytest.param(
        "clusters:\n- name: c\n  cluster: {server: x\ntoken: hunter2\n",
        None,
        r"kubeconfig {path}: not valid YAML: .* at line \d+, column \d+$",
        id="bad-yaml",
    ),
    pytest.param(
        "- just\n- a list\n",
        None,
        r"kubeconfig {path}: expected a map at the top level",
        id="not-a-map",
    ),
    pytest.param(
        single(BASE_CLUSTER, {"client-certificate-data": "not base64!", "client-key-data": "eA=="}),
        None,
        r"kubeconfig {path}: users\[0\]\.user\.client-certificate-data \(user 'u'\): "
        r"not valid base64$",
        id="bad-base64",
    ),
    pytest.param(
        single(BASE_CLUSTER, {"client-certificate-data": b64(b"-----BEGIN CERTIFICATE-----")}),
        None,
        r"users\[0\]\.user\.client-key \(user 'u'\): missing; client-certificate needs a key",
        id="cert-without-key",
    ),
    pytest.param(
        single({"server": "https://x.example", "certificate-authority-data": b64(b"junk")}, {}),
        None,
        r"clusters\[0\]\.cluster\.certificate-authority-data \(cluster 'c'\): does not hold a PEM",
        id="ca-not-pem",
    ),
    pytest.param(
        single({"server": "https://x.example", "certificate-authority": "missing/ca.crt"}, {}),
        None,
        r"clusters\[0\]\.cluster\.certificate-authority \(cluster 'c'\): cannot read "
        r"{dir}/missing/ca\.crt: No such file or directory",
        id="unreadable-ca-file",
    ),
    pytest.param(
        single(BASE_CLUSTER, {"tokenFile": "missing-token"}),
        None,
        r"users\[0\]\.user\.tokenFile \(user 'u'\): cannot read {dir}/missing-token",
        id="unreadable-token-file",
    ),
    pytest.param(
        single({"certificate-authority-data": "eA=="}, {}),
        None,
        r"clusters\[0\]\.cluster\.server \(cluster 'c'\): missing; set the API server's URL",
        id="missing-server",
    ),
    pytest.param(
        single({"server": "ftp://x.example"}, {}),
        None,
        r"clusters\[0\]\.cluster\.server \(cluster 'c'\): 'ftp://x.example' is not an http",
        id="bad-scheme",
    ),
    pytest.param(
        single({"server": "htp:/x y"}, {}),
        None,
        r"^kubeconfig {path}: clusters\[0\]\.cluster\.server \(cluster 'c'\): 'htp:/x y' is not a "
        r"URL \(it contains spaces\); write an absolute URL, e.g. https://10\.0\.0\.1:6443",
        id="spaces",
    ),
    pytest.param(
        single({"server": "htp:/x"}, {}),
        None,
        r"clusters\[0\]\.cluster\.server \(cluster 'c'\): 'htp:/x' is not an absolute URL",
        id="mistyped-scheme",
    ),
    pytest.param(
        single({"server": "https://x!.example:6443"}, {}),
        None,
        r"'x!\.example' is not a host name or IP address",
        id="bad-host",
    ),
    pytest.param(
        single({"server": "https://x.example", "proxy-url": "http://proxy:3128"}, {}),
        None,
        r"clusters\[0\]\.cluster\.proxy-url \(cluster 'c'\): proxies are not supported",
        id="proxy-url",
    ),
    pytest.param(
        single({"server": "https://x.example", "insecure-skip-tls-verify": "yes"}, {}),
        None,
        r"clusters\[0\]\.cluster\.insecure-skip-tls-verify \(cluster 'c'\): expected true or false",
        id="insecure-not-bool",
    ),
    pytest.param(
        single(BASE_CLUSTER, {"auth-provider": {"name": "gcp"}}),
        None,
        r"users\[0\]\.user\.auth-provider \(user 'u'\): auth-provider plugins were removed",
        id="auth-provider",
    ),
    pytest.param(
        single(BASE_CLUSTER, {"username": "admin", "password": "hunter2"}),
        None,
        r"users\[0\]\.user\.username \(user 'u'\): basic authentication is not supported",
        id="basic-auth",
    ),
    pytest.param(
        single(
            BASE_CLUSTER,
            {"exec": {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"}},
        ),
        None,
        r"users\[0\]\.user\.exec\.apiVersion \(user 'u'\): "
        r"client\.authentication\.k8s\.io/v1alpha1 is no longer supported .*; "
        r"use client\.authentication\.k8s\.io/v1",
        id="exec-v1alpha1",
    ),
    pytest.param(
        single(BASE_CLUSTER, {"exec": plugin_exec(interactiveMode="Always")}),
        None,
        r"users\[0\]\.user\.exec\.interactiveMode \(user 'u'\): Always needs a terminal",
        id="exec-interactive-always",
    ),
    pytest.param(
        single(BASE_CLUSTER, {"exec": {"apiVersion": V1}}),
        None,
        r"users\[0\]\.user\.exec\.command \(user 'u'\): missing",
        id="exec-no-command",
    ),
    pytest.param(
        single(BASE_CLUSTER, {"exec": plugin_exec(env=[{"value": "x"}])}),
        None,
        r"users\[0\]\.user\.exec\.env\[0\] \(user 'u'\): expected a map with string name and value",
        id="exec-env-without-name",
    ),
]


@pytest.mark.parametrize(("doc", "context", "pattern"), ERRORS)
async def test_load_errors_name_file_and_field(
    doc: dict[str, object] | str, context: str | None, pattern: str, tmp_path: Path
) -> None:
    """A broken kubeconfig raises ConfigError naming the file and the field, never a secret."""
    path = write(tmp_path / "config", doc)
    expected = pattern.replace("{path}", str(path)).replace("{dir}", str(tmp_path))
    with pytest.raises(ConfigError, match=expected) as caught:
        load_kubeconfig(path, context=context)
    assert "hunter2" not in str(caught.value)


async def test_missing_explicit_kubeconfig(tmp_path: Path) -> None:
    """An explicit kubeconfig path that does not exist is an error naming it."""
    path = tmp_path / "nope"
    with pytest.raises(ConfigError, match=f"^kubeconfig {path}: cannot read: No such file"):
        load_kubeconfig(path)


async def test_all_kubeconfig_entries_missing(tmp_path: Path) -> None:
    """When no file in $KUBECONFIG exists, the error lists them and says what to fix."""
    listed = os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")])
    with pytest.raises(ConfigError, match="none of these files exist; fix \\$KUBECONFIG"):
        load_kubeconfig(environ={"KUBECONFIG": listed})


# --------------------------------------------------------------------------------------------
# Exec plugins


def exec_config(
    tmp_path: Path, exec_stanza: dict[str, object], **cluster: object
) -> ConnectionConfig:
    path = write(
        tmp_path / "config",
        single({"server": "https://x.example:6443", **cluster}, {"exec": exec_stanza}),
    )
    return load_kubeconfig(path, environ=PATH_ONLY)


async def test_exec_token_cached_until_near_expiry(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """A 600 s exec token is reused until 60 s (10 %) before expiry, then the plugin re-runs."""
    count = tmp_path / "count"
    args = ("--token", "tok", "--count", str(count), "--expires-in", "600")
    credentials = exec_config(tmp_path, plugin_exec(*args)).credentials
    first = await credentials.get()
    assert (first.token, runs(count)) == ("tok-1", 1)
    assert first.expires_at is not None
    assert first.expires_at.utcoffset() is not None
    mock_clock.jump(530)
    assert ((await credentials.get()).token, runs(count)) == ("tok-1", 1)
    mock_clock.jump(15)  # t=545: past 540 s, less than 60 s of the lifetime remain
    assert ((await credentials.get()).token, runs(count)) == ("tok-2", 2)
    assert ((await credentials.get()).token, runs(count)) == ("tok-2", 2)


async def test_exec_short_lived_token_reused_for_half_its_life(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """A 20 s token is not re-run on every call: it is reused for half of its lifetime."""
    count = tmp_path / "count"
    args = ("--token", "tok", "--count", str(count), "--expires-in", "20")
    credentials = exec_config(tmp_path, plugin_exec(*args)).credentials
    await credentials.get()
    mock_clock.jump(8)
    assert ((await credentials.get()).token, runs(count)) == ("tok-1", 1)
    mock_clock.jump(3)
    assert ((await credentials.get()).token, runs(count)) == ("tok-2", 2)


async def test_exec_without_expiry_cached_until_invalidated(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """Without expirationTimestamp the credential is kept until invalidate(), then re-run."""
    count = tmp_path / "count"
    credentials = exec_config(
        tmp_path, plugin_exec("--token", "t", "--count", str(count))
    ).credentials
    assert (await credentials.get()).token == "t-1"
    mock_clock.jump(86_400 * 365)
    assert ((await credentials.get()).token, runs(count)) == ("t-1", 1)
    credentials.invalidate()
    assert ((await credentials.get()).token, runs(count)) == ("t-2", 2)


async def test_exec_concurrent_gets_share_one_run(tmp_path: Path) -> None:
    """Concurrent get() calls share one plugin run, even when its token is already expired."""
    count = tmp_path / "count"
    args = ("--token", "t", "--count", str(count), "--expires-in", "-10")
    credentials = exec_config(tmp_path, plugin_exec(*args)).credentials
    tokens: list[str | None] = []

    async def get() -> None:
        tokens.append((await credentials.get()).token)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(get)
    assert (tokens, runs(count)) == (["t-1"] * 5, 1)


async def test_exec_returns_client_certificate(tmp_path: Path, pki: Pki) -> None:
    """A plugin that prints clientCertificateData/clientKeyData yields that certificate and key."""
    write(tmp_path / "c.pem", pki.cert_pem)
    write(tmp_path / "k.pem", pki.key_pem)
    args = ("--cert", str(tmp_path / "c.pem"), "--key", str(tmp_path / "k.pem"))
    with trio.fail_after(30):
        identity = await exec_config(tmp_path, plugin_exec(*args)).credentials.get()
    assert (identity.token, identity.cert_pem, identity.key_pem) == (
        None,
        pki.cert_pem,
        pki.key_pem,
    )


@pytest.mark.parametrize(
    ("extra", "cluster", "expected_cluster"),
    [
        pytest.param({}, {}, None, id="no-cluster-info"),
        pytest.param(
            {"provideClusterInfo": True},
            {"tls-server-name": "api.internal", "certificate-authority-data": "CA"},
            {
                "server": "https://x.example:6443",
                "tls-server-name": "api.internal",
                "certificate-authority-data": "CA",
            },
            id="ca-and-server-name",
        ),
        pytest.param(
            {"provideClusterInfo": True},
            {
                "insecure-skip-tls-verify": True,
                "extensions": [
                    {"name": "other", "extension": {"x": 1}},
                    {"name": "client.authentication.k8s.io/exec", "extension": {"audience": "k8s"}},
                ],
            },
            {
                "server": "https://x.example:6443",
                "insecure-skip-tls-verify": True,
                "config": {"audience": "k8s"},
            },
            id="insecure-and-extension",
        ),
    ],
)
async def test_exec_info_and_environment(
    extra: dict[str, Any],
    cluster: dict[str, object],
    expected_cluster: dict[str, object] | None,
    tmp_path: Path,
    pki: Pki,
) -> None:
    """The plugin sees KUBERNETES_EXEC_INFO as upstream fills it, our env plus its own, no stdin."""
    if cluster.get("certificate-authority-data") == "CA":
        cluster = {**cluster, "certificate-authority-data": b64(pki.ca_pem)}
        assert expected_cluster is not None
        expected_cluster = {**expected_cluster, "certificate-authority-data": b64(pki.ca_pem)}
    record = tmp_path / "record.json"
    stanza = plugin_exec(
        "--token",
        "t",
        "--record",
        str(record),
        "--echo-env",
        "FROM_KUBECONFIG",
        "--echo-env",
        "FROM_PARENT",
        "--echo-env",
        "OVERRIDDEN",
        env=[{"name": "FROM_KUBECONFIG", "value": "k"}, {"name": "OVERRIDDEN", "value": "new"}],
        **extra,
    )
    path = write(
        tmp_path / "config",
        single({"server": "https://x.example:6443", **cluster}, {"exec": stanza}),
    )
    environ = {**PATH_ONLY, "FROM_PARENT": "p", "OVERRIDDEN": "old"}
    with trio.fail_after(30):
        await load_kubeconfig(path, environ=environ).credentials.get()
    seen = json.loads(record.read_text())
    spec: dict[str, object] = {"interactive": False}
    if expected_cluster is not None:
        spec["cluster"] = expected_cluster
    assert seen == {
        "info": {"apiVersion": V1, "kind": "ExecCredential", "spec": spec},
        "env": {"FROM_KUBECONFIG": "k", "FROM_PARENT": "p", "OVERRIDDEN": "new"},
        "stdin": "",
    }


async def test_exec_relative_command_resolves_against_kubeconfig(tmp_path: Path) -> None:
    """A command with a path separator is relative to the kubeconfig's directory, not the cwd."""
    script = write(
        tmp_path / "conf" / "bin" / "plugin",
        f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {str(PLUGIN)!r}\n"
        f"runpy.run_path({str(PLUGIN)!r}, run_name='__main__')\n",
    )
    script.chmod(0o755)
    stanza = {"apiVersion": V1, "command": "bin/plugin", "args": ["--token", "relative"]}
    path = write(
        tmp_path / "conf" / "config", single({"server": "https://x.example"}, {"exec": stanza})
    )
    with trio.fail_after(30):
        assert (
            await load_kubeconfig(path, environ=PATH_ONLY).credentials.get()
        ).token == "relative"


EXEC_ERRORS = [
    pytest.param(
        plugin_exec(
            "--exit", "3", "--stderr", "error: token expired, run `login`", installHint="Run: login"
        ),
        r"exec plugin '.*' exited with status 3; "
        r"stderr: error: token expired, run `login`; Run: login$",
        id="failing",
    ),
    pytest.param(
        plugin_exec("--stdout", "hunter2 is the token"),
        r"exec plugin '.*' printed 20 bytes that are not JSON; it must print an ExecCredential$",
        id="junk",
    ),
    pytest.param(
        plugin_exec("--token", "hunter2", "--kind", "Secret"),
        r"printed kind 'Secret', expected 'ExecCredential'",
        id="wrong-kind",
    ),
    pytest.param(
        {**plugin_exec("--token", "hunter2"), "apiVersion": V1BETA1},
        r"printed apiVersion 'client.authentication.k8s.io/v1', but the kubeconfig asks for "
        r"'client.authentication.k8s.io/v1beta1'",
        id="wrong-api-version",
    ),
    pytest.param(
        plugin_exec("--stderr", "nothing to say"),
        r"neither status\.token nor status\.clientCertificateData/clientKeyData; "
        r"stderr: nothing to say$",
        id="no-credentials",
    ),
    pytest.param(
        {
            "apiVersion": V1,
            "command": "trio-ccm-no-such-plugin",
            "installHint": "Install it with: \x1b[1mapt install trio-ccm-plugin\x1b[0m",
        },
        r"exec plugin 'trio-ccm-no-such-plugin' not found \(not an executable file, nor on PATH\); "
        r"Install it with: \?\[1mapt install trio-ccm-plugin\?\[0m$",
        id="not-found",
    ),
]


@pytest.mark.parametrize(("stanza", "pattern"), EXEC_ERRORS)
async def test_exec_errors_name_file_user_and_command(
    stanza: dict[str, object], pattern: str, tmp_path: Path
) -> None:
    """A broken plugin raises ConfigError naming the kubeconfig, user entry and command."""
    credentials = exec_config(tmp_path, stanza).credentials
    prefix = f"^kubeconfig {tmp_path / 'config'}: users\\[0\\]\\.user\\.exec \\(user 'u'\\): "
    with trio.fail_after(30), pytest.raises(ConfigError, match=prefix + ".*" + pattern) as caught:
        await credentials.get()
    assert "hunter2" not in str(caught.value)


# --------------------------------------------------------------------------------------------
# TLS: ssl_context against real servers


@pytest.mark.parametrize(
    ("change", "works"),
    [
        pytest.param({}, True, id="ca-from-kubeconfig"),
        pytest.param({"tls-server-name": "localhost"}, True, id="tls-server-name"),
        pytest.param({"tls-server-name": "wrong.invalid"}, False, id="wrong-tls-server-name"),
        pytest.param(
            {"certificate-authority-data": None, "insecure-skip-tls-verify": True},
            True,
            id="insecure",
        ),
        pytest.param({"certificate-authority-data": None}, False, id="system-trust"),
    ],
)
async def test_ssl_context_against_emulator(
    change: dict[str, object], works: bool, tmp_path: Path
) -> None:
    """The emulator's kubeconfig yields a context and token that reach an authenticated path."""
    async with trio.open_nursery() as nursery:
        listening = await nursery.start(
            functools.partial(serve_apiserver, ApiServer(admin_token="admin-t"), tls=True)
        )
        doc = listening.kubeconfig("admin-t")
        cluster = doc["clusters"][0]["cluster"]
        cluster.update(change)
        for key in [k for k, v in cluster.items() if v is None]:
            del cluster[key]
        config = load_kubeconfig(write(tmp_path / "config", doc))
        identity = await config.credentials.get()
        context = config.ssl_context(identity)
        headers = {"Authorization": f"Bearer {identity.token}"}
        with trio.fail_after(30):
            async with httpx.AsyncClient(
                verify=context if context is not None else True, base_url=config.server
            ) as client:
                if works:
                    response = await client.get("/api/v1/namespaces", headers=headers)
                    assert response.status_code == 200
                else:
                    with pytest.raises(httpx.ConnectError):
                        await client.get("/version")
        nursery.cancel_scope.cancel()


async def test_ssl_context_presents_client_certificate(pki: Pki) -> None:
    """The context presents the client certificate to a server that requires one."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    pki.ca.issue_cert("127.0.0.1").configure_cert(server_context)
    pki.ca.configure_trust(server_context)
    server_context.verify_mode = ssl.CERT_REQUIRED

    async def handler(stream: trio.SSLStream[trio.SocketStream]) -> None:
        await stream.do_handshake()
        subject = dict(item[0] for item in stream.getpeercert()["subject"])
        await stream.send_all(subject["commonName"].encode())
        await stream.aclose()

    config = ConnectionConfig(
        server="https://127.0.0.1:1", credentials=Credentials(), ca_pem=pki.ca_pem, source="test"
    )
    context = config.ssl_context(ClientIdentity(cert_pem=pki.cert_pem, key_pem=pki.key_pem))
    assert context is not None
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                functools.partial(
                    trio.serve_ssl_over_tcp, handler, 0, server_context, host="127.0.0.1"
                )
            )
            port = listeners[0].transport_listener.socket.getsockname()[1]
            stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=context)
            received = await stream.receive_some()
            await stream.aclose()
            nursery.cancel_scope.cancel()
    assert received == b"trio-ccm-test-client"


async def test_client_key_files_are_private_and_removed(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key goes through a 0700 directory as 0600 files that are gone after loading."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    seen: list[tuple[int, int, int]] = []
    load_cert_chain = ssl.SSLContext.load_cert_chain

    def spy(self: ssl.SSLContext, certfile: str, keyfile: str, password: object = None) -> None:
        modes = [
            stat.S_IMODE(os.stat(p).st_mode) for p in (os.path.dirname(keyfile), certfile, keyfile)
        ]
        seen.append((modes[0], modes[1], modes[2]))
        load_cert_chain(self, certfile, keyfile, password)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    config = ConnectionConfig(
        server="https://x.example", credentials=Credentials(), ca_pem=pki.ca_pem
    )
    assert (
        config.ssl_context(ClientIdentity(cert_pem=pki.cert_pem, key_pem=pki.key_pem)) is not None
    )
    assert seen == [(0o700, 0o600, 0o600)]
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(
    ("config", "identity", "pattern"),
    [
        pytest.param(
            ConnectionConfig(
                "https://x.example", Credentials(), ca_pem=b"junk", source="kubeconfig /k"
            ),
            ClientIdentity(),
            r"^kubeconfig /k: the certificate authority is not a valid PEM certificate$",
            id="bad-ca",
        ),
        pytest.param(
            ConnectionConfig("https://x.example", Credentials(), source="kubeconfig /k"),
            "mismatched-key",
            r"^kubeconfig /k: the client certificate and key could not be loaded \(.*\); check",
            id="mismatched-key",
        ),
        pytest.param(
            ConnectionConfig("https://x.example", Credentials(), source="kubeconfig /k"),
            ClientIdentity(cert_pem=b"-----BEGIN CERTIFICATE-----"),
            r"^kubeconfig /k: a client certificate needs both a cert and a key$",
            id="cert-without-key",
        ),
    ],
)
async def test_ssl_context_errors(
    config: ConnectionConfig, identity: ClientIdentity | str, pattern: str, pki: Pki
) -> None:
    """Unusable TLS material raises ConfigError naming the source, never quoting the key."""
    if identity == "mismatched-key":
        identity = ClientIdentity(cert_pem=pki.cert_pem, key_pem=pki.other_key_pem)
    assert isinstance(identity, ClientIdentity)
    with pytest.raises(ConfigError, match=pattern) as caught:
        config.ssl_context(identity)
    assert "PRIVATE KEY" not in str(caught.value)


async def test_ssl_context_none_for_http() -> None:
    """An http:// server gets no TLS context."""
    config = ConnectionConfig("http://127.0.0.1:8080", StaticCredentials(token="t"))
    assert config.ssl_context(await config.credentials.get()) is None


# --------------------------------------------------------------------------------------------
# In-cluster


def service_account(tmp_path: Path, pki: Pki, *, namespace: str | None = "kube-system") -> Path:
    root = tmp_path / "serviceaccount"
    write(root / "token", "sa-token-1\n")
    write(root / "ca.crt", pki.ca_pem)
    if namespace is not None:
        write(root / "namespace", namespace)
    return root


@pytest.mark.parametrize(
    ("environ", "namespace_file", "server", "namespace"),
    [
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
            "kube-system",
            "https://10.96.0.1:443",
            "kube-system",
            id="ipv4",
        ),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"},
            None,
            "https://[fd00::1]:6443",
            "default",
            id="ipv6-no-namespace-file",
        ),
        pytest.param(
            {
                "KUBERNETES_SERVICE_HOST": "10.96.0.1",
                "KUBERNETES_SERVICE_PORT": "443",
                "POD_NAMESPACE": "from-env",
            },
            "kube-system",
            "https://10.96.0.1:443",
            "from-env",
            id="pod-namespace-env",
        ),
    ],
)
async def test_incluster(
    environ: dict[str, str],
    namespace_file: str | None,
    server: str,
    namespace: str,
    tmp_path: Path,
    pki: Pki,
) -> None:
    """In-cluster config comes from the service env vars and the mounted service account."""
    root = service_account(tmp_path, pki, namespace=namespace_file)
    config = load_incluster(environ=environ, root=root)
    assert (config.server, config.namespace, config.ca_pem, config.source) == (
        server,
        namespace,
        pki.ca_pem,
        "in-cluster",
    )
    assert (await config.credentials.get()).token == "sa-token-1"


@pytest.mark.parametrize(
    ("environ", "remove", "pattern"),
    [
        pytest.param(
            {"KUBERNETES_SERVICE_PORT": "443"},
            None,
            r"^in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set",
            id="no-host",
        ),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1"},
            None,
            r"KUBERNETES_SERVICE_PORT must be set",
            id="no-port",
        ),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "https"},
            None,
            r"^in-cluster config: KUBERNETES_SERVICE_PORT='https' is not a port$",
            id="bad-port",
        ),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
            "token",
            r"^in-cluster config: token: cannot read .*/token: No such file",
            id="no-token",
        ),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
            "ca.crt",
            r"^in-cluster config: ca\.crt: cannot read .*/ca\.crt: No such file.*automount",
            id="no-ca",
        ),
    ],
)
async def test_incluster_errors(
    environ: dict[str, str], remove: str | None, pattern: str, tmp_path: Path, pki: Pki
) -> None:
    """Missing env vars or service-account files give a ConfigError saying which."""
    root = service_account(tmp_path, pki)
    if remove is not None:
        (root / remove).unlink()
    with pytest.raises(ConfigError, match=pattern):
        load_incluster(environ=environ, root=root)


IN_CLUSTER_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


async def test_incluster_token_rotation_picked_up_after_reread_period(
    tmp_path: Path, pki: Pki, autojump_clock: trio.testing.MockClock
) -> None:
    """A rotated token file is read again 60 s after the last read, not before."""
    root = service_account(tmp_path, pki)
    credentials = load_incluster(environ=IN_CLUSTER_ENV, root=root).credentials
    with trio.fail_after(300):
        start = trio.current_time()
        assert (await credentials.get()).token == "sa-token-1"
        write(root / "token", "sa-token-2")
        await trio.sleep(59.5)
        assert (await credentials.get()).token == "sa-token-1"
        await trio.sleep(0.5)
        assert trio.current_time() - start == 60.0
        assert (await credentials.get()).token == "sa-token-2"
        write(root / "token", "sa-token-3")
        await trio.sleep(59.9)
        assert (await credentials.get()).token == "sa-token-2"


async def test_incluster_token_reread_after_invalidate(
    tmp_path: Path, pki: Pki, autojump_clock: trio.testing.MockClock
) -> None:
    """After invalidate() (a 401) the token file is read again at once."""
    root = service_account(tmp_path, pki)
    credentials = load_incluster(environ=IN_CLUSTER_ENV, root=root).credentials
    with trio.fail_after(10):
        assert (await credentials.get()).token == "sa-token-1"
        write(root / "token", "sa-token-2")
        assert (await credentials.get()).token == "sa-token-1"
        credentials.invalidate()
        assert (await credentials.get()).token == "sa-token-2"


async def test_token_file_read_failure_keeps_token_until_invalidated(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A failed periodic re-read keeps the last token; after a 401 it is an error."""
    path = write(tmp_path / "token", "tok")
    credentials = TokenFileCredentials(path, reread_after_s=10.0, where="test token")
    with trio.fail_after(60):
        assert (await credentials.get()).token == "tok"
        path.unlink()
        await trio.sleep(11)
        assert (await credentials.get()).token == "tok"
        credentials.invalidate()
        with pytest.raises(ConfigError, match=f"^test token: cannot read {path}: No such file"):
            await credentials.get()


# --------------------------------------------------------------------------------------------
# --kubeconfig / --master


async def test_load_config_without_flags_outside_cluster() -> None:
    """With neither flag and no in-cluster env, the error says to pass --kubeconfig."""
    with pytest.raises(ConfigError, match=r"pass --kubeconfig when running outside a cluster$"):
        load_config(kubeconfig=None, master=None, environ={})


async def test_load_config_master_only() -> None:
    """--master alone gives that server with no credentials and the system trust store."""
    config = load_config(kubeconfig=None, master="10.0.0.9:6443", environ={})
    assert (config.server, config.ca_pem, config.source) == (
        "https://10.0.0.9:6443",
        None,
        "--master https://10.0.0.9:6443",
    )
    assert await config.credentials.get() == ClientIdentity()


async def test_load_config_master_overrides_kubeconfig_server(tmp_path: Path, pki: Pki) -> None:
    """--master replaces the kubeconfig's server and drops its tls-server-name, keeps the rest."""
    cluster = {
        "server": "https://old.example",
        "certificate-authority-data": b64(pki.ca_pem),
        "tls-server-name": "old.example",
    }
    path = write(tmp_path / "config", single(cluster, {"token": "t"}))
    config = load_config(kubeconfig=str(path), master="https://new.example:6443/", environ={})
    assert (config.server, config.tls_server_name, config.ca_pem) == (
        "https://new.example:6443",
        None,
        pki.ca_pem,
    )
    assert (
        config.source == f"kubeconfig {path} (context ctx) with --master https://new.example:6443"
    )
    assert (await config.credentials.get()).token == "t"


async def test_load_config_kubeconfig_ignores_env(tmp_path: Path) -> None:
    """--kubeconfig reads exactly that file; $KUBECONFIG is not merged in."""
    mine = write(tmp_path / "mine", single({"server": "https://mine.example"}, {}))
    other = write(tmp_path / "other", single({"server": "https://other.example"}, {}))
    config = load_config(kubeconfig=str(mine), master=None, environ={"KUBECONFIG": str(other)})
    assert config.server == "https://mine.example"


async def test_exec_credentials_reject_unknown_api_version() -> None:
    """ExecCredentials refuses an ExecCredential version it cannot speak."""
    with pytest.raises(ConfigError, match=r"'client\.authentication\.k8s\.io/v2' is not supported"):
        ExecCredentials("plugin", api_version="client.authentication.k8s.io/v2")
