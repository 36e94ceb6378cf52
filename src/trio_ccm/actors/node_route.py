"""Placeholder: being written (issue 6)."""

from __future__ import annotations

from trio_ccm.actors.context import ControllerContext
from trio_ccm.cloud.provider import CloudProvider
from trio_ccm.errors import ConfigError
from trio_ccm.settings import Settings

__all__ = ["requires", "run"]


def requires(cloud: CloudProvider, settings: Settings) -> str | None:
    """Upstream's start conditions: skipped without --configure-cloud-routes or without
    cloud routes; an error (exit) when it would run without --cluster-cidr."""
    if not settings.configure_cloud_routes:
        return "--configure-cloud-routes=false"
    if cloud.routes is None:
        return "the cloud provider has no routes"
    if not settings.cluster_cidr:
        raise ConfigError(
            "node-route-controller: --cluster-cidr is empty, so no route could be told apart "
            "from someone else's; give the pod CIDR(s), e.g. --cluster-cidr=10.244.0.0/16, or "
            "turn routes off with --configure-cloud-routes=false (or --controllers=*,-route)"
        )
    return None


async def run(ctx: ControllerContext) -> None:  # pragma: no cover - never started
    raise AssertionError(f"{ctx.name}: not built yet")
