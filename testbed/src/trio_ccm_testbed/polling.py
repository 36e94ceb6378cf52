"""PolledFleet: a real cloud's instances and routes as the testbed's kubelets follow them
(a `testbed.Fleet`), the base of `aws.MotoFleet` and `openstack.OpenStackFleet`.

The testbed reads its fleet on the Trio thread, and these clouds' clients block (boto3,
the OpenStack REST helper). So a fleet keeps a snapshot: the subclass's `_read()` takes one
in a worker thread, `refresh()` takes one now, and `serve` takes one every `poll_s`. A
failed refresh keeps the last snapshot and is logged; one cut short because the world is
stopping under it (the refresh's task cancelled meanwhile) is not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, NoReturn, TypeVar

import trio

from trio_ccm.logs import get_logger

__all__ = ["FleetRoute", "Instance", "PolledFleet"]

log = get_logger("trio_ccm_testbed.fleet")


@dataclass(frozen=True, slots=True)
class Instance:
    """An instance of a snapshot: its kubelet's Node is `name` (EC2: the private DNS name;
    Nova: the server's name), `state` is "running" or what it is instead, `zone` its zone."""

    id: str
    name: str
    hostname: str
    state: str
    zone: str


@dataclass(frozen=True, slots=True)
class FleetRoute:
    """A route of the cluster's route table or router (the VPC's local route left out)."""

    destination: str
    target: str
    blackhole: bool = False


I = TypeVar("I")  # noqa: E741 - the instance type, beside R, the route type
R = TypeVar("R")


class PolledFleet(Generic[I, R]):
    """A snapshot of a cloud's instances and routes, refreshed by `serve` (see the module
    docstring); subclasses give `_read`."""

    def __init__(self, *, poll_s: float) -> None:
        if not poll_s > 0:
            raise ValueError(f"poll_s={poll_s!r}: must be a positive number of seconds")
        self.poll_s = poll_s
        self._instances: tuple[I, ...] = ()
        self._routes: tuple[R, ...] = ()

    # -- what the testbed reads -------------------------------------------------------
    def instances(self) -> Sequence[I]:
        return self._instances

    def routes(self) -> Sequence[R]:
        return self._routes

    # -- refreshing -------------------------------------------------------------------
    async def refresh(self) -> None:
        """Take a new snapshot now (in a worker thread)."""
        self._instances, self._routes = await trio.to_thread.run_sync(self._read)

    async def serve(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Refresh every `poll_s` until cancelled; started once the first snapshot is taken.
        A failed refresh keeps the last snapshot and is logged."""
        await self.refresh()
        task_status.started()
        while True:
            await trio.sleep(self.poll_s)
            try:
                await self.refresh()
            except Exception as exc:
                # Cancelled meanwhile (the world stopping under the refresh): no warning.
                await trio.lowlevel.checkpoint_if_cancelled()
                log.warning("fleet.refresh-failed", error=f"{type(exc).__name__}: {exc}")

    def _read(self) -> tuple[tuple[I, ...], tuple[R, ...]]:
        """The cloud's instances and routes now (blocking: run in a worker thread)."""
        raise NotImplementedError
