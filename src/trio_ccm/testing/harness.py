"""Run the whole CCM in-process against the emulator: the harness for provider authors' and
embedders' tests (and ours).

```python
async def test_my_provider_initialises_nodes(autojump_clock):
    api = ApiServer(now=virtual_now())
    register_node(api, "node-1")
    async with run_ccm(api, MyProvider(), "--controllers=cloud-node"):
        await wait_for(lambda: not node_tainted(api, "node-1"))
```

- `run_ccm(api, provider, *flags)` runs one replica (`trio_ccm.serve`) with the Go CCM's
  command line (`--secure-port=0`, `--leader-elect=false` and `--cloud-provider=<name>`
  come first, so a flag given overrides them), reaching the emulator through its
  in-process transport: no sockets, so everything runs under `trio.testing.MockClock`. It
  yields the `Serving` handle once the controllers run, and stops the replica when the
  block ends.
- `register_node(api, name, ...)` does what a kubelet with `--cloud-provider=external`
  does: a Node with the uninitialized taint and a Ready condition.
- `RecordingTransport` records every write the CCM sends (virtual time, method, path), so
  a test can assert exact times ("the taint was removed at t=0.02").
- `virtual_now()` is a wall clock that follows Trio's clock, for Event and Lease timestamps
  under MockClock.
- `wait_for(check)` waits, in virtual time, until `check()` holds.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import httpx
import prometheus_client
import trio

from trio_ccm.actors.controller import Controller
from trio_ccm.cli.flags import parse_flags
from trio_ccm.cloud.provider import CloudProvider
from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.supervisor import Serving, serve
from trio_ccm.testing._world import ApiServer
from trio_ccm.testing.factories import make_node

__all__ = [
    "EPOCH",
    "RecordingTransport",
    "Write",
    "emulator_connection",
    "register_node",
    "run_ccm",
    "virtual_now",
    "wait_for",
]

EPOCH: Final = dt.datetime(2026, 11, 21, 10, 0, 0, tzinfo=dt.UTC)
"""What `virtual_now()` says at Trio time 0."""
_POLL_S: Final = 0.01


def virtual_now(epoch: dt.datetime = EPOCH) -> Callable[[], dt.datetime]:
    """A wall clock following Trio's clock (`epoch` at Trio time 0): MockClock-safe."""
    return lambda: epoch + dt.timedelta(seconds=trio.current_time())


def emulator_connection() -> ConnectionConfig:
    """Connection settings for clients reaching an emulator through its transport."""
    return ConnectionConfig(
        server="http://emulator", credentials=StaticCredentials(), source="the emulator"
    )


@dataclass(frozen=True, slots=True)
class Write:
    """One write the CCM sent: when (Trio time), the HTTP method and the path."""

    at: float
    method: str
    path: str


class RecordingTransport(httpx.AsyncBaseTransport):
    """The CCM's way to the emulator, recording every write it sends."""

    def __init__(self, api: ApiServer) -> None:
        self.inner = api.transport()
        self.writes: list[Write] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method in ("POST", "PUT", "PATCH", "DELETE"):
            self.writes.append(Write(trio.current_time(), request.method, request.url.path))
        response: httpx.Response = await self.inner.handle_async_request(request)
        return response

    def node_writes(self, name: str) -> list[Write]:
        """The writes to Node `name` (the object and its status)."""
        path = f"/api/v1/nodes/{name}"
        return [w for w in self.writes if w.path in (path, path + "/status")]

    def service_writes(self, name: str, namespace: str = "default") -> list[Write]:
        """The writes to Service `namespace/name` (the object and its status)."""
        path = f"/api/v1/namespaces/{namespace}/services/{name}"
        return [w for w in self.writes if w.path in (path, path + "/status")]


def register_node(api: ApiServer, name: str, **fields: Any) -> dict[str, Any]:
    """Register a Node as a kubelet with `--cloud-provider=external` does (see
    `trio_ccm.testing.factories.make_node` for `fields`); returns the stored Node."""
    created: dict[str, Any] = api.create(make_node(name, **fields))
    return created


@asynccontextmanager
async def run_ccm(
    api: ApiServer,
    provider: CloudProvider,
    *flags: str,
    controllers: Sequence[type[Controller]] = (),
    transport: httpx.AsyncBaseTransport | None = None,
    registry: prometheus_client.CollectorRegistry | None = None,
    identity: str = "trio-ccm",
    now: Callable[[], dt.datetime] | None = None,
) -> AsyncIterator[Serving]:
    """One replica against `api` for the block; see the module docstring."""
    contributed: Sequence[type[Controller]] = getattr(provider, "controllers", ()) or ()
    settings = parse_flags(
        [
            "--secure-port=0",
            "--leader-elect=false",
            f"--cloud-provider={provider.name}",
            *flags,
        ],
        controllers=[*controllers, *contributed],
    )
    async with trio.open_nursery() as nursery:
        serving: Serving = await nursery.start(
            partial(
                serve,
                settings,
                provider,
                controllers=controllers,
                connection=emulator_connection(),
                transport=transport if transport is not None else api.transport(),
                registry=registry,
                identity=identity,
                now=now if now is not None else virtual_now(),
            )
        )
        await serving.wait_leading()
        yield serving
        nursery.cancel_scope.cancel()


async def wait_for(check: Callable[[], bool], *, poll_s: float = _POLL_S) -> None:
    """Return once `check()` holds, looking every `poll_s` of Trio time (bound the wait
    with `trio.fail_after`). For state in the emulator, which has no change feed of its own
    for arbitrary conditions; under MockClock the polls cost no real time."""
    while not check():  # noqa: ASYNC110 - a condition over emulator state; see the docstring
        await trio.sleep(poll_s)
