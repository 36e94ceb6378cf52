"""Placeholder: being written (issue 6)."""

from __future__ import annotations

from trio_ccm.actors.context import ControllerContext
from trio_ccm.cloud.provider import CloudProvider
from trio_ccm.settings import Settings

__all__ = ["requires", "run"]


def requires(cloud: CloudProvider, _settings: Settings) -> str | None:
    if cloud.load_balancers is None:
        return "the cloud provider has no load balancers"
    return "not implemented in this version of trio-ccm yet"


async def run(ctx: ControllerContext) -> None:  # pragma: no cover - never started
    raise AssertionError(f"{ctx.name}: not built yet")
