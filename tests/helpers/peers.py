"""Plumbing for the peer-client tests: emulators on TLS, kubectl runners, a raw client,
and the objects the scenarios create.

Each scenario gets its own emulator (`ApiServer` served over TLS in a Trio nursery), so
scenarios and kubectl versions can run side by side without seeing each other's objects.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from trio_ccm_testbed.apiserver import ApiError, ApiServer, Listening, serve_apiserver

KUBECTL_VERSIONS = ("1.27", "1.28", "1.29", "1.30", "1.31", "1.32", "1.33")
# kubectl before 1.29 validates manifests against the protobuf OpenAPI v2 document, which
# the emulator serves: every version applies and creates with its default validation.
NEEDS_VALIDATE_FALSE: frozenset[str] = frozenset()
REQUEST_TIMEOUT = "--request-timeout=20s"


def kubectl_dir() -> Path | None:
    """The directory holding the versioned kubectl binaries (next to `kubectl` on PATH)."""
    found = shutil.which("kubectl")
    return Path(os.path.realpath(found)).parent if found else None


def kubectl_binary(version: str) -> Path | None:
    directory = kubectl_dir()
    if directory is None:
        return None
    binary = directory / f"kubectl.{version}"
    return binary if os.access(binary, os.X_OK) else None


def installed_kubectl_versions() -> list[str]:
    return [v for v in KUBECTL_VERSIONS if kubectl_binary(v) is not None]


def missing_kubectl_reason(version: str) -> str:
    directory = kubectl_dir()
    where = directory / f"kubectl.{version}" if directory else "(no kubectl on PATH)"
    return f"kubectl {version} is not installed: {where} is missing"


@dataclass(frozen=True)
class Emulator:
    """One emulator served over TLS, with a kubeconfig written for it."""

    server: ApiServer
    listening: Listening
    kubeconfig: Path

    def raw_client(self) -> httpx.AsyncClient:
        """An httpx client that reaches the server in-process (no sockets)."""
        return httpx.AsyncClient(
            transport=self.server.transport(),
            base_url="http://emulator",
            headers={"authorization": "Bearer peer-tests"},
        )

    async def patch(
        self,
        path: str,
        body: Any,
        content_type: str = "application/strategic-merge-patch+json",
    ) -> dict[str, Any]:
        """PATCH `path` as another client would (to make changes a peer must observe)."""
        async with self.raw_client() as client:
            response = await client.patch(
                path, content=json.dumps(body), headers={"content-type": content_type}
            )
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    def lookup(
        self, api_version: str, kind: str, name: str, namespace: str = ""
    ) -> dict[str, Any] | None:
        """The stored object, or None when the server answers 404 for it."""
        try:
            return self.server.get(api_version, kind, name, namespace=namespace)
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise


async def start_emulator(nursery: trio.Nursery, directory: Path) -> Emulator:
    """Serve a fresh `ApiServer` over TLS in `nursery`; write its kubeconfig in `directory`."""
    await trio.Path(directory).mkdir(parents=True, exist_ok=True)
    server = ApiServer(seed=1)
    listening: Listening = await nursery.start(functools.partial(serve_apiserver, server, tls=True))
    kubeconfig = listening.write_kubeconfig(directory / "kubeconfig")
    return Emulator(server, listening, kubeconfig)


@dataclass(frozen=True)
class Run:
    """A finished kubectl invocation."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return (
            f"kubectl {' '.join(self.args)} -> exit {self.returncode}\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}"
        )


@dataclass(frozen=True)
class Kubectl:
    """One kubectl version pointed at one emulator, with its own discovery cache."""

    version: str
    binary: Path
    kubeconfig: Path
    cache_dir: Path

    @property
    def validate_flags(self) -> tuple[str, ...]:
        return ("--validate=false",) if self.version in NEEDS_VALIDATE_FALSE else ()

    async def run(self, *args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> Run:
        command = [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.cache_dir}",
            REQUEST_TIMEOUT,
            *args,
        ]
        done = await trio.run_process(
            command,
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, **env} if env else None,
        )
        return Run(args, done.returncode, done.stdout.decode(), done.stderr.decode())

    async def ok(self, *args: str) -> Run:
        """Run and require exit code 0."""
        result = await self.run(*args)
        assert result.returncode == 0, str(result)
        return result

    async def apply(self, manifest: Path) -> Run:
        return await self.ok("apply", *self.validate_flags, "-f", str(manifest))


KubectlScenario = Callable[[Kubectl, Emulator, Path], Awaitable[None]]


async def run_on_every_kubectl(tmp_path: Path, scenario: KubectlScenario) -> None:
    """Run `scenario` once per installed kubectl version, concurrently, each on its own emulator.

    Every version runs to completion; failures are raised together afterwards, each noted
    with its kubectl version.
    """
    versions = installed_kubectl_versions()
    if not versions:
        pytest.skip("no versioned kubectl binaries (kubectl.1.27 ... kubectl.1.33) installed")
    failures: list[tuple[str, Exception]] = []

    async def one(version: str, emulator: Emulator) -> None:
        binary = kubectl_binary(version)
        assert binary is not None
        workdir = tmp_path / version
        kubectl = Kubectl(version, binary, emulator.kubeconfig, workdir / "cache")
        try:
            await scenario(kubectl, emulator, workdir)
        except Exception as exc:
            exc.add_note(f"with kubectl {version}")
            failures.append((version, exc))

    async with trio.open_nursery() as servers:
        emulators = {v: await start_emulator(servers, tmp_path / v) for v in versions}
        async with trio.open_nursery() as runs:
            for version in versions:
                runs.start_soon(one, version, emulators[version])
        servers.cancel_scope.cancel()
    failures.sort(key=lambda item: KUBECTL_VERSIONS.index(item[0]))
    if len(failures) == 1:
        raise failures[0][1]
    if failures:
        raise ExceptionGroup(
            "kubectl " + ", ".join(v for v, _ in failures) + " failed",
            [exc for _, exc in failures],
        )


# -- objects ---------------------------------------------------------------------------
NODE_PORTS = range(30000, 32768)
STAMP = "2026-01-01T00:00:00Z"


def ready_condition(ready: bool) -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status" if ready else "container runtime is down",
        "lastHeartbeatTime": STAMP,
        "lastTransitionTime": STAMP,
    }


def node(
    name: str,
    *,
    ready: bool | None = None,
    labels: dict[str, str] | None = None,
    unschedulable: bool = False,
    addresses: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A Node as a kubelet registers it (nodeInfo, addresses, optionally a Ready condition)."""
    status: dict[str, Any] = {
        "nodeInfo": {
            "architecture": "amd64",
            "bootID": f"boot-{name}",
            "containerRuntimeVersion": "containerd://2.0.5",
            "kernelVersion": "6.8.0",
            "kubeProxyVersion": "",
            "kubeletVersion": "v1.33.1",
            "machineID": f"machine-{name}",
            "operatingSystem": "linux",
            "osImage": "Ubuntu 24.04.2 LTS",
            "systemUUID": f"uuid-{name}",
        },
        "addresses": addresses or [{"type": "Hostname", "address": name}],
    }
    if ready is not None:
        status["conditions"] = [ready_condition(ready)]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": status,
    }


def lb_service(
    name: str = "web", *, port: int = 80, namespace: str | None = None
) -> dict[str, Any]:
    """A LoadBalancer Service with one named port (no namespace: the context's default)."""
    metadata: dict[str, Any] = {"name": name, "labels": {"app": name}}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": port, "targetPort": 8080}],
        },
    }
