"""Shared builders for tests of `serve()` itself: a cloud offering nothing, and an extra
controller that records the virtual instants it runs between."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from trio_ccm.actors.backoff import Backoff
from trio_ccm.actors.controller import Controller, ControllerContext


class NoCapabilities:
    """A cloud offering nothing: only extra controllers can run."""

    name = "none"
    instances = None
    load_balancers = None
    routes = None

    def __init__(self) -> None:
        self.initialized = 0

    async def initialize(self) -> None:
        self.initialized += 1


@dataclass
class Probe:
    """An extra controller recording when it runs: (start, end) virtual times per term."""

    name: str = "probe"
    terms: list[list[float]] = field(default_factory=list)
    handled: list[tuple[str, float]] = field(default_factory=list)
    first_handled: trio.Event = field(default_factory=trio.Event)

    def controller(self, *, disabled_by_default: bool = False) -> type[Controller]:
        """A Controller class that reports to this probe."""
        probe = self

        class ProbeController(Controller):
            name = probe.name
            informers = frozenset({"nodes"})

            async def run(self, ctx: ControllerContext) -> None:
                await probe.run(ctx)

        ProbeController.disabled_by_default = disabled_by_default
        return ProbeController

    async def run(self, ctx: ControllerContext) -> None:
        term = [trio.current_time()]
        self.terms.append(term)

        async def handle(key: str, _node: object) -> None:
            self.handled.append((key, trio.current_time()))
            self.first_handled.set()

        actors = ctx.keyed(handle, limiter=trio.CapacityLimiter(1), backoff=Backoff(1, 10))
        try:
            async with ctx.nodes.subscription() as mailbox:
                await actors.serve(mailbox)
        finally:
            term.append(trio.current_time())

    @property
    def running(self) -> bool:
        return bool(self.terms) and len(self.terms[-1]) == 1
