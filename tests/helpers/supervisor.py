"""Shared builders for tests of `serve()` itself: a cloud offering nothing, an extra
controller that records the virtual instants it runs between, jitter that is always 0, and
a connection to the emulator that a test can cut."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import httpx
import trio

from trio_ccm.actors.backoff import Backoff
from trio_ccm.actors.controller import Controller, ControllerContext
from trio_ccm_testbed.apiserver import ApiServer


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


class FixedJitter(random.Random):
    """Every draw is 0: acquire attempts come exactly one retry period apart."""

    def random(self) -> float:
        return 0.0


class Link(httpx.AsyncBaseTransport):
    """A replica's connection to the emulator; with `cut` set the server is unreachable."""

    def __init__(self, server: ApiServer) -> None:
        self.inner = server.transport()
        self.cut = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.cut:
            raise httpx.ConnectError("link cut by the test", request=request)
        response: httpx.Response = await self.inner.handle_async_request(request)
        return response
