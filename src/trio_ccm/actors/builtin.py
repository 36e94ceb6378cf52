"""The built-in controllers, under their upstream names (`--controllers`)."""

from __future__ import annotations

from typing import Final

from trio_ccm.actors import cloud_node, node_lifecycle
from trio_ccm.actors.context import Controller, ControllerContext
from trio_ccm.cloud.provider import CloudProvider
from trio_ccm.kube.wellknown import (
    CLOUD_NODE_CONTROLLER,
    CLOUD_NODE_LIFECYCLE_CONTROLLER,
    COMPONENT_CLOUD_NODE,
    COMPONENT_CLOUD_NODE_LIFECYCLE,
    COMPONENT_ROUTE,
    COMPONENT_SERVICE,
    NODE_ROUTE_CONTROLLER,
    SERVICE_LB_CONTROLLER,
)

__all__ = ["BUILTIN_CONTROLLERS"]


def _not_built(_cloud: CloudProvider) -> str:
    return "not implemented in this version of trio-ccm yet"


async def _never(_ctx: ControllerContext) -> None:  # pragma: no cover - never runnable
    raise AssertionError("an unbuilt controller was started")


BUILTIN_CONTROLLERS: Final = (
    Controller(
        CLOUD_NODE_CONTROLLER,
        cloud_node.run,
        informers=frozenset({"nodes"}),
        requires=cloud_node.requires,
        client_name="node-controller",
        event_component=COMPONENT_CLOUD_NODE,
    ),
    Controller(
        CLOUD_NODE_LIFECYCLE_CONTROLLER,
        node_lifecycle.run,
        informers=frozenset({"nodes"}),
        requires=node_lifecycle.requires,
        client_name="node-controller",
        event_component=COMPONENT_CLOUD_NODE_LIFECYCLE,
    ),
    Controller(
        SERVICE_LB_CONTROLLER,
        _never,
        informers=frozenset({"services", "nodes"}),
        requires=_not_built,
        client_name="service-controller",
        event_component=COMPONENT_SERVICE,
    ),
    Controller(
        NODE_ROUTE_CONTROLLER,
        _never,
        informers=frozenset({"nodes"}),
        requires=_not_built,
        client_name="route-controller",
        event_component=COMPONENT_ROUTE,
    ),
)
