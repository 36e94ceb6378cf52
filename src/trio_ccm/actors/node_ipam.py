"""Placeholder: being written (issue 6)."""

from __future__ import annotations

from trio_ccm.actors.context import ControllerContext
from trio_ccm.cloud.provider import CloudProvider
from trio_ccm.settings import Settings

__all__ = ["requires", "run"]


def requires(_cloud: CloudProvider, settings: Settings) -> str | None:
    """Acts only with --allocate-node-cidrs (settings checked --cluster-cidr and the masks)."""
    if not settings.allocate_node_cidrs:
        return "--allocate-node-cidrs=false (Node pod CIDRs are assigned by someone else)"
    return None


async def run(ctx: ControllerContext) -> None:  # pragma: no cover - never started
    raise AssertionError(f"{ctx.name}: not built yet")
