"""The world's EC2 instances as the testbed's kubelets follow them (a `testbed.Fleet`).

`Testbed` reads its cloud on the Trio thread every `poll_s`; moto answers over HTTP, and
boto3 blocks. So `MotoFleet` keeps a snapshot, refreshed by `serve` in a worker thread
every `poll_s` (one paginated `DescribeInstances` of the world's VPC and one
`DescribeRouteTables`, marked as the harness's own so moto's counters never see them),
and the testbed reads the snapshot.

```python
fleet = MotoFleet(world)
await nursery.start(fleet.serve)          # the first snapshot is taken before it returns
testbed = Testbed(api, fleet)
await nursery.start(testbed.serve)        # a kubelet per running instance
```

Kubelets name their Nodes by the instance's private DNS name, as on EC2 with
`--cloud-provider=external`. An instance launched, stopped, started or terminated through
moto (the world's methods, or any EC2 client pointed at the server) is followed within
two `poll_s`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from trio_ccm_testbed.aws.world import World
from trio_ccm_testbed.polling import FleetRoute, Instance, PolledFleet

__all__ = ["FleetRoute", "MotoFleet", "MotoInstance"]

# EC2 states as a kubelet lives them: it runs from `pending` on, and is silent once the
# instance is stopping or shutting down.
_STATES: Final = {
    "pending": "running",
    "running": "running",
    "stopping": "stopped",
    "stopped": "stopped",
    "shutting-down": "terminated",
    "terminated": "terminated",
}


MotoInstance = Instance
"""An instance of the snapshot: `name` and `hostname` are its private DNS name."""


class MotoFleet(PolledFleet[MotoInstance, FleetRoute]):
    """A snapshot of `world`'s instances and routes, refreshed by `serve` (module docstring)."""

    def __init__(self, world: World, *, poll_s: float = 1.0) -> None:
        super().__init__(poll_s=poll_s)
        self.world = world

    def __repr__(self) -> str:
        return f"MotoFleet({self.world.server.url}, vpc {self.world.vpc_id})"

    def call_counts(self) -> Mapping[str, int]:
        """The CCM's requests to moto, by `service:action` (the harness's own excluded)."""
        return self.world.server.faults.counts()

    def _read(self) -> tuple[tuple[MotoInstance, ...], tuple[FleetRoute, ...]]:
        ec2 = self.world.client("ec2")
        instances: list[MotoInstance] = []
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "vpc-id", "Values": [self.world.vpc_id]}]
        )
        for page in pages:
            for reservation in page["Reservations"]:
                instances.extend(_instance(item) for item in reservation["Instances"])
        routes: tuple[FleetRoute, ...] = ()
        if self.world.route_table_id:
            tables = ec2.describe_route_tables(RouteTableIds=[self.world.route_table_id])
            routes = tuple(
                FleetRoute(
                    destination=route.get("DestinationCidrBlock", ""),
                    target=route.get("InstanceId", ""),
                    blackhole=route.get("State") == "blackhole",
                )
                for route in tables["RouteTables"][0]["Routes"]
                if route.get("GatewayId") != "local"
            )
        return tuple(instances), routes


def _instance(item: Mapping[str, Any]) -> MotoInstance:
    dns: str = item.get("PrivateDnsName") or item["InstanceId"]
    return MotoInstance(
        id=item["InstanceId"],
        name=dns,
        hostname=dns,
        state=_STATES.get(item["State"]["Name"], "terminated"),
        zone=item["Placement"]["AvailabilityZone"],
    )
