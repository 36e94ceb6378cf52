"""Placeholder: being written (issue 6)."""

from __future__ import annotations

from trio_ccm.actors.context import ControllerContext
from trio_ccm.cloud.provider import CloudProvider
from trio_ccm.settings import Settings

__all__ = ["requires", "run"]


def requires(_cloud: CloudProvider, _settings: Settings) -> str | None:
    return "not implemented in this version of trio-ccm yet"


async def run(ctx: ControllerContext) -> None:  # pragma: no cover - never started
    raise AssertionError(f"{ctx.name}: not built yet")
