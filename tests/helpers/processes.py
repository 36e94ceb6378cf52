"""Shared helpers for tests that run trio-ccm and the testbed as real processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import trio
import yaml

from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.objects import NODES, Node
from trio_ccm_testbed.apiserver import ApiServer, Listening, serve_apiserver

CLI = (sys.executable, "-m", "trio_ccm")
UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"


class Lines:
    """Reads a process's stdout line by line."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = b""
        self.seen: list[str] = []

    async def next(self) -> str:
        while b"\n" not in self.buffer:
            chunk = await self.stream.receive_some()
            if not chunk:
                raise EOFError(f"stdout closed; lines so far: {self.seen}")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        self.seen.append(line.decode())
        return self.seen[-1]


@asynccontextmanager
async def running(
    argv: list[str],
    *,
    stderr: Path,
    stdout: int | None = subprocess.PIPE,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[trio.Process]:
    """A subprocess for the block (`env`: its whole environment, else ours); killed if
    still running at its end."""
    with stderr.open("wb") as err:
        async with trio.open_nursery() as nursery:
            process: trio.Process = await nursery.start(
                partial(trio.run_process, argv, check=False, stdout=stdout, stderr=err, env=env)
            )
            try:
                yield process
            finally:
                if process.returncode is None:
                    process.kill()
                nursery.cancel_scope.cancel()


@asynccontextmanager
async def ccm_process(
    *flags: str, home: Path, stderr: Path, env: Mapping[str, str] | None = None
) -> AsyncIterator[trio.Process]:
    """A `trio-ccm` process with `flags` for the block, its secure port a free one (bound to
    127.0.0.1 unless `flags` name a --bind-address), `HOME` at `home` and `env` added to
    our environment; killed at the block's end if still running; its stderr in the file
    `stderr`."""
    argv = [*CLI, *flags, f"--secure-port={free_port()}"]
    if not any(flag.startswith("--bind-address") for flag in flags):
        argv.append("--bind-address=127.0.0.1")
    environ = {**os.environ, "HOME": str(home), **(env or {})}
    async with running(argv, stderr=stderr, stdout=None, env=environ) as process:
        yield process


async def serve_kubeconfig(nursery: trio.Nursery, api: ApiServer, path: Path) -> Path:
    """Serve the emulator `api` over loopback HTTP in `nursery` (until it is cancelled) and
    write a kubeconfig for it to `path`, for a CCM in another process; returns `path`."""
    listening: Listening = await nursery.start(
        partial(serve_apiserver, api, host="127.0.0.1", port=0)
    )
    await trio.Path(path).write_text(yaml.safe_dump(listening.kubeconfig()))
    return path


async def initialised(
    kube: KubeClient, *, provider_ids: str = "sim://", region: str = "sim-region-1"
) -> list[Node]:
    """The Nodes the CCM has finished: no taint left, a provider ID (starting with
    `provider_ids`), a zone label (in `region`) and an instance-type label."""
    nodes = (await kube.list(NODES, type=Node)).items
    return [
        n
        for n in nodes
        if n.spec.provider_id.startswith(provider_ids)
        and not any(t.key == UNINITIALIZED for t in n.spec.taints)
        and n.metadata.labels.get("topology.kubernetes.io/zone", "").startswith(region)
        and "node.kubernetes.io/instance-type" in n.metadata.labels
    ]


async def poll_until(check: Callable[[], Awaitable[bool]], period_s: float = 0.05) -> None:
    """Another process's progress can only be polled (its caller bounds the wait)."""
    while not await check():  # noqa: ASYNC110 - state in another process: nothing to await
        await trio.sleep(period_s)


def free_port() -> int:
    """A loopback TCP port free right now (for a process's --secure-port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
