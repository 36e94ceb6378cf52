"""Pod-network routes under `/v1/clusters/{cluster}/routes`."""

from __future__ import annotations

from collections.abc import Sequence

from trio_ccm.cloud.provider import Route
from trio_ccm.cloud.sim.client import SimClient, segment
from trio_ccm.cloud.sim.wire import RouteListWire, RouteSpec


class SimRoutes:
    """Routes over the simulated cloud; a route's name is `<cluster>-<name hint>[-v6]`."""

    enable_node_addresses = False

    def __init__(self, client: SimClient) -> None:
        self._client = client

    async def list_routes(self, cluster: str) -> Sequence[Route]:
        response = await self._client.request(
            "ListRoutes", cluster, "GET", f"/v1/clusters/{segment(cluster)}/routes"
        )
        assert response is not None
        listing = self._client.decode("ListRoutes", cluster, response, RouteListWire)
        return tuple(
            Route(
                target_node=route.target_node,
                destination_cidr=route.destination_cidr,
                name=route.name,
                blackhole=route.blackhole,
            )
            for route in listing.routes
        )

    async def create_route(self, cluster: str, name_hint: str, route: Route) -> None:
        """Create the route (an identical one existing already is success). Its name is
        `<cluster>-<hint>`, plus `-v6` for an IPv6 destination (a dual-stack Node has two)."""
        family = "-v6" if ":" in route.destination_cidr else ""
        spec = RouteSpec(
            name=f"{cluster}-{name_hint or route.target_node}{family}",
            target_node=route.target_node,
            destination_cidr=route.destination_cidr,
        )
        await self._client.request(
            "CreateRoute",
            f"{cluster}/{spec.name}",
            "POST",
            f"/v1/clusters/{segment(cluster)}/routes",
            body=spec,
        )

    async def delete_route(self, cluster: str, route: Route) -> None:
        """Delete by name (by destination when the route has none); gone already is success."""
        base = f"/v1/clusters/{segment(cluster)}/routes"
        if route.name:
            await self._client.request(
                "DeleteRoute",
                f"{cluster}/{route.name}",
                "DELETE",
                f"{base}/{segment(route.name)}",
                missing_ok=True,
            )
            return
        await self._client.request(
            "DeleteRoute",
            f"{cluster}/{route.destination_cidr}",
            "DELETE",
            base,
            params={"destinationCIDR": route.destination_cidr},
            missing_ok=True,
        )
