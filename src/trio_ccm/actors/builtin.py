"""The built-in controllers, under their upstream names (`--controllers`), in start order."""

from __future__ import annotations

from typing import Final

from trio_ccm.actors.cloud_node import CloudNodeController
from trio_ccm.actors.controller import Controller
from trio_ccm.actors.node_ipam import NodeIpamController
from trio_ccm.actors.node_lifecycle import NodeLifecycleController
from trio_ccm.actors.node_route import NodeRouteController
from trio_ccm.actors.service_lb import ServiceLbController

__all__ = ["BUILTIN_CONTROLLERS"]

BUILTIN_CONTROLLERS: Final[tuple[type[Controller], ...]] = (
    CloudNodeController,
    NodeLifecycleController,
    ServiceLbController,
    NodeRouteController,
    # Upstream's example binary adds "nodeipam" (KCM's range allocator); it acts only with
    # --allocate-node-cidrs.
    NodeIpamController,
)
