"""A graceful drain lets in-flight cloud calls finish, not calls still queued for a token.

At a graceful shutdown the leader keeps renewing while its controllers finish the step
they are in (up to the grace period; `trio_ccm.actors.keyed`). Under load most of those
steps have made no cloud call yet: they wait in the cloud budget's queue (a node-set
change starts one per Service, behind a 5/s load-balancer budget). Serving that queue one
token at a time would hold the handover for the whole grace period, for work the next
leader does anyway. So each step runs as a `Step`: when the drain starts, a step that is
waiting for a token, or starts waiting later, is cancelled at once (its scope), as if its
grace had ended; a step whose call is under way finishes it.

The per-object actors open a step around each handler call (`step(scope)`) and `drain` it
at shutdown; the budget marks its token waits (`waiting()`). Outside a step both do
nothing. Cancelling before the call is safe: the call was not made, and every reconcile
is redone by the next leader.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import trio

__all__ = ["Step", "drain", "step", "waiting"]


class Step:
    """One handler call, cancellable through `scope` while it only waits for the budget."""

    __slots__ = ("cut", "draining", "scope", "waits")

    def __init__(self, scope: trio.CancelScope) -> None:
        self.scope = scope
        self.waits = 0
        self.draining = False
        self.cut = False
        """Cancelled by the drain while queued for a token (not at the grace's end)."""

    def _cut(self) -> None:
        self.cut = True
        self.scope.cancel()


_STEP: ContextVar[Step | None] = ContextVar("trio_ccm_cloud_step", default=None)


@contextmanager
def step(scope: trio.CancelScope) -> Iterator[Step]:
    """Run the block (and the tasks it starts) as one step, cancelled through `scope`."""
    current = Step(scope)
    token = _STEP.set(current)
    try:
        yield current
    finally:
        _STEP.reset(token)


def drain(current: Step) -> None:
    """The drain has started: cancel `current` now if it waits for a token, else when it
    starts to."""
    current.draining = True
    if current.waits:
        current._cut()


@contextmanager
def waiting() -> Iterator[None]:
    """Mark the block as a wait for a budget token of the current step, if any."""
    current = _STEP.get()
    if current is None:
        yield
        return
    current.waits += 1
    try:
        if current.draining:
            current._cut()
        yield
    finally:
        current.waits -= 1
