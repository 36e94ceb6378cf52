"""The HTTP front door: the simulated cloud served by `serve_http1` (plain HTTP/1.1).

The cloud outlives the CCM processes that call it: run it with `serve_sim_cloud` in the
test's (or the demo's) own process and point each replica's cloud config at its URL.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NoReturn

import trio

from trio_ccm_testbed._http import serve_http1
from trio_ccm_testbed.cloud.server import SimCloud

_MAX_REQUEST_LINE = 1024 * 1024  # bulk lookups name every Node in the query string
_KEEP_ALIVE_S = 75


@dataclass(frozen=True)
class Listening:
    """Where a running simulated cloud listens."""

    url: str
    host: str
    port: int


async def serve_sim_cloud(
    cloud: SimCloud,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    task_status: trio.TaskStatus[Listening] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve `cloud` over plain HTTP until cancelled; `task_status.started(Listening)`."""
    async with trio.open_nursery() as nursery:
        bound_port: int = await nursery.start(
            partial(
                serve_http1,
                cloud.handle,
                host=host,
                port=port,
                keep_alive_timeout_s=_KEEP_ALIVE_S,
                max_request_bytes=_MAX_REQUEST_LINE,
            )
        )
        shown = f"[{host}]" if ":" in host else host
        task_status.started(Listening(f"http://{shown}:{bound_port}", host, bound_port))
    raise AssertionError("serve_http1 returned without being cancelled")
