"""`trio_ccm.controllers`' Event helpers write Events about Services as about Nodes, from
the controller's event component, and refuse what is not a cached object."""

from __future__ import annotations

import httpx
import pytest
import trio
import trio.testing

from tests.helpers.supervisor import NoCapabilities
from trio_ccm.controllers import (
    Backoff,
    Controller,
    ControllerContext,
    Gone,
    Message,
    Service,
    warn,
)
from trio_ccm.testing import ApiServer, make_service, run_ccm


class PortCheck(Controller):
    name = "port-check"
    informers = frozenset({"services"})
    event_component = "port-checker"

    async def run(self, ctx: ControllerContext) -> None:
        async def check(key: str, message: Message[Service]) -> str | None:
            if isinstance(message, Gone):
                return None
            if any(p.port < 1024 for p in message.obj.spec.ports):
                warn(ctx, message.obj, reason="PrivilegedPort", message=f"{key}: a port < 1024")
            return None

        actors = ctx.keyed(check, limiter=trio.CapacityLimiter(1), backoff=Backoff(1.0, 10.0))
        async with ctx.services.subscription() as mailbox:
            await actors.serve(mailbox)


async def test_warn_records_a_warning_about_a_service(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """warn() on a cached Service writes one Warning Event about it, in its namespace, from
    the controller's event_component."""
    api = ApiServer(seed=1)
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
    api.create(make_service("web", namespace="shop"))
    api.create(make_service("high", namespace="shop", ports=[{"port": 8080}]))
    with trio.fail_after(30):
        async with run_ccm(api, NoCapabilities(), controllers=[PortCheck]):
            await trio.sleep(1)
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://api") as http:
        events = (await http.get("/api/v1/namespaces/shop/events")).json()["items"]
    assert [
        (e["involvedObject"]["kind"], e["involvedObject"]["name"], e["type"], e["reason"])
        for e in events
    ] == [("Service", "web", "Warning", "PrivilegedPort")]
    assert events[0]["source"]["component"] == "port-checker"


def test_events_are_about_cached_objects_only() -> None:
    """An Event about anything but a cached Node or Service is a TypeError saying what to pass."""
    with pytest.raises(TypeError, match=r"not str; pass message\.obj"):
        warn(None, "shop/web", reason="Bad", message="a key")  # type: ignore[arg-type]
