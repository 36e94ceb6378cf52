"""The built-in controllers, under their upstream names (`--controllers`)."""

from __future__ import annotations

from typing import Final

from trio_ccm.actors import cloud_node, node_ipam, node_lifecycle, node_route, service_lb
from trio_ccm.actors.context import Controller
from trio_ccm.kube.wellknown import (
    CLOUD_NODE_CONTROLLER,
    CLOUD_NODE_LIFECYCLE_CONTROLLER,
    COMPONENT_CLOUD_NODE,
    COMPONENT_CLOUD_NODE_LIFECYCLE,
    COMPONENT_IPAM,
    COMPONENT_ROUTE,
    COMPONENT_SERVICE,
    NODE_IPAM_CONTROLLER,
    NODE_ROUTE_CONTROLLER,
    SERVICE_LB_CONTROLLER,
)

__all__ = ["BUILTIN_CONTROLLERS"]


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
        service_lb.run,
        informers=frozenset({"services", "nodes"}),
        requires=service_lb.requires,
        client_name="service-controller",
        event_component=COMPONENT_SERVICE,
    ),
    Controller(
        NODE_ROUTE_CONTROLLER,
        node_route.run,
        informers=frozenset({"nodes"}),
        requires=node_route.requires,
        client_name="route-controller",
        event_component=COMPONENT_ROUTE,
    ),
    # Upstream's example binary adds "nodeipam" (KCM's range allocator); it acts only with
    # --allocate-node-cidrs.
    Controller(
        NODE_IPAM_CONTROLLER,
        node_ipam.run,
        informers=frozenset({"nodes"}),
        requires=node_ipam.requires,
        client_name="node-controller",
        event_component=COMPONENT_IPAM,
    ),
)
